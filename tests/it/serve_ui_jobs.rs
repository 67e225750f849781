//! Jobs in the web page, in headless Chromium on real Docker: the overview and the jobs view
//! list waiting (with their place) and running jobs; a job's page opened while it waits shows
//! the log growing while the page is still loading, the start marked where it happened, and
//! the result (with its verified attestation) when it settles; a member with `verify` cancels
//! from the page, a viewer gets no button and a forged cancel (no CSRF token) changes nothing.

use crate::serve_ui_browser::{browse, has_button};
use crate::support::jobs::{id, settled, show};
use crate::support::*;
use serde_json::json;

#[test]
fn in_a_real_browser_a_job_page_streams_its_log_and_a_member_cancels_one() {
    if !docker() {
        return;
    }
    let keydir = tempfile::tempdir().unwrap();
    let (key, _, _) = crate::attestation::keys(keydir.path(), "signing");
    let s = Server::start_with(&format!(
        "max_concurrent_verifications = 1\nsigning_key = {:?}\n",
        key.display().to_string()
    ));
    let submit = |argv: &[&str], key: &str| {
        s.ok(
            ALICE,
            "job.submit",
            json!({"workspace_id": "ws1", "revision": "main", "argv": argv,
                   "labels": ["ui"], "idempotency_key": key}),
        )["job"]
            .clone()
    };
    // A job holds the only slot, so the one watched waits until the page is open.
    let holder = submit(&["sleep", "300"], "holder");
    wait_for(
        || show(&s, ALICE, "ws1", &id(&holder))["state"] == "running",
        "the holder runs",
    );
    let watched = submit(
        &[
            "sh",
            "-c",
            "echo tick-one; sleep 3; echo tick-two; sleep 3; echo '<b>tick-three</b>'",
        ],
        "watched",
    );
    assert_eq!(show(&s, ALICE, "ws1", &id(&watched))["state"], "queued");
    let page = format!("/ui/w/ws1/jobs/{}", id(&watched));
    let signal = s.dir.path().join("page-open");
    let releaser = {
        let (signal, addr, holder) = (signal.clone(), s.addr.clone(), id(&holder));
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
            while !signal.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            call(
                &addr,
                Some(ALICE),
                "job.cancel",
                &json!({"workspace_id": "ws1", "job_id": holder}),
            )
        })
    };
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": BOB, "streaming": true},
            {"do": "open", "path": "/ui/", "shot": "overview-with-jobs"},
            {"do": "open", "path": "/ui/w/ws1/jobs", "shot": "jobs-view"},
            {"do": "watch", "path": page, "shot": "job-live", "signal": signal,
             "needles": ["Log", "started at", "tick-one", "tick-two", "Settled"]},
        ]),
    );
    assert_eq!(releaser.join().unwrap().0, 200);
    let text = |i: usize| pages[i]["text"].as_str().unwrap().to_string();
    assert!(
        text(1).contains(&id(&holder)) && text(1).contains("Running"),
        "{}",
        text(1)
    );
    assert!(
        text(1).contains(&id(&watched)) && text(1).contains("Waiting"),
        "{}",
        text(1)
    );
    assert!(text(2).contains(&id(&watched)), "{}", text(2));
    let live = &pages[3];
    // What the page shows under "Log" (the facts above it name the argv).
    let seen: Vec<String> = live["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let t = t.as_str().unwrap();
            t.split_once("the result follows when it settles.")
                .map_or("", |(_, log)| log)
                .to_string()
        })
        .collect();
    let loading: Vec<&str> = live["loading"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    // Opened while it waited: no output, no start yet, and the page still loading.
    assert!(
        !seen[0].contains("tick-one") && !seen[0].contains("started"),
        "{}",
        seen[0]
    );
    assert!(
        live["seen"][0]
            .as_str()
            .unwrap()
            .contains("state when this page opened queued")
    );
    // The start is marked in the log where it happened, then the output grows in order,
    // all while the same response is still arriving.
    assert!(
        !seen[2].contains("tick-two"),
        "tick-one arrived alone: {}",
        seen[2]
    );
    assert!(
        !seen[3].contains("tick-three") && !seen[3].contains("Result"),
        "{}",
        seen[3]
    );
    for (i, l) in loading.iter().enumerate().take(4) {
        assert_eq!(
            *l, "loading",
            "needle {i} was seen before the page finished"
        );
    }
    let last = &seen[4];
    let start = last.find("started at").unwrap();
    assert!(start < last.find("tick-one").unwrap(), "{last}");
    assert!(
        last.contains("<b>tick-three</b>"),
        "the job's output is text: {last}"
    );
    assert!(
        last.contains("settled: passed") && last.contains("Settled passed"),
        "{last}"
    );
    assert!(
        last.contains("✓ verified"),
        "the attestation verifies: {last}"
    );
    assert!(
        !has_button(live, "Cancel job"),
        "a viewer gets no cancel button"
    );
    assert_eq!(settled(&s, ALICE, "ws1", &id(&watched))["state"], "passed");

    // A member with verify cancels a running job from its page.
    let long = submit(&["sleep", "120"], "long");
    wait_for(
        || show(&s, ALICE, "ws1", &id(&long))["state"] == "running",
        "the long job runs",
    );
    let page = format!("/ui/w/ws1/jobs/{}", id(&long));
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": BOB},
            {"do": "forge", "action": format!("{page}/cancel"), "fields": {}},
            {"do": "sign_in", "token": ALICE, "streaming": true},
            {"do": "watch", "path": page, "shot": "job-cancellable", "needles": ["Cancel job"]},
            {"do": "click", "button": "Cancel job", "shot": "job-cancelled"},
        ]),
    );
    assert!(
        pages[1]["text"].as_str().unwrap().contains("CSRF"),
        "{}",
        pages[1]
    );
    assert!(has_button(&pages[3], "Cancel job"));
    let after = pages[4]["text"].as_str().unwrap();
    assert!(after.contains("Settled cancelled"), "{after}");
    assert_eq!(show(&s, ALICE, "ws1", &id(&long))["state"], "cancelled");
}

