#!/usr/bin/env bash
# Airlock's main job end to end on a fresh machine: installs prerequisites, builds the sandbox
# image and the binary, starts `airlock serve` with a generated config and a fresh data dir,
# creates a sample repository with two agent submissions that conflict, and walks
#   record evidence -> prepare -> resolve -> verify (a real test in the sandbox)
#   -> request_delivery -> decide -> deliver
# printing each step's key fields, then stops the daemon. Exit 0 on success; otherwise the
# message names the failing step.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prereqs.sh --for run
cargo build --release --locked
AIRLOCK=$PWD/target/release/airlock
$AIRLOCK images build minimal --images-dir images >/dev/null

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# A sample project: app.sh prints a greeting, test.sh checks it.
repo=$work/app
mkdir -p "$repo"
g() { git -C "$repo" -c user.name=demo -c user.email=demo@example.com "$@"; }
g init -q -b main
printf '#!/bin/sh\necho "greeting: hello"\n' > "$repo/app.sh"
printf '#!/bin/sh\n# The project test: the app must greet.\n./app.sh | grep -q "greeting:" && echo "test passed"\n' > "$repo/test.sh"
chmod +x "$repo/app.sh" "$repo/test.sh"
g add -A && g commit -qm "sample project"
base=$(g rev-parse HEAD)
# Agent A and agent B both change the greeting: their submissions conflict.
g checkout -q -b agent-a
printf '#!/bin/sh\necho "greeting: hello, world"\n' > "$repo/app.sh"
g commit -qam "agent A: greet the world"
rev_a=$(g rev-parse HEAD)
g checkout -q -b agent-b "$base"
printf '#!/bin/sh\necho "greeting: hello, airlock"\n' > "$repo/app.sh"
echo "written by agent B" > "$repo/NOTES"
g add -A && g commit -qm "agent B: greet airlock, add notes"
rev_b=$(g rev-parse HEAD)
g checkout -q main

token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
alice=$(token); dana=$(token); run_a=$(token); run_b=$(token)
# Results, deliveries and applies are signed with this key (in-toto statements in DSSE envelopes).
$AIRLOCK keys generate "$work/signing.pem" > "$work/signing.pub.txt"
cat > "$work/airlock.toml" <<TOML
listen = "127.0.0.1:0"
data_dir = "$work/data"
signing_key = "$work/signing.pem"
[workspaces.demo]
repo = "$repo"
# dana approves deliveries: the member who requests one may not decide it (distinct_approver).
members = { alice = ["view", "integrate", "verify", "decide", "push"], dana = ["view", "decide"] }
[[tokens]]
sha256 = "$(sha "$alice")"
member_id = "alice"
[[tokens]]
sha256 = "$(sha "$dana")"
member_id = "dana"
[[tokens]]
sha256 = "$(sha "$run_a")"
run_id = "run_a"
workspace_id = "demo"
[[tokens]]
sha256 = "$(sha "$run_b")"
run_id = "run_b"
workspace_id = "demo"
TOML

$AIRLOCK serve --config "$work/airlock.toml" > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 100); do [ -s "$work/serve.out" ] && break; kill -0 "$pid" || break; sleep 0.1; done
[ -s "$work/serve.out" ] || { echo "demo failed at step: start airlock serve" >&2; cat "$work/serve.err" >&2; exit 1; }
addr=$(python3 -c "import json,sys;print(json.loads(open(sys.argv[1]).readline())['listening'])" "$work/serve.out")
echo "== airlock serve listening on $addr"

python3 - "$addr" "$alice" "$run_a" "$run_b" "$base" "$rev_a" "$rev_b" "$dana" <<'PY'
import http.client, json, sys, time
addr, alice, run_a, run_b, base, rev_a, rev_b, dana = sys.argv[1:9]
host, port = addr.rsplit(":", 1)

