//! Reviews, votes, security reviews, human approvals, decisions and the policy verdict over a
//! real daemon on loopback, on a real governed worktree: the plan is persisted per revision,
//! evidence binds to the exact current revision and stops counting when it changes, each gate
//! on and off, the author never reviews or approves, a run never gives human approval, an
//! override lifts votes but never a security review, one current vote per voter, replays.

use crate::support::daemon::{ALICE, BOB, DAVE, ERIN, RUN_A, SAM, Server};
use crate::support::repo::git;
use serde_json::{Value, json};

const ROLES: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\nerin = [\"reviewer\", \"security\"]\n\
                     sam = [\"dba\"]\n\"run:run_a\" = [\"reviewer\"]\n";

fn server(policy: &str) -> Server {
    Server::fake_governed_with(&format!("{ROLES}[workspaces.ws1.policy]\n{policy}"))
}

/// alice claims and proposes a change to `path`, and asks for review; returns the reply.
fn proposal(s: &Server, path: &str, risk: &str, key: &str) -> Value {
    let full = s.repo.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    let before = std::fs::read_to_string(&full).ok();
    std::fs::write(
        &full,
        format!("{}{key}\n", before.clone().unwrap_or_default()),
    )
    .unwrap();
    git(&s.repo, &["add", "-A", "--intent-to-add"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-q", "-fd"]);
    let patch = String::from_utf8(out.stdout).unwrap();
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": format!("file:{path}"),
               "mode": "write", "idempotency_key": format!("c-{key}")}),
    );
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "risk": risk, "patch": patch, "idempotency_key": format!("p-{key}")}),
    );
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal"]["proposal_id"],
               "idempotency_key": format!("r-{key}")}),
    )
}

fn ids(p: &Value) -> (Value, String) {
    (
        p["proposal"]["proposal_id"].clone(),
        p["proposal"]["current_revision"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

fn vote(s: &Server, token: &str, id: &Value, rev: &str, kind: &str, key: &str) -> (u16, Value) {
    s.call(
        token,
        "vote.cast",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "vote": kind,
               "reason_md": "because", "idempotency_key": key}),
    )
}

fn verdict(s: &Server, id: &Value) -> Value {
    s.ok(
        BOB,
        "policy.evaluate",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    )["verdict"]
        .clone()
}

fn req<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no requirement {name}: {v}"))
}

#[test]
fn the_review_plan_is_persisted_per_revision_and_never_names_the_author() {
    let s = server(
        "path_roles = [{ glob = \"db/**\", role = \"dba\" }, { glob = \"db/**\", role = \"ops\" }]\n\
         security_review = \"always\"\n",
    );
    let p = proposal(&s, "db/schema.sql", "normal", "a");
    let plan = &p["review_plan"];
    let roles: Vec<(&str, Vec<&str>)> = plan["required_roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap(),
                r["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            (
                "reviewer",
                vec!["member:bob", "member:erin", "run:ws1/run_a"]
            ),
            ("dba", vec!["member:sam"]),
            ("ops", vec![]),
            ("security", vec!["member:erin"]),
        ],
        "nobody holds ops: the role is listed with no candidates, not an error"
    );
    assert_eq!(plan["security_review_required"], true);
    assert_eq!(plan["human_approval_required"], false);
    let (id, rev) = ids(&p);
    assert_eq!(plan["revision"], rev.as_str());
    let got = s.ok(
        BOB,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(got["review_plan"], *plan);
    // A proposal whose author holds a role is never its own candidate.
    let s2 = Server::fake_governed_with(&format!(
        "{}alice = [\"reviewer\"]\n",
        ROLES.replace("bob = [\"reviewer\"]\n", "")
    ));
    let p2 = proposal(&s2, "README", "normal", "b");
    let cands = &p2["review_plan"]["required_roles"][0]["candidates"];
    assert!(
        !cands.as_array().unwrap().contains(&json!("member:alice")),
        "{cands}"
    );
}

