//! `job.*` over real HTTP on real Docker: submit a revision, show, list, cancel, follow the log
//! live, fair queues across workspaces, the queue bound, and what a run token may do. `airlock run --follow` prints the output as it arrives.

use crate::support::jobs::{id, settled, show, submit};
use crate::support::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::Duration;

/// A run token of ws2 (extra config), so two workspaces can submit.
const RUN_B: &str = "run-b-token-ws2";

fn run_b_token() -> String {
    format!(
        "[[tokens]]\nsha256 = \"{}\"\nrun_id = \"run_b\"\nworkspace_id = \"ws2\"\n",
        sha(RUN_B)
    )
}

/// Rewrites ws1's section of the config with `keys` (replacing the last call's) and restarts
/// the daemon.
fn with_ws1(s: &mut Server, keys: &str) {
    const BEGIN: &str = "# test keys\n";
    const END: &str = "# end of test keys\n";
    let mut text = std::fs::read_to_string(&s.config).unwrap();
    if let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) {
        text.replace_range(a..b + END.len(), "");
    }
    let text = text.replacen(
        "[workspaces.ws1]\n",
        &format!("[workspaces.ws1]\n{BEGIN}{keys}\n{END}"),
        1,
    );
    std::fs::write(&s.config, text).unwrap();
    s.restart(None);
}

/// Opens `GET /api/v1/jobs/<id>/log?follow=1` and returns the stream after the headers.
fn follow(s: &Server, token: &str, job: &str) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        c,
        "GET /api/v1/jobs/{job}/log?follow=1 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        s.addr
    )
    .unwrap();
    c
}

