#!/usr/bin/env bash
# Rewrites docs/api.md from real calls: runs the daemon's HTTP tests with AIRLOCK_API_EXAMPLES
# set, so the first successful call of each method a test makes is kept (request and reply),
# then scripts/api-reference.py writes one section per method of the registry with its
# permission, body limit and summary (from /openapi.json) and those examples, shortened.
# `docs_api` in the test suite checks every example against /openapi.json on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
examples=$(mktemp -d)
trap 'rm -rf "$examples"' EXIT
AIRLOCK_API_EXAMPLES=$examples cargo test --locked --test it -- --test-threads 2 \
  readme_ docs_config serve_ job_cli delivery governed_gates >/dev/null 2>&1 || true
python3 scripts/api-reference.py "$examples" > docs/api.md
echo "docs/api.md: $(grep -c '^### ' docs/api.md) methods" >&2
