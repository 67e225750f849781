//! The agent-facing methods as Model Context Protocol tools over streamable HTTP at `/mcp`
//! (rmcp). The tools are the registry's entries marked `agent`, with the same request schemas
//! as `/openapi.json`, and a tool call is the same call as `POST /api/v1/<method>`: the same
//! bearer token (from the MCP request's `Authorization` header) decides who is calling, the
//! same parse refuses unknown fields, the same dispatcher answers. A refusal is a tool result
//! with `isError` and the API's error envelope as its structured content.

use super::methods::{METHODS, Method, Schemas};
use super::{AppState, bearer, envelope, run};
use crate::engine::service::{ServiceError, authenticate};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The methods served as tools (to someone).
pub fn tools() -> impl Iterator<Item = &'static Method> {
    METHODS.iter().filter(|m| m.audience.is_tool())
}

/// The tools offered to `actor` (`None`: no known token): those it may call at all.
pub fn tools_for<'a>(
    config: &'a crate::config::Config,
    actor: Option<&'a crate::engine::service::Actor>,
) -> impl Iterator<Item = &'static Method> + 'a {
    tools().filter(move |m| m.audience.offers(config, actor))
}

/// The caller a request's bearer token names, if any.
fn caller(
    state: &AppState,
    ctx: &RequestContext<RoleServer>,
) -> Option<crate::engine::service::Actor> {
    let parts = ctx.extensions.get::<axum::http::request::Parts>()?;
    let token = bearer(&parts.headers).ok()?;
    authenticate(state.service.config(), token)
}

/// A tool's description: what it does, who may call it, and what it is an alias of.
pub fn description(m: &Method) -> String {
    let mut d = format!("{} (permission: {})", m.summary, m.permission);
    if let Some(of) = m.alias_of {
        d.push_str(&format!("; an alias of {of}"));
    }
    d
}

/// A tool's input schema: the method's request schema with the schemas it refers to under
/// `$defs` (a tool's schema stands alone; there is no `components` section to point into).
pub fn input_schema(m: &Method) -> Map<String, Value> {
    let mut all = Schemas::new();
    let name = (m.params)(&mut all);
    let mut root = all.remove(&name).expect("schema_of registers its own type");
    if !all.is_empty() {
        root["$defs"] = Value::Object(all.into_iter().collect());
    }
    let text = root
        .to_string()
        .replace("\"#/components/schemas/", "\"#/$defs/");
    match serde_json::from_str(&text).expect("a schema stays JSON") {
        Value::Object(o) => o,
        _ => unreachable!("a request schema is an object"),
    }
}

/// One MCP server per session; every call goes through the API's dispatcher.
#[derive(Clone)]
pub struct Tools {
    state: AppState,
}

