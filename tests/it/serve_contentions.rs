//! Contentions over a real daemon on loopback: one open row per requester and challenged
//! claim, what each state allows, resolutions applied exactly once (a transfer re-checked and
//! a new token), replays, and paging.

use crate::support::daemon::{ALICE, BOB, DAVE, RUN_A, Server};
use serde_json::{Value, json};

fn claim(v: &Value) -> &Value {
    &v["claim"]
}

#[test]
fn contentions_are_listed_with_what_is_allowed_and_resolved_exactly_once() {
    let s = Server::fake_governed();
    let (_, a) = s.acquire(ALICE, "file:README", "write", "a1");
    let a = claim(&a).clone();
    for key in ["d1", "d2"] {
        assert_eq!(s.acquire(DAVE, "file:README", "write", key).0, 409);
    }
    // The resource changes while contended: a transfer must take the hash anew.
    std::fs::write(s.repo.join("README"), "changed while contended\n").unwrap();
    let list = s.ok(
        ALICE,
        "claim.contentions",
        json!({"workspace_id": "ws1", "state": "open"}),
    );
    let items = list["contentions"].as_array().unwrap();
    assert_eq!(
        items.len(),
        1,
        "one open contention per requester and claim: {list}"
    );
    let c = &items[0];
    assert_eq!(
        (
            c["agent"].as_str(),
            c["holder"].as_str(),
            c["mode"].as_str()
        ),
        (Some("member:dave"), Some("member:alice"), Some("write"))
    );
    assert_eq!(c["challenged_claim"], a["claim_id"]);
    assert_eq!(c["task_id"], "t1");
    assert_eq!(c["lease_expires_at"], a["expires_at"]);
    assert_eq!(
        c["allowed_resolutions"],
        json!(["keep_owner", "reject_contender", "transfer", "extend_lease"])
    );
    let resolve = |res: &str, key: &str| {
        s.call(
            ALICE,
            "claim.resolve_contention",
            json!({"workspace_id": "ws1", "contention_id": c["contention_id"],
            "resolution": res, "reason": "because", "idempotency_key": key}),
        )
    };
    let (st, v) = resolve("split", "r0");
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not supported")
    );
    s.err(
        DAVE,
        "claim.resolve_contention",
        json!({"workspace_id": "ws1", "contention_id": c["contention_id"],
        "resolution": "transfer", "reason": "mine", "idempotency_key": "x"}),
        "permission_denied",
    );
    let (st, t) = resolve("transfer", "r1");
    assert_eq!(st, 200, "{t}");
    assert_eq!(t["claim"]["holder"], "member:dave");
    assert_eq!(t["claim"]["claim_id"], a["claim_id"]);
    assert_eq!(t["claim"]["fencing_token"], 2, "a transfer is a new grant");
    let now_hash = s.ok(
        DAVE,
        "resource.show",
        json!({"workspace_id": "ws1", "resource_id": "file:README"}),
    );
    assert_eq!(
        t["claim"]["base_hash"], now_hash["resource"]["current_hash"],
        "the base hash is taken at transfer"
    );
    assert_ne!(t["claim"]["base_hash"], a["base_hash"]);
    assert_eq!(
        resolve("transfer", "r1").1,
        t,
        "same key: the original answer"
    );
    let (st, v) = resolve("keep_owner", "r2");
    assert_eq!(st, 412, "already resolved: {v}");
    let done = s.ok(ALICE, "claim.contentions", json!({"workspace_id": "ws1"}));
    assert_eq!(done["contentions"][0]["state"], "resolved");
    assert_eq!(done["contentions"][0]["allowed_resolutions"], json!([]));
    assert_eq!(done["next_cursor"], Value::Null, "one short page");

    // A transfer that would conflict with a third claim changes nothing.
    let (_, b) = s.acquire(ALICE, "file:x.txt", "read", "a2");
    let b = claim(&b).clone();
    assert_eq!(s.acquire(RUN_A, "file:x.txt", "read", "r3").0, 200);
    assert_eq!(s.acquire(DAVE, "file:x.txt", "exclusive", "d3").0, 409);
    let open = s.ok(
        ALICE,
        "claim.contentions",
        json!({"workspace_id": "ws1", "state": "open"}),
    );
    let c2 = open["contentions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["challenged_claim"] == b["claim_id"])
        .unwrap()
        .clone();
    let (st, v) = s.call(
        ALICE,
        "claim.resolve_contention",
        json!({"workspace_id": "ws1", "contention_id": c2["contention_id"],
        "resolution": "transfer", "reason": "try", "idempotency_key": "r4"}),
    );
    assert_eq!(st, 409, "{v}");
    let still = s.ok(
        ALICE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": b["claim_id"]}),
    );
    assert_eq!(
        (
            claim(&still)["holder"].as_str(),
            claim(&still)["fencing_token"].as_i64()
        ),
        (Some("member:alice"), b["fencing_token"].as_i64())
    );
    // Extending the lease instead resolves it, by the claim's own TTL, never shorter.
    let (st, e) = s.call(
        ALICE,
        "claim.resolve_contention",
        json!({"workspace_id": "ws1", "contention_id": c2["contention_id"],
        "resolution": "extend_lease", "reason": "keep going", "idempotency_key": "r5"}),
    );
    assert_eq!(st, 200, "{e}");
    assert!(e["claim"]["expires_at"].as_str().unwrap() >= b["expires_at"].as_str().unwrap());
}

#[test]
fn contentions_page_with_a_cursor_and_filter_by_resource_before_the_limit() {
    let s = Server::fake_governed();
    for i in 0..5 {
        let (st, _) = s.acquire(ALICE, &format!("file:f{i}"), "exclusive", &format!("a{i}"));
        assert_eq!(st, 200);
        assert_eq!(
            s.acquire(DAVE, &format!("file:f{i}"), "read", &format!("d{i}"))
                .0,
            409
        );
    }
    let mut seen = vec![];
    let mut cursor = Value::Null;
    loop {
        let v = s.ok(
            BOB,
            "claim.contentions",
            json!({"workspace_id": "ws1", "limit": 2, "cursor": cursor}),
        );
        seen.extend(
            v["contentions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["requested_resource_id"].as_str().unwrap().to_string()),
        );
        cursor = v["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    assert_eq!(
        seen,
        ["file:f0", "file:f1", "file:f2", "file:f3", "file:f4"]
    );
    // The resource filter applies before the page is cut: f4's contention is on page one.
    let v = s.ok(
        BOB,
        "claim.contentions",
        json!({"workspace_id": "ws1", "limit": 1, "resource_id": "file:f4"}),
    );
    assert_eq!(v["contentions"][0]["requested_resource_id"], "file:f4");
    s.err(
        BOB,
        "claim.contentions",
        json!({"workspace_id": "ws1", "cursor": "bogus"}),
        "invalid_argument",
    );
}
