//! The governed flow's common steps over HTTP, in workspace `ws1`: alice proposes and applies,
//! bob (a `reviewer` in the tests' policies) votes.

use super::daemon::{ALICE, BOB, Server, wait_for};
use serde_json::{Value, json};

/// alice's write claim on `resource` for task `t1`; returns the claim.
pub fn claimed(s: &Server, resource: &str, key: &str) -> Value {
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": resource,
               "mode": "write", "idempotency_key": key}),
    )["claim"]
        .clone()
}

/// Requests review of the proposal `p` (a `proposal.create` answer) and casts bob's approving
/// vote on its current revision; returns (proposal id, revision).
pub fn reviewed(s: &Server, p: &Value, key: &str) -> (Value, String) {
    let id = p["proposal"]["proposal_id"].clone();
    let rev = p["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": format!("r-{key}")}),
    );
    s.ok(
        BOB,
        "vote.cast",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "vote": "approve",
               "reason_md": "ok", "idempotency_key": format!("v-{key}")}),
    );
    (id, rev)
}

/// `patch.validate`, then polls `patch.validation_show` until its tests settle; returns the
/// settled validation.
pub fn validated(s: &Server, id: &Value, rev: &str, key: &str) -> Value {
    let v = s.ok(
        ALICE,
        "patch.validate",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
               "idempotency_key": format!("val-{key}")}),
    )["validation"]
        .clone();
    let vid = v["validation_id"].clone();
    let mut last = v;
    wait_for(
        || {
            last = s.ok(
                ALICE,
                "patch.validation_show",
                json!({"workspace_id": "ws1", "validation_id": vid}),
            )["validation"]
                .clone();
            last["complete"] == true
        },
        "the validation's tests settle",
    );
    last
}
