//! The governed path's gates and ways out, over real HTTP on real Docker: `resolve` settles a
//! flagged transaction as its files show (and only then), a compensation that applies rolls
//! the original back and concurrent compensate calls file one, required checks run on every
//! validation and a validation that ran no test never satisfies `required_tests`, stale
//! claims fail validation, a claim about to expire refuses apply, text fields refuse NUL, and
//! recovery sweeps the temp files an interrupted apply left.

use crate::support::daemon::{ALICE, BOB, Server, wait_for};
use crate::support::governed::{claimed as claim, reviewed, validated};
use crate::support::http::request;
use crate::support::repo::git;
use serde_json::{Value, json};

const ROLES: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n";
const LENIENT: &str =
    "[workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

/// A governed daemon with `extra` config whose worktree holds a.txt and b.txt.
fn server(extra: &str) -> Option<Server> {
    if !crate::toolchain::built("git") {
        return None;
    }
    let s = Server::governed_with(extra);
    std::fs::write(s.repo.join("a.txt"), "a\n").unwrap();
    std::fs::write(s.repo.join("b.txt"), "b\n").unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "files"]);
    Some(s)
}

fn edit(path: &str, from: &str, to: &str) -> String {
    format!(
        "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{from}\n+{to}\n"
    )
}

/// Proposes `patch` with `tests`, review requested and approved by bob.
fn proposed(s: &Server, patch: &str, tests: Value, key: &str) -> (Value, String) {
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": key, "summary_md": "s",
               "patch": patch, "expected_tests": tests, "idempotency_key": format!("p-{key}")}),
    );
    reviewed(s, &p, key)
}

fn apply_body(id: &Value, v: &Value, key: &str) -> Value {
    json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
           "idempotency_key": key})
}

fn stage<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

fn strays(s: &Server) -> Vec<String> {
    std::fs::read_dir(&s.repo)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".airlock-stage-"))
        .collect()
}

/// Kills the daemon right after `installing` committed, edits b.txt to `b_now`, restarts:
/// recovery cannot roll forward and flags the transaction. Returns (proposal, transaction).
fn flagged(s: &mut Server, b_now: &str) -> (Value, Value) {
    claim(s, "directory:", "c");
    let patch = format!("{}{}", edit("a.txt", "a", "A"), edit("b.txt", "b", "B"));
    let (id, rev) = proposed(s, &patch, json!([]), "f");
    let v = validated(s, &id, &rev, "f");
    assert_eq!(v["valid"], true, "{v}");
    s.restart(Some("apply_after_installing"));
    let body = apply_body(&id, &v, "apply-1");
    let resp = request(
        &s.addr,
        "POST",
        "/api/v1/patch.apply",
        Some(ALICE),
        body.to_string().as_bytes(),
    );
    assert!(resp.is_none(), "the daemon died mid-apply: {resp:?}");
    s.wait_dead();
    std::fs::write(s.repo.join("b.txt"), b_now).unwrap();
    s.restart(None);
    let listed = s.ok(ALICE, "transaction.list", json!({"workspace_id": "ws1"}));
    let t = listed["transactions"][0].clone();
    assert_eq!(t["status"], "needs_attention", "{listed}");
    (id, t)
}

fn control(s: &Server, t: &Value, extra: Value, key: &str) -> (u16, Value) {
    let mut body = json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"],
                          "action": "resolve", "idempotency_key": key});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.call(ALICE, "transaction.control", body)
}

