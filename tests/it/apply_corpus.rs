//! The governed path against git itself, on real Docker and a real worktree: a corpus of
//! commits the test makes (CRLF lines, Latin-1 bytes, a copy of a file the same commit
//! modifies, renames and deletions that empty directories, binary data, a type change, a
//! mode change) is applied commit by commit through claim -> propose -> validate -> apply and
//! by `git apply --binary` into a copy, and the two trees are compared byte for byte, modes,
//! links and the absence of empty directories included. Then symlinks the patch leaves must
//! resolve inside the tree judged from where they end up, and what reviewers see is what git
//! does.

use crate::support::daemon::{ALICE, Server};
use crate::support::repo::git;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

const EXTRA: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                     [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

fn server() -> Option<Server> {
    if !crate::toolchain::built("git") {
        return None;
    }
    Some(Server::governed_with(EXTRA))
}

fn b64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every entry beneath `dir` but `.git`, with the executable bit (all git records of a mode).
fn tree(dir: &Path) -> BTreeMap<String, String> {
    crate::support::repo::tree_snapshot(dir, 0o111)
}

fn write(root: &Path, path: &str, bytes: &[u8]) {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn commit(repo: &Path, msg: &str) -> String {
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", msg]);
    git(repo, &["rev-parse", "HEAD"]).trim().to_string()
}

/// The corpus: (name, commit) in order, each changing the previous one; the first is the base.
fn corpus(repo: &Path) -> Vec<(&'static str, String)> {
    use std::os::unix::fs::PermissionsExt;
    write(
        repo,
        "docs/make.bat",
        b"@echo off\r\nset A=1\r\nset B=2\r\n",
    );
    write(repo, "latin1.txt", b"caf\xe9\nna\xefve\n");
    write(
        repo,
        "src/lib.py",
        b"def f():\n    return 1\n\n\ndef g():\n    return 2\n\n\ndef h():\n    return 3\n",
    );
    write(repo, "old/dir/only.txt", b"moved\n");
    write(repo, "gone/deep/last.txt", b"last\n");
    write(
        repo,
        "img.bin",
        &(0u8..=255).cycle().take(3000).collect::<Vec<_>>(),
    );
    write(repo, "run.sh", b"#!/bin/sh\necho run\n");
    // Its first NUL is past git's first 8,000 bytes: git diffs it as text (as requests'
    // ext/requests-logo.ai), and its hunks carry the NUL.
    let late_nul = |tail: &[u8]| -> Vec<u8> {
        let mut b = b"%!PS-Adobe\n".repeat(800);
        b.extend_from_slice(b"late\0nul\n");
        b.extend_from_slice(tail);
        b
    };
    write(repo, "logo.ai", &late_nul(b"end\n"));
    std::os::unix::fs::symlink("README", repo.join("link")).unwrap();
    let mut out = vec![("base", commit(repo, "corpus base"))];
    write(repo, "logo.ai", &late_nul(b"END\n"));
    out.push((
        "late_nul",
        commit(repo, "a text file with a NUL past 8,000 bytes"),
    ));
    write(
        repo,
        "docs/make.bat",
        b"@echo off\r\nset A=10\r\nset B=2\r\n",
    );
    out.push(("crlf", commit(repo, "crlf")));
    write(repo, "latin1.txt", b"caf\xe9\nna\xefve\n\xfcber\n");
    out.push(("latin1", commit(repo, "latin-1")));
    let lib = std::fs::read(repo.join("src/lib.py")).unwrap();
    write(repo, "src/lib_copy.py", &lib);
    write(
        repo,
        "src/lib.py",
        b"def f():\n    return 10\n\n\ndef g():\n    return 2\n\n\ndef h():\n    return 3\n",
    );
    out.push((
        "copy_of_modified",
        commit(repo, "copy a file and change the original"),
    ));
    std::fs::create_dir_all(repo.join("new")).unwrap();
    std::fs::rename(repo.join("old/dir/only.txt"), repo.join("new/only.txt")).unwrap();
    std::fs::remove_dir_all(repo.join("old")).unwrap();
    out.push(("rename_empties", commit(repo, "rename out of a directory")));
    std::fs::remove_dir_all(repo.join("gone")).unwrap();
    out.push(("delete_empties", commit(repo, "delete the last file")));
    write(
        repo,
        "img.bin",
        &(0u8..=255).rev().cycle().take(2500).collect::<Vec<_>>(),
    );
    out.push(("binary", commit(repo, "binary")));
    std::fs::remove_file(repo.join("link")).unwrap();
    write(repo, "link", b"now a file\n");
    out.push(("type_change", commit(repo, "symlink to file")));
    write(repo, "run.sh", b"#!/bin/sh\necho ran\n");
    std::fs::set_permissions(repo.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    out.push(("mode", commit(repo, "mode change")));
    // A patch that brings attributes asking for conversions (CRLF endings, $Id$ expansion, a
    // filter): the post-images are the patch's bytes all the same, as git apply writes them.
    write(
        repo,
        ".gitattributes",
        b"*.txt text eol=crlf ident\n*.dat filter=upper\n",
    );
    write(repo, "notes.txt", b"one\n$Id$\ntwo\n");
    write(repo, "data.dat", b"lower case\n");
    out.push(("attributes", commit(repo, "attributes that would convert")));
    out
}

/// Claim, propose (as bytes), review and validate `patch`; then apply it. The apply's answer.
fn through_airlock(s: &Server, patch: &[u8], key: &str) -> (u16, Value) {
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": key, "summary_md": "s",
               "patch_base64": b64(patch), "idempotency_key": format!("p-{key}")}),
    );
    let (id, rev) = crate::support::governed::reviewed(s, &p, key);
    let v = crate::support::governed::validated(s, &id, &rev, key);
    assert_eq!(v["valid"], true, "{key}: {v}");
    s.call(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": format!("a-{key}")}),
    )
}

