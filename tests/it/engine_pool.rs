//! A pool of two real engines behind one daemon: the machine's own (its socket) and a second
//! dockerd over mutual TLS. Jobs go where a slot is free and the image id is the expected one;
//! every result names its engine.

use crate::delivery::{frozen, settled, verification, verify};
use crate::support::engine2::SecondEngine;
use crate::support::*;
use std::collections::BTreeSet;

const IMAGE: &str = "airlock/minimal:latest";

fn pool_config(engine: &SecondEngine, here_jobs: usize, there_jobs: usize) -> String {
    format!(
        "max_concurrent_verifications = 4\n\
         [[engines]]\nname = \"here\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = {here_jobs}\n{}",
        engine.config("there", there_jobs)
    )
}

/// Containers of a creation key on the second engine.
fn remote_containers(engine: &SecondEngine, key: &str) -> usize {
    engine
        .out(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=airlock.creation_key={key}"),
        ])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

#[test]
fn two_engines_with_one_slot_each_run_two_jobs_at_once_and_results_name_them() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let s = Server::start_with(&pool_config(&engine, 1, 1));
    let (cid, rev, _) = frozen(&s);
    let v1 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v1");
    let v2 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v2");
    // Both run at once, one on each engine: each engine's one slot holds one of them.
    let (mut k1, mut k2) = (String::new(), String::new());
    wait_for(
        || {
            k1 = verification(&s, &cid, &v1)["creation_key"]
                .as_str()
                .unwrap()
                .into();
            k2 = verification(&s, &cid, &v2)["creation_key"]
                .as_str()
                .unwrap()
                .into();
            let here = containers_with_key(&k1).len() + containers_with_key(&k2).len();
            let there = remote_containers(&engine, &k1) + remote_containers(&engine, &k2);
            here == 1 && there == 1
        },
        "one job on each engine",
    );
    // A third waits for a slot (visible in /metrics as unplaced) and runs once one frees.
    let v3 = verify(&s, &cid, &rev, &["true"], 60, "v3");
    wait_for(
        || {
            let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
            String::from_utf8_lossy(&body).contains("airlock_jobs_unplaced 1")
        },
        "the third job waiting for an engine",
    );
    let waiting = verification(&s, &cid, &v3);
    assert_eq!(waiting["status"], "running");
    // The verification itself says it waits and why: every engine's reason.
    wait_for(
        || verification(&s, &cid, &v3)["queued_reason"].is_string(),
        "the wait's reason in the verification",
    );
    let waiting = verification(&s, &cid, &v3);
    assert_eq!(waiting["queued"], true, "{waiting}");
    let why = waiting["queued_reason"].as_str().unwrap();
    assert!(
        why.contains("here: all 1 slots in use") && why.contains("there: all 1 slots in use"),
        "{why}"
    );
    // A running job names its engine before it settles; each engine counts its running job.
    for v in [&v1, &v2] {
        let row = verification(&s, &cid, v);
        assert!(row["engine"].is_string(), "{row}");
        assert!(row.get("queued_reason").is_none(), "{row}");
    }
    let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    let metrics = String::from_utf8_lossy(&body).into_owned();
    for line in [
        "airlock_engine_running_jobs{engine=\"here\"} 1",
        "airlock_engine_running_jobs{engine=\"there\"} 1",
        "airlock_engine_up{engine=\"there\"} 1",
        "airlock_engine_failures_total{engine=\"there\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    for v in [&v1, &v2] {
        s.ok(
            ALICE,
            "integration.cancel_verification",
            serde_json::json!({"workspace_id": "ws1", "candidate_id": cid, "verification_id": v}),
        );
    }
    let r3 = settled(&s, &cid, &v3);
    assert_eq!(r3["status"], "passed", "{r3}");
    assert_eq!(r3["queued"], false, "{r3}");
    assert!(r3.get("queued_reason").is_none(), "{r3}");
    let engines: BTreeSet<String> = [&v1, &v2]
        .iter()
        .map(|v| {
            verification(&s, &cid, v)["engine"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(engines, BTreeSet::from(["here".into(), "there".into()]));
    assert!(
        ["here", "there"].contains(&r3["engine"].as_str().unwrap()),
        "{r3}"
    );
    let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    let metrics = String::from_utf8_lossy(&body);
    assert!(
        metrics
            .contains("airlock_engine_verifications_total{engine=\"here\",status=\"cancelled\"} 1")
            || metrics.contains(
                "airlock_engine_verifications_total{engine=\"there\",status=\"cancelled\"} 1"
            ),
        "{metrics}"
    );
    // A pool with a tcp:// engine uploads every job's tree, so both engines received bytes;
    // the passed job's tree was read back from the engine it ran on (a cancelled job is not
    // checked, so nothing is read back for it).
    let counter = |name: String| -> Option<f64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str())?.trim().parse().ok())
    };
    for engine in ["here", "there"] {
        let up = counter(format!(
            "airlock_engine_upload_bytes_total{{engine=\"{engine}\"}}"
        ));
        assert!(
            up.is_some_and(|b| b > 0.0),
            "{engine} upload bytes: {metrics}"
        );
    }
    let ran_on = r3["engine"].as_str().unwrap();
    let back = counter(format!(
        "airlock_engine_readback_bytes_total{{engine=\"{ran_on}\"}}"
    ));
    let reads = counter(format!(
        "airlock_engine_readback_seconds_count{{engine=\"{ran_on}\"}}"
    ));
    assert!(
        back.is_some_and(|b| b > 0.0),
        "{ran_on} read-back bytes: {metrics}"
    );
    assert!(
        reads.is_some_and(|n| n >= 1.0),
        "{ran_on} read-backs: {metrics}"
    );
    // No job of either engine left a container, holder or volume on either engine (the
    // workspace goes right after the result is settled).
    let k3 = r3["creation_key"].as_str().unwrap().to_string();
    wait_for(
        || {
            let out = std::process::Command::new("docker")
                .args(["volume", "ls", "-q"])
                .output()
                .unwrap();
            let local = String::from_utf8_lossy(&out.stdout).into_owned();
            [&k1, &k2, &k3]
                .iter()
                .all(|k| !local.lines().any(|l| l == k.as_str()))
                && engine.leftovers() == (vec![], vec![])
        },
        "every workspace volume removed",
    );
}

