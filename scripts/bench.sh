#!/usr/bin/env bash
# Measures Airlock against the raw tool in the same run and prints ratios (targets are reported,
# never asserted in tests):
#   1. overhead: median of N `airlock run -- true` vs `docker run --rm --network none ... true`
#      (target ratio <= 1.10);
#   2. flood: 1 GiB of output through Airlock vs the same flood through `docker run > /dev/null`
#      (target throughput ratio >= 0.9), and Airlock's peak RSS during it (target < 64 MiB);
#   3. durability: insert + signing + artifact + settle per verification as a share of a whole
#      `true` run (target < 2 %), with the signing alone (an Ed25519 attestation; target < 1 ms);
#   4. staging: stage + source check of a 50,000-file revision on the job's own filesystem vs
#      `git archive | tar -x` onto the data dir's filesystem (target ratio <= 0.1), and the
#      added cost of the per-job filesystem for a one-file repository (target <= 20 ms).
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

# The runs below sign their results, as a daemon with signing_key does.
$AIRLOCK keys generate "$work/signing.pem" >/dev/null
printf 'signing_key = "%s"\n' "$work/signing.pem" > "$work/sign.toml"

# Warm up both paths once.
$AIRLOCK run --config "$work/sign.toml" --repo "$repo" --rev main --data-dir "$work/data" -- true >/dev/null
docker run --rm --network none airlock/minimal:latest true

: > "$work/airlock.ms"; : > "$work/docker.ms"; : > "$work/durability.us"; : > "$work/sign.us"
for _ in $(seq "$N"); do
  t0=$(now_ms)
  AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json run --config "$work/sign.toml" --repo "$repo" --rev main \
    --data-dir "$work/data" -- true >/dev/null 2>"$work/log.json"
  t1=$(now_ms)
  echo $((t1 - t0)) >> "$work/airlock.ms"
  python3 - "$work/log.json" "$work/durability.us" "$work/sign.us" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        f = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if "durability_us" in f:
        print(f["durability_us"], file=open(sys.argv[2], "a"))
        print(f["sign_us"], file=open(sys.argv[3], "a"))
PY
  t0=$(now_ms)
  docker run --rm --network none airlock/minimal:latest true
  t1=$(now_ms)
  echo $((t1 - t0)) >> "$work/docker.ms"
done
a=$(median < "$work/airlock.ms"); d=$(median < "$work/docker.ms")
dur=$(median < "$work/durability.us")
sign=$(median < "$work/sign.us")
echo "overhead: airlock run true median ${a} ms, docker run true median ${d} ms, ratio $(awk -v a="$a" -v d="$d" 'BEGIN{printf "%.2f", a/d}') (target <= 1.10), N=$N"
echo "durability: insert+sign+artifact+settle median ${dur} us = $(awk -v u="$dur" -v a="$a" 'BEGIN{printf "%.2f", u/10/a}') % of a whole run (target < 2 %); signing the attestation alone median ${sign} us (target < 1000 us)"

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

# 4. staging: a 50,000-file revision staged on the job's own filesystem and checked after the
#    run, against `git archive | tar -x` onto the data dir's filesystem in the same run
#    (target ratio <= 0.1); and the added cost of a per-job filesystem for a one-file
#    repository, loop-mounted image vs a plain directory (target <= 20 ms).
stage_us() { # log file -> "stage_us check_us" of the settled verification
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        f = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if "stage_us" in f:
        print(f["stage_us"], f["check_us"])
PY
}
big=$(mktemp -d /dev/shm/airlock-bench-XXXXXX)
trap 'rm -rf "$work" "$big"' EXIT
python3 - "$big/repo" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(100):
    os.makedirs(f"{root}/d{d:03}", exist_ok=True)
    for i in range(500):
        with open(f"{root}/d{d:03}/f{i:03}.txt", "w") as f:
            f.write(f"file {d}/{i}\n")
PY
git -C "$big/repo" init -q -b main
git -C "$big/repo" add -A
git -C "$big/repo" -c user.name=b -c user.email=b@example.com commit -qm big
files=$(git -C "$big/repo" ls-files | wc -l)
AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json run --repo "$big/repo" --rev main \
  --data-dir "$work/data" -- true >/dev/null 2>"$work/big.json"
read -r s_us c_us < <(stage_us "$work/big.json")
mkdir "$work/raw"
t0=$(date +%s%N)
git -C "$big/repo" archive main | tar -x -C "$work/raw"
t1=$(date +%s%N)
raw_us=$(( (t1 - t0) / 1000 ))
echo "staging: $files files: airlock stage ${s_us} us + source check ${c_us} us vs git archive | tar -x onto the data dir's filesystem ${raw_us} us, ratio $(awk -v a="$((s_us + c_us))" -v r="$raw_us" 'BEGIN{printf "%.3f", a/r}') (target <= 0.1)"
printf 'checkout_filesystem = "directory"\n' > "$work/dir.toml"
: > "$work/loop.us"; : > "$work/dir.us"
for _ in $(seq "$N"); do
  AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json run --repo "$repo" --rev main \
    --data-dir "$work/data" -- true >/dev/null 2>"$work/one.json"
  stage_us "$work/one.json" | cut -d' ' -f1 >> "$work/loop.us"
  AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json run --config "$work/dir.toml" --repo "$repo" \
    --rev main --data-dir "$work/data" -- true >/dev/null 2>"$work/one.json"
  stage_us "$work/one.json" | cut -d' ' -f1 >> "$work/dir.us"
done
lu=$(median < "$work/loop.us"); du_=$(median < "$work/dir.us")
echo "per-job filesystem, one-file repository: staging median ${lu} us on its own ext4 image vs ${du_} us in a directory, added $(awk -v l="$lu" -v d="$du_" 'BEGIN{printf "%.1f", (l-d)/1000}') ms (target <= 20 ms), N=$N"