#[test]
fn votes_bind_to_the_current_revision_and_older_evidence_never_counts() {
    let s = server("required_approvals = 1\n");
    let p = proposal(&s, "README", "normal", "a");
    let (id, rev1) = ids(&p);
    let (st, v) = vote(&s, BOB, &id, &rev1, "approve", "b1");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["vote"]["roles"], json!(["reviewer"]));
    assert_eq!(v["vote"]["confidence"], 1.0);
    assert_eq!(verdict(&s, &id)["approvable"], true);
    let asked = s.ok(
        ALICE,
        "human.request_approval",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev1, "idempotency_key": "q1"}),
    );
    // A new revision: bob's vote was about other bytes.
    let readme = std::fs::read_to_string(s.repo.join("README")).unwrap();
    std::fs::write(s.repo.join("README"), format!("{readme}two\n")).unwrap();
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["checkout", "-q", "--", "README"]);
    let attached = s.ok(
        ALICE,
        "proposal.attach_patch",
        json!({"workspace_id": "ws1", "proposal_id": id, "expected_version": p["proposal"]["version"],
               "patch": String::from_utf8(out.stdout).unwrap(), "idempotency_key": "att"}),
    );
    let rev2 = attached["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(attached["proposal"]["status"], "in_review");
    let v = verdict(&s, &id);
    assert_eq!(v["approvable"], false, "{v}");
    assert_eq!(req(&v, "approvals")["state"], "missing");
    // Evidence for the old revision is refused now, and its pending approval cannot be
    // decided: it is about other bytes.
    let (st, e) = vote(&s, BOB, &id, &rev1, "approve", "b2");
    assert_eq!(st, 412, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not current"),
        "{e}"
    );
    let (st, e) = s.call(
        ERIN,
        "human.decide",
        json!({"workspace_id": "ws1", "approval_id": asked["approval"]["approval_id"],
               "approve": true, "reason_md": "ok", "idempotency_key": "late"}),
    );
    assert_eq!(st, 412, "{e}");
    let got = s.ok(
        BOB,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(
        got["review_plan"]["revision"],
        rev2.as_str(),
        "a fresh plan for revision 2"
    );
    assert_eq!(got["votes"], json!([]), "no vote on revision 2 yet");
    // A run holding a role votes; a newer vote of one voter supersedes the older.
    assert_eq!(vote(&s, RUN_A, &id, &rev2, "revise", "r1").0, 200);
    assert_eq!(
        req(&verdict(&s, &id), "no_blocking_votes")["state"],
        "blocked"
    );
    assert_eq!(vote(&s, RUN_A, &id, &rev2, "approve", "r2").0, 200);
    let v = verdict(&s, &id);
    assert_eq!(v["approvable"], true, "{v}");
    let listed = s.ok(
        BOB,
        "vote.list",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev2}),
    );
    let current: Vec<bool> = listed["votes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["current"].as_bool().unwrap())
        .collect();
    assert_eq!(
        current,
        [false, true],
        "history kept, one current: {listed}"
    );
    let all = s.ok(
        BOB,
        "vote.list",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(all["votes"].as_array().unwrap().len(), 3);
}

#[test]
fn who_may_vote_review_and_approve() {
    let s = server("security_review = \"always\"\nhuman_approval = \"always\"\n");
    let p = proposal(&s, "README", "normal", "a");
    let (id, rev) = ids(&p);
    // Not in review: no votes.
    let pending = {
        let v = s.ok(
            ALICE,
            "proposal.withdraw",
            json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "w"}),
        );
        assert_eq!(v["proposal"]["status"], "withdrawn");
        let (st, e) = vote(&s, BOB, &id, &rev, "approve", "late");
        assert_eq!(st, 412, "{e}");
        proposal(&s, "README", "normal", "b")
    };
    let (id, rev) = ids(&pending);
    // The author never votes, reviews or approves; dave has no review permission.
    assert_eq!(vote(&s, ALICE, &id, &rev, "approve", "x1").0, 403);
    assert_eq!(vote(&s, DAVE, &id, &rev, "approve", "x2").0, 403);
    let sec = |token: &str, verdict: &str, key: &str| {
        s.call(
            token,
            "security.review",
            json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                   "verdict": verdict, "notes_md": "looked", "idempotency_key": key}),
        )
    };
    let (st, e) = sec(BOB, "pass", "s0");
    assert_eq!(st, 403, "bob lacks the security role: {e}");
    assert_eq!(sec(ALICE, "pass", "s1").0, 403);
    // Hostile values are refused naming the field.
    for (body, field) in [
        (json!({"vote": "lgtm"}), "vote"),
        (json!({"vote": "approve", "confidence": 1.5}), "confidence"),
        (json!({"vote": "approve", "confidence": -0.1}), "confidence"),
        (json!({"vote": "approve", "revision": "HEAD"}), "revision"),
        (json!({"vote": "approve", "reason_md": " "}), "reason_md"),
        (json!({"vote": "approve", "voter": "member:erin"}), "voter"),
    ] {
        let mut b = json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                           "reason_md": "r", "idempotency_key": format!("h-{field}")});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let m = s.err(BOB, "vote.cast", b.clone(), "invalid_argument");
        assert!(m.contains(field), "{b}: {m}");
    }
    // Human approval: a run can never give it; the author cannot; the requester cannot while
    // distinct_approver holds; erin can.
    let asked = s.ok(
        ERIN,
        "human.request_approval",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "idempotency_key": "q1"}),
    );
    let aid = asked["approval"]["approval_id"].clone();
    assert_eq!(asked["approval"]["state"], "pending");
    let decide = |token: &str, approve: bool, key: &str| {
        s.call(
            token,
            "human.decide",
            json!({"workspace_id": "ws1", "approval_id": aid, "approve": approve,
                   "reason_md": "ok", "idempotency_key": key}),
        )
    };
    let (st, e) = decide(RUN_A, true, "d1");
    assert_eq!(st, 403);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run token"),
        "{e}"
    );
    assert_eq!(
        decide(ALICE, true, "d2").0,
        403,
        "alice lacks approve, and is the author"
    );
    let (st, e) = decide(ERIN, true, "d3");
    assert_eq!(st, 403, "erin requested it: {e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("distinct_approver")
    );
    // A second pending request is refused; alice (the author) may ask instead... after a
    // denial. Here: the pending one is decided by nobody yet, so asking again fails.
    let (st, _) = s.call(
        ALICE,
        "human.request_approval",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "idempotency_key": "q2"}),
    );
    assert_eq!(st, 412, "one pending approval per revision");
    let v = verdict(&s, &id);
    assert_eq!(req(&v, "security_review")["state"], "missing");
    assert_eq!(req(&v, "human_approval")["state"], "missing");
    assert_eq!(v["approvable"], false);
}

