//! Jobs over HTTP in a test daemon: submit, show, wait until settled.

use super::daemon::Server;
use serde_json::{Value, json};
use std::time::Duration;

/// `job.submit` of `argv` on `main` of `ws` with idempotency key `key`; the job.
pub fn submit(s: &Server, token: &str, ws: &str, argv: &[&str], key: &str) -> Value {
    s.ok(
        token,
        "job.submit",
        json!({"workspace_id": ws, "revision": "main", "argv": argv, "idempotency_key": key}),
    )["job"]
        .clone()
}

/// `job.show`: the job.
pub fn show(s: &Server, token: &str, ws: &str, id: &str) -> Value {
    s.ok(token, "job.show", json!({"workspace_id": ws, "job_id": id}))["job"].clone()
}

/// Polls `job.show` until the job is neither queued nor running (120 s at most).
pub fn settled(s: &Server, token: &str, ws: &str, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let j = show(s, token, ws, id);
        if !matches!(j["state"].as_str(), Some("queued" | "running")) {
            return j;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job never settled: {j}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A job's id.
pub fn id(j: &Value) -> String {
    j["job_id"].as_str().unwrap().to_string()
}
