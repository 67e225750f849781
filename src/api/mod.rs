//! HTTP API: the only module that names axum. `POST /api/v1/<method>` with a JSON body,
//! `GET /healthz`, `GET /readyz`. Identity comes from `Authorization: Bearer <token>` only.
//! Errors are `{"error":{"code","message"}}` with a stable code and an HTTP status.

mod dispatch;
pub mod event_stream;
pub mod hygiene;
mod job_log;
pub mod mcp;
pub mod methods;
pub mod openapi;
pub mod seed;
pub mod server;
pub mod ui;

use crate::domain::claim::ClaimEvent;
use crate::domain::proposal::ProposalEvent;
use crate::engine::service::{Actor, Service, ServiceError, authenticate};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use dispatch::{Reply, dispatch, json_body};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Body limit of small control calls.
pub const SMALL_BODY_LIMIT: usize = 64 * 1024;
/// Body limit of `integration.verify` (an argv of 64 entries of 16 KiB, JSON-escaped).
pub const VERIFY_BODY_LIMIT: usize = 8 * 1024 * 1024;
/// Body limit of `integration.prepare` (up to 64 submissions).
pub const PREPARE_BODY_LIMIT: usize = 256 * 1024;
/// Body limit of `evidence.record` (a 16 MiB transcript, JSON-escaped, plus the envelope).
pub const EVIDENCE_BODY_LIMIT: usize = 40 * 1024 * 1024;
/// Body limit of `integration.resolve` (the aggregate cap).
pub const RESOLVE_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Body limit per method, or `None` for an unknown method (see [`methods::METHODS`]).
pub fn body_limit(method: &str, config: &crate::config::Config) -> Option<usize> {
    methods::spec(method).map(|m| m.body.bytes(config))
}

/// Shared state of the router.
#[derive(Clone)]
pub struct AppState {
    pub service: Arc<Service>,
    pub ready: Arc<AtomicBool>,
    /// Serialized `integration.show` answers (see [`ShowBodies`]).
    pub show_bodies: Arc<ShowBodies>,
    /// `GET /openapi.json`, serialized once (it depends only on the config).
    pub openapi: Arc<std::sync::OnceLock<axum::body::Bytes>>,
    /// The web page's signed-in browsers.
    pub ui_sessions: Arc<ui::UiSessions>,
    /// The bound on open `GET /api/v1/events` streams.
    pub event_streams: event_stream::StreamSlots,
    /// The open `/mcp` sessions, bounded per token and overall.
    pub mcp_sessions: Arc<mcp::McpSessions>,
}

impl AppState {
    pub fn new(service: Arc<Service>, ready: Arc<AtomicBool>) -> AppState {
        let idle = service.config().mcp_session_idle;
        AppState {
            service,
            ready,
            show_bodies: Arc::default(),
            openapi: Arc::default(),
            ui_sessions: Arc::default(),
            event_streams: Default::default(),
            mcp_sessions: Arc::new(mcp::McpSessions::new(idle)),
        }
    }
}

/// The last serialized `integration.show` answer of each candidate, with what it was built
/// from: the stored version of the record and the serialized verifications. An answer is reused
/// only when both are byte-for-byte what this request read, so it is exactly the body this
/// request would serialize; the owned-evidence check still runs on every request.
#[derive(Default)]
pub struct ShowBodies {
    entries: std::sync::Mutex<std::collections::HashMap<String, ShowBody>>,
}

struct ShowBody {
    version: u64,
    verifications: Vec<u8>,
    body: axum::body::Bytes,
}

impl ShowBodies {
    fn get(&self, cid: &str, version: u64, verifications: &[u8]) -> Option<axum::body::Bytes> {
        let entries = self.entries.lock().expect("never poisoned");
        entries
            .get(cid)
            .filter(|b| b.version == version && b.verifications == verifications)
            .map(|b| b.body.clone())
    }

    fn put(&self, cid: &str, body: ShowBody) {
        let mut entries = self.entries.lock().expect("never poisoned");
        if entries.len() >= crate::limits::SHOW_BODY_CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(cid.to_string(), body);
    }
}

/// An error answer: the envelope `{"error": {code, message, request_id?}}`.
struct ApiError(ServiceError, Option<String>);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(&self.0);
        let body = envelope(&self.0, self.1);
        (status, axum::Json(body)).into_response()
    }
}