#[test]
fn real_commits_apply_byte_for_byte_as_git_apply_does() {
    let Some(s) = server() else { return };
    let commits = corpus(&s.repo);
    // The worktree starts at the corpus's base; the reference is a plain copy of it.
    git(&s.repo, &["checkout", "-q", &commits[0].1]);
    let reference = s.dir.path().join("reference");
    std::fs::create_dir(&reference).unwrap();
    let archive = std::process::Command::new("git")
        .args(["archive", &commits[0].1])
        .current_dir(&s.repo)
        .output()
        .unwrap()
        .stdout;
    let mut tar = std::process::Command::new("tar")
        .args(["-x", "-C"])
        .arg(&reference)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    tar.stdin.take().unwrap().write_all(&archive).unwrap();
    assert!(tar.wait().unwrap().success());
    assert_eq!(tree(&s.repo), tree(&reference));
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "claim"}),
    );
    for w in commits.windows(2) {
        let ((_, from), (name, to)) = (&w[0], &w[1]);
        let patch = std::process::Command::new("git")
            .args([
                "diff",
                "--binary",
                "--full-index",
                "-M",
                "-C",
                "-C",
                from,
                to,
            ])
            .current_dir(&s.repo)
            .output()
            .unwrap()
            .stdout;
        let text = String::from_utf8_lossy(&patch);
        // The corpus exercises what it says it does.
        let shape = match *name {
            "late_nul" => "late\0nul",
            "crlf" => "\r\n",
            "latin1" => "\u{fffd}",
            "copy_of_modified" => "copy from src/lib.py",
            "rename_empties" => "rename from old/dir/only.txt",
            "delete_empties" => "deleted file mode",
            "binary" => "GIT binary patch",
            "type_change" => "deleted file mode 120000",
            "attributes" => "eol=crlf ident",
            _ => "new mode 100755",
        };
        assert!(text.contains(shape), "{name}: {text}");
        let mut apply = std::process::Command::new("git")
            .args(["apply", "--binary"])
            .current_dir(&reference)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        apply.stdin.take().unwrap().write_all(&patch).unwrap();
        assert!(apply.wait().unwrap().success(), "git apply {name}");
        let (code, a) = through_airlock(&s, &patch, name);
        assert_eq!(code, 200, "{name}: {a}");
        assert_eq!(a["transaction"]["status"], "applied", "{name}: {a}");
        assert_eq!(tree(&s.repo), tree(&reference), "{name}");
    }
    // And both are exactly the last commit.
    git(&s.repo, &["add", "-A"]);
    let status = git(
        &s.repo,
        &["diff", "--cached", "--stat", &commits.last().unwrap().1],
    );
    assert_eq!(status.trim(), "", "the worktree is the last commit's tree");
    for d in ["old", "gone"] {
        assert!(!s.repo.join(d).exists(), "{d} emptied and removed");
    }
}