#[test]
fn resolve_settles_a_flagged_transaction_only_as_its_files_show() {
    let Some(mut s) = server(&format!("{ROLES}{LENIENT}")) else {
        return;
    };
    let (id, t) = flagged(&mut s, "someone else\n");
    let r = s.ok(
        ALICE,
        "transaction.recovery",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert_eq!(r["actions"], json!(["resolve"]), "{r}");
    // The transaction page offers it to an admin, not to a viewer.
    let page = format!(
        "/ui/w/ws1/transactions/{}",
        t["transaction_id"].as_str().unwrap()
    );
    let alice = crate::serve_ui::sign_in(&s, ALICE);
    let (_, _, html) = crate::serve_ui::get(&s, &alice, &page);
    assert!(html.contains("value=\"resolve\""), "{html}");
    let bob = crate::serve_ui::sign_in(&s, BOB);
    let (_, _, html) = crate::serve_ui::get(&s, &bob, &page);
    assert!(
        html.contains("needs_attention") && !html.contains("value=\"resolve\""),
        "{html}"
    );
    // Who and how: an admin, with a reason.
    let (code, v) = s.call(
        BOB,
        "transaction.control",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"], "action": "resolve",
               "reason": "checked", "idempotency_key": "bob"}),
    );
    assert_eq!(code, 403, "{v}");
    let (code, v) = control(&s, &t, json!({}), "no-reason");
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (400, Some("invalid_argument")),
        "{v}"
    );
    assert!(v.to_string().contains("reason"), "{v}");
    // b.txt is neither image: refused, naming it; nothing changes.
    let (code, v) = control(&s, &t, json!({"reason": "checked"}), "r1");
    assert_eq!(code, 412, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("b.txt") && m.contains("neither"), "{m}");
    // Mixed sides are refused too.
    std::fs::write(s.repo.join("b.txt"), "B\n").unwrap();
    let (code, v) = control(&s, &t, json!({"reason": "checked"}), "r2");
    assert_eq!(code, 412, "{v}");
    assert!(v.to_string().contains("same side"), "{v}");
    // Every path back to its pre-image: rolled back, the staged files swept, the proposal
    // still in review and applicable again.
    std::fs::write(s.repo.join("b.txt"), "b\n").unwrap();
    let (code, v) = control(&s, &t, json!({"reason": "restored b.txt by hand"}), "r3");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["transaction"]["status"], "rolled_back", "{v}");
    assert_eq!(strays(&s), Vec::<String>::new(), "{v}");
    let phases = s.ok(
        ALICE,
        "transaction.phases",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert!(
        phases.to_string().contains("restored b.txt by hand"),
        "{phases}"
    );
    // A replay answers the same; the state machine refuses a second resolve.
    let (code, again) = control(&s, &t, json!({"reason": "restored b.txt by hand"}), "r3");
    assert_eq!(
        (code, &again["transaction"]["status"]),
        (200, &json!("rolled_back"))
    );
    let (code, _) = control(&s, &t, json!({"reason": "again"}), "r4");
    assert_eq!(code, 412);
    let rev = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    )["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    let v = validated(&s, &id, &rev, "again");
    let a = s.ok(ALICE, "patch.apply", apply_body(&id, &v, "apply-2"));
    assert_eq!(a["transaction"]["status"], "applied", "{a}");

    // Every path at its post-image: applied, and the proposal accepted.
    let Some(mut s) = server(&format!("{ROLES}{LENIENT}")) else {
        return;
    };
    let (id, t) = flagged(&mut s, "elsewhere\n");
    std::fs::write(s.repo.join("a.txt"), "A\n").unwrap();
    std::fs::write(s.repo.join("b.txt"), "B\n").unwrap();
    let (code, v) = control(&s, &t, json!({"reason": "finished by hand"}), "r1");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["transaction"]["status"], "applied", "{v}");
    assert_eq!(strays(&s), Vec::<String>::new());
    let p = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(p["proposal"]["status"], "accepted", "{p}");
}

