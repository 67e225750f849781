//! The idempotent methods of the governed path raced with themselves: two calls with one key and
//! the same parameters, released together from a barrier with jitter on both sides, round
//! after round. Both answer 200 with the same reply, byte for byte: one did the work, the other
//! waited for its key and got the replay. Never a `409 conflict` for the same parameters, never
//! the work done twice (each round's state is checked after). Fake runtime: the logic of the
//! key, not the sandbox.

use crate::support::daemon::{ALICE, BOB, DAVE, ERIN, Server};
use crate::support::http::call;
use serde_json::{Value, json};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Rounds per method: both orders of the two calls are seen within them.
const ROUNDS: usize = 6;

const ROLES: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                     erin = [\"reviewer\", \"security\"]\n";

/// Two calls of `method` with `body` from `token`, released together with jitter; both
/// answers must be 200 and equal. Returns the answer.
pub(crate) fn raced(
    s: &Server,
    token: &'static str,
    method: &'static str,
    body: Value,
    round: usize,
) -> Value {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|side| {
            let (addr, body, barrier) = (s.addr.clone(), body.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let micros = ((round * 7919 + side * 104_729) % 3000) as u64;
                std::thread::sleep(Duration::from_micros(micros));
                call(&addr, Some(token), method, &body)
            })
        })
        .collect();
    let answers: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (status, v) in &answers {
        assert_eq!(*status, 200, "{method} round {round}: {v}");
    }
    assert_eq!(
        answers[0].1, answers[1].1,
        "{method} round {round}: the replay is not the original answer"
    );
    answers[0].1.clone()
}

/// A claim on `resource` and a proposal adding one new file under it, by alice: (proposal
/// answer, claim).
fn proposed(s: &Server, tag: &str) -> (Value, Value) {
    let claim = s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": format!("t-{tag}"),
               "resource_id": format!("directory:{tag}"), "mode": "write",
               "idempotency_key": format!("c-{tag}")}),
    )["claim"]
        .clone();
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": format!("t-{tag}"), "title": "t",
               "summary_md": "s", "patch": new_file(tag, "a"),
               "idempotency_key": format!("p-{tag}")}),
    );
    (p, claim)
}

fn new_file(dir: &str, line: &str) -> String {
    format!(
        "diff --git a/{dir}/f.txt b/{dir}/f.txt\nnew file mode 100644\n--- /dev/null\n+++ b/{dir}/f.txt\n@@ -0,0 +1 @@\n+{line}\n"
    )
}

