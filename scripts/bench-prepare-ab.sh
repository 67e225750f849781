#!/usr/bin/env bash
# A/B of single-submission integration.prepare between two Airlock binaries, and the raw git
# steps (merge-tree + commit-tree + update-ref with core.fsync=all, started from Python), all
# interleaved in one run (reported, never asserted in tests).
#
# Each binary serves its own copy of the same 10,000-file repository; the raw steps run on a
# third. Every round is A, raw, B, raw, reversed in odd rounds: each prepare has the raw steps
# beside it as bench-serve.sh's do, and each binary is ratioed to the raw steps of its own pairs.
# (An earlier order, A, B, raw, read 0.80 where A and raw alone read 1.02 on the same machine:
# the raw steps timed right after the other daemon's call were slower, 10.6 against 6.9 ms.)
# Give both slots the same binary to see the noise, and compare binaries across runs.
# Usage: scripts/bench-prepare-ab.sh [A_BINARY] [B_BINARY] [REPS]
#   (defaults: target/release/airlock for both, 40 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${1:-}" ] || [ -z "${2:-}" ]; then cargo build --release --locked >/dev/null 2>&1; fi
A=${1:-$PWD/target/release/airlock} B=${2:-$PWD/target/release/airlock} REPS=${3:-40}
work=$(mktemp -d)
pids=()
cleanup() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
repo=$work/repo
mkdir -p "$repo"
git -C "$repo" init -q -b main
python3 - "$repo" 10000 <<'PY'
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
path=dir000/file00000.txt
blob=$( (g show "$base:$path"; echo "change by the agent") | g hash-object -w --stdin)
export GIT_INDEX_FILE=$work/agent.index
g read-tree "$base"
g update-index --cacheinfo "100644,$blob,$path"
tree=$(g write-tree)
unset GIT_INDEX_FILE
rev=$(g commit-tree "$tree" -p "$base" -m agent)
# Packed, and no automatic gc beside the measures.
g config gc.auto 0
g repack -adq
cp -a "$repo" "$work/repo-a"
cp -a "$repo" "$work/repo-b"

token=bench-token
start() { # NAME BINARY REPO: starts a daemon; its address lands in $work/NAME.addr
  {
    echo 'listen = "127.0.0.1:0"'
    echo "data_dir = \"$work/data-$1\""
    echo '[workspaces.bench]'
    echo "repo = \"$3\""
    echo 'members = { bench = ["view", "integrate"] }'
    echo '[[tokens]]'
    echo "sha256 = \"$(printf %s "$token" | sha256sum | cut -d' ' -f1)\""
    echo 'member_id = "bench"'
  } > "$work/$1.toml"
  AIRLOCK_LOG=airlock=warn "$2" --log-format json serve --config "$work/$1.toml" > "$work/$1.out" 2>"$work/$1.err" &
  pids+=($!)
  for _ in $(seq 300); do [ -s "$work/$1.out" ] && break; sleep 0.1; done
  python3 -c "import json;print(json.loads(open('$work/$1.out').readline())['listening'])" > "$work/$1.addr"
}
start a "$A" "$work/repo-a"
start b "$B" "$work/repo-b"

python3 - "$(cat "$work/a.addr")" "$(cat "$work/b.addr")" "$base" "$rev" "$REPS" "$repo" "$token" <<'PY'
import http.client, json, statistics, subprocess, sys, time
a, b, base, rev, reps, repo, token = sys.argv[1:8]
reps = int(reps)
conns = {}
def call(addr, method, body):
    if addr not in conns:
        host, port = addr.rsplit(":", 1)
        conns[addr] = http.client.HTTPConnection(host, int(port), timeout=600)
    c = conns[addr]
    c.request("POST", f"/api/v1/{method}", json.dumps(body), {"Authorization": f"Bearer {token}"})
    r = c.getresponse(); data = json.loads(r.read())
    if r.status != 200: raise SystemExit(f"{method}: {r.status} {data}")
    return data
subs = {}
for addr in (a, b):
    e = call(addr, "evidence.record", {"workspace_id": "bench", "run_id": "run", "base_revision": base,
                                       "revision": rev, "idempotency_key": "e"})["evidence"]
    subs[addr] = [{"workspace_id": "bench", "run_id": "run", "evidence_ref": e["evidence_ref"], "retained_revision": rev}]
def prepare(addr, key):
    t0 = time.monotonic()
    c = call(addr, "integration.prepare", {"workspace_id": "bench", "submissions": subs[addr], "target_ref": "refs/heads/main",
                                          "expected_target_revision": base, "idempotency_key": key})["candidate"]
    dt = time.monotonic() - t0
    assert c["state"] == "frozen", c["state"]
    return dt
git = ["git", "-C", repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
       "-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync"]
def out(*args):
    return subprocess.run(git + list(args), capture_output=True, text=True, check=True).stdout.strip()
def raw(k):
    t0 = time.monotonic()
    tree = out("merge-tree", "--write-tree", f"--merge-base={base}", base, rev)
    commit = out("commit-tree", tree, "-p", base, "-m", f"raw {k}")
    out("update-ref", f"refs/bench/raw{k}", commit)
    return time.monotonic() - t0
for k in range(3):
    prepare(a, f"warm{k}"); prepare(b, f"warm{k}"); raw(f"warm{k}")
ta, tb, tra, trb = [], [], [], []
for k in range(reps):
    steps = [lambda: ta.append(prepare(a, f"k{k}")), lambda: tra.append(raw(f"a{k}")),
             lambda: tb.append(prepare(b, f"k{k}")), lambda: trb.append(raw(f"b{k}"))]
    for step in (steps if k % 2 == 0 else steps[::-1]):
        step()
m = statistics.median
print(f"single-submission prepare, median of {reps} interleaved rounds, 10000 files:")
print(f"  A: {m(ta) * 1000:.1f} ms, ratio {m(ta) / m(tra):.2f} to the raw steps beside it ({m(tra) * 1000:.1f} ms)")
print(f"  B: {m(tb) * 1000:.1f} ms, ratio {m(tb) / m(trb):.2f} to the raw steps beside it ({m(trb) * 1000:.1f} ms)")
print(f"  (raw: merge-tree + commit-tree + update-ref with core.fsync=all)")
PY