impl Tools {
    async fn call(
        &self,
        req: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ServiceError> {
        let st = &self.state;
        if !st.ready.load(Ordering::SeqCst) {
            return Err(ServiceError::Unavailable(
                "recovery has not finished".into(),
            ));
        }
        let parts = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .ok_or_else(|| ServiceError::Unauthenticated("no HTTP request to read".into()))?;
        let token = bearer(&parts.headers)?;
        let actor = authenticate(st.service.config(), token)
            .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))?;
        let method = tools()
            .find(|m| m.name == req.name)
            .ok_or_else(|| ServiceError::NotFound(format!("unknown tool {:?}", req.name)))?;
        if !method.audience.offers(st.service.config(), Some(&actor)) {
            return Err(ServiceError::PermissionDenied(format!(
                "tool {:?} is not offered to this token: it needs {}",
                method.name, method.permission
            )));
        }
        let body = serde_json::to_vec(&req.arguments.unwrap_or_default())
            .expect("a JSON object serializes");
        let limit = method.body.bytes(st.service.config());
        if body.len() > limit {
            return Err(ServiceError::exhausted(format!(
                "{}: arguments exceed {limit} bytes",
                method.name
            )));
        }
        let request_id = super::hygiene::request_id_of(parts);
        run(st, actor, method.name, body.into(), request_id)
            .await
            .map(super::Reply::into_value)
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(rmcp::model::Implementation::new(
                "airlock",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Airlock's governed path for agents: evidence, claims, proposals, votes, reviews, \
             previews, validations and (for members with apply) applies and transactions. \
             Each tool is the API method of the same name; identity is the bearer token of the \
             HTTP request, and the list holds only the tools that token may call. Human gates \
             are not tools. A refusal answers isError with {error: {code, message}}.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let actor = caller(&self.state, &ctx);
        let list = tools_for(self.state.service.config(), actor.as_ref())
            .map(|m| Tool::new(m.name, description(m), Arc::new(input_schema(m))))
            .collect();
        Ok(ListToolsResult::with_all_items(list))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let result = match self.call(request, &ctx).await {
            Ok(v) => CallToolResult::structured(v),
            Err(e) => {
                tracing::info!(tool = %name, code = e.code(), "tool call refused");
                CallToolResult::structured_error(envelope(&e, None))
            }
        };
        Ok(result.into())
    }
}

/// The header naming an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Largest transport error text carried into the JSON envelope.
const MAX_TRANSPORT_ERROR_BYTES: usize = 64 * 1024;

use crate::limits::{MAX_MCP_SESSIONS, MAX_MCP_SESSIONS_PER_TOKEN};

/// The open MCP sessions and whose they are: a bound per token and overall, and idle sessions
/// closed, so no token can grow the daemon's memory by opening sessions. The transport's own
/// session manager holds the sessions; this ledger, kept by [`guard`] from the requests and
/// answers it sees, decides who may open one more.
pub struct McpSessions {
    manager: Arc<LocalSessionManager>,
    /// A session idle this long is closed (`mcp_session_idle_seconds`).
    idle: std::time::Duration,
    open: std::sync::Mutex<std::collections::HashMap<String, OpenSession>>,
}

struct OpenSession {
    owner: String,
    last: std::time::Instant,
}

impl McpSessions {
    /// No session yet; one idle for `idle` is closed.
    pub fn new(idle: std::time::Duration) -> McpSessions {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(idle);
        McpSessions {
            manager: Arc::new(manager),
            idle,
            open: Default::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, OpenSession>> {
        self.open
            .lock()
            .expect("the MCP session ledger is never poisoned")
    }

    /// Closes the sessions idle past their bound and forgets those the transport no
    /// longer has; then whether `owner` may open one more (why not, naming the bound).
    async fn admit(&self, owner: &str) -> Result<(), ServiceError> {
        let idle: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, s)| s.last.elapsed() >= self.idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            let sid: rmcp::transport::common::server_side_http::SessionId = id.clone().into();
            let _ = self.manager.close_session(&sid).await;
            self.lock().remove(&id);
        }
        let known: Vec<String> = self.lock().keys().cloned().collect();
        for id in known {
            let sid: rmcp::transport::common::server_side_http::SessionId = id.clone().into();
            if !self.manager.has_session(&sid).await.unwrap_or(false) {
                self.lock().remove(&id);
            }
        }
        let open = self.lock();
        let mine = open.values().filter(|s| s.owner == owner).count();
        if mine >= MAX_MCP_SESSIONS_PER_TOKEN {
            return Err(ServiceError::exhausted_field(
                "mcp_sessions",
                format!(
                    "this token holds {mine} MCP sessions; the limit is {MAX_MCP_SESSIONS_PER_TOKEN} per token: reuse one (its Mcp-Session-Id), end one with DELETE /mcp, or wait {} s for an idle one to close",
                    self.idle.as_secs()
                ),
            ));
        }
        if open.len() >= MAX_MCP_SESSIONS {
            return Err(ServiceError::exhausted_field(
                "mcp_sessions",
                format!(
                    "{} MCP sessions are open; the limit is {MAX_MCP_SESSIONS}: retry later",
                    open.len()
                ),
            ));
        }
        Ok(())
    }

    fn opened(&self, id: String, owner: String) {
        self.lock().insert(
            id,
            OpenSession {
                owner,
                last: std::time::Instant::now(),
            },
        );
    }

    /// Marks a session used now; `false` when it is another token's (a session is used only
    /// by the token that opened it).
    fn used(&self, id: &str, owner: &str) -> bool {
        match self.lock().get_mut(id) {
            Some(s) if s.owner != owner => false,
            Some(s) => {
                s.last = std::time::Instant::now();
                true
            }
            None => true,
        }
    }

