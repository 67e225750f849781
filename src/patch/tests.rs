//! The parser against real patches git writes (cross-checked with `git apply --numstat
//! --summary`), this repository's own history, hostile shapes, and random damage.

use super::*;
use names::quote_if_needed;
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn git_in(dir: &Path, args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let w = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    let _ = w.join();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What `git apply --numstat -z` and `--summary` say about a patch, by new (or old) path:
/// (added, removed) with `None` for binary, and the summary kind.
type GitView = std::collections::HashMap<String, (Option<(u64, u64)>, &'static str)>;

fn git_view(dir: &Path, patch: &[u8]) -> GitView {
    let numstat = git_in(dir, &["apply", "--numstat", "-z", "-"], patch);
    let mut out = std::collections::HashMap::new();
    let mut fields = numstat.split(|b| *b == 0).peekable();
    while let Some(first) = fields.next() {
        if first.is_empty() {
            continue;
        }
        let s = String::from_utf8(first.to_vec()).unwrap();
        let mut parts = s.splitn(3, '\t');
        let (a, r, path) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let counts = (a != "-").then(|| (a.parse().unwrap(), r.parse().unwrap()));
        let path = if path.is_empty() {
            // A rename or copy: old and new follow as their own fields.
            let _old = fields.next().unwrap();
            String::from_utf8(fields.next().unwrap().to_vec()).unwrap()
        } else {
            path.to_string()
        };
        out.insert(path, (counts, "modify"));
    }
    let summary = String::from_utf8(git_in(dir, &["apply", "--summary", "-"], patch)).unwrap();
    for line in summary.lines() {
        let l = line.trim_start();
        let (kind, rest) = if let Some(r) = l.strip_prefix("create mode ") {
            ("create", r.split_once(' ').unwrap().1.to_string())
        } else if let Some(r) = l.strip_prefix("delete mode ") {
            ("delete", r.split_once(' ').unwrap().1.to_string())
        } else if let Some(r) = l.strip_prefix("rename ") {
            ("rename", r.to_string())
        } else if let Some(r) = l.strip_prefix("copy ") {
            ("copy", r.to_string())
        } else if let Some(r) = l.strip_prefix("mode change ") {
            ("mode", r.splitn(4, ' ').nth(3).unwrap().to_string())
        } else {
            continue;
        };
        // Renames and copies are summarised as `a/{x => y}`; match them by kind count below.
        if let Some(e) = out.get_mut(&rest) {
            e.1 = kind;
        } else {
            out.insert(format!("{kind}:{rest}"), (None, kind));
        }
    }
    out
}

/// Parses `patch` and compares every file with git's own reading of it.
fn cross_check(dir: &Path, patch: &[u8]) -> Patch {
    let parsed = parse(patch).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(patch)));
    let view = git_view(dir, patch);
    for f in &parsed.files {
        let path = f.new_path.clone().or(f.old_path.clone()).unwrap();
        let (counts, _) = view
            .get(&path)
            .unwrap_or_else(|| panic!("git did not list {path:?}: {view:?}"));
        match counts {
            Some((a, r)) => {
                assert!(!f.binary, "{path}: git counts lines, we said binary");
                assert_eq!((f.added, f.removed), (*a, *r), "{path}");
                let in_ranges: u64 = f.changed.iter().map(|r| r.len).sum();
                assert_eq!(
                    in_ranges, f.removed,
                    "{path}: every removed line is in a range"
                );
            }
            None => assert!(f.binary, "{path}: git says binary"),
        }
    }
    let kinds = |k: &str| view.values().filter(|(_, kind)| *kind == k).count();
    let ours = |k: ChangeKind| parsed.files.iter().filter(|f| f.kind == k).count();
    assert_eq!(ours(ChangeKind::Create), kinds("create"), "{view:?}");
    assert_eq!(ours(ChangeKind::Delete), kinds("delete"), "{view:?}");
    assert_eq!(ours(ChangeKind::Rename), kinds("rename"), "{view:?}");
    assert_eq!(ours(ChangeKind::Copy), kinds("copy"), "{view:?}");
    // git lists every file once in --numstat; summary-only keys (renames, copies) are extra.
    assert_eq!(
        parsed.files.len(),
        view.keys().filter(|k| !k.contains(':')).count(),
        "{view:?}"
    );
    parsed
}