/// The HTTP status of each error code (the web page answers the same ones).
fn status_of(e: &ServiceError) -> StatusCode {
    match e {
        ServiceError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        ServiceError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        ServiceError::PermissionDenied(_) => StatusCode::FORBIDDEN,
        ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
        ServiceError::Conflict(_) => StatusCode::CONFLICT,
        ServiceError::FailedPrecondition(_) => StatusCode::PRECONDITION_FAILED,
        ServiceError::ResourceExhausted(_) => StatusCode::PAYLOAD_TOO_LARGE,
        ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        ServiceError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        ServiceError::DeadlineExceeded(_) => StatusCode::REQUEST_TIMEOUT,
    }
}

/// The error envelope of `e`. An internal error's text can hold host paths, git argv or
/// environment: it goes to the log under an id, and the client gets the code, a short message
/// and that id.
fn envelope(e: &ServiceError, request_id: Option<String>) -> Value {
    let mut body = if let ServiceError::Internal(detail) = e {
        let error_id = crate::ids::new_error_id();
        tracing::error!(%error_id, error = %detail, "internal error");
        json!({"error": {
            "code": e.code(),
            "message": format!("internal error; the server log has the details under error id {error_id}"),
            "error_id": error_id,
        }})
    } else {
        json!({"error": {"code": e.code(), "message": e.to_string()}})
    };
    if let Some(field) = e.field() {
        body["error"]["field"] = json!(field);
    }
    if let Some(id) = request_id {
        body["error"]["request_id"] = json!(id);
    }
    body
}

/// Builds the router.
pub fn router(state: AppState) -> Router {
    let routes = Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi_json))
        .route("/api/v1/keys", get(keys))
        .route("/api/v1/{method}", post(call))
        .route("/api/v1/jobs/{job_id}/log", get(job_log::job_log))
        .route("/api/v1/events", get(event_stream::events))
        .merge(
            Router::new()
                .nest_service("/mcp", mcp::service(state.clone()))
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    mcp::guard,
                )),
        )
        .merge(ui::router());
    // `/metrics` is on this listener unless the config gives it its own.
    let routes = if state.service.config().metrics_listen.is_none() {
        routes.route("/metrics", get(metrics))
    } else {
        routes
    };
    let routes = routes
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_verb)
        .layer(axum::middleware::from_fn_with_state(state.clone(), track))
        .with_state(state);
    hygiene::wrap(routes)
}

/// The router of a separate `metrics_listen` address: `/metrics` only.
pub fn metrics_router(state: AppState) -> Router {
    let routes = Router::new()
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_verb)
        .with_state(state);
    hygiene::wrap(routes)
}

/// `GET /metrics`: OpenMetrics text ([`crate::metrics::CONTENT_TYPE`]); the state gauges are read from SQLite (and
/// the dependency set store) now.
/// Unauthenticated, like the probes: it holds counts, never names, ids or content.
async fn metrics(State(st): State<AppState>) -> Response {
    match st.service.scrape_metrics().await {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                crate::metrics::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(e) => ApiError(e, None).into_response(),
    }
}

/// `GET /openapi.json`: the API's OpenAPI 3.1 document. Unauthenticated: it describes the
/// methods, never the data.
async fn openapi_json(State(st): State<AppState>) -> Response {
    let body = st.openapi.get_or_init(|| {
        axum::body::Bytes::from(openapi::document(st.service.config()).to_string())
    });
    json_body(body.clone())
}

/// `GET /api/v1/keys`: the public keys attestations are checked with (the signing key's
/// first), its id and the verifier id. Unauthenticated: public keys are public, and a
/// consumer checking an attestation offline needs nothing else.
async fn keys(State(st): State<AppState>) -> Response {
    axum::Json(keys_document(st.service.attestor())).into_response()
}

/// The body of `GET /api/v1/keys` (also `airlock doctor --json`'s `attestation_keys`).
pub fn keys_document(a: &crate::engine::attesting::Attestor) -> Value {
    let signing = a.signing_key_id();
    json!({
        "verifier_id": a.verifier.id,
        "signing_key_id": signing,
        "keys": a.keys().iter().map(|k| json!({
            "key_id": k.key_id,
            "public_key_pem": k.pem,
            "signing": Some(k.key_id.as_str()) == signing,
        })).collect::<Vec<_>>(),
    })
}

