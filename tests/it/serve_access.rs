//! `airlock serve`: authentication, membership and admission, submissions checked against
//! durable packets, body and field bounds, evidence idempotency.
//! Real HTTP on loopback, real git, real SQLite; jobs on the scripted fake runtime.

use crate::support::*;
use serde_json::json;

#[test]
fn authentication_membership_and_admission() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    let show = json!({"workspace_id": "ws1", "candidate_id": cid});

    // Missing and wrong tokens.
    let (st, e) = call(&s.addr, None, "integration.show", &show);
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let (st, e) = call(&s.addr, Some("not-a-token"), "integration.show", &show);
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let (st, _) = call(
        &s.addr,
        Some(&ALICE[..ALICE.len() - 1]),
        "integration.show",
        &show,
    );
    assert_eq!(st, 401);

    // A non-member learns nothing about ws1's candidates.
    let m = s.err(CAROL, "integration.show", show.clone(), "permission_denied");
    assert!(m.contains("not a member"));
    let ghost =
        json!({"workspace_id": "ws1", "candidate_id": "cand_00000000000000000000000000000000"});
    assert_eq!(
        s.err(CAROL, "integration.show", ghost, "permission_denied"),
        m,
        "same answer either way"
    );
    // Asking through a workspace it belongs to: the ws1 candidate is simply not found.
    let other_ws = json!({"workspace_id": "ws2", "candidate_id": cid});
    let nf = s.err(CAROL, "integration.show", other_ws, "not_found");
    let nf2 = s.err(
        CAROL,
        "integration.show",
        json!({"workspace_id": "ws2", "candidate_id": "cand_00000000000000000000000000000000"}),
        "not_found",
    );
    assert_eq!(
        nf.replace(&cid, "X"),
        nf2.replace("cand_00000000000000000000000000000000", "X")
    );
    s.err(
        CAROL,
        "integration.list",
        json!({"workspace_id": "ws1"}),
        "permission_denied",
    );
    s.err(
        "whatever",
        "integration.list",
        json!({"workspace_id": "nope"}),
        "unauthenticated",
    );

    // View-only members read but cannot integrate.
    s.ok(BOB, "integration.show", show.clone());
    s.err(
        BOB,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "bob"),
        "permission_denied",
    );
    s.err(BOB, "integration.delete", show.clone(), "permission_denied");

    // Run actors: evidence for their own run only; candidate mutations refused by admission.
    let a2 = s.agent_commit("a2", &base, &[("a2.txt", "a2\n")]);
    let own = s.ok(
        RUN_A,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_a",
        "base_revision": base, "revision": a2, "idempotency_key": "run-own"}),
    );
    assert_eq!(own["evidence"]["run_id"], "run_a");
    s.err(
        RUN_A,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_b",
        "base_revision": base, "revision": a2, "idempotency_key": "run-other"}),
        "permission_denied",
    );
    let m = s.err(
        RUN_A,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "by-run"),
        "permission_denied",
    );
    assert!(m.contains("run actors"), "{m}");
    s.err(
        RUN_A,
        "integration.delete",
        show.clone(),
        "permission_denied",
    );
    let mut with_mission = s.prepare_body(vec![sub.clone()], &base, "mission");
    with_mission["mission_id"] = json!("m-1");
    let m = s.err(
        ALICE,
        "integration.prepare",
        with_mission,
        "failed_precondition",
    );
    assert!(m.contains("mission_id"), "{m}");
}

