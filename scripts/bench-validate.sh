#!/usr/bin/env bash
# patch.validate without expected tests against bare `docker run`s over the same inputs, in the
# same run, medians (reported, never asserted in tests), for a patch touching PATHS files:
#   airlock: the patch.validate call on a worktree of FILES files (parse, claims and coverage,
#            pre-images, the sandboxed dry run on the git image with its harvest and source
#            check, the post-images stored, the record), REPS times;
#   dry run: `docker run --rm --network none` of the same image with the same dry-run script
#            (extracted from the source) over the same inputs (the pre-images' fast-import
#            stream, the patch) bind-mounted from tmpfs, with a tmpfs /tmp as jobs have (target <= 1.2x);
#   git:     `docker run` of the same image doing only `git apply --cached --check` over the
#            same pre-images (a scratch repository: the files, `git add -A`, the check), the
#            least any sandboxed validation could do (target <= 2x).
# Also prints the dry run's own phases (from the daemon's "verification settled" log lines), medians.
# Usage: scripts/bench-validate.sh [REPS] [FILES] [PATHS]   (defaults 9, 1000, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-9}
files=${2:-1000}
paths=${3:-3}
[ "$paths" -le "$files" ] || { echo "bench failed: PATHS ($paths) > FILES ($files)" >&2; exit 2; }
scripts/install-prereqs.sh >/dev/null
cargo build --release --locked >/dev/null 2>&1
AIRLOCK=$PWD/target/release/airlock
$AIRLOCK images build git --images-dir images >/dev/null

work=$(mktemp -d -p /dev/shm airlock-bench-validate.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  umount "$work/data/tree-cache/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The dry-run script exactly as the daemon runs it.
python3 - src/engine/governed/validation/sandboxed.rs "$work/dry-run.sh" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
m = re.search(r'const DRY_RUN_SCRIPT: &str = r#"(.*?)"#;', src, re.S)
if not m:
    sys.exit("bench failed: DRY_RUN_SCRIPT not found in the source")
open(sys.argv[2], "w").write(m.group(1))
PY

wt=$work/wt
python3 - "$wt" "$files" <<'PY'
import os, sys
wt, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(wt, f"d{i // 100:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.txt"), "w") as f:
        f.write(f"file {i}\nline two\n")
PY
git -C "$wt" init -q -b main
git -C "$wt" add -A
git -C "$wt" -c user.name=b -c user.email=b@example.com commit -qm base
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
cat > "$work/airlock.toml" <<TOML
listen = "127.0.0.1:0"
data_dir = "$work/data"
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
AIRLOCK_LOG=airlock=info $AIRLOCK --log-format json serve --config "$work/airlock.toml" > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 300); do [ -s "$work/serve.out" ] && break; kill -0 "$pid" || break; sleep 0.1; done
[ -s "$work/serve.out" ] || { echo "bench failed: airlock serve did not start" >&2; cat "$work/serve.err" >&2; exit 1; }
addr=$(python3 -c "import json,sys;print(json.loads(open(sys.argv[1]).readline())['listening'])" "$work/serve.out")

python3 - "$addr" "$token" "$wt" "$files" "$reps" "$work" "$paths" <<'PY'
import http.client, json, os, statistics, subprocess, sys, time
addr, token, wt, n, reps, work = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
k_paths = int(sys.argv[7])
host, port = addr.rsplit(":", 1)
def call(method, body):
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    c.request("POST", f"/api/v1/{method}", json.dumps(body), {"Authorization": f"Bearer {token}"})
    r = c.getresponse(); d = json.loads(r.read() or b"{}")
    if r.status != 200:
        sys.exit(f"bench failed: {method}: {r.status} {d}")
    return d
def patch_for(round_):
    out, text = [], ""
    for k in range(k_paths):
        i = (round_ * k_paths + k) * 97 % n
        p = f"d{i // 100:03d}/f{i:05d}.txt"
        old = open(os.path.join(wt, p)).read()
        out.append((p, old))
        ol = old.splitlines(keepends=True)
        text += f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1,{len(ol)} +1,{len(ol) + 1} @@\n"
        text += "".join(" " + l for l in ol) + f"+changed in round {round_}\n"
    return out, text
