//! The durable event log over the candidate flow and `GET /api/v1/events` (server-sent events)
//! over real HTTP: every step of a candidate's life is in `event.list` in order, also for a
//! workspace without a worktree; the stream pushes new events as they commit, resumes after
//! `Last-Event-ID`, sends heartbeats, refuses bad input with the JSON envelope, is bounded, and
//! ends when the daemon stops. (Fake runtime: the logic of the log, not the sandbox.)

use crate::delivery::{approved_request, deliver_body, frozen};
use crate::support::daemon::{ALICE, BOB, CAROL, Server, wait_for};
use crate::support::http::exchange;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One open event stream: the raw connection, read line by line.
pub(crate) struct Sse {
    lines: BufReader<TcpStream>,
}

/// One server-sent event: (id, event, data); a heartbeat comment is ("", ":", text).
pub(crate) type Received = (String, String, String);

impl Sse {
    pub(crate) fn open(addr: &str, token: &str, query: &str, last_event_id: Option<&str>) -> Sse {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut head = format!(
            "GET /api/v1/events?{query} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n"
        );
        if let Some(id) = last_event_id {
            head.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let mut lines = BufReader::new(s);
        let mut status = String::new();
        lines.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        loop {
            let mut l = String::new();
            lines.read_line(&mut l).unwrap();
            if l == "\r\n" {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if lower.starts_with("content-type:") {
                assert!(lower.contains("text/event-stream"), "{l}");
            }
        }
        Sse { lines }
    }

    /// The next event or heartbeat (chunk-size lines of the chunked body are skipped); `None`
    /// when the stream ended.
    pub(crate) fn next(&mut self) -> Option<Received> {
        let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
        loop {
            let mut l = String::new();
            if self.lines.read_line(&mut l).ok()? == 0 {
                return None;
            }
            let l = l.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                if !event.is_empty() || !data.is_empty() {
                    return Some((id, event, data));
                }
                continue;
            }
            if let Some(v) = l.strip_prefix("id: ").or(l.strip_prefix("id:")) {
                id = v.to_string();
            } else if let Some(v) = l.strip_prefix("event: ").or(l.strip_prefix("event:")) {
                event = v.to_string();
            } else if let Some(v) = l.strip_prefix("data: ").or(l.strip_prefix("data:")) {
                data = v.to_string();
            } else if let Some(v) = l.strip_prefix(':') {
                return Some((String::new(), ":".into(), v.trim().to_string()));
            } else if l == "0" {
                return None;
            }
            // Anything else is a chunk-size line of the transfer encoding.
        }
    }

    /// The next real event, skipping heartbeats.
    fn event(&mut self) -> Option<Received> {
        loop {
            let e = self.next()?;
            if e.1 != ":" {
                return Some(e);
            }
        }
    }
}

/// The status line's code of a stream request (the connection is closed after it).
pub(crate) fn status_of(addr: &str, token: &str, query: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /api/v1/events?{query} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_candidate_flow_is_in_the_event_log_and_pushed_over_sse() {
    // The keep-alive idle timer at its shortest: the idle stream below outlives it many times
    // over before its heartbeat and keeps delivering events after it.
    let s = Server::fake_with("keep_alive_idle_seconds = 1\n");
    // A stream opened before anything happened, from the end of the (empty) log.
    let mut live = Sse::open(&s.addr, ALICE, "workspace_id=ws1", None);
    let (cid, rev, _) = frozen(&s);
    let (id, version) = approved_request(&s, &cid, &rev, "update_ref");
    let (status, v) = s.call(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
    );
    assert_eq!(status, 200, "{v}");

    let listed = s.ok(ALICE, "event.list", json!({"workspace_id": "ws1"}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let want = [
        "candidate.created",
        "candidate.state_changed",
        "candidate.verification_requested",
        "candidate.verification_settled",
        "candidate.delivery_requested",
        "candidate.decided",
        "candidate.delivery_changed",
        "candidate.delivered",
    ];
    let got = kinds(&listed);
    let mut at = 0;
    for w in want {
        let found = got[at..]
            .iter()
            .position(|k| k == w)
            .unwrap_or_else(|| panic!("{w} missing after {:?}: {got:?}", &got[..at]));
        at += found + 1;
    }
    assert!(listed.iter().all(|e| e["subject"] == cid));
    let frozen = &listed[1];
    assert_eq!(
        (&frozen["prior"], &frozen["new"], &frozen["actor"]),
        (
            &json!("preparing"),
            &json!("frozen"),
            &json!("system:airlock")
        ),
        "{frozen}"
    );
    let decided = listed
        .iter()
        .find(|e| e["kind"] == "candidate.decided")
        .unwrap();
    assert_eq!(decided["actor"], "member:dave", "{decided}");
    let settled = listed
        .iter()
        .find(|e| e["kind"] == "candidate.verification_settled")
        .unwrap();
    assert_eq!(settled["new"], "passed");
    assert_eq!(settled["payload"]["candidate_revision"], rev);

    // The live stream saw the same events, in the same order, with their seqs as ids.
    let mut pushed = vec![];
    while pushed.len() < listed.len() {
        let (id, event, data) = live.event().expect("the stream stays open");
        let v: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(id, v["seq"].to_string());
        assert_eq!(event, v["kind"]);
        pushed.push(v);
    }
    assert_eq!(pushed, listed);

    // Resuming after the third event gets exactly the rest; `since` does the same.
    let third = listed[2]["seq"].to_string();
    let mut resumed = Sse::open(&s.addr, BOB, "workspace_id=ws1&since=0", Some(&third));
    let first = resumed.event().unwrap();
    assert_eq!(first.0, listed[3]["seq"].to_string());
    let mut since = Sse::open(
        &s.addr,
        BOB,
        &format!("workspace_id=ws1&since={third}"),
        None,
    );
    assert_eq!(since.event().unwrap().0, first.0);
    // Filters: only this subject and kind.
    let mut only = Sse::open(
        &s.addr,
        BOB,
        &format!("workspace_id=ws1&since=0&kind=candidate.decided&subject={cid}"),
        None,
    );
    let d = only.event().unwrap();
    assert_eq!(d.1, "candidate.decided");

    // An idle stream sends heartbeats, and is not cut by the idle timer while it waits for
    // them: the heartbeat comes ~15 s after the last event, 15 times the idle timer.
    let beat = live.next().expect("a heartbeat, not the end of the stream");
    assert_eq!(beat.1, ":", "{beat:?}");
    // The stream still delivers what happens after the heartbeat.
    let base = s.head();
    let b = s.agent_commit("later", &base, &[("later.txt", "later\n")]);
    let sub = s.evidence("run_a", &base, &b, None);
    let prepared = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p-later"),
    );
    let later = crate::support::cand(&prepared)["candidate_id"]
        .as_str()
        .unwrap()
        .to_string();
    let created = std::iter::from_fn(|| live.event())
        .find(|(_, kind, _)| kind == "candidate.created")
        .expect("the stream is still open and pushes the new candidate");
    assert!(created.2.contains(&later), "{created:?}");
}

#[test]
fn bad_requests_get_the_envelope_and_streams_are_bounded_and_end_at_shutdown() {
    let mut s = Server::fake();
    let get = |token: Option<&str>, query: &str, extra: &[(&str, &str)]| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        let (status, _, body) = exchange(
            &s.addr,
            "GET",
            &format!("/api/v1/events?{query}"),
            &headers,
            b"",
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{query}: {e}: {}", String::from_utf8_lossy(&body)));
        (status, v)
    };
    for (token, query, extra, status, code, field) in [
        (
            None,
            "workspace_id=ws1",
            vec![],
            401,
            "unauthenticated",
            None,
        ),
        (
            Some("nope"),
            "workspace_id=ws1",
            vec![],
            401,
            "unauthenticated",
            None,
        ),
        (
            Some(CAROL),
            "workspace_id=ws1",
            vec![],
            403,
            "permission_denied",
            None,
        ),
        (
            Some(ALICE),
            "workspace_id=nope",
            vec![],
            403,
            "permission_denied",
            None,
        ),
        (Some(ALICE), "", vec![], 400, "invalid_argument", None),
        (
            Some(ALICE),
            "workspace_id=ws1&since=-1",
            vec![],
            400,
            "invalid_argument",
            Some("since"),
        ),
        (
            Some(ALICE),
            "workspace_id=ws1&since=x",
            vec![],
            400,
            "invalid_argument",
            Some("since"),
        ),
        (
            Some(ALICE),
            "workspace_id=ws1&colour=red",
            vec![],
            400,
            "invalid_argument",
            None,
        ),
        (
            Some(ALICE),
            "workspace_id=ws1",
            vec![("Last-Event-ID", "abc")],
            400,
            "invalid_argument",
            Some("Last-Event-ID"),
        ),
    ] {
        let (got, v) = get(token, query, &extra);
        assert_eq!(got, status, "{query} {extra:?}: {v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        if let Some(f) = field {
            assert_eq!(v["error"]["field"], f, "{v}");
        }
    }
    // At most MAX_EVENT_STREAMS at once; the next is refused naming the bound.
    let max = airlock::api::event_stream::MAX_EVENT_STREAMS;
    let mut open: Vec<Sse> = (0..max)
        .map(|_| Sse::open(&s.addr, ALICE, "workspace_id=ws1", None))
        .collect();
    let (status, v) = get(Some(ALICE), "workspace_id=ws1", &[]);
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"]["field"], "event_streams", "{v}");
    // A slot frees once the server sees its client gone (at the latest, its next heartbeat).
    drop(open.drain(1..));
    wait_for(
        || status_of(&s.addr, ALICE, "workspace_id=ws1") == 200,
        "a closed stream's slot frees",
    );
    // Shutdown ends the stream with a note (the daemon waits for no heartbeat to end it).
    let mut stream = open.pop().unwrap();
    let killer = std::thread::spawn(move || s.stop());
    let last = stream.event().expect("the closing event");
    assert_eq!(last.1, "airlock.stopping", "{last:?}");
    assert_eq!(killer.join().unwrap(), Some(0));
}

/// Two decisions of one delivery request released together from a barrier (with jitter), for
/// many rounds: exactly one wins, the request shows it, and the event log records exactly that
/// one decision, by its actor, never the loser's.
#[test]
fn racing_decisions_leave_one_decision_and_one_event() {
    const ROUNDS: usize = 15;
    let s = Server::fake();
    for round in 0..ROUNDS {
        let base = s.head();
        let a = s.agent_commit(
            &format!("r{round}"),
            &base,
            &[(&format!("r{round}.txt"), "x\n")],
        );
        let sub = s.evidence(&format!("run_r{round}"), &base, &a, None);
        let c = s.ok(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub], &base, &format!("race-{round}")),
        )["candidate"]
            .clone();
        let cid = c["candidate_id"].as_str().unwrap().to_string();
        let rev = c["candidate_revision"].as_str().unwrap().to_string();
        let vid = crate::delivery::verify(&s, &cid, &rev, &["true"], 60, &format!("v{round}"));
        assert_eq!(crate::delivery::settled(&s, &cid, &vid)["status"], "passed");
        let req = s.ok(
            ALICE,
            "integration.request_delivery",
            json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
                   "verification_ids": [vid], "action": "update_ref",
                   "idempotency_key": format!("rq{round}")}),
        )["candidate"]["delivery_request"]
            .clone();
        let barrier = std::sync::Barrier::new(2);
        let decide = |approve: bool, side: u64| {
            barrier.wait();
            std::thread::sleep(crate::apply_races::jitter(round, side));
            s.call(
                crate::support::daemon::DAVE,
                "integration.decide",
                json!({"workspace_id": "ws1", "candidate_id": cid,
                       "request_id": req["request_id"], "request_version": req["request_version"],
                       "approve": approve}),
            )
        };
        let (yes, no) = std::thread::scope(|sc| {
            let y = sc.spawn(|| decide(true, 1));
            let n = sc.spawn(|| decide(false, 2));
            (y.join().unwrap(), n.join().unwrap())
        });
        let won: Vec<bool> = [(&yes, true), (&no, false)]
            .iter()
            .filter(|((status, _), _)| *status == 200)
            .map(|(_, approve)| *approve)
            .collect();
        assert_eq!(
            won.len(),
            1,
            "round {round}: exactly one decision wins: {yes:?} {no:?}"
        );
        let state = s.ok(
            ALICE,
            "integration.show",
            json!({"workspace_id": "ws1", "candidate_id": cid}),
        )["candidate"]["delivery_request"]["state"]
            .clone();
        assert_eq!(
            state,
            if won[0] { "approved" } else { "denied" },
            "round {round}"
        );
        let events = s.ok(
            ALICE,
            "event.list",
            json!({"workspace_id": "ws1", "subject": cid, "kind": "candidate.decided"}),
        )["events"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            events.len(),
            1,
            "round {round}: one decision, one event: {events:?}"
        );
        assert_eq!(
            events[0]["payload"]["request_state"], state,
            "round {round}"
        );
        assert_eq!(events[0]["actor"], "member:dave");
    }
}