#[test]
fn submissions_are_validated_against_durable_packets() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let b = s.agent_commit("b", &base, &[("b.txt", "b\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let cases = [
        (
            json!({"workspace_id": "ws2", "run_id": "run_a", "evidence_ref": sub["evidence_ref"], "retained_revision": a}),
            "workspace",
        ),
        (
            json!({"workspace_id": "ws1", "run_id": "run_x", "evidence_ref": sub["evidence_ref"], "retained_revision": a}),
            "run",
        ),
        (
            json!({"workspace_id": "ws1", "run_id": "run_a", "evidence_ref": sub["evidence_ref"], "retained_revision": b}),
            "retained",
        ),
        (
            json!({"workspace_id": "ws1", "run_id": "run_a", "evidence_ref": "evi_missing", "retained_revision": a}),
            "does not exist",
        ),
    ];
    for (i, (bad, needle)) in cases.into_iter().enumerate() {
        let m = s.err(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub.clone(), bad], &base, &format!("bad-{i}")),
            "failed_precondition",
        );
        assert!(m.contains("submissions[1]") && m.contains(needle), "{m}");
    }
    let mut needs_transcript = s.prepare_body(vec![sub.clone()], &base, "tr");
    needs_transcript["required_sources"] = json!(["git", "transcript"]);
    let m = s.err(
        ALICE,
        "integration.prepare",
        needs_transcript,
        "failed_precondition",
    );
    assert!(m.contains("\"transcript\""), "{m}");
    let mut unknown = s.prepare_body(vec![sub.clone()], &base, "src");
    unknown["required_sources"] = json!(["smell"]);
    s.err(ALICE, "integration.prepare", unknown, "invalid_argument");
    for (field, value) in [
        ("target_ref", json!("main")),
        ("expected_target_revision", json!("abc")),
    ] {
        let mut body = s.prepare_body(vec![sub.clone()], &base, "f");
        body[field] = value;
        let m = s.err(ALICE, "integration.prepare", body, "invalid_argument");
        assert!(m.contains(field), "{m}");
    }
    s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![], &base, "empty"),
        "invalid_argument",
    );
    let listed = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        listed["candidates"],
        json!([]),
        "no refused prepare created a candidate"
    );
}

#[test]
fn bodies_fields_list_bounds_and_health() {
    let s = Server::fake();
    let base = s.head();
    // Unknown fields are refused, naming the field.
    let m = s.err(
        ALICE,
        "integration.list",
        json!({"workspace_id": "ws1", "owner": "alice"}),
        "invalid_argument",
    );
    assert!(m.contains("owner"), "{m}");
    let m = s.err(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "r", "base_revision": base,
        "revision": base, "idempotency_key": "k", "actor": "admin"}),
        "invalid_argument",
    );
    assert!(m.contains("actor"), "{m}");
    // Oversized bodies per method.
    let big = vec![b' '; 70 * 1024];
    let (st, v) = call_raw(&s.addr, Some(ALICE), "integration.show", &big);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (413, Some("resource_exhausted"))
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("65536"));
    let huge = format!(
        "{{\"workspace_id\":\"ws1\",\"candidate_id\":\"x\",\"files\":[],\"idempotency_key\":\"k\",\"pad\":\"{}\"}}",
        "x".repeat(17 * 1024 * 1024)
    );
    let (st, _) = call_raw(&s.addr, Some(ALICE), "integration.resolve", huge.as_bytes());
    assert_eq!(st, 413);
    let transcript = "t".repeat(16 * 1024 * 1024 + 1);
    let m = s.err(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "r", "base_revision": base,
        "revision": base, "transcript": transcript, "idempotency_key": "big"}),
        "resource_exhausted",
    );
    assert!(m.contains("16777216"), "{m}");
    s.err(ALICE, "integration.unknown", json!({}), "not_found");
    let (st, _) = call_raw(&s.addr, Some(ALICE), "integration.list", b"{not json");
    assert_eq!(st, 400);
    // List bounds.
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    for i in 0..3 {
        s.ok(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub.clone()], &base, &format!("p{i}")),
        );
    }
    let all = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    let list = all["candidates"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    let keys: Vec<&str> = list[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "candidate_id",
            "candidate_revision",
            "created_at",
            "delivery_receipt",
            "delivery_request",
            "expected_target_revision",
            "expires_at",
            "state",
            "target_ref",
            "workspace_id"
        ]
    );
    assert!(
        list[0]["created_at"].as_str() >= list[2]["created_at"].as_str(),
        "newest first"
    );
    assert_eq!(
        s.ok(
            ALICE,
            "integration.list",
            json!({"workspace_id": "ws1", "limit": 2})
        )["candidates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    s.ok(
        ALICE,
        "integration.list",
        json!({"workspace_id": "ws1", "limit": 100}),
    );
    for bad in [0, 101] {
        let m = s.err(
            ALICE,
            "integration.list",
            json!({"workspace_id": "ws1", "limit": bad}),
            "invalid_argument",
        );
        assert!(m.contains("100"), "{m}");
    }
    // Health.
    let (st, body) = request(&s.addr, "GET", "/healthz", None, b"").unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let (st, _) = request(&s.addr, "GET", "/readyz", None, b"").unwrap();
    assert_eq!(st, 200);
}