/// The label of a request in the HTTP metrics: the API method when it is one we route (a
/// bounded set), the probe's name, or `unknown`.
fn metric_label(path: &str, config: &crate::config::Config) -> String {
    match path {
        "/healthz" => "healthz".into(),
        "/readyz" => "readyz".into(),
        "/metrics" => "metrics".into(),
        "/openapi.json" => "openapi".into(),
        "/mcp" => "mcp".into(),
        "/api/v1/events" => "events".into(),
        "/api/v1/keys" => "keys".into(),
        p if p == "/ui" || p.starts_with("/ui/") => "ui".into(),
        p => match p.strip_prefix("/api/v1/") {
            Some(m) if body_limit(m, config).is_some() => m.to_string(),
            _ => "unknown".into(),
        },
    }
}

/// Counts every request by method label and status code, with its latency.
async fn track(
    State(st): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let label = metric_label(req.uri().path(), st.service.config());
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    let m = st.service.metrics();
    m.http_requests
        .get_or_create(&crate::metrics::HttpLabels {
            method: label.clone(),
            code: resp.status().as_u16().to_string(),
        })
        .inc();
    m.http_seconds
        .get_or_create(&crate::metrics::MethodLabel { method: label })
        .observe(started.elapsed().as_secs_f64());
    resp
}

/// Any other path: the error envelope, not axum's empty 404.
async fn no_route(req: axum::extract::Request) -> Response {
    if is_page(req.uri().path()) {
        return ui::no_page(req.method(), req.uri().path(), false).await;
    }
    let id = hygiene::request_id(&req);
    ApiError(
        ServiceError::NotFound(format!(
            "no route {} {}: methods are POST /api/v1/<method>",
            req.method(),
            req.uri().path()
        )),
        id,
    )
    .into_response()
}

/// Whether `path` is under the web page (answered in HTML, not the JSON envelope).
fn is_page(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// A known path with the wrong HTTP verb.
async fn wrong_verb(req: axum::extract::Request) -> Response {
    if is_page(req.uri().path()) {
        return ui::no_page(req.method(), req.uri().path(), true).await;
    }
    let mut body = json!({"error": {
        "code": "method_not_allowed",
        "message": format!("{} is not accepted on {}: methods are POST /api/v1/<method>, probes GET", req.method(), req.uri().path()),
    }});
    if let Some(id) = hygiene::request_id(&req) {
        body["error"]["request_id"] = json!(id);
    }
    (StatusCode::METHOD_NOT_ALLOWED, axum::Json(body)).into_response()
}

async fn readyz(State(st): State<AppState>) -> Response {
    if st.ready.load(Ordering::SeqCst) {
        axum::Json(json!({"status": "ready"})).into_response()
    } else {
        ApiError(
            ServiceError::Unavailable("recovery has not finished".into()),
            None,
        )
        .into_response()
    }
}

fn bearer(headers: &HeaderMap) -> Result<&str, ServiceError> {
    let mut all = headers.get_all(axum::http::header::AUTHORIZATION).iter();
    let h = all.next().ok_or_else(|| {
        ServiceError::Unauthenticated("missing Authorization: Bearer <token>".into())
    })?;
    if all.next().is_some() {
        return Err(ServiceError::Unauthenticated(
            "more than one Authorization header; send exactly one".into(),
        ));
    }
    let h = h
        .to_str()
        .map_err(|_| ServiceError::Unauthenticated("Authorization header is not ASCII".into()))?;
    h.strip_prefix("Bearer ")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ServiceError::Unauthenticated("Authorization must be \"Bearer <token>\"".into())
        })
}

/// A GET route's query string, or the envelope refusing it (axum's own rejection is plain
/// text).
pub(crate) fn query_or_refuse<T>(
    q: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
    request_id: Option<String>,
) -> Result<T, Box<Response>> {
    q.map(|axum::extract::Query(q)| q).map_err(|e| {
        Box::new(
            ApiError(
                ServiceError::invalid(format!("the query string: {}", e.body_text())),
                request_id,
            )
            .into_response(),
        )
    })
}

