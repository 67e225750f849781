//! The tree cache on real loop images.

use super::*;

/// Mounts the cache image of `data` read-write at a temporary directory while no cache is
/// open, runs `f` on that mount's root, and unmounts it: root tampering with the image.
fn with_cache_image(data: &Path, f: impl FnOnce(&Path)) {
    let at = tempfile::tempdir().unwrap();
    let img = data.join("tree-cache/cache.img");
    // The loop device of the last mount detaches a moment after its unmount.
    let mounted = (0..40).any(|_| {
        let ok = Command::new("mount")
            .args(["-t", "ext4", "-o", "loop"])
            .arg(&img)
            .arg(at.path())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        if !ok {
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        ok
    });
    assert!(mounted, "mounting the cache image");
    f(at.path());
    assert!(
        Command::new("umount")
            .arg(at.path())
            .status()
            .unwrap()
            .success()
    );
}

#[test]
fn cached_entries_survive_a_reopen_and_a_tampered_or_torn_one_is_discarded() {
    let w = warm_repo();
    let data = w.d.path().join("data");
    let owner = (1000, 1000);
    let cache = cache::TreeCache::open(&data, 64 << 20).unwrap();
    let (lease, _) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
    let snapshot = lease.snapshot();
    let entry = lease.tree().parent().unwrap().to_path_buf();
    let key = entry.file_name().unwrap().to_owned();
    let in_image = |root: &Path| root.join("entries").join(&key);
    // While it is open, nothing beneath entries/ can be written, by root either.
    let e = std::fs::write(entry.join("tree/a.txt"), "tampered\n").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(nix::libc::EROFS), "{e}");
    drop(lease);
    // A second process on the same data dir runs without the cache rather than sharing it.
    assert!(cache::TreeCache::open(&data, 64 << 20).is_err());
    cache.close();
    drop(cache);

    // Reopened (mounted again): the entry is verified and used as it was.
    let reopen = || {
        let cache = cache::TreeCache::open(&data, 64 << 20).unwrap();
        let (lease, lookup) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
        (cache, lease, lookup)
    };
    let (cache, lease, lookup) = reopen();
    assert_eq!(lookup, cache::Lookup::Hit);
    assert_eq!(lease.snapshot(), snapshot);
    assert_eq!(cache.status().discarded, 0);
    // The clean close sealed the image: the entry was used on the seal's word.
    assert_eq!((cache.status().sealed, cache.status().verified), (1, 0));
    drop(lease);
    cache.close();
    drop(cache);
    // Each way of tampering with the image while no cache is open: the entry is discarded
    // (only that one) and filled anew with the revision's bytes.
    type Tamper = Box<dyn Fn(&Path)>;
    let tampers: Vec<(&str, Tamper)> = vec![
        (
            "a file written (its stat moves)",
            Box::new(|e: &Path| std::fs::write(e.join("tree/a.txt"), "tampered\n").unwrap()),
        ),
        (
            "one byte of the manifest flipped (its checksum refuses it)",
            Box::new(|e: &Path| {
                let manifest = e.join("manifest");
                let mut bytes = std::fs::read(&manifest).unwrap();
                bytes[20] ^= 1;
                std::fs::write(&manifest, bytes).unwrap();
            }),
        ),
        (
            "a stray file added (it would show in every job)",
            Box::new(|e: &Path| std::fs::write(e.join("tree/stray.txt"), "stray\n").unwrap()),
        ),
        (
            "a stray empty directory added",
            Box::new(|e: &Path| std::fs::create_dir_all(e.join("tree/dir/sub/stray")).unwrap()),
        ),
    ];
    for (what, tamper) in &tampers {
        with_cache_image(&data, |root| tamper(&in_image(root)));
        let (cache, lease, lookup) = reopen();
        assert_eq!(lookup, cache::Lookup::Miss, "{what}");
        assert_eq!(cache.status().discarded, 1, "{what}");
        assert_eq!(
            std::fs::read(lease.tree().join("a.txt")).unwrap(),
            b"hello\n",
            "{what}"
        );
        assert!(!lease.tree().join("stray.txt").exists(), "{what}");
        assert!(!lease.tree().join("dir/sub/stray").exists(), "{what}");
        drop(lease);
        cache.close();
    }
    // The content check: a file's bytes changed with its stat put back exactly as it was
    // (what a raw write into the image's blocks amounts to) and a manifest rewritten to
    // match a forged file, its checksum recomputed, are both refused.
    with_cache_image(&data, |root| {
        let file = in_image(root).join("tree/a.txt");
        std::fs::write(&file, "HELLO\n").unwrap();
    });
    let forged_stat = {
        // Rewrite the manifest's line for a.txt with the file's new stat, checksum and all:
        // every stat now matches, only the bytes (and git's blob id) say otherwise.
        let mut fixed = None;
        with_cache_image(&data, |root| {
            let e = in_image(root);
            let manifest = std::fs::read_to_string(e.join("manifest")).unwrap();
            let meta = std::fs::symlink_metadata(e.join("tree/a.txt")).unwrap();
            use std::os::unix::fs::MetadataExt;
            let stat = format!(
                "{} {} {} {} {}",
                meta.ino(),
                meta.size(),
                meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
                meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
                meta.mode()
            );
            let body: Vec<String> = manifest
                .lines()
                .filter(|l| !l.starts_with("sha256 "))
                .map(|l| {
                    if l.ends_with("\ta.txt") {
                        let (head, tail) = l.split_once('\t').unwrap();
                        let f: Vec<&str> = head.split(' ').collect();
                        format!("{} {} {stat} {}\t{tail}", f[0], f[1], f[7])
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            let mut text = body.join("\n") + "\n";
            let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()));
            text.push_str(&format!("sha256 {digest}\n"));
            std::fs::write(e.join("manifest"), text).unwrap();
            fixed = Some(stat);
        });
        fixed.unwrap()
    };
    assert!(!forged_stat.is_empty());
    let (cache, lease, lookup) = reopen();
    assert_eq!(
        lookup,
        cache::Lookup::Miss,
        "the bytes are not the revision's"
    );
    assert_eq!(cache.status().discarded, 1);
    assert_eq!(
        std::fs::read(lease.tree().join("a.txt")).unwrap(),
        b"hello\n"
    );
    drop(lease);
    cache.close();
    drop(cache);
    // A fill cut off before its publishing rename leaves only `incoming/`, emptied at open.
    with_cache_image(&data, |root| {
        let torn = root.join("incoming/torn.x");
        std::fs::create_dir_all(torn.join("tree")).unwrap();
        std::fs::write(torn.join("tree/a.txt"), "half").unwrap();
    });
    let cache = cache::TreeCache::open(&data, 64 << 20).unwrap();
    assert_eq!(cache.status().discarded, 1);
    assert!(
        !entry
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("incoming/torn.x")
            .exists()
    );
    let (_lease, lookup) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
    assert_eq!(lookup, cache::Lookup::Hit);
}

#[test]
fn a_seal_stands_for_an_image_unwritten_since_a_clean_close_and_for_nothing_else() {
    let w = warm_repo();
    let data = w.d.path().join("data");
    let seal = data.join("tree-cache/seal");
    let image = data.join("tree-cache/cache.img");
    let owner = (1000, 1000);
    let open = || cache::TreeCache::open(&data, 64 << 20).unwrap();
    // (verified by reading its bytes, used on the seal's word) of the one entry, and its lookup.
    let use_entry = |cache: &cache::TreeCache| {
        let (lease, lookup) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
        assert_eq!(
            std::fs::read(lease.tree().join("a.txt")).unwrap(),
            b"hello\n"
        );
        let st = cache.status();
        (st.verified, st.sealed, lookup)
    };
    let cache = open();
    assert_eq!(use_entry(&cache), (0, 0, cache::Lookup::Miss));
    // No seal while a job holds an entry: the close leaves the cache as it is.
    let (held, _) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
    cache.close();
    assert!(!seal.exists());
    drop(held);
    cache.close();
    assert!(seal.exists(), "a clean close seals the image");
    drop(cache);

    let cache = open();
    assert!(!seal.exists(), "an open takes the seal");
    assert_eq!(use_entry(&cache), (0, 1, cache::Lookup::Hit));
    cache.close();
    drop(cache);
    // A process that never used the entry passes the seal's word on.
    let cache = open();
    cache.close();
    drop(cache);
    let cache = open();
    assert_eq!(use_entry(&cache), (0, 1, cache::Lookup::Hit));
    // Dropped without a close (a killed process): no seal, the mount stays, and the next
    // process reads the entry's bytes again.
    drop(cache);
    assert!(!seal.exists());
    let cache = open();
    assert_eq!(use_entry(&cache), (1, 0, cache::Lookup::Hit));
    cache.close();
    drop(cache);
    // The image's times moved (its bytes did not): the seal no longer matches it.
    assert!(seal.exists());
    let f = std::fs::File::options().write(true).open(&image).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
    drop(f);
    let cache = open();
    assert!(!seal.exists());
    assert_eq!(use_entry(&cache), (1, 0, cache::Lookup::Hit));
    cache.close();
    drop(cache);
    // A seal edited by hand: its checksum refuses it.
    let mut bytes = std::fs::read(&seal).unwrap();
    let at = bytes.iter().position(|b| *b == b'\n').unwrap() + 3;
    bytes[at] ^= 1;
    std::fs::write(&seal, bytes).unwrap();
    let cache = open();
    assert_eq!(use_entry(&cache), (1, 0, cache::Lookup::Hit));
    cache.close();
}

#[test]
fn a_preload_reads_a_found_entry_once_and_never_fills() {
    let w = warm_repo();
    let data = w.d.path().join("data");
    let owner = (1000, 1000);
    let cache = cache::TreeCache::open(&data, 64 << 20).unwrap();
    // Nothing cached: a preload fills nothing, and the job's lease is the fill.
    cache.preload(&w.repo, &w.head, owner).unwrap();
    assert_eq!(cache.status().entries, 0);
    let (lease, lookup) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
    assert_eq!(lookup, cache::Lookup::Miss);
    drop(lease);
    cache.close();
    drop(cache);
    // Found at open: the preload reads it (on the seal's word), the lease is a lookup.
    let cache = cache::TreeCache::open(&data, 64 << 20).unwrap();
    cache.preload(&w.repo, &w.head, owner).unwrap();
    assert_eq!((cache.status().entries, cache.status().sealed), (1, 1));
    cache.preload(&w.repo, &w.head, owner).unwrap();
    let (lease, lookup) = cache.lease(&w.repo, &w.head, owner, &|| {}).unwrap();
    assert_eq!(lookup, cache::Lookup::Hit);
    assert_eq!((cache.status().sealed, cache.status().verified), (1, 0));
    assert_eq!(
        std::fs::read(lease.tree().join("a.txt")).unwrap(),
        b"hello\n"
    );
    // Another sandbox user's tree is another entry: not there, not filled.
    cache.preload(&w.repo, &w.head, (1001, 1001)).unwrap();
    assert_eq!(cache.status().entries, 1);
    drop(lease);
    cache.close();
}

#[test]
fn eviction_takes_the_least_recently_used_tree_no_job_holds() {
    let w = warm_repo();
    let src = w.d.path().join("src");
    let mut commits = vec![w.head.clone()];
    for i in 0..3 {
        std::fs::write(src.join("big.bin"), vec![b'a' + i; 400 << 10]).unwrap();
        sh(
            &src,
            "git add -A && git -c user.name=t -c user.email=t@example.com commit -qm big",
        );
        let out = Command::new("git")
            .current_dir(&src)
            .args(["rev-parse", "HEAD"])
            .output();
        commits.push(
            String::from_utf8(out.unwrap().stdout)
                .unwrap()
                .trim()
                .to_string(),
        );
    }
    // Room for two of the big trees (about 460 KiB each), not three.
    let bound = 1000 << 10;
    let cache = cache::TreeCache::open(&w.d.path().join("data"), bound).unwrap();
    let owner = (1000, 1000);
    let lease = |c: &str| cache.lease(&w.repo, c, owner, &|| {}).unwrap();
    let (held, _) = lease(&commits[1]);
    let (two, _) = lease(&commits[2]);
    let (tree1, tree2) = (held.tree(), two.tree());
    drop(two);
    // The third fill goes over the bound: tree 2 is the one no job holds, so it goes, although
    // tree 1 was used first.
    let (three, _) = lease(&commits[3]);
    let tree3 = three.tree();
    drop(three);
    let st = cache.status();
    assert_eq!((st.entries, st.evicted), (2, 1), "{st:?}");
    assert!(st.bytes <= bound, "{st:?}");
    assert!(!tree2.exists() && tree1.exists() && tree3.exists());
    assert_eq!(lease(&commits[1]).1, cache::Lookup::Hit);
    assert_eq!(lease(&commits[3]).1, cache::Lookup::Hit);
    // With every tree held, nothing can make room: the cache runs over its bound rather than
    // pull a tree from under a running job.
    let held3 = lease(&commits[3]).0;
    let (held2, lookup) = lease(&commits[2]);
    assert_eq!(lookup, cache::Lookup::Miss);
    let st = cache.status();
    assert!(st.bytes > bound && st.evicted == 1, "{st:?}");
    for t in [&tree1, &tree2, &tree3] {
        assert!(t.join("big.bin").exists(), "{}", t.display());
    }
    // Released, the least recently used go first: tree 1 (last used before trees 3 and 2).
    drop((held, held2, held3));
    drop(lease(&commits[0]));
    let st = cache.status();
    assert!(st.bytes <= bound, "{st:?}");
    assert!(!tree1.exists(), "the least recently used tree is evicted");
    assert!(tree2.exists(), "the most recently used tree stays");
    cache.close();
}
