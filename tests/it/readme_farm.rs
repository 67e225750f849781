//! The README's farm quick start, as written: its workspace and webhook config, the manual's
//! Python receiver and its two shell commands, run against a real daemon on real Docker (with free
//! ports for the daemon and the receiver, and a real repository's path): the job's log streams
//! to stdout, the step exits 0, the list finds the job, and the receiver prints the verified
//! `job.settled` event.

use crate::support::markdown::{block, document};
use crate::support::*;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn the_readmes_farm_quick_start_runs_as_written() {
    if !crate::toolchain::built("toolchain") {
        return;
    }
    let readme = document("README.md");
    let config = block(&readme, "toml", "[workspaces.farm]");
    let receiver = block(&document("docs/jobs.md"), "python", "import hashlib");
    let steps = block(&readme, "sh", "airlock job submit");
    let secret = config
        .lines()
        .find_map(|l| l.strip_prefix("secret = \""))
        .and_then(|l| l.split('"').next())
        .expect("the example's secret")
        .to_string();

    // The farm's repository: a Makefile whose test target passes.
    let mut s = Server::start();
    let repo = s.dir.path().join("farm");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("Makefile"), "test:\n\t@echo all 3 tests passed\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let hook_port = free_port();
    let config = config
        .replace("/srv/repos/farm.git", &repo.display().to_string())
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{hook_port}"));
    std::fs::write(
        &s.config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n{}{config}",
            s.dir.path().join("data").display(),
            config_overrides(),
        ),
    )
    .unwrap();
    s.restart(None);

    // The receiver, as written.
    let script = s.dir.path().join("receiver.py");
    std::fs::write(&script, &receiver).unwrap();
    let mut rx = Command::new("python3")
        .arg(&script)
        .env("AIRLOCK_WEBHOOK_SECRET", &secret)
        .env("PORT", hook_port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, printed) = std::sync::mpsc::channel();
    let out = rx.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    wait_for(
        || std::net::TcpStream::connect(("127.0.0.1", hook_port)).is_ok(),
        "the receiver listens",
    );

    // The CI step, as written.
    let sh = s.dir.path().join("step.sh");
    std::fs::write(&sh, &steps).unwrap();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ran = Command::new("bash")
        .arg("-e")
        .arg(&sh)
        .env("PATH", path)
        .env("AIRLOCK_URL", format!("http://{}", s.addr))
        .env("AIRLOCK_TOKEN", "ci-token")
        .env("HOME", s.dir.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    let _ = rx.kill();
    let _ = rx.wait();
    let stdout = String::from_utf8_lossy(&ran.stdout).into_owned();
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(stdout.contains("all 3 tests passed\n"), "{stdout}");
    assert!(
        stdout.contains("[airlock: job settled: passed]"),
        "{stdout}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&stdout[stdout.find("\n{").expect("the list's JSON") + 1..]).unwrap();
    let job = &listed["jobs"][0];
    assert_eq!(job["state"], "passed");
    assert_eq!(job["labels"], serde_json::json!(["nightly"]));
    let job_id = job["job_id"].as_str().unwrap();
    let line = printed
        .recv_timeout(Duration::from_secs(60))
        .expect("the receiver printed the settled job");
    assert_eq!(line, format!("{job_id} passed"));
}
