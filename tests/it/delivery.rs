//! Candidate verification and delivery through the daemon: real HTTP, real git, real SQLite.
//! Tests of workflow logic (validation, idempotency, the override rule's inputs, delivery,
//! receipts, crash reconciliation) run jobs on the scripted fake runtime; tests of running work
//! (cancellation, shutdown, a daemon killed mid-run, source changes during a run) on real Docker.

use crate::support::*;
use crate::support::{ALICE, DAVE, RUN_A, Server, cand, wait_for};
use serde_json::{Value, json};
use std::time::Duration;

/// A frozen candidate with one input; returns (candidate_id, candidate_revision, base).
pub(crate) fn frozen(s: &Server) -> (String, String, String) {
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("app.txt", "hello\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    let c = cand(&v);
    assert_eq!(c["state"], "frozen");
    (
        c["candidate_id"].as_str().unwrap().into(),
        c["candidate_revision"].as_str().unwrap().into(),
        base,
    )
}

pub(crate) fn verify(
    s: &Server,
    cid: &str,
    rev: &str,
    argv: &[&str],
    timeout: u64,
    key: &str,
) -> String {
    let v = s.ok(ALICE, "integration.verify", json!({"workspace_id": "ws1", "candidate_id": cid,
        "candidate_revision": rev, "argv": argv, "timeout_seconds": timeout, "idempotency_key": key}));
    let vs = cand(&v)["verifications"].as_array().unwrap();
    vs.last().unwrap()["verification_id"]
        .as_str()
        .unwrap()
        .to_string()
}

pub(crate) fn verification(s: &Server, cid: &str, vid: &str) -> Value {
    let v = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    cand(&v)["verifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["verification_id"] == vid)
        .cloned()
        .unwrap_or_else(|| panic!("{vid} not on {cid}"))
}

pub(crate) fn settled(s: &Server, cid: &str, vid: &str) -> Value {
    let mut out = Value::Null;
    wait_for(
        || {
            out = verification(s, cid, vid);
            out["status"] != "running"
        },
        "verification settled",
    );
    out
}

fn request(
    s: &Server,
    cid: &str,
    rev: &str,
    ids: &[&str],
    action: &str,
    key: &str,
) -> (u16, Value) {
    s.call(ALICE, "integration.request_delivery", json!({"workspace_id": "ws1", "candidate_id": cid,
        "candidate_revision": rev, "verification_ids": ids, "action": action, "idempotency_key": key}))
}

pub(crate) fn approved_request(s: &Server, cid: &str, rev: &str, action: &str) -> (String, u64) {
    let vid = verify(s, cid, rev, &["true"], 60, &format!("v-{action}"));
    assert_eq!(settled(s, cid, &vid)["status"], "passed");
    let (st, v) = request(s, cid, rev, &[&vid], action, &format!("r-{action}"));
    assert_eq!(st, 200, "{v}");
    let req = cand(&v)["delivery_request"].clone();
    let (id, version) = (
        req["request_id"].as_str().unwrap().to_string(),
        req["request_version"].as_u64().unwrap(),
    );
    // alice requested it; distinct_approver (the default) makes another member decide.
    s.ok(
        DAVE,
        "integration.decide",
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "request_id": id, "request_version": version, "approve": true}),
    );
    (id, version)
}

/// The target after a delivery of `rev` onto `base` (history = "merge"): one commit on the
/// target whose tree is exactly the verified revision's, merging it; returns that commit.
pub(crate) fn landed(s: &Server, rev: &str, base: &str) -> String {
    let head = s.head();
    assert_ne!(
        head, rev,
        "the landed commit carries the story, so it is a new commit"
    );
    let tree = |c: &str| git(&s.repo, &["rev-parse", &format!("{c}^{{tree}}")]);
    assert_eq!(
        tree(&head),
        tree(rev),
        "the landed tree is the verified tree"
    );
    assert_eq!(
        git(&s.repo, &["rev-list", "--parents", "-n1", &head]),
        format!("{head} {base} {rev}")
    );
    head
}

pub(crate) fn deliver_body(cid: &str, id: &str, version: u64) -> Value {
    json!({"workspace_id": "ws1", "candidate_id": cid, "request_id": id, "request_version": version})
}

