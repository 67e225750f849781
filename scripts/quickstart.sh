#!/usr/bin/env bash
# Airlock's main job end to end on a fresh machine: install prerequisites, build the binary and the
# minimal sandbox image (the only one it uses), create a sample repository, verify one passing and one failing command in the
# sandbox, and print both JSON results.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prereqs.sh --for run
cargo build --release --locked
AIRLOCK=./target/release/airlock
$AIRLOCK images build minimal --images-dir images >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo=$work/sample
mkdir -p "$repo"
git -C "$repo" init -q -b main
cat > "$repo/test.sh" <<'SH'
#!/bin/sh
# The sample project's test: checks that greeting.txt says hello.
grep -q hello greeting.txt && echo "test passed: greeting says hello"
SH
chmod +x "$repo/test.sh"
echo "hello, airlock" > "$repo/greeting.txt"
git -C "$repo" add -A
git -C "$repo" -c user.name=quickstart -c user.email=quickstart@example.com commit -qm "sample project"

echo "== passing verification: ./test.sh" >&2
set +e
$AIRLOCK run --repo "$repo" --rev main --data-dir "$work/data" -- ./test.sh
pass_rc=$?
echo "== failing verification: exit 3" >&2
$AIRLOCK run --repo "$repo" --rev main --data-dir "$work/data" -- sh -c 'echo "about to fail"; exit 3'
fail_rc=$?
set -e
echo "== exit codes: passing run $pass_rc (expected 0), failing run $fail_rc (expected 1)" >&2
[ "$pass_rc" -eq 0 ] && [ "$fail_rc" -eq 1 ]
