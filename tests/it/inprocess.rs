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

/// A repository with a base commit on main and an agent commit, and a config for it.
fn repo_with_agent() -> (tempfile::TempDir, String, String, Config) {
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
    (dir, base, agent, config)
}

#[test]
fn an_in_process_daemon_on_the_fake_runtime_classifies_every_job_end() {
    let (dir, base, agent, config) = repo_with_agent();
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

/// A daemon in-process on the fake runtime with `admission`: its address, the sender that stops
/// it, and the thread that answers how it ended.
#[allow(clippy::type_complexity)]
fn with_admission(
    config: Config,
    data: std::path::PathBuf,
    admission: airlock::engine::service::AdmissionFn,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<Result<(), String>>,
) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let d = Daemon::start_with_admission(
                config,
                &data,
                Arc::new(FakeRuntime::new()),
                admission,
            )
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
    (addr, stop_tx, daemon)
}

/// What the recording admission policy saw, in order.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    operation: &'static str,
    mutation: bool,
    new_candidate: bool,
    candidate_state: String,
    submissions: usize,
}

#[test]
fn the_admission_seam_sees_the_candidate_and_admits_verification_steps_separately() {
    use airlock::engine::service::{Admission, AdmissionFn, Admitted, ServiceError};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (dir, base, agent, config) = repo_with_agent();

    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let admitted = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(AtomicUsize::new(0));
    let refuse_start = Arc::new(AtomicBool::new(false));
    let admission: AdmissionFn = {
        let (seen, admitted, released, refuse_start) = (
            seen.clone(),
            admitted.clone(),
            released.clone(),
            refuse_start.clone(),
        );
        Arc::new(move |a: &Admission| {
            seen.lock().unwrap().push(Seen {
                operation: a.operation.as_str(),
                mutation: a.mutation,
                new_candidate: a.new_candidate,
                candidate_state: a.candidate.state.as_str().to_string(),
                submissions: a.submissions.len(),
            });
            if refuse_start.load(Ordering::SeqCst)
                && a.operation.as_str() == "integration.verify/start"
            {
                return Err(ServiceError::FailedPrecondition(
                    "the mission is paused".into(),
                ));
            }
            admitted.fetch_add(1, Ordering::SeqCst);
            let released = released.clone();
            Ok(Admitted::with_release(move || {
                released.fetch_add(1, Ordering::SeqCst);
            }))
        })
    };
    let (addr, stop_tx, daemon) = with_admission(config, dir.path().join("data"), admission);
    let ok = |method: &str, body: Value| {
        let (st, v) = call(&addr, Some(TOKEN), method, &body);
        assert_eq!(st, 200, "{method}: {v}");
        v
    };
    let take = || std::mem::take(&mut *seen.lock().unwrap());
    let ev = ok(
        "evidence.record",
        json!({"workspace_id": "ws", "run_id": "r", "base_revision": base, "revision": agent,
               "idempotency_key": "e"}),
    );
    assert_eq!(take(), vec![], "evidence is not a candidate operation");
    let sub = json!({"workspace_id": "ws", "run_id": "r",
                     "evidence_ref": ev["evidence"]["evidence_ref"], "retained_revision": agent});
    let prepare = json!({"workspace_id": "ws", "submissions": [sub], "target_ref": "refs/heads/main",
                         "expected_target_revision": base, "idempotency_key": "p"});
    let c = ok("integration.prepare", prepare.clone());
    let seen_prepare = |new_candidate, state: &str| Seen {
        operation: "integration.prepare",
        mutation: true,
        new_candidate,
        candidate_state: state.into(),
        submissions: 1,
    };
    // Before the first durable write: the new candidate, still `preparing`.
    assert_eq!(take(), vec![seen_prepare(true, "preparing")]);
    ok("integration.prepare", prepare);
    assert_eq!(
        take(),
        vec![seen_prepare(false, "frozen")],
        "a replay is admitted as such"
    );
    let cid = c["candidate"]["candidate_id"].as_str().unwrap().to_string();
    let rev = c["candidate"]["candidate_revision"]
        .as_str()
        .unwrap()
        .to_string();

    let verify = |argv: &[&str], timeout: u64, key: &str| {
        let v = ok(
            "integration.verify",
            json!({"workspace_id": "ws", "candidate_id": cid, "candidate_revision": rev,
                   "argv": argv, "timeout_seconds": timeout, "idempotency_key": key}),
        );
        v["candidate"]["verifications"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["verification_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Queueing, creation and start are admitted separately, in that order; nothing admitted is
    // held while the command runs.
    let vid = verify(&["fake-hang"], 3, "v-hang");
    let start = Instant::now();
    while seen.lock().unwrap().len() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    while released.load(Ordering::SeqCst) < admitted.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "an admission is still held"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_, shown) = call(
        &addr,
        Some(TOKEN),
        "integration.show",
        &json!({"workspace_id": "ws", "candidate_id": cid}),
    );
    let running = shown["candidate"]["verifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["verification_id"] == vid)
        .unwrap()
        .clone();
    assert_eq!(
        running["status"], "running",
        "every admission was released while the command still runs: {running}"
    );
    let ops: Vec<&str> = take().iter().map(|s| s.operation).collect();
    assert_eq!(
        ops,
        [
            "integration.verify",
            "integration.verify/create",
            "integration.verify/start"
        ]
    );
    assert_eq!(wait_settled(&addr, &cid, &vid)["status"], "timed_out");

    // A refused start ends the verification as `error` with the policy's reason; nothing ran.
    refuse_start.store(true, Ordering::SeqCst);
    let vid = verify(&["fake-exit", "0", "must not run"], 60, "v-refused");
    let done = wait_settled(&addr, &cid, &vid);
    assert_eq!(done["status"], "error", "{done}");
    let reason = done["error"].as_str().unwrap();
    assert!(
        reason.contains("container start refused") && reason.contains("the mission is paused"),
        "{done}"
    );
    assert_ne!(done["output"], "must not run", "{done}");
    refuse_start.store(false, Ordering::SeqCst);
    take();

    // Reads that ask are admitted as reads.
    ok(
        "integration.patch",
        json!({"workspace_id": "ws", "candidate_id": cid}),
    );
    let seen_patch = take();
    assert_eq!(seen_patch.len(), 1);
    assert_eq!(
        (seen_patch[0].operation, seen_patch[0].mutation),
        ("integration.patch", false)
    );
    assert_eq!(
        released.load(Ordering::SeqCst),
        admitted.load(Ordering::SeqCst)
    );

    stop_tx.send(()).unwrap();
    assert_eq!(daemon.join().unwrap(), Ok(()));
}

/// Seed 001: the mission adapter freezes the mission's accepted-set version into the candidate
/// at prepare. The embedding server's policy decides it; Airlock stores it once and shows it.
#[test]
fn the_admission_policy_freezes_the_missions_accepted_set_version_at_prepare() {
    use airlock::engine::service::{Admission, AdmissionFn, Admitted};
    use std::sync::Mutex;
    let (dir, base, agent, config) = repo_with_agent();
    // (operation, new candidate, mission, version the candidate carried when admitted)
    type Seen = (&'static str, bool, Option<String>, Option<u64>);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let admission: AdmissionFn = {
        let seen = seen.clone();
        Arc::new(move |a: &Admission| {
            seen.lock().unwrap().push((
                a.operation.as_str(),
                a.new_candidate,
                a.mission_id.map(str::to_string),
                a.candidate.mission_accepted_set_version,
            ));
            // It offers a version on every call: only a new candidate's prepare takes it.
            let version = if a.new_candidate { 7 } else { 9 };
            Ok(Admitted::unconditional().freezing_accepted_set_version(version))
        })
    };
    let (addr, stop_tx, daemon) = with_admission(config, dir.path().join("data"), admission);
    let call_ok = |method: &str, body: Value| {
        let (st, v) = call(&addr, Some(TOKEN), method, &body);
        assert_eq!(st, 200, "{method}: {v}");
        v
    };
    let ev = call_ok(
        "evidence.record",
        json!({"workspace_id": "ws", "run_id": "r", "base_revision": base, "revision": agent,
               "idempotency_key": "e"}),
    );
    let sub = json!({"workspace_id": "ws", "run_id": "r",
                     "evidence_ref": ev["evidence"]["evidence_ref"], "retained_revision": agent});
    let prepare = |mission: &str, key: &str| {
        json!({"workspace_id": "ws", "submissions": [sub], "target_ref": "refs/heads/main",
               "expected_target_revision": base, "mission_id": mission, "idempotency_key": key})
    };
    // A mission id that is not an identifier is refused before the policy is asked.
    let (st, v) = call(
        &addr,
        Some(TOKEN),
        "integration.prepare",
        &prepare("../m", "bad"),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mission_id"),
        "{v}"
    );
    assert!(seen.lock().unwrap().is_empty());

    let c = call_ok("integration.prepare", prepare("m1", "p"))["candidate"].clone();
    assert_eq!(c["mission_id"], "m1", "{c}");
    assert_eq!(c["mission_accepted_set_version"], 7, "{c}");
    let replay = call_ok("integration.prepare", prepare("m1", "p"))["candidate"].clone();
    assert_eq!(
        replay["mission_accepted_set_version"], 7,
        "frozen: {replay}"
    );
    let shown = call_ok(
        "integration.show",
        json!({"workspace_id": "ws", "candidate_id": c["candidate_id"]}),
    )["candidate"]
        .clone();
    assert_eq!(shown["mission_accepted_set_version"], 7, "{shown}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[..2],
        [
            ("integration.prepare", true, Some("m1".into()), None),
            ("integration.prepare", false, Some("m1".into()), Some(7)),
        ],
        "{seen:?}"
    );
    stop_tx.send(()).unwrap();
    assert_eq!(daemon.join().unwrap(), Ok(()));
}

#[test]
fn a_governed_worktree_is_checked_at_start_up() {
    use airlock::daemon::StartError;
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    git(&tree, &["init", "-q", "-b", "main"]);
    std::fs::create_dir(tree.join("sub")).unwrap();
    let start = |worktree: &std::path::Path, data: &std::path::Path| {
        let config = Config::parse(&format!(
            "checkout_filesystem = \"directory\"\n[workspaces.g]\nworktree = \"{}\"\n",
            worktree.display()
        ))
        .unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(Daemon::start_with(
            config,
            data,
            Arc::new(FakeRuntime::new()),
        ))
        .map(|_| ())
    };
    start(&tree, &dir.path().join("data")).unwrap();
    for (worktree, data, needle) in [
        (tree.join("sub"), dir.path().join("data2"), "not its top"),
        (
            tree.clone(),
            tree.join("airlock-data"),
            "must not contain each other",
        ),
    ] {
        match start(&worktree, &data) {
            Err(StartError::Refused(m)) => {
                assert!(
                    m.contains("workspaces.g.worktree") && m.contains(needle),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
