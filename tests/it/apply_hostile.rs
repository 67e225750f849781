//! The governed path against hostile input, on real Docker and a real worktree: hostile patches
//! are refused over HTTP with the worktree, the directory beside it and the data dir's patch
//! store unchanged; a write through a symlink already in the worktree is refused by
//! validation and apply; expected tests that fail, time out or change their sources block
//! `required_tests`; concurrent applies serialize on overlapping files and both land on
//! disjoint ones.

use crate::support::daemon::{ALICE, BOB, Server};
use crate::support::governed::{reviewed, validated};
use crate::support::repo::git;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

const EXTRA: &str = "max_patch_bytes = 4096\nexpected_test_timeout_seconds = 3\n\
                     [workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                     [workspaces.ws1.policy]\nsecurity_review = \"never\"\n\
                     human_approval = \"never\"\nrequired_tests = true\n";

/// A governed daemon whose worktree holds `a.txt`, `b.txt` and `lnk -> ../outside`, a
/// directory beside the worktree holding `secret`. Claims `directory:` for alice's task t1.
fn server() -> Option<Server> {
    if !crate::toolchain::built("git") {
        return None;
    }
    let s = Server::governed_with(EXTRA);
    let outside = s.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "s\n").unwrap();
    std::fs::write(s.repo.join("a.txt"), "a\n").unwrap();
    std::fs::write(s.repo.join("b.txt"), "b\n").unwrap();
    std::os::unix::fs::symlink("../outside", s.repo.join("lnk")).unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "fixtures"]);
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "claim"}),
    );
    Some(s)
}

/// Every entry beneath `dir` (not `.git`), with its whole mode (a chmod shows).
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    crate::support::repo::tree_snapshot(dir, 0o7777)
}

/// What `git diff HEAD` prints for `edits` (path, new content or `None` to delete); the
/// worktree is put back afterwards.
fn diff_of(s: &Server, edits: &[(&str, Option<&str>)]) -> String {
    for (path, content) in edits {
        let full = s.repo.join(path);
        match content {
            Some(c) => {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(&full, c).unwrap();
                git(&s.repo, &["add", "--intent-to-add", path]);
            }
            None => std::fs::remove_file(&full).unwrap(),
        }
    }
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color", "HEAD"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-q", "-fd"]);
    String::from_utf8(out.stdout).unwrap()
}

/// proposal.create of `patch` with `tests`; the raw answer.
fn create(s: &Server, patch: &str, tests: Value, key: &str) -> (u16, Value) {
    s.call(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": patch, "expected_tests": tests, "idempotency_key": key}),
    )
}

fn stage<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

const Z: &str = "0000000000000000000000000000000000000000";
const O: &str = "1111111111111111111111111111111111111111";

#[test]
fn hostile_patches_are_refused_and_nothing_is_written_inside_or_outside_the_worktree() {
    let Some(s) = server() else { return };
    let outside = s.dir.path().join("outside");
    let (before, beside) = (snapshot(&s.repo), snapshot(&outside));
    let edit = |path: &str| {
        format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n")
    };
    let create_file = |path: &str| {
        format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"
        )
    };
    let link = |path: &str, target: &str| {
        format!(
            "diff --git a/{path} b/{path}\nnew file mode 120000\nindex {Z}..{O}\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
        )
    };
    let big = format!(
        "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,80 @@\n-a\n{}",
        "+0123456789012345678901234567890123456789012345678901234567890123456789\n".repeat(80)
    );
    let cases: Vec<(&str, String)> = vec![
        ("`..` in a path", edit("../outside/secret")),
        ("`..` inside a path", edit("docs/../../outside/secret")),
        ("an absolute path", edit("/etc/passwd").replace("a//", "/").replace("b//", "/")),
        (".git", create_file(".git/hooks/pre-commit")),
        (".GIT", create_file(".GIT/config")),
        (".Git", create_file(".Git/config")),
        ("a nested .git", create_file("sub/.git/config")),
        (
            "a quoted .git",
            "diff --git \"a/.git/config\" \"b/.git/config\"\n--- \"a/.git/config\"\n+++ \"b/.git/config\"\n@@ -1 +1 @@\n-a\n+b\n".into(),
        ),
        ("a symlink out of the tree", link("out", "../outside")),
        ("an absolute symlink", link("out", "/etc")),
        (
            "a file through a symlink the patch creates",
            format!("{}{}", link("inner", "docs"), create_file("inner/evil")),
        ),
        (
            "a file through a renamed symlink",
            format!(
                "diff --git a/lnk b/moved\nold mode 120000\nnew mode 120000\nsimilarity index 100%\nrename from lnk\nrename to moved\n{}",
                create_file("moved/evil")
            ),
        ),
        ("one path twice", format!("{}{}", edit("a.txt"), edit("a.txt"))),
        (
            "binary without a full index line",
            "diff --git a/b.bin b/b.bin\nindex 1111111..2222222 100644\nBinary files a/b.bin and b/b.bin differ\n".into(),
        ),
        ("a patch larger than max_patch_bytes", big),
        (
            "the ed-script shape",
            "--- a/a.txt\n+++ b/a.txt\n1c\n!id > /tmp/pwned\n.\n".into(),
        ),
        ("a bare ed script", "1a\n!sh\n.\nw\n".into()),
    ];
    for (i, (what, patch)) in cases.iter().enumerate() {
        let (status, v) = create(&s, patch, json!([]), &format!("p{i}"));
        assert!(
            (400..500).contains(&status),
            "{what}: accepted ({status}): {v}"
        );
        let code = v["error"]["code"].as_str().unwrap_or_default();
        assert!(
            [
                "invalid_argument",
                "resource_exhausted",
                "failed_precondition"
            ]
            .contains(&code),
            "{what}: {v}"
        );
        assert!(
            !v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{what}: {v}"
        );
        if what.contains("max_patch_bytes") {
            assert!(v.to_string().contains("max_patch_bytes"), "{what}: {v}");
        }
    }
    // A good proposal, then the hostile patches as a new revision: refused the same way.
    let good = create(&s, &edit("a.txt"), json!([]), "good");
    assert_eq!(good.0, 200, "{}", good.1);
    let id = good.1["proposal"]["proposal_id"].clone();
    for (i, (what, patch)) in cases.iter().enumerate() {
        let (status, v) = s.call(
            ALICE,
            "proposal.attach_patch",
            json!({"workspace_id": "ws1", "proposal_id": id, "patch": patch,
                   "idempotency_key": format!("att{i}")}),
        );
        assert!((400..500).contains(&status), "attach {what}: {v}");
    }
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 1, "{listed}");
    let shown = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(
        shown["proposal"]["revisions"].as_array().map(Vec::len),
        Some(1),
        "{shown}"
    );
    let stored = std::fs::read_dir(s.dir.path().join("data/patches"))
        .unwrap()
        .count();
    assert_eq!(stored, 1, "only the good revision is stored");
    assert_eq!(snapshot(&s.repo), before, "the worktree is unchanged");
    assert_eq!(snapshot(&outside), beside, "nothing is written beside it");
    assert!(!Path::new("/tmp/pwned").exists());
}

