//! Warm checkouts on real Docker: a revision's tree is cached once and each job gets an
//! overlay of it. Nothing a job does reaches the cached tree; two jobs on one tree see only
//! their own writes; a tree a running job holds is never evicted; a fill cut off by kill -9 and
//! an entry changed on the host are discarded, never used; with the cache off, jobs stage in
//! full as before. The hostile runner and hardening tests run with the cache on (the default),
//! and test builds cross-check every overlay source check against the full walk.

use crate::support::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The cache's image mounted read-only for the test to look into, unmounted on drop. When a
/// killed process left the cache mounted, that mount is used as it is.
struct CacheView {
    mnt: PathBuf,
    ours: Option<tempfile::TempDir>,
}

impl CacheView {
    fn open(data: &Path) -> CacheView {
        let live = data.join("tree-cache/mnt");
        if is_mount_point(&live) {
            return CacheView {
                mnt: live,
                ours: None,
            };
        }
        let d = tempfile::tempdir().unwrap();
        assert!(
            mount_image(&data.join("tree-cache/cache.img"), d.path(), "loop,ro"),
            "mounting the cache image read-only"
        );
        CacheView {
            mnt: d.path().to_path_buf(),
            ours: Some(d),
        }
    }

    fn names(&self, sub: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.mnt.join(sub))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// The one cached entry's tree.
    fn only_tree(&self) -> PathBuf {
        let entries = self.names("entries");
        assert_eq!(entries.len(), 1, "{entries:?}");
        self.mnt.join("entries").join(&entries[0]).join("tree")
    }
}

impl Drop for CacheView {
    fn drop(&mut self) {
        if let Some(d) = &self.ours {
            let _ = Command::new("umount").arg(d.path()).status();
        }
    }
}

/// Mounts the cache image at `at`. The last mount's loop device detaches only once the mount
/// namespaces of the removed containers are gone: until then the kernel refuses a second
/// mount, so this tries for a while.
fn mount_image(img: &Path, at: &Path, opts: &str) -> bool {
    (0..40).any(|_| {
        let ok = Command::new("mount")
            .args(["-t", "ext4", "-o", opts])
            .arg(img)
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success();
        if !ok {
            std::thread::sleep(Duration::from_millis(250));
        }
        ok
    })
}