fn create(s: &Server, patch: &str, key: &str) -> (u16, Value) {
    s.call(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": key, "summary_md": "s",
               "patch": patch, "idempotency_key": key}),
    )
}

/// A worktree with `docs/up -> ../src`, `lnk -> ../outside` (outside the tree), `d/` and a
/// directory beside the worktree; alice claims `file:sx` and `file:docs/up`.
fn links_server() -> Option<Server> {
    let s = server()?;
    std::fs::create_dir_all(s.repo.join("src")).unwrap();
    std::fs::write(s.repo.join("src/a.rs"), "fn a() {}\n").unwrap();
    std::fs::create_dir_all(s.repo.join("docs")).unwrap();
    std::os::unix::fs::symlink("../src", s.repo.join("docs/up")).unwrap();
    std::os::unix::fs::symlink("../outside", s.repo.join("lnk")).unwrap();
    std::fs::create_dir_all(s.repo.join("d")).unwrap();
    std::fs::write(s.repo.join("d/secret"), "inside\n").unwrap();
    let outside = s.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "outside\n").unwrap();
    commit(&s.repo, "links");
    // File claims only, so the test's edits elsewhere make no claim stale.
    for path in ["sx", "docs/up"] {
        s.ok(
            ALICE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": format!("file:{path}"),
                   "mode": "write", "idempotency_key": format!("claim-{path}")}),
        );
    }
    Some(s)
}

#[test]
fn every_symlink_the_patch_leaves_resolves_inside_from_where_it_ends_up() {
    let Some(s) = links_server() else { return };
    let before = tree(&s.repo);
    // Refused at create: the tree tells what the patch text does not.
    for (what, patch, path) in [
        (
            "a link renamed up a level: docs/up -> ../src becomes up -> ../src",
            "diff --git a/docs/up b/up\nsimilarity index 100%\nrename from docs/up\nrename to up\n",
            "\"up\"",
        ),
        (
            "a copy of a link that already leaves the tree",
            "diff --git a/lnk b/lnk2\nsimilarity index 100%\ncopy from lnk\ncopy to lnk2\n",
            "\"lnk2\"",
        ),
        (
            "a new link whose target passes through an outside link",
            "diff --git a/sx b/sx\nnew file mode 120000\n--- /dev/null\n+++ b/sx\n@@ -0,0 +1 @@\n+lnk/secret\n\\ No newline at end of file\n",
            "\"sx\"",
        ),
    ] {
        let (code, v) = create(&s, patch, &format!("k-{}", path.trim_matches('"')));
        assert_eq!(code, 400, "{what}: {v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(
            m.contains(path) && m.contains("leaves the tree"),
            "{what}: {m}"
        );
    }
    let none = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(none["proposals"], json!([]), "nothing was filed");

    // Refused at validation when only the tree can tell: `sx -> d/secret` is inside when
    // proposed; then `d` becomes a link to the outside.
    let link = "diff --git a/sx b/sx\nnew file mode 120000\n--- /dev/null\n+++ b/sx\n@@ -0,0 +1 @@\n+d/secret\n\\ No newline at end of file\n";
    let (code, p) = create(&s, link, "inside-when-proposed");
    assert_eq!(code, 200, "{p}");
    let (id, rev) = crate::support::governed::reviewed(&s, &p, "sx");
    let swap = |to_outside: bool| {
        let d = s.repo.join("d");
        if to_outside {
            std::fs::rename(&d, s.dir.path().join("d-aside")).unwrap();
            std::os::unix::fs::symlink("lnk", &d).unwrap();
        } else {
            std::fs::remove_file(&d).unwrap();
            std::fs::rename(s.dir.path().join("d-aside"), &d).unwrap();
        }
    };
    swap(true);
    let v = crate::support::governed::validated(&s, &id, &rev, "v1");
    assert_eq!(v["valid"], false, "{v}");
    let dry = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "dry_run")
        .unwrap()
        .clone();
    assert_eq!(dry["state"], "failed", "{v}");
    let reason = dry["reason"].as_str().unwrap();
    assert!(
        reason.contains("\"sx\"") && reason.contains("passes through \"d\""),
        "{reason}"
    );
    // Validated while inside, the tree changes before apply: apply refuses, nothing changes.
    swap(false);
    let v = crate::support::governed::validated(&s, &id, &rev, "v2");
    assert_eq!(v["valid"], true, "{v}");
    swap(true);
    let m = s.err(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply"}),
        "failed_precondition",
    );
    assert!(m.contains("\"sx\"") && m.contains("leaves the tree"), "{m}");
    assert!(!s.repo.join("sx").exists());
    swap(false);
    assert_eq!(tree(&s.repo), before, "the worktree is as it was");
}