def call(step, token, method, body):
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request("POST", f"/api/v1/{method}", json.dumps(body), {"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    data = json.loads(r.read() or b"{}")
    if r.status != 200:
        sys.exit(f"demo failed at step: {step}: HTTP {r.status} {json.dumps(data)}")
    return data

def show(step, **fields):
    print(f"== {step}")
    for k, v in fields.items():
        print(f"   {k}: {v}")

ws = "demo"
subs = []
for run, token, rev in (("run_a", run_a, rev_a), ("run_b", run_b, rev_b)):
    e = call(f"record evidence ({run})", token, "evidence.record",
             {"workspace_id": ws, "run_id": run, "base_revision": base, "revision": rev,
              "transcript": f"{run}: changed the greeting", "idempotency_key": f"ev-{run}"})["evidence"]
    show(f"record evidence ({run})", evidence_ref=e["evidence_ref"], retained_revision=e["retained_revision"],
         sources=e["sources"], expires_at=e["expires_at"])
    subs.append({"workspace_id": ws, "run_id": run, "evidence_ref": e["evidence_ref"], "retained_revision": rev})

c = call("prepare", alice, "integration.prepare",
         {"workspace_id": ws, "submissions": subs, "target_ref": "refs/heads/main",
          "expected_target_revision": base, "idempotency_key": "prepare-1"})["candidate"]
show("prepare", candidate_id=c["candidate_id"], state=c["state"], conflicts=c["conflicts"],
     applied_inputs=c["applied_inputs"], version=c["version"])
if c["state"] != "conflicted":
    sys.exit("demo failed at step: prepare: expected the two submissions to conflict")
cid = c["candidate_id"]

merged = '#!/bin/sh\necho "greeting: hello, world and airlock"\n'
c = call("resolve", alice, "integration.resolve",
         {"workspace_id": ws, "candidate_id": cid, "expected_version": c["version"],
          "files": [{"path": "app.sh", "content": merged}], "idempotency_key": "resolve-1"})["candidate"]
show("resolve", state=c["state"], candidate_revision=c["candidate_revision"], version=c["version"])
if c["state"] != "frozen":
    sys.exit(f"demo failed at step: resolve: candidate is {c['state']}")
rev = c["candidate_revision"]

c = call("verify", alice, "integration.verify",
         {"workspace_id": ws, "candidate_id": cid, "candidate_revision": rev,
          "argv": ["sh", "-c", "./test.sh && ./app.sh"], "timeout_seconds": 60, "idempotency_key": "verify-1"})["candidate"]
vid = c["verifications"][-1]["verification_id"]
deadline = time.monotonic() + 120
while True:
    c = call("verify (wait)", alice, "integration.show", {"workspace_id": ws, "candidate_id": cid})["candidate"]
    v = next(x for x in c["verifications"] if x["verification_id"] == vid)
    if v["status"] != "running":
        break
    if time.monotonic() > deadline:
        sys.exit("demo failed at step: verify: still running after 120 s")
    time.sleep(0.2)
show("verify", verification_id=vid, status=v["status"], exit_code=v["exit_code"],
     output=v["output"].strip().replace("\n", " | "), image=v["image"], observed_image=v["observed_image"],
     environment_sha256=v["environment_sha256"], expires_at=v["expires_at"])
if v["status"] != "passed":
    sys.exit(f"demo failed at step: verify: status {v['status']}: {v['error']}")

c = call("request_delivery", alice, "integration.request_delivery",
         {"workspace_id": ws, "candidate_id": cid, "candidate_revision": rev, "verification_ids": [vid],
          "action": "update_ref", "idempotency_key": "request-1"})["candidate"]
req = c["delivery_request"]
show("request_delivery", request_id=req["request_id"], request_version=req["request_version"],
     action=req["action"], state=req["state"], expires_at=req["expires_at"])

c = call("decide (by dana, not the requester)", dana, "integration.decide",
         {"workspace_id": ws, "candidate_id": cid, "request_id": req["request_id"],
          "request_version": req["request_version"], "approve": True})["candidate"]
show("decide", state=c["delivery_request"]["state"], decided_by=c["delivery_request"]["decided_by"])

c = call("deliver", alice, "integration.deliver",
         {"workspace_id": ws, "candidate_id": cid, "request_id": req["request_id"],
          "request_version": req["request_version"]})["candidate"]
r = c["delivery_receipt"]
show("deliver", result=r["result"], receipt_id=r["receipt_id"], target_ref=r["target_ref"],
     previous_revision=r["previous_revision"], candidate_revision=r["candidate_revision"])
if r["result"] != "landed":
    sys.exit(f"demo failed at step: deliver: result {r['result']}")
PY

landed=$(g rev-parse main)
echo "== refs/heads/main is now $landed; receipt at $(g for-each-ref --format='%(refname)' refs/airlock/receipts/)"
echo "== the history git alone tells (the agents' commits are merged, the landed commit carries the story):"
g log --graph --format='%h %an: %s' -6 main
g log -1 --format=%B main | g interpret-trailers --parse
echo "== the signed attestations git carries (refs/notes/airlock on the landed commit), checked offline with the public key:"
g notes --ref=airlock show main > "$work/note.jsonl"
$AIRLOCK attestation verify --config "$work/airlock.toml" --repo "$repo" --rev main "$work/note.jsonl"
kill -TERM "$pid"; wait "$pid"; pid=""
echo "== airlock serve stopped; demo finished"
