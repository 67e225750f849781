//! What wraps every route (tower-http): a request id on every request (`x-request-id`, taken
//! from the client when it is a safe token, generated otherwise) echoed on the response, in the
//! request's tracing span (so in every log line the request causes) and in error bodies; one
//! span per request with method, path and id, and one log line when it finishes; a panic turned
//! into a `500` error envelope instead of a dropped connection; and `Authorization` and
//! `Cookie` marked sensitive so no layer ever logs them.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use std::any::Any;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

/// The header that carries a request's id, both ways.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// Longest client-supplied request id kept; a longer one is replaced.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// A client's id is kept only when it is a short token (`[A-Za-z0-9._:-]`): anything else (a
/// log-forging newline, markup, a megabyte) is replaced by one of ours.
pub fn acceptable_request_id(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_REQUEST_ID_BYTES
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Our HTTP request ids: `http_` and 32 hex characters (`req_` names delivery requests: one
/// prefix per kind of id).
#[derive(Clone, Copy, Default)]
struct MakeId;

impl MakeRequestId for MakeId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let id = format!("http_{}", crate::ids::new_creation_key());
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// Removes a client's request id we would not keep, so [`MakeId`] replaces it.
async fn drop_unacceptable_id(mut req: axum::extract::Request) -> axum::extract::Request {
    let bad = req
        .headers()
        .get_all(&REQUEST_ID_HEADER)
        .iter()
        .enumerate()
        .any(|(i, v)| i > 0 || !acceptable_request_id(v.as_bytes()));
    if bad {
        req.headers_mut().remove(&REQUEST_ID_HEADER);
    }
    req
}

/// The request's id, as the layers set it (for error bodies).
pub fn request_id<B>(req: &Request<B>) -> Option<String> {
    request_id_in(req.extensions())
}

/// The request id of a request already split into parts (the MCP tools see only those).
pub fn request_id_of(parts: &axum::http::request::Parts) -> Option<String> {
    request_id_in(&parts.extensions)
}

fn request_id_in(ext: &axum::http::Extensions) -> Option<String> {
    ext.get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .map(str::to_string)
}

fn panic_response(err: Box<dyn Any + Send + 'static>) -> Response<axum::body::Body> {
    let what = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("a panic");
    let error_id = crate::ids::new_error_id();
    tracing::error!(%error_id, panic = %what, "a request handler panicked");
    let body = serde_json::json!({"error": {
        "code": "internal",
        "message": format!("internal error; the server log has the details under error id {error_id}"),
        "error_id": error_id,
    }});
    Response::builder()
        .status(StatusCode::INTERNAL_SERVER_ERROR)
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("a static response builds")
}

/// Wraps `router` in the layers above. Outermost first: sensitive headers, the id's
/// sanitizing and setting, its propagation to the response, the trace span, panic catching.
pub fn wrap(router: Router) -> Router {
    use tower_http::catch_panic::CatchPanicLayer;
    use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
    use tower_http::trace::{DefaultOnResponse, TraceLayer};
    let trace = TraceLayer::new_for_http()
        .make_span_with(|req: &Request<axum::body::Body>| {
            let id = request_id(req).unwrap_or_default();
            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
        })
        .on_request(())
        .on_response(DefaultOnResponse::new().level(tracing::Level::INFO));
    // `Router::layer` wraps what is already there, so the last call is the outermost layer.
    router
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(REQUEST_ID_HEADER))
        .layer(SetRequestIdLayer::new(REQUEST_ID_HEADER, MakeId))
        .layer(axum::middleware::map_request(drop_unacceptable_id))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            header::COOKIE,
        ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_plain_tokens_are_kept_as_request_ids() {
        for ok in [
            "abc",
            "req_1",
            "a.b:c-d_e",
            &"x".repeat(MAX_REQUEST_ID_BYTES),
        ] {
            assert!(acceptable_request_id(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "a\nb",
            "<script>",
            "a/b",
            "\u{1b}[31m",
            &"x".repeat(MAX_REQUEST_ID_BYTES + 1),
        ] {
            assert!(!acceptable_request_id(bad.as_bytes()), "{bad:?}");
        }
    }
}
