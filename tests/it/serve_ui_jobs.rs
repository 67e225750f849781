//! Jobs in the web page, in headless Chromium on real Docker: the overview and the jobs view
//! list waiting (with their place) and running jobs; a job's page opened while it waits shows
//! the log growing while the page is still loading, the start marked where it happened, and
//! the result (with its verified attestation) when it settles; a member with `verify` cancels
//! from the page, a viewer gets no button and a forged cancel (no CSRF token) changes nothing.

use crate::serve_ui::{browse, has_button};
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