#[test]
fn a_write_through_a_symlink_already_in_the_worktree_is_refused_by_validation_and_apply() {
    let Some(s) = server() else { return };
    let outside = s.dir.path().join("outside");
    let (before, beside) = (snapshot(&s.repo), snapshot(&outside));
    for (i, patch) in [
        "diff --git a/lnk/secret b/lnk/secret\n--- a/lnk/secret\n+++ b/lnk/secret\n@@ -1 +1 @@\n-s\n+pwned\n".to_string(),
        "diff --git a/lnk/new b/lnk/new\nnew file mode 100644\n--- /dev/null\n+++ b/lnk/new\n@@ -0,0 +1 @@\n+pwned\n".to_string(),
    ]
    .iter()
    .enumerate()
    {
        // The parser cannot know `lnk` is a symlink: the patch is well formed.
        let (status, p) = create(&s, patch, json!([]), &format!("p{i}"));
        assert_eq!(status, 200, "{p}");
        let (id, rev) = reviewed(&s, &p, &format!("{i}"));
        let v = validated(&s, &id, &rev, &format!("{i}"));
        assert_eq!(v["valid"], false, "{v}");
        let refused: Vec<&Value> = v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|st| st["state"] == "failed")
            .collect();
        assert!(
            refused
                .iter()
                .any(|st| st["reason"].as_str().unwrap().contains("symlink")),
            "a stage names the symlink: {v}"
        );
        let m = s.err(
            ALICE,
            "patch.apply",
            json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
                   "idempotency_key": format!("apply-{i}")}),
            "failed_precondition",
        );
        assert!(m.contains("not valid"), "{m}");
    }
    assert_eq!(snapshot(&s.repo), before);
    assert_eq!(snapshot(&outside), beside);
}

