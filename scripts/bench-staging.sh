#!/usr/bin/env bash
# Warm checkouts against the raw tools, in the same run, medians (targets are reported, never
# asserted in tests):
#   1. scale curve at 5,000 / 50,000 / 500,000 files: a cold stage (the first job on a revision:
#      the tree goes into the cache, then the job's overlay); a warm stage in the daemon (a later
#      job on it; each job still gets its own ext4 filesystem for its writes) and in a new
#      `airlock run` process (which verifies the entry first: one lstat per path); the source
#      check of an untouched warm job and of one that rewrote 10 tracked files; the full stage +
#      check with the cache off; against `git archive | tar -x` into a freshly made loop-mounted
#      ext4 image (the kind of filesystem both Airlock's sides write to). Targets at 50,000
#      files: warm stage <= 50 ms, check after 10 writes <= 20 ms, cold stage <= 1.0x raw.
#   2. where a `true` run's time goes on a warm revision: the record's phases, medians, and the
#      whole `airlock run -- true` against `docker run --rm --network none` (target <= 1.0x).
#   3. a warm one-shot run on a WARM_FILES-file revision (default 50,000) writing 10 files: the
#      whole `airlock run` in a new process on a data dir an earlier run closed cleanly, against
#      `docker run --rm --network none` of the same argv in the same image with an extracted
#      tree of the revision bind-mounted (target <= 1.3x).
# Usage: scripts/bench-staging.sh [N] [SIZES]   (default N=7, SIZES="5000 50000 500000")
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-7}
SIZES=${2:-"5000 50000 500000"}

scripts/install-prereqs.sh
cargo build --release --locked >/dev/null 2>&1
AIRLOCK=$PWD/target/release/airlock
$AIRLOCK images build --images-dir images >/dev/null

