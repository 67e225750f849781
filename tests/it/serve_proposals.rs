//! Proposals over a real daemon on loopback (fake runtime: no container is involved), on a
//! real governed worktree with patches `git diff` wrote: content-addressed revisions stored as
//! checked artifacts before their rows, the claim gate, attach and what it invalidates, the
//! transition guards, listing, idempotent replays and hostile input.

use crate::support::daemon::{ALICE, BOB, DAVE, RUN_A, Server};
use crate::support::repo::git;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The patch `git diff` prints for writing `files` into the worktree (which is then restored).
fn diff(s: &Server, files: &[(&str, &str)]) -> String {
    for (path, body) in files {
        let p = s.repo.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    git(&s.repo, &["add", "-A", "--intent-to-add"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color", "--no-ext-diff"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    assert!(out.status.success());
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-q", "-fd"]);
    String::from_utf8(out.stdout).unwrap()
}

fn claim_write(s: &Server, token: &str, resource: &str, key: &str) -> Value {
    s.ok(
        token,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": resource,
               "mode": "write", "idempotency_key": key}),
    )["claim"]
        .clone()
}

fn create(s: &Server, token: &str, patch: &str, key: &str) -> (u16, Value) {
    s.call(
        token,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "Fix the README",
               "summary_md": "Says *more*.", "patch": patch,
               "expected_tests": [["sh", "-c", "test -f README"]],
               "rollback_notes": "revert the README", "idempotency_key": key}),
    )
}

fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

#[test]
fn a_proposal_stores_its_patch_as_a_checked_revision_behind_the_claim_gate() {
    let s = Server::fake_governed();
    let patch = diff(&s, &[("README", "base\nmore\n")]);
    // Without a claim on README nothing is created.
    let m = s.err(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "x", "summary_md": "y",
               "patch": patch, "idempotency_key": "p0"}),
        "failed_precondition",
    );
    assert!(m.contains("file:README"), "{m}");
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        listed["proposals"],
        json!([]),
        "a refused create stores nothing"
    );

    claim_write(&s, ALICE, "file:README", "c1");
    let (st, v) = create(&s, ALICE, &patch, "p1");
    assert_eq!(st, 200, "{v}");
    let p = &v["proposal"];
    assert_eq!(p["author"], "member:alice");
    assert_eq!(p["status"], "pending");
    assert_eq!(p["risk"], "normal");
    assert_eq!(p["version"], 1);
    assert_eq!(
        p["current_revision"],
        sha(&patch),
        "the revision is the patch's SHA-256"
    );
    assert_eq!(p["revisions"][0]["number"], 1);
    assert_eq!(p["revisions"][0]["bytes"], patch.len());
    assert_eq!(
        p["affected_resources"],
        json!(["file:README"]),
        "found from the patch"
    );
    assert_eq!(p["expected_tests"], json!([["sh", "-c", "test -f README"]]));
    assert_eq!(p["rollback_notes"], "revert the README");
    let artifact = s
        .dir
        .path()
        .join("data/patches")
        .join(format!("{}.patch", sha(&patch)));
    assert_eq!(std::fs::read_to_string(&artifact).unwrap(), patch);

    // A replay answers the same proposal; the key with other parameters is a conflict.
    let (_, again) = create(&s, ALICE, &patch, "p1");
    assert_eq!(again["proposal"]["proposal_id"], p["proposal_id"]);
    let m = s.err(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "Other", "summary_md": "y",
               "patch": patch, "idempotency_key": "p1"}),
        "conflict",
    );
    assert!(m.contains("idempotency_key"), "{m}");
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 1);

    // get lists the files the parser read.
    let got = s.ok(
        BOB,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"]}),
    );
    assert_eq!(got["files"][0]["operation"], "modify");
    assert_eq!(got["files"][0]["added"], 1);
    assert_eq!(got["files"][0]["removed"], 0);

    // An artifact changed on disk is detected (an internal error, logged), never served.
    std::fs::write(&artifact, patch.replace("more", "MORE")).unwrap();
    s.err(
        BOB,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"]}),
        "internal",
    );
    std::fs::write(&artifact, &patch).unwrap();

    // A created file becomes a file resource too, and needs its claim.
    let patch2 = diff(&s, &[("docs/new.md", "new\n")]);
    let m = s.err(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "x", "summary_md": "y",
               "patch": patch2, "idempotency_key": "p2"}),
        "failed_precondition",
    );
    assert!(m.contains("file:docs/new.md"), "{m}");
    claim_write(&s, ALICE, "directory:docs", "c2");
    let v = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "x", "summary_md": "y",
               "patch": patch2, "affected_resources": ["directory:docs"], "risk": "high",
               "idempotency_key": "p2"}),
    );
    assert_eq!(
        v["proposal"]["affected_resources"],
        json!(["directory:docs"]),
        "a given directory covers the created file"
    );
    assert_eq!(v["proposal"]["risk"], "high");
}