script = open(f"{work}/dry-run.sh").read()
ours, raws, gits, phases = [], [], [], []
def docker_run(d, script):
    t = time.perf_counter()
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "65534:65534", "--tmpfs", "/tmp:rw,exec",
                          "-v", f"{d}:/workspace", "-w", "/workspace", "airlock/git:latest",
                          "bash", "-c", script], capture_output=True, text=True)
    return (time.perf_counter() - t) * 1000, out
GIT_ONLY = """set -euo pipefail
export HOME=/tmp GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
cp -r files /tmp/w && cd /tmp/w && git init -q && git add -A
git apply --cached --check --whitespace=nowarn /workspace/dry-run.patch && echo checked"""
# One write claim on the whole tree covers every round's patch.
call("claim.acquire", {"workspace_id": "b", "task_id": "bench", "resource_id": "directory:",
                       "mode": "write", "ttl_seconds": 86400, "idempotency_key": "c"})
# One round first on both sides, not counted: the image's layers and the page cache warm up.
for r in range(-1, reps):
    touched, text = patch_for(r + 1)
    prop = call("proposal.create", {"workspace_id": "b", "task_id": "bench", "title": "bench",
                                    "summary_md": "bench", "patch": text, "affected_resources": ["directory:"], "idempotency_key": f"p{r}"})["proposal"]
    call("proposal.request_review", {"workspace_id": "b", "proposal_id": prop["proposal_id"],
                                      "idempotency_key": f"r{r}"})
    t = time.perf_counter()
    v = call("patch.validate", {"workspace_id": "b", "proposal_id": prop["proposal_id"],
                                "revision": prop["current_revision"], "idempotency_key": f"v{r}"})["validation"]
    dt = (time.perf_counter() - t) * 1000
    if not v["valid"]:
        sys.exit(f"bench failed: validation: {v['stages']}")
    # The raw sides: the same inputs in a directory, the same script, one docker run; and the
    # same pre-images as plain files for the git-only check.
    d = f"{work}/raw-{r}"
    os.makedirs(d)
    stream, entries = b"", []
    for i, (p, old) in enumerate(touched):
        data = old.encode()
        stream += f"blob\nmark :{i + 1}\ndata {len(data)}\n".encode() + data + b"\n"
        entries.append(f"M 100644 :{i + 1} {p}\n")
        os.makedirs(os.path.dirname(f"{d}/files/{p}"), exist_ok=True)
        open(f"{d}/files/{p}", "w").write(old)
    stream += b"commit refs/heads/pre\ncommitter airlock <airlock@localhost> 0 +0000\ndata 0\n"
    stream += "".join(entries).encode() + b"\n"
    open(f"{d}/pre.stream", "wb").write(stream)
    open(f"{d}/dry-run.patch", "w").write(text)
    subprocess.run(["chown", "-R", "65534:65534", d], check=True)
    rt, out = docker_run(d, script)
    if out.returncode != 0 or "dry run: applied" not in out.stdout:
        sys.exit(f"bench failed: the raw dry run: {out.returncode} {out.stdout} {out.stderr}")
    gt, out = docker_run(d, GIT_ONLY)
    if out.returncode != 0 or "checked" not in out.stdout:
        sys.exit(f"bench failed: the git-only check: {out.returncode} {out.stdout} {out.stderr}")
    if r < 0:
        continue
    ours.append(dt); raws.append(rt); gits.append(gt)
a, b, g = statistics.median(ours), statistics.median(raws), statistics.median(gits)
print(f"patch.validate (no expected tests), {k_paths}-path patch, {n}-file worktree: median {a:.0f} ms")
print(f"docker run --rm --network none of the same dry run: median {b:.0f} ms, ratio {a / b:.2f} (target <= 1.2)")
print(f"docker run of git apply --cached --check alone over the same pre-images: median {g:.0f} ms, ratio {a / g:.2f} (target <= 2)")
print(f"N={reps}")
# The dry runs' own phases, from the daemon's "verification settled" lines (the last REPS).
settled = []
for line in open(f"{work}/serve.err"):
    try:
        f = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if f.get("message") == "verification settled":
        settled.append(f)
settled = settled[-reps:]
keys = ["wait_us", "stage_us", "create_us", "start_us", "run_us", "destroy_us", "check_us", "durability_us"]
print("the dry run's phases, medians: " + ", ".join(
    f"{k[:-3]} {statistics.median(s.get(k, 0) for s in settled) / 1000:.1f} ms" for k in keys)
    + f"; checkout {settled[len(settled) // 2].get('checkout')}")
PY
