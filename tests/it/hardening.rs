//! Hostile jobs and a hostile host, on real Docker: per-job disk and inode quotas, a data dir
//! only Airlock controls, children that die with Airlock, retention of one-shot results.

use crate::support::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SMALL_DISK: &str = "[profiles.small]\nimage = \"airlock/minimal:latest\"\n\
                          disk_bytes = 67108864\ninodes = 4096\n";

/// Mount points (from this process's mountinfo) that lie under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| Path::new(m).starts_with(&dir))
        .collect()
}

/// Loop devices whose backing file lies under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let out = Command::new("losetup").args(["-a"]).output().unwrap();
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .map(str::to_string)
        .collect()
}

fn assert_no_job_filesystems(f: &Fixture) {
    assert_eq!(mounts_under(&f.data), Vec::<String>::new(), "mounts left");
    // A loop device detaches itself once the last mount of its filesystem is gone, and the
    // mount namespace of a removed container (which saw the job's tree, and through an overlay
    // the tree cache) goes a moment after the container: a leak is a device still there after
    // that.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !loops_under(&f.data).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        loops_under(&f.data),
        Vec::<String>::new(),
        "loop devices left"
    );
    let left: Vec<_> = std::fs::read_dir(f.data.join("checkouts"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "checkouts left: {left:?}");
}

#[test]
fn a_job_that_fills_its_disk_gets_enospc_on_its_own_filesystem() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)]).with_config(SMALL_DISK);
    let r = f.run(
        &["--profile", "small"],
        &[
            "sh",
            "-c",
            "df -k /workspace | tail -n 1; dd if=/dev/zero of=/workspace/fill bs=1M count=200 2>&1; \
             echo dd_exit=$?; du -sk /workspace | cut -f1 | sed 's/^/used_kb=/'",
        ],
    );
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("No space left on device"), "{out}");
    let kv = kv(out);
    assert_ne!(kv["dd_exit"], "0", "{out}");
    let used: u64 = kv["used_kb"].parse().unwrap();
    assert!(
        used <= 64 * 1024,
        "the job wrote {used} KiB past its 64 MiB quota"
    );
    // The filesystem the job saw is its own, 64 MiB, not the host's.
    let df_total: u64 = out
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(df_total <= 64 * 1024, "df shows {df_total} KiB: {out}");
    assert_eq!(v["status"], "passed", "the job itself exited 0: {v}");
    // The job wrote into the upper directory of an overlay of the cached tree: that upper
    // directory, on the job's own filesystem, is what ran out.
    assert_eq!(v["phases"]["checkout"], first_checkout(), "{v}");
    f.assert_clean(&v);
    assert_no_job_filesystems(&f);
}

#[test]
fn a_job_that_creates_too_many_files_runs_out_of_inodes() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)]).with_config(SMALL_DISK);
    let r = f.run(
        &["--profile", "small"],
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 40000 ]; do echo -n > /workspace/f$i || { echo stopped_at=$i; exit 3; }; \
             i=$((i+1)); done; echo all_created; df -i /workspace",
        ],
    );
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("No space left on device"), "{out}");
    // ext4 rounds the inode count up to fill whole inode-table blocks of a block group.
    // stdout and stderr share one stream: the marker may follow the shell's error message on
    // the same line, so it is found anywhere, not as a line of its own.
    let at = out
        .find("stopped_at=")
        .unwrap_or_else(|| panic!("no stopped_at marker: {out}"));
    let stopped: u64 = out[at + "stopped_at=".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!((4000..=16384).contains(&stopped), "{out}");
    assert_eq!(v["status"], "failed");
    assert_eq!(v["exit_code"], 3);
    assert_no_job_filesystems(&f);
}

#[test]
fn the_disk_quota_is_part_of_the_environment_hash_and_directory_mode_still_works() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)]).with_config(SMALL_DISK);
    let small = f.run(&["--profile", "small"], &["true"]).json.unwrap();
    let default = f.run(&[], &["true"]).json.unwrap();
    assert_ne!(small["environment_sha256"], default["environment_sha256"]);
    let d = Fixture::new(&[("a.txt", "x\n", false)])
        .with_config("checkout_filesystem = \"directory\"\n");
    let v = d.sh("cat a.txt && df -k /workspace | tail -n 1");
    assert_eq!(v["status"], "passed", "{v}");
    assert_ne!(v["environment_sha256"], default["environment_sha256"]);
    assert!(!v["output"].as_str().unwrap().contains("/dev/loop"), "{v}");
    d.assert_clean(&v);
}

