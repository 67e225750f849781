//! Staging's own tests: checkouts, the source check, revisions and the batch blob reader.

use super::*;

/// The tree cache on real loop images: reopen, tamper, seal, preload, eviction.
mod tree_cache;

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
    let mut cmd = repo.git_worktree(&co.tree, &co.index, &co.empty_tree);
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

/// Unmounts everything beneath a test's directory when the test ends, passed or not.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let mut points: Vec<&str> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|p| Path::new(p).starts_with(&self.0))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

/// A repository of every kind of tracked path, and a tree cache beside it (root and loop
/// devices needed, as for every warm checkout).
struct Warm {
    _unmount: Unmount,
    d: tempfile::TempDir,
    repo: Repo,
    head: String,
    root: std::sync::Arc<crate::beneath::Root>,
}

const JOB_FS: CheckoutFs = CheckoutFs::Loop {
    disk_bytes: 32 << 20,
    inodes: 4096,
};

fn warm_repo() -> Warm {
    assert!(
        nix::unistd::geteuid().is_root(),
        "warm checkouts are tested as root (the CI machine runs as root)"
    );
    assert_eq!(cache::overlay_support_problem(), None);
    let (d, _repo, _) = committed_repo(&[
        ("a.txt", "hello\n"),
        ("b.txt", "same\n"),
        ("ignored.log", "tracked although ignored\n"),
        (".gitignore", "*.log\n"),
    ]);
    let src = d.path().join("src");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&src)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {:?}", out);
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    for (p, c) in [
        ("dir/x.txt", "x\n"),
        ("dir/sub/y.txt", "y\n"),
        ("other/z.txt", "z\n"),
        ("run.sh", "#!/bin/sh\n"),
        ("private.txt", "p\n"),
    ] {
        let path = src.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    git(&["add", "-A"]);
    git(&["add", "-f", "ignored.log"]);
    let some_commit = git(&["rev-parse", "HEAD"]);
    git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{some_commit},module"),
    ]);
    git(&["commit", "-qm", "every kind"]);
    let head = git(&["rev-parse", "HEAD"]);
    let repo = Repo::open(&src).unwrap();
    let checkouts = d.path().join("checkouts");
    std::fs::create_dir(&checkouts).unwrap();
    let root = std::sync::Arc::new(crate::beneath::Root::open(&checkouts).unwrap());
    Warm {
        _unmount: Unmount(d.path().to_path_buf()),
        d,
        repo,
        head,
        root,
    }
}

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

#[test]
fn the_upper_dir_check_agrees_with_the_full_walk_on_every_kind_of_tamper() {
    let w = warm_repo();
    let cache = cache::TreeCache::open(&w.d.path().join("data"), 64 << 20).unwrap();
    let (lease, first) = cache.lease(&w.repo, &w.head, (1000, 1000), &|| {}).unwrap();
    assert_eq!(first, cache::Lookup::Miss);
    // (what the job does in its tree, the tracked paths that changed)
    let cases: &[(&str, &[&str])] = &[
        ("true", &[]),
        ("printf HELLO > a.txt", &["a.txt"]),
        // Other bytes of the same size, the mtime put back to the nanosecond.
        (
            "m=$(stat -c %y a.txt); printf 'HELLO\\n' > a.txt; touch -d \"$m\" a.txt",
            &["a.txt"],
        ),
        ("printf 'same\\n' > b.txt", &[]),
        ("chmod +x a.txt", &["a.txt"]),
        ("chmod -x run.sh", &["run.sh"]),
        ("chmod 600 private.txt", &[]),
        ("rm a.txt", &["a.txt"]),
        ("rm -r dir/sub", &["dir/sub/y.txt"]),
        ("rm -r dir", &["dir/sub/y.txt", "dir/x.txt"]),
        // Removed and made again: an opaque directory hides what it does not hold again.
        (
            "rm -r dir && mkdir dir && printf 'x\\n' > dir/x.txt",
            &["dir/sub/y.txt"],
        ),
        ("rm a.txt && mkdir a.txt", &["a.txt"]),
        ("rm -r other && printf z > other", &["other/z.txt"]),
        ("rm b.txt && ln -s a.txt b.txt", &["b.txt"]),
        ("rm link && ln -s b.txt link", &["link"]),
        ("rm link && ln -s a.txt link", &[]),
        ("rm link && printf a.txt > link", &["link"]),
        ("mv a.txt c.txt", &["a.txt"]),
        ("mv dir moved", &["dir/sub/y.txt", "dir/x.txt"]),
        ("ln a.txt hard.txt", &[]),
        (
            "mkdir -p new/deep && echo n > new/deep/f && echo u > untracked.txt",
            &[],
        ),
        ("touch a.txt run.sh dir/x.txt", &[]),
        (
            "python3 -c \"import os; os.setxattr('a.txt', 'user.note', b'1')\"",
            &[],
        ),
        (": > a.txt", &["a.txt"]),
        ("echo more >> ignored.log", &["ignored.log"]),
        ("echo inside > module/f", &[]),
        ("rm -r module", &[]),
    ];
    for (i, (script, want)) in cases.iter().enumerate() {
        let key = format!("job{i}");
        let co = w
            .repo
            .stage_overlay(&w.head, &w.root, &key, JOB_FS, &lease)
            .unwrap();
        // The job's view is the revision, exactly.
        assert_eq!(
            w.repo.changed_in_tree(&co, 50).unwrap(),
            (vec![], 0),
            "{script}"
        );
        sh(&co.tree, script);
        let upper = co.upper.as_ref().unwrap();
        let by_upper = overlay::changed_in_upper(&w.repo, upper, &co.snapshot, 50).unwrap();
        let by_walk = w.repo.changed_in_tree(&co, 50).unwrap();
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(by_walk.0, want, "full walk after {script:?}");
        assert_eq!(by_upper, by_walk, "upper dir vs full walk after {script:?}");
        assert_eq!(w.repo.changed_paths(&co, 50).unwrap(), by_walk);
        remove_checkout(&co.dir).unwrap();
    }
    // Nothing any job did reached the cached tree.
    let again = w
        .repo
        .stage_overlay(&w.head, &w.root, "last", JOB_FS, &lease)
        .unwrap();
    assert_eq!(w.repo.changed_in_tree(&again, 50).unwrap(), (vec![], 0));
    remove_checkout(&again.dir).unwrap();
    drop(lease);
    cache.close();
}