#[test]
fn evidence_idempotency_and_show() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let body = json!({"workspace_id": "ws1", "run_id": "run_a", "base_revision": base, "revision": a,
                      "transcript": "log", "idempotency_key": "e1"});
    let first = s.ok(ALICE, "evidence.record", body.clone());
    assert_eq!(
        s.ok(ALICE, "evidence.record", body.clone()),
        first,
        "an exact retry returns the same packet"
    );
    let mut changed = body.clone();
    changed["transcript"] = json!("other log");
    s.err(ALICE, "evidence.record", changed, "conflict");
    let e = &first["evidence"];
    assert_eq!(e["sources"], json!(["git", "transcript"]));
    assert_eq!(e["transcript_sha256"], sha("log"));
    let r = e["evidence_ref"].as_str().unwrap();
    assert_eq!(
        git(
            &s.repo,
            &["rev-parse", &format!("refs/airlock/evidence/{r}")]
        ),
        a
    );
    // Branch deletion and gc cannot lose the retained revision.
    git(&s.repo, &["branch", "-D", "a"]);
    git(&s.repo, &["gc", "-q", "--prune=now"]);
    assert_eq!(git(&s.repo, &["cat-file", "-t", &a]), "commit");
    let shown = s.ok(
        BOB,
        "evidence.show",
        json!({"workspace_id": "ws1", "evidence_ref": r}),
    );
    assert_eq!(shown, first);
    s.err(
        CAROL,
        "evidence.show",
        json!({"workspace_id": "ws2", "evidence_ref": r}),
        "not_found",
    );
    let m = s.err(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_a",
        "base_revision": base, "revision": "f".repeat(40), "idempotency_key": "missing"}),
        "failed_precondition",
    );
    assert!(m.contains("revision"), "{m}");
}

/// The method registry is the router: every entry reaches its handler (a body missing its
/// fields is refused by the handler's own parser, never as an unknown method), and every entry
/// is documented in the API reference.
#[test]
fn every_registered_method_is_routed_and_documented() {
    let s = crate::support::daemon::Server::fake_governed();
    let reference = crate::support::markdown::document("docs/api.md");
    for m in airlock::api::methods::METHODS {
        let (status, v) = s.call(crate::support::daemon::ALICE, m.name, serde_json::json!({}));
        assert_ne!(status, 200, "{}: an empty body was accepted: {v}", m.name);
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            !msg.contains("unknown method"),
            "{} is registered but not dispatched: {v}",
            m.name
        );
        assert!(
            reference.contains(&format!("\n### `{}`\n", m.name)),
            "{} has no section in docs/api.md",
            m.name
        );
    }
}

/// A seed client's request that Airlock refuses on purpose is told which difference refused it,
/// and the page it points to exists.
#[test]
fn seed_client_requests_refused_on_purpose_name_the_difference() {
    use crate::support::daemon::{ALICE, Server};
    let s = Server::fake_governed();
    let page = crate::support::markdown::document("docs/differences.md");
    assert!(page.starts_with("# Differences from the earlier systems\n"));
    let m = s.err(
        ALICE,
        "claim.acquire",
        serde_json::json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:README",
                           "mode": "write", "agent_id": "mallory", "idempotency_key": "k"}),
        "invalid_argument",
    );
    assert!(
        m.contains("agent_id")
            && m.contains("bearer token")
            && m.contains("Differences from the earlier systems"),
        "{m}"
    );
    let m = s.err(ALICE, "approval.decide", serde_json::json!({}), "not_found");
    assert!(m.contains("human.decide"), "{m}");
    let m = s.err(
        ALICE,
        "transaction.control",
        serde_json::json!({"workspace_id": "ws1", "transaction_id": "txn_x", "action": "apply",
                           "idempotency_key": "k"}),
        "invalid_argument",
    );
    assert!(m.contains("patch.apply"), "{m}");
    let m = s.err(
        ALICE,
        "transaction.control",
        serde_json::json!({"workspace_id": "ws1", "transaction_id": "txn_x", "action": "stage",
                           "idempotency_key": "k"}),
        "failed_precondition",
    );
    assert!(m.contains("stage is not offered"), "{m}");
    let m = s.err(
        ALICE,
        "proposal.create",
        serde_json::json!({"workspace_id": "ws1", "task_id": "t", "title": "t", "summary_md": "s",
                           "patch_path": "x.patch", "idempotency_key": "k"}),
        "invalid_argument",
    );
    assert!(m.contains("patch_base64"), "{m}");
    // Nothing they named was created.
    let claims = s.ok(
        ALICE,
        "claim.list",
        serde_json::json!({"workspace_id": "ws1"}),
    );
    assert_eq!(claims["claims"], serde_json::json!([]), "{claims}");
}