/// Unmounts every mount under `dir`, deepest first, retrying while one is busy.
fn unmount_everything_under(dir: &Path) {
    let dir = dir.canonicalize().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut under: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(String::from))
            .filter(|m| Path::new(m).starts_with(&dir))
            .collect();
        if under.is_empty() {
            return;
        }
        under.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in &under {
            let _ = Command::new("umount").arg(m).status();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still mounted under {}: {under:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn is_mount_point(p: &Path) -> bool {
    let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(m) == p)
}

fn checkout_kind(v: &Value) -> &str {
    v["phases"]["checkout"]
        .as_str()
        .unwrap_or_else(|| panic!("no phases.checkout: {v}"))
}

fn files() -> Vec<(&'static str, &'static str, bool)> {
    vec![
        ("a.txt", "alpha\n", false),
        ("run.sh", "#!/bin/sh\necho ran\n", true),
        ("dir/b.txt", "beta\n", false),
        ("dir/sub/c.txt", "gamma\n", false),
    ]
}

/// What `ls -lR`-like listing and contents a job sees, to compare across jobs.
const SHOW_TREE: &str = "find . | sort | while read p; do \
     if [ -L \"$p\" ]; then echo \"$p -> $(readlink \"$p\")\"; \
     elif [ -f \"$p\" ]; then echo \"$p $(stat -c %a \"$p\") $(cat \"$p\" | sha256sum | cut -c1-16)\"; \
     else echo \"$p/\"; fi; done";

#[test]
fn nothing_a_job_does_reaches_the_cached_tree() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let f = Fixture::new(&files());
    let tc = |script: &str| {
        let r = f.run(&["--profile", "toolchain"], &["sh", "-c", script]);
        r.json.unwrap_or_else(|| panic!("{}", r.stderr))
    };
    git(&f.repo, &["rm", "-q", "--cached", "a.txt"]);
    std::fs::remove_file(f.repo.join("a.txt")).unwrap();
    std::os::unix::fs::symlink("dir/b.txt", f.repo.join("a.txt")).unwrap();
    f.commit(&[("plain.txt", "plain\n", false)], "a symlink");
    let first = tc(SHOW_TREE);
    assert_eq!(first["status"], "passed", "{first}");
    assert_eq!(checkout_kind(&first), "filled");
    // The sandbox user owns its files: it tries every way to change each of them, and each
    // directory, in place. python3 sets an extended attribute (the toolchain image has it).
    let hostile = "set +e; for p in $(find . -mindepth 1 | sort -r); do \
         echo x >> \"$p\"; chmod 777 \"$p\"; chmod 000 \"$p\"; touch -d @0 \"$p\"; \
         python3 -c 'import os,sys; os.setxattr(sys.argv[1], \"user.evil\", b\"1\", follow_symlinks=False)' \"$p\"; \
         chmod 700 \"$p\"; ln \"$p\" \"$p.hard\"; mv \"$p\" \"$p.moved\"; rm -rf \"$p.moved\" \"$p.hard\"; \
         done 2>/dev/null; ls -A | wc -l | sed 's/^/left=/'";
    let v = tc(hostile);
    assert_eq!(v["status"], "source_changed", "{v}");
    assert_eq!(checkout_kind(&v), "warm");
    assert_eq!(kv(v["output"].as_str().unwrap())["left"], "0", "{v}");
    // The next job sees the revision exactly, from the same entry, verified at reopen.
    let again = tc(SHOW_TREE);
    assert_eq!(again["status"], "passed", "{again}");
    assert_eq!(checkout_kind(&again), "warm");
    assert_eq!(again["output"], first["output"]);
    // And on the host the cached tree is still byte for byte the revision.
    let view = CacheView::open(&f.data);
    let want = tempfile::tempdir().unwrap();
    let archive = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git -C {} archive HEAD | tar -x -C {}",
            f.repo.display(),
            want.path().display()
        ))
        .status()
        .unwrap();
    assert!(archive.success());
    assert_eq!(
        tree_snapshot(&view.only_tree(), 0o111),
        tree_snapshot(want.path(), 0o111)
    );
    assert_eq!(view.names("incoming"), Vec::<String>::new());
}

/// `airlock run` opens the tree cache while it asks the engine about its images; a run refused
/// after that (here: its profile's image was never built) still leaves the cache unmounted and
/// sealed, and the next run is warm.
#[test]
fn a_one_shot_run_refused_after_its_cache_opened_leaves_it_unmounted_and_sealed() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&files())
        .with_config("[profiles.ghost]\nimage = \"airlock/does-not-exist:latest\"\n");
    let v = f.sh("true");
    assert_eq!(v["status"], "passed", "{v}");
    let (mnt, seal) = (
        f.data.join("tree-cache/mnt"),
        f.data.join("tree-cache/seal"),
    );
    assert!(!is_mount_point(&mnt), "a run left the cache mounted");
    assert!(seal.exists(), "a run left the cache unsealed");
    for _ in 0..3 {
        let r = f.run(&["--profile", "ghost"], &["true"]);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert!(r.stderr.contains("airlock images build"), "{}", r.stderr);
        assert!(
            !is_mount_point(&mnt),
            "a refused run left the cache mounted"
        );
        assert!(seal.exists(), "a refused run left the cache unsealed");
    }
    let v = f.sh("true");
    assert_eq!(
        (v["status"].as_str(), checkout_kind(&v)),
        (Some("passed"), "warm")
    );
}

