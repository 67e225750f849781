//! Staging's own tests: checkouts, the source check, revisions and the batch blob reader.

use super::*;

fn committed_repo(files: &[(&str, &str)]) -> (tempfile::TempDir, Repo, String) {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&src)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    git(&["init", "-q"]);
    for (p, c) in files {
        std::fs::write(src.join(p), c).unwrap();
    }
    git(&["add", "-A"]);
    git(&["commit", "-qm", "c"]);
    let head = git(&["rev-parse", "HEAD"]);
    let repo = Repo::open(&src).unwrap();
    (d, repo, head)
}

fn set_old_mtime(path: &Path) {
    let status = Command::new("touch")
        .args(["-h", "-d", "@946684800"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn one_batch_reads_every_blob_exactly_as_cat_file_does_and_stops_when_asked() {
    let (_d, repo, head) = committed_repo(&[
        ("empty", ""),
        ("nl", "\n\n"),
        ("text", "a line\nno newline at end"),
    ]);
    let mut oids: Vec<String> = repo
        .tree_files(&head)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.oid)
        .collect();
    oids.push(oids[1].clone());
    let mut got = Vec::new();
    repo.for_each_blob(&oids, |i, b| {
        got.push((i, b));
        Ok(())
    })
    .unwrap();
    let want: Vec<_> = oids
        .iter()
        .enumerate()
        .map(|(i, o)| (i, repo.read_blob(o).unwrap()))
        .collect();
    assert_eq!(got, want);
    // The callback's refusal stops the read and is what comes back.
    let mut seen = 0;
    let stopped = repo.for_each_blob(&oids, |_, _| {
        seen += 1;
        Err(StagingError::Space("enough".into()))
    });
    assert!(
        matches!(stopped, Err(StagingError::Space(_))),
        "{stopped:?}"
    );
    assert_eq!(seen, 1);
    // A missing object and a malformed id are git failures, never empty content.
    let missing = repo.for_each_blob(&["0".repeat(oids[0].len())], |_, _| Ok(()));
    assert!(
        matches!(missing, Err(StagingError::Git { .. })),
        "{missing:?}"
    );
    let malformed = repo.for_each_blob(&["HEAD".into()], |_, _| Ok(()));
    assert!(
        matches!(malformed, Err(StagingError::Git { .. })),
        "{malformed:?}"
    );
}

#[test]
fn a_rewrite_keeping_size_and_mtime_within_the_second_is_still_a_change() {
    let (d, repo, head) = committed_repo(&[("a.txt", "hello\n"), ("b.txt", "same\n")]);
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let root = std::sync::Arc::new(crate::beneath::Root::open(d.path()).unwrap());
    let co = repo
        .stage_checkout(&head, &root, "co", CheckoutFs::Directory, uid, gid)
        .unwrap();
    let (a, b) = (co.tree.join("a.txt"), co.tree.join("b.txt"));
    // Make git's cached entries non-racy (mtime far before the index was written), so git
    // trusts their stat from now on, at one-second precision.
    set_old_mtime(&a);
    set_old_mtime(&b);
    let mut cmd = repo.git_worktree(&co, &co.empty_tree);
    cmd.args(["update-index", "-q", "--refresh"]);
    run_git(cmd, &[0, 1]).unwrap();
    // Rewrite a.txt with other bytes of the same size and put its mtime back; rewrite b.txt
    // with identical bytes. Same inode, same size, same mtime, ctime in the same second.
    std::fs::write(&a, "HELLO\n").unwrap();
    set_old_mtime(&a);
    std::fs::write(&b, "same\n").unwrap();
    set_old_mtime(&b);
    let (paths, total) = repo.changed_paths(&co, 20).unwrap();
    assert_eq!(
        paths,
        vec!["a.txt".to_string()],
        "identical bytes are not a change"
    );
    assert_eq!(total, 1);
}

#[test]
fn a_symlink_in_place_of_the_checkout_dir_or_tree_is_refused() {
    let (d, repo, head) = committed_repo(&[("a.txt", "x\n")]);
    let outside = tempfile::tempdir().unwrap();
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let root = std::sync::Arc::new(crate::beneath::Root::open(d.path()).unwrap());
    // Another user planted `co` as a symlink before staging: nothing is written through it.
    std::os::unix::fs::symlink(outside.path(), d.path().join("co")).unwrap();
    let e = repo
        .stage_checkout(&head, &root, "co", CheckoutFs::Directory, uid, gid)
        .unwrap_err();
    assert!(e.to_string().contains("co"), "{e}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    // The tree swapped for a symlink after staging: the mount source check refuses it.
    let co = repo
        .stage_checkout(&head, &root, "co2", CheckoutFs::Directory, uid, gid)
        .unwrap();
    co.verify_tree().unwrap();
    std::fs::rename(&co.tree, d.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(outside.path(), &co.tree).unwrap();
    assert!(matches!(
        co.verify_tree(),
        Err(StagingError::TreeReplaced { .. })
    ));
    // A real directory of the same name is not the one staged either.
    std::fs::remove_file(&co.tree).unwrap();
    std::fs::create_dir(&co.tree).unwrap();
    assert!(co.verify_tree().is_err());
}

#[test]
fn untouched_checkout_has_no_changes_and_a_new_file_is_not_one() {
    let (d, repo, head) = committed_repo(&[("a.txt", "x\n")]);
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let root = std::sync::Arc::new(crate::beneath::Root::open(d.path()).unwrap());
    let co = repo
        .stage_checkout(&head, &root, "co", CheckoutFs::Directory, uid, gid)
        .unwrap();
    std::fs::write(co.tree.join("build.out"), "artifact").unwrap();
    assert_eq!(repo.changed_paths(&co, 20).unwrap(), (vec![], 0));
    std::fs::remove_file(co.tree.join("a.txt")).unwrap();
    assert_eq!(repo.changed_paths(&co, 20).unwrap().1, 1);
}
