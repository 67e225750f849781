#!/usr/bin/env bash
# Runs Airlock's whole test suite: installs prerequisites, checks formatting and lints, builds the
# sandbox images, and runs unit and integration tests against the real Docker engine. Ends with
# one line: "N passed, N failed, N skipped" (a Docker test skipped with AIRLOCK_SKIP_DOCKER=1 is
# counted as skipped, never as passed). The runner, hardening, recovery and hostile-job tests run
# again with the tree cache off, and once more, with the warm-checkout tests, under gVisor
# (scripts/runsc-engine.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prereqs.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo build --locked
mkdir -p target/tmp
# The build's progress and JSON go to a log; a failure prints it.
if ! ./target/debug/airlock images build --images-dir images > target/tmp/images-build.log 2>&1; then
  cat target/tmp/images-build.log
  echo "building the sandbox images failed (log above: target/tmp/images-build.log)" >&2
  exit 1
fi
echo "ok: $(grep -c '"name"' target/tmp/images-build.log) images built or up to date (log: target/tmp/images-build.log)"

# A build without the test-hooks feature (every build but the test suite's) must ignore
# AIRLOCK_CRASH_AT: the run below passes instead of killing itself.
hooks=$(mktemp -d)
trap 'rm -rf "$hooks"' EXIT
git -C "$hooks" init -q -b main
echo x > "$hooks/f"
git -C "$hooks" add -A
git -C "$hooks" -c user.name=t -c user.email=t@example.com commit -qm t
AIRLOCK_CRASH_AT=after_insert ./target/debug/airlock run --repo "$hooks" --rev main \
  --data-dir "$hooks/data" -- true >/dev/null
echo "ok: a build without test-hooks ignores AIRLOCK_CRASH_AT"

skipped_list=target/tmp/airlock-skipped-docker-tests
rm -f "$skipped_list"
set +e
# The library's unit tests and the integration binary (the bin target and doc tests hold none).
cargo test --locked --lib --test it -- --test-threads 2 2>&1 | tee "$hooks/test.log"
status=${PIPESTATUS[0]}
# The same runner, hostile-job, hardening and recovery tests with the tree cache off: every job
# stages its whole tree, as on a host without overlay support (the first pass ran them on warm
# overlay checkouts, the default).
AIRLOCK_TEST_TREE_CACHE=off cargo test --locked --test it -- --test-threads 2 \
  runner:: hardening:: recovery:: hostile:: 2>&1 | tee -a "$hooks/test.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# The same tests, the hostile jobs and the warm checkouts once more under gVisor: a dockerd of
# their own with runsc registered (scripts/runsc-engine.sh), reached through DOCKER_HOST, every
# profile's runtime runsc.
runsc_dir=target/tmp/runsc-engine
scripts/runsc-engine.sh stop "$runsc_dir"
if runsc_host=$(scripts/runsc-engine.sh start "$runsc_dir"); then
  env "$runsc_host" AIRLOCK_TEST_RUNTIME=runsc cargo test --locked --test it -- --test-threads 2 \
    runner:: hardening:: recovery:: hostile:: warm:: 2>&1 | tee -a "$hooks/test.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
else
  echo "the runsc engine did not start: the gVisor pass failed" >&2
  status=1
fi
scripts/runsc-engine.sh stop "$runsc_dir"
set -e
count() { # the sum of "<n> <word>;" over every libtest summary line
  awk -v w="$1;" '/^test result: /{for (i = 1; i < NF; i++) if ($(i + 1) == w) n += $i} END {print n + 0}' "$hooks/test.log"
}
passed=$(count passed)
failed=$(count failed)
skipped=0
if [ -f "$skipped_list" ]; then
  skipped=$(wc -l < "$skipped_list")
  echo "AIRLOCK_SKIP_DOCKER=1: $skipped Docker test(s) skipped:"
  sed 's/^/  /' "$skipped_list"
fi
echo "$((passed - skipped)) passed, $failed failed, $skipped skipped"
exit "$status"
