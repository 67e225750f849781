//! patch.validate and patch.apply on real Docker and a real worktree: git applies the patch in
//! the sandbox, the expected tests run on a private commit of the post-images, apply installs
//! exactly the validated bytes under a journal, refuses a worktree edited after validation, a
//! stale fencing token and a failing test, and a crash at every apply phase recovers, at the
//! next start, to exactly the pre-images or exactly the post-images.

use crate::support::daemon::{ALICE, BOB, Server};
use crate::support::governed::{reviewed, validated};
use crate::support::repo::git;
use serde_json::{Value, json};

const EXTRA: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                     [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

pub(crate) fn server() -> Option<Server> {
    server_with("")
}

/// [`server`] with `top` (top-level config) before the policy.
pub(crate) fn server_with(top: &str) -> Option<Server> {
    // The dry run runs git in the git image; the expected tests in the workspace's profile.
    if !crate::toolchain::built("git") {
        return None;
    }
    let s = Server::governed_with(&format!("{top}{EXTRA}"));
    std::fs::write(s.repo.join("old.txt"), "old\n").unwrap();
    std::fs::write(s.repo.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "more files"]);
    Some(s)
}

/// What `git diff` prints for: README gains a line, docs/new.md is created, old.txt deleted,
/// run.sh becomes executable.
fn patch(s: &Server) -> String {
    std::fs::write(s.repo.join("README"), "base\nmore\n").unwrap();
    std::fs::create_dir_all(s.repo.join("docs")).unwrap();
    std::fs::write(s.repo.join("docs/new.md"), "new\n").unwrap();
    std::fs::remove_file(s.repo.join("old.txt")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        s.repo.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    git(&s.repo, &["add", "--intent-to-add", "docs/new.md"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color", "HEAD"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-q", "-fd"]);
    String::from_utf8(out.stdout).unwrap()
}

/// Claim, propose (with `tests`), review and approve; returns (proposal id, revision).
pub(crate) fn approved(s: &Server, tests: Value, key: &str) -> (Value, String) {
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": format!("c-{key}")}),
    );
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": patch(s), "expected_tests": tests, "idempotency_key": format!("p-{key}")}),
    );
    reviewed(s, &p, key)
}

fn stage<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

/// The touched files' modes and bytes, and no staged temp file anywhere.
pub(crate) fn worktree(s: &Server) -> Vec<(String, String)> {
    let out = files(s);
    let stray = strays(s);
    assert!(stray.is_empty(), "temp files left: {stray:?}");
    out
}

pub(crate) fn strays(s: &Server) -> Vec<String> {
    walk(&s.repo)
        .into_iter()
        .filter(|p| p.contains(".airlock-stage-"))
        .collect()
}

pub(crate) fn files(s: &Server) -> Vec<(String, String)> {
    let mut out = vec![];
    for (p, _) in [
        ("README", 0),
        ("docs/new.md", 0),
        ("old.txt", 0),
        ("run.sh", 0),
    ] {
        let full = s.repo.join(p);
        let v = match std::fs::read(&full) {
            Ok(b) => {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&full).unwrap().permissions().mode() & 0o777;
                format!("{mode:o} {}", String::from_utf8_lossy(&b))
            }
            Err(_) => "absent".into(),
        };
        out.push((p.to_string(), v));
    }
    out
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if e.file_name() == ".git" {
            continue;
        }
        out.push(p.display().to_string());
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

pub(crate) fn post() -> Vec<(String, String)> {
    vec![
        ("README".into(), "644 base\nmore\n".into()),
        ("docs/new.md".into(), "644 new\n".into()),
        ("old.txt".into(), "absent".into()),
        ("run.sh".into(), "755 #!/bin/sh\necho run\n".into()),
    ]
}

