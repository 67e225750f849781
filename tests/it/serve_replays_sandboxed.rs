//! The idempotent methods that reach the sandbox or the worktree, raced with themselves on real
//! Docker and a real worktree: `patch.validate` (git's dry run in the sandbox), `patch.apply`
//! (the journaled install) and `transaction.control` (a compensation, which claims and proposes
//! on the caller's behalf). Two calls with one key and the same parameters are released
//! together from a barrier with jitter on both sides, round after round; both answer 200 with
//! the same reply byte for byte, and the work is done once: one validation, one transaction,
//! one file installed, one compensating proposal per round.

use crate::serve_replays_governed::raced;
use crate::support::daemon::{ALICE, Server, wait_for};
use crate::support::governed::reviewed;
use serde_json::{Value, json};

/// Rounds per method: each round runs a dry run and an apply in the sandbox.
const ROUNDS: usize = 4;

const EXTRA: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                     [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

fn creation(path: &str) -> String {
    format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{path}\n"
    )
}

fn count(s: &Server, method: &str, body: Value, field: &str) -> usize {
    s.ok(ALICE, method, body)[field]
        .as_array()
        .unwrap_or_else(|| panic!("{method}: no {field}"))
        .len()
}

#[test]
fn validate_apply_and_control_raced_with_themselves_do_their_work_once() {
    // The dry run runs git in the git image.
    if !crate::toolchain::built("git") {
        return;
    }
    let s = Server::governed_with(EXTRA);
    for round in 0..ROUNDS {
        let path = format!("s{round}/f.txt");
        s.ok(
            ALICE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": format!("directory:s{round}"),
                   "mode": "write", "idempotency_key": format!("c-{round}")}),
        );
        let p = s.ok(
            ALICE,
            "proposal.create",
            json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
                   "patch": creation(&path), "idempotency_key": format!("p-{round}")}),
        );
        let (id, rev) = reviewed(&s, &p, &format!("s{round}"));

        // patch.validate: one validation, one answer.
        let v = raced(
            &s,
            ALICE,
            "patch.validate",
            json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                   "idempotency_key": format!("val-{round}")}),
            round,
        );
        let vid = v["validation"]["validation_id"].clone();
        assert!(vid.is_string(), "{v}");
        let validations = json!({"workspace_id": "ws1", "proposal_id": id});
        assert_eq!(
            count(&s, "patch.validation_list", validations, "validations"),
            1,
            "round {round}: one validation for one key"
        );
        wait_for(
            || {
                s.ok(
                    ALICE,
                    "patch.validation_show",
                    json!({"workspace_id": "ws1", "validation_id": vid}),
                )["validation"]["complete"]
                    == true
            },
            "the validation settles",
        );

        // patch.apply: one transaction, the file installed once.
        let a = raced(
            &s,
            ALICE,
            "patch.apply",
            json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": vid,
                   "idempotency_key": format!("apply-{round}")}),
            round,
        );
        assert_eq!(a["transaction"]["status"], "applied", "{a}");
        let tx = a["transaction"]["transaction_id"].clone();
        assert_eq!(
            count(
                &s,
                "transaction.list",
                json!({"workspace_id": "ws1", "proposal_id": id}),
                "transactions"
            ),
            1,
            "round {round}: one transaction for one key"
        );
        assert_eq!(
            std::fs::read_to_string(s.repo.join(&path)).unwrap(),
            format!("{path}\n")
        );

        // transaction.control compensate: one compensating proposal.
        let before = count(
            &s,
            "proposal.list",
            json!({"workspace_id": "ws1", "limit": 100}),
            "proposals",
        );
        let c = raced(
            &s,
            ALICE,
            "transaction.control",
            json!({"workspace_id": "ws1", "transaction_id": tx, "action": "compensate",
                   "reason": "roll back", "idempotency_key": format!("comp-{round}")}),
            round,
        );
        assert!(c["proposal"]["proposal_id"].is_string(), "{c}");
        assert_eq!(
            count(
                &s,
                "proposal.list",
                json!({"workspace_id": "ws1", "limit": 100}),
                "proposals"
            ),
            before + 1,
            "round {round}: one compensation for one key"
        );
    }
}