#[test]
fn a_compensation_that_applies_rolls_the_original_back_and_concurrent_requests_file_one() {
    let Some(s) = server(&format!("{ROLES}{LENIENT}")) else {
        return;
    };
    // A claim that ends with its proposal: released in the apply that accepts it.
    let c = s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "file:a.txt",
               "mode": "write", "release_on": "proposal_end", "idempotency_key": "c"}),
    )["claim"]
        .clone();
    let (id, rev) = proposed(&s, &edit("a.txt", "a", "A"), json!([]), "o");
    let v = validated(&s, &id, &rev, "o");
    let a = s.ok(ALICE, "patch.apply", apply_body(&id, &v, "apply"));
    let t = a["transaction"].clone();
    let claim_status = |id: &Value| {
        s.ok(
            ALICE,
            "claim.show",
            json!({"workspace_id": "ws1", "claim_id": id}),
        )["claim"]["status"]
            .clone()
    };
    assert_eq!(claim_status(&c["claim_id"]), "released");
    let accepted = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "limit": 200}),
    )["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "proposal.accept")
        .unwrap()
        .clone();
    assert_eq!(
        accepted["payload"]["released_claims"],
        json!([c["claim_id"]]),
        "released in the commit that accepted the proposal: {accepted}"
    );
    // Five at once, each with its own key: one compensation, the others answer it.
    let barrier = std::sync::Barrier::new(5);
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..5)
            .map(|i| {
                let (s, t, barrier) = (&s, &t, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    s.call(
                        ALICE,
                        "transaction.control",
                        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"],
                               "action": "compensate", "idempotency_key": format!("comp-{i}")}),
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: std::collections::BTreeSet<String> = answers
        .iter()
        .map(|(code, v)| {
            assert_eq!(*code, 200, "{v}");
            v["proposal"]["proposal_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 2, "{listed}");
    // The compensation goes through review and validation like any change; its apply rolls
    // the original back in the same commit.
    let (cid, crev) = reviewed(&s, &answers[0].1, "comp");
    let cv = validated(&s, &cid, &crev, "c");
    assert_eq!(cv["valid"], true, "{cv}");
    let ca = s.ok(ALICE, "patch.apply", apply_body(&cid, &cv, "apply-c"));
    assert_eq!(ca["transaction"]["status"], "applied", "{ca}");
    assert_eq!(
        std::fs::read_to_string(s.repo.join("a.txt")).unwrap(),
        "a\n"
    );
    let orig = s.ok(
        ALICE,
        "transaction.show",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert_eq!(orig["transaction"]["status"], "rolled_back", "{orig}");
    // The compensation's own claims exist for it: they ended with it.
    for id in ca["transaction"]["claims"].as_array().unwrap() {
        assert_eq!(claim_status(id), "released", "{id}");
    }
    let r = s.ok(
        ALICE,
        "transaction.recovery",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert_eq!(r["actions"], json!([]), "{r}");
}

#[test]
fn required_checks_run_on_every_validation_and_no_test_run_never_satisfies_required_tests() {
    let checks = "required_tests = true\n\
                  [[workspaces.ws1.policy.required_checks]]\nname = \"no-forbidden\"\n\
                  argv = [\"sh\", \"-c\", \"! grep -rq forbidden .\"]\ntimeout_seconds = 60\n";
    let Some(s) = server(&format!("{ROLES}{LENIENT}{checks}")) else {
        return;
    };
    claim(&s, "directory:", "c");
    // No expected test: the required check runs anyway, by name, and satisfies the gate.
    let (id, rev) = proposed(&s, &edit("a.txt", "a", "fine"), json!([]), "ok");
    let v = validated(&s, &id, &rev, "ok");
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["checks"][0]["name"], "no-forbidden", "{v}");
    assert_eq!(v["test_verifications"].as_array().unwrap().len(), 1, "{v}");
    let verdict = s.ok(
        ALICE,
        "policy.evaluate",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(verdict["verdict"]["approvable"], true, "{verdict}");
    // A change the check forbids: the validation is invalid and the gate blocked.
    let (id2, rev2) = proposed(&s, &edit("b.txt", "b", "forbidden"), json!([]), "bad");
    let v2 = validated(&s, &id2, &rev2, "bad");
    assert_eq!(v2["valid"], false, "{v2}");
    assert_eq!(stage(&v2, "tests")["state"], "failed", "{v2}");
    let m = s.err(
        ALICE,
        "patch.apply",
        apply_body(&id2, &v2, "a2"),
        "failed_precondition",
    );
    assert!(m.contains("not valid"), "{m}");

    // Without required checks, a validation that ran no test leaves `tests` missing.
    let Some(s) = server(&format!("{ROLES}{LENIENT}required_tests = true\n")) else {
        return;
    };
    claim(&s, "directory:", "c");
    let (id, rev) = proposed(&s, &edit("a.txt", "a", "x"), json!([]), "none");
    let v = validated(&s, &id, &rev, "none");
    assert_eq!(stage(&v, "tests")["state"], "skipped", "{v}");
    let verdict = s.ok(
        ALICE,
        "policy.evaluate",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    let tests = verdict["verdict"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "tests")
        .unwrap()
        .clone();
    assert_eq!(tests["state"], "missing", "{verdict}");
    assert!(
        tests["detail"].as_str().unwrap().contains("no test ran"),
        "{tests}"
    );
    let m = s.err(
        ALICE,
        "patch.apply",
        apply_body(&id, &v, "a"),
        "failed_precondition",
    );
    assert!(m.contains("tests missing"), "{m}");
    // A validation whose earlier stage failed ran no test either: still missing, never
    // satisfied (a proposal naming a test, its claim released before validation).
    let (id3, rev3) = proposed(&s, &edit("b.txt", "b", "y"), json!([["true"]]), "skip");
    let c = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "status": "active"}),
    );
    s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": c["claims"][0]["claim_id"], "idempotency_key": "r"}),
    );
    let v3 = validated(&s, &id3, &rev3, "skip");
    assert_eq!(stage(&v3, "claims")["state"], "failed", "{v3}");
    assert_eq!(stage(&v3, "tests")["state"], "skipped", "{v3}");
    let verdict = s.ok(
        ALICE,
        "policy.evaluate",
        json!({"workspace_id": "ws1", "proposal_id": id3}),
    );
    assert!(verdict.to_string().contains("no test ran"), "{verdict}");
}

#[test]
fn stale_claims_fail_validation_and_a_claim_about_to_expire_refuses_apply() {
    let Some(s) = server(&format!("{ROLES}{LENIENT}")) else {
        return;
    };
    claim(&s, "file:a.txt", "ca");
    let b = claim(&s, "file:b.txt", "cb");
    // b.txt changes under its claim, outside Airlock: the claim is stale.
    std::fs::write(s.repo.join("b.txt"), "b\nchanged elsewhere\n").unwrap();
    let (id, rev) = proposed(&s, &edit("a.txt", "a", "A"), json!([]), "s");
    let v = validated(&s, &id, &rev, "s");
    assert_eq!(v["valid"], true, "only a.txt's claim counts: {v}");
    let (id2, rev2) = proposed(
        &s,
        "diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1 @@\n b\n-changed elsewhere\n",
        json!([]),
        "stale",
    );
    let v2 = validated(&s, &id2, &rev2, "stale");
    assert_eq!(v2["valid"], false, "{v2}");
    assert_eq!(stage(&v2, "claims")["state"], "failed", "{v2}");
    assert!(
        stage(&v2, "claims")["reason"]
            .as_str()
            .unwrap()
            .contains(b["claim_id"].as_str().unwrap()),
        "{v2}"
    );
    assert_eq!(v2["stale_claims"], json!([b["claim_id"]]), "{v2}");
    // A claim that expires within the time an apply may take: refused up front.
    let now = time::OffsetDateTime::now_utc();
    s.set_clock(now + time::Duration::seconds(900 - 30));
    let m = s.err(
        ALICE,
        "patch.apply",
        apply_body(&id, &v, "a"),
        "failed_precondition",
    );
    assert!(
        m.contains("claim.extend") && m.contains("expires in"),
        "{m}"
    );
    assert_eq!(
        std::fs::read_to_string(s.repo.join("a.txt")).unwrap(),
        "a\n"
    );
}

#[test]
fn text_fields_refuse_nul_naming_the_field() {
    let s = Server::fake_governed();
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c"}),
    );
    for (field, body) in [
        (
            "title",
            json!({"workspace_id": "ws1", "task_id": "t1", "title": "a\u{0}b", "summary_md": "s",
                   "patch": edit("README", "base", "x"), "idempotency_key": "p1"}),
        ),
        (
            "summary_md",
            json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s\u{0}",
                   "patch": edit("README", "base", "x"), "idempotency_key": "p2"}),
        ),
    ] {
        let (code, v) = s.call(ALICE, "proposal.create", body);
        assert_eq!(code, 400, "{field}: {v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains(field) && m.contains("NUL"), "{m}");
    }
    let (code, v) = s.call(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t\u{0}", "resource_id": "file:x",
               "mode": "read", "idempotency_key": "c2"}),
    );
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("task_id"), "{v}");
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["proposals"], json!([]));
}