/// Parses a request body. It must be one JSON object (an array would bind fields by position,
/// bypassing names and the refusal of unknown fields); errors name the field path
/// (`files[0].path`) as well as the position.
pub fn parse<T: DeserializeOwned>(method: &str, body: &[u8]) -> Result<T, ServiceError> {
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(ServiceError::invalid(format!(
            "{method}: the request body must be a JSON object"
        )));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let e = match serde_path_to_error::deserialize(&mut de) {
        Ok(value) => {
            de.end()
                .map_err(|e| ServiceError::invalid(format!("{method}: body: {e}")))?;
            return Ok(value);
        }
        Err(e) => e,
    };
    // JSON Schema's `integer` includes 3.0, serde's integers do not: before refusing, retry
    // once with every integral float written as the integer it is (from_slice checks the end).
    if e.inner().to_string().contains("floating point")
        && let Some(v) = integral_floats_as_integers(body)
        && let Ok(value) = serde_json::from_value(v)
    {
        return Ok(value);
    }
    let path = e.path().to_string();
    let field = if path == "." {
        "body".to_string()
    } else {
        path
    };
    let inner = without_type_names(&e.into_inner().to_string());
    let mut message = format!("{method}: {field}: {inner}");
    if let Some(hint) = seed::refused_field(method, &field, &inner) {
        message.push_str("; ");
        message.push_str(&hint);
    }
    Err(ServiceError::invalid_field(field, message))
}

/// serde's message with the Rust type names it carries (`expected struct SubmissionRef`) put
/// in the client's terms: the field path already says where, the manual says what.
fn without_type_names(message: &str) -> String {
    let mut out = message.to_string();
    for (pattern, plain) in [
        ("expected struct ", "expected a JSON object"),
        ("expected enum ", "expected one of the documented values"),
        ("untagged enum ", "accepted shape"),
        ("expected tuple struct ", "expected a JSON array"),
    ] {
        while let Some(at) = out.find(pattern) {
            let rest = &out[at + pattern.len()..];
            let name_len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.replace_range(at..at + pattern.len() + name_len, plain);
        }
    }
    out
}

/// `body` with every float that is exactly an integer (3.0, 1e3; below 2^53, where floats are
/// exact) replaced by that integer; `None` when there is none or the body is not JSON.
fn integral_floats_as_integers(body: &[u8]) -> Option<Value> {
    fn walk(v: &mut Value) -> bool {
        match v {
            Value::Number(n) if n.is_f64() => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    *v = Value::from(f as i64);
                    true
                } else {
                    false
                }
            }
            Value::Array(a) => a.iter_mut().fold(false, |c, x| walk(x) | c),
            Value::Object(o) => o.values_mut().fold(false, |c, x| walk(x) | c),
            _ => false,
        }
    }
    let mut v: Value = serde_json::from_slice(body).ok()?;
    walk(&mut v).then_some(v)
}

async fn call(
    State(st): State<AppState>,
    Path(method): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let conn = req.extensions().get::<server::ConnHandle>().cloned();
    let id = hygiene::request_id(&req);
    let (parts, body) = req.into_parts();
    match handle(st, &method, parts.headers, body, conn, id.clone()).await {
        Ok(reply) => reply.into_response(),
        Err(e) => ApiError(e, id).into_response(),
    }
}

async fn handle(
    st: AppState,
    method: &str,
    headers: HeaderMap,
    body: Body,
    conn: Option<server::ConnHandle>,
    parts_request_id: Option<String>,
) -> Result<Reply, ServiceError> {
    if !st.ready.load(Ordering::SeqCst) {
        return Err(ServiceError::Unavailable(
            "recovery has not finished".into(),
        ));
    }
    let token = bearer(&headers)?;
    let actor = authenticate(st.service.config(), token)
        .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))?;
    let limit = body_limit(method, st.service.config()).ok_or_else(|| {
        ServiceError::NotFound(match seed::unknown_method(method) {
            Some(hint) => format!("unknown method {method:?}: {hint}"),
            None => match methods::suggestion(method) {
                Some(hint) => format!("unknown method {method:?}; {hint}"),
                None => format!("unknown method {method:?}"),
            },
        })
    })?;
    let body_timeout = st.service.config().body_read_timeout;
    let bytes = tokio::time::timeout(body_timeout, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| {
            ServiceError::DeadlineExceeded(format!(
                "{method}: the request body did not arrive within body_read_timeout_seconds {}",
                body_timeout.as_secs()
            ))
        })?
        .map_err(|_| {
            ServiceError::exhausted(format!("{method}: request body exceeds {limit} bytes"))
        })?;
    // From here on the request is being served: its connection is not closed to make room.
    let _dispatching = conn.as_ref().map(server::ConnHandle::dispatching);
    run(&st, actor, method, bytes, parts_request_id).await
}