fn id_rev(p: &Value) -> (Value, String) {
    (
        p["proposal"]["proposal_id"].clone(),
        p["proposal"]["current_revision"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

#[test]
fn the_governed_methods_raced_with_themselves_answer_one_result_twice() {
    let s = Server::fake_governed_with(&format!(
        "{ROLES}[workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n"
    ));
    for round in 0..ROUNDS {
        let tag = format!("r{round}");
        let key = |m: &str| format!("{m}-{round}");

        // Claims: acquire, extend, release.
        let acquired = raced(
            &s,
            ALICE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "tc", "resource_id": format!("file:c{round}"),
                   "mode": "write", "idempotency_key": key("acquire")}),
            round,
        );
        let claim_id = acquired["claim"]["claim_id"].clone();
        let extended = raced(
            &s,
            ALICE,
            "claim.extend",
            json!({"workspace_id": "ws1", "claim_id": claim_id, "ttl_seconds": 600,
                   "idempotency_key": key("extend")}),
            round,
        );
        assert_eq!(extended["claim"]["claim_id"], claim_id);
        raced(
            &s,
            ALICE,
            "claim.heartbeat",
            json!({"workspace_id": "ws1", "claim_id": claim_id, "idempotency_key": key("beat")}),
            round,
        );
        raced(
            &s,
            ALICE,
            "claim.release",
            json!({"workspace_id": "ws1", "claim_id": claim_id, "idempotency_key": key("release")}),
            round,
        );

        // An admin's transitions: suspend, resume, revoke, force release.
        let held = s.ok(
            ALICE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "ta", "resource_id": format!("file:a{round}"),
                   "mode": "write", "idempotency_key": key("acquire-a")}),
        )["claim"]["claim_id"]
            .clone();
        raced(
            &s,
            ALICE,
            "claim.suspend",
            json!({"workspace_id": "ws1", "claim_id": held, "reason": "audit",
                   "idempotency_key": key("suspend")}),
            round,
        );
        raced(
            &s,
            ALICE,
            "claim.resume",
            json!({"workspace_id": "ws1", "claim_id": held, "idempotency_key": key("resume")}),
            round,
        );
        raced(
            &s,
            ALICE,
            "claim.revoke",
            json!({"workspace_id": "ws1", "claim_id": held, "reason": "done",
                   "idempotency_key": key("revoke")}),
            round,
        );
        let forced = s.ok(
            ALICE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "tf", "resource_id": format!("file:f{round}"),
                   "mode": "write", "idempotency_key": key("acquire-f")}),
        )["claim"]["claim_id"]
            .clone();
        raced(
            &s,
            ALICE,
            "claim.force_release",
            json!({"workspace_id": "ws1", "claim_id": forced, "reason": "stuck",
                   "idempotency_key": key("force")}),
            round,
        );

        // A contention resolved by the holder: the contender is turned away once.
        let (_, held) = s.acquire(ALICE, &format!("file:k{round}"), "write", &key("keep"));
        assert_eq!(
            s.acquire(DAVE, &format!("file:k{round}"), "write", &key("want"))
                .0,
            409
        );
        let open = s.ok(
            ALICE,
            "claim.contentions",
            json!({"workspace_id": "ws1", "state": "open"}),
        );
        let contention = open["contentions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["challenged_claim"] == held["claim"]["claim_id"])
            .unwrap_or_else(|| panic!("round {round}: no contention: {open}"))["contention_id"]
            .clone();
        raced(
            &s,
            ALICE,
            "claim.resolve_contention",
            json!({"workspace_id": "ws1", "contention_id": contention,
                   "resolution": "reject_contender", "reason": "mine",
                   "idempotency_key": key("resolve")}),
            round,
        );

        // A session's releasable claims ended together, and a reconcile of the holder's claims.
        for i in 0..2 {
            s.ok(
                ALICE,
                "claim.acquire",
                json!({"workspace_id": "ws1", "task_id": "ts", "session_id": format!("s{round}"),
                       "resource_id": format!("file:s{round}-{i}"), "mode": "write",
                       "resume_policy": "release",
                       "idempotency_key": key(&format!("session-{i}"))}),
            );
        }
        let ended = raced(
            &s,
            ALICE,
            "claim.end_session",
            json!({"workspace_id": "ws1", "session_id": format!("s{round}"),
                   "idempotency_key": key("end")}),
            round,
        );
        assert_eq!(
            ended["released"].as_array().map(Vec::len),
            Some(2),
            "round {round}: both of the session's claims, once: {ended}"
        );
        raced(
            &s,
            ALICE,
            "claim.reconcile",
            json!({"workspace_id": "ws1", "idempotency_key": key("reconcile")}),
            round,
        );

        // Proposals: create, attach a revision, request review.
        let (p, _) = proposed(&s, &tag);
        let (id, _) = id_rev(&p);
        let attached = raced(
            &s,
            ALICE,
            "proposal.attach_patch",
            json!({"workspace_id": "ws1", "proposal_id": id, "expected_version": p["proposal"]["version"],
                   "patch": new_file(&tag, "b"), "idempotency_key": key("attach")}),
            round,
        );
        let revisions = s.ok(
            ALICE,
            "proposal.get",
            json!({"workspace_id": "ws1", "proposal_id": id}),
        );
        assert_eq!(
            revisions["proposal"]["revisions"].as_array().map(Vec::len),
            Some(2),
            "round {round}: one attach, one new revision: {revisions}"
        );
        let (_, rev) = id_rev(&attached);
        raced(
            &s,
            ALICE,
            "proposal.request_review",
            json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": key("review")}),
            round,
        );

        // Reviews: a vote, a security review, an approval asked and decided, a decision.
        raced(
            &s,
            BOB,
            "vote.cast",
            json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "vote": "approve",
                   "reason_md": "ok", "idempotency_key": key("vote")}),
            round,
        );
        let votes = s.ok(
            ALICE,
            "vote.list",
            json!({"workspace_id": "ws1", "proposal_id": id}),
        );
        assert_eq!(
            votes["votes"].as_array().map(Vec::len),
            Some(1),
            "round {round}: one vote: {votes}"
        );
        raced(
            &s,
            ERIN,
            "security.review",
            json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "verdict": "pass",
                   "notes_md": "looked", "idempotency_key": key("security")}),
            round,
        );
        let asked = raced(
            &s,
            ALICE,
            "human.request_approval",
            json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                   "idempotency_key": key("ask")}),
            round,
        );
        raced(
            &s,
            ERIN,
            "human.decide",
            json!({"workspace_id": "ws1", "approval_id": asked["approval"]["approval_id"],
                   "approve": true, "reason_md": "fine", "idempotency_key": key("decide")}),
            round,
        );
        raced(
            &s,
            BOB,
            "decision.record",
            json!({"workspace_id": "ws1", "decision": "deferred", "rationale_md": "later",
                   "proposal_id": id, "idempotency_key": key("decision")}),
            round,
        );

        // Ending a proposal: withdraw one, reject another.
        raced(
            &s,
            ALICE,
            "proposal.withdraw",
            json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": key("withdraw")}),
            round,
        );
        let (other, _) = proposed(&s, &format!("x{round}"));
        let (other_id, _) = id_rev(&other);
        s.ok(
            ALICE,
            "proposal.request_review",
            json!({"workspace_id": "ws1", "proposal_id": other_id, "idempotency_key": key("review2")}),
        );
        raced(
            &s,
            BOB,
            "proposal.reject",
            json!({"workspace_id": "ws1", "proposal_id": other_id, "reason_md": "no",
                   "idempotency_key": key("reject")}),
            round,
        );
    }
    let decisions = s.ok(
        ALICE,
        "decision.list",
        json!({"workspace_id": "ws1", "limit": 100}),
    );
    assert_eq!(
        decisions["decisions"].as_array().map(Vec::len),
        Some(ROUNDS * 2),
        "one recorded decision and one rejection per round, none twice: {decisions}"
    );
}

