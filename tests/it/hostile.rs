//! Hostile jobs against the sandbox's walls, run under each isolation level (the test script
//! runs this module a second time with every profile under gVisor): no engine socket and no
//! host's processes in view, no capabilities to gain, no hard link out of the checkout, and a
//! daemonized child that does not outlive its job.

use crate::support::*;

fn basic() -> Fixture {
    Fixture::new(&[("README", "hello\n", false)])
}

#[test]
fn no_engine_socket_and_no_host_process_is_in_view() {
    if !docker() {
        return;
    }
    let f = basic();
    let v = f.sh(
        "for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock; do \
           [ -e $s ] && echo present $s; done; \
         set -- /proc/[0-9]*; echo procs=$#; \
         cat /proc/1/cmdline | tr '\\0' ' '; echo",
    );
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(
        !out.lines().any(|l| l.starts_with("present ")),
        "an engine socket is in view: {out}"
    );
    let procs: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("procs="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(procs < 10, "the host's processes are in view: {out}");
    assert!(
        !out.contains("systemd") && !out.contains("/usr/bin/dockerd"),
        "{out}"
    );
    f.assert_clean(&v);
}

#[test]
fn a_setuid_copy_of_a_shell_gains_no_identity_and_no_capability() {
    if !docker() {
        return;
    }
    let f = basic();
    let v = f.sh(
        "cp /bin/busybox /tmp/id && chmod 4755 /tmp/id; /tmp/id -u; \
         grep -E '^Cap(Eff|Prm)' /proc/self/status",
    );
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("65532\n"), "{out}");
    for line in out.lines().filter(|l| l.starts_with("Cap")) {
        assert!(line.ends_with("0000000000000000"), "a capability: {out}");
    }
}

#[test]
fn no_hard_link_reaches_out_of_the_checkout_and_a_fifo_is_only_an_untracked_file() {
    if !docker() {
        return;
    }
    let f = basic();
    let v = f.sh(
        "ln /etc/passwd leak 2>/dev/null && echo linked || echo refused; \
         ln /tmp leakdir 2>/dev/null && echo dir-linked || echo dir-refused; \
         mkfifo pipe && echo fifo-made; cat README",
    );
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(v["output"], "refused\ndir-refused\nfifo-made\nhello\n");
    f.assert_clean(&v);
}

#[test]
fn a_daemonized_child_does_not_outlive_its_job() {
    if !docker() {
        return;
    }
    let f = basic();
    // A child in its own session, detached from every stream, sleeping long past the job.
    let marker = "31337";
    let v = f.sh(&format!(
        "setsid sh -c 'exec sleep {marker}' </dev/null >/dev/null 2>&1 & echo started"
    ));
    assert_eq!(v["status"], "passed", "{v}");
    f.assert_clean(&v);
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "",
        "the daemonized child outlived its job"
    );
}
