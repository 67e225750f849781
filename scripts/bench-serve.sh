#!/usr/bin/env bash
# Benchmarks `airlock serve` against the raw tool in the same run and prints ratios (reported,
# never asserted in tests):
#   1. assembly: integration.prepare of 50 ordered submissions on a repository of 10,000 files
#      vs a raw loop of `git merge-tree --write-tree` + `git commit-tree` over the same inputs
#      (target ratio <= 1.1);
#   2. integration.show latency p50/p99 with 200 concurrent clients on loopback.
# Usage: scripts/bench-serve.sh [SUBMISSIONS] [FILES]   (defaults 50, 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
SUBS=${1:-50}
FILES=${2:-10000}

scripts/install-prereqs.sh
cargo build --release --locked >/dev/null 2>&1
AIRLOCK=$PWD/target/release/airlock
$AIRLOCK images build minimal --images-dir images >/dev/null 2>&1

work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
repo=$work/repo
mkdir -p "$repo"
git -C "$repo" init -q -b main
python3 - "$repo" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"dir{i % 100:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"file{i:05d}.txt"), "w") as f:
        f.write(f"file {i}\n" * 5)
PY
g() { git -C "$repo" -c user.name=bench -c user.email=bench@example.com "$@"; }
g add -A && g commit -qm base
base=$(g rev-parse HEAD)
revs=()
# Each agent's commit changes one file, built with plumbing (no checkout of 10,000 files).
for i in $(seq 0 $((SUBS - 1))); do
  path="dir$(printf %03d $((i % 100)))/file$(printf %05d "$i").txt"
  blob=$( (g show "$base:$path"; echo "change by agent $i") | g hash-object -w --stdin)
  export GIT_INDEX_FILE=$work/agent.index
  g read-tree "$base"
  g update-index --cacheinfo "100644,$blob,$path"
  tree=$(g write-tree)
  unset GIT_INDEX_FILE
  revs+=("$(g commit-tree "$tree" -p "$base" -m "agent $i")")
done

token=bench-token
cat > "$work/airlock.toml" <<TOML
listen = "127.0.0.1:0"
data_dir = "$work/data"
[workspaces.bench]
repo = "$repo"
members = { bench = ["view", "integrate"] }
[[tokens]]
sha256 = "$(printf %s "$token" | sha256sum | cut -d' ' -f1)"
member_id = "bench"
TOML
AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json serve --config "$work/airlock.toml" > "$work/serve.out" 2>"$work/serve.err" &
pid=$!
for _ in $(seq 100); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
addr=$(python3 -c "import json;print(json.loads(open('$work/serve.out').readline())['listening'])")

python3 - "$addr" "$token" "$base" "$work/result.json" "${revs[@]}" <<'PY'
import http.client, json, sys, time
addr, token, base, out = sys.argv[1:5]
revs = sys.argv[5:]
host, port = addr.rsplit(":", 1)
def call(method, body):
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    c.request("POST", f"/api/v1/{method}", json.dumps(body), {"Authorization": f"Bearer {token}"})
    r = c.getresponse(); data = json.loads(r.read()); c.close()
    if r.status != 200: raise SystemExit(f"{method}: {r.status} {data}")
    return data
subs = []
for i, rev in enumerate(revs):
    e = call("evidence.record", {"workspace_id": "bench", "run_id": f"run{i}", "base_revision": base,
                                 "revision": rev, "idempotency_key": f"e{i}"})["evidence"]
    subs.append({"workspace_id": "bench", "run_id": f"run{i}", "evidence_ref": e["evidence_ref"], "retained_revision": rev})
t0 = time.monotonic()
cand = call("integration.prepare", {"workspace_id": "bench", "submissions": subs, "target_ref": "refs/heads/main",
                                    "expected_target_revision": base, "idempotency_key": "bench"})["candidate"]
elapsed = time.monotonic() - t0
assert cand["state"] == "frozen", cand["state"]
json.dump({"seconds": elapsed, "candidate_id": cand["candidate_id"], "revision": cand["candidate_revision"]}, open(out, "w"))
PY
airlock_s=$(python3 -c "import json;print(json.load(open('$work/result.json'))['seconds'])")
cid=$(python3 -c "import json;print(json.load(open('$work/result.json'))['candidate_id'])")

raw_loop() {
  local acc=$base tree
  for rev in "${revs[@]}"; do
    tree=$(g "$@" merge-tree --write-tree --merge-base="$base" "$acc" "$rev")
    acc=$(g "$@" commit-tree "$tree" -p "$acc" -m step)
  done
  g "$@" commit-tree "$(g rev-parse "$acc^{tree}")" -p "$base" -m final
}
secs() { python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$@"; }
t0=$(date +%s.%N); final=$(raw_loop); t1=$(date +%s.%N)
raw_s=$(secs "$t0" "$t1")
# The same loop with the durability Airlock enforces on every object and ref it writes.
t0=$(date +%s.%N); raw_loop -c core.fsync=all -c core.fsyncMethod=fsync >/dev/null; t1=$(date +%s.%N)
raw_fsync_s=$(secs "$t0" "$t1")
ours_tree=$(g rev-parse "$(python3 -c "import json;print(json.load(open('$work/result.json'))['revision'])")^{tree}")
[ "$ours_tree" = "$(g rev-parse "$final^{tree}")" ] || { echo "tree mismatch: airlock and raw git disagree" >&2; exit 1; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$@"; }
echo "assembly: $SUBS submissions on $FILES files, same resulting tree:"
echo "  airlock integration.prepare (validation, owned refs, merges, frozen commit, durable saves): ${airlock_s}s"
echo "  raw merge-tree + commit-tree loop, git defaults (objects not fsynced): ${raw_s}s, ratio $(ratio "$airlock_s" "$raw_s") (target <= 1.1)"
echo "  raw loop with core.fsync=all, the durability airlock enforces: ${raw_fsync_s}s, ratio $(ratio "$airlock_s" "$raw_fsync_s")"

python3 - "$addr" "$token" "$cid" <<'PY'
import http.client, json, sys, threading, time
addr, token, cid = sys.argv[1:4]
host, port = addr.rsplit(":", 1)
# Unloaded: one client, one request at a time (the server's own cost per call).
seq = []
for _ in range(200):
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.request("POST", "/api/v1/integration.show", json.dumps({"workspace_id": "bench", "candidate_id": cid}),
              {"Authorization": f"Bearer {token}"})
    r = c.getresponse(); body = r.read(); c.close()
    assert r.status == 200, r.status
    seq.append(time.monotonic() - t0)
seq.sort()
print(f"integration.show, one client ({len(body)} byte responses): p50 {seq[100]*1000:.1f} ms, p99 {seq[197]*1000:.1f} ms")
CLIENTS, PER_CLIENT = 200, 10
lat, errors = [], []
lock = threading.Lock()
barrier = threading.Barrier(CLIENTS)
def client():
    barrier.wait()
    for _ in range(PER_CLIENT):
        t0 = time.monotonic()
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request("POST", "/api/v1/integration.show", json.dumps({"workspace_id": "bench", "candidate_id": cid}),
                      {"Authorization": f"Bearer {token}"})
            r = c.getresponse(); r.read(); c.close()
            ok = r.status == 200
        except Exception as e:
            ok = False
        dt = time.monotonic() - t0
        with lock:
            (lat if ok else errors).append(dt)
threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
for t in threads: t.start()
for t in threads: t.join()
lat.sort()
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
print(f"integration.show under {CLIENTS} concurrent clients: {len(lat)} ok, {len(errors)} failed, p50 {p(0.50):.1f} ms, p99 {p(0.99):.1f} ms")
PY
