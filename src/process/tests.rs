use super::*;

#[test]
fn a_child_is_killed_when_its_parent_dies() {
    // An intermediate thread starts `sleep 30` and exits at once: the kernel must kill
    // the sleep, because its parent (that thread) is gone.
    let child = std::thread::spawn(|| command("sleep").arg("30").spawn().unwrap())
        .join()
        .unwrap();
    let pid = child.id();
    let mut child = child;
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "child {pid} outlived its parent thread"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(9), "{status:?}");
}

fn sh(script: &str) -> Command {
    let mut c = command("sh");
    c.args(["-c", script]);
    c
}

#[test]
fn arguments_environment_directory_and_exit_codes_reach_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let out = sh("printf '%s|%s|%s|%s' \"$1\" \"$AIRLOCK_T\" \"${HOME-unset}\" \"$(pwd)\"; exit 3")
        .arg("argv0")
        .arg("a b\u{e9}*")
        .env("AIRLOCK_T", "x=y")
        .env_remove("HOME")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let want = format!(
        "a b\u{e9}*|x=y|unset|{}",
        dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}

#[test]
fn a_missing_or_unrunnable_program_is_an_error_and_leaves_no_child() {
    let e = command("airlock-no-such-program-here")
        .output()
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    let e = command(&script).output().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    let e = command("sh")
        .current_dir(dir.path().join("absent"))
        .output()
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    // Every failed child was reaped: this thread has no child left (zombies included).
    let children = format!("/proc/self/task/{}/children", nix::unistd::gettid());
    if let Ok(list) = std::fs::read_to_string(&children) {
        assert_eq!(list.trim(), "", "unreaped children of this thread");
    }
}

#[test]
fn the_child_starts_with_default_signals_no_mask_and_none_of_airlocks_descriptors() {
    // Rust ignores SIGPIPE in Airlock; a child must not inherit that, nor a blocked mask,
    // nor any descriptor Airlock opened (all are close-on-exec).
    let file = std::fs::File::open("/proc/self/status").unwrap();
    // Far above what `ls` opens for itself (3, 4): a close-on-exec copy at 200 or more.
    let held = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(200)).unwrap();
    let held_fd = held.to_string();
    let out = sh("grep -E '^Sig(Blk|Ign)' /proc/self/status; ls /proc/self/fd")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    // SIGPIPE is signal 13, bit 12: not ignored.
    let ign = text.lines().find(|l| l.starts_with("SigIgn")).unwrap();
    let mask = u64::from_str_radix(ign.split('\t').nth(1).unwrap().trim(), 16).unwrap();
    assert_eq!(mask & (1 << 12), 0, "{text}");
    let fds: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_digit()))
        .collect();
    for std_fd in ["0", "1", "2"] {
        assert!(fds.contains(&std_fd), "{text}");
    }
    assert!(
        !fds.contains(&held_fd.as_str()),
        "fd {held_fd} leaked: {text}"
    );
    drop(file);
    let _ = nix::unistd::close(held);
}

#[test]
fn both_pipes_are_drained_at_once_and_stdin_is_fed() {
    // 1 MB on each of stdout and stderr: reading one to its end first would stall the
    // child on the other's full pipe.
    let out = sh("head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!((out.stdout.len(), out.stderr.len()), (1_000_000, 1_000_000));
    let mut c = command("wc");
    c.arg("-c").stdin(Stdio::Piped).stdout(Stdio::Piped);
    let mut child = c.spawn().unwrap();
    let feeder = feed(child.stdin.take().unwrap(), vec![b'x'; 300_000]);
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "300000");
}

#[test]
fn a_killed_child_reports_its_signal() {
    let mut child = command("sleep").arg("30").spawn().unwrap();
    assert!(child.try_wait().unwrap().is_none());
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9));
    // A second wait answers the same.
    assert_eq!(child.wait().unwrap().signal(), Some(9));
}
