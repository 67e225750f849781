//! `airlock job` against a real daemon over loopback: submit and follow a real job whose log
//! arrives while it runs, exit codes by the settled state, a follow that outlives a daemon
//! restart, and show, list, cancel and log with the token from the environment, a token file
//! or the client settings file (never the command line); refusals exit by the error table.

use crate::support::jobs::{id, settled, show};
use crate::support::*;
use serde_json::Value;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `airlock job ARGS` aimed at `s` with alice's token in the environment.
fn job(s: &Server, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("job")
        .args(args)
        .env("AIRLOCK_URL", format!("http://{}", s.addr))
        .env("AIRLOCK_TOKEN", ALICE)
        .env_remove("AIRLOCK_WORKSPACE")
        .env("HOME", "/nonexistent")
        .env_remove("XDG_CONFIG_HOME");
    c
}

/// Reads `r` on a thread, sending everything seen so far after each read.
fn watch(mut r: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
        }
    });
    rx
}

fn wait_seen(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    loop {
        let seen = rx
            .recv_timeout(Duration::from_secs(90))
            .unwrap_or_else(|_| panic!("{needle:?} never arrived"));
        if seen.contains(needle) {
            return seen;
        }
    }
}

#[test]
fn submit_follow_streams_the_log_while_the_job_runs_and_exits_by_its_state() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let mut child = job(
        &s,
        &[
            "submit",
            "--workspace",
            "ws1",
            "--rev",
            "main",
            "--label",
            "ci",
            "--follow",
            "--",
            "sh",
            "-c",
            "echo first; sleep 3; echo second; exit 3",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let out = watch(child.stdout.take().unwrap());
    let err = watch(child.stderr.take().unwrap());
    let submitted = wait_seen(&err, "submitted");
    let job_id = submitted
        .split_whitespace()
        .find(|w| w.starts_with("job_"))
        .unwrap()
        .to_string();
    let seen = wait_seen(&out, "first\n");
    assert!(
        !seen.contains("second"),
        "first arrived before the job ended: {seen}"
    );
    assert_eq!(show(&s, ALICE, "ws1", &job_id)["state"], "running");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "a failed job exits 1");
    let all = wait_seen(&out, "[airlock: job settled: failed]");
    assert!(all.starts_with("first\nsecond\n"), "{all}");
    assert!(wait_seen(&err, "settled: failed").contains(&job_id));
    let j = show(&s, ALICE, "ws1", &job_id);
    assert_eq!(j["labels"], serde_json::json!(["ci"]));
    assert_eq!(j["verification"]["exit_code"], 3);

    // A passing job exits 0; without --follow the job is printed as JSON.
    let ok = job(
        &s,
        &[
            "submit",
            "--workspace",
            "ws1",
            "--rev",
            "main",
            "--follow",
            "--",
            "true",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let printed = job(
        &s,
        &[
            "submit",
            "--workspace",
            "ws1",
            "--rev",
            "main",
            "--",
            "true",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(printed.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert!(v["job"]["job_id"].as_str().unwrap().starts_with("job_"));
}

#[test]
fn a_follow_outlives_a_daemon_restart_and_learns_the_jobs_end() {
    let mut s = Server::fake();
    // The same address after the restart: the follower keeps its URL.
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(
        &s.config,
        text.replacen(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{}\"", s.addr),
            1,
        ),
    )
    .unwrap();
    s.restart(None);
    let j = s.ok(
        ALICE,
        "job.submit",
        serde_json::json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-hang"],
               "timeout_seconds": 600, "idempotency_key": "r1"}),
    )["job"]
        .clone();
    wait_for(
        || show(&s, ALICE, "ws1", &id(&j))["state"] == "running",
        "the job runs",
    );
    let mut child = job(&s, &["follow", &id(&j)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = watch(child.stderr.take().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    // Stopping cancels the job; the follower is cut first and learns the end after the start.
    s.stop();
    wait_seen(&err, "ended before the job settled");
    std::thread::sleep(Duration::from_secs(2));
    s.restart(None);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(wait_seen(&err, "settled: cancelled").contains(&id(&j)));
}

#[test]
fn show_list_cancel_and_log_take_the_token_from_env_file_or_settings_and_refusals_exit_by_the_table()
 {
    let s = Server::fake();
    let dir = tempfile::tempdir().unwrap();
    const SUBMIT: &[&str] = &[
        "submit",
        "--workspace",
        "ws1",
        "--rev",
        "main",
        "--label",
        "nightly",
        "--idempotency-key",
        "k1",
        "--",
        "fake-exit",
        "0",
        "hello",
    ];
    let submit = job(&s, SUBMIT).output().unwrap();
    assert_eq!(
        submit.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&submit.stderr)
    );
    let j: Value = serde_json::from_slice(&submit.stdout).unwrap();
    let jid = id(&j["job"]);
    settled(&s, ALICE, "ws1", &jid);
    // The same key answers the same job.
    let again = job(&s, SUBMIT).output().unwrap();
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(id(&again["job"]), jid);

    // The token from a file, the URL from the client settings file.
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{ALICE}\n")).unwrap();
    let settings = dir.path().join("client.toml");
    std::fs::write(
        &settings,
        format!(
            "url = \"http://{}\"\ntoken_file = \"{}\"\n",
            s.addr,
            token.display()
        ),
    )
    .unwrap();
    let bare = |args: &[&str]| {
        let mut c = Command::new(BIN);
        c.arg("job")
            .args(args)
            .env_remove("AIRLOCK_URL")
            .env_remove("AIRLOCK_TOKEN")
            .env_remove("AIRLOCK_WORKSPACE")
            .env("HOME", "/nonexistent")
            .env_remove("XDG_CONFIG_HOME");
        c.output().unwrap()
    };
    let shown = bare(&[
        "show",
        &jid,
        "--workspace",
        "ws1",
        "--client-config",
        settings.to_str().unwrap(),
    ]);
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let v: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(v["job"]["state"], "passed");
    // The default settings file under XDG_CONFIG_HOME.
    std::fs::create_dir_all(dir.path().join("airlock")).unwrap();
    std::fs::copy(&settings, dir.path().join("airlock/client.toml")).unwrap();
    let listed = Command::new(BIN)
        .args([
            "job",
            "list",
            "--workspace",
            "ws1",
            "--state",
            "passed",
            "--label",
            "nightly",
        ])
        .env_remove("AIRLOCK_URL")
        .env_remove("AIRLOCK_TOKEN")
        .env("XDG_CONFIG_HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        listed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let v: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(id(&v["jobs"][0]), jid);
    // --url and --token-file beat the environment.
    let log = job(&s, &["log", &jid, "--token-file", token.to_str().unwrap()])
        .env("AIRLOCK_TOKEN", "not-a-token")
        .output()
        .unwrap();
    assert_eq!(
        log.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&log.stdout), "hello");
    let cancel = job(&s, &["cancel", &jid, "--workspace", "ws1"])
        .output()
        .unwrap();
    assert_eq!(cancel.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&cancel.stdout).unwrap();
    assert_eq!(
        v["job"]["state"], "passed",
        "a settled job is answered as it is"
    );
    let f = job(&s, &["follow", &jid]).output().unwrap();
    assert_eq!(f.status.code(), Some(0), "following a passed job exits 0");

    // Refusals, by the table.
    let code = |o: std::process::Output| {
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let missing = "job_0123456789abcdef0123456789abcdef";
    let (c, e) = code(
        job(&s, &["show", missing, "--workspace", "ws1"])
            .output()
            .unwrap(),
    );
    assert_eq!(c, Some(4), "{e}");
    let (c, e) = code(
        job(&s, &["list", "--workspace", "ws1", "--state", "finished"])
            .output()
            .unwrap(),
    );
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("state"), "{e}");
    let (c, e) = code(
        job(&s, &["list", "--workspace", "ws1"])
            .env("AIRLOCK_TOKEN", "wrong")
            .output()
            .unwrap(),
    );
    assert_eq!(c, Some(3), "{e}");
    let (c, e) = code(bare(&["list", "--workspace", "ws1"]));
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("AIRLOCK_TOKEN"), "{e}");
    let port = free_port();
    let (c, e) = code(
        job(
            &s,
            &["log", &jid, "--url", &format!("http://127.0.0.1:{port}")],
        )
        .output()
        .unwrap(),
    );
    assert_eq!(c, Some(7), "{e}");
    let (c, e) = code(
        job(
            &s,
            &[
                "submit",
                "--workspace",
                "ws1",
                "--rev",
                "nope",
                "--",
                "true",
            ],
        )
        .output()
        .unwrap(),
    );
    assert_eq!(
        c,
        Some(5),
        "an unknown revision is failed_precondition: {e}"
    );
}