/// The jobs view filters by state and label and pages 50 at a time, oldest last; a settled
/// job's page is a plain page (no stream) with its result; the Cancel form refuses a POST
/// without the session's CSRF token and a viewer's POST is refused by the API. (Fake
/// runtime: the pages' logic.)
#[test]
fn the_jobs_view_filters_and_pages_and_cancel_needs_the_token_and_verify() {
    use crate::serve_ui::{csrf, get, post, sign_in};
    let s = Server::fake_with("max_concurrent_verifications = 1\n");
    let mut ids = Vec::new();
    for i in 0..52 {
        let label = if i % 2 == 0 { "even" } else { "odd" };
        let code = if i == 51 { "1" } else { "0" };
        let j = s.ok(
            ALICE,
            "job.submit",
            json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-exit", code],
                   "labels": [label], "idempotency_key": format!("p{i}")}),
        )["job"]
            .clone();
        ids.push(id(&j));
    }
    for j in &ids {
        settled(&s, ALICE, "ws1", j);
    }
    let bob = sign_in(&s, BOB);
    let (status, _, first) = get(&s, &bob, "/ui/w/ws1/jobs");
    assert_eq!(status, 200);
    // Newest first: the last two are on the first page, the first two only on the next.
    assert!(
        first.contains(&ids[51]) && first.contains(&ids[2]),
        "{first}"
    );
    assert!(!first.contains(&ids[1]) && !first.contains(&ids[0]));
    let next = first
        .split("href=\"")
        .filter_map(|p| p.split('"').next())
        .find(|h| h.contains("cursor="))
        .expect("a link to older jobs")
        .replace("&amp;", "&");
    let (_, _, second) = get(&s, &bob, &next);
    assert!(
        second.contains(&ids[1]) && second.contains(&ids[0]),
        "{second}"
    );
    assert!(!second.contains(&ids[51]));
    let (_, _, failed) = get(&s, &bob, "/ui/w/ws1/jobs?state=failed");
    assert!(
        failed.contains(&ids[51]) && !failed.contains(&ids[50]),
        "{failed}"
    );
    let (_, _, odd) = get(&s, &bob, "/ui/w/ws1/jobs?label=odd&state=passed");
    assert!(odd.contains(&ids[49]) && !odd.contains(&ids[50]) && !odd.contains(&ids[51]));
    let (_, _, none) = get(&s, &bob, "/ui/w/ws1/jobs?label=nope");
    assert!(none.contains("No jobs match."), "{none}");
    let (status, _, bad) = get(&s, &bob, "/ui/w/ws1/jobs?state=finished");
    assert_eq!(status, 400, "{bad}");
    assert!(bad.contains("state"), "{bad}");
    // A settled job's page: the result, no cancel form.
    let (status, _, page) = get(&s, &bob, &format!("/ui/w/ws1/jobs/{}", ids[51]));
    assert_eq!(status, 200);
    assert!(
        page.contains("Settled <strong>failed</strong>") && page.contains("exit 1"),
        "{page}"
    );
    assert!(!page.contains("Cancel job"));

    // Cancelling from the page: the CSRF token and verify are both needed.
    let hang = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-hang"],
               "timeout_seconds": 600, "idempotency_key": "hang"}),
    )["job"]
        .clone();
    let path = format!("/ui/w/ws1/jobs/{}/cancel", id(&hang));
    let (status, _) = post(&s, &bob, &path, &[("csrf", &csrf(&first))]);
    assert_eq!(status, 403, "a viewer may not cancel");
    let alice = sign_in(&s, ALICE);
    let (_, _, overview) = get(&s, &alice, "/ui/");
    let (status, _) = post(&s, &alice, &path, &[("csrf", "wrong")]);
    assert_eq!(status, 403);
    assert!(matches!(
        show(&s, ALICE, "ws1", &id(&hang))["state"].as_str(),
        Some("queued" | "running")
    ));
    let (status, _) = post(&s, &alice, &path, &[("csrf", &csrf(&overview))]);
    assert_eq!(status, 303);
    assert_eq!(show(&s, ALICE, "ws1", &id(&hang))["state"], "cancelled");
}