#[test]
fn each_gate_on_and_off_and_an_override_never_satisfies_security() {
    // Gates off: one reviewer's approval is enough even at high risk.
    let s = server("security_review = \"never\"\nhuman_approval = \"never\"\n");
    let p = proposal(&s, "README", "critical", "a");
    let (id, rev) = ids(&p);
    vote(&s, BOB, &id, &rev, "approve", "b1");
    let v = verdict(&s, &id);
    assert_eq!(v["approvable"], true, "{v}");
    assert_eq!(v["high_risk"], true);
    assert!(
        v["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["name"] != "security_review")
    );

    // Gates on for high risk, by path.
    let s = server("high_risk_paths = [\"migrations/**\"]\n");
    let low = proposal(&s, "README", "low", "a");
    let (lid, lrev) = ids(&low);
    vote(&s, BOB, &lid, &lrev, "approve", "b1");
    assert_eq!(
        verdict(&s, &lid)["approvable"],
        true,
        "not high risk: gates do not apply"
    );
    let p = proposal(&s, "migrations/001.sql", "low", "b");
    let (id, rev) = ids(&p);
    vote(&s, BOB, &id, &rev, "approve", "b2");
    vote(&s, SAM, &id, &rev, "veto", "s1");
    let v = verdict(&s, &id);
    assert_eq!(v["high_risk"], true);
    for name in ["security_review", "human_approval"] {
        assert_eq!(req(&v, name)["state"], "missing", "{v}");
    }
    let blocked = req(&v, "no_blocking_votes");
    assert_eq!(blocked["state"], "blocked");
    assert!(
        blocked["detail"]
            .as_str()
            .unwrap()
            .contains("veto by member:sam"),
        "{blocked}"
    );
    // The human overrides the veto: votes are lifted, security still missing.
    let asked = s.ok(
        ALICE,
        "human.request_approval",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "idempotency_key": "q"}),
    );
    let decided = s.ok(
        ERIN,
        "human.decide",
        json!({"workspace_id": "ws1", "approval_id": asked["approval"]["approval_id"],
               "approve": true, "override": true, "reason_md": "the veto is about style",
               "idempotency_key": "d"}),
    );
    assert_eq!(decided["approval"]["state"], "approved");
    assert_eq!(decided["approval"]["override"], true);
    let replay = s.ok(
        ERIN,
        "human.decide",
        json!({"workspace_id": "ws1", "approval_id": asked["approval"]["approval_id"],
               "approve": true, "override": true, "reason_md": "the veto is about style",
               "idempotency_key": "d"}),
    );
    assert_eq!(replay, decided, "a replay answers the original decision");
    let v = verdict(&s, &id);
    assert_eq!(req(&v, "no_blocking_votes")["state"], "overridden");
    assert_eq!(req(&v, "human_approval")["state"], "satisfied");
    assert_eq!(req(&v, "security_review")["state"], "missing");
    assert_eq!(
        v["approvable"], false,
        "an override never satisfies security: {v}"
    );
    assert_eq!(v["override"]["by"], "member:erin");
    assert_eq!(v["override"]["reason_md"], "the veto is about style");
    assert_eq!(v["override"]["overridden"], json!(["no_blocking_votes"]));
    // The security review passes: approvable. A later failing one blocks again.
    let sec = |verdict: &str, key: &str| {
        s.ok(
            ERIN,
            "security.review",
            json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                   "verdict": verdict, "notes_md": "", "idempotency_key": key}),
        )
    };
    sec("pass", "s1");
    assert_eq!(verdict(&s, &id)["approvable"], true);
    sec("needs_changes", "s2");
    let v = verdict(&s, &id);
    assert_eq!(req(&v, "security_review")["state"], "blocked");
    assert_eq!(v["approvable"], false);
    // An override with a denial is meaningless and refused.
    let m = s.err(
        ERIN,
        "human.decide",
        json!({"workspace_id": "ws1", "approval_id": asked["approval"]["approval_id"],
               "approve": false, "override": true, "reason_md": "x", "idempotency_key": "d2"}),
        "invalid_argument",
    );
    assert!(m.contains("override"), "{m}");
    // The whole picture in one call.
    let got = s.ok(
        BOB,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    for k in [
        "review_plan",
        "votes",
        "security_reviews",
        "approvals",
        "verdict",
    ] {
        assert!(!got[k].is_null(), "{k}: {got}");
    }
    assert_eq!(got["security_reviews"].as_array().unwrap().len(), 2);
    assert_eq!(got["verdict"], v);
}