#[test]
fn new_work_is_refused_when_the_data_dir_is_short_of_space() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)])
        .with_config("min_free_bytes = 1000000000000000000\n");
    let r = f.run(&[], &["true"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("min_free_bytes 1000000000000000000"),
        "{}",
        r.stderr
    );
    assert!(f.list(&[]).is_empty(), "nothing was recorded");
}

fn refused_with(f: &Fixture, needle: &str) {
    let r = f.run(&[], &["true"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains(needle), "{needle:?} not in {}", r.stderr);
    assert!(
        r.stderr.contains("not writable by group or others"),
        "{}",
        r.stderr
    );
    let out = Command::new(BIN)
        .args(["recover", "--data-dir"])
        .arg(&f.data)
        .output()
        .unwrap();
    assert!(!out.status.success(), "recover used an unsafe data dir");
}

#[test]
fn a_data_dir_others_could_change_is_refused() {
    if !docker() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new(&[("a.txt", "x\n", false)]);
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    // A pre-existing world-writable data dir is not used as found.
    std::fs::create_dir(&f.data).unwrap();
    mode(&f.data, 0o777).unwrap();
    refused_with(&f, "mode 0777");
    assert!(
        !f.data.join("airlock.db").exists(),
        "nothing was created in it"
    );
    mode(&f.data, 0o700).unwrap();
    assert_eq!(f.sh("true")["status"], "passed");
    // A directory inside it that others can write.
    mode(&f.data.join("locks"), 0o733).unwrap();
    refused_with(&f, "locks");
    mode(&f.data.join("locks"), 0o700).unwrap();
    // A database file replaced by another user.
    let db = f.data.join("airlock.db");
    std::os::unix::fs::chown(&db, Some(12345), None).unwrap();
    refused_with(&f, "owned by uid 12345");
    std::os::unix::fs::chown(&db, Some(0), None).unwrap();
    // A symlink swapped in for a directory Airlock uses.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::remove_dir(f.data.join("checkouts")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), f.data.join("checkouts")).unwrap();
    let r = f.run(&[], &["true"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("a symlink"), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    std::fs::remove_file(f.data.join("checkouts")).unwrap();
    assert_eq!(f.sh("true")["status"], "passed", "mended, it runs again");
}

/// The direct children of `pid` (from every thread's `children` list).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn killing_airlock_while_it_stages_kills_its_git_child_and_recovery_cleans_up() {
    if !docker() {
        return;
    }
    // A big revision on tmpfs, so staging takes long enough to be caught in the act.
    let shm = tempfile::Builder::new()
        .prefix("airlock-kill-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let repo = shm.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    for d in 0..40 {
        let dir = repo.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..1000 {
            std::fs::write(dir.join(format!("f{i}.txt")), format!("{d}/{i}\n")).unwrap();
        }
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "many files"]);
    let data = shm.path().join("data");
    let mut caught = None;
    for _attempt in 0..5 {
        let mut child = Command::new(BIN)
            .args(["run", "--rev", "HEAD", "--repo"])
            .arg(&repo)
            .arg("--data-dir")
            .arg(&data)
            .args(["--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env_remove("AIRLOCK_CRASH_AT")
            .spawn()
            .unwrap();
        let start = Instant::now();
        let git_pid = loop {
            // A git child once the data dir is open: staging (the request's revision is
            // resolved before, by a git child too, and a kill then leaves nothing to recover).
            if let Some(p) = children_of(child.id())
                .into_iter()
                .find(|p| comm(*p) == "git")
                .filter(|_| data.join("airlock.db").exists())
            {
                break Some(p);
            }
            if start.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        if let Some(p) = git_pid {
            caught = Some(p);
            break;
        }
    }
    let git_pid = caught.expect("never caught airlock with a git child while staging");
    // The kernel kills the child with its parent: it must be gone (or a zombie of init's).
    let start = Instant::now();
    while Path::new(&format!("/proc/{git_pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{git_pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "git {git_pid} kept running after airlock was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(BIN)
        .args(["recover", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["failures"], serde_json::json!([]), "{report}");
    assert!(out.status.success(), "{report}");
    assert_eq!(mounts_under(&data), Vec::<String>::new());
    assert_eq!(loops_under(&data), Vec::<String>::new());
    assert_eq!(
        std::fs::read_dir(data.join("checkouts")).unwrap().count(),
        0
    );
}

#[test]
fn one_shot_results_are_removed_after_their_retention() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)]).with_config("run_retention_days = 30\n");
    let v = f.sh("true");
    let id = v["verification_id"].as_str().unwrap().to_string();
    let artifact = f
        .data
        .join("artifacts/verifications")
        .join(format!("{id}.json"));
    assert!(artifact.exists());
    let clock = f.dir.path().join("clock");
    let recover_at = |days: u64| {
        let t = time::OffsetDateTime::now_utc() + Duration::from_secs(days * 86_400);
        std::fs::write(&clock, airlock::ids::rfc3339(t)).unwrap();
        let out = Command::new(BIN)
            .args(["recover", "--data-dir"])
            .arg(&f.data)
            .arg("--config")
            .arg(f.config.as_ref().unwrap())
            .env("AIRLOCK_TEST_CLOCK_FILE", &clock)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let r = recover_at(29);
    assert_eq!(r["results_expired"], serde_json::json!([]), "{r}");
    assert!(artifact.exists(), "kept inside its retention");
    let r = recover_at(31);
    assert_eq!(r["results_expired"], serde_json::json!([id]), "{r}");
    assert!(!artifact.exists(), "artifact removed");
    assert!(f.list(&[]).is_empty(), "row removed");
    let r = recover_at(32);
    assert_eq!(
        r["results_expired"],
        serde_json::json!([]),
        "nothing twice: {r}"
    );
}

#[test]
fn a_host_that_cannot_loop_mount_is_refused_with_what_to_configure() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)]);
    // A PATH with git but without mkfs.ext4 and mount.
    let bin = f.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let git_path = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::os::unix::fs::symlink(git_path.trim(), bin.join("git")).unwrap();
    let r = RunResult::from(
        f.run_cmd(&[], &["true"])
            .env("PATH", &bin)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("mkfs.ext4"), "{}", r.stderr);
    assert!(
        r.stderr.contains("checkout_filesystem = \"directory\""),
        "{}",
        r.stderr
    );
    assert!(!f.data.exists(), "refused before the data dir was touched");
    // With the directory layout the same host runs the job.
    let d = Fixture::new(&[("a.txt", "x\n", false)])
        .with_config("checkout_filesystem = \"directory\"\n");
    let r = RunResult::from(
        d.run_cmd(&[], &["true"])
            .env("PATH", &bin)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn recovery_that_meets_a_busy_checkout_retries_and_never_reports_it_removed() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a.txt", "x\n", false)]);
    let mut c = f.run_cmd(&[], &["sleep", "60"]);
    c.env("AIRLOCK_CRASH_AT", "after_start");
    let out = c.output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9));
    let v = f.list(&[]).remove(0);
    let key = v["creation_key"].as_str().unwrap();
    let tree = f.data.join("checkouts").join(key).join("mnt/tree");
    assert!(tree.join("a.txt").exists(), "the checkout is still mounted");
    // Something on the host still uses the job's filesystem.
    let mut busy = Command::new("sleep")
        .arg("60")
        .current_dir(&tree)
        .spawn()
        .unwrap();
    let report = f.recover();
    assert_eq!(
        report["marked_error"][0]["verification_id"],
        v["verification_id"]
    );
    let failures = report["failures"].to_string();
    assert!(failures.contains("cannot unmount"), "{report}");
    assert!(
        !report["checkouts_removed"].to_string().contains(key),
        "a busy checkout was reported removed: {report}"
    );
    assert!(tree.join("a.txt").exists(), "nothing half-removed");
    busy.kill().unwrap();
    busy.wait().unwrap();
    let report = f.recover();
    assert_eq!(report["failures"], serde_json::json!([]), "{report}");
    assert!(
        report["checkouts_removed"].to_string().contains(key),
        "{report}"
    );
    assert_no_job_filesystems(&f);
}