#[test]
fn attach_adds_a_revision_and_the_old_one_stops_being_current() {
    let s = Server::fake_governed();
    claim_write(&s, ALICE, "file:README", "c1");
    let p1 = diff(&s, &[("README", "base\none\n")]);
    let p2 = diff(&s, &[("README", "base\ntwo\n")]);
    let (_, v) = create(&s, ALICE, &p1, "p1");
    let id = v["proposal"]["proposal_id"].clone();
    let attach = |token: &str, patch: &str, version: u64, key: &str| {
        s.call(
            token,
            "proposal.attach_patch",
            json!({"workspace_id": "ws1", "proposal_id": id, "expected_version": version,
                   "patch": patch, "idempotency_key": key}),
        )
    };
    let (st, e) = attach(ALICE, &p2, 7, "a0");
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{e}"
    );
    let (st, e) = attach(DAVE, &p2, 1, "a0");
    assert_eq!(st, 403, "only the author attaches: {e}");
    let (st, v) = attach(ALICE, &p2, 1, "a1");
    assert_eq!(st, 200, "{v}");
    let p = &v["proposal"];
    assert_eq!(p["version"], 2);
    assert_eq!(p["current_revision"], sha(&p2));
    assert_eq!(p["revisions"][0]["current"], false);
    assert_eq!(p["revisions"][1]["current"], true);
    assert_eq!(p["revisions"][1]["number"], 2);
    // Replay: the same answer's proposal, no third revision.
    let (st, again) = attach(ALICE, &p2, 1, "a1");
    assert_eq!(st, 200);
    assert_eq!(again["proposal"]["revisions"].as_array().unwrap().len(), 2);
    // Bytes that already were a revision are refused: a digest names one revision.
    let (st, e) = attach(ALICE, &p1, 2, "a2");
    assert_eq!(st, 412, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revision 1"),
        "{e}"
    );
    // The event names what was invalidated.
    let ev = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": id, "kind": "proposal.revision_attached"}),
    );
    assert_eq!(ev["events"].as_array().unwrap().len(), 1, "{ev}");
    assert_eq!(ev["events"][0]["payload"]["invalidated_revision"], sha(&p1));
    // In review, a new revision keeps it in review; a terminal proposal takes none.
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "r1"}),
    );
    let p3 = diff(&s, &[("README", "base\nthree\n")]);
    let (st, v) = attach(ALICE, &p3, 3, "a3");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["proposal"]["status"], "in_review");
    s.ok(
        ALICE,
        "proposal.withdraw",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "w1"}),
    );
    let p4 = diff(&s, &[("README", "base\nfour\n")]);
    let (st, e) = attach(ALICE, &p4, 5, "a4");
    assert_eq!(st, 412, "{e}");
}

#[test]
fn transitions_have_guards_and_a_rejection_is_a_decision() {
    let s = Server::fake_governed();
    claim_write(&s, ALICE, "file:README", "c1");
    let patch = diff(&s, &[("README", "base\nx\n")]);
    let (_, v) = create(&s, ALICE, &patch, "p1");
    let id = v["proposal"]["proposal_id"].clone();
    let t = |token: &str, method: &str, extra: Value, key: &str| {
        let mut body = json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": key});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s.call(token, method, body)
    };
    assert_eq!(
        t(DAVE, "proposal.request_review", json!({}), "k1").0,
        403,
        "not the author"
    );
    assert_eq!(
        t(BOB, "proposal.request_review", json!({}), "k1").0,
        403,
        "no propose"
    );
    let (st, v) = t(ALICE, "proposal.request_review", json!({}), "k2");
    assert_eq!(
        (st, v["proposal"]["status"].as_str()),
        (200, Some("in_review"))
    );
    let (st, _) = t(ALICE, "proposal.request_review", json!({}), "k3");
    assert_eq!(st, 412, "already in review");
    let (st, e) = t(BOB, "proposal.reject", json!({}), "k4");
    assert_eq!(st, 400, "a rejection needs a reason: {e}");
    assert_eq!(
        t(DAVE, "proposal.reject", json!({"reason_md": "no"}), "k4").0,
        403
    );
    assert_eq!(
        t(ALICE, "proposal.reject", json!({"reason_md": "no"}), "k4").0,
        403,
        "the author withdraws, never rejects"
    );
    let (st, v) = t(
        BOB,
        "proposal.reject",
        json!({"reason_md": "too *broad*"}),
        "k5",
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["proposal"]["status"], "rejected");
    assert_eq!(v["proposal"]["reason_md"], "too *broad*");
    // Replayed, the same answer; nothing moves twice.
    let (st, again) = t(
        BOB,
        "proposal.reject",
        json!({"reason_md": "too *broad*"}),
        "k5",
    );
    assert_eq!(
        (st, &again["proposal"]["version"]),
        (200, &v["proposal"]["version"])
    );
    assert_eq!(
        t(ALICE, "proposal.withdraw", json!({}), "k6").0,
        412,
        "terminal"
    );
    let got = s.ok(
        BOB,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(got["decisions"].as_array().unwrap().len(), 1, "{got}");
    assert_eq!(got["decisions"][0]["decision"], "rejected");
    assert_eq!(got["decisions"][0]["actor"], "member:bob");
    assert_eq!(got["decisions"][0]["revision"], sha(&patch));
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
            "proposal.reject"
        ]
    );
    assert_eq!(ev["events"][2]["prior"], "in_review");
    assert_eq!(ev["events"][2]["new"], "rejected");
}