fn wait_container_of(s: &Server, cid: &str, vid: &str) -> String {
    let mut key = String::new();
    wait_for(
        || {
            let v = verification(s, cid, vid);
            key = v["creation_key"].as_str().unwrap().to_string();
            v["queued"] == false && !containers_with_key(&key).is_empty()
        },
        "container running",
    );
    key
}

#[test]
fn verify_refuses_wrong_revisions_and_bad_requests() {
    let s = Server::fake();
    let (cid, rev, base) = frozen(&s);
    let body = |rev: &str, argv: Value, timeout: Value| {
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "candidate_revision": rev, "argv": argv, "timeout_seconds": timeout, "idempotency_key": "k"})
    };
    let m = s.err(
        ALICE,
        "integration.verify",
        body(&base, json!(["true"]), json!(60)),
        "failed_precondition",
    );
    assert!(m.contains("not the candidate's frozen revision"), "{m}");
    let many: Vec<String> = (0..65).map(|i| i.to_string()).collect();
    let m = s.err(
        ALICE,
        "integration.verify",
        body(&rev, json!(many), json!(60)),
        "invalid_argument",
    );
    assert!(m.contains("argv has 65 entries; the limit is 64"), "{m}");
    let m = s.err(
        ALICE,
        "integration.verify",
        body(&rev, json!(["true"]), json!(1801)),
        "invalid_argument",
    );
    assert!(m.contains("1800"), "{m}");
    s.err(
        ALICE,
        "integration.verify",
        body(&rev, json!([]), json!(60)),
        "invalid_argument",
    );
    let mut extra = body(&rev, json!(["true"]), json!(60));
    extra["image"] = json!("alpine");
    let m = s.err(ALICE, "integration.verify", extra, "invalid_argument");
    assert!(
        m.contains("image"),
        "the client cannot choose the image: {m}"
    );
    s.err(
        RUN_A,
        "integration.verify",
        body(&rev, json!(["true"]), json!(60)),
        "permission_denied",
    );
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&shown)["verifications"],
        json!([]),
        "nothing was recorded"
    );
    // Idempotent: the same key and parameters do not run twice.
    let a = verify(&s, &cid, &rev, &["true"], 60, "same");
    let b = verify(&s, &cid, &rev, &["true"], 60, "same");
    assert_eq!(a, b);
    assert_eq!(settled(&s, &cid, &a)["status"], "passed");
    let v = verification(&s, &cid, &a);
    assert!(v["expires_at"].as_str() <= cand(&shown)["expires_at"].as_str());
}

#[test]
fn failing_then_passing_verifications_and_the_override_rule() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let (cid, rev, _) = frozen(&s);
    let argv = ["sh", "-c", "sleep 2; cat app.txt"];
    let v1 = verify(&s, &cid, &rev, &argv, 30, "v1");
    assert_eq!(settled(&s, &cid, &v1)["status"], "passed");
    let v2 = verify(&s, &cid, &rev, &argv, 1, "v2");
    let r2 = settled(&s, &cid, &v2);
    assert_eq!(r2["status"], "timed_out");
    let v3 = verify(&s, &cid, &rev, &argv, 30, "v3");
    let r3 = settled(&s, &cid, &v3);
    assert_eq!(r3["status"], "passed");
    assert_eq!(r3["output"], "hello\n");
    let vf = verify(
        &s,
        &cid,
        &rev,
        &["sh", "-c", "echo broken >&2; exit 3"],
        30,
        "vf",
    );
    assert_eq!(settled(&s, &cid, &vf)["exit_code"], 3);

    let (st, e) = request(&s, &cid, &rev, &[&v1], "update_ref", "r1");
    assert_eq!(st, 412);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overridden by the later timed_out"),
        "{e}"
    );
    let (st, e) = request(&s, &cid, &rev, &[&v2], "update_ref", "r2");
    assert_eq!(st, 412, "{e}");
    let (st, e) = request(&s, &cid, &rev, &[&vf], "update_ref", "rf");
    assert!(
        st == 412
            && e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("failed, not passed"),
        "{e}"
    );
    let (st, e) = request(&s, &cid, &rev, &[&v3, &v3], "update_ref", "dup");
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (400, Some("invalid_argument"))
    );
    let (st, _) = request(&s, &cid, &rev, &[], "update_ref", "empty");
    assert_eq!(st, 400);
    let (st, e) = request(&s, &cid, &rev, &["ver_nope"], "update_ref", "nope");
    assert_eq!(st, 412, "{e}");
    let (st, e) = request(&s, &cid, &rev, &[&v3], "merge", "bad-action");
    assert_eq!(st, 400, "{e}");
    let (st, v) = request(&s, &cid, &rev, &[&v3], "update_ref", "ok");
    assert_eq!(st, 200, "{v}");
    let req = &cand(&v)["delivery_request"];
    assert_eq!(req["request_version"], 1);
    assert_eq!(req["verification_ids"], json!([v3]));
    assert_eq!(req["state"], "requested");
    // A new request replaces the old one with a new version.
    let (_, v) = request(&s, &cid, &rev, &[&v3], "proposal", "ok2");
    assert_eq!(cand(&v)["delivery_request"]["request_version"], 2);
}