#[test]
fn expected_tests_that_fail_time_out_or_change_their_sources_block_required_tests() {
    let Some(s) = server() else { return };
    let patch = diff_of(&s, &[("a.txt", Some("a2\n"))]);
    for (i, (argv, status)) in [
        (json!(["sh", "-c", "grep -q a2 a.txt"]), "passed"),
        (json!(["sh", "-c", "exit 3"]), "failed"),
        (json!(["sleep", "60"]), "timed_out"),
        (json!(["sh", "-c", "echo more >> b.txt"]), "source_changed"),
    ]
    .into_iter()
    .enumerate()
    {
        let (code, p) = create(&s, &patch, json!([argv]), &format!("p{i}"));
        assert_eq!(code, 200, "{p}");
        let (id, rev) = reviewed(&s, &p, &format!("{i}"));
        let v = validated(&s, &id, &rev, &format!("{i}"));
        let vid = v["test_verifications"][0].clone();
        let run = &v["tests"][0];
        assert_eq!(run["verification_id"], vid, "{v}");
        assert_eq!(run["argv"], argv, "{v}");
        assert_eq!(run["status"], status, "{argv}: {run}");
        let verdict = s.ok(
            BOB,
            "policy.evaluate",
            json!({"workspace_id": "ws1", "proposal_id": id}),
        )["verdict"]
            .clone();
        let tests = verdict["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "tests")
            .cloned()
            .unwrap_or_else(|| panic!("no tests requirement: {verdict}"));
        assert_eq!(tests["evidence"], json!([vid]), "{verdict}");
        if status == "passed" {
            assert_eq!(v["valid"], true, "{v}");
            assert_eq!(tests["state"], "satisfied", "{verdict}");
            assert_eq!(verdict["approvable"], true, "{verdict}");
        } else {
            assert_eq!(v["valid"], false, "{v}");
            assert_eq!(stage(&v, "tests")["state"], "failed", "{v}");
            assert_eq!(tests["state"], "blocked", "{argv}: {verdict}");
            assert_eq!(verdict["approvable"], false, "{verdict}");
            let m = s.err(
                ALICE,
                "patch.apply",
                json!({"workspace_id": "ws1", "proposal_id": id,
                       "validation_id": v["validation_id"], "idempotency_key": format!("a{i}")}),
                "failed_precondition",
            );
            assert!(m.contains("not valid"), "{m}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(s.repo.join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.repo.join("b.txt")).unwrap(),
        "b\n"
    );
}

/// Two validated proposals applied at once from two threads.
fn race(s: &Server, a: (&Value, &Value), b: (&Value, &Value)) -> [(u16, Value); 2] {
    let body = |(id, v): (&Value, &Value), key: &str| {
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": key})
    };
    let (ba, bb) = (body(a, "race-a"), body(b, "race-b"));
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let ta = scope.spawn(|| {
            barrier.wait();
            s.call(ALICE, "patch.apply", ba)
        });
        let tb = scope.spawn(|| {
            barrier.wait();
            s.call(ALICE, "patch.apply", bb)
        });
        [ta.join().unwrap(), tb.join().unwrap()]
    })
}

#[test]
fn concurrent_applies_serialize_on_overlapping_files_and_both_succeed_on_disjoint_ones() {
    let Some(s) = server() else { return };
    let mut ready = vec![];
    for (i, edits) in [
        vec![("a.txt", Some("first\n"))],
        vec![("a.txt", Some("second\n")), ("b.txt", Some("b2\n"))],
    ]
    .iter()
    .enumerate()
    {
        // required_tests: a validation that ran no test never satisfies it.
        let (code, p) = create(&s, &diff_of(&s, edits), json!([["true"]]), &format!("o{i}"));
        assert_eq!(code, 200, "{p}");
        let (id, rev) = reviewed(&s, &p, &format!("o{i}"));
        let v = validated(&s, &id, &rev, &format!("o{i}"));
        assert_eq!(v["valid"], true, "{v}");
        ready.push((id, v));
    }
    let r = race(&s, (&ready[0].0, &ready[0].1), (&ready[1].0, &ready[1].1));
    let won: Vec<usize> = (0..2).filter(|&i| r[i].0 == 200).collect();
    assert_eq!(won.len(), 1, "exactly one overlapping apply lands: {r:?}");
    let lost = 1 - won[0];
    assert_eq!(r[lost].1["error"]["code"], "failed_precondition", "{r:?}");
    let a = std::fs::read_to_string(s.repo.join("a.txt")).unwrap();
    let b = std::fs::read_to_string(s.repo.join("b.txt")).unwrap();
    // Never a mix: the winner's post-images, the loser's paths untouched.
    if won[0] == 0 {
        assert_eq!((a.as_str(), b.as_str()), ("first\n", "b\n"));
    } else {
        assert_eq!((a.as_str(), b.as_str()), ("second\n", "b2\n"));
    }

    // Disjoint files: both land, in either order.
    let s = server().unwrap();
    let mut ready = vec![];
    for (i, path) in ["a.txt", "b.txt"].iter().enumerate() {
        let (code, p) = create(
            &s,
            &diff_of(&s, &[(path, Some("changed\n"))]),
            json!([["true"]]),
            &format!("d{i}"),
        );
        assert_eq!(code, 200, "{p}");
        let (id, rev) = reviewed(&s, &p, &format!("d{i}"));
        let v = validated(&s, &id, &rev, &format!("d{i}"));
        ready.push((id, v));
    }
    let r = race(&s, (&ready[0].0, &ready[0].1), (&ready[1].0, &ready[1].1));
    for (code, v) in &r {
        assert_eq!(*code, 200, "{v}");
        assert_eq!(v["transaction"]["status"], "applied", "{v}");
    }
    for path in ["a.txt", "b.txt"] {
        assert_eq!(
            std::fs::read_to_string(s.repo.join(path)).unwrap(),
            "changed\n"
        );
    }
}