#[test]
fn a_commit_check_reads_the_summaries_it_is_given_and_they_are_remembered() {
    let (d, repo, head) = committed_repo(&[("f", "x\n")]);
    let src = d.path().join("src");
    let tree = repo.commit_tree_of(&head).unwrap();
    let tag = {
        let out = Command::new("git")
            .current_dir(&src)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(["tag", "-a", "-m", "t", "t1", &head])
            .output()
            .unwrap();
        assert!(out.status.success());
        repo.ref_value("refs/tags/t1").unwrap().unwrap()
    };
    let missing = "0".repeat(40);
    // Exactly a commit, whatever else is asked alongside (a bad id there changes nothing).
    assert!(repo.is_commit_reading(&head, &[]));
    assert!(repo.is_commit_reading(&head, &[&missing, "not-an-id", &tree]));
    // Not exactly a commit: a tree, an annotated tag of one, a missing id, not an id.
    for bad in [
        tree.as_str(),
        tag.as_str(),
        missing.as_str(),
        "HEAD",
        "--all",
    ] {
        assert!(!repo.is_commit_reading(bad, &[&head]), "{bad}");
    }
    // The summary read with the check is answered from memory: git cannot read it any more.
    let other = {
        let (_d2, repo2, head2) = committed_repo(&[("g", "y\n")]);
        assert!(repo2.is_commit_reading(&head2, &[]));
        std::fs::rename(
            repo2.git_dir().join("objects"),
            repo2.git_dir().join("objects-gone"),
        )
        .unwrap();
        let s = repo2.commit_summaries(&[&head2]).unwrap();
        assert_eq!(s[0].oid, head2);
        assert_eq!(s[0].author, "t <t@example.com>");
        assert_eq!(s[0].subject, "c");
        assert!(!repo2.is_commit(&head2), "git itself no longer finds it");
        head2
    };
    assert!(
        repo.commit_summaries(&[&other]).is_err(),
        "another repository's commit"
    );
}

#[test]
fn numstat_counts_each_paths_lines_and_marks_binary_files() {
    let (d, repo, first) = committed_repo(&[("a.txt", "1\n2\n3\n"), ("gone", "x\n")]);
    let src = d.path().join("src");
    std::fs::write(src.join("a.txt"), "1\nTWO\n3\n4\n").unwrap();
    std::fs::remove_file(src.join("gone")).unwrap();
    std::fs::write(src.join("bin"), [0u8, 1, 2, 0, 255]).unwrap();
    std::fs::write(src.join("tab\tname"), "t\n").unwrap();
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
    git(&["add", "-A"]);
    git(&["commit", "-qm", "d"]);
    let second = git(&["rev-parse", "HEAD"]);
    let stats = repo.numstat(&first, &second).unwrap();
    let find = |p: &str| stats.iter().find(|s| s.path == p).map(|s| s.lines);
    assert_eq!(find("a.txt"), Some(Some((2, 1))));
    assert_eq!(find("gone"), Some(Some((0, 1))));
    assert_eq!(find("bin"), Some(None), "binary: no line counts");
    assert_eq!(
        find("tab\tname"),
        Some(Some((1, 0))),
        "a name with a tab, kept whole"
    );
    assert_eq!(stats.len(), 4, "{stats:?}");
}