/// An engine that lies about an image, listed first: its `airlock/minimal:latest` is a
/// lookalike (`FROM` the real one plus a label, so it inherits the content-hash label). Jobs
/// are resolved with the id Airlock built, never that engine's, and it takes none of them;
/// the reason is in the job, `/metrics`, the log and `airlock doctor`.
#[test]
fn an_engine_whose_image_id_differs_never_gets_a_job() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let built = docker_out(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
    let mut build = engine.docker(&["build", "-q", "-t", IMAGE, "-"]);
    build
        .env("DOCKER_BUILDKIT", "0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = build.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "FROM {IMAGE}\nLABEL airlock.test=lookalike").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lookalike = engine.out(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
    assert_ne!(lookalike, built);
    let content = "{{index .Config.Labels \"airlock.content_sha256\"}}";
    assert_eq!(
        engine.out(&["image", "inspect", "--format", content, IMAGE]),
        docker_out(&["image", "inspect", "--format", content, IMAGE]),
        "the lookalike carries the real image's content label"
    );
    // The lying engine is listed first.
    let mut s = Server::start_with(&format!(
        "max_concurrent_verifications = 4\n{}\
         [[engines]]\nname = \"here\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = 2\n",
        engine.config("there", 4)
    ));
    let log = s.dir.path().join("daemon.log");
    s.log = Some(log.clone());
    s.restart(None);
    let (cid, rev, _) = frozen(&s);
    let ids: Vec<String> = (0..3)
        .map(|i| verify(&s, &cid, &rev, &["true"], 60, &format!("k{i}")))
        .collect();
    for id in &ids {
        let r = settled(&s, &cid, id);
        assert_eq!(r["status"], "passed", "{r}");
        assert_eq!(r["engine"], "here", "{r}");
        assert_eq!(r["observed_image"], built.as_str(), "{r}");
    }
    let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    let metrics = String::from_utf8_lossy(&body).into_owned();
    for line in [
        "airlock_engine_image_mismatches{engine=\"there\"} 1",
        "airlock_engine_image_mismatches{engine=\"here\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("not the ones Airlock built") && text.contains(&lookalike),
        "{text}"
    );
    // With the machine's engine busy, a job waits out its timeout rather than run on the
    // other image, and settles error saying why.
    let busy = verify(&s, &cid, &rev, &["sleep", "60"], 120, "busy");
    let busy2 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "busy2");
    wait_for(
        || {
            [&busy, &busy2].iter().all(|v| {
                let key = verification(&s, &cid, v)["creation_key"]
                    .as_str()
                    .unwrap()
                    .to_string();
                !containers_with_key(&key).is_empty()
            })
        },
        "both slots of the machine's engine in use",
    );
    let id = verify(&s, &cid, &rev, &["true"], 2, "waits");
    let r = settled(&s, &cid, &id);
    assert_eq!(r["status"], "error", "{r}");
    let why = r["error"].as_str().unwrap();
    assert!(why.starts_with("not placed on an engine:"), "{why}");
    assert!(why.contains("here: all 2 slots in use"), "{why}");
    assert!(
        why.contains(&format!(
            "there: image airlock/minimal:latest is {lookalike}, not the built {built}"
        )),
        "{why}"
    );
    assert!(r["engine"].is_null(), "{r}");
    for v in [&busy, &busy2] {
        s.ok(
            ALICE,
            "integration.cancel_verification",
            serde_json::json!({"workspace_id": "ws1", "candidate_id": cid, "verification_id": v}),
        );
    }
    let (containers, volumes) = engine.leftovers();
    assert_eq!(volumes, Vec::<String>::new());
    assert_eq!(
        containers,
        Vec::<String>::new(),
        "no job container was ever made there"
    );
    // doctor names the engine, the image, both ids and what it means.
    let out = std::process::Command::new(BIN)
        .args(["doctor", "--json", "--config"])
        .arg(&s.config)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "engines")
        .cloned()
        .unwrap();
    assert_eq!(check["ok"], false, "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("there: ")
            && detail.contains(&format!("{IMAGE} is {lookalike}, built as {built}")),
        "{detail}"
    );
    // Its tag names the built image again (loaded anew): it is back within a check.
    engine.load(IMAGE);
    wait_for(
        || {
            let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
            String::from_utf8_lossy(&body)
                .contains("airlock_engine_image_mismatches{engine=\"there\"} 0")
        },
        "the engine's images match again",
    );
}

