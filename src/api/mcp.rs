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
    authenticate(&state.service.ctx.config, token)
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
        let actor = authenticate(&st.service.ctx.config, token)
            .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))?;
        let method = tools_for(&st.service.ctx.config, Some(&actor))
            .find(|m| m.name == req.name)
            .ok_or_else(|| ServiceError::NotFound(format!("unknown tool {:?}", req.name)))?;
        let body = serde_json::to_vec(&req.arguments.unwrap_or_default())
            .expect("a JSON object serializes");
        let limit = method.body.bytes(&st.service.ctx.config);
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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
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
        let list = tools_for(&self.state.service.ctx.config, actor.as_ref())
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

/// The `/mcp` service. The largest agent method's body limit bounds a message; the bearer token
/// (never a cookie) is the identity, so the transport's Host allow-list (a guard for
/// cookie-less local servers against DNS rebinding) is off and the daemon's listen address
/// decides who can connect.
pub fn service(state: AppState) -> StreamableHttpService<Tools, LocalSessionManager> {
    let config = &state.service.ctx.config;
    let limit = tools()
        .map(|m| m.body.bytes(config))
        .max()
        .unwrap_or(super::SMALL_BODY_LIMIT);
    let mut transport = StreamableHttpServerConfig::default().disable_allowed_hosts();
    transport.max_request_body_bytes = limit + 64 * 1024;
    let tools = Tools { state };
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        transport,
    )
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