#[test]
fn validate_in_the_sandbox_then_apply_installs_exactly_the_validated_bytes() {
    let Some(s) = server() else { return };
    let before = worktree(&s);
    let (id, rev) = approved(
        &s,
        json!([[
            "sh",
            "-c",
            "grep -q more README && test -f docs/new.md && test ! -e old.txt"
        ]]),
        "a",
    );
    let v = validated(&s, &id, &rev, "a");
    assert_eq!(v["valid"], true, "{v}");
    for name in [
        "claims", "artifact", "parse", "coverage", "dry_run", "tests", "policy",
    ] {
        assert_eq!(stage(&v, name)["state"], "executed", "{name}: {v}");
    }
    assert_eq!(v["claims"].as_array().unwrap().len(), 1);
    assert_eq!(v["post_images"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(
        worktree(&s),
        before,
        "validation changes nothing in the worktree"
    );
    let verdict = s.ok(
        BOB,
        "policy.evaluate",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(verdict["verdict"]["approvable"], true, "{verdict}");

    let body = json!({"workspace_id": "ws1", "proposal_id": id,
                      "validation_id": v["validation_id"], "idempotency_key": "apply-1"});
    let a = s.ok(ALICE, "patch.apply", body.clone());
    let t = &a["transaction"];
    assert_eq!(t["status"], "applied", "{a}");
    assert_eq!(a["proposal"]["status"], "accepted");
    assert_eq!(t["rollback_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(worktree(&s), post());
    // A replay answers the same transaction and applies nothing again.
    let again = s.ok(ALICE, "patch.apply", body);
    assert_eq!(again["transaction"]["transaction_id"], t["transaction_id"]);
    let phases = s.ok(
        ALICE,
        "transaction.phases",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    let names: Vec<&str> = phases["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prepared", "installing", "applied"]);
    let r = s.ok(
        BOB,
        "transaction.recovery",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert_eq!(r["repository_state"], "applied", "{r}");
    assert_eq!(r["actions"], json!(["compensate"]));
    // Someone edits a touched file afterwards: recovery says so from the file.
    std::fs::write(s.repo.join("README"), "edited later\n").unwrap();
    let r = s.ok(
        BOB,
        "transaction.recovery",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert_eq!(r["repository_state"], "applied_then_modified", "{r}");
    let listed = s.ok(BOB, "transaction.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["transactions"].as_array().unwrap().len(), 1);
    // The web page shows the same: linked from the index, phases, per-path states, advice.
    let bob = crate::serve_ui::sign_in(&s, BOB);
    let tid = t["transaction_id"].as_str().unwrap();
    let (_, _, index) = crate::serve_ui::get(&s, &bob, "/ui/");
    assert!(
        index.contains(&format!("/ui/w/ws1/transactions/{tid}")),
        "{index}"
    );
    let (status, _, page) =
        crate::serve_ui::get(&s, &bob, &format!("/ui/w/ws1/transactions/{tid}"));
    assert_eq!(status, 200, "{page}");
    for shown in [
        "installing",
        "applied_then_modified",
        "docs/new.md",
        "compensate",
    ] {
        assert!(page.contains(shown), "{shown} missing: {page}");
    }
    assert!(!page.contains("staged_only"), "no path is only staged");
    // Its validation and tests lead to their places on the proposal's page, which has them.
    let proposal_page = format!("/ui/w/ws1/proposals/{}", t["proposal_id"].as_str().unwrap());
    let vid = t["validation_id"].as_str().unwrap();
    assert!(
        page.contains(&format!("href=\"{proposal_page}#validation-{vid}\"")),
        "{page}"
    );
    let (_, _, shown) = crate::serve_ui::get(&s, &bob, &proposal_page);
    assert!(
        shown.contains(&format!("id=\"validation-{vid}\"")),
        "{shown}"
    );
    for test in t["test_verifications"].as_array().unwrap() {
        let test = test.as_str().unwrap();
        assert!(page.contains(&format!("href=\"{proposal_page}#verification-{test}\"")));
        assert!(
            shown.contains(&format!("id=\"verification-{test}\"")),
            "{shown}"
        );
    }
    assert!(
        !page.contains("compensate</button>"),
        "bob may not apply: no control button"
    );
    // alice gets the advised compensation as a button; it files the reverse patch as a proposal.
    let alice = crate::serve_ui::sign_in(&s, ALICE);
    let tx_page = format!("/ui/w/ws1/transactions/{tid}");
    let (_, _, page) = crate::serve_ui::get(&s, &alice, &tx_page);
    assert!(page.contains("compensate</button>"), "{page}");
    let key = crate::serve_ui::field(&page, "idempotency_key");
    let token = crate::serve_ui::csrf(&page);
    // Put README back as the transaction left it: compensation undoes exactly what it applied.
    std::fs::write(s.repo.join("README"), "base\nmore\n").unwrap();
    let (status, body) = crate::serve_ui::post(
        &s,
        &alice,
        &format!("{tx_page}/act"),
        &[
            ("csrf", &token),
            ("action", "compensate"),
            ("reason", "undo it"),
            ("idempotency_key", &key),
        ],
    );
    assert_eq!(status, 303, "{body}");
    let proposals = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        proposals["proposals"].as_array().unwrap().len(),
        2,
        "{proposals}"
    );
    // The proposal page lists the claim it relies on, with its holder, token and time left.
    let proposal_page = format!("/ui/w/ws1/proposals/{}", id.as_str().unwrap());
    let (_, _, page) = crate::serve_ui::get(&s, &alice, &proposal_page);
    assert!(page.contains("Claims on the touched resources"), "{page}");
    assert!(
        page.contains("directory:") && page.contains("member:alice"),
        "{page}"
    );
    assert!(page.contains("(in "), "a countdown: {page}");
}

#[test]
fn apply_refuses_an_edited_worktree_a_stale_token_and_a_failing_test() {
    let Some(s) = server() else { return };
    let (id, rev) = approved(&s, json!([]), "a");
    let v = validated(&s, &id, &rev, "a");
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(stage(&v, "tests")["state"], "skipped");
    // The worktree changes after validation: apply refuses and touches nothing.
    std::fs::write(s.repo.join("README"), "someone else\n").unwrap();
    let snapshot = worktree(&s);
    let m = s.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply-1"}),
        "failed_precondition",
    );
    assert!(m.contains("changed since it was validated"), "{m}");
    assert_eq!(worktree(&s), snapshot);
    std::fs::write(s.repo.join("README"), "base\n").unwrap();
    // The claim is released and granted again: a new fencing token.
    let claims = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "status": "active"}),
    );
    let cid = claims["claims"][0]["claim_id"].clone();
    s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": cid, "idempotency_key": "rel"}),
    );
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "again"}),
    );
    let m = s.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply-2"}),
        "failed_precondition",
    );
    assert!(m.contains("fencing token"), "{m}");
    // A failing expected test makes the validation invalid, and apply refuses it.
    let s2 = server().unwrap();
    let (id2, rev2) = approved(&s2, json!([["sh", "-c", "exit 3"]]), "b");
    let v2 = validated(&s2, &id2, &rev2, "b");
    assert_eq!(v2["valid"], false, "{v2}");
    assert_eq!(stage(&v2, "tests")["state"], "failed");
    let m = s2.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id2, "validation_id": v2["validation_id"],
               "idempotency_key": "apply-3"}),
        "failed_precondition",
    );
    assert!(m.contains("not valid"), "{m}");
}

