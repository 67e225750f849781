//! The daemon started in-process on the scripted fake runtime: the whole verification pipeline
//! (durable row, real staging, real source check, artifact, settle) classifies every kind of job
//! end without a Docker engine.

use crate::support::call;
use crate::support::git;
use airlock::config::Config;
use airlock::daemon::Daemon;
use airlock::sandbox::fake::FakeRuntime;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "in-process-token";

fn wait_settled(addr: &str, cid: &str, vid: &str) -> Value {
    let start = Instant::now();
    loop {
        let (_, v) = call(
            addr,
            Some(TOKEN),
            "integration.show",
            &json!({"workspace_id": "ws", "candidate_id": cid}),
        );
        let found = v["candidate"]["verifications"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["verification_id"] == vid)
            .cloned()
            .unwrap();
        if found["status"] != "running" {
            return found;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{found}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_in_process_daemon_on_the_fake_runtime_classifies_every_job_end() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "base\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "-b", "agent"]);
    std::fs::write(repo.join("app.txt"), "app\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "agent"]);
    let agent = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "main"]);
    let config = Config::parse(&format!(
        "listen = \"127.0.0.1:0\"\ncheckout_filesystem = \"directory\"\n\
         [workspaces.ws]\nrepo = \"{}\"\nmembers = {{ m = [\"view\", \"integrate\", \"verify\"] }}\n\
         [[tokens]]\nsha256 = \"{}\"\nmember_id = \"m\"\n",
        repo.display(),
        hex::encode(Sha256::digest(TOKEN.as_bytes()))
    ))
    .unwrap();
    let data = dir.path().join("data");
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let d = Daemon::start_with(config, &data, Arc::new(FakeRuntime::new()))
                .await
                .unwrap();
            let listener = d.bind().await.unwrap();
            addr_tx
                .send(listener.local_addr().unwrap().to_string())
                .unwrap();
            d.run(listener, async {
                let _ = stop_rx.await;
            })
            .await
        })
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let ok = |method: &str, body: Value| {
        let (st, v) = call(&addr, Some(TOKEN), method, &body);
        assert_eq!(st, 200, "{method}: {v}");
        v
    };
    let ev = ok(
        "evidence.record",
        json!({"workspace_id": "ws", "run_id": "r", "base_revision": base, "revision": agent,
               "idempotency_key": "e"}),
    );
    let sub = json!({"workspace_id": "ws", "run_id": "r",
                     "evidence_ref": ev["evidence"]["evidence_ref"], "retained_revision": agent});
    let c = ok(
        "integration.prepare",
        json!({"workspace_id": "ws", "submissions": [sub], "target_ref": "refs/heads/main",
               "expected_target_revision": base, "idempotency_key": "p"}),
    );
    let cid = c["candidate"]["candidate_id"].as_str().unwrap().to_string();
    let rev = c["candidate"]["candidate_revision"]
        .as_str()
        .unwrap()
        .to_string();
    let cases: [(&[&str], u64, &str, &str); 6] = [
        (&["true"], 60, "passed", ""),
        (&["fake-exit", "3", "boom"], 60, "failed", ""),
        (
            &["fake-write", "README", "changed\n"],
            60,
            "source_changed",
            "README",
        ),
        (&["fake-oom"], 60, "error", "out of memory"),
        (&["fake-hang"], 1, "timed_out", "timed out after 1 s"),
        (&["fake-fail", "engine gone"], 60, "error", "engine gone"),
    ];
    for (i, (argv, timeout, status, reason)) in cases.iter().enumerate() {
        let v = ok(
            "integration.verify",
            json!({"workspace_id": "ws", "candidate_id": cid, "candidate_revision": rev,
                   "argv": argv, "timeout_seconds": timeout, "idempotency_key": format!("v{i}")}),
        );
        let vid = v["candidate"]["verifications"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["verification_id"]
            .as_str()
            .unwrap()
            .to_string();
        let done = wait_settled(&addr, &cid, &vid);
        assert_eq!(done["status"], *status, "{argv:?}: {done}");
        assert!(
            done["error"].as_str().unwrap_or("").contains(reason),
            "{argv:?}: {done}"
        );
        if argv[0] == "fake-exit" {
            assert_eq!(done["exit_code"], 3);
            assert_eq!(done["output"], "boom");
        }
    }
    stop_tx.send(()).unwrap();
    assert_eq!(daemon.join().unwrap(), Ok(()), "no persistence failure");
}