#[test]
fn concurrent_votes_by_one_voter_leave_exactly_one_current_vote() {
    let s = server("");
    let p = proposal(&s, "README", "normal", "a");
    let (id, rev) = ids(&p);
    for round in 0..3 {
        std::thread::scope(|scope| {
            for i in 0..10 {
                let (s, id, rev) = (&s, &id, &rev);
                scope.spawn(move || {
                    let kind = if i % 2 == 0 { "approve" } else { "abstain" };
                    let (st, v) = vote(s, BOB, id, rev, kind, &format!("c{round}-{i}"));
                    assert_eq!(st, 200, "{v}");
                });
            }
        });
        let listed = s.ok(
            BOB,
            "vote.list",
            json!({"workspace_id": "ws1", "proposal_id": id}),
        );
        let votes = listed["votes"].as_array().unwrap();
        assert_eq!(votes.len(), 10 * (round + 1));
        let current = votes.iter().filter(|v| v["current"] == true).count();
        assert_eq!(current, 1, "round {round}: {listed}");
        assert_eq!(
            votes.last().unwrap()["current"],
            true,
            "the newest is current"
        );
    }
}

#[test]
fn replays_return_the_original_and_decisions_are_immutable_records() {
    let s = server("");
    let p = proposal(&s, "README", "normal", "a");
    let (id, rev) = ids(&p);
    let (_, first) = vote(&s, BOB, &id, &rev, "approve", "k");
    let (st, again) = vote(&s, BOB, &id, &rev, "approve", "k");
    assert_eq!(
        (st, &again["vote"]["vote_id"]),
        (200, &first["vote"]["vote_id"])
    );
    let (st, _) = vote(&s, BOB, &id, &rev, "reject", "k");
    assert_eq!(st, 409, "the key with another vote");
    let listed = s.ok(
        BOB,
        "vote.list",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(listed["votes"].as_array().unwrap().len(), 1);
    // Decisions: alone, about a task, about a proposal (its current revision by default).
    let record = |token: &str, extra: Value, key: &str| {
        let mut b = json!({"workspace_id": "ws1", "decision": "deferred",
                           "rationale_md": "next sprint", "idempotency_key": key});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        s.call(token, "decision.record", b)
    };
    let (st, alone) = record(BOB, json!({}), "d1");
    assert_eq!(st, 200, "{alone}");
    assert_eq!(alone["decision"]["decided_by"], "member:bob");
    assert_eq!(record(BOB, json!({}), "d1").1, alone, "a replay");
    let (_, task) = record(ERIN, json!({"task_id": "t9"}), "d2");
    assert_eq!(task["decision"]["task_id"], "t9");
    let (_, about) = record(ERIN, json!({"proposal_id": id}), "d3");
    assert_eq!(about["decision"]["revision"], rev.as_str());
    let (st, e) = record(
        ERIN,
        json!({"proposal_id": id, "revision": "0".repeat(64)}),
        "d4",
    );
    assert_eq!(st, 412, "{e}");
    assert_eq!(record(ERIN, json!({"decision": "Approved!"}), "d5").0, 400);
    assert_eq!(
        record(ERIN, json!({"revision": rev}), "d6").0,
        400,
        "a revision needs its proposal"
    );
    assert_eq!(record(DAVE, json!({}), "d7").0, 403);
    let by_task = s.ok(
        BOB,
        "decision.list",
        json!({"workspace_id": "ws1", "task_id": "t9"}),
    );
    assert_eq!(by_task["decisions"].as_array().unwrap().len(), 1);
    let by_proposal = s.ok(
        BOB,
        "decision.list",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(by_proposal["decisions"].as_array().unwrap().len(), 1);
    // Every piece of evidence wrote its event on the proposal.
    let ev = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": id}),
    );
    let kinds: Vec<&str> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "proposal.created",
            "proposal.request_review",
            "vote.cast",
            "decision.recorded"
        ]
    );
}
