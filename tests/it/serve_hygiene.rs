//! HTTP hygiene over loopback: every response carries a request id (the client's when it is a
//! safe token, ours otherwise), error bodies carry it too, the daemon's log lines for a request
//! carry it and never the bearer token, unknown routes and wrong verbs answer in the error
//! envelope, and a panicking handler becomes a 500 envelope instead of a dropped connection.

use crate::support::daemon::{ALICE, Server};
use crate::support::http::exchange;
use serde_json::{Value, json};

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn post(s: &Server, method: &str, extra: &[(&str, &str)], body: Value) -> (u16, String, Value) {
    let auth = format!("Bearer {ALICE}");
    let mut headers = vec![("Authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    let (status, h, b) = exchange(
        &s.addr,
        "POST",
        &format!("/api/v1/{method}"),
        &headers,
        body.to_string().as_bytes(),
    )
    .expect("a response");
    let id = header(&h, "x-request-id")
        .unwrap_or_else(|| panic!("no x-request-id on {method}: {h:?}"))
        .to_string();
    (
        status,
        id,
        serde_json::from_slice(&b).unwrap_or(Value::Null),
    )
}

#[test]
fn request_ids_are_echoed_generated_or_replaced_and_named_in_errors() {
    let mut s = Server::fake();
    let log = s.dir.path().join("serve.log");
    s.log = Some(log.clone());
    s.env.push(("AIRLOCK_LOG".into(), "debug".into()));
    s.restart(None);

    // A safe client id is kept, on success and on error.
    let (status, id, _) = post(
        &s,
        "integration.list",
        &[("X-Request-Id", "ci-run-42.step:7")],
        json!({"workspace_id": "ws1"}),
    );
    assert_eq!((status, id.as_str()), (200, "ci-run-42.step:7"));
    let (status, id, body) = post(
        &s,
        "integration.show",
        &[("X-Request-Id", "mine-1")],
        json!({"workspace_id": "ws1", "candidate_id": "cand_nope"}),
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(id, "mine-1");
    assert_eq!(body["error"]["request_id"], "mine-1", "{body}");

    // None, or one we would not keep: ours, fresh each time.
    let (_, a, _) = post(&s, "integration.list", &[], json!({"workspace_id": "ws1"}));
    let (_, b, _) = post(&s, "integration.list", &[], json!({"workspace_id": "ws1"}));
    assert!(
        a.starts_with("http_") && b.starts_with("http_") && a != b,
        "{a} {b}"
    );
    let long = "x".repeat(500);
    for hostile in ["<script>alert(1)</script>", "a b", long.as_str()] {
        let (_, id, _) = post(
            &s,
            "integration.list",
            &[("X-Request-Id", hostile)],
            json!({"workspace_id": "ws1"}),
        );
        assert!(id.starts_with("http_"), "{hostile:?} was kept as {id}");
    }
    // Errors before a method runs carry it too.
    let (status, h, b) = exchange(&s.addr, "POST", "/api/v1/integration.list", &[], b"{}").unwrap();
    let body: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(status, 401);
    assert_eq!(
        body["error"]["request_id"].as_str(),
        header(&h, "x-request-id"),
        "{body}"
    );

    // Unknown routes and wrong verbs answer in the envelope.
    let (status, _, b) = exchange(&s.addr, "GET", "/nope", &[], b"").unwrap();
    let body: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (status, _, b) = exchange(&s.addr, "GET", "/api/v1/integration.list", &[], b"").unwrap();
    let body: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (405, Some("method_not_allowed")),
        "{body}"
    );

    // The log: the request's lines carry its id; the token appears nowhere.
    s.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("request_id=mine-1"), "{text}");
    assert!(text.contains("request_id=ci-run-42.step:7"), "{text}");
    assert!(
        !text.contains(ALICE),
        "the bearer token was logged:\n{text}"
    );
    assert!(
        !text.contains("<script>"),
        "a hostile id reached the log:\n{text}"
    );
}

#[test]
fn a_panicking_handler_answers_a_500_envelope_with_the_request_id() {
    use tower::ServiceExt;
    let app = airlock::api::hygiene::wrap(axum::Router::new().route(
        "/boom",
        axum::routing::get(|| async {
            if std::hint::black_box(true) {
                panic!("handler bug");
            }
            "unreachable"
        }),
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resp = rt.block_on(async {
        app.oneshot(
            axum::http::Request::get("/boom")
                .header("x-request-id", "boom-1")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap()
    });
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["x-request-id"], "boom-1");
    let bytes = rt
        .block_on(axum::body::to_bytes(resp.into_body(), 1 << 20))
        .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["code"], "internal", "{body}");
    assert!(
        !body.to_string().contains("handler bug"),
        "the panic's text stays in the log: {body}"
    );
}