#[test]
fn a_run_proposes_and_lists_page_in_either_order() {
    let s = Server::fake_governed();
    claim_write(&s, RUN_A, "directory:", "c1");
    let mut ids = vec![];
    for i in 0..5 {
        let patch = diff(&s, &[(&format!("f{i}"), "x\n")]);
        let (st, v) = create(&s, RUN_A, &patch, &format!("p{i}"));
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["proposal"]["author"], "run:ws1/run_a");
        ids.push(v["proposal"]["proposal_id"].clone());
    }
    let page = |order: &str, cursor: Value| {
        s.ok(
            BOB,
            "proposal.list",
            json!({"workspace_id": "ws1", "order": order, "limit": 2, "cursor": cursor}),
        )
    };
    for (order, expect) in [
        ("oldest", ids.clone()),
        ("newest", ids.iter().rev().cloned().collect()),
    ] {
        let mut seen = vec![];
        let mut cursor = Value::Null;
        loop {
            let v = page(order, cursor);
            seen.extend(
                v["proposals"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["proposal_id"].clone()),
            );
            cursor = v["next_cursor"].clone();
            if cursor.is_null() {
                break;
            }
        }
        assert_eq!(seen, expect, "{order}");
    }
    let by_author = s.ok(
        BOB,
        "proposal.list",
        json!({"workspace_id": "ws1", "author": "member:alice"}),
    );
    assert_eq!(by_author["proposals"], json!([]));
    s.err(
        BOB,
        "proposal.list",
        json!({"workspace_id": "ws1", "limit": 201}),
        "invalid_argument",
    );
    s.err(
        BOB,
        "proposal.list",
        json!({"workspace_id": "ws1", "cursor": "prc_x"}),
        "invalid_argument",
    );
}

#[test]
fn hostile_proposals_are_refused_and_change_nothing() {
    let s = Server::fake_governed_with("max_patch_bytes = 4096");
    claim_write(&s, ALICE, "directory:", "c1");
    let good = diff(&s, &[("README", "base\nmore\n")]);
    let body = |patch: &str, extra: Value| {
        let mut b = json!({"workspace_id": "ws1", "task_id": "t1", "title": "x",
                           "summary_md": "y", "patch": patch, "idempotency_key": "h"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let refused = [
        (
            body(&good, json!({"agent_id": "mallory"})),
            "invalid_argument",
            "agent_id",
        ),
        (
            body(&good, json!({"risk": "yolo"})),
            "invalid_argument",
            "risk",
        ),
        (
            body(&good, json!({"title": "  "})),
            "invalid_argument",
            "title",
        ),
        (
            body(&good, json!({"base_revision": "HEAD"})),
            "invalid_argument",
            "base_revision",
        ),
        (
            body(&good, json!({"expected_tests": [[]]})),
            "invalid_argument",
            "expected_tests[0]",
        ),
        (
            body(&good, json!({"affected_resources": ["file:./README"]})),
            "invalid_argument",
            "affected_resources[0]",
        ),
        (body("", json!({})), "invalid_argument", "patch"),
        (body("hello\n", json!({})), "invalid_argument", "patch"),
        (
            body(&good.replace("README", "../README"), json!({})),
            "invalid_argument",
            "patch",
        ),
        (
            body(&good.replace("README", ".git/config"), json!({})),
            "invalid_argument",
            "patch",
        ),
        (
            body(&good.replace("README", ".GIT/hooks"), json!({})),
            "invalid_argument",
            "patch",
        ),
        (
            body(&"x".repeat(5000), json!({})),
            "resource_exhausted",
            "max_patch_bytes",
        ),
    ];
    for (b, code, needle) in refused {
        let m = s.err(ALICE, "proposal.create", b.clone(), code);
        assert!(m.contains(needle), "{b}: {m}");
    }
    // A body past the derived limit is refused before it is read.
    let huge = "a".repeat(airlock::limits::patch_body_limit(4096) + 1);
    let m = s.err(
        ALICE,
        "proposal.create",
        body(&huge, json!({})),
        "resource_exhausted",
    );
    assert!(m.contains("request body exceeds"), "{m}");
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["proposals"], json!([]));
    let ev = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "kind": "proposal.created"}),
    );
    assert_eq!(ev["events"], json!([]));
    // An ungoverned workspace refuses the method.
    let m = s.err(
        crate::support::daemon::CAROL,
        "proposal.list",
        json!({"workspace_id": "ws2"}),
        "failed_precondition",
    );
    assert!(m.contains("worktree"), "{m}");
}