#[test]
fn the_source_check_is_the_same_with_the_cache_off_and_jobs_then_stage_in_full() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&files()).with_config("tree_cache_bytes = 0\n");
    for (script, path) in [
        ("echo x >> a.txt", "a.txt"),
        ("chmod -x run.sh", "run.sh"),
        ("rm -r dir/sub", "dir/sub/c.txt"),
        (
            "rm -r dir && mkdir dir && echo beta > dir/b.txt",
            "dir/sub/c.txt",
        ),
    ] {
        let v = f.sh(script);
        assert_eq!(v["status"], "source_changed", "{script}: {v}");
        assert!(v["error"].as_str().unwrap().contains(path), "{v}");
        assert_eq!(checkout_kind(&v), "full");
    }
    let v = f.sh("echo untracked > new.txt && cat a.txt");
    assert_eq!(
        (v["status"].as_str(), checkout_kind(&v)),
        (Some("passed"), "full")
    );
    assert!(!f.data.join("tree-cache").exists(), "no cache is made");
}

#[test]
fn a_kill_during_cache_population_leaves_the_entry_discarded_on_restart() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&files());
    let mut c = f.run_cmd(&[], &["cat", "a.txt"]);
    c.env("AIRLOCK_CRASH_AT", "tree_cache_filled");
    let out = c.output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    {
        // The fill was complete but not yet published: it is in incoming/, not in entries/.
        let view = CacheView::open(&f.data);
        assert!(
            view.ours.is_none(),
            "the killed process left the cache mounted"
        );
        assert_eq!(view.names("entries"), Vec::<String>::new());
        assert_eq!(view.names("incoming").len(), 1);
    }
    // Recovery settles the interrupted run without a result; the next run fills anew.
    let report = f.recover();
    assert!(report.is_object(), "{report}");
    let crashed = f.list(&[]).remove(0);
    assert_ne!(crashed["status"], "passed", "{crashed}");
    let v = f.run(&[], &["cat", "a.txt"]).json.unwrap();
    assert_eq!(
        (v["status"].as_str(), checkout_kind(&v)),
        (Some("passed"), "filled")
    );
    assert_eq!(v["output"], "alpha\n");
    let view = CacheView::open(&f.data);
    assert_eq!(
        view.names("incoming"),
        Vec::<String>::new(),
        "the torn fill is gone"
    );
    assert_eq!(view.names("entries").len(), 1);
}

