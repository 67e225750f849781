//! `GET /metrics` over loopback on real Docker: the figures move with the work (claims,
//! proposals, sandbox verifications of the dry run and the expected tests, source_changed,
//! queue wait, artifact fsyncs, HTTP requests by method and code), and `metrics_listen` moves
//! the endpoint to its own address.

use crate::support::daemon::{ALICE, BOB, Server, wait_for};
use crate::support::http::request;
use serde_json::json;
use std::collections::BTreeMap;

const EXTRA: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                     [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

/// Every sample of a scrape: `name{labels}` -> value.
pub(crate) fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let (status, body) = request(addr, "GET", "/metrics", None, b"").expect("a response");
    let text = String::from_utf8(body).unwrap();
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

pub(crate) fn get(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or(&0.0)
}

#[test]
fn the_figures_move_with_the_work() {
    if !crate::toolchain::built("git") {
        return;
    }
    let s = Server::governed_with(EXTRA);
    let before = scrape(&s.addr);
    assert_eq!(get(&before, "airlock_claims_active"), 0.0);
    assert!(
        before.contains_key("airlock_proposals{state=\"in_review\"}"),
        "every state is exported: {before:?}"
    );

    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c"}),
    );
    std::fs::write(s.repo.join("README"), "base\nmore\n").unwrap();
    let diff = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    std::fs::write(s.repo.join("README"), "base\n").unwrap();
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": String::from_utf8(diff.stdout).unwrap(),
               "expected_tests": [["true"], ["sh", "-c", "echo x >> README"]],
               "idempotency_key": "p"}),
    );
    let id = p["proposal"]["proposal_id"].clone();
    let rev = p["proposal"]["current_revision"].clone();
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "r"}),
    );
    let vid = s.ok(
        ALICE,
        "patch.validate",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
               "idempotency_key": "v"}),
    )["validation"]["validation_id"]
        .clone();
    wait_for(
        || {
            s.ok(
                BOB,
                "patch.validation_show",
                json!({"workspace_id": "ws1", "validation_id": vid}),
            )["validation"]["complete"]
                == true
        },
        "the validation settles",
    );
    let (status, _) = s.call(ALICE, "no.such_method", json!({}));
    assert_eq!(status, 404);

    // A verification's counters follow its settled row by a moment, and the two expected tests
    // run concurrently, so either may be counted last: wait until all three runs are.
    let settled = [
        "airlock_verifications_total{profile=\"git\",status=\"passed\"}",
        "airlock_verifications_total{profile=\"default\",status=\"passed\"}",
        "airlock_verifications_total{profile=\"default\",status=\"source_changed\"}",
    ];
    let mut after = BTreeMap::new();
    wait_for(
        || {
            after = scrape(&s.addr);
            let counted: f64 = after
                .iter()
                .filter(|(k, _)| k.starts_with("airlock_verifications_total{"))
                .map(|(_, v)| v)
                .sum();
            counted >= 3.0 && get(&after, "airlock_live_containers") == 0.0
        },
        "the three verifications are counted",
    );
    for key in settled {
        assert_eq!(get(&after, key), 1.0, "{key}: {after:?}");
    }
    assert_eq!(get(&after, "airlock_claims_active"), 1.0, "{after:?}");
    assert_eq!(get(&after, "airlock_proposals{state=\"in_review\"}"), 1.0);
    assert_eq!(get(&after, "airlock_source_changed_total"), 1.0);
    assert_eq!(
        get(&after, "airlock_verification_queue_wait_seconds_count"),
        2.0
    );
    assert_eq!(get(&after, "airlock_verification_queue_depth"), 0.0);
    assert_eq!(
        get(&after, "airlock_live_containers"),
        0.0,
        "every container is gone"
    );
    assert_eq!(
        get(
            &after,
            "airlock_verification_duration_seconds_count{profile=\"git\"}"
        ),
        1.0
    );
    assert_eq!(get(&after, "airlock_fsync_seconds_count"), 3.0, "{after:?}");
    assert!(get(&after, "airlock_fsync_seconds_sum") > 0.0);
    assert_eq!(
        get(
            &after,
            "airlock_http_requests_total{method=\"patch.validate\",code=\"200\"}"
        ),
        1.0,
        "{after:?}"
    );
    assert!(
        get(
            &after,
            "airlock_http_requests_total{method=\"patch.validation_show\",code=\"200\"}"
        ) >= 1.0
    );
    assert_eq!(
        get(
            &after,
            "airlock_http_requests_total{method=\"unknown\",code=\"404\"}"
        ),
        1.0,
        "{after:?}"
    );
    assert_eq!(
        get(
            &after,
            "airlock_http_request_duration_seconds_count{method=\"claim.acquire\"}"
        ),
        1.0
    );
    // The scrape before this one is counted too.
    assert!(
        get(
            &after,
            "airlock_http_requests_total{method=\"metrics\",code=\"200\"}"
        ) >= 1.0
    );
}