fn write(dir: &Path, path: &str, bytes: &[u8]) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// A repository whose history has every kind of change the grammar knows.
fn corpus_repo() -> (tempfile::TempDir, Vec<(String, Vec<u8>)>) {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    git(r, &["init", "-q", "-b", "main"]);
    let lines: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    write(r, "src/lib.rs", lines.as_bytes());
    write(r, "docs/guide.md", b"# Guide\n\nSome words.\n");
    write(
        r,
        "keep.txt",
        (1..=30)
            .map(|i| format!("keep {i}\n"))
            .collect::<String>()
            .as_bytes(),
    );
    write(
        r,
        "bin/blob.bin",
        &(0..=255u8).cycle().take(3000).collect::<Vec<u8>>(),
    );
    write(r, "gone.txt", b"to be deleted\n");
    git(r, &["add", "-A"]);
    git(r, &["commit", "-q", "-m", "base"]);
    let mut steps: Vec<(String, Vec<u8>)> = vec![];
    let mut commit = |msg: &str, change: &dyn Fn(&Path)| {
        change(r);
        git(r, &["add", "-A"]);
        git(r, &["commit", "-q", "-m", msg]);
        let p = git(
            r,
            &[
                "show",
                "--format=",
                "--binary",
                "--full-index",
                "-M",
                "-C",
                "--find-copies-harder",
                "HEAD",
            ],
        );
        steps.push((msg.to_string(), p));
    };
    commit("modify in the middle and at both ends", &|r| {
        let mut s: Vec<String> = (1..=40).map(|i| format!("line {i}\n")).collect();
        s[0] = "first changed\n".into();
        s[19] = "middle changed\n".into();
        s.insert(25, "inserted\n".into());
        s.pop();
        write(r, "src/lib.rs", s.concat().as_bytes());
    });
    commit("create, delete, no trailing newline", &|r| {
        write(r, "new/file.txt", b"no newline at the end");
        std::fs::remove_file(r.join("gone.txt")).unwrap();
        write(r, "empty.txt", b"");
    });
    commit("rename with edits", &|r| {
        let mut s = std::fs::read_to_string(r.join("keep.txt")).unwrap();
        s.push_str("one more\n");
        std::fs::remove_file(r.join("keep.txt")).unwrap();
        write(r, "moved/keep.txt", s.as_bytes());
    });
    commit("copy", &|r| {
        let s = std::fs::read(r.join("moved/keep.txt")).unwrap();
        write(r, "copied/keep.txt", &s);
    });
    commit("mode only, and mode with content", &|r| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            r.join("docs/guide.md"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        write(r, "src/lib.rs", b"rewritten\n");
        std::fs::set_permissions(r.join("src/lib.rs"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    });
    commit("binary modify and create", &|r| {
        let mut b = std::fs::read(r.join("bin/blob.bin")).unwrap();
        b[100] ^= 0xff;
        write(r, "bin/blob.bin", &b);
        write(r, "bin/new.bin", &[0u8, 1, 2, 3, 0, 255, 254]);
    });
    commit("symlinks inside the tree", &|r| {
        std::os::unix::fs::symlink("../docs/guide.md", r.join("src/guide-link")).unwrap();
        std::os::unix::fs::symlink("keep.txt", r.join("moved/alias")).unwrap();
    });
    commit("quoted unicode, tab and space names", &|r| {
        write(r, "naïve/größe.txt", b"unicode\n");
        write(r, "tab\there.txt", b"tab\n");
        write(r, "with space/a b.txt", b"space\n");
        write(r, "quote\"d.txt", b"quote\n");
    });
    commit("rename of a quoted name", &|r| {
        std::fs::rename(r.join("naïve/größe.txt"), r.join("naïve/kleiner.txt")).unwrap();
    });
    // requests' ext/requests-logo.ai: git diffs a file whose first NUL is past 8,000 bytes
    // as text, and git apply applies its hunks.
    commit("a NUL past git's first 8,000 bytes: still text", &|r| {
        let mut b = vec![b'x'; 9000];
        b.extend_from_slice(b"\nl\0ate\nend\n");
        write(r, "late-nul.ai", &b);
    });
    commit("a line beside the late NUL changed", &|r| {
        let mut b = vec![b'x'; 9000];
        b.extend_from_slice(b"\nl\0ate\nEND\n");
        write(r, "late-nul.ai", &b);
    });
    (d, steps)
}

#[test]
fn real_patches_parse_exactly_as_git_reads_them() {
    let (d, steps) = corpus_repo();
    let mut kinds = std::collections::HashSet::new();
    for (msg, p) in &steps {
        let parsed = cross_check(d.path(), p);
        assert!(!parsed.files.is_empty(), "{msg}");
        kinds.extend(parsed.files.iter().map(|f| f.kind));
    }
    for k in [
        ChangeKind::Create,
        ChangeKind::Delete,
        ChangeKind::Modify,
        ChangeKind::Rename,
        ChangeKind::Copy,
        ChangeKind::ModeOnly,
    ] {
        assert!(kinds.contains(&k), "the corpus has no {k:?}");
    }
    // The whole history as one diff, and as format-patch mail (preamble and signature).
    let all = git(
        d.path(),
        &["diff", "--binary", "--full-index", "-M", "HEAD~11", "HEAD"],
    );
    cross_check(d.path(), &all);
    let mails = git(
        d.path(),
        &[
            "format-patch",
            "--stdout",
            "--binary",
            "--full-index",
            "-M",
            "HEAD~1",
        ],
    );
    cross_check(d.path(), &mails);
}

#[test]
fn changed_line_ranges_are_the_changed_lines_not_the_hunks() {
    let (_d, steps) = corpus_repo();
    let p = parse(&steps[0].1).unwrap();
    let f = &p.files[0];
    assert_eq!(f.kind, ChangeKind::Modify);
    assert_eq!(f.new_path.as_deref(), Some("src/lib.rs"));
    // line 1 replaced, line 20 replaced, an insertion before old line 26, line 40 removed.
    assert_eq!(
        f.changed,
        vec![
            OldRange { start: 1, len: 1 },
            OldRange { start: 20, len: 1 },
            OldRange { start: 26, len: 0 },
            OldRange { start: 40, len: 1 },
        ]
    );
    assert_eq!((f.added, f.removed), (3, 3));
    let created = &parse(&steps[1].1).unwrap().files;
    let nl = created
        .iter()
        .find(|f| f.new_path.as_deref() == Some("new/file.txt"))
        .unwrap();
    assert_eq!((nl.kind, nl.added, nl.removed), (ChangeKind::Create, 1, 0));
    let empty = created
        .iter()
        .find(|f| f.new_path.as_deref() == Some("empty.txt"))
        .unwrap();
    assert_eq!((empty.kind, empty.added), (ChangeKind::Create, 0));
    let links = parse(&steps[6].1).unwrap();
    let link = links
        .files
        .iter()
        .find(|f| f.new_path.as_deref() == Some("src/guide-link"))
        .unwrap();
    assert_eq!(link.new_mode, Some(FileMode::Symlink));
    assert_eq!(link.symlink_target.as_deref(), Some("../docs/guide.md"));
    let names = parse(&steps[7].1).unwrap();
    let mut got: Vec<&str> = names
        .files
        .iter()
        .filter_map(|f| f.new_path.as_deref())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "naïve/größe.txt",
            "quote\"d.txt",
            "tab\there.txt",
            "with space/a b.txt"
        ]
    );
}