#[test]
fn recovery_sweeps_rollback_temp_files_and_names_artifacts_by_digest() {
    let Some(mut s) = server(&format!("{ROLES}{LENIENT}")) else {
        return;
    };
    // A write of a rollback artifact interrupted by kill -9 leaves its temp file: both the
    // daemon's start and `airlock recover` remove it and say so.
    let dir = s.dir.path().join("data/transactions");
    wait_for(|| dir.is_dir(), "the data dir is laid out");
    let name = ".txn_0123456789abcdef0123456789abcdef.rollback.json.tmp.0123";
    std::fs::write(dir.join(name), "partial").unwrap();
    s.stop();
    let out = std::process::Command::new(crate::support::BIN)
        .args(["recover", "--config"])
        .arg(&s.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["transactions"]["artifact_temp_files_removed"],
        json!([name]),
        "{report}"
    );
    assert!(!dir.join(name).exists());
    std::fs::write(dir.join(name), "partial").unwrap();
    s.restart(None);
    assert!(!dir.join(name).exists(), "start-up recovery removed it");
    // The recovery view names an unusable artifact by its digest, never by a host path.
    claim(&s, "directory:", "c");
    let (id, rev) = proposed(&s, &edit("a.txt", "a", "A"), json!([]), "q");
    let v = validated(&s, &id, &rev, "q");
    let a = s.ok(ALICE, "patch.apply", apply_body(&id, &v, "apply"));
    let tid = a["transaction"]["transaction_id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::remove_file(dir.join(format!("{tid}.rollback.json"))).unwrap();
    let r = s.ok(
        ALICE,
        "transaction.recovery",
        json!({"workspace_id": "ws1", "transaction_id": tid}),
    );
    let e = r["artifact_error"].as_str().unwrap();
    let data = s.dir.path().display().to_string();
    assert!(!e.contains(&data), "a host path: {e}");
    assert!(
        e.contains(a["transaction"]["rollback_sha256"].as_str().unwrap()),
        "{e}"
    );
}