# Repositories are generated on tmpfs (file creation on the root filesystem is slow here and
# is not what is measured); data dirs and the raw side's image live on the disk, like a
# deployment's.
src=$(mktemp -d /dev/shm/airlock-bench-staging-XXXXXX)
work=$(mktemp -d /var/tmp/airlock-bench-staging-XXXXXX)
raw_mnt=$work/raw-mnt
cleanup() {
  [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  umount "$raw_mnt" 2>/dev/null || true
  for d in "$work"/data-*; do
    [ -d "$d" ] && umount "$d/tree-cache/mnt" 2>/dev/null || true
  done
  rm -rf "$src" "$work"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ms() { awk -v u="$1" 'BEGIN{printf "%.1f", u/1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

# One job: prints "stage_us check_us checkout status" from the settled verification's log line
# and its record.
job() { # data-dir config argv...
  local data=$1 cfg=$2; shift 2
  local args=(--repo "$repo" --rev main --data-dir "$data")
  [ -n "$cfg" ] && args+=(--config "$cfg")
  AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json run "${args[@]}" -- "$@" \
    >"$work/out.json" 2>"$work/log.json" || true
  python3 - "$work/log.json" "$work/out.json" <<'PY'
import json, sys
fields = {}
for line in open(sys.argv[1]):
    try:
        f = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if "stage_us" in f:
        fields = f
out = json.load(open(sys.argv[2]))
print(fields["stage_us"], fields["check_us"], out["phases"]["checkout"], out["status"])
PY
}

# The daemon on one data dir with one workspace on $repo; `djob ARGV_JSON` submits a job and
# prints "stage_us check_us checkout status" once it settled.
token=bench-token
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
pid=
serve() { # data-dir
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat > "$work/serve.toml" <<EOF
listen = "127.0.0.1:$port"
data_dir = "$1"
[workspaces.bench]
repo = "$repo"
members = { bench = ["view", "verify"] }
[[tokens]]
sha256 = "$sha"
member_id = "bench"
EOF
  AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json serve --config "$work/serve.toml" \
    > "$work/serve.out" 2> "$work/serve.log" &
  pid=$!
  for _ in $(seq 300); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  url=http://127.0.0.1:$port/api/v1
}
unserve() { kill -TERM "$pid" && wait "$pid" || true; pid=; }
djob() { # argv as a JSON list
  local id seq_no
  # A fresh idempotency key (djob runs in a subshell: a counter would not survive it).
  seq_no=$(date +%s%N)
  id=$(curl -sS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "{\"workspace_id\":\"bench\",\"revision\":\"main\",\"argv\":$1,\"idempotency_key\":\"k$seq_no\"}" \
    "$url/job.submit" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["job_id"])')
  python3 - "$url" "$token" "$id" "$work/serve.log" <<'PY'
import json, sys, time, urllib.request
url, token, job, log = sys.argv[1:]
while True:
    req = urllib.request.Request(f"{url}/job.show", method="POST",
        data=json.dumps({"workspace_id": "bench", "job_id": job}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    j = json.load(urllib.request.urlopen(req))["job"]
    if j["state"] not in ("queued", "running"):
        break
    time.sleep(0.02)
v = j["verification"]
for _ in range(100):
    for line in open(log):
        try:
            f = json.loads(line).get("fields", {})
        except ValueError:
            continue
        if f.get("verification_id") == v["verification_id"] and "stage_us" in f:
            print(f["stage_us"], f["check_us"], v["phases"]["checkout"], v["status"])
            sys.exit(0)
    time.sleep(0.05)
sys.exit("no settled line for " + v["verification_id"])
PY
}

make_repo() { # files -> $repo
  repo=$src/repo-$1
  python3 - "$repo" "$1" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per = 500
for i in range(n):
    d = f"{root}/d{i // per:04}"
    if i % per == 0:
        os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i % per:03}.txt", "w") as f:
        f.write(f"file {i}\n")
PY
  git -C "$repo" init -q -b main
  git -C "$repo" add -A
  git -C "$repo" -c user.name=b -c user.email=b@example.com commit -qm "$1 files"
}

raw_extract_us() { # a fresh ext4 image like a job's, loop-mounted; time the extraction only
  rm -f "$work/raw.img"
  truncate -s 4G "$work/raw.img"
  mkfs.ext4 -q -F -O ^has_journal -m 0 -b 4096 -N 1100000 -E nodiscard,lazy_itable_init=1 "$work/raw.img"
  mkdir -p "$raw_mnt"
  mount -o loop,nosuid,nodev,noatime "$work/raw.img" "$raw_mnt"
  local t0 t1
  t0=$(date +%s%N)
  git -C "$repo" archive main | tar -x -C "$raw_mnt"
  t1=$(date +%s%N)
  umount "$raw_mnt"
  echo $(( (t1 - t0) / 1000 ))
}

printf 'tree_cache_bytes = 0\n' > "$work/cold.toml"
writes='for i in 0 1 2 3 4 5 6 7 8 9; do echo x >> d0000/f00$i.txt; done'
expect() { [ "$1" = "$2" ] || { echo "expected $2, got $1" >&2; exit 1; }; }
echo "files | cold stage (fill) | warm stage, daemon | warm stage, new process (verifies) | check, untouched | check, 10 writes | full stage + check (cache off) | git archive | tar -x | cold/raw | full/raw"
for n in $SIZES; do
  make_repo "$n"
  files=$(git -C "$repo" ls-files | wc -l)
  for f in cold warm reopen check check10 full raw; do : > "$work/$f.us"; done
  rounds=$N; [ "$n" -ge 500000 ] && rounds=3
  for r in $(seq "$rounds"); do
    # Cold: a new data dir each round, so the tree goes into an empty cache; then a new process
    # on the same data dir (it verifies the entry before its first use).
    data=$work/data-$n-cold-$r
    read -r s c kind _ < <(job "$data" "" true); expect "$kind" filled
    echo "$s" >> "$work/cold.us"
    read -r s c kind _ < <(job "$data" "" true); expect "$kind" warm
    echo "$s" >> "$work/reopen.us"
    rm -rf "$data"
    # Today's staging for every job, and the raw tool.
    data=$work/data-$n-full-$r
    read -r s c kind _ < <(job "$data" "$work/cold.toml" true); expect "$kind" full
    echo $((s + c)) >> "$work/full.us"
    rm -rf "$data"
    raw_extract_us >> "$work/raw.us"
  done
  # Warm in the daemon: one job fills, the next ones stand on the cached tree.
  data=$work/data-$n-serve
  serve "$data"
  read -r s c kind _ < <(djob '["true"]'); expect "$kind" filled
  for r in $(seq "$N"); do
    read -r s c kind _ < <(djob '["true"]'); expect "$kind" warm
    echo "$s" >> "$work/warm.us"; echo "$c" >> "$work/check.us"
    read -r s c kind status < <(djob "[\"sh\",\"-c\",\"$writes\"]"); expect "$status" source_changed
    echo "$c" >> "$work/check10.us"
  done
  unserve
  umount "$data/tree-cache/mnt" 2>/dev/null || true
  rm -rf "$data"
  cold=$(median < "$work/cold.us"); warm=$(median < "$work/warm.us")
  reopen=$(median < "$work/reopen.us")
  chk=$(median < "$work/check.us"); chk10=$(median < "$work/check10.us")
  full=$(median < "$work/full.us"); raw=$(median < "$work/raw.us")
  echo "$files | $(ms "$cold") ms | $(ms "$warm") ms | $(ms "$reopen") ms | $(ms "$chk") ms | $(ms "$chk10") ms | $(ms "$full") ms | $(ms "$raw") ms | $(ratio "$cold" "$raw") | $(ratio "$full" "$raw")  (cold N=$rounds, warm N=$N)"
  rm -rf "$repo"
done
echo "targets at 50,000 files: warm stage <= 50 ms, warm check after 10 writes <= 20 ms, cold/raw <= 1.0"

# 2. A `true` run on a warm one-file revision: where the time goes, and against docker run.
make_repo 1
data=$work/data-true
job "$data" "" true >/dev/null
docker run --rm --network none airlock/minimal:latest true
: > "$work/a.ms"; : > "$work/d.ms"; : > "$work/phases.txt"
for _ in $(seq "$N"); do
  t0=$(date +%s%3N)
  $AIRLOCK run --repo "$repo" --rev main --data-dir "$data" -- true > "$work/out.json"
  t1=$(date +%s%3N)
  echo $((t1 - t0)) >> "$work/a.ms"
  python3 -c "import json;p=json.load(open('$work/out.json'))['phases'];print(' '.join(str(p[k]) for k in ['wait_for_engine_ms','stage_ms','create_ms','start_ms','run_ms','destroy_ms','check_ms']))" >> "$work/phases.txt"
  t0=$(date +%s%3N)
  docker run --rm --network none airlock/minimal:latest true
  t1=$(date +%s%3N)
  echo $((t1 - t0)) >> "$work/d.ms"
done
a=$(median < "$work/a.ms"); d=$(median < "$work/d.ms")
col() { awk -v c="$1" '{print $c}' "$work/phases.txt" | median; }
echo "true on a warm revision, phase medians: wait $(col 1) ms, stage $(col 2) ms, create $(col 3) ms, start $(col 4) ms, run $(col 5) ms, destroy $(col 6) ms, check $(col 7) ms"
echo "overhead: airlock run true median ${a} ms vs docker run --rm --network none true median ${d} ms, ratio $(ratio "$a" "$d") (target <= 1.0), N=$N"

# 3. A warm one-shot run writing 10 files on a big revision: each `airlock run` is a new process
# on a data dir whose cache an earlier process closed (and sealed).
WARM_FILES=${WARM_FILES:-50000}
make_repo "$WARM_FILES"
data=$work/data-oneshot
job "$data" "" true >/dev/null
plain=$work/plain
mkdir -p "$plain"
git -C "$repo" archive main | tar -x -C "$plain"
chown -R 1000:1000 "$plain"
oneshot() {
  $AIRLOCK run --repo "$repo" --rev main --data-dir "$data" -- sh -c "$writes" > "$work/out.json" || true
}
raw_writes() {
  docker run --rm --network none --user 1000:1000 -v "$plain:/work" -w /work airlock/minimal:latest sh -c "$writes"
}
oneshot; raw_writes
: > "$work/a.ms"; : > "$work/d.ms"; : > "$work/stage.ms"
for _ in $(seq "$N"); do
  t0=$(date +%s%3N); oneshot; t1=$(date +%s%3N)
  echo $((t1 - t0)) >> "$work/a.ms"
  python3 -c "import json;o=json.load(open('$work/out.json'));assert o['status']=='source_changed', o['status'];assert o['phases']['checkout']=='warm', o['phases'];print(o['phases']['stage_ms'])" >> "$work/stage.ms"
  t0=$(date +%s%3N); raw_writes; t1=$(date +%s%3N)
  echo $((t1 - t0)) >> "$work/d.ms"
done
a=$(median < "$work/a.ms"); d=$(median < "$work/d.ms")
echo "warm one-shot on $WARM_FILES files writing 10 files: airlock run median ${a} ms (stage $(median < "$work/stage.ms") ms) vs docker run with the tree bind-mounted median ${d} ms, ratio $(ratio "$a" "$d") (target <= 1.3), N=$N"