#[test]
fn this_repositorys_own_history_parses_as_git_reads_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !root.join(".git").exists() {
        eprintln!("not a git checkout; the corpus test above covers the grammar");
        return;
    }
    let shallow = String::from_utf8(git(root, &["rev-parse", "--is-shallow-repository"])).unwrap();
    if shallow.trim() == "true" {
        eprintln!(
            "a shallow clone has no history to read; the corpus test above covers the grammar"
        );
        return;
    }
    let revs = String::from_utf8(git(
        root,
        &["rev-list", "--no-merges", "--max-count=40", "HEAD"],
    ))
    .unwrap();
    let mut checked = 0;
    for rev in revs.lines() {
        let parents =
            String::from_utf8(git(root, &["rev-list", "--parents", "-n", "1", rev])).unwrap();
        if parents.split_whitespace().count() != 2 {
            continue;
        }
        let p = git(
            root,
            &["show", "--format=", "--binary", "--full-index", "-M", rev],
        );
        if p.is_empty() {
            continue;
        }
        cross_check(root, &p);
        checked += 1;
    }
    assert!(checked > 0, "no commit of this repository was checked");
}

fn refused(patch: &str, needle: &str) {
    match parse(patch.as_bytes()) {
        Ok(p) => panic!("accepted {p:?}\n{patch}"),
        Err(e) => assert!(e.to_string().contains(needle), "{e}\n{patch}"),
    }
}

