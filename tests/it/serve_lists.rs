//! The list methods a reviewer or an orchestrator pages through (fake runtime: list logic):
//! `integration.list` with cursors and its state, target and delivery-request filters (the
//! pending delivery requests in one call), and `human.approval_list`, whose default answers
//! only the approvals the caller may decide. Bad cursors and filters are refused naming the
//! field.

use crate::support::daemon::{ALICE, BOB, ERIN, Server};
use crate::support::repo::git;
use serde_json::{Value, json};

fn prepare(s: &Server, n: usize) -> Value {
    let base = s.head();
    let a = s.agent_commit(&format!("b{n}"), &base, &[(&format!("f{n}.txt"), "x\n")]);
    let sub = s.evidence(&format!("run_{n}"), &base, &a, None);
    s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, &format!("p{n}")),
    )["candidate"]
        .clone()
}

fn ids(page: &Value) -> Vec<String> {
    page["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["candidate_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn integration_list_pages_newest_first_and_filters() {
    let s = Server::fake();
    let made: Vec<String> = (0..3)
        .map(|n| prepare(&s, n)["candidate_id"].as_str().unwrap().to_string())
        .collect();
    let list = |extra: Value| {
        let mut body = json!({"workspace_id": "ws1"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s.ok(ALICE, "integration.list", body)
    };
    let first = list(json!({"limit": 2}));
    assert_eq!(ids(&first), vec![made[2].clone(), made[1].clone()]);
    let second = list(json!({"limit": 2, "cursor": first["next_cursor"]}));
    assert_eq!(ids(&second), vec![made[0].clone()]);
    assert_eq!(second["next_cursor"], Value::Null);
    assert_eq!(ids(&list(json!({"state": "frozen"}))).len(), 3);
    assert_eq!(ids(&list(json!({"state": "conflicted"}))).len(), 0);
    assert_eq!(
        ids(&list(json!({"target_ref": "refs/heads/main"}))).len(),
        3
    );
    assert_eq!(
        ids(&list(json!({"target_ref": "refs/heads/other"}))).len(),
        0
    );

    // A delivery request on one of them: the pending requests are one filter away.
    let c = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": made[1]}),
    )["candidate"]
        .clone();
    let rev = c["candidate_revision"].as_str().unwrap();
    let (cid, vid) = (
        made[1].as_str(),
        crate::delivery::verify(&s, &made[1], rev, &["true"], 60, "v"),
    );
    assert_eq!(crate::delivery::settled(&s, cid, &vid)["status"], "passed");
    s.ok(
        ALICE,
        "integration.request_delivery",
        json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
               "verification_ids": [vid], "action": "update_ref", "idempotency_key": "r"}),
    );
    // dave may decide it: it waits for him on the overview; alice asked, so not for her.
    let dave = crate::serve_ui::sign_in(&s, crate::support::daemon::DAVE);
    let (_, _, overview) = crate::serve_ui::get(&s, &dave, "/ui/");
    assert!(
        overview.contains("decide the delivery request (by member:alice)"),
        "{overview}"
    );
    assert!(overview.contains(&made[1]));
    let alice = crate::serve_ui::sign_in(&s, ALICE);
    let (_, _, hers) = crate::serve_ui::get(&s, &alice, "/ui/");
    assert!(
        !hers.contains("decide the delivery request"),
        "distinct_approver: {hers}"
    );
    assert!(hers.contains("Nothing is waiting for you"), "{hers}");
    let pending = list(json!({"request_state": "requested"}));
    assert_eq!(ids(&pending), vec![made[1].clone()]);
    assert_eq!(
        pending["candidates"][0]["delivery_request"]["state"],
        "requested"
    );
    assert_eq!(ids(&list(json!({"request_state": "approved"}))).len(), 0);

    for (body, field) in [
        (json!({"workspace_id": "ws1", "cursor": "cnd:x"}), "cursor"),
        (json!({"workspace_id": "ws1", "cursor": "val:3"}), "cursor"),
        (json!({"workspace_id": "ws1", "state": "melted"}), "state"),
        (
            json!({"workspace_id": "ws1", "request_state": 3}),
            "request_state",
        ),
        (
            json!({"workspace_id": "ws1", "target_ref": ""}),
            "target_ref",
        ),
        (json!({"workspace_id": "ws1", "limit": 0}), "limit"),
    ] {
        let (status, v) = s.call(ALICE, "integration.list", body.clone());
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"]["field"], field, "{body}: {v}");
    }
}

#[test]
fn approval_list_answers_what_the_caller_may_decide() {
    let s = Server::fake_governed_with(
        "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n[workspaces.ws1.policy]\nhuman_approval = \"always\"\n",
    );
    std::fs::write(s.repo.join("README"), "base\nmore\n").unwrap();
    let diff = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["checkout", "-q", "--", "README"]);
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "file:README",
               "mode": "write", "idempotency_key": "c"}),
    );
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": String::from_utf8(diff.stdout).unwrap(), "idempotency_key": "p"}),
    )["proposal"]
        .clone();
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"], "idempotency_key": "r"}),
    );
    let approval = s.ok(
        ALICE,
        "human.request_approval",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"],
               "revision": p["current_revision"], "idempotency_key": "q"}),
    )["approval"]
        .clone();
    let list = |token: &str, filter: Option<&str>| -> Vec<Value> {
        let mut body = json!({"workspace_id": "ws1"});
        if let Some(f) = filter {
            body["filter"] = json!(f);
        }
        s.ok(token, "human.approval_list", body)["approvals"]
            .as_array()
            .unwrap()
            .clone()
    };
    // erin may approve: it is waiting for her. alice wrote it, bob may not approve.
    let erins = list(ERIN, None);
    assert_eq!(erins.len(), 1);
    assert_eq!(erins[0]["approval_id"], approval["approval_id"]);
    assert!(list(ALICE, None).is_empty(), "the author never decides");
    assert!(list(BOB, None).is_empty(), "bob lacks approve");
    assert_eq!(
        list(BOB, Some("pending")).len(),
        1,
        "but he sees it pending"
    );
    s.ok(
        ERIN,
        "human.decide",
        json!({"workspace_id": "ws1", "approval_id": approval["approval_id"], "approve": true,
               "reason_md": "ok", "idempotency_key": "d"}),
    );
    assert!(list(ERIN, None).is_empty());
    assert_eq!(list(BOB, Some("approved")).len(), 1);
    assert_eq!(list(BOB, Some("all")).len(), 1);
    assert!(list(BOB, Some("denied")).is_empty());
    for (body, field) in [
        (json!({"workspace_id": "ws1", "filter": "mine"}), "filter"),
        (json!({"workspace_id": "ws1", "cursor": "apr:-1"}), "cursor"),
        (json!({"workspace_id": "ws1", "limit": 101}), "limit"),
    ] {
        let (status, v) = s.call(BOB, "human.approval_list", body.clone());
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"]["field"], field, "{body}: {v}");
    }
}
