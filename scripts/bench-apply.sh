#!/usr/bin/env bash
# Benchmarks patch.apply against seed 000's method in the same run and prints ratios (reported,
# never asserted): a 3-file patch applied to a worktree of FILES files (default 50,000) and of
# 10x that, on tmpfs (/dev/shm) so file creation does not dominate.
#   airlock:  the patch.apply call only (validation done beforehand), median of REPS;
#   seed:     copy the worktree to a temp dir, `patch -p1` there, hash the whole worktree,
#             `patch -p1` on the real one, hash it again (seed 000's apply, reimplemented);
# targets: airlock >= 100x faster than the seed's method; < 10 % growth from FILES to 10x FILES.
# Also reports the fsync calls of one apply (strace -c on the daemon).
# Usage: scripts/bench-apply.sh [FILES] [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
files=${1:-50000}
reps=${2:-5}
scripts/install-prereqs.sh >/dev/null
cargo build --release --locked >/dev/null 2>&1
AIRLOCK=$PWD/target/release/airlock
$AIRLOCK images build git --images-dir images >/dev/null
$AIRLOCK images build minimal --images-dir images >/dev/null

work=$(mktemp -d -p /dev/shm airlock-bench-apply.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

run_size() { # $1: number of files; prints "airlock_ms seed_ms fsyncs"
  local n=$1 wt=$work/wt-$1
  python3 - "$wt" "$n" <<'PY'
import os, sys
wt, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(wt, f"d{i // 1000:04d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:07d}.txt"), "w") as f:
        f.write(f"file {i}\nline two\n")
PY
  git -C "$wt" init -q -b main
  local token sha
  token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
  cat > "$work/airlock-$n.toml" <<TOML
listen = "127.0.0.1:0"
data_dir = "$work/data-$n"
[workspaces.b]
worktree = "$wt"
members = { ops = ["view", "propose", "apply"] }
[workspaces.b.policy]
required_approvals = 0
required_roles = []
security_review = "never"
human_approval = "never"
[[tokens]]
sha256 = "$sha"
member_id = "ops"
TOML
  $AIRLOCK serve --config "$work/airlock-$n.toml" > "$work/serve-$n.out" 2> "$work/serve-$n.err" &
  pid=$!
  for _ in $(seq 300); do [ -s "$work/serve-$n.out" ] && break; kill -0 "$pid" || break; sleep 0.1; done
  [ -s "$work/serve-$n.out" ] || { echo "bench failed: airlock serve did not start" >&2; cat "$work/serve-$n.err" >&2; exit 1; }
  local addr
  addr=$(python3 -c "import json,sys;print(json.loads(open(sys.argv[1]).readline())['listening'])" "$work/serve-$n.out")
  python3 - "$addr" "$token" "$wt" "$n" "$reps" "$pid" "$work" <<'PY'
import http.client, json, os, shutil, statistics, subprocess, sys, time, hashlib
addr, token, wt, n, reps, pid, work = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
host, port = addr.rsplit(":", 1)
def call(method, body):
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    c.request("POST", f"/api/v1/{method}", json.dumps(body), {"Authorization": f"Bearer {token}"})
    r = c.getresponse(); d = json.loads(r.read() or b"{}")
    if r.status != 200:
        sys.exit(f"bench failed: {method}: {r.status} {d}")
    return d
def patch_for(round_):
    out = []
    for k in range(3):
        i = (round_ * 3 + k) * 997 % n
        p = f"d{i // 1000:04d}/f{i:07d}.txt"
        old = open(os.path.join(wt, p)).read()
        new = old + f"changed in round {round_}\n"
        out.append((p, old, new))
    text = ""
    for p, old, new in out:
        ol = old.splitlines(keepends=True); nl = new.splitlines(keepends=True)
        text += f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1,{len(ol)} +1,{len(nl)} @@\n"
        text += "".join(" " + l for l in ol) + "".join("+" + l for l in nl[len(ol):])
    return out, text
def tree_hash(root):
    h = hashlib.sha256()
    for d, dirs, fs in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != ".git")
        for f in sorted(fs):
            p = os.path.join(d, f)
            h.update(p[len(root):].encode()); h.update(open(p, "rb").read())
    return h.hexdigest()
ours, seeds, fsyncs = [], [], None
for r in range(reps):
    touched, text = patch_for(r)
    ws = "b"
    for k, (p, _, _) in enumerate(touched):
        call("claim.acquire", {"workspace_id": ws, "task_id": "bench", "resource_id": f"file:{p}",
                               "mode": "write", "idempotency_key": f"c{r}-{k}"})
    prop = call("proposal.create", {"workspace_id": ws, "task_id": "bench", "title": "bench", "summary_md": "bench",
                                    "patch": text, "idempotency_key": f"p{r}"})["proposal"]
    call("proposal.request_review", {"workspace_id": ws, "proposal_id": prop["proposal_id"],
                                      "idempotency_key": f"r{r}"})
    v = call("patch.validate", {"workspace_id": ws, "proposal_id": prop["proposal_id"],
                                "revision": prop["current_revision"], "idempotency_key": f"v{r}"})["validation"]
    if not v["valid"]:
        sys.exit(f"bench failed: validation: {v['stages']}")
    tracer = None
    if r == 0:
        tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", f"{work}/fsync-{n}.txt", "-p", pid])
        time.sleep(1.5)
    t = time.perf_counter()
    a = call("patch.apply", {"workspace_id": ws, "proposal_id": prop["proposal_id"],
                             "validation_id": v["validation_id"], "idempotency_key": f"a{r}"})
    ours.append((time.perf_counter() - t) * 1000)
    if tracer:
        tracer.send_signal(2); tracer.wait()
        fsyncs = sum(1 for line in open(f"{work}/fsync-{n}.txt") if "fsync(" in line and "resumed" not in line)
    if a["transaction"]["status"] != "applied":
        sys.exit(f"bench failed: apply: {a}")
    # The seed's method, on the same worktree (a second round of the same 3 files).
    _, text2 = patch_for(r + 1000)
    pf = f"{work}/seed.patch"; open(pf, "w").write(text2)
    t = time.perf_counter()
    tmp = f"{work}/seed-copy"
    shutil.copytree(wt, tmp, symlinks=True)
    subprocess.run(["patch", "-s", "-p1", "-i", pf], cwd=tmp, check=True)
    tree_hash(tmp)
    subprocess.run(["patch", "-s", "-p1", "-i", pf], cwd=wt, check=True)
    tree_hash(wt)
    seeds.append((time.perf_counter() - t) * 1000)
    shutil.rmtree(tmp)
print(f"{statistics.median(ours):.2f} {statistics.median(seeds):.2f} {fsyncs}")
PY
  kill -TERM "$pid"; wait "$pid" || true; pid=""
}

echo "== worktree of $files files"
read -r a1 s1 f1 < <(run_size "$files")
echo "   patch.apply median ${a1} ms; seed method median ${s1} ms; ratio $(python3 -c "print(f'{$s1/$a1:.1f}x')") (target >= 100x); fsyncs per apply: $f1"
big=$((files * 10))
echo "== worktree of $big files"
read -r a2 s2 f2 < <(run_size "$big")
echo "   patch.apply median ${a2} ms; seed method median ${s2} ms; ratio $(python3 -c "print(f'{$s2/$a2:.1f}x')"); fsyncs per apply: $f2"
echo "== growth of patch.apply from $files to $big files: $(python3 -c "print(f'{($a2/$a1-1)*100:+.1f} %')") (target < 10 %)"
