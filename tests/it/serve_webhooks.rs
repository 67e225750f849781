//! Webhooks over real HTTP to real receivers on loopback: every delivery is signed
//! (HMAC-SHA256 of the secret over the body, `sha256=<hex>`), carries a delivery id that stays
//! the same across attempts and a timestamp that is also in the signed body, goes in order per
//! subscription and is retried with backoff until the receiver answers 2xx; a receiver that
//! answers 500, hangs, redirects or closes mid-answer costs only its own subscription's
//! retries; one whose attempts run out is `failed` with its last error in `webhook.list`; the
//! metrics count every attempt. A kill -9 loop loses no event and never gives one event two
//! delivery ids. (Fake runtime: the outbox's logic, not the sandbox.)

use crate::serve_metrics::{get, scrape};
use crate::support::daemon::{ALICE, BOB, Server, wait_for_secs};
use crate::support::jobs::{id, settled, submit};
use crate::support::receiver::{Answer, Receiver};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const SECRET: &str = "a-test-secret-of-32-bytes-length";

fn hook(url: &str, events: &str, extra: &str) -> String {
    format!(
        "[[workspaces.ws1.webhooks]]\nurl = \"{url}\"\nevents = {events}\nsecret = \"{SECRET}\"\n{extra}\n"
    )
}

/// `sha256=<hex HMAC-SHA256>` computed here from the definition (RFC 2104), not by Airlock.
fn hmac(key: &[u8], body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(body)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    format!("sha256={}", hex::encode(outer))
}

