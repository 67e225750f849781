#!/usr/bin/env bash
# The governed patch path as far as it is built, end to end on a real worktree and a real
# daemon: resource.show of a symbol (tree-sitter) -> a fenced symbol claim -> a conflicting
# claim refused with a contention -> proposal.create with a patch inside the symbol ->
# proposal.preview -> request_review (the persisted plan) -> vote -> policy.evaluate (human
# approval missing) -> human.request_approval -> human.decide (another member) -> approvable
# -> patch.validate (git in the sandbox, the expected test on the post-images) -> patch.apply
# (journaled install) -> transaction.recovery (judged from the files).
# Exit 0 on success; otherwise the message names the failing step.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prereqs.sh --for governed >/dev/null
cargo build --release --locked
AIRLOCK=$PWD/target/release/airlock
# The dry run runs git in the sandbox's git image; the expected test in the minimal one.
$AIRLOCK images build minimal --images-dir images >/dev/null
$AIRLOCK images build git --images-dir images >/dev/null

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The operator's checkout: a small Rust library.
wt=$work/checkout
mkdir -p "$wt/src"
g() { git -C "$wt" -c user.name=demo -c user.email=demo@example.com "$@"; }
g init -q -b main
printf 'pub fn greet() -> &'"'"'static str {\n    "hello"\n}\n\npub fn part() -> u32 {\n    1\n}\n' > "$wt/src/lib.rs"
g add -A && g commit -qm "sample library"

token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
agent=$(token); other=$(token); bob=$(token); erin=$(token)
cat > "$work/airlock.toml" <<TOML
listen = "127.0.0.1:0"
data_dir = "$work/data"
[workspaces.gov]
worktree = "$wt"
members = { agent = ["view", "propose"], other = ["view", "propose"], bob = ["view", "review"], erin = ["view", "review", "approve", "apply"] }
[workspaces.gov.roles]
bob = ["reviewer"]
erin = ["reviewer", "security"]
[workspaces.gov.policy]
human_approval = "always"
[[tokens]]
sha256 = "$(sha "$agent")"
member_id = "agent"
[[tokens]]
sha256 = "$(sha "$other")"
member_id = "other"
[[tokens]]
sha256 = "$(sha "$bob")"
member_id = "bob"
[[tokens]]
sha256 = "$(sha "$erin")"
member_id = "erin"
TOML

$AIRLOCK serve --config "$work/airlock.toml" > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 100); do [ -s "$work/serve.out" ] && break; kill -0 "$pid" || break; sleep 0.1; done
[ -s "$work/serve.out" ] || { echo "governed demo failed at step: start airlock serve" >&2; cat "$work/serve.err" >&2; exit 1; }
addr=$(python3 -c "import json,sys;print(json.loads(open(sys.argv[1]).readline())['listening'])" "$work/serve.out")
echo "== airlock serve listening on $addr"

# The agent's change: greet() says more. The patch is what `git diff` prints.
sed -i 's/"hello"/"hello, governed world"/' "$wt/src/lib.rs"
g diff --no-color > "$work/change.patch"
g checkout -q -- src/lib.rs

python3 - "$addr" "$agent" "$other" "$bob" "$erin" "$work/change.patch" <<'PY'
import http.client, json, sys
addr, agent, other, bob, erin, patch_file = sys.argv[1:7]
host, port = addr.rsplit(":", 1)
patch = open(patch_file).read()
ws = "gov"