/// A profile's `engine_labels` keep its jobs on engines that carry them, and the environment
/// hash is the same wherever a job lands.
#[test]
fn a_profile_that_requires_a_label_runs_only_where_it_is_carried() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let f = Fixture::new(&[("README", "hello\n", false)]).with_config(&format!(
        "{}labels = [\"isolated\"]\n\
         [profiles.isolated]\nimage = \"{IMAGE}\"\nengine_labels = [\"isolated\"]\n",
        pool_config(&engine, 4, 4)
    ));
    for _ in 0..3 {
        let v = f
            .run(&["--profile", "isolated"], &["cat", "README"])
            .json
            .unwrap();
        assert_eq!(v["status"], "passed", "{v}");
        assert_eq!(v["engine"], "there", "{v}");
        assert_eq!(v["output"], "hello\n");
    }
}

#[test]
fn a_job_submitted_over_http_runs_on_the_second_engine_and_its_log_streams_from_there() {
    if !docker() {
        return;
    }
    use serde_json::json;
    use std::io::{Read, Write};
    let engine = SecondEngine::start(&[IMAGE]);
    let s = Server::start_with(&format!(
        "max_concurrent_verifications = 2\n{}",
        engine.config("there", 2)
    ));
    let j = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "labels": ["remote"],
               "argv": ["sh", "-c", "cat README; sleep 4; echo end"], "idempotency_key": "r1"}),
    )["job"]
        .clone();
    let id = j["job_id"].as_str().unwrap().to_string();
    let show = || {
        s.ok(
            ALICE,
            "job.show",
            json!({"workspace_id": "ws1", "job_id": id}),
        )["job"]
            .clone()
    };
    wait_for(|| show()["state"] == "running", "the job runs");
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        c,
        "GET /api/v1/jobs/{id}/log?follow=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("base\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        show()["state"],
        "running",
        "the first line came while it ran"
    );
    let key = j["verification"]["creation_key"].as_str().unwrap();
    assert_eq!(
        remote_containers(&engine, key),
        1,
        "it runs on the second engine"
    );
    assert!(containers_with_key(key).is_empty());
    let _ = c.read_to_end(&mut seen);
    let text = chunked_body(&seen);
    assert!(
        text.ends_with("base\nend\n\n[airlock: job settled: passed]\n"),
        "{text}"
    );
    let done = show();
    assert_eq!(done["verification"]["engine"], "there");
    assert_eq!(done["verification"]["status"], "passed");
    assert_eq!(remote_containers(&engine, key), 0);
}