/// A running job's page stays open past the keep-alive idle timer (at its shortest, 1 s) while
/// the job writes nothing, and ends properly when the job settles: the settle marker, the
/// result, the end of the document and the chunked body's last chunk. (Fake runtime: the
/// stream's logic.)
#[test]
fn a_job_page_outlives_the_idle_timer_and_ends_with_the_result() {
    use crate::serve_ui::sign_in;
    use std::io::{Read, Write};
    let s = Server::fake_with("keep_alive_idle_seconds = 1\n");
    let j = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["fake-hang"],
               "timeout_seconds": 600, "idempotency_key": "idle"}),
    )["job"]
        .clone();
    wait_for(
        || show(&s, ALICE, "ws1", &id(&j))["state"] == "running",
        "the job runs",
    );
    let cookie = sign_in(&s, BOB);
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        c,
        "GET /ui/w/ws1/jobs/{} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\n\r\n",
        id(&j),
        s.addr
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&seen).contains("<pre class=\"log\">") {
        let n = c.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the page ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    // Four idle timers with nothing written: the connection must still be open.
    std::thread::sleep(std::time::Duration::from_secs(4));
    c.set_nonblocking(true).unwrap();
    match c.read(&mut buf) {
        Ok(0) => panic!("the page was cut at the idle timer"),
        Ok(n) => seen.extend_from_slice(&buf[..n]),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
    }
    c.set_nonblocking(false).unwrap();
    s.ok(
        ALICE,
        "job.cancel",
        json!({"workspace_id": "ws1", "job_id": id(&j)}),
    );
    loop {
        let n = c.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
        if n == 0 || String::from_utf8_lossy(&seen).ends_with("0\r\n\r\n") {
            break;
        }
    }
    let page = crate::support::http::chunked_body(&seen);
    assert!(page.contains("▶ settled: cancelled"), "{page}");
    assert!(
        page.contains("Settled <strong>cancelled</strong>"),
        "{page}"
    );
    assert!(page.trim_end().ends_with("</html>"), "{page}");
}