/// Reads from `c` until `needle` has arrived (or the stream ends); returns what was read.
fn read_until(c: &mut std::net::TcpStream, seen: &mut Vec<u8>, needle: &str) -> bool {
    let mut buf = [0u8; 8192];
    loop {
        if String::from_utf8_lossy(seen).contains(needle) {
            return true;
        }
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn jobs_are_submitted_shown_listed_and_cancelled_and_bad_input_changes_nothing() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let head = s.head();
    let j = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["cat", "README"],
               "labels": ["ci", "matrix:1", "ci"], "idempotency_key": "k1"}),
    )["job"]
        .clone();
    assert!(
        matches!(j["state"].as_str(), Some("queued" | "running")),
        "{j}"
    );
    assert_eq!(j["labels"], json!(["ci", "matrix:1"]));
    assert_eq!(j["revision"], "main");
    assert_eq!(j["verification"]["candidate_revision"], head.as_str());
    let done = settled(&s, ALICE, "ws1", &id(&j));
    assert_eq!(done["state"], "passed", "{done}");
    assert_eq!(done["verification"]["output"], "base\n");
    assert!(done["started_at"].is_string());
    assert_eq!(done["verification"]["engine"], "local");
    for phase in ["wait_for_engine_ms", "stage_ms", "run_ms", "check_ms"] {
        assert!(done["phases"][phase].is_u64(), "{phase}: {done}");
    }
    assert_eq!(
        done["phases"]["run_ms"],
        done["verification"]["duration_ms"]
    );
    assert!(
        j.get("phases").is_none(),
        "no phases before it settles: {j}"
    );
    // The same key and call answers the same job; the key with other parameters conflicts.
    let again = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["cat", "README"],
               "labels": ["matrix:1", "ci"], "idempotency_key": "k1"}),
    );
    assert_eq!(again["job"]["job_id"], j["job_id"]);
    s.err(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["true"], "idempotency_key": "k1"}),
        "conflict",
    );
    // The log of a settled job is its retained output.
    let log = s.ok(
        ALICE,
        "job.log",
        json!({"workspace_id": "ws1", "job_id": id(&j)}),
    );
    assert_eq!(
        (log["log"].clone(), log["complete"].clone()),
        (json!("base\n"), json!(true))
    );
    let (status, body) = http::request(
        &s.addr,
        "GET",
        &format!("/api/v1/jobs/{}/log", id(&j)),
        Some(ALICE),
        b"",
    )
    .unwrap();
    assert_eq!(
        (status, String::from_utf8_lossy(&body).into_owned()),
        (200, "base\n".into())
    );

    // Cancel destroys the container and settles cancelled, never passed.
    let long = submit(&s, ALICE, "ws1", &["sleep", "60"], "k2");
    wait_for(
        || show(&s, ALICE, "ws1", &id(&long))["state"] == "running",
        "the long job runs",
    );
    let key = long["verification"]["creation_key"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(
        || !containers_with_key(&key).is_empty(),
        "its container exists",
    );
    let c = s.ok(
        ALICE,
        "job.cancel",
        json!({"workspace_id": "ws1", "job_id": id(&long)}),
    )["job"]
        .clone();
    assert_eq!(c["state"], "cancelled", "{c}");
    assert_eq!(c["verification"]["status"], "cancelled");
    assert!(containers_with_key(&key).is_empty());
    // Cancelling a settled job answers it as it is.
    let c2 = s.ok(
        ALICE,
        "job.cancel",
        json!({"workspace_id": "ws1", "job_id": id(&j)}),
    );
    assert_eq!(c2["job"]["state"], "passed");

    // Listing: newest first, by state, by labels, a page at a time.
    let list = |body: Value| s.ok(BOB, "job.list", body);
    let all = list(json!({"workspace_id": "ws1"}));
    let ids: Vec<_> = all["jobs"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(ids, vec![id(&long), id(&j)]);
    let passed = list(json!({"workspace_id": "ws1", "state": "passed"}));
    assert_eq!(passed["jobs"].as_array().unwrap().len(), 1);
    let ci = list(json!({"workspace_id": "ws1", "labels": ["ci"]}));
    assert_eq!(ci["jobs"][0]["job_id"], j["job_id"]);
    assert_eq!(ci["jobs"].as_array().unwrap().len(), 1);
    let none = list(json!({"workspace_id": "ws1", "labels": ["ci", "nope"]}));
    assert!(none["jobs"].as_array().unwrap().is_empty());
    let page = list(json!({"workspace_id": "ws1", "limit": 1}));
    assert_eq!(page["jobs"][0]["job_id"], long["job_id"]);
    let next = list(json!({"workspace_id": "ws1", "limit": 1, "cursor": page["next_cursor"]}));
    assert_eq!(next["jobs"][0]["job_id"], j["job_id"]);

    // Bad input names the field and changes nothing.
    let refused = |token: &str, body: Value, code: &str, field: &str| {
        let (status, v) = s.call(token, "job.submit", body);
        assert_ne!(status, 200, "{v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(v["error"]["field"], field, "{v}");
    };
    let base = |extra: Value| {
        let mut b = json!({"workspace_id": "ws1", "revision": "main", "argv": ["true"],
                           "idempotency_key": "bad"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    refused(
        ALICE,
        base(json!({"revision": "no-such-branch"})),
        "failed_precondition",
        "revision",
    );
    // The refusal names the workspace, never the repository's path on the daemon's host.
    let message = s.err(
        ALICE,
        "job.submit",
        base(json!({"revision": "no-such-branch"})),
        "failed_precondition",
    );
    assert!(message.contains("workspace \"ws1\""), "{message}");
    let host_path = s.repo.display().to_string();
    assert!(
        !message.contains(&host_path) && !message.contains(".git"),
        "{message}"
    );
    refused(
        ALICE,
        base(json!({"revision": ""})),
        "failed_precondition",
        "revision",
    );
    refused(ALICE, base(json!({"argv": []})), "invalid_argument", "argv");
    refused(
        ALICE,
        base(json!({"timeout_seconds": 0})),
        "invalid_argument",
        "timeout_seconds",
    );
    refused(
        ALICE,
        base(json!({"profile": "toolchain"})),
        "invalid_argument",
        "profile",
    );
    refused(
        ALICE,
        base(json!({"labels": ["has space"]})),
        "invalid_argument",
        "labels[0]",
    );
    let many: Vec<String> = (0..17).map(|i| format!("l{i}")).collect();
    refused(
        ALICE,
        base(json!({"labels": many})),
        "invalid_argument",
        "labels",
    );
    refused(
        ALICE,
        base(json!({"labels": ["x".repeat(65)]})),
        "invalid_argument",
        "labels[0]",
    );
    s.err(BOB, "job.submit", base(json!({})), "permission_denied");
    s.err(
        CAROL,
        "job.show",
        json!({"workspace_id": "ws1", "job_id": id(&j)}),
        "permission_denied",
    );
    s.err(
        CAROL,
        "job.show",
        json!({"workspace_id": "ws2", "job_id": id(&j)}),
        "not_found",
    );
    s.err(
        ALICE,
        "job.show",
        json!({"workspace_id": "ws1", "job_id": "job_x"}),
        "invalid_argument",
    );
    s.err(
        ALICE,
        "job.list",
        json!({"workspace_id": "ws1", "limit": 0}),
        "invalid_argument",
    );
    s.err(
        ALICE,
        "job.list",
        json!({"workspace_id": "ws1", "cursor": "zzz"}),
        "invalid_argument",
    );
    s.err(
        ALICE,
        "job.list",
        json!({"workspace_id": "ws1", "state": "nope"}),
        "invalid_argument",
    );
    s.err(
        ALICE,
        "job.log",
        json!({"workspace_id": "ws1", "job_id": id(&j), "follow": true}),
        "invalid_argument",
    );
    // Another workspace's member cannot read the log, nor tell a real job from a made-up id:
    // both answer the same 404, naming no workspace.
    let fake = "job_0123456789abcdef0123456789abcdef";
    let outsider = |job: &str| {
        let (status, body) = http::request(
            &s.addr,
            "GET",
            &format!("/api/v1/jobs/{job}/log"),
            Some(CAROL),
            b"",
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        (
            status,
            v["error"]["code"].clone(),
            v["error"]["message"].clone(),
        )
    };
    let (real, made_up) = (outsider(&id(&j)), outsider(fake));
    assert_eq!(real.0, 404, "{real:?}");
    assert_eq!((real.0, &real.1), (made_up.0, &made_up.1));
    assert_eq!(
        real.2.as_str().unwrap().replace(&id(&j), "ID"),
        made_up.2.as_str().unwrap().replace(fake, "ID"),
        "the same message"
    );
    assert!(!real.2.as_str().unwrap().contains("ws1"), "{real:?}");
    let (status, _) = http::request(
        &s.addr,
        "GET",
        "/api/v1/jobs/job_nope/log",
        Some(ALICE),
        b"",
    )
    .unwrap();
    assert_eq!(status, 404);
    assert_eq!(
        list(json!({"workspace_id": "ws1"}))["jobs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // A run token submits and cancels in its own workspace, and nowhere else.
    let r = submit(&s, RUN_A, "ws1", &["true"], "run-k");
    assert_eq!(settled(&s, RUN_A, "ws1", &id(&r))["state"], "passed");
    s.err(
        RUN_A,
        "job.submit",
        json!({"workspace_id": "ws2", "revision": "main", "argv": ["true"], "idempotency_key": "x"}),
        "permission_denied",
    );
}

#[test]
fn a_follower_sees_output_while_the_job_runs_and_one_that_never_reads_does_not_stall_it() {
    if !docker() {
        return;
    }
    // The keep-alive idle timer at its shortest: every follow below outlives it several times
    // over, so a stream cut by it (rather than ended by its job) fails here.
    let s = Server::start_with("keep_alive_idle_seconds = 1\n");
    let j = submit(
        &s,
        ALICE,
        "ws1",
        &[
            "sh",
            "-c",
            "echo start; for i in 1 2 3 4 5; do sleep 1; echo tick $i; done; sleep 2; echo end",
        ],
        "f1",
    );
    wait_for(
        || show(&s, ALICE, "ws1", &id(&j))["state"] == "running",
        "the job runs",
    );
    let mut c = follow(&s, ALICE, &id(&j));
    let mut seen = Vec::new();
    assert!(
        read_until(&mut c, &mut seen, "start\n"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    assert_eq!(
        show(&s, ALICE, "ws1", &id(&j))["state"],
        "running",
        "the first line arrived while the job still runs"
    );
    assert!(!String::from_utf8_lossy(&seen).contains("end\n"));
    assert!(read_until(
        &mut c,
        &mut seen,
        "[airlock: job settled: passed]"
    ));
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        chunked_body(&seen).contains(
            "start\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\nend\n\n[airlock: job settled: passed]\n"
        ),
        "every line and the settle line, past the idle timer: {text}"
    );
    assert!(
        seen.ends_with(b"\r\n0\r\n\r\n"),
        "the chunked body ends with its terminating chunk: {text}"
    );
    assert!(
        text.contains("200 OK") && text.contains("text/plain"),
        "{text}"
    );

    // A follower that never reads: the job writes 100 MB and settles all the same.
    let big = submit(
        &s,
        ALICE,
        "ws1",
        &[
            "sh",
            "-c",
            "sleep 2; head -c 100000000 /dev/zero | tr '\\0' x; echo; echo done",
        ],
        "f2",
    );
    wait_for(
        || show(&s, ALICE, "ws1", &id(&big))["state"] == "running",
        "the big job runs",
    );
    let mut stalled = follow(&s, ALICE, &id(&big));
    let done = settled(&s, ALICE, "ws1", &id(&big));
    // Idle well past the keep-alive timer before reading anything.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(done["state"], "passed", "{done}");
    assert_eq!(done["verification"]["output_bytes_total"], 100_000_006);
    assert_eq!(done["verification"]["output_truncated"], true);
    // Read at last: it was dropped with a note, not waited for.
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.contains("fell") && rest.contains("dropped"),
        "{}",
        &rest[rest.len().saturating_sub(300)..]
    );
    // Following a settled job gives its retained log and the closing line at once.
    let mut after = follow(&s, ALICE, &id(&j));
    let mut seen = Vec::new();
    assert!(read_until(
        &mut after,
        &mut seen,
        "[airlock: job settled: passed]"
    ));
}

#[test]
fn a_stopping_daemon_ends_its_followers_first_and_then_cancels_the_job() {
    if !docker() {
        return;
    }
    let mut s = Server::start();
    let j = submit(&s, ALICE, "ws1", &["sh", "-c", "echo up; sleep 120"], "s1");
    wait_for(
        || show(&s, ALICE, "ws1", &id(&j))["state"] == "running",
        "the job runs",
    );
    let mut c = follow(&s, ALICE, &id(&j));
    let mut seen = Vec::new();
    assert!(read_until(&mut c, &mut seen, "up\n"));
    assert_eq!(s.stop(), Some(0));
    let _ = c.read_to_end(&mut seen);
    let text = chunked_body(&seen);
    assert!(
        text.ends_with("up\n\n[airlock: the daemon is stopping; this follow ends here]\n"),
        "the follower was told, rather than holding the drain open: {text}"
    );
    s.restart(None);
    assert_eq!(show(&s, ALICE, "ws1", &id(&j))["state"], "cancelled");
}

#[test]
fn one_busy_workspace_cannot_starve_another_and_its_queue_is_bounded() {
    if !docker() {
        return;
    }
    let extra = format!("max_concurrent_verifications = 1\n{}", run_b_token());
    let mut s = Server::start_with(&extra);
    with_ws1(&mut s, "max_queued_jobs = 60");
    // ws1 fills the one slot and queues 49 more.
    let first = submit(&s, ALICE, "ws1", &["sleep", "3"], "busy-0");
    let mut busy = vec![id(&first)];
    for i in 1..50 {
        busy.push(id(&submit(
            &s,
            ALICE,
            "ws1",
            &["true"],
            &format!("busy-{i}"),
        )));
    }
    let queued = show(&s, ALICE, "ws1", &busy[49]);
    assert_eq!(queued["state"], "queued");
    let before: Vec<String> = busy
        .iter()
        .filter(|b| show(&s, ALICE, "ws1", b)["started_at"].is_string())
        .cloned()
        .collect();
    let quiet = submit(&s, RUN_B, "ws2", &["true"], "quiet");
    assert_eq!(quiet["position"], 1, "{quiet}");
    let quiet = settled(&s, RUN_B, "ws2", &id(&quiet));
    assert_eq!(quiet["state"], "passed");
    let quiet_start = quiet["started_at"].as_str().unwrap().to_string();
    // Every ws1 job that had not started when ws2 submitted started after ws2's job.
    for b in &busy {
        if before.contains(b) {
            continue;
        }
        let j = show(&s, ALICE, "ws1", b);
        if let Some(t) = j["started_at"].as_str() {
            assert!(
                t > quiet_start.as_str(),
                "{b} started at {t}, before ws2's {quiet_start}"
            );
        }
    }
    for b in &busy {
        s.ok(
            ALICE,
            "job.cancel",
            json!({"workspace_id": "ws1", "job_id": b}),
        );
    }

    // ws1's queue holds at most max_queued_jobs; one more is refused and nothing is recorded.
    with_ws1(&mut s, "max_queued_jobs = 2");
    let running = submit(&s, ALICE, "ws1", &["sleep", "30"], "b-run");
    wait_for(
        || show(&s, ALICE, "ws1", &id(&running))["state"] == "running",
        "the first job runs",
    );
    let q1 = submit(&s, ALICE, "ws1", &["true"], "b-q1");
    let q2 = submit(&s, ALICE, "ws1", &["true"], "b-q2");
    assert_eq!(
        (q1["position"].clone(), q2["position"].clone()),
        (json!(1), json!(2))
    );
    let (status, v) = s.call(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["true"], "idempotency_key": "b-q3"}),
    );
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"]["code"], "resource_exhausted");
    assert_eq!(v["error"]["field"], "max_queued_jobs");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_queued_jobs is 2"),
        "{v}"
    );
    let listed = s.ok(
        ALICE,
        "job.list",
        json!({"workspace_id": "ws1", "state": "queued"}),
    );
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 2);
    // Another workspace's queue is its own.
    let other = submit(&s, RUN_B, "ws2", &["true"], "other");
    assert_eq!(other["state"], "queued");
    s.ok(
        ALICE,
        "job.cancel",
        json!({"workspace_id": "ws1", "job_id": id(&running)}),
    );
    for j in [&q1, &q2] {
        assert_eq!(settled(&s, ALICE, "ws1", &id(j))["state"], "passed");
    }
    assert_eq!(settled(&s, RUN_B, "ws2", &id(&other))["state"], "passed");
}

#[test]
fn run_follow_prints_the_output_as_it_arrives_and_the_result_at_the_end() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a", "a", false)]);
    let mut child = f
        .run_cmd(
            &["--follow"],
            &["sh", "-c", "echo first; sleep 4; echo second"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("stderr output");
        if seen.contains("first\n") {
            assert!(
                !seen.contains("second"),
                "first arrived before the job ended"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the run is still going"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline);
    }
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "passed");
    assert_eq!(v["output"], "first\nsecond\n");
}

/// Racing submits over HTTP, released together (with a deterministic jitter) for many rounds:
/// the queue bound is never exceeded, and one idempotency key never makes two jobs. Workflow
/// logic only, so on the scripted fake runtime (`fake-hang` runs until cancelled).
#[test]
fn racing_submits_never_exceed_the_queue_bound_or_make_two_jobs_of_one_key() {
    let extra = "max_concurrent_verifications = 1\n";
    let mut s = Server::fake_with(extra);
    with_ws1(&mut s, "max_queued_jobs = 3");
    let hang = |key: &str| {
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-hang"],
               "timeout_seconds": 600, "idempotency_key": key})
    };
    let holder = s.ok(ALICE, "job.submit", hang("holder"))["job"].clone();
    wait_for(
        || show(&s, ALICE, "ws1", &id(&holder))["state"] == "running",
        "the slot is held",
    );
    let addr = s.addr.clone();
    for round in 0..20u64 {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(7));
        let mut threads = Vec::new();
        for side in 0..7u64 {
            let (barrier, addr) = (barrier.clone(), addr.clone());
            // Six distinct keys and one repeat of side 0's key.
            let key = format!("r{round}-{}", if side == 6 { 0 } else { side });
            let body = hang(&key);
            threads.push(std::thread::spawn(move || {
                barrier.wait();
                std::thread::sleep(Duration::from_micros((round * 7919 + side * 104_729) % 500));
                call(&addr, Some(ALICE), "job.submit", &body)
            }));
        }
        let answers: Vec<(u16, Value)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let mut accepted = std::collections::BTreeSet::new();
        for (status, v) in &answers {
            match *status {
                200 => {
                    accepted.insert(id(&v["job"]));
                }
                _ => assert!(
                    matches!(
                        v["error"]["code"].as_str(),
                        Some("resource_exhausted" | "conflict")
                    ),
                    "round {round}: {v}"
                ),
            }
        }
        if answers[0].0 == 200 && answers[6].0 == 200 {
            assert_eq!(
                answers[0].1["job"]["job_id"], answers[6].1["job"]["job_id"],
                "round {round}: one key, one job"
            );
        }
        let queued = s.ok(
            ALICE,
            "job.list",
            json!({"workspace_id": "ws1", "state": "queued"}),
        );
        let queued: Vec<String> = queued["jobs"].as_array().unwrap().iter().map(id).collect();
        assert!(
            queued.len() <= 3,
            "round {round}: {} queued, the bound is 3",
            queued.len()
        );
        assert_eq!(
            queued
                .iter()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            accepted,
            "round {round}: every accepted job is queued, and only those"
        );
        for j in &queued {
            s.ok(
                ALICE,
                "job.cancel",
                json!({"workspace_id": "ws1", "job_id": j}),
            );
        }
    }
    let all = s.ok(
        ALICE,
        "job.list",
        json!({"workspace_id": "ws1", "limit": 500}),
    );
    let keys: Vec<&str> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["state"] == "queued")
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert!(keys.is_empty(), "every queued job was cancelled: {keys:?}");
}