/// A job's state and record once it is no longer queued or running (within `within`).
fn job_settled(s: &Server, id: &str, within: std::time::Duration) -> serde_json::Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let j = s.ok(
            ALICE,
            "job.show",
            serde_json::json!({"workspace_id": "ws1", "job_id": id}),
        )["job"]
            .clone();
        if !matches!(j["state"].as_str(), Some("queued" | "running")) {
            return j;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not settled within {within:?}: {j}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The remote engine hangs (SIGSTOP) mid-job: the job still settles on Airlock's clock (its
/// timeout, then the engine's short while to confirm the kill), as `error` naming the engine,
/// never `timed_out` and never a pass; a submission meanwhile answers at once; and once the
/// engine answers again its container is removed. Then the engine is stopped for good: a
/// submission to a pool whose only engine is down queues and settles `error` saying why,
/// never a 500.
#[test]
fn a_hung_engine_cannot_stretch_a_deadline_or_hold_up_a_submission() {
    if !docker() {
        return;
    }
    use serde_json::json;
    use std::time::{Duration, Instant};
    let mut engine = SecondEngine::start(&[IMAGE]);
    let s = Server::start_with(&format!(
        "maintenance_interval_seconds = 2\nmax_concurrent_verifications = 4\n{}",
        engine.config("there", 2)
    ));
    let submit = |key: &str, argv: &[&str], timeout: u64| {
        s.call(
            ALICE,
            "job.submit",
            json!({"workspace_id": "ws1", "revision": "main", "argv": argv,
                   "timeout_seconds": timeout, "idempotency_key": key}),
        )
    };
    const TIMEOUT: u64 = 15;
    let (status, j) = submit("h1", &["sh", "-c", "echo up; sleep 300"], TIMEOUT);
    assert_eq!(status, 200, "{j}");
    let id = j["job"]["job_id"].as_str().unwrap().to_string();
    let key = j["job"]["verification"]["creation_key"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(
        || remote_containers(&engine, &key) == 1,
        "the job's container running on the engine",
    );
    engine.hang();
    let hung_at = Instant::now();
    // A submission while the engine hangs is answered without asking it anything.
    let asked = Instant::now();
    let (status, v) = submit("h2", &["true"], 5);
    assert_eq!(status, 200, "{v}");
    assert!(
        asked.elapsed() < airlock::limits::ENGINE_CALL_TIMEOUT,
        "the submission waited on the engine: {:?}",
        asked.elapsed()
    );
    let queued = v["job"]["job_id"].as_str().unwrap().to_string();
    // The running job settles by its deadline plus the kill's bound, not when the engine
    // comes back (generous slack for a loaded machine, far below the engine's call bounds).
    let r = job_settled(&s, &id, Duration::from_secs(TIMEOUT + 60));
    let settled_after = hung_at.elapsed();
    assert_eq!(r["state"], "error", "{r}");
    let why = r["verification"]["error"].as_str().unwrap();
    assert!(why.contains("engine there stopped answering"), "{why}");
    assert!(
        settled_after < Duration::from_secs(TIMEOUT) + airlock::limits::ENGINE_KILL_TIMEOUT * 3,
        "settled {settled_after:?} after the engine hung"
    );
    assert_eq!(r["verification"]["engine"], "there", "{r}");
    // The submission made while it hung settles too, naming the engine, never passing.
    let r2 = job_settled(&s, &queued, Duration::from_secs(120));
    assert_eq!(r2["state"], "error", "{r2}");
    assert!(
        r2["verification"]["error"]
            .as_str()
            .unwrap()
            .contains("there"),
        "{r2}"
    );
    let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    let metrics = String::from_utf8_lossy(&body).into_owned();
    assert!(
        metrics.contains("airlock_engine_up{engine=\"there\"} 0"),
        "{metrics}"
    );
    // Back: the job's container is removed by the next recovery pass that reaches it.
    engine.unhang();
    let deadline = Instant::now() + Duration::from_secs(120);
    while remote_containers(&engine, &key) != 0 {
        assert!(Instant::now() < deadline, "the container was left behind");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Stopped for good: once the pool has seen it go, a submission queues and settles error
    // naming the engine's state.
    engine.kill();
    wait_for(
        || {
            let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
            String::from_utf8_lossy(&body).contains("airlock_engine_up{engine=\"there\"} 0")
        },
        "the pool sees the engine gone",
    );
    let (status, v) = submit("h3", &["true"], 3);
    assert_eq!(status, 200, "never a 500 for a down engine: {v}");
    let r3 = job_settled(
        &s,
        v["job"]["job_id"].as_str().unwrap(),
        Duration::from_secs(120),
    );
    assert_eq!(r3["state"], "error", "{r3}");
    let why = r3["verification"]["error"].as_str().unwrap();
    assert!(
        why.starts_with("not placed on an engine:") && why.contains("there: unreachable"),
        "{why}"
    );
}