/// Runs one parsed call: in its own task, so a client that disconnects cannot cancel a
/// half-done state change, and within the budget that bounds how long the client waits. The
/// task keeps the request's span (and so its request id) on every line it logs. Shared by the
/// HTTP methods and the MCP tools.
async fn run(
    st: &AppState,
    actor: Actor,
    method: &str,
    bytes: axum::body::Bytes,
    request_id: Option<String>,
) -> Result<Reply, ServiceError> {
    let svc = st.service.clone();
    let bodies = st.show_bodies.clone();
    let method_owned = method.to_string();
    use tracing::Instrument;
    let task = tokio::spawn(
        crate::engine::request::scope(request_id, async move {
            let reply = dispatch(&svc, &bodies, &actor, &method_owned, &bytes).await?;
            // A keyed call answers what its key's first answer was, byte for byte (the
            // workflow has authorised it and judged it a new call or a replay already).
            if let Some(keyed) = crate::engine::idempotency::KeyedBody::of(&bytes) {
                let sent = reply.into_bytes();
                return Ok(Reply::Json(
                    svc.seal(&actor, &method_owned, keyed, sent).await,
                ));
            }
            Ok(reply)
        })
        .instrument(tracing::Span::current()),
    );
    let budget = call_budget();
    match tokio::time::timeout(budget, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ServiceError::internal(format!("{method} failed: {e}"))),
        Err(_) => Err(ServiceError::Unavailable(format!(
            "{method} exceeded its {} s budget and goes on; retry with the same idempotency key, which waits for it and answers its result",
            budget.as_secs_f64()
        ))),
    }
}

/// Environment variable setting the call budget in milliseconds (test-hooks builds only).
pub const TEST_CALL_BUDGET_ENV: &str = "AIRLOCK_TEST_CALL_BUDGET_MS";

/// [`crate::limits::CONTROL_CALL_BUDGET`]; in test-hooks builds `AIRLOCK_TEST_CALL_BUDGET_MS`
/// may shorten it, so a test reaches a call that outlives its budget without waiting a minute.
fn call_budget() -> std::time::Duration {
    if cfg!(feature = "test-hooks")
        && let Some(ms) = std::env::var(TEST_CALL_BUDGET_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
    {
        return std::time::Duration::from_millis(ms);
    }
    crate::limits::CONTROL_CALL_BUDGET
}

#[cfg(test)]
mod tests {
    use super::{parse, without_type_names};
    use crate::wire::ListParams;

    #[test]
    fn refusals_name_no_rust_type() {
        let m = without_type_names("invalid type: string \"x\", expected struct SubmissionRef");
        assert_eq!(m, "invalid type: string \"x\", expected a JSON object");
        assert_eq!(
            without_type_names("data did not match any variant of untagged enum Action"),
            "data did not match any variant of accepted shape"
        );
        let e = parse::<crate::wire::PrepareParams>(
            "integration.prepare",
            br#"{"workspace_id": "w", "submissions": ["run_1"], "target_ref": "refs/heads/main",
                 "expected_target_revision": "0000000000000000000000000000000000000000",
                 "idempotency_key": "k"}"#,
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("submissions[0]"), "{text}");
        assert!(text.contains("expected a JSON object"), "{text}");
        assert!(!text.contains("SubmissionRef"), "{text}");
    }

    #[test]
    fn integral_floats_are_integers_and_nothing_else_is() {
        let p: ListParams = parse("m", br#"{"workspace_id": "w", "limit": 5.0}"#).unwrap();
        assert_eq!(p.limit, Some(5));
        let p: ListParams = parse("m", br#"{"workspace_id": "w", "limit": 1e1}"#).unwrap();
        assert_eq!(p.limit, Some(10));
        for (body, field) in [
            (&br#"{"workspace_id": "w", "limit": 5.5}"#[..], "limit"),
            (br#"{"workspace_id": "w", "limit": -1.0}"#, "limit"),
            (br#"{"workspace_id": 1.0, "limit": 5}"#, "workspace_id"),
        ] {
            let e = parse::<ListParams>("m", body).unwrap_err();
            assert_eq!(e.field(), Some(field), "{e}");
        }
        // Trailing bytes stay refused whichever way the body parsed.
        for body in [
            &br#"{"workspace_id": "w", "limit": 5.0} x"#[..],
            br#"{"workspace_id": "w", "limit": 5} x"#,
        ] {
            assert!(parse::<ListParams>("m", body).is_err());
        }
    }
}