def call(step, token, method, body, expect=200):
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.request("POST", f"/api/v1/{method}", json.dumps(body), {"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    data = json.loads(r.read() or b"{}")
    if r.status != expect:
        sys.exit(f"governed demo failed at step: {step}: HTTP {r.status} {json.dumps(data)}")
    return data

def show(step, **fields):
    print(f"== {step}")
    for k, v in fields.items():
        print(f"   {k}: {v}")

sym = "symbol:src/lib.rs#greet"
r = call("resource.show", agent, "resource.show", {"workspace_id": ws, "resource_id": sym})["resource"]
show("resource.show", language=r["language"], span=r["span"], current_hash=r["current_hash"][:16] + "...")
c = call("claim the symbol", agent, "claim.acquire",
         {"workspace_id": ws, "task_id": "T-1", "resource_id": sym, "mode": "write",
          "idempotency_key": "claim-1"})["claim"]
show("claim.acquire", claim_id=c["claim_id"], fencing_token=c["fencing_token"], span=c["resource"]["span"],
     expires_at=c["expires_at"])
e = call("a conflicting claim", other, "claim.acquire",
         {"workspace_id": ws, "task_id": "T-2", "resource_id": "file:src/lib.rs", "mode": "write",
          "idempotency_key": "claim-2"}, expect=409)
cont = call("contentions", agent, "claim.contentions", {"workspace_id": ws, "state": "open"})["contentions"]
show("conflicting claim refused", error=e["error"]["message"], open_contentions=len(cont))

p = call("propose", agent, "proposal.create",
         {"workspace_id": ws, "task_id": "T-1", "title": "Greet the governed world",
          "summary_md": "Changes greet() only.", "patch": patch,
          "affected_resources": [sym], "expected_tests": [["sh", "-c", "grep -q governed src/lib.rs"]],
          "idempotency_key": "propose-1"})["proposal"]
pid, rev = p["proposal_id"], p["current_revision"]
show("proposal.create", proposal_id=pid, revision=rev, affected_resources=p["affected_resources"])
s = call("preview", bob, "proposal.preview", {"workspace_id": ws, "proposal_id": pid, "part": "symbols"})
show("proposal.preview symbols", touched=[x["resource_id"] for f in s["files"] for x in f["symbols"]])

rr = call("request review", agent, "proposal.request_review",
          {"workspace_id": ws, "proposal_id": pid, "idempotency_key": "review-1"})
show("request_review", status=rr["proposal"]["status"],
     plan=[(x["role"], x["candidates"]) for x in rr["review_plan"]["required_roles"]],
     human_approval_required=rr["review_plan"]["human_approval_required"])
v = call("vote", bob, "vote.cast", {"workspace_id": ws, "proposal_id": pid, "revision": rev,
                                     "vote": "approve", "reason_md": "small and claimed",
                                     "idempotency_key": "vote-1"})["vote"]
show("vote.cast", vote_id=v["vote_id"], voter=v["voter"], roles=v["roles"])
verdict = call("evaluate", bob, "policy.evaluate", {"workspace_id": ws, "proposal_id": pid})["verdict"]
show("policy.evaluate", approvable=verdict["approvable"],
     requirements=[(r["name"], r["state"]) for r in verdict["requirements"]])
if verdict["approvable"]:
    sys.exit("governed demo failed at step: evaluate: approvable without the human approval")

a = call("request approval", agent, "human.request_approval",
         {"workspace_id": ws, "proposal_id": pid, "revision": rev, "idempotency_key": "ask-1"})["approval"]
d = call("decide", erin, "human.decide", {"workspace_id": ws, "approval_id": a["approval_id"],
                                          "approve": True, "reason_md": "reviewed the diff",
                                          "idempotency_key": "decide-1"})["approval"]
show("human.decide", approval_id=d["approval_id"], state=d["state"], decided_by=d["decided_by"])
verdict = call("evaluate", bob, "policy.evaluate", {"workspace_id": ws, "proposal_id": pid})["verdict"]
show("policy.evaluate", approvable=verdict["approvable"],
     requirements=[(r["name"], r["state"]) for r in verdict["requirements"]])
if not verdict["approvable"]:
    sys.exit(f"governed demo failed at step: evaluate: not approvable: {json.dumps(verdict)}")
import time
v = call("validate", erin, "patch.validate", {"workspace_id": ws, "proposal_id": pid, "revision": rev,
                                               "idempotency_key": "validate-1"})["validation"]
deadline = time.monotonic() + 300
while not v["complete"]:
    if time.monotonic() > deadline:
        sys.exit("governed demo failed at step: validate: the tests did not settle in 300 s")
    time.sleep(0.5)
    v = call("validation_show", erin, "patch.validation_show",
             {"workspace_id": ws, "validation_id": v["validation_id"]})["validation"]
show("patch.validate", valid=v["valid"], stages=[(x["name"], x["state"]) for x in v["stages"]])
if not v["valid"]:
    sys.exit(f"governed demo failed at step: validate: {json.dumps(v['stages'])}")
a = call("apply", erin, "patch.apply", {"workspace_id": ws, "proposal_id": pid,
                                        "validation_id": v["validation_id"], "idempotency_key": "apply-1"})
t = a["transaction"]
show("patch.apply", transaction_id=t["transaction_id"], status=t["status"],
     proposal_status=a["proposal"]["status"], rollback_sha256=t["rollback_sha256"][:16] + "...")
r = call("recovery", bob, "transaction.recovery", {"workspace_id": ws, "transaction_id": t["transaction_id"]})
show("transaction.recovery", repository_state=r["repository_state"],
     paths=[(x["path"], x["state"]) for x in r["paths"]], actions=r["actions"])
ev = call("events", agent, "event.list", {"workspace_id": ws, "limit": 200})["events"]
show("event.list", events=len(ev), kinds=sorted({x["kind"] for x in ev}))
PY
echo "== the worktree now says: $(grep -o '"hello[^"]*"' "$wt/src/lib.rs")"
kill -TERM "$pid"; wait "$pid"; pid=""
echo "== airlock serve stopped; governed demo finished"
