#!/usr/bin/env bash
# Benchmarks symbol resolution under hostile nesting (reported, never asserted in tests):
# `resource.show symbol:...` on files a patch could plant, each against a fresh daemon, with
# the call's wall time and the daemon's peak resident memory (VmHWM) after it, and the ratio
# to the same call on a small ordinary file in the same run. Targets: a refusal
# (resource_exhausted naming the limit) in well under a second, and peak memory within a few
# MiB of the small file's, whatever the depth. (Before the bounds, 100,000 nested `mod m {`
# took 57 s and 19.4 GB; 100,000 nested TypeScript namespaces 14 s.)
# Usage: scripts/bench-symbols.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked >/dev/null 2>&1
AIRLOCK=${AIRLOCK:-$PWD/target/release/airlock}

work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
wt=$work/wt
mkdir -p "$wt"
git -C "$wt" init -q -b main
python3 - "$wt" <<'PY'
import os, sys
root = sys.argv[1]
def w(name, text):
    with open(os.path.join(root, name), "w") as f:
        f.write(text)
w("small.rs", "".join(f"fn f{i}() {{}}\n" for i in range(50)))
w("flat.rs", "".join(f"pub fn f{i}(x: u32) -> u32 {{\n    x + {i}\n}}\n\n" for i in range(20000)))
for n in (64, 1000, 20000, 100000):
    w(f"nest{n}.rs", "mod m {\n" * n + "fn f() {}\n" + "}\n" * n)
w("ns100000.ts", "namespace N {\n" * 100000 + "export function f() {}\n" + "}\n" * 100000)
PY
git -C "$wt" -c user.name=b -c user.email=b@example.com add -A
git -C "$wt" -c user.name=b -c user.email=b@example.com commit -qm files

token=bench-token
cat > "$work/airlock.toml" <<EOF
listen = "127.0.0.1:0"
data_dir = "$work/data"
[workspaces.bench]
worktree = "$wt"
members = { bench = ["view"] }
[[tokens]]
sha256 = "$(printf %s "$token" | sha256sum | cut -d' ' -f1)"
member_id = "bench"
EOF

# measure RESOURCE: starts a fresh daemon, calls resource.show once, prints
# "<ms> <status> <peak KiB> <code>".
measure() {
  : > "$work/serve.out"
  AIRLOCK_LOG=airlock=warn $AIRLOCK serve --config "$work/airlock.toml" > "$work/serve.out" 2>>"$work/serve.err" &
  pid=$!
  for _ in $(seq 300); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
  addr=$(python3 -c "import json;print(json.loads(open('$work/serve.out').readline())['listening'])")
  python3 - "$addr" "$token" "$1" "$pid" <<'PY'
import json, sys, time, urllib.request, urllib.error
addr, token, resource, pid = sys.argv[1:]
body = json.dumps({"workspace_id": "bench", "resource_id": resource}).encode()
req = urllib.request.Request(f"http://{addr}/api/v1/resource.show", data=body,
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
t = time.monotonic()
try:
    with urllib.request.urlopen(req, timeout=600) as r:
        status, code = r.status, "ok"
except urllib.error.HTTPError as e:
    status, code = e.code, json.loads(e.read())["error"]["code"]
ms = (time.monotonic() - t) * 1000
hwm = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmHWM"))
print(f"{ms:.0f} {status} {hwm} {code}")
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
}

read -r base_ms _ base_kib _ < <(measure "symbol:small.rs#f7")
printf '%-28s %9s %7s %10s %9s  %s\n' resource ms ratio "peak KiB" "+KiB" answer
printf '%-28s %9s %7s %10s %9s  %s\n' "symbol:small.rs#f7" "$base_ms" 1.00 "$base_kib" 0 "200 ok"
for r in "symbol:flat.rs#f19999" "symbol:nest64.rs#f" "symbol:nest1000.rs#f" \
         "symbol:nest20000.rs#f" "symbol:nest100000.rs#f" "symbol:ns100000.ts#f"; do
  read -r ms status kib code < <(measure "$r")
  ratio=$(python3 -c "print(f'{$ms / max($base_ms, 1):.2f}')")
  printf '%-28s %9s %7s %10s %9s  %s\n' "$r" "$ms" "$ratio" "$kib" "$((kib - base_kib))" "$status $code"
done
