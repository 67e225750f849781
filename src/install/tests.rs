//! The installer on real files: a full round trip, a crash after every single step (then
//! recovery: exactly pre or exactly post, no temp files left), refusals that change nothing,
//! symlink escapes, tampered staged files and artifacts.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    artifacts: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("wt");
    let artifacts = dir.path().join("artifacts");
    let outside = dir.path().join("outside");
    for d in [&root, &artifacts, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/b.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        root.join("dir/b.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    std::fs::write(root.join("mode.txt"), "m\n").unwrap();
    Tree {
        _dir: dir,
        root,
        artifacts,
        outside,
    }
}

fn file(s: &str) -> Image {
    Image::File {
        executable: false,
        bytes: s.as_bytes().to_vec(),
    }
}

fn plan(tx: &str) -> Plan {
    Plan {
        transaction_id: tx.into(),
        head: Some("0".repeat(40)),
        changes: vec![
            Change {
                path: "a.txt".into(),
                after: file("a\nmore\n"),
            },
            Change {
                path: "dir/b.sh".into(),
                after: Image::Absent,
            },
            Change {
                path: "new/deep/c.txt".into(),
                after: file("c\n"),
            },
            Change {
                path: "link".into(),
                after: Image::Symlink {
                    target: "new/deep/c.txt".into(),
                },
            },
            Change {
                path: "mode.txt".into(),
                after: Image::File {
                    executable: true,
                    bytes: b"m\n".to_vec(),
                },
            },
        ],
    }
}

/// Every file beneath `dir`, with its kind, mode and content (a snapshot to compare).
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut out = vec![];
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.file_type().is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                ));
            } else if md.is_dir() {
                out.push((rel.clone(), "dir".into()));
                walk(base, &p, out);
            } else {
                out.push((
                    rel,
                    format!(
                        "{:o} {}",
                        md.permissions().mode() & 0o777,
                        String::from_utf8_lossy(&std::fs::read(&p).unwrap())
                    ),
                ));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

fn post_snapshot() -> Vec<(String, String)> {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    let rb = prepare(&root, &plan("tx0"), None, &t.artifacts).unwrap();
    install(&root, &rb).unwrap();
    snapshot(&t.root)
}

#[test]
fn a_round_trip_installs_exact_post_images_and_leaves_no_temp_file() {
    let t = tree();
    let before = snapshot(&t.root);
    let root = Root::open(&t.root).unwrap();
    let rb = prepare(&root, &plan("tx1"), None, &t.artifacts).unwrap();
    // Prepared: the artifact is durable and checks out; no path changed yet.
    let read = read_artifact(&t.artifacts, "tx1").unwrap();
    assert_eq!(read, rb);
    assert!(
        inspect(&root, &rb)
            .unwrap()
            .iter()
            .all(|r| matches!(r.state, PathState::StagedOnly | PathState::Pre))
    );
    assert_eq!(current(&root, "a.txt").unwrap(), file("a\n"));
    assert_eq!(rb.created_dirs, ["new", "new/deep"]);
    assert_eq!(
        rb.entries[1].before,
        Image::File {
            executable: true,
            bytes: b"#!/bin/sh\n".to_vec()
        },
        "the pre-image keeps its bytes and mode"
    );
    install(&root, &rb).unwrap();
    let after = snapshot(&t.root);
    assert!(
        after.iter().all(|(p, _)| !p.contains(".airlock-stage-")),
        "{after:?}"
    );
    assert!(
        inspect(&root, &rb)
            .unwrap()
            .iter()
            .all(|r| r.state == PathState::Post)
    );
    let get = |p: &str| after.iter().find(|(q, _)| q == p).map(|(_, v)| v.clone());
    assert_eq!(get("a.txt").as_deref(), Some("644 a\nmore\n"));
    assert_eq!(get("dir/b.sh"), None);
    assert_eq!(get("new/deep/c.txt").as_deref(), Some("644 c\n"));
    assert_eq!(get("link").as_deref(), Some("-> new/deep/c.txt"));
    assert_eq!(get("mode.txt").as_deref(), Some("755 m\n"));
    assert_ne!(before, after);
    // Installing again changes nothing.
    install(&root, &rb).unwrap();
    assert_eq!(snapshot(&t.root), after);
}

#[test]
fn a_crash_after_any_step_recovers_to_exactly_pre_or_exactly_post() {
    let post = post_snapshot();
    let steps = plan("x").changes.len();
    for k in 0..=steps {
        // Crash during install after k steps: finish forward.
        let t = tree();
        let root = Root::open(&t.root).unwrap();
        let rb = prepare(&root, &plan("tx"), None, &t.artifacts).unwrap();
        install_steps(&root, &rb, k).unwrap();
        let states = inspect(&root, &rb).unwrap();
        assert!(
            states.iter().all(|r| r.state != PathState::Other),
            "after {k} steps: {states:?}"
        );
        let rb = read_artifact(&t.artifacts, "tx").unwrap();
        finish_forward(&root, &rb).unwrap();
        assert_eq!(snapshot(&t.root), post, "rolled forward after {k} steps");
    }
    // Crash after prepare, before install began: undo it.
    let t = tree();
    let pre = snapshot(&t.root);
    let root = Root::open(&t.root).unwrap();
    let rb = prepare(&root, &plan("tx"), None, &t.artifacts).unwrap();
    undo_prepare(&root, &rb).unwrap();
    assert_eq!(
        snapshot(&t.root),
        pre,
        "staged files and created directories are gone"
    );
    // An undo once the install began is refused: that is a roll forward's job.
    let rb = prepare(&root, &plan("tx2"), None, &t.artifacts).unwrap();
    install_steps(&root, &rb, 1).unwrap();
    assert!(undo_prepare(&root, &rb).is_err());
}

#[test]
fn a_preparation_that_fails_part_way_leaves_nothing_staged() {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    // Entry 2's staged name is taken (O_EXCL fails there), after entry 0 was staged and
    // new/deep created.
    std::fs::create_dir_all(t.root.join("new/deep")).unwrap();
    std::fs::write(
        t.root.join("new/deep").join(staged_name("tx", 2)),
        "in the way",
    )
    .unwrap();
    let pre = snapshot(&t.root);
    let e = prepare(&root, &plan("tx"), None, &t.artifacts).unwrap_err();
    assert!(e.to_string().contains("staged file"), "{e}");
    assert_eq!(snapshot(&t.root), pre, "entry 0's staged file is gone too");
    assert!(read_artifact(&t.artifacts, "tx").is_err());
}

#[test]
fn deletions_remove_the_directories_they_empty_and_nothing_else() {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    std::fs::create_dir_all(t.root.join("x/y/z")).unwrap();
    std::fs::write(t.root.join("x/y/z/only"), "o\n").unwrap();
    std::fs::create_dir_all(t.root.join("keep/sub")).unwrap();
    std::fs::write(t.root.join("keep/sub/gone"), "g\n").unwrap();
    std::fs::write(t.root.join("keep/stays"), "s\n").unwrap();
    let p = Plan {
        transaction_id: "del".into(),
        head: None,
        changes: ["x/y/z/only", "keep/sub/gone"]
            .into_iter()
            .map(|path| Change {
                path: path.into(),
                after: Image::Absent,
            })
            .collect(),
    };
    let rb = prepare(&root, &p, None, &t.artifacts).unwrap();
    install(&root, &rb).unwrap();
    assert!(!t.root.join("x").exists(), "x/y/z, x/y and x emptied");
    assert!(!t.root.join("keep/sub").exists());
    assert!(
        t.root.join("keep/stays").exists(),
        "a directory still in use stays"
    );
    // Finishing again (recovery after a crash) is a no-op, not an error.
    install(&root, &rb).unwrap();
    assert_eq!(
        inspect(&root, &rb)
            .unwrap()
            .iter()
            .filter(|r| r.state != PathState::Post)
            .count(),
        0
    );
}

#[test]
fn a_changed_pre_image_refuses_before_anything_is_staged() {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    let mut expected: Vec<(String, Fingerprint)> = plan("x")
        .changes
        .iter()
        .map(|c| {
            (
                c.path.clone(),
                current(&root, &c.path).unwrap().fingerprint(),
            )
        })
        .collect();
    let pre = snapshot(&t.root);
    // A validation saw other bytes in a.txt.
    expected[0].1 = file("validated\n").fingerprint();
    let e = prepare(&root, &plan("tx"), Some(&expected), &t.artifacts).unwrap_err();
    assert!(
        e.to_string().contains("changed since it was validated"),
        "{e}"
    );
    assert_eq!(snapshot(&t.root), pre);
    assert!(
        read_artifact(&t.artifacts, "tx").is_err(),
        "no artifact for a refused plan"
    );
    // With the right pre-images it prepares.
    expected[0].1 = file("a\n").fingerprint();
    prepare(&root, &plan("tx"), Some(&expected), &t.artifacts).unwrap();
}

#[test]
fn symlinks_and_unexpected_types_are_never_written_through() {
    let t = tree();
    std::os::unix::fs::symlink(&t.outside, t.root.join("escape")).unwrap();
    std::fs::create_dir(t.root.join("adir")).unwrap();
    let root = Root::open(&t.root).unwrap();
    let pre = snapshot(&t.root);
    for (path, needle) in [
        ("escape/x", "symlink"),
        ("adir", "neither a regular file"),
        ("../x", ""),
        (".git/config", ""),
        ("a.txt/x", "not a directory"),
    ] {
        let p = Plan {
            transaction_id: "tx".into(),
            head: None,
            changes: vec![Change {
                path: path.into(),
                after: file("x\n"),
            }],
        };
        let e = prepare(&root, &p, None, &t.artifacts).unwrap_err();
        assert!(e.to_string().contains(needle), "{path}: {e}");
    }
    let twice = Plan {
        transaction_id: "tx".into(),
        head: None,
        changes: vec![
            Change {
                path: "a.txt".into(),
                after: file("1"),
            },
            Change {
                path: "a.txt".into(),
                after: file("2"),
            },
        ],
    };
    assert!(prepare(&root, &twice, None, &t.artifacts).is_err());
    assert_eq!(snapshot(&t.root), pre);
    assert!(
        std::fs::read_dir(&t.outside).unwrap().next().is_none(),
        "nothing outside"
    );
}

#[test]
fn recovery_never_touches_a_path_someone_else_changed_or_a_tampered_stage() {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    let rb = prepare(&root, &plan("tx"), None, &t.artifacts).unwrap();
    install_steps(&root, &rb, 2).unwrap();
    // Another writer edits a file that is not installed yet.
    std::fs::write(t.root.join("link.tmp-edit"), "").unwrap();
    std::fs::write(t.root.join("mode.txt"), "edited\n").unwrap();
    let snap = snapshot(&t.root);
    let states = inspect(&root, &rb).unwrap();
    assert_eq!(
        states.iter().find(|r| r.path == "mode.txt").unwrap().state,
        PathState::Other
    );
    let e = finish_forward(&root, &rb).unwrap_err();
    assert!(e.to_string().contains("mode.txt"), "{e}");
    assert_eq!(snapshot(&t.root), snap, "nothing was touched");

    // A staged post-image that no longer matches the artifact is never installed.
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    let rb = prepare(&root, &plan("tx"), None, &t.artifacts).unwrap();
    let staged = rb.entries[0].staged.clone().unwrap();
    std::fs::write(t.root.join(&staged), "tampered\n").unwrap();
    let e = finish_forward(&root, &rb).unwrap_err();
    assert!(e.to_string().contains("staged post-image"), "{e}");
    assert_eq!(current(&root, "a.txt").unwrap(), file("a\n"));
}

#[test]
fn a_damaged_or_foreign_artifact_is_refused() {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    let rb = prepare(&root, &plan("tx"), None, &t.artifacts).unwrap();
    let bytes = rb.to_bytes();
    assert_eq!(Rollback::from_bytes(&bytes, "tx").unwrap(), rb);
    assert!(Rollback::from_bytes(&bytes, "other").is_err());
    let text = String::from_utf8(bytes.clone()).unwrap();
    let damaged = text.replacen("\"a.txt\"", "\"b.txt\"", 1);
    let e = Rollback::from_bytes(damaged.as_bytes(), "tx").unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
    assert!(Rollback::from_bytes(&bytes[..bytes.len() / 2], "tx").is_err());
    assert_eq!(rb.digest(), sha256_hex(&bytes));
}