fn subscriptions(s: &Server) -> Vec<Value> {
    s.ok(
        BOB,
        "webhook.list",
        json!({"workspace_id": "ws1", "limit": 50}),
    )["subscriptions"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn deliveries_are_signed_ordered_retried_and_a_bad_receiver_costs_only_itself() {
    // The flaky receiver fails each way once, then accepts.
    let flaky = Receiver::start(
        vec![
            Answer::Fail500,
            Answer::Hang(Duration::from_secs(4)),
            Answer::Redirect,
            Answer::CloseMidBody,
        ],
        Answer::Ok,
    );
    let healthy = Receiver::start(vec![], Answer::Ok);
    let broken = Receiver::start(vec![], Answer::Fail500);
    let extra = [
        hook(
            &flaky.url("/flaky"),
            "[\"job.settled\"]",
            "timeout_seconds = 2\nmax_attempts = 6",
        ),
        hook(
            &healthy.url("/healthy?x=1"),
            "[\"job.queued\", \"job.settled\"]",
            "",
        ),
        hook(
            &broken.url("/broken"),
            "[\"job.settled\"]",
            "max_attempts = 1",
        ),
    ]
    .concat();
    let s = Server::fake_with(&extra);
    let before = scrape(&s.addr);
    for r in ["delivered", "retried", "failed"] {
        assert!(
            before.contains_key(&format!(
                "airlock_webhook_deliveries_total{{result=\"{r}\"}}"
            )),
            "every result is exported from the start"
        );
    }
    let jobs: Vec<Value> = (0..3)
        .map(|i| {
            submit(
                &s,
                ALICE,
                "ws1",
                &["fake-exit", &i.to_string()],
                &format!("w{i}"),
            )
        })
        .collect();
    for j in &jobs {
        settled(&s, ALICE, "ws1", &id(j));
    }
    // The healthy receiver has all six (queued and settled of each) while the flaky one is
    // still retrying its first.
    wait_for_secs(
        || healthy.accepted().len() == 6,
        20,
        "the healthy receiver got every event",
    );
    assert!(
        flaky.accepted().is_empty(),
        "the flaky receiver is still on its retries: {:?}",
        flaky.seen().len()
    );
    let order: Vec<(String, String)> = healthy
        .accepted()
        .iter()
        .map(|r| {
            let v = r.json();
            (
                v["event"]["kind"].as_str().unwrap().to_string(),
                v["event"]["subject"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let seqs: Vec<i64> = healthy
        .accepted()
        .iter()
        .map(|r| r.json()["event"]["seq"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    for j in &jobs {
        assert!(order.contains(&("job.queued".into(), id(j))));
        assert!(order.contains(&("job.settled".into(), id(j))));
    }
    assert_eq!(healthy.accepted()[0].path, "/healthy?x=1");

    // The flaky one gets all three settles, in order, after four failed attempts of the first.
    wait_for_secs(
        || flaky.accepted().len() == 3,
        60,
        "the flaky receiver got every settle",
    );
    let all = flaky.seen();
    assert_eq!(all.len(), 7, "4 failed attempts and 3 deliveries: {all:?}");
    let first_id = all[0].header("x-airlock-delivery").to_string();
    assert!(first_id.starts_with("whd_"), "{first_id}");
    for (i, r) in all.iter().enumerate() {
        let body = r.json();
        // Signed over the exact body with the secret.
        assert_eq!(
            r.header("x-airlock-signature-256"),
            hmac(SECRET.as_bytes(), &r.body)
        );
        assert_eq!(r.header("x-airlock-event"), "job.settled");
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(
            r.header("x-airlock-timestamp"),
            body["timestamp"].to_string(),
            "the timestamp is signed too"
        );
        assert_eq!(body["delivery_id"], r.header("x-airlock-delivery"));
        if i < 5 {
            assert_eq!(
                r.header("x-airlock-delivery"),
                first_id,
                "one id across attempts"
            );
            assert_eq!(body["attempt"], i as u64 + 1);
        }
    }
    let delivered: Vec<Value> = flaky.accepted().iter().map(|r| r.json()).collect();
    let subjects: Vec<&str> = delivered
        .iter()
        .map(|v| v["event"]["subject"].as_str().unwrap())
        .collect();
    let logged = s.ok(
        BOB,
        "event.list",
        json!({"workspace_id": "ws1", "kind": "job.settled"}),
    )["events"]
        .clone();
    let want: Vec<&str> = logged
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, want, "in the order the jobs settled");
    for (v, e) in delivered.iter().zip(logged.as_array().unwrap()) {
        assert_eq!(&v["event"], e, "the event as event.list shows it");
    }
    let second = delivered
        .iter()
        .find(|v| v["event"]["subject"] == id(&jobs[1]).as_str())
        .unwrap();
    assert_eq!(second["event"]["payload"]["exit_code"], 1);
    assert_eq!(second["event"]["new"], "failed");
    // A tampered body does not verify.
    let mut forged = all[6].body.clone();
    forged[10] ^= 1;
    assert_ne!(
        all[6].header("x-airlock-signature-256"),
        hmac(SECRET.as_bytes(), &forged)
    );

    // What the operator sees: counts, attempts and the last errors.
    let subs = subscriptions(&s);
    assert_eq!(subs.len(), 3);
    assert!(
        subs.iter()
            .all(|v| v.get("secret").is_none() && !v.to_string().contains(SECRET))
    );
    let by_url = |p: &str| {
        subs.iter()
            .find(|v| v["url"].as_str().unwrap().contains(p))
            .unwrap()
    };
    let f = by_url("/flaky");
    assert_eq!(
        (f["delivered"].as_i64(), f["pending"].as_i64()),
        (Some(3), Some(0))
    );
    let first = f["deliveries"].as_array().unwrap().last().unwrap();
    assert_eq!(first["attempts"], 5);
    assert_eq!(first["state"], "delivered");
    let b = by_url("/broken");
    wait_for_secs(
        || by_url_count(&s, "/broken", "failed") == 3,
        20,
        "every delivery to the broken receiver failed",
    );
    assert!(b["max_attempts"] == 1);
    let b = subscriptions(&s)
        .into_iter()
        .find(|v| v["url"].as_str().unwrap().contains("/broken"))
        .unwrap();
    let last = &b["deliveries"][0];
    assert_eq!(last["state"], "failed");
    assert_eq!(last["last_status"], 500);
    assert!(
        last["last_error"]
            .as_str()
            .unwrap()
            .contains("answered 500: boom boom"),
        "{last}"
    );
    // The errors name what went wrong with each attempt of the flaky receiver.
    let m = scrape(&s.addr);
    assert_eq!(
        get(&m, "airlock_webhook_deliveries_total{result=\"retried\"}"),
        4.0
    );
    assert_eq!(
        get(&m, "airlock_webhook_deliveries_total{result=\"delivered\"}"),
        9.0
    );
    assert_eq!(
        get(&m, "airlock_webhook_deliveries_total{result=\"failed\"}"),
        3.0
    );
}

fn by_url_count(s: &Server, path: &str, field: &str) -> i64 {
    subscriptions(s)
        .into_iter()
        .find(|v| v["url"].as_str().unwrap().contains(path))
        .and_then(|v| v[field].as_i64())
        .unwrap_or(0)
}

#[test]
fn a_failed_attempts_error_says_what_the_receiver_did() {
    let r = Receiver::start(
        vec![
            Answer::Redirect,
            Answer::Hang(Duration::from_secs(3)),
            Answer::CloseMidBody,
        ],
        Answer::Fail500,
    );
    let s = Server::fake_with(&hook(
        &r.url("/h"),
        "[\"job.queued\"]",
        "timeout_seconds = 1\nmax_attempts = 3",
    ));
    submit(&s, ALICE, "ws1", &["fake-exit", "0"], "a1");
    wait_for_secs(
        || by_url_count(&s, "/h", "failed") == 1,
        30,
        "the delivery ran out of attempts",
    );
    // Each attempt's error is logged as the last one; the final is the close mid-answer.
    let d = &subscriptions(&s)[0]["deliveries"][0];
    assert_eq!(d["attempts"], 3);
    assert!(
        d["last_error"].as_str().unwrap().contains("mid-body"),
        "{d}"
    );
    assert!(d["last_status"].is_null(), "{d}");
    let seen = r.seen();
    assert_eq!(seen.len(), 3, "no redirect was followed");
}

#[test]
fn a_kill_9_loop_loses_no_event_and_never_gives_one_event_two_delivery_ids() {
    let r = Receiver::start(vec![], Answer::Ok);
    let mut s = Server::fake_with(&hook(&r.url("/k"), "[\"job.queued\", \"job.settled\"]", ""));
    let mut jobs = Vec::new();
    for round in 0..8u64 {
        for i in 0..3 {
            jobs.push(id(&submit(
                &s,
                ALICE,
                "ws1",
                &["fake-exit", "0"],
                &format!("k{round}-{i}"),
            )));
        }
        // Killed at a varying moment: before, during or after deliveries.
        std::thread::sleep(Duration::from_millis((round * 37) % 150));
        s.kill9();
        s.restart(None);
    }
    for j in &jobs {
        settled(&s, ALICE, "ws1", j);
    }
    let want = jobs.len() * 2;
    wait_for_secs(
        || {
            let got: std::collections::BTreeSet<i64> = r
                .accepted()
                .iter()
                .map(|x| x.json()["event"]["seq"].as_i64().unwrap())
                .collect();
            got.len() == want
        },
        60,
        "every event was delivered",
    );
    let mut id_of_seq: BTreeMap<i64, String> = BTreeMap::new();
    let mut seq_of_id: BTreeMap<String, i64> = BTreeMap::new();
    for x in r.seen() {
        let v = x.json();
        let (seq, did) = (
            v["event"]["seq"].as_i64().unwrap(),
            x.header("x-airlock-delivery").to_string(),
        );
        assert_eq!(
            x.header("x-airlock-signature-256"),
            hmac(SECRET.as_bytes(), &x.body)
        );
        assert_eq!(
            id_of_seq.entry(seq).or_insert(did.clone()),
            &did,
            "one id per event"
        );
        assert_eq!(
            seq_of_id.entry(did).or_insert(seq),
            &seq,
            "one event per id"
        );
    }
    let kinds: BTreeMap<String, usize> = r.accepted().iter().fold(BTreeMap::new(), |mut m, x| {
        *m.entry(x.json()["event"]["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
        m
    });
    assert!(
        kinds["job.queued"] >= jobs.len() && kinds["job.settled"] >= jobs.len(),
        "{kinds:?}"
    );
}

/// An `https://` receiver is reached over TLS when its certificate chains to the
/// subscription's `ca_file`; without it, the certificate is not believed and the attempt fails
/// naming TLS.
#[test]
fn an_https_receiver_is_believed_only_through_its_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::engine2::make_certs(dir.path());
    let server = dir.path().join("https_receiver.py");
    std::fs::write(
        &server,
        "import http.server, ssl, sys\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_POST(self):\n\
         \x20       body = self.rfile.read(int(self.headers['Content-Length']))\n\
         \x20       print(self.path, self.headers['X-Airlock-Delivery'], flush=True)\n\
         \x20       self.send_response(204)\n\
         \x20       self.end_headers()\n\
         \x20   def log_message(self, *a):\n\
         \x20       pass\n\
         srv = http.server.HTTPServer(('127.0.0.1', 0), H)\n\
         ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
         ctx.load_cert_chain(sys.argv[1], sys.argv[2])\n\
         srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n\
         print(srv.server_address[1], flush=True)\n\
         srv.serve_forever()\n",
    )
    .unwrap();
    let mut child = std::process::Command::new("python3")
        .arg(&server)
        .arg(dir.path().join("server.pem"))
        .arg(dir.path().join("server.key"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let (tx, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let url = format!("https://127.0.0.1:{port}");
    let extra = [
        hook(
            &format!("{url}/trusted"),
            "[\"job.queued\"]",
            &format!(
                "ca_file = {:?}",
                dir.path().join("ca.pem").display().to_string()
            ),
        ),
        hook(
            &format!("{url}/untrusted"),
            "[\"job.queued\"]",
            "max_attempts = 1",
        ),
    ]
    .concat();
    let s = Server::fake_with(&extra);
    submit(&s, ALICE, "ws1", &["fake-exit", "0"], "t1");
    let line = got
        .recv_timeout(Duration::from_secs(30))
        .expect("a delivery over TLS");
    assert!(line.starts_with("/trusted whd_"), "{line}");
    wait_for_secs(
        || by_url_count(&s, "/untrusted", "failed") == 1,
        30,
        "the untrusted receiver's delivery failed",
    );
    let sub = subscriptions(&s)
        .into_iter()
        .find(|v| v["url"].as_str().unwrap().ends_with("/untrusted"))
        .unwrap();
    let err = sub["deliveries"][0]["last_error"].as_str().unwrap();
    assert!(err.contains("TLS"), "{err}");
    assert!(
        got.try_recv().is_err(),
        "nothing reached the receiver untrusted"
    );
    let _ = child.kill();
    let _ = child.wait();
}