    fn closed(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Sessions open now (as far as the ledger knows).
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}

/// In front of the transport: every request (`initialize` included) needs a known bearer
/// token, refused with the API's JSON envelope and `WWW-Authenticate`; and the transport's own
/// refusals (a wrong `Accept`, an unknown session, a malformed message), which it answers in
/// plain text, are rewritten into that envelope with the same status.
pub async fn guard(
    axum::extract::State(st): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let request_id = super::hygiene::request_id(&req);
    let known = bearer(req.headers()).and_then(|t| {
        authenticate(st.service.config(), t)
            .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))
    });
    let actor = match known {
        Ok(actor) => actor,
        Err(e) => {
            let mut resp = super::ApiError(e, request_id).into_response();
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
            return resp;
        }
    };
    let owner = actor.key();
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let sessions = &st.mcp_sessions;
    // A request without a session opens one (initialize): within the bounds, or refused.
    let opens = session.is_none() && req.method() == axum::http::Method::POST;
    match &session {
        Some(id) => {
            if !sessions.used(id, &owner) {
                let e = ServiceError::NotFound(format!("no MCP session {id:?} of this token"));
                return super::ApiError(e, request_id).into_response();
            }
            if req.method() == axum::http::Method::DELETE {
                sessions.closed(id);
            }
        }
        None if opens => {
            if let Err(e) = sessions.admit(&owner).await {
                tracing::warn!(%owner, error = %e, "MCP session refused");
                return super::ApiError(e, request_id).into_response();
            }
        }
        None => {}
    }
    let resp = next.run(req).await;
    if opens
        && let Some(id) = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        sessions.opened(id.to_string(), owner);
    }
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !status.is_client_error() && !status.is_server_error() || is_json {
        return resp;
    }
    let text = axum::body::to_bytes(resp.into_body(), MAX_TRANSPORT_ERROR_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let code = match status.as_u16() {
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "resource_exhausted",
        503 => "unavailable",
        500.. => "internal",
        _ => "invalid_argument",
    };
    let message = if text.is_empty() {
        format!("MCP transport: HTTP {status}")
    } else {
        format!("MCP transport: {text}")
    };
    let mut body = serde_json::json!({"error": {"code": code, "message": message}});
    if let Some(id) = request_id {
        body["error"]["request_id"] = serde_json::json!(id);
    }
    (status, axum::Json(body)).into_response()
}

/// The `/mcp` service. The largest agent method's body limit bounds a message; the bearer token
/// (never a cookie) is the identity, so the transport's Host allow-list (a guard for
/// cookie-less local servers against DNS rebinding) is off and the daemon's listen address
/// decides who can connect.
pub fn service(state: AppState) -> StreamableHttpService<Tools, LocalSessionManager> {
    let config = state.service.config();
    let limit = tools()
        .map(|m| m.body.bytes(config))
        .max()
        .unwrap_or(super::SMALL_BODY_LIMIT);
    let mut transport = StreamableHttpServerConfig::default().disable_allowed_hosts();
    transport.max_request_body_bytes = limit + 64 * 1024;
    let manager = state.mcp_sessions.manager.clone();
    let tools = Tools { state };
    StreamableHttpService::new(move || Ok(tools.clone()), manager, transport)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_schemas_stand_alone() {
        for m in tools() {
            let schema = Value::Object(input_schema(m));
            let text = schema.to_string();
            assert!(!text.contains("#/components/"), "{}: {text}", m.name);
            let mut rest = text.as_str();
            while let Some(i) = rest.find("\"$ref\":\"#/") {
                let tail = &rest[i + 8..];
                let end = tail.find('"').unwrap();
                assert!(
                    schema.pointer(&tail[1..end]).is_some(),
                    "{}: {}",
                    m.name,
                    &tail[..end]
                );
                rest = &tail[end..];
            }
            assert_eq!(schema["type"], json!("object"), "{}", m.name);
        }
        assert!(tools().any(|m| m.name == "claim.acquire"));
        assert!(tools().all(|m| !m.name.starts_with("integration.")));
    }
}