#[test]
fn an_entry_changed_on_the_host_between_runs_is_discarded_and_filled_again() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&files());
    let v = f.sh("cat dir/b.txt");
    assert_eq!(checkout_kind(&v), "filled");
    {
        // Someone with root on the host writes into the cached tree while no daemon runs.
        let d = tempfile::tempdir().unwrap();
        let img = f.data.join("tree-cache/cache.img");
        assert!(
            mount_image(&img, d.path(), "loop"),
            "mounting the cache image"
        );
        // Paths, not DirEntry values: those keep the directory open and the unmount busy.
        let entries: Vec<PathBuf> = std::fs::read_dir(d.path().join("entries"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        std::fs::write(entries[0].join("tree/dir/b.txt"), "BETA\n").unwrap();
        assert!(
            Command::new("umount")
                .arg(d.path())
                .status()
                .unwrap()
                .success()
        );
    }
    let v = f.sh("cat dir/b.txt");
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(
        v["output"], "beta\n",
        "the job sees the revision, not the tampered bytes"
    );
    assert_eq!(
        checkout_kind(&v),
        "filled",
        "the tampered entry was discarded"
    );
}

fn submit(s: &Server, argv: &[&str], rev: &str, key: &str) -> String {
    s.ok(
        RUN_A,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": rev, "argv": argv, "idempotency_key": key}),
    )["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn job(s: &Server, id: &str) -> Value {
    s.ok(
        RUN_A,
        "job.show",
        json!({"workspace_id": "ws1", "job_id": id}),
    )["job"]
        .clone()
}

fn settled(s: &Server, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let j = job(s, id);
        if !matches!(j["state"].as_str(), Some("queued" | "running")) {
            return j;
        }
        assert!(std::time::Instant::now() < deadline, "never settled: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of one `/metrics` sample (`name{labels}` as written).
fn metric(s: &Server, sample: &str) -> f64 {
    let (status, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {sample} in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn two_concurrent_jobs_on_one_cached_tree_see_only_their_own_writes() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let job_script = |me: &str| {
        format!(
            "echo start=$(cut -d' ' -f1 /proc/uptime); echo {me} > out.txt; \
             echo {me} >> README.new; sleep 2; echo seen=$(cat out.txt); \
             echo files=$(ls | tr '\\n' ,); echo end=$(cut -d' ' -f1 /proc/uptime)"
        )
    };
    let (sa, sb) = (job_script("A"), job_script("B"));
    let a = submit(&s, &["sh", "-c", &sa], "main", "warm-a");
    let b = submit(&s, &["sh", "-c", &sb], "main", "warm-b");
    let (ja, jb) = (settled(&s, &a), settled(&s, &b));
    let va = &ja["verification"];
    let vb = &jb["verification"];
    for (me, v) in [("A", va), ("B", vb)] {
        assert_eq!(v["status"], "passed", "{v}");
        let kv = kv(v["output"].as_str().unwrap());
        assert_eq!(kv["seen"], me, "{v}");
        assert_eq!(kv["files"], "README,README.new,out.txt,", "{v}");
    }
    let (ka, kb) = (
        kv(va["output"].as_str().unwrap()),
        kv(vb["output"].as_str().unwrap()),
    );
    // The host's uptime (not namespaced), in hundredths of a second, as each job saw it.
    let n =
        |m: &std::collections::BTreeMap<String, String>, k: &str| -> f64 { m[k].parse().unwrap() };
    assert!(
        n(&ka, "start") < n(&kb, "end") && n(&kb, "start") < n(&ka, "end"),
        "the two jobs ran at the same time: {ka:?} {kb:?}"
    );
    let mut kinds = vec![checkout_kind(va), checkout_kind(vb)];
    kinds.sort();
    assert_eq!(
        kinds,
        ["filled", "warm"],
        "one fills the cache, the other waits and shares it"
    );
    assert_eq!(
        metric(&s, "airlock_tree_cache_lookups_total{result=\"hit\"}"),
        1.0
    );
    assert_eq!(
        metric(&s, "airlock_tree_cache_lookups_total{result=\"miss\"}"),
        1.0
    );
    assert_eq!(metric(&s, "airlock_tree_cache_entries"), 1.0);
    // The job record and /metrics say where the time went.
    for phase in [
        "stage_ms",
        "create_ms",
        "start_ms",
        "run_ms",
        "destroy_ms",
        "check_ms",
    ] {
        assert!(va["phases"][phase].is_u64(), "{phase}: {va}");
    }
    assert!(
        metric(
            &s,
            "airlock_verification_phase_seconds_count{phase=\"start\"}"
        ) >= 2.0
    );
}

#[test]
fn a_tree_a_running_job_holds_is_never_evicted() {
    if !docker() {
        return;
    }
    // The smallest cache: three revisions of about 24 MB each do not fit.
    let mut s = Server::start_with(&format!("tree_cache_bytes = {}\n", 64 << 20));
    let log = s.dir.path().join("daemon.log");
    s.log = Some(log.clone());
    s.restart(None);
    let log = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut revs = Vec::new();
    for i in 0..3u8 {
        let big: Vec<u8> = (0..24u32 << 20).map(|j| (j % 251) as u8 ^ i).collect();
        std::fs::write(s.repo.join("big.bin"), &big).unwrap();
        git(&s.repo, &["add", "-A"]);
        git(&s.repo, &["commit", "-q", "-m", &format!("big {i}")]);
        revs.push(git(&s.repo, &["rev-parse", "HEAD"]));
    }
    let want = |i: usize| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "git -C {} show {}:big.bin | sha256sum | cut -c1-64",
                s.repo.display(),
                revs[i]
            ))
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    // Job 0 holds revision 0's tree while revisions 1 and 2 are filled.
    let hold = "touch /tmp/started; sleep 6; sha256sum big.bin | cut -c1-64";
    let held = submit(&s, &["sh", "-c", hold], &revs[0], "hold");
    wait_for(
        || job(&s, &held)["state"] == "running",
        "the holding job runs",
    );
    for (i, rev) in revs.iter().enumerate().skip(1) {
        let j = settled(&s, &submit(&s, &["true"], rev, &format!("fill{i}")));
        assert_eq!(j["verification"]["status"], "passed", "{j}");
        assert_eq!(checkout_kind(&j["verification"]), "filled", "{}", log());
    }
    // Filling revision 2 went over the bound: revision 1's tree (no job holds it) went, not
    // revision 0's.
    assert_eq!(metric(&s, "airlock_tree_cache_evictions_total"), 1.0);
    let h = settled(&s, &held);
    assert_eq!(h["verification"]["status"], "passed", "{h}");
    assert_eq!(
        h["verification"]["output"].as_str().unwrap().trim(),
        want(0)
    );
    let again = |i: usize, key: &str| {
        let j = settled(
            &s,
            &submit(
                &s,
                &["sh", "-c", "sha256sum big.bin | cut -c1-64"],
                &revs[i],
                key,
            ),
        );
        assert_eq!(
            j["verification"]["output"].as_str().unwrap().trim(),
            want(i)
        );
        checkout_kind(&j["verification"]).to_string()
    };
    assert_eq!(again(2, "again2"), "warm");
    assert_eq!(
        again(1, "again1"),
        "filled",
        "revision 1 was the one evicted"
    );
    assert!(metric(&s, "airlock_tree_cache_bytes") <= (64u64 << 20) as f64);
}

#[test]
fn a_tree_larger_than_the_cache_is_staged_in_full_and_leaves_nothing_behind() {
    if !docker() {
        return;
    }
    // The smallest cache (its image holds twice the bound): a 140 MB tree cannot go in even
    // after evicting everything. The job's own filesystem is made while the lease is tried, so
    // what that made must be gone before the job stages in full.
    let s = Server::start_with(&format!("tree_cache_bytes = {}\n", 64 << 20));
    let big: Vec<u8> = (0..140u32 << 20).map(|j| (j % 253) as u8).collect();
    std::fs::write(s.repo.join("big.bin"), &big).unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "too big for the cache"]);
    let rev = git(&s.repo, &["rev-parse", "HEAD"]);
    let j = settled(
        &s,
        &submit(&s, &["sh", "-c", "wc -c < big.bin"], &rev, "big"),
    );
    assert_eq!(j["verification"]["status"], "passed", "{j}");
    assert_eq!(checkout_kind(&j["verification"]), "full", "{j}");
    assert_eq!(
        j["verification"]["output"].as_str().unwrap().trim(),
        (140u32 << 20).to_string()
    );
    // The cache still serves a tree that fits.
    std::fs::remove_file(s.repo.join("big.bin")).unwrap();
    git(&s.repo, &["commit", "-q", "-am", "small again"]);
    let small = git(&s.repo, &["rev-parse", "HEAD"]);
    let j = settled(&s, &submit(&s, &["true"], &small, "small"));
    assert_eq!(j["verification"]["status"], "passed", "{j}");
    assert_eq!(checkout_kind(&j["verification"]), "filled", "{j}");
    // No checkout is left once the jobs settled.
    let checkouts = s.dir.path().join("data/checkouts");
    wait_for(
        || std::fs::read_dir(&checkouts).unwrap().next().is_none(),
        "every checkout removed",
    );
}

/// While its daemon runs, a cached entry cannot be changed through the filesystem, by root
/// either: every path beneath `tree-cache/mnt/entries` is read-only. The next job still sees
/// the revision, from the same entry.
#[test]
fn a_cached_entry_is_read_only_to_root_while_its_daemon_runs() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let a = submit(&s, &["cat", "README"], "main", "ro-a");
    let first = settled(&s, &a);
    assert_eq!(first["verification"]["status"], "passed", "{first}");
    assert_eq!(checkout_kind(&first["verification"]), "filled");
    let entries = s.dir.path().join("data/tree-cache/mnt/entries");
    let entry: Vec<PathBuf> = std::fs::read_dir(&entries)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(entry.len(), 1, "{entry:?}");
    let readme = entry[0].join("tree/README");
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(30), "{what}: {e}"); // EROFS
    };
    erofs(
        std::fs::write(&readme, "tampered\n"),
        "writing a cached file",
    );
    erofs(
        std::fs::OpenOptions::new()
            .append(true)
            .open(&readme)
            .map(drop),
        "opening a cached file for append",
    );
    erofs(std::fs::remove_file(&readme), "removing a cached file");
    erofs(
        std::fs::create_dir(entries.join("planted")),
        "planting an entry",
    );
    erofs(
        std::fs::rename(&entry[0], entries.join("moved")),
        "moving an entry",
    );
    let b = submit(&s, &["cat", "README"], "main", "ro-b");
    let again = settled(&s, &b);
    assert_eq!(again["verification"]["output"], "base\n", "{again}");
    assert_eq!(checkout_kind(&again["verification"]), "warm");
}