#[test]
fn what_reviewers_see_is_what_happens() {
    let Some(s) = links_server() else { return };
    // Two names without rename lines: git would delete one and overwrite the other.
    let (code, v) = create(
        &s,
        "diff --git a/src/a.rs b/d/secret\n--- a/src/a.rs\n+++ b/d/secret\n@@ -1 +1 @@\n-fn a() {}\n+x\n",
        "two-names",
    );
    assert_eq!(code, 400, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("without rename or copy lines"), "{m}");
    // A binary stub without data is refused at create, saying how to make a usable one.
    let (code, v) = create(
        &s,
        "diff --git a/img.bin b/img.bin\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111\nBinary files /dev/null and b/img.bin differ\n",
        "stub",
    );
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("--binary"), "{v}");
    // A type change is one change, shown as one, and lands as git's.
    let patch = "diff --git a/docs/up b/docs/up\ndeleted file mode 120000\n--- a/docs/up\n+++ /dev/null\n@@ -1 +0,0 @@\n-../src\n\\ No newline at end of file\n\
                 diff --git a/docs/up b/docs/up\nnew file mode 100644\n--- /dev/null\n+++ b/docs/up\n@@ -0,0 +1 @@\n+a file now\n";
    let (code, p) = create(&s, patch, "type-change");
    assert_eq!(code, 200, "{p}");
    let id = p["proposal"]["proposal_id"].clone();
    let files = s.ok(
        ALICE,
        "proposal.preview",
        json!({"workspace_id": "ws1", "proposal_id": id, "part": "files"}),
    );
    let one = files.to_string();
    assert_eq!(
        one.matches("\"operation\"").count(),
        1,
        "one change: {files}"
    );
    assert!(
        one.contains("\"type_change\"") && one.contains("120000") && one.contains("100644"),
        "{files}"
    );
    let (_, rev) = crate::support::governed::reviewed(&s, &p, "tc");
    let v = crate::support::governed::validated(&s, &id, &rev, "tc");
    assert_eq!(v["valid"], true, "{v}");
    s.ok(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply-tc"}),
    );
    let md = std::fs::symlink_metadata(s.repo.join("docs/up")).unwrap();
    assert!(md.is_file(), "a file now");
    assert_eq!(
        std::fs::read_to_string(s.repo.join("docs/up")).unwrap(),
        "a file now\n"
    );
}