#[test]
fn expired_pass_is_refused_and_decide_is_human_only() {
    let s = Server::fake();
    let (cid, rev, _) = frozen(&s);
    let vid = verify(&s, &cid, &rev, &["true"], 60, "v");
    assert_eq!(settled(&s, &cid, &vid)["status"], "passed");
    let (st, v) = request(&s, &cid, &rev, &[&vid], "update_ref", "r");
    assert_eq!(st, 200);
    let req = cand(&v)["delivery_request"].clone();
    let decide = |token: &str, version: &Value| {
        s.call(token, "integration.decide", json!({"workspace_id": "ws1",
        "candidate_id": cid, "request_id": req["request_id"], "request_version": version, "approve": true}))
    };
    let (st, e) = decide(RUN_A, &req["request_version"]);
    assert_eq!(st, 403);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("human-only"),
        "{e}"
    );
    // Separation of duties: the member who requested the delivery cannot decide it.
    let (st, e) = decide(ALICE, &req["request_version"]);
    assert_eq!(st, 403, "{e}");
    assert_eq!(e["error"]["code"], "permission_denied");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("requested delivery") && m.contains("distinct_approver"),
        "{m}"
    );
    let after = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&after)["delivery_request"]["state"],
        "requested",
        "nothing changed"
    );
    let (st, _) = decide(DAVE, &json!(99));
    assert_eq!(st, 409, "a different request_version is fenced out");
    // A reason past its bound is refused naming the field and the bound, and nothing changes.
    let (st, e) = s.call(
        DAVE,
        "integration.decide",
        json!({"workspace_id": "ws1", "candidate_id": cid, "request_id": req["request_id"],
               "request_version": req["request_version"], "approve": true,
               "reason": "x".repeat(4097)}),
    );
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["field"], "reason", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("0..=4096 bytes"),
        "{e}"
    );
    let still = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&still)["delivery_request"]["state"], "requested");
    // Twenty-five hours later the pass has expired: a new request is refused.
    s.set_clock(time::OffsetDateTime::now_utc() + Duration::from_secs(25 * 3600));
    let (st, e) = request(&s, &cid, &rev, &[&vid], "update_ref", "late");
    assert_eq!(st, 412);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("expired"),
        "{e}"
    );
    let (st, e) = decide(DAVE, &req["request_version"]);
    assert_eq!(st, 412, "the request expired with its evidence: {e}");
}