/// Raw bytes written into the cache image's blocks while no daemon runs change no inode (the
/// stat check cannot see them): the content check at the next use finds the file's bytes no
/// longer hash to its blob id, discards the entry and fills it again. The job sees the
/// revision, never the planted bytes.
#[test]
fn raw_writes_into_the_cache_image_are_caught_by_the_content_check() {
    if !docker() {
        return;
    }
    const REAL: &str = "a distinctive line the raw write will find\n";
    const FAKE: &str = "A DISTINCTIVE LINE THE RAW WRITE WILL FIND\n";
    let mut files = files();
    files.push(("raw.txt", REAL, false));
    let f = Fixture::new(&files);
    let v = f.sh("cat raw.txt");
    assert_eq!(
        (v["output"].as_str(), checkout_kind(&v)),
        (Some(REAL), "filled")
    );
    let img = f.data.join("tree-cache/cache.img");
    // The run's clean shutdown unmounts the cache unless a job's lazily detached overlay still
    // held it: debugfs reads the image itself (no journal replay), so the image must be
    // unmounted, its journal checkpointed, before it is read.
    unmount_everything_under(&f.data.join("tree-cache"));
    // A lazily detached mount leaves mountinfo at once but stays live (journal and all) until
    // its last user lets go; the loop device is released only then.
    wait_for(
        || {
            let out = Command::new("losetup")
                .arg("-j")
                .arg(&img)
                .output()
                .unwrap();
            out.stdout.is_empty()
        },
        "the cache image's loop device released",
    );
    let debugfs = |req: &str| -> String {
        let out = Command::new("debugfs")
            .args(["-R", req])
            .arg(&img)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let key = debugfs("ls -p /entries")
        .lines()
        .filter_map(|l| l.split('/').nth(5))
        .find(|n| !n.is_empty() && *n != "." && *n != "..")
        .expect("one cached entry")
        .to_string();
    let block: u64 = debugfs(&format!("blocks /entries/{key}/tree/raw.txt"))
        .split_whitespace()
        .next()
        .expect("raw.txt has a block")
        .parse()
        .unwrap();
    // Root writes the planted bytes over the file's block, past every filesystem check.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut image = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        image.seek(SeekFrom::Start(block * 4096)).unwrap();
        image.write_all(FAKE.as_bytes()).unwrap();
        image.sync_all().unwrap();
    }
    assert!(
        debugfs(&format!("cat /entries/{key}/tree/raw.txt")).starts_with(FAKE),
        "the raw write reached the file's block"
    );
    let v = f.sh("cat raw.txt");
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(
        v["output"], REAL,
        "the job sees the revision, not the raw bytes"
    );
    assert_eq!(
        checkout_kind(&v),
        "filled",
        "the tampered entry was discarded: {v}"
    );
    // The entry made anew holds the revision's bytes again, for the next job too.
    let v = f.sh("cat raw.txt");
    assert_eq!(
        (v["output"].as_str(), checkout_kind(&v)),
        (Some(REAL), "warm")
    );
}