#[test]
fn compensation_files_the_reverse_patch_and_its_apply_restores_exact_bytes_and_modes() {
    let Some(s) = server() else { return };
    let pre = worktree(&s);
    let (id, rev) = approved(&s, json!([]), "a");
    let v = validated(&s, &id, &rev, "a");
    let a = s.ok(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply-1"}),
    );
    let tx = a["transaction"]["transaction_id"].clone();
    assert_eq!(worktree(&s), post());
    let control = |action: &str, extra: Value, key: &str| {
        let mut b = json!({"workspace_id": "ws1", "transaction_id": tx, "action": action,
                           "idempotency_key": key});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        s.call(ALICE, "transaction.control", b)
    };
    // An applied transaction cannot be cancelled.
    assert_eq!(control("cancel", json!({}), "c0").0, 412);
    // A later edit refuses compensation unless allowed, with a reason.
    std::fs::write(s.repo.join("docs/new.md"), "edited after\n").unwrap();
    let (st, e) = control("compensate", json!({}), "c1");
    assert_eq!(st, 412, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("docs/new.md"),
        "{e}"
    );
    std::fs::write(s.repo.join("docs/new.md"), "new\n").unwrap();
    let (st, c) = control(
        "compensate",
        json!({"reason": "roll back the release"}),
        "c2",
    );
    assert_eq!(st, 200, "{c}");
    let comp = &c["proposal"];
    assert_eq!(comp["risk"], "high");
    assert_eq!(comp["author"], "member:alice");
    // The compensation is an ordinary proposal: review, validate, apply.
    let (cid, crev) = crate::support::governed::reviewed(&s, &c, "comp");
    let cv = validated(&s, &cid, &crev, "comp");
    assert_eq!(cv["valid"], true, "{cv}");
    let ca = s.ok(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": cid, "validation_id": cv["validation_id"],
               "idempotency_key": "apply-2"}),
    );
    assert_eq!(ca["transaction"]["status"], "applied", "{ca}");
    assert_eq!(worktree(&s), pre, "exact bytes and modes restored");
}

