//! `airlock run` against hostile fixtures: each test proves one limit of the sandbox.

use crate::support::*;
use serde_json::Value;

const FIELDS: [&str; 30] = [
    "verification_id",
    "runtime",
    "candidate_revision",
    "argv",
    "image",
    "observed_image",
    "user",
    "working_dir",
    "timeout_seconds",
    "cpu_limit",
    "memory_limit_bytes",
    "environment_sha256",
    "setup_script_sha256",
    "status",
    "exit_code",
    "output",
    "output_truncated",
    "output_bytes_total",
    "oom_killed",
    "duration_ms",
    "error",
    "created_at",
    "finished_at",
    "expires_at",
    "creation_key",
    "container_id",
    "engine",
    "phases",
    "candidate_tree",
    "repository",
    // `attestation` only with a signing key (tests/it/attestation.rs).
];

fn basic() -> Fixture {
    Fixture::new(&[
        ("README", "hello\n", false),
        ("run.sh", "#!/bin/sh\necho script ran\n", true),
        ("src/lib.txt", "library\n", false),
        (".gitignore", "build/\nignored.txt\n", false),
    ])
}

#[test]
fn passing_command_prints_exactly_the_documented_fields() {
    if !docker() {
        return;
    }
    let f = basic();
    let head = git(&f.repo, &["rev-parse", "HEAD"]);
    let r = f.run(&["--rev", "main"], &["sh", "-c", "./run.sh && cat README"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v = r.json.unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = FIELDS.to_vec();
    expected.sort();
    let mut got = keys.clone();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(v["status"], "passed");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(
        v["candidate_revision"], head,
        "branch resolved once to the full id"
    );
    assert_eq!(v["output"], "script ran\nhello\n");
    assert_eq!(v["output_truncated"], false);
    assert_eq!(v["output_bytes_total"], 17);
    assert_eq!(v["user"], "65532:65532");
    assert_eq!(v["working_dir"], "/workspace");
    assert_eq!(v["image"], "airlock/minimal:latest");
    assert_eq!(
        v["runtime"],
        runtime_under_test(),
        "the record names the isolation level it ran under"
    );
    assert_eq!(
        v["engine"], "local",
        "the one engine of a configuration without [[engines]]"
    );
    assert!(v["observed_image"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(v["environment_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(v["oom_killed"], false);
    assert!(v["error"].is_null());
    assert!(v["verification_id"].as_str().unwrap().starts_with("ver_"));
    for t in ["created_at", "finished_at", "expires_at"] {
        assert!(v[t].as_str().unwrap().ends_with('Z'), "{t} is RFC 3339 UTC");
    }
    f.assert_clean(&v);
    // Short ids resolve too.
    let short = &head[..10];
    let r = f.run(&["--rev", short], &["true"]);
    assert_eq!(r.json.unwrap()["candidate_revision"], head);
}

#[test]
fn nonzero_exit_is_failed_with_that_code() {
    if !docker() {
        return;
    }
    let f = basic();
    let r = f.run(&[], &["sh", "-c", "echo boom >&2; exit 42"]);
    assert_eq!(r.code, Some(1));
    let v = r.json.unwrap();
    assert_eq!(v["status"], "failed");
    assert_eq!(v["exit_code"], 42);
    assert_eq!(v["output"], "boom\n");
    f.assert_clean(&v);
}

#[test]
fn sleeping_past_the_timeout_is_timed_out_quickly() {
    if !docker() {
        return;
    }
    let f = basic();
    let r = f.run(&["--timeout", "2"], &["sleep", "300"]);
    let v = r.json.unwrap();
    assert_eq!(v["status"], "timed_out");
    assert!(v["exit_code"].is_null());
    assert!(v["error"].as_str().unwrap().contains("2 s"));
    // Cut short: the container lived less than its command's own length.
    assert!(
        v["duration_ms"].as_u64().unwrap() < 300_000,
        "killed at the deadline, not at the sleep's end: {v}"
    );
    f.assert_clean(&v);
}

#[test]
fn output_flood_keeps_exactly_the_cap_with_head_tail_and_total() {
    if !docker() {
        return;
    }
    let f = basic();
    // 100 MB of 'x' between a recognisable head and tail.
    let r = f.run(
        &["--timeout", "600"],
        &[
            "sh",
            "-c",
            "echo HEAD-MARK; head -c 100000000 /dev/zero | tr '\\0' x; echo; echo TAIL-MARK",
        ],
    );
    let v = r.json.unwrap();
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.len() <= 65_536, "retained {} bytes", out.len());
    assert!(
        out.len() > 65_000,
        "keeps (nearly) the whole cap: {}",
        out.len()
    );
    assert!(out.starts_with("HEAD-MARK\nxxxx"));
    assert!(out.ends_with("xxxx\nTAIL-MARK\n"));
    assert!(out.contains("bytes of output omitted]"));
    assert_eq!(v["output_truncated"], true);
    assert_eq!(v["output_bytes_total"], 100_000_000u64 + 10 + 1 + 10);
    f.assert_clean(&v);
}

#[test]
fn flood_does_not_hold_off_the_deadline() {
    if !docker() {
        return;
    }
    let f = basic();
    let r = f.run(&["--timeout", "3"], &["sh", "-c", "cat /dev/zero"]);
    let v = r.json.unwrap();
    assert_eq!(v["status"], "timed_out");
    assert_eq!(v["output_truncated"], true);
    assert!(v["output_bytes_total"].as_u64().unwrap() > 65_536);
    f.assert_clean(&v);
}

fn assert_source_changed(f: &Fixture, script: &str, path: &str) {
    let v = f.sh(script);
    assert_eq!(v["status"], "source_changed", "{script}: {v}");
    assert!(
        v["error"].as_str().unwrap().contains(path),
        "{script}: error names {path}: {}",
        v["error"]
    );
    f.assert_clean(&v);
}

#[test]
fn every_kind_of_tracked_change_is_source_changed() {
    if !docker() {
        return;
    }
    let f = basic();
    f.commit(
        &[("ignored.txt", "tracked although ignored\n", false)],
        "ignored",
    );
    assert_source_changed(&f, "echo x >> README", "README");
    assert_source_changed(&f, "chmod +x README", "README");
    assert_source_changed(&f, "chmod -x run.sh", "run.sh");
    assert_source_changed(&f, "rm README", "README");
    assert_source_changed(&f, "rm README && ln -s run.sh README", "README");
    assert_source_changed(
        &f,
        "rm -r src && mkdir src && echo library > src/lib.txt.new",
        "src/lib.txt",
    );
    assert_source_changed(&f, "rm -r src && ln -s /tmp src", "src/lib.txt");
    assert_source_changed(&f, "echo changed > ignored.txt", "ignored.txt");
    // Same size, same mtime: the content still differs.
    assert_source_changed(
        &f,
        "touch -r README /tmp/ref && printf 'HELLO\\n' > README && touch -r /tmp/ref README",
        "README",
    );
    // A failing command that also changed sources is source_changed, not failed.
    assert_source_changed(&f, "echo x > README; exit 1", "README");
}

#[test]
fn source_changed_lists_at_most_twenty_paths() {
    if !docker() {
        return;
    }
    let files: Vec<(String, String)> = (0..25)
        .map(|i| (format!("f{i:02}.txt"), format!("{i}\n")))
        .collect();
    let refs: Vec<(&str, &str, bool)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str(), false))
        .collect();
    let f = Fixture::new(&refs);
    let v = f.sh("rm f*.txt");
    assert_eq!(v["status"], "source_changed");
    let err = v["error"].as_str().unwrap();
    assert!(err.starts_with("25 tracked path(s) differ"), "{err}");
    assert!(err.contains("f19.txt") && !err.contains("f20.txt"), "{err}");
    assert!(err.contains("(and 5 more)"), "{err}");
}

#[test]
fn untracked_build_output_passes() {
    if !docker() {
        return;
    }
    let f = basic();
    let v = f.sh("mkdir -p build out && echo o > build/a && echo p > out/b && echo q > new.txt && cat README");
    assert_eq!(v["status"], "passed", "{v}");
    f.assert_clean(&v);
}

#[test]
fn checkout_is_exact_modes_symlinks_no_git_no_attributes_applied() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[
        ("exec.sh", "#!/bin/sh\necho x\n", true),
        ("plain.txt", "a\nb\n", false),
        ("gone.txt", "export-ignored but tracked\n", false),
        ("subst.txt", "$Format:%H$\n", false),
        (
            ".gitattributes",
            "gone.txt export-ignore\nsubst.txt export-subst\nplain.txt text eol=crlf\n",
            false,
        ),
    ]);
    std::os::unix::fs::symlink("/etc/passwd", f.repo.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("plain.txt", f.repo.join("rel-link")).unwrap();
    f.commit(&[], "links");
    let v = f.sh(
        "test -x exec.sh && echo exec-ok; test -x plain.txt || echo plain-not-exec; \
         wc -c < plain.txt; cat gone.txt; cat subst.txt; readlink abs-link; readlink rel-link; \
         test -e .git || echo no-git",
    );
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(
        v["output"],
        "exec-ok\nplain-not-exec\n4\nexport-ignored but tracked\n$Format:%H$\n/etc/passwd\nplain.txt\nno-git\n"
    );
}

#[test]
fn only_loopback_and_not_root_and_read_only_root() {
    if !docker() {
        return;
    }
    let f = basic();
    let v = f.sh(
        "ls /sys/class/net; id -u; id -g; \
         for p in /etc/x /x /usr/x /bin/x; do touch $p 2>/dev/null && echo wrote $p || echo denied $p; done; \
         touch /tmp/ok && echo tmp-ok; touch /workspace/new && echo ws-ok",
    );
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(
        v["output"],
        "lo\n65532\n65532\ndenied /etc/x\ndenied /x\ndenied /usr/x\ndenied /bin/x\ntmp-ok\nws-ok\n"
    );
}

#[test]
fn binding_a_port_below_1024_is_refused_as_on_a_host() {
    if !docker() {
        return;
    }
    let f = basic();
    // Docker's default lets any user bind low ports; the sandbox keeps the kernel's rule.
    let v = f.sh("cat /proc/sys/net/ipv4/ip_unprivileged_port_start; \
         timeout 1 nc -l -p 80 127.0.0.1 2>&1; echo low=$?; \
         timeout 1 nc -l -p 8080 127.0.0.1 2>&1; echo high=$?");
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    if runtime_under_test() == "runsc" {
        // Under gVisor the job's loopback is gVisor's own network stack, which has no such
        // sysctl and lets any user listen on a low port there (nothing reaches the host's
        // network: runsc runs with --network=none). A documented difference.
        assert!(out.contains("No such file or directory"), "{out}");
        assert!(out.contains("low=143") && out.contains("high=143"), "{out}");
        return;
    }
    assert!(out.starts_with("1024\n"), "{out}");
    assert!(
        out.contains("Permission denied"),
        "port 80 is refused: {out}"
    );
    assert!(!out.contains("low=143"), "port 80 never listened: {out}");
    assert!(
        out.contains("high=143"),
        "port 8080 listened until the timeout: {out}"
    );
}

#[test]
fn seccomp_and_capabilities_deny_the_escape_toolkit() {
    if !docker() {
        return;
    }
    let f = basic();
    let probe = probe_binary();
    std::fs::write(f.repo.join("probe"), &probe).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(f.repo.join("probe"), std::fs::Permissions::from_mode(0o755)).unwrap();
    f.commit(&[], "probe");
    let v = f.run(&[], &["./probe"]).json.unwrap();
    assert_eq!(v["status"], "passed", "{v}");
    let got = kv(v["output"].as_str().unwrap());
    if runtime_under_test() == "runsc" {
        // Under gVisor no call reaches the host's kernel: gVisor's own kernel answers each
        // (runsc, registered without --oci-seccomp, does not apply the job's seccomp profile;
        // with it, it answers EPERM where the profile says ENOSYS, and threads cannot start).
        // What gVisor answers where runc's seccomp and capabilities refuse, as the README's
        // isolation table reports it: namespaces and packet sockets are gVisor's own.
        let expect = [
            ("unshare_user", "ok"),
            ("unshare_mount", "ok"),
            ("unshare_net", "ok"),
            ("setns", "errno 95"),
            ("mount", "EPERM"),
            ("umount", "EPERM"),
            ("pivot_root", "EINVAL"),
            ("keyctl", "EACCES"),
            ("add_key", "EACCES"),
            ("request_key", "EACCES"),
            ("bpf", "ENOSYS"),
            ("perf_event_open", "errno 19"),
            ("userfaultfd", "ENOSYS"),
            ("io_uring_setup", "EFAULT"),
            ("clone3", "ENOSYS"),
            ("open_by_handle_at", "errno 95"),
            ("name_to_handle_at", "errno 95"),
            ("kexec_load", "ENOSYS"),
            ("init_module", "ENOSYS"),
            ("personality_set", "EINVAL"),
            ("personality_query", "EINVAL"),
            ("socket_packet", "ok"),
            ("socket_alg", "EAFNOSUPPORT"),
            ("socket_vsock", "EAFNOSUPPORT"),
            ("socket_unix", "ok"),
            ("socket_inet", "ok"),
            ("socket_inet6", "ok"),
            ("socket_netlink", "ok"),
            ("fork", "ok"),
            ("thread", "ok"),
        ];
        for (check, want) in expect {
            assert_eq!(
                got.get(check).map(String::as_str),
                Some(want),
                "{check} under gVisor: {}",
                v["output"]
            );
        }
        return;
    }
    let expect = [
        ("unshare_user", "EPERM"),
        ("unshare_mount", "EPERM"),
        ("unshare_net", "EPERM"),
        ("setns", "EPERM"),
        ("mount", "EPERM"),
        ("umount", "EPERM"),
        ("pivot_root", "EPERM"),
        ("keyctl", "EPERM"),
        ("add_key", "EPERM"),
        ("request_key", "EPERM"),
        ("bpf", "EPERM"),
        ("perf_event_open", "EPERM"),
        ("userfaultfd", "EPERM"),
        ("io_uring_setup", "ENOSYS"),
        ("clone3", "ENOSYS"),
        ("open_by_handle_at", "EPERM"),
        ("name_to_handle_at", "EPERM"),
        ("kexec_load", "EPERM"),
        ("init_module", "EPERM"),
        ("personality_set", "EPERM"),
        ("personality_query", "ok"),
        ("socket_packet", "EPERM"),
        ("socket_alg", "EPERM"),
        ("socket_vsock", "EPERM"),
        ("socket_unix", "ok"),
        ("socket_inet", "ok"),
        ("socket_inet6", "ok"),
        ("socket_netlink", "ok"),
        ("fork", "ok"),
        ("thread", "ok"),
    ];
    for (check, want) in expect {
        assert_eq!(
            got.get(check).map(String::as_str),
            Some(want),
            "{check}: {}",
            v["output"]
        );
    }
}

#[test]
fn fork_bomb_is_contained_by_the_pids_limit() {
    if !docker() {
        return;
    }
    let f =
        basic().with_config("[profiles.small]\nimage = \"airlock/minimal:latest\"\npids = 48\n");
    let v = f
        .run(
            &["--profile", "small", "--timeout", "60"],
            &[
                "sh",
                "-c",
                "sh -c 'i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done' 2>/dev/null; \
               set -- /proc/[0-9]*; echo $#; exit 0",
            ],
        )
        .json
        .unwrap();
    if runtime_under_test() == "runsc" {
        // Under gVisor (ptrace platform) the container's pids cgroup counts gVisor's own host
        // threads and stub processes, not the job's tasks: past the limit the whole sandbox
        // ends, and the job never passes (README: a runsc profile needs a larger `pids`).
        assert_ne!(v["status"], "passed", "{v}");
        f.assert_clean(&v);
        return;
    }
    let out = v["output"].as_str().unwrap();
    let count: usize = out
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next()
        .unwrap_or_else(|| panic!("no process count in {out:?}"));
    assert!(count <= 48, "{count} processes despite pids = 48");
    assert!(count >= 10, "the test did fork: {count}");
    f.assert_clean(&v);

    // A real fork bomb is stopped (by the deadline at the latest) and fully cleaned up.
    let v = f
        .run(
            &["--profile", "small", "--timeout", "5"],
            &["sh", "-c", "b() { b | b & }; b; sleep 30"],
        )
        .json
        .unwrap();
    assert!(
        v["duration_ms"].as_u64().unwrap() < 30_000,
        "stopped before the command's own end: {v}"
    );
    assert!(
        ["timed_out", "failed"].contains(&v["status"].as_str().unwrap()),
        "{v}"
    );
    f.assert_clean(&v);
}

#[test]
fn memory_hog_is_error_with_oom_killed_never_passed() {
    if !docker() {
        return;
    }
    let f = basic().with_config(
        "[profiles.small]\nimage = \"airlock/minimal:latest\"\nmemory_bytes = 67108864\n",
    );
    // The hog is a child; the shell itself exits 0 afterwards. Still never passed.
    let v = f
        .run(
            &["--profile", "small", "--timeout", "120"],
            &["sh", "-c", "head -c 400000000 /dev/zero | tail -c 300000000 > /dev/null; echo survived; exit 0"],
        )
        .json
        .unwrap();
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["oom_killed"], true);
    assert!(v["error"].as_str().unwrap().contains("out of memory"));
    assert_eq!(v["memory_limit_bytes"], 67108864);
    f.assert_clean(&v);
}

#[test]
fn setup_script_runs_before_argv_in_the_same_container_and_is_hashed() {
    if !docker() {
        return;
    }
    let f = basic().with_config(
        "[profiles.setup]\nimage = \"airlock/minimal:latest\"\nsetup_script = \"echo setup > /tmp/marker\"\nenv = { GREETING = \"hi\" }\n",
    );
    let v = f
        .run(
            &["--profile", "setup"],
            &["sh", "-c", "cat /tmp/marker; echo $GREETING"],
        )
        .json
        .unwrap();
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(v["output"], "setup\nhi\n");
    let default = f.run(&[], &["true"]).json.unwrap();
    assert_ne!(v["setup_script_sha256"], default["setup_script_sha256"]);
    assert_ne!(v["environment_sha256"], default["environment_sha256"]);
    // A failing setup script fails the verification.
    let f2 = basic().with_config(
        "[profiles.bad]\nimage = \"airlock/minimal:latest\"\nsetup_script = \"exit 7\"\n",
    );
    let v = f2.run(&["--profile", "bad"], &["true"]).json.unwrap();
    assert_eq!(v["status"], "failed");
    assert_eq!(v["exit_code"], 7);
}

#[test]
fn verification_show_and_list_read_back_what_run_printed() {
    if !docker() {
        return;
    }
    let f = basic();
    let a = f.run(&[], &["true"]).json.unwrap();
    let b = f.run(&[], &["false"]).json.unwrap();
    let all = f.list(&[]);
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], b, "newest first, same fields as run printed");
    assert_eq!(all[1], a);
    assert_eq!(f.list(&["--status", "failed"]), vec![b.clone()]);
    assert_eq!(f.list(&["--limit", "1"]).len(), 1);
    let show = std::process::Command::new(BIN)
        .args([
            "verification",
            "show",
            a["verification_id"].as_str().unwrap(),
            "--data-dir",
        ])
        .arg(&f.data)
        .output()
        .unwrap();
    assert!(show.status.success());
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown, a);
    for bad in [
        &["--status", "PASSED"][..],
        &["--limit", "0"],
        &["--limit", "1001"],
    ] {
        let mut c = std::process::Command::new(BIN);
        c.args(["verification", "list", "--data-dir"])
            .arg(&f.data)
            .args(bad);
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let missing = std::process::Command::new(BIN)
        .args([
            "verification",
            "show",
            "ver_00000000000000000000000000000000",
            "--data-dir",
        ])
        .arg(&f.data)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));
}
