//! Jobs on the durable event log and the event stream: `job.queued`, `job.started` and
//! `job.settled` (with the status) for every job, `job.cancelled` beside the settle of a
//! cancelled one, in order, each the same in `event.list` and on `GET /api/v1/events`; a
//! `kind` that names no event kind is refused on both instead of matching nothing. (Fake
//! runtime: the log's logic, not the sandbox.)

use crate::serve_events::{Sse, status_of};
use crate::support::daemon::{ALICE, BOB, Server, wait_for};
use crate::support::jobs::{id, settled, show, submit};
use serde_json::{Value, json};

fn events(s: &Server, body: Value) -> Vec<Value> {
    s.ok(BOB, "event.list", body)["events"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn every_job_is_queued_started_and_settled_on_the_log_and_the_stream() {
    let s = Server::fake();
    let mut stream = Sse::open(&s.addr, BOB, "workspace_id=ws1&kind=job.settled", None);
    let passed = submit(&s, ALICE, "ws1", &["fake-exit", "0", "hello"], "e1");
    let failed = submit(&s, ALICE, "ws1", &["fake-exit", "3"], "e2");
    assert_eq!(settled(&s, ALICE, "ws1", &id(&passed))["state"], "passed");
    assert_eq!(settled(&s, ALICE, "ws1", &id(&failed))["state"], "failed");
    let hang = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-hang"],
               "timeout_seconds": 600, "idempotency_key": "e3"}),
    )["job"]
        .clone();
    wait_for(
        || show(&s, ALICE, "ws1", &id(&hang))["state"] == "running",
        "the hanging job runs",
    );
    let c = s.ok(
        ALICE,
        "job.cancel",
        json!({"workspace_id": "ws1", "job_id": id(&hang)}),
    );
    assert_eq!(c["job"]["state"], "cancelled");

    // Each job's own events, in order, naming its states.
    for (job, last) in [
        (&passed, "passed"),
        (&failed, "failed"),
        (&hang, "cancelled"),
    ] {
        let mine = events(&s, json!({"workspace_id": "ws1", "subject": id(job)}));
        let kinds: Vec<&str> = mine.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        let mut want = vec!["job.queued", "job.started", "job.settled"];
        if last == "cancelled" {
            want.push("job.cancelled");
        }
        assert_eq!(kinds, want, "{mine:?}");
        let news: Vec<&str> = mine.iter().map(|e| e["new"].as_str().unwrap()).collect();
        assert_eq!(&news[..3], &["queued", "running", last], "{mine:?}");
        assert_eq!(mine[0]["actor"], "member:alice", "{mine:?}");
        let settle = &mine[2]["payload"];
        assert_eq!(settle["state"], last);
        assert_eq!(settle["job_id"], id(job).as_str());
        assert_eq!(settle["revision"], "main");
        assert_eq!(settle["commit"], job["verification"]["candidate_revision"]);
        assert_eq!(
            settle["exit_code"],
            show(&s, ALICE, "ws1", &id(job))["verification"]["exit_code"]
        );
        assert!(
            mine[0]["payload"]["exit_code"].is_null(),
            "nothing settled is said of a queued job: {mine:?}"
        );
    }
    // The filtered stream pushed exactly the three settles, in order.
    let mut pushed = Vec::new();
    while pushed.len() < 3 {
        let (_, event, data) = stream.next().expect("the stream stays open");
        if event == ":" {
            continue;
        }
        assert_eq!(event, "job.settled");
        let v: Value = serde_json::from_str(&data).unwrap();
        pushed.push((v["subject"].as_str().unwrap().to_string(), v["new"].clone()));
    }
    // In the log's order (the first two ran side by side, so either may have settled first).
    let logged: Vec<(String, Value)> =
        events(&s, json!({"workspace_id": "ws1", "kind": "job.settled"}))
            .iter()
            .map(|e| (e["subject"].as_str().unwrap().to_string(), e["new"].clone()))
            .collect();
    assert_eq!(pushed, logged);
    let mut got = pushed.clone();
    got.sort_by_key(|(id, st)| (id.clone(), st.to_string()));
    let mut want = vec![
        (id(&passed), json!("passed")),
        (id(&failed), json!("failed")),
        (id(&hang), json!("cancelled")),
    ];
    want.sort_by_key(|(id, st)| (id.clone(), st.to_string()));
    assert_eq!(got, want);
    assert_eq!(pushed[2], (id(&hang), json!("cancelled")));
    let cancelled = events(&s, json!({"workspace_id": "ws1", "kind": "job.cancelled"}));
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["subject"], id(&hang).as_str());
}