const Z: &str = "0000000000000000000000000000000000000000";
const A: &str = "1111111111111111111111111111111111111111";

#[test]
fn hostile_and_malformed_patches_are_refused_with_the_line() {
    // GNU patch's ed-script CVE-2018-1000156: no git diff at all.
    refused(
        "--- a/x\n+++ b/x\n1c\n!id > /tmp/pwned\n.\n",
        "only git's own diff format",
    );
    refused("1a\n!sh\n.\nw\n", "no `diff --git` section");
    // GNU patch's CVE-2019-13636 shape: plant a symlink out of the tree, write through it.
    let plant = format!(
        "diff --git a/link b/link\nnew file mode 120000\nindex {Z}..{A}\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+../../etc\n\\ No newline at end of file\n"
    );
    refused(&plant, "leaves the tree");
    refused(
        "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n",
        "absolute",
    );
    // Inside the tree, but the patch then writes beyond it.
    let inside = "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+sub\n\\ No newline at end of file\n\
         diff --git a/link/file b/link/file\nnew file mode 100644\n--- /dev/null\n+++ b/link/file\n@@ -0,0 +1 @@\n+x\n";
    refused(inside, "beyond the symbolic link");
    // Git's CVE-2023-23946 shape: a renamed symlink, then a file through its new name.
    let renamed = "diff --git a/l b/m\nsimilarity index 100%\nrename from l\nrename to m\n\
         diff --git a/m/x b/m/x\nnew file mode 100644\n--- /dev/null\n+++ b/m/x\n@@ -0,0 +1 @@\n+x\n";
    let parsed_rename_only = parse(
        "diff --git a/l b/m\nold mode 120000\nnew mode 120000\nsimilarity index 100%\nrename from l\nrename to m\n"
            .as_bytes(),
    );
    assert!(parsed_rename_only.is_ok(), "{parsed_rename_only:?}");
    let through = format!(
        "diff --git a/l b/m\nold mode 120000\nnew mode 120000\nsimilarity index 100%\nrename from l\nrename to m\n{}",
        &renamed[renamed.find("diff --git a/m/x").unwrap()..]
    );
    refused(&through, "beyond the symbolic link");
    // Names that disagree.
    refused(
        "diff --git a/x b/x\n--- a/y\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        "--- names",
    );
    refused(
        "diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to z\n--- a/x\n+++ b/z\n@@ -1 +1 @@\n-a\n+b\n",
        "disagree",
    );
    // One path twice.
    let twice = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
    refused(&format!("{twice}{twice}"), "touched twice");
    // Unsafe paths.
    refused(
        "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n",
        ".git",
    );
    refused(
        "diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
        "'..'",
    );
    refused(
        "diff --git a/.GIT/hooks/x b/.GIT/hooks/x\nnew file mode 100755\n--- /dev/null\n+++ b/.GIT/hooks/x\n@@ -0,0 +1 @@\n+x\n",
        ".git",
    );
    // A binary stub without its data (git diff without --binary): refused at once.
    refused(
        "diff --git a/b.bin b/b.bin\nindex 1111111..2222222 100644\nBinary files a/b.bin and b/b.bin differ\n",
        "git diff --binary",
    );
    // Two names without rename or copy lines: git deletes one and overwrites the other.
    refused(
        "diff --git a/x b/y\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n",
        "without rename or copy lines",
    );
    // A NUL in a text hunk is text, as git apply reads it (it applies such a hunk).
    let nul = parse(b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\0c\n").unwrap();
    assert_eq!((nul.files[0].added, nul.files[0].removed), (1, 1));
    // Hunk counts that do not match the body, both ways.
    refused(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n",
        "ends inside a hunk",
    );
    refused(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n",
        "not part of a git diff",
    );
    refused(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n junk\n",
        "more context lines",
    );
    refused(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @ \n-a\n+b\n",
        "not a hunk header",
    );
    // Lines the grammar does not explain.
    refused(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nrm -rf /\n",
        "not part of a git diff",
    );
    refused(
        "diff --git a/x b/x\nmystery header\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        "not part of a git diff",
    );
    refused(
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ Something else\n",
        "unknown `\\` line",
    );
    refused("diff --cc x\n", "only git's own diff format");
    // Encoding: hunk lines may hold any bytes and CRLF (git applies them as bytes), header
    // lines may not.
    let latin1 = parse(b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\xff\n+b\n").unwrap();
    assert_eq!((latin1.files[0].added, latin1.files[0].removed), (1, 1));
    assert!(
        parse(b"diff --git a/x b/x\n--- a/\xff\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
            .unwrap_err()
            .to_string()
            .contains("not UTF-8")
    );
    assert!(
        parse(b"diff --git a/\xff b/\xff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
            .unwrap_err()
            .to_string()
            .contains("not UTF-8")
    );
    let crlf = parse(b"diff --git a/m.bat b/m.bat\n--- a/m.bat\n+++ b/m.bat\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n").unwrap();
    assert_eq!((crlf.files[0].added, crlf.files[0].removed), (1, 1));
    refused(
        "diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n",
        "carriage return",
    );
    assert!(
        parse(b"diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+t\xff\n\\ No newline at end of file\n")
            .unwrap_err()
            .to_string()
            .contains("symlink target")
    );
    refused("", "no `diff --git` section");
    // Quoting.
    refused(
        "diff --git \"a/x\\q\" \"b/x\\q\"\n--- \"a/x\\q\"\n+++ \"b/x\\q\"\n@@ -1 +1 @@\n-a\n+b\n",
        "unknown escape",
    );
}

#[test]
fn a_header_split_inside_a_multibyte_character_is_refused_not_a_panic() {
    // Found by `cargo fuzz` (fuzz/): "a/" + a 3-byte character + "ab" is 7 bytes, so the
    // midpoint test of the `a/X b/X` form sliced inside the character.
    for header in [
        &b"diff --git a/\xe9\x9f\x9fab\n"[..],
        b"diff --git a/\xe9\x9f\x9fab b/x\n",
        b"diff --git a/x\xe9\x9f\x9f b/x\xe9\x9f\x9f\n",
    ] {
        let _ = parse(header);
    }
    let p = parse("diff --git a/é b/é\nnew file mode 100644\n".as_bytes()).unwrap();
    assert_eq!(p.files[0].new_path.as_deref(), Some("é"));
}

#[test]
fn quoted_names_decode_as_git_writes_them() {
    assert_eq!(
        unquote("\"a/na\\303\\257ve\\tx\\\"y\\\\z\"", 1).unwrap(),
        "a/naïve\tx\"y\\z"
    );
    assert_eq!(unquote("plain name", 1).unwrap(), "plain name");
    assert!(unquote("\"a/\\777\"", 1).is_err() || unquote("\"a/\\777\"", 1).is_ok());
    assert!(unquote("\"a/x", 1).is_err());
    assert!(unquote("\"a/\\38\"", 1).is_err());
    for name in ["a/naïve", "a/tab\tx", "a/q\"x", "a/plain"] {
        assert_eq!(unquote(&quote_if_needed(name), 1).unwrap(), name);
    }
}

/// A deterministic generator, so a failure reproduces from its printed seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn damaged_patches_never_panic_the_parser() {
    let (_d, steps) = corpus_repo();
    let seed = std::env::var("AIRLOCK_PATCH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15u64);
    eprintln!("damage seed {seed} (AIRLOCK_PATCH_SEED={seed} repeats it)");
    let mut rng = XorShift(seed);
    let pieces: &[&[u8]] = &[
        b"\n",
        b"@@ -1 +1 @@\n",
        b"diff --git a/x b/x\n",
        b"\\",
        b"\"",
        b" ",
        b"+",
        b"-",
        b"\t",
        b"\xff",
        b"GIT binary patch\n",
        b"literal 5\n",
        b"rename from ",
        b"\\ No newline at end of file\n",
    ];
    for _ in 0..3000 {
        let base = &steps[(rng.next() as usize) % steps.len()].1;
        let mut p = base.clone();
        for _ in 0..1 + rng.next() % 4 {
            if p.is_empty() {
                break;
            }
            let at = (rng.next() as usize) % p.len();
            match rng.next() % 4 {
                0 => p[at] = rng.next() as u8,
                1 => {
                    p.remove(at);
                }
                2 => {
                    let piece = pieces[(rng.next() as usize) % pieces.len()];
                    p.splice(at..at, piece.iter().copied());
                }
                _ => p.truncate(at),
            }
        }
        let _ = parse(&p);
    }
}

mod properties {
    //! Property tests (proptest, shrinking to a minimal failing input): whatever the bytes,
    //! the parser answers without panicking, and what it accepts keeps its promises.
    use super::super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_string()),
            Just("dir/b.rs".to_string()),
            Just("\"q\\tx\"".to_string()),
            Just("\"na\\303\\257ve\"".to_string()),
            Just("../up".to_string()),
            Just(".git/config".to_string()),
            Just("/abs".to_string()),
            "[a-z]{1,3}(/[a-z]{1,3}){0,2}",
            // Multibyte characters, so byte offsets can fall inside one.
            "[a-zé韟 ]{1,5}",
        ]
    }

    /// Lines shaped like the extended diff grammar, in any order and any combination.
    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            (name(), name()).prop_map(|(a, b)| format!("diff --git a/{a} b/{b}")),
            name().prop_map(|n| format!("--- a/{n}")),
            name().prop_map(|n| format!("+++ b/{n}")),
            Just("--- /dev/null".to_string()),
            Just("+++ /dev/null".to_string()),
            (0u64..5, 0u64..5, 0u64..5, 0u64..5)
                .prop_map(|(a, b, c, d)| format!("@@ -{a},{b} +{c},{d} @@")),
            (0u64..5, 0u64..5).prop_map(|(a, c)| format!("@@ -{a} +{c} @@ fn x()")),
            "[ +-][ -~]{0,12}",
            Just("\\ No newline at end of file".to_string()),
            Just("new file mode 100644".to_string()),
            Just("deleted file mode 100755".to_string()),
            Just("old mode 100644".to_string()),
            Just("new mode 120000".to_string()),
            name().prop_map(|n| format!("rename from {n}")),
            name().prop_map(|n| format!("rename to {n}")),
            name().prop_map(|n| format!("copy from {n}")),
            (0u8..=100).prop_map(|p| format!("similarity index {p}%")),
            ("[0-9a-f]{7,40}", "[0-9a-f]{7,40}")
                .prop_map(|(a, b)| format!("index {a}..{b} 100644")),
            (name(), name()).prop_map(|(a, b)| format!("Binary files a/{a} and b/{b} differ")),
            Just("GIT binary patch".to_string()),
            (0u64..64).prop_map(|k| format!("literal {k}")),
            (0u64..64).prop_map(|k| format!("delta {k}")),
            "[A-Za-z][0-9A-Za-z!#$%&()*+;<=>?@^_`{|}~-]{0,20}",
            Just(String::new()),
        ]
    }

    /// One well-formed modification section: `ctx` context lines, then `rem` removed and
    /// `add` added lines.
    fn section(path: &str, ctx: usize, rem: usize, add: usize) -> String {
        let mut s = format!(
            "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{} +1,{} @@\n",
            ctx + rem,
            ctx + add
        );
        for i in 0..ctx {
            s.push_str(&format!(" ctx {i}\n"));
        }
        for i in 0..rem {
            s.push_str(&format!("-old {i}\n"));
        }
        for i in 0..add {
            s.push_str(&format!("+new {i}\n"));
        }
        s
    }

    /// Well-formed patches: 1..6 files with distinct safe names and random hunk shapes.
    fn well_formed() -> impl Strategy<Value = (String, Vec<(String, u64, u64)>)> {
        proptest::collection::btree_map(
            "[a-z]{1,4}(/[a-z]{1,4}){0,2}",
            (0usize..4, 0usize..5, 0usize..5),
            1..6,
        )
        .prop_filter("a hunk changes something", |m| {
            m.values().all(|(_, r, a)| r + a > 0)
        })
        .prop_filter("no name is a directory of another", |m| {
            m.keys()
                .all(|a| m.keys().all(|b| !b.starts_with(&format!("{a}/"))))
        })
        .prop_map(|m| {
            let text: String = m
                .iter()
                .map(|(p, (c, r, a))| section(p, *c, *r, *a))
                .collect();
            let want = m
                .iter()
                .map(|(p, (_, r, a))| (p.clone(), *a as u64, *r as u64))
                .collect();
            (text, want)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn well_formed_patches_parse_to_exactly_their_model((text, want) in well_formed()) {
            let patch = parse(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            let got: Vec<(String, u64, u64)> = patch
                .files
                .iter()
                .map(|f| (f.new_path.clone().unwrap_or_default(), f.added, f.removed))
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn a_well_formed_patch_with_one_grammar_line_spliced_in_never_panics(
            (text, _) in well_formed(),
            extra in line(),
            at in any::<prop::sample::Index>(),
        ) {
            let mut lines: Vec<&str> = text.lines().collect();
            let i = at.index(lines.len() + 1);
            lines.insert(i, &extra);
            let damaged = lines.join("\n") + "\n";
            if let Ok(patch) = parse(damaged.as_bytes()) {
                let mut seen = std::collections::HashSet::new();
                for f in &patch.files {
                    for p in f.paths() {
                        prop_assert!(check_path(p).is_ok(), "unsafe path accepted: {p:?}");
                        prop_assert!(seen.insert(p.to_string()), "{p:?} touched twice");
                    }
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn grammar_shaped_input_never_panics_and_accepted_patches_keep_their_promises(
            lines in proptest::collection::vec(line(), 0..40),
            trailing_newline in any::<bool>(),
        ) {
            let mut text = lines.join("\n");
            if trailing_newline {
                text.push('\n');
            }
            if let Ok(patch) = parse(text.as_bytes()) {
                let mut seen = std::collections::HashSet::new();
                for f in &patch.files {
                    for p in f.paths() {
                        prop_assert!(check_path(p).is_ok(), "unsafe path accepted: {p:?}");
                        prop_assert!(seen.insert(p.to_string()), "{p:?} touched twice");
                    }
                    let changed: u64 = f.changed.iter().map(|r| r.len).sum();
                    prop_assert!(changed <= f.removed, "changed old lines {changed} > removed {}", f.removed);
                }
            }
        }
    }
}