#[test]
fn deliver_lands_once_refuses_a_moved_target_and_proposals_leave_it_alone() {
    // update_ref: two concurrent delivers land exactly once.
    let s = Server::fake();
    let (cid, rev, base) = frozen(&s);
    let (id, version) = approved_request(&s, &cid, &rev, "update_ref");
    let (a, b) = std::thread::scope(|sc| {
        let t1 = sc.spawn(|| {
            s.call(
                ALICE,
                "integration.deliver",
                deliver_body(&cid, &id, version),
            )
        });
        let t2 = sc.spawn(|| {
            s.call(
                ALICE,
                "integration.deliver",
                deliver_body(&cid, &id, version),
            )
        });
        (t1.join().unwrap(), t2.join().unwrap())
    });
    assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
    let ra = &cand(&a.1)["delivery_receipt"];
    assert_eq!(
        ra,
        &cand(&b.1)["delivery_receipt"],
        "both callers see the one receipt"
    );
    assert_eq!(ra["result"], "landed");
    assert_eq!(ra["previous_revision"], base);
    let head = landed(&s, &rev, &base);
    assert_eq!(ra["landed_revision"], head);
    assert_eq!(
        git(
            &s.repo,
            &[
                "rev-list",
                "--count",
                "--first-parent",
                &format!("{base}..main")
            ]
        ),
        "1"
    );
    assert_eq!(s.git_refs("refs/airlock/receipts/").len(), 1);
    let stored = git(
        &s.repo,
        &["cat-file", "blob", &format!("refs/airlock/receipts/{id}")],
    );
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(&stored, ra, "the receipt in Git is the receipt returned");
    // A retry after a lost response returns the original result.
    let again = s.ok(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
    );
    assert_eq!(&cand(&again)["delivery_receipt"], ra);

    // A moved target is refused with nothing changed.
    let s = Server::fake();
    let (cid, rev, base) = frozen(&s);
    let (id, version) = approved_request(&s, &cid, &rev, "update_ref");
    let moved = s.agent_commit("hotfix", &base, &[("hotfix.txt", "urgent\n")]);
    git(&s.repo, &["update-ref", "refs/heads/main", &moved]);
    let m = s.err(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
        "conflict",
    );
    assert!(m.contains("moved"), "{m}");
    assert_eq!(s.head(), moved, "target unchanged");
    assert!(s.git_refs("refs/airlock/receipts/").is_empty());
    assert!(
        cand(&s.ok(
            ALICE,
            "integration.show",
            json!({"workspace_id": "ws1", "candidate_id": cid})
        ))["delivery_receipt"]
            .is_null()
    );

    // Proposal: the target is untouched; the public proposal ref points at the landed commit
    // (the candidate merged onto the target, as it would land).
    let s = Server::fake();
    let (cid, rev, base) = frozen(&s);
    let (id, version) = approved_request(&s, &cid, &rev, "proposal");
    let v = s.ok(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
    );
    let r = &cand(&v)["delivery_receipt"];
    assert_eq!(r["result"], "proposed");
    let proposal = format!("refs/heads/airlock/proposal-{id}");
    assert_eq!(r["proposal_ref"], proposal);
    let proposed = git(&s.repo, &["rev-parse", &proposal]);
    assert_eq!(r["landed_revision"], proposed);
    assert_eq!(
        git(&s.repo, &["rev-list", "--parents", "-n1", &proposed]),
        format!("{proposed} {base} {rev}")
    );
    assert_eq!(s.head(), base, "the target did not move");
    // Deleting the candidate never removes the public proposal ref.
    s.ok(
        ALICE,
        "integration.delete",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(git(&s.repo, &["rev-parse", &proposal]), proposed);
}

#[test]
fn a_crash_between_the_ref_transaction_and_the_save_is_reconciled_from_the_receipt() {
    let mut s = Server::fake();
    let (cid, rev, base) = frozen(&s);
    let (id, version) = approved_request(&s, &cid, &rev, "update_ref");
    s.restart(Some("deliver_after_refs"));
    let resp = crate::support::request(
        &s.addr,
        "POST",
        "/api/v1/integration.deliver",
        Some(ALICE),
        deliver_body(&cid, &id, version).to_string().as_bytes(),
    );
    assert!(
        resp.is_none_or(|r| r.0 != 200),
        "the daemon died after the ref transaction"
    );
    s.wait_dead();
    let head = landed(&s, &rev, &base);
    let receipt: Value = serde_json::from_str(&git(
        &s.repo,
        &["cat-file", "blob", &format!("refs/airlock/receipts/{id}")],
    ))
    .unwrap();
    // Restart: start-up recovery reconciles from the receipt before the listener opens.
    s.restart(None);
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&shown)["delivery_receipt"],
        receipt,
        "restored exactly, not inferred"
    );
    assert_eq!(cand(&shown)["delivery_request"]["state"], "delivered");
    // And the client's retry returns that same original result.
    let again = s.ok(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
    );
    assert_eq!(cand(&again)["delivery_receipt"], receipt);
    assert_eq!(receipt["landed_revision"], head);
    assert_eq!(s.head(), head);
}