#[test]
fn a_kind_that_names_no_event_kind_is_refused_on_the_list_and_the_stream() {
    let s = Server::fake();
    let msg = s.err(
        BOB,
        "event.list",
        json!({"workspace_id": "ws1", "kind": "job.finished"}),
        "invalid_argument",
    );
    assert!(msg.contains("job.finished"), "{msg}");
    assert!(
        msg.contains("job.settled"),
        "names the family's kinds: {msg}"
    );
    assert_eq!(
        status_of(&s.addr, BOB, "workspace_id=ws1&kind=jobs.settled"),
        400
    );
    assert_eq!(
        status_of(&s.addr, BOB, "workspace_id=ws1&kind=job.queued"),
        200
    );
}

/// `/metrics` counts jobs by workspace and state, each workspace's queue depth and the age of
/// its oldest waiting job (a starving workspace shows), and the jobs' time by profile and
/// status; every workspace's families are there before it has a job.
#[test]
fn metrics_show_each_workspaces_jobs_queue_and_oldest_waiting_job() {
    use crate::serve_metrics::{get, scrape};
    let s = Server::fake_with("max_concurrent_verifications = 1\n");
    let m = scrape(&s.addr);
    for ws in ["ws1", "ws2"] {
        for state in ["queued", "running", "passed", "cancelled", "source_changed"] {
            let key = format!("airlock_jobs{{workspace=\"{ws}\",state=\"{state}\"}}");
            assert_eq!(m.get(&key), Some(&0.0), "{key} exported at zero");
        }
        assert_eq!(
            m.get(&format!("airlock_job_queue_depth{{workspace=\"{ws}\"}}")),
            Some(&0.0)
        );
    }
    assert!(m.contains_key("airlock_job_seconds_count{profile=\"default\",status=\"passed\"}"));
    let hang = |key: &str| {
        s.ok(
            ALICE,
            "job.submit",
            json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-hang"],
                   "timeout_seconds": 600, "idempotency_key": key}),
        )["job"]
            .clone()
    };
    let holder = hang("m0");
    wait_for(
        || show(&s, ALICE, "ws1", &id(&holder))["state"] == "running",
        "the only slot is taken",
    );
    let waiting: Vec<Value> = (1..=2).map(|i| hang(&format!("m{i}"))).collect();
    s.set_clock(time::OffsetDateTime::now_utc() + time::Duration::seconds(120));
    let m = scrape(&s.addr);
    assert_eq!(
        get(&m, "airlock_jobs{workspace=\"ws1\",state=\"running\"}"),
        1.0
    );
    assert_eq!(
        get(&m, "airlock_jobs{workspace=\"ws1\",state=\"queued\"}"),
        2.0
    );
    assert_eq!(get(&m, "airlock_job_queue_depth{workspace=\"ws1\"}"), 2.0);
    assert_eq!(get(&m, "airlock_job_queue_depth{workspace=\"ws2\"}"), 0.0);
    let oldest = get(&m, "airlock_job_queue_oldest_seconds{workspace=\"ws1\"}");
    assert!(
        (115.0..200.0).contains(&oldest),
        "the oldest has waited about 120 s: {oldest}"
    );
    for j in waiting.iter().chain([&holder]) {
        s.ok(
            ALICE,
            "job.cancel",
            json!({"workspace_id": "ws1", "job_id": id(j)}),
        );
    }
    let m = scrape(&s.addr);
    assert_eq!(
        get(&m, "airlock_jobs{workspace=\"ws1\",state=\"cancelled\"}"),
        3.0
    );
    assert_eq!(get(&m, "airlock_job_queue_depth{workspace=\"ws1\"}"), 0.0);
    assert_eq!(
        get(&m, "airlock_job_queue_oldest_seconds{workspace=\"ws1\"}"),
        0.0
    );
    assert_eq!(
        get(
            &m,
            "airlock_job_seconds_count{profile=\"default\",status=\"cancelled\"}"
        ),
        3.0
    );
}
