#!/usr/bin/env bash
# Benchmarks the isolation levels side by side on one engine in one run: `airlock run` of the
# same job under a runc profile and under its runsc twin (same image, same limits), on a dockerd
# of its own with runsc registered (scripts/runsc-engine.sh), medians of RUNS runs each:
#   1. `true`                       (fixed cost: create, start, gVisor's boot, removal)
#   2. a 1 GiB output flood         (the job's writes through gVisor to the attach stream)
#   3. a real suite: click's own tests (its sdist from the configured package index, `pip
#      download`, so the suite is the released one), `python3 -m pytest` in the toolchain image
# Prints each median and the runsc/runc ratio (goal for the real suite: <= 1.3x), and where
# gVisor's time goes: the job's phases (create, start, run, destroy) from the results.
# Usage: scripts/bench-isolation.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
click_version=${CLICK_VERSION:-8.1.7}
cargo build --release --quiet
bin=$PWD/target/release/airlock
"$bin" images build minimal --images-dir images >/dev/null
"$bin" images build toolchain --images-dir images >/dev/null

work=$(mktemp -d /tmp/airlock-bench-isolation.XXXXXX)
engine=$work/engine
cleanup() {
  scripts/runsc-engine.sh stop "$engine" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
host=$(scripts/runsc-engine.sh start "$engine")
export "${host?}"
# The toolchain image from the machine's engine into the runsc engine (DOCKER_HOST), id kept.
env -u DOCKER_HOST docker save airlock/toolchain:latest | docker load -q >/dev/null

# The repository: click's released sdist (its tests included), unpacked and committed.
repo=$work/repo
mkdir -p "$repo"
(
  cd "$work"
  pip download --quiet --no-deps --no-binary :all: "click==$click_version" -d sdist
  tar -xzf sdist/click-*.tar.gz -C "$repo" --strip-components 1
)
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=b -c user.email=b@example.com commit -qm click

cat > "$work/airlock.toml" <<EOF
[profiles.runc_small]
image = "airlock/minimal:latest"
runtime = "runc"
[profiles.runsc_small]
image = "airlock/minimal:latest"
runtime = "runsc"
pids = 4096
[profiles.runc_suite]
image = "airlock/toolchain:latest"
runtime = "runc"
memory_bytes = 2147483648
pids = 4096
[profiles.runsc_suite]
image = "airlock/toolchain:latest"
runtime = "runsc"
memory_bytes = 2147483648
pids = 4096
EOF

# One run: prints "<wall ms> <create> <start> <run> <destroy>" (phase ms from the result).
one() {
  local profile=$1
  shift
  local t0 t1
  t0=$(date +%s%N)
  "$bin" run --config "$work/airlock.toml" --data-dir "$work/data" --repo "$repo" \
    --rev main --profile "$profile" --timeout 900 -- "$@" > "$work/out.json"
  t1=$(date +%s%N)
  python3 - "$work/out.json" "$(((t1 - t0) / 1000000))" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
if v["status"] != "passed":
    sys.exit(f"the job did not pass: {v['status']} {v.get('error')} {v['output'][-2000:]}")
p = v.get("phases") or {}
print(sys.argv[2], *(p.get(k, 0) for k in ("create_ms", "start_ms", "run_ms", "destroy_ms")))
PY
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

bench() {
  local name=$1 small=$2
  shift 2
  local f_runc=$work/$name.runc f_runsc=$work/$name.runsc
  : > "$f_runc"
  : > "$f_runsc"
  for _ in $(seq 1 "$runs"); do
    one "runc_$small" "$@" >> "$f_runc"
    one "runsc_$small" "$@" >> "$f_runsc"
  done
  local a b
  a=$(cut -d' ' -f1 "$f_runc" | median)
  b=$(cut -d' ' -f1 "$f_runsc" | median)
  printf '%-12s runc %6d ms  runsc %6d ms  ratio %.2fx\n' "$name" "$a" "$b" "$(echo "$b / $a" | bc -l)"
  for k in 2 3 4 5; do
    local label
    label=$(echo "create start run destroy" | cut -d' ' -f$((k - 1)))
    printf '%14s: runc %6d ms  runsc %6d ms\n' "$label" \
      "$(cut -d' ' -f$k "$f_runc" | median)" "$(cut -d' ' -f$k "$f_runsc" | median)"
  done
}

echo "isolation levels on one engine, medians of $runs runs (click $click_version)"
bench true small true
bench flood-1GiB small sh -c 'head -c 1073741824 /dev/zero'
bench click-suite suite sh -c 'PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests >/tmp/log 2>&1; s=$?; tail -3 /tmp/log; exit $s'
