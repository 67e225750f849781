#!/usr/bin/env bash
# Measures Airlock against the raw tool in the same run and prints ratios (targets are reported,
# never asserted in tests):
#   1. overhead: median of N `airlock run -- true` vs `docker run --rm --network none ... true`
#      (target ratio <= 1.10);
#   2. flood: 1 GiB of output through Airlock vs the same flood through `docker run > /dev/null`
#      (target throughput ratio >= 0.9), and Airlock's peak RSS during it (target < 64 MiB);
#   3. durability: insert + artifact + settle per verification as a share of a whole `true` run
#      (target < 2 %).
# Usage: scripts/bench.sh [N]   (default N=15)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-15}
FLOOD_BYTES=${FLOOD_BYTES:-1073741824}

scripts/install-prereqs.sh
cargo build --release --locked >/dev/null 2>&1
AIRLOCK=$PWD/target/release/airlock
$AIRLOCK images build --images-dir images >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo=$work/repo
mkdir -p "$repo" && git -C "$repo" init -q -b main && echo x > "$repo/f"
git -C "$repo" add -A && git -C "$repo" -c user.name=b -c user.email=b@example.com commit -qm b

now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# Warm up both paths once.
$AIRLOCK run --repo "$repo" --rev main --data-dir "$work/data" -- true >/dev/null
docker run --rm --network none airlock/minimal:latest true

: > "$work/airlock.ms"; : > "$work/docker.ms"; : > "$work/durability.us"
for _ in $(seq "$N"); do
  t0=$(now_ms)
  AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json run --repo "$repo" --rev main \
    --data-dir "$work/data" -- true >/dev/null 2>"$work/log.json"
  t1=$(now_ms)
  echo $((t1 - t0)) >> "$work/airlock.ms"
  python3 - "$work/log.json" >> "$work/durability.us" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        f = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if "durability_us" in f:
        print(f["durability_us"])
PY
  t0=$(now_ms)
  docker run --rm --network none airlock/minimal:latest true
  t1=$(now_ms)
  echo $((t1 - t0)) >> "$work/docker.ms"
done
a=$(median < "$work/airlock.ms"); d=$(median < "$work/docker.ms")
dur=$(median < "$work/durability.us")
echo "overhead: airlock run true median ${a} ms, docker run true median ${d} ms, ratio $(awk -v a="$a" -v d="$d" 'BEGIN{printf "%.2f", a/d}') (target <= 1.10), N=$N"
echo "durability: insert+artifact+settle median ${dur} us = $(awk -v u="$dur" -v a="$a" 'BEGIN{printf "%.2f", u/10/a}') % of a whole run (target < 2 %)"

flood="head -c $FLOOD_BYTES /dev/zero"
t0=$(now_ms)
/usr/bin/time -f '%M' -o "$work/rss.kb" $AIRLOCK run --repo "$repo" --rev main --data-dir "$work/data" \
  --timeout 1800 -- sh -c "$flood" > "$work/flood.json" || true
t1=$(now_ms)
af=$((t1 - t0))
t0=$(now_ms)
docker run --rm --network none airlock/minimal:latest sh -c "$flood" > /dev/null
t1=$(now_ms)
df=$((t1 - t0))
total=$(python3 -c "import json;print(json.load(open('$work/flood.json'))['output_bytes_total'])")
rss=$(tail -n1 "$work/rss.kb")
echo "flood: $total bytes through airlock in ${af} ms vs docker run > /dev/null in ${df} ms, throughput ratio $(awk -v a="$af" -v d="$df" 'BEGIN{printf "%.2f", d/a}') (target >= 0.9)"
echo "peak RSS of airlock during the flood: $((rss / 1024)) MiB (target < 64 MiB)"