#[test]
fn a_proposal_not_in_review_is_never_applied_and_nothing_changes() {
    let Some(s) = server() else { return };
    let pre = worktree(&s);
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c"}),
    );
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": patch(&s), "idempotency_key": "p"}),
    );
    let id = p["proposal"]["proposal_id"].clone();
    let rev = p["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    let v = validated(&s, &id, &rev, "a");
    assert_eq!(v["valid"], true, "a pending proposal validates: {v}");
    let m = s.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply"}),
        "failed_precondition",
    );
    assert!(m.contains("pending"), "{m}");
    assert_eq!(worktree(&s), pre);
    let listed = s.ok(BOB, "transaction.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["transactions"], json!([]));
}

#[test]
fn retry_applies_a_fresh_validation_as_a_new_transaction_linked_to_the_failed_one() {
    let Some(s) = server() else { return };
    let (id, rev) = approved(&s, json!([]), "a");
    let v1 = validated(&s, &id, &rev, "a");
    // The worktree changes after validation: the apply fails before anything changed.
    std::fs::write(s.repo.join("README"), "someone else\n").unwrap();
    s.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v1["validation_id"],
               "idempotency_key": "apply-1"}),
        "failed_precondition",
    );
    // A replay of the refused call is refused the same way, and applies nothing.
    let m = s.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v1["validation_id"],
               "idempotency_key": "apply-1"}),
        "failed_precondition",
    );
    assert!(m.contains("changed since it was validated"), "{m}");
    std::fs::write(s.repo.join("README"), "base\n").unwrap();
    let listed = s.ok(ALICE, "transaction.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        listed["transactions"].as_array().unwrap().len(),
        1,
        "{listed}"
    );
    let failed = listed["transactions"][0].clone();
    assert_eq!(failed["status"], "failed", "{listed}");
    let tid = failed["transaction_id"].clone();
    let r = s.ok(
        BOB,
        "transaction.recovery",
        json!({"workspace_id": "ws1", "transaction_id": tid}),
    );
    assert_eq!(r["actions"], json!(["validate", "retry"]), "{r}");
    let phases = s.ok(
        BOB,
        "transaction.phases",
        json!({"workspace_id": "ws1", "transaction_id": tid}),
    )["phases"]
        .clone();
    assert_eq!(phases[0]["phase"], "prepared", "{phases}");
    assert_eq!(phases[0]["ended_at"], phases[1]["started_at"], "{phases}");
    assert_eq!(phases[1]["phase"], "failed", "{phases}");
    assert_eq!(phases[1]["ended_at"], Value::Null, "{phases}");
    assert_eq!(
        phases[1]["failure_code"], "refused_before_install",
        "{phases}"
    );
    // Each phase names the request that moved it (the apply's, generated by the daemon).
    assert!(
        phases[0]["request_id"]
            .as_str()
            .unwrap()
            .starts_with("http_"),
        "{phases}"
    );
    assert_eq!(phases[0]["request_id"], phases[1]["request_id"], "{phases}");
    assert!(
        phases[1]["reason"]
            .as_str()
            .unwrap()
            .contains("changed since it was validated"),
        "{phases}"
    );
    let retry = |key: &str, extra: Value| {
        let mut body = json!({"workspace_id": "ws1", "transaction_id": tid, "action": "retry",
                              "idempotency_key": key});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    // The validation that failed is not fresh.
    let m = s.err(
        ALICE,
        "transaction.control",
        retry("r0", json!({})),
        "failed_precondition",
    );
    assert!(
        m.contains("fresh validation") && m.contains("patch.validate"),
        "{m}"
    );
    let m = s.err(
        ALICE,
        "transaction.control",
        retry("r1", json!({"validation_id": v1["validation_id"]})),
        "failed_precondition",
    );
    assert!(m.contains("made after"), "{m}");
    // Only retry names a validation.
    let m = s.err(
        ALICE,
        "transaction.control",
        json!({"workspace_id": "ws1", "transaction_id": tid, "action": "cancel",
               "validation_id": v1["validation_id"], "idempotency_key": "c1"}),
        "invalid_argument",
    );
    assert!(m.contains("validation_id"), "{m}");
    assert_eq!(worktree(&s)[0].1, "644 base\n", "refusals change nothing");

    // Seed 000's stage is refused, naming why; nothing is prepared.
    let m = s.err(
        ALICE,
        "transaction.control",
        json!({"workspace_id": "ws1", "transaction_id": tid, "action": "stage",
               "idempotency_key": "st1"}),
        "failed_precondition",
    );
    assert!(
        m.contains("stage is not offered") && m.contains("fence"),
        "{m}"
    );
    // validate: a fresh validation of the transaction's revision, linked to it; a replay
    // answers the same one.
    let validate = json!({"workspace_id": "ws1", "transaction_id": tid, "action": "validate",
                          "idempotency_key": "tv1"});
    let v2 = s.ok(ALICE, "transaction.control", validate.clone())["validation"].clone();
    assert_eq!(v2["valid"], true, "{v2}");
    assert_eq!(v2["revision"], rev, "{v2}");
    assert_eq!(v2["for_transaction_id"], tid, "{v2}");
    let again = s.ok(ALICE, "transaction.control", validate)["validation"].clone();
    assert_eq!(again["validation_id"], v2["validation_id"]);
    let a = s.ok(ALICE, "transaction.control", retry("r2", json!({})));
    let t = &a["transaction"];
    assert_eq!(t["status"], "applied", "{a}");
    assert_eq!(t["retry_of"], tid);
    assert_eq!(t["validation_id"], v2["validation_id"]);
    assert_ne!(t["transaction_id"], tid);
    assert_eq!(a["proposal"]["status"], "accepted");
    assert_eq!(worktree(&s), post());
    // A replay answers the same new transaction; another retry of the same one is refused.
    let again = s.ok(ALICE, "transaction.control", retry("r2", json!({})));
    assert_eq!(again["transaction"]["transaction_id"], t["transaction_id"]);
    let m = s.err(
        ALICE,
        "transaction.control",
        retry("r3", json!({})),
        "failed_precondition",
    );
    assert!(m.contains("already retried by"), "{m}");
    // The applied retry accepts only compensate.
    let m = s.err(
        ALICE,
        "transaction.control",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"], "action": "retry",
               "idempotency_key": "r4"}),
        "failed_precondition",
    );
    assert!(m.contains("compensate"), "{m}");
    let m = s.err(
        ALICE,
        "transaction.control",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"], "action": "validate",
               "idempotency_key": "tv2"}),
        "failed_precondition",
    );
    assert!(m.contains("it accepts [\"compensate\"]"), "{m}");
    let old = s.ok(
        ALICE,
        "transaction.show",
        json!({"workspace_id": "ws1", "transaction_id": tid}),
    );
    assert_eq!(
        old["transaction"]["status"], "failed",
        "the failed one stays as it was"
    );
}