#[test]
fn a_reserved_checkout_is_staged_in_place_and_anything_else_there_is_refused() {
    let (d, repo, head) = committed_repo(&[("a.txt", "x\n")]);
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let root = std::sync::Arc::new(crate::beneath::Root::open(d.path()).unwrap());
    // The reservation is the tree's path as empty directories; a second one is refused.
    let tree = space::reserve(&root, "co", CheckoutFs::Directory).unwrap();
    assert_eq!(tree, d.path().join("co").join("tree"));
    assert_eq!(std::fs::read_dir(&tree).unwrap().count(), 0);
    let e = space::reserve(&root, "co", CheckoutFs::Directory).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    // Staging takes it over: the tree is where the reservation said.
    let co = repo
        .stage_checkout(&head, &root, "co", CheckoutFs::Directory, uid, gid)
        .unwrap();
    assert_eq!(co.tree, tree);
    assert_eq!(std::fs::read_to_string(tree.join("a.txt")).unwrap(), "x\n");
    co.verify_tree().unwrap();
    // A checkout dir holding anything besides a reservation is never staged into: a file
    // beside the reserved path, a file in the reserved tree, or a symlink in its place.
    type Plant<'a> = &'a dyn Fn(&Path);
    let planted: [(&str, Plant); 3] = [
        ("beside", &|dir| {
            std::fs::write(dir.join("disk.img"), "").unwrap()
        }),
        ("inside", &|dir| {
            std::fs::write(dir.join("tree").join("left.txt"), "").unwrap()
        }),
        ("symlink", &|dir| {
            std::fs::remove_dir(dir.join("tree")).unwrap();
            std::os::unix::fs::symlink("/", dir.join("tree")).unwrap();
        }),
    ];
    for (key, plant) in planted {
        space::reserve(&root, key, CheckoutFs::Directory).unwrap();
        plant(&d.path().join(key));
        let e = repo
            .stage_checkout(&head, &root, key, CheckoutFs::Directory, uid, gid)
            .unwrap_err();
        assert!(e.to_string().contains("already exists"), "{key}: {e}");
    }
}

#[test]
fn a_reserved_loop_checkout_mounts_its_filesystem_over_the_reserved_path() {
    let w = warm_repo();
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let tree = space::reserve(&w.root, "co", JOB_FS).unwrap();
    let placeholder = std::fs::metadata(&tree).unwrap();
    let co = w
        .repo
        .stage_checkout(&w.head, &w.root, "co", JOB_FS, uid, gid)
        .unwrap();
    // The same path now names the staged tree on the job's own filesystem, not the
    // placeholder beneath the mount.
    assert_eq!(co.tree, tree);
    use std::os::unix::fs::MetadataExt;
    let staged = std::fs::metadata(&tree).unwrap();
    assert_ne!(staged.dev(), placeholder.dev());
    assert_eq!(
        std::fs::read_to_string(tree.join("a.txt")).unwrap(),
        "hello\n"
    );
    co.verify_tree().unwrap();
    remove_checkout(&w.d.path().join("co")).unwrap();
    assert!(!w.d.path().join("co").exists());

    // A staging that fails after the job's filesystem was made gives the reservation back:
    // unmounted, emptied, the reserved path still a directory, and staged into again.
    let tree = space::reserve(&w.root, "again", JOB_FS).unwrap();
    let allocated = Repo::allocate_checkout(&w.root, "again", JOB_FS).unwrap();
    assert_ne!(std::fs::metadata(&tree).unwrap().dev(), placeholder.dev());
    drop(allocated);
    space::back_to_reservation(&w.root, "again", JOB_FS).unwrap();
    assert!(space::is_reservation(&w.root, "again", JOB_FS));
    assert_eq!(std::fs::metadata(&tree).unwrap().dev(), placeholder.dev());
    let co = w
        .repo
        .stage_checkout(&w.head, &w.root, "again", JOB_FS, uid, gid)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(co.tree.join("b.txt")).unwrap(),
        "same\n"
    );
    remove_checkout(&w.d.path().join("again")).unwrap();
}