#[test]
fn metrics_listen_serves_metrics_on_its_own_address_only() {
    let s = Server::fake_with("metrics_listen = \"127.0.0.1:0\"\n");
    let addr = s
        .metrics_addr
        .clone()
        .expect("serve printed metrics_listening");
    assert_ne!(addr, s.addr);
    let m = scrape(&addr);
    assert!(m.contains_key("airlock_claims_active"), "{m:?}");
    let (status, _) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    assert_eq!(
        status, 404,
        "not on the API listener when metrics_listen is set"
    );
}

/// The names of the metric families the manual documents (every backticked `airlock_...` of
/// `docs/`).
fn documented_families() -> std::collections::BTreeSet<String> {
    let mut manual = String::new();
    for page in std::fs::read_dir(std::path::Path::new(crate::support::ROOT).join("docs")).unwrap()
    {
        let page = page.unwrap().path();
        if page.extension().is_some_and(|e| e == "md") {
            manual.push_str(&std::fs::read_to_string(&page).unwrap());
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for quoted in manual.split('`').skip(1).step_by(2) {
        let Some(name) = quoted.strip_prefix("airlock_") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(format!("airlock_{name}"));
        }
    }
    out
}

/// The first scrape of a daemon that has done nothing, read by the Prometheus project's own
/// OpenMetrics parser: the content type says OpenMetrics, the body parses, every family the
/// manual documents is there, and the ones whose labels are known in advance have their zero
/// samples (so the first increment is a visible change, not a new series).
#[test]
fn the_first_scrape_is_valid_openmetrics_with_every_documented_family() {
    let s = Server::fake_with("");
    let dir = tempfile::tempdir().unwrap();
    let out = crate::support::python_json(
        "openmetrics_scrape.py",
        dir.path(),
        &json!({"url": format!("http://{}/metrics", s.addr)}),
    );
    assert_eq!(
        out["content_type"],
        json!(airlock::metrics::CONTENT_TYPE),
        "{out}"
    );
    let families = out["families"].as_object().unwrap();
    let documented = documented_families();
    assert!(documented.len() >= 25, "{documented:?}");
    for name in &documented {
        // OpenMetrics names a counter family without its samples' `_total`.
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            families.contains_key(family),
            "{name} is documented but not scraped; families: {:?}",
            families.keys().collect::<Vec<_>>()
        );
    }
    for name in families.keys() {
        assert!(
            documented.contains(name) || documented.contains(&format!("{name}_total")),
            "{name} is scraped but the manual does not document it"
        );
    }
    let samples = |family: &str| -> Vec<serde_json::Value> {
        families[family]["samples"].as_array().unwrap().clone()
    };
    let recovery = samples("airlock_recovery_actions");
    assert_eq!(families["airlock_recovery_actions"]["type"], "counter");
    for kind in airlock::metrics::RECOVERY_KINDS {
        assert!(
            recovery
                .iter()
                .any(|s| s[0] == "airlock_recovery_actions_total"
                    && s[1]["kind"] == kind
                    && s[2] == 0.0),
            "recovery kind {kind} at zero: {recovery:?}"
        );
    }
    let verifications = samples("airlock_verifications");
    for status in [
        "passed",
        "failed",
        "timed_out",
        "source_changed",
        "error",
        "cancelled",
    ] {
        assert!(
            verifications
                .iter()
                .any(|s| s[1]["profile"] == "default" && s[1]["status"] == status),
            "verifications of default/{status} at zero: {verifications:?}"
        );
    }
    assert!(
        !samples("airlock_engine_up").is_empty(),
        "each engine's gauge is there from the start"
    );
}