#[test]
fn cancel_delete_and_shutdown_settle_running_verifications() {
    if !docker() {
        return;
    }
    let mut s = Server::start_with("max_concurrent_verifications = 1");
    let (cid, rev, _) = frozen(&s);
    // Concurrency is bounded: the second verification waits, visibly queued.
    let v1 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v1");
    let key1 = wait_container_of(&s, &cid, &v1);
    let v2 = verify(&s, &cid, &rev, &["true"], 60, "v2");
    let q = verification(&s, &cid, &v2);
    assert_eq!(
        (q["status"].as_str(), q["queued"].as_bool()),
        (Some("running"), Some(true)),
        "{q}"
    );
    // Cancel the running one: its container is destroyed and it settles cancelled.
    let v = s.ok(
        ALICE,
        "integration.cancel_verification",
        json!({"workspace_id": "ws1", "candidate_id": cid, "verification_id": v1}),
    );
    let c1 = cand(&v)["verifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["verification_id"] == v1.as_str())
        .unwrap()
        .clone();
    assert_eq!(c1["status"], "cancelled");
    assert!(containers_with_key(&key1).is_empty());
    assert_eq!(
        settled(&s, &cid, &v2)["status"],
        "passed",
        "the queued one ran once a slot freed"
    );

    // Daemon shutdown during a run: no container left, the verification settled.
    let v3 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v3");
    let key3 = wait_container_of(&s, &cid, &v3);
    assert_eq!(s.stop(), Some(0));
    assert!(containers_with_key(&key3).is_empty());
    s.restart(None);
    let r3 = verification(&s, &cid, &v3);
    assert_eq!(r3["status"], "cancelled", "{r3}");
    let artifact = s
        .dir
        .path()
        .join("data/artifacts/verifications")
        .join(format!("{v3}.json"));
    assert!(artifact.exists(), "settled through the artifact protocol");

    // Deleting the candidate cancels its running verification first.
    let v4 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v4");
    let key4 = wait_container_of(&s, &cid, &v4);
    s.ok(
        ALICE,
        "integration.delete",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert!(containers_with_key(&key4).is_empty());
    // Verification artifacts and rows share the candidate's deletion boundary (seed 001): after
    // the fence and the cancellation, every one of them is gone with the candidate.
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&shown)["verifications"], json!([]), "{shown}");
    let artifacts = s.dir.path().join("data/artifacts/verifications");
    for v in [&v3, &v4] {
        assert!(
            !artifacts.join(format!("{v}.json")).exists(),
            "{v} artifact left"
        );
        let out = std::process::Command::new(BIN)
            .args(["verification", "show", v, "--data-dir"])
            .arg(s.dir.path().join("data"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{v} row left");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    }
}

#[test]
fn changing_candidate_owned_refs_during_a_run_is_source_changed() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let (cid, rev, _) = frozen(&s);
    let vid = verify(&s, &cid, &rev, &["sleep", "3"], 60, "v");
    wait_container_of(&s, &cid, &vid);
    git(
        &s.repo,
        &[
            "update-ref",
            "-d",
            &format!("refs/airlock/candidates/{cid}/inputs/0"),
        ],
    );
    let r = settled(&s, &cid, &vid);
    assert_eq!(r["status"], "source_changed", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("candidate-owned evidence changed"),
        "{r}"
    );
}

#[test]
fn a_daemon_killed_mid_verification_recovers_it_as_error_without_rerunning() {
    if !docker() {
        return;
    }
    let mut s = Server::start();
    let (cid, rev, _) = frozen(&s);
    let since = unix_now();
    let vid = verify(
        &s,
        &cid,
        &rev,
        &["sh", "-c", "echo started; sleep 60"],
        120,
        "v",
    );
    let key = wait_container_of(&s, &cid, &vid);
    s.kill9();
    assert_eq!(
        containers_with_key(&key).len(),
        1,
        "SIGKILL left the container behind"
    );
    // Start-up recovery destroys it and settles the verification before the listener opens.
    s.restart(None);
    assert!(containers_with_key(&key).is_empty());
    let v = verification(&s, &cid, &vid);
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["error"], "interrupted before a result was recorded");
    assert_eq!(create_events(&key, since), 1, "never rerun");
    let (st, _) = request(&s, &cid, &rev, &[&vid], "update_ref", "r");
    assert_eq!(st, 412, "an interrupted verification is not evidence");
}

#[test]
fn a_positional_array_body_cannot_decide_a_request() {
    let s = Server::fake();
    let (cid, rev, _) = frozen(&s);
    let vid = verify(&s, &cid, &rev, &["true"], 60, "v");
    assert_eq!(settled(&s, &cid, &vid)["status"], "passed");
    let (st, v) = request(&s, &cid, &rev, &[&vid], "update_ref", "r");
    assert_eq!(st, 200, "{v}");
    let req = cand(&v)["delivery_request"].clone();
    // The shape that used to approve: fields bound by position, names never checked.
    let (st, e) = s.call(
        DAVE,
        "integration.decide",
        json!(["ws1", cid, req["request_id"], req["request_version"], true]),
    );
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_argument");
    let after = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&after)["delivery_request"]["state"], "requested");
}