/// The candidate flow's keyed mutations raced the same way: a verification, a delivery
/// request and a conflict's resolution, each done once per key.
#[test]
fn candidate_verify_request_delivery_and_resolve_raced_with_themselves_answer_one_result_twice() {
    let s = Server::fake();
    let base = s.head();
    for round in 0..ROUNDS {
        let commit = s.agent_commit(
            &format!("c{round}"),
            &base,
            &[("app.txt", &format!("{round}\n"))],
        );
        let sub = s.evidence("run_a", &base, &commit, None);
        let prepared = s.ok(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub], &base, &format!("p{round}")),
        );
        let c = crate::support::cand(&prepared);
        let (cid, rev) = (c["candidate_id"].clone(), c["candidate_revision"].clone());
        let verified = raced(
            &s,
            ALICE,
            "integration.verify",
            json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
                   "argv": ["true"], "timeout_seconds": 60, "idempotency_key": format!("v{round}")}),
            round,
        );
        let runs = crate::support::cand(&verified)["verifications"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(runs.len(), 1, "round {round}: one verification: {verified}");
        let vid = runs[0]["verification_id"].as_str().unwrap().to_string();
        crate::delivery::settled(&s, cid.as_str().unwrap(), &vid);
        let requested = raced(
            &s,
            ALICE,
            "integration.request_delivery",
            json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
                   "verification_ids": [vid], "action": "update_ref",
                   "idempotency_key": format!("r{round}")}),
            round,
        );
        let request = &crate::support::cand(&requested)["delivery_request"];
        assert_eq!(request["request_version"], 1, "round {round}: {requested}");

        // A conflicted candidate's resolution, applied once.
        let a = s.agent_commit(
            &format!("a{round}"),
            &base,
            &[("clash.txt", &format!("A{round}\n"))],
        );
        let b = s.agent_commit(
            &format!("b{round}"),
            &base,
            &[("clash.txt", &format!("B{round}\n"))],
        );
        let conflicted = s.prepare_pair(&base, &a, &b, &format!("pc{round}"));
        let c = crate::support::cand(&conflicted);
        assert_eq!(c["state"], "conflicted", "round {round}: {conflicted}");
        let resolved = raced(
            &s,
            ALICE,
            "integration.resolve",
            json!({"workspace_id": "ws1", "candidate_id": c["candidate_id"],
                   "expected_version": c["version"],
                   "files": [{"path": "clash.txt", "content": "both\n"}],
                   "idempotency_key": format!("res{round}")}),
            round,
        );
        let after = crate::support::cand(&resolved);
        assert_eq!(after["state"], "frozen", "round {round}: {resolved}");
        assert_eq!(
            after["resolutions"].as_array().map(Vec::len),
            Some(1),
            "round {round}: one resolution: {resolved}"
        );
    }
}