#[test]
fn verification_is_refused_with_resource_exhausted_when_the_data_dir_is_short_of_space() {
    let s = Server::fake_with("min_free_bytes = 1000000000000000000\n");
    let (cid, rev, _) = frozen(&s);
    let m = s.err(
        ALICE,
        "integration.verify",
        json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
               "argv": ["true"], "timeout_seconds": 60, "idempotency_key": "v"}),
        "resource_exhausted",
    );
    assert!(m.contains("min_free_bytes"), "{m}");
    assert!(
        !m.contains(&*s.dir.path().to_string_lossy()),
        "no host path: {m}"
    );
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&shown)["verifications"],
        json!([]),
        "nothing was recorded"
    );
}

#[test]
fn serve_exits_non_zero_when_a_worker_could_not_settle_its_result() {
    if !docker() {
        return;
    }
    let mut s = Server::start();
    let (cid, rev, _) = frozen(&s);
    let vid = verify(&s, &cid, &rev, &["sleep", "3"], 60, "v");
    let key = wait_container_of(&s, &cid, &vid);
    // Someone else settles the row under the worker: its compare-and-set from running fails,
    // so its result cannot be made durable as its own.
    let db = rusqlite::Connection::open(s.dir.path().join("data/airlock.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    let n = db
        .execute(
            "UPDATE verifications SET status = 'error' WHERE verification_id = ?1",
            [&vid],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(db);
    // The job ends on its own: its container is destroyed, then the worker's settle fails.
    // Stopping waits for a worker past its run, so the failure is in before the exit code.
    wait_for(
        || containers_with_key(&key).is_empty(),
        "the job's container destroyed after its run",
    );
    assert_eq!(
        s.stop(),
        Some(1),
        "the persistence failure is reported by the exit code"
    );
}

/// A ref transaction git refuses is never reported as a competing change: a ref another
/// process holds locked is `unavailable` (retry), nothing moved, and the same delivery lands
/// once the lock is gone.
#[test]
fn a_locked_target_ref_is_unavailable_and_the_retry_lands() {
    let s = Server::fake();
    let (cid, rev, base) = frozen(&s);
    let (id, version) = approved_request(&s, &cid, &rev, "update_ref");
    let lock = s.repo.join(".git/refs/heads/main.lock");
    std::fs::write(&lock, "").unwrap();
    let m = s.err(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
        "unavailable",
    );
    assert!(m.contains("lock") && m.contains("retry"), "{m}");
    assert_eq!(s.head(), base, "nothing moved");
    assert!(s.git_refs("refs/airlock/receipts/").is_empty());
    std::fs::remove_file(&lock).unwrap();
    let v = s.ok(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
    );
    assert_eq!(cand(&v)["delivery_receipt"]["result"], "landed", "{v}");
    landed(&s, &rev, &base);
}
