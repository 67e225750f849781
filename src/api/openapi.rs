//! The OpenAPI 3.1 document served at `GET /openapi.json`, built from the method registry
//! ([`super::methods::METHODS`]): each method's request schema is derived (utoipa) from the very
//! type the dispatcher parses its body into, its reply from the registry's reply shape (typed
//! where the service answers a typed value), and every method documents the error envelope with
//! each status the API can answer.

use super::methods::{Audience, Field, METHODS, Method, Reply, Schemas, component_ref};
use serde_json::{Map, Value, json};

/// Every error status the API answers, with its code (see `ApiError`).
pub const ERRORS: &[(u16, &str, &str)] = &[
    (
        400,
        "invalid_argument",
        "the body is malformed or a field is out of bounds",
    ),
    (401, "unauthenticated", "no bearer token, or an unknown one"),
    (
        403,
        "permission_denied",
        "the token lacks the method's permission",
    ),
    (
        404,
        "not_found",
        "the workspace or the named record does not exist",
    ),
    (
        408,
        "deadline_exceeded",
        "the body did not arrive within body_read_timeout_seconds",
    ),
    (
        409,
        "conflict",
        "an idempotency key reused with other parameters, or a competing change",
    ),
    (
        412,
        "failed_precondition",
        "the record is not in a state that allows the call",
    ),
    (413, "resource_exhausted", "the body or a limit is exceeded"),
    (
        500,
        "internal",
        "a malfunction; the server log has it under error_id",
    ),
    (
        503,
        "unavailable",
        "recovery has not finished, or the call exceeded its budget (retry with the same key)",
    ),
];

/// The schema of one reply field.
fn field_schema(f: Field, out: &mut Schemas) -> Value {
    let r = |name: String| component_ref(&name);
    match f {
        Field::Typed(s) => r(s(out)),
        Field::OptTyped(s) => json!({"oneOf": [r(s(out)), {"type": "null"}]}),
        Field::ListOf(s) => json!({"type": "array", "items": r(s(out))}),
        Field::Strings => json!({"type": "array", "items": {"type": "string"}}),
        Field::OptString => json!({"type": ["string", "null"]}),
        Field::OptInteger => json!({"type": ["integer", "null"]}),
        Field::Bool => json!({"type": "boolean"}),
        Field::String => json!({"type": "string"}),
    }
}

/// The schema of a method's successful reply.
pub fn reply_schema(m: &Method, out: &mut Schemas) -> Value {
    match m.reply {
        Reply::Fields(fields) => {
            let mut props = Map::new();
            for (name, f) in fields {
                props.insert((*name).to_string(), field_schema(*f, out));
            }
            let required: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
            // Closed: a field the registry does not name is a drift the suite's checks catch.
            json!({"type": "object", "properties": props, "required": required,
                   "additionalProperties": false})
        }
        Reply::Typed(s) => component_ref(&s(out)),
        Reply::OneOf(alternatives) => {
            let refs: Vec<Value> = alternatives
                .iter()
                .map(|s| component_ref(&s(out)))
                .collect();
            json!({"oneOf": refs})
        }
    }
}

fn error_schema() -> Value {
    let codes: Vec<&str> = ERRORS.iter().map(|(_, c, _)| *c).collect();
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "enum": codes},
                "message": {"type": "string"},
                "field": {"type": "string", "description": "the request field a refusal is about, when it names one (`submissions[2].evidence_ref`)"},
                "request_id": {"type": "string", "description": "the request's x-request-id"},
                "error_id": {"type": "string", "description": "an internal error's id in the server log"},
            },
        }},
    })
}

fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema}})
}

fn operation(m: &Method, config: &crate::config::Config, out: &mut Schemas) -> Value {
    let params = (m.params)(out);
    let limit = m.body.bytes(config);
    let mut responses = Map::new();
    responses.insert(
        "200".into(),
        json!({"description": "the result", "content": json_content(reply_schema(m, out))}),
    );
    for (status, code, _) in ERRORS {
        responses.insert(
            status.to_string(),
            json!({"$ref": format!("#/components/responses/{code}")}),
        );
    }
    let mut op = json!({
        "operationId": m.name,
        "summary": m.summary,
        "description": format!(
            "{}Permission: {}. Request body at most {limit} bytes. {}",
            m.alias_of
                .map(|of| format!("An alias of {of} (the name older clients send): the same checks, idempotency and answer. "))
                .unwrap_or_default(),
            m.permission,
            match m.audience {
                Audience::Human => "",
                Audience::Tool { .. } => "Also an MCP tool at /mcp, listed to the tokens that may call it.",
            },
        ).trim_end().to_string(),
        "tags": [m.name.split('.').next().unwrap_or(m.name)],
        "x-airlock-permission": m.permission,
        "x-airlock-body-limit": limit,
        "x-airlock-agent-tool": m.audience.is_tool(),
        "requestBody": {
            "required": true,
            "content": json_content(component_ref(&params)),
        },
        "responses": responses,
    });
    if let Some(of) = m.alias_of {
        op["x-airlock-alias-of"] = of.into();
    }
    op
}

fn probe(summary: &str, ok: Value, errors: &[(u16, &str)]) -> Value {
    let mut responses = Map::new();
    responses.insert("200".into(), ok);
    for (status, code) in errors {
        responses.insert(
            status.to_string(),
            json!({"$ref": format!("#/components/responses/{code}")}),
        );
    }
    json!({"get": {"summary": summary, "security": [], "responses": responses}})
}

/// The routes that are not one JSON call: each is marked `x-airlock-streaming` (the response
/// stays open, or is a page for a browser, or speaks its own protocol), so a client generator or
/// a fuzzer knows it cannot treat it as request-reply JSON.
pub const STREAMING_ROUTES: [&str; 5] = [
    "/api/v1/events",
    "/api/v1/jobs/{job_id}/log",
    "/mcp",
    "/ui/",
    "/ui/w/{workspace_id}/jobs/{job_id}",
];

fn err(code: &str) -> Value {
    json!({"$ref": format!("#/components/responses/{code}")})
}

fn streaming_routes() -> Vec<(&'static str, Value)> {
    let query = |name: &str, about: &str, schema: Value| json!({"name": name, "in": "query", "required": false, "description": about, "schema": schema});
    let path_param = |name: &str, schema: Value| json!({"name": name, "in": "path", "required": true, "schema": schema});
    let job_id = json!({"type": "string", "pattern": "^job_[0-9a-f]{32}$"});
    vec![
        (
            STREAMING_ROUTES[0],
            json!({"get": {
                "summary": "A workspace's durable event log as server-sent events: each event is `id: <seq>`, `event: <kind>`, `data: <the event.list event>`; a `: heartbeat` comment every 15 s; the stream ends with `airlock.stopping` when the daemon stops",
                "x-airlock-streaming": "text/event-stream",
                "parameters": [
                    {"name": "workspace_id", "in": "query", "required": true, "schema": {"type": "string"}},
                    query("since", "start after this seq (default: the log's end)", json!({"type": "integer", "minimum": 0})),
                    query("subject", "only events of this subject", json!({"type": "string", "minLength": 1, "maxLength": 256})),
                    query("kind", "only events of this kind (one of the event kinds; any other is refused)", json!({"type": "string", "enum": crate::domain::event_kind::EVENT_KINDS})),
                    {"name": "Last-Event-ID", "in": "header", "required": false, "description": "resume after this seq (wins over since)", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {"description": "the events, as they commit", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                    "400": err("invalid_argument"), "401": err("unauthenticated"), "403": err("permission_denied"),
                    "429": err("resource_exhausted"),
                },
            }}),
        ),
        (
            STREAMING_ROUTES[1],
            json!({"get": {
                "summary": "A job's log as text; with follow=1 a running job's output streams as it arrives and ends with `[airlock: job settled: <state>]`",
                "x-airlock-streaming": "text/plain",
                "parameters": [
                    path_param("job_id", job_id.clone()),
                    query("follow", "1 or true to stream a running job's output", json!({"type": "string", "enum": ["0", "1", "true", "false"]})),
                ],
                "responses": {
                    "200": {"description": "the log (streamed while the job runs, with follow)", "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "400": err("invalid_argument"), "401": err("unauthenticated"), "404": err("not_found"),
                    "429": err("resource_exhausted"), "503": err("unavailable"),
                },
            }}),
        ),
        (
            STREAMING_ROUTES[2],
            json!({"post": {
                "summary": "Model Context Protocol (streamable HTTP): the registry's methods as tools, listed per token",
                "x-airlock-streaming": "mcp",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "description": "a JSON-RPC 2.0 message"}}}},
                "responses": {
                    "200": {"description": "JSON-RPC answers, as JSON or server-sent events", "content": {"text/event-stream": {"schema": {"type": "string"}}, "application/json": {"schema": {"type": "object"}}}},
                    "401": err("unauthenticated"),
                },
            }}),
        ),
        (
            STREAMING_ROUTES[3],
            json!({"get": {
                "summary": "The web page for members (sign in at /ui/login with a token; a session cookie, CSRF-protected forms, no JavaScript)",
                "x-airlock-streaming": "text/html",
                "security": [],
                "responses": {
                    "200": {"description": "the overview", "content": {"text/html": {"schema": {"type": "string"}}}},
                    "303": {"description": "not signed in: to /ui/login"},
                },
            }}),
        ),
        (
            STREAMING_ROUTES[4],
            json!({"get": {
                "summary": "A job's page: a running job's log streams into the page as it arrives, then its result",
                "x-airlock-streaming": "text/html",
                "security": [],
                "parameters": [path_param("workspace_id", json!({"type": "string"})), path_param("job_id", job_id)],
                "responses": {
                    "200": {"description": "the page (streamed while the job runs)", "content": {"text/html": {"schema": {"type": "string"}}}},
                    "303": {"description": "not signed in: to /ui/login"},
                },
            }}),
        ),
    ]
}

/// The whole document.
pub fn document(config: &crate::config::Config) -> Value {
    let mut schemas = Schemas::new();
    let mut paths = Map::new();
    for m in METHODS {
        paths.insert(
            format!("/api/v1/{}", m.name),
            json!({"post": operation(m, config, &mut schemas)}),
        );
    }
    let status = |s: &str| {
        json!({"description": s, "content": json_content(json!({
            "type": "object", "required": ["status"], "properties": {"status": {"type": "string"}},
        }))})
    };
    paths.insert(
        "/healthz".into(),
        probe("Liveness", status("the daemon answers"), &[]),
    );
    paths.insert(
        "/readyz".into(),
        probe(
            "Readiness: recovery has finished",
            status("ready"),
            &[(503, "unavailable")],
        ),
    );
    paths.insert(
        "/openapi.json".into(),
        probe(
            "This document",
            json!({"description": "OpenAPI 3.1", "content": json_content(json!({"type": "object"}))}),
            &[],
        ),
    );
    paths.insert(
        "/api/v1/keys".into(),
        probe(
            "The public keys attestations are checked with (the signing key's first)",
            json!({"description": "the verifier id, the signing key's id (null when nothing is signed) and every public key", "content": json_content(json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["verifier_id", "signing_key_id", "keys"],
                "properties": {
                    "verifier_id": {"type": "string"},
                    "signing_key_id": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
                    "keys": {"type": "array", "items": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["key_id", "public_key_pem", "signing"],
                        "properties": {
                            "key_id": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                            "public_key_pem": {"type": "string"},
                            "signing": {"type": "boolean"},
                        },
                    }},
                },
            }))}),
            &[],
        ),
    );
    if config.metrics_listen.is_none() {
        paths.insert(
            "/metrics".into(),
            probe(
                "Prometheus metrics",
                json!({"description": "OpenMetrics 1.0 text", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}),
                &[(500, "internal")],
            ),
        );
    }
    for (path, op) in streaming_routes() {
        paths.insert(path.into(), op);
    }
    let mut responses = Map::new();
    for (_, code, why) in ERRORS {
        responses.insert(
            (*code).to_string(),
            json!({"description": format!("{code}: {why}"), "content": json_content(component_ref("Error"))}),
        );
    }
    schemas.insert("Error".into(), error_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Airlock",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Every method is POST /api/v1/<method> with one JSON object; identity is the bearer token. Errors are {\"error\": {code, message, request_id}} with the status listed per method.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
            "responses": responses,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_statuses_are_the_ones_the_api_answers() {
        use crate::engine::service::ServiceError as E;
        let all = [
            E::invalid("x"),
            E::Unauthenticated(String::new()),
            E::PermissionDenied(String::new()),
            E::NotFound(String::new()),
            E::Conflict(String::new()),
            E::precondition("x"),
            E::exhausted("x"),
            E::internal("x"),
            E::Unavailable(String::new()),
            E::DeadlineExceeded(String::new()),
        ];
        assert_eq!(all.len(), ERRORS.len());
        for e in &all {
            let status = super::super::status_of(e).as_u16();
            assert!(
                ERRORS
                    .iter()
                    .any(|(s, c, _)| *s == status && *c == e.code()),
                "{} {status} is not documented",
                e.code()
            );
        }
    }

    #[test]
    fn every_method_is_a_path_and_every_ref_resolves() {
        let config = crate::config::Config::builtin();
        let doc = document(&config);
        for m in METHODS {
            let op = &doc["paths"][format!("/api/v1/{}", m.name)]["post"];
            assert_eq!(op["operationId"], m.name);
            assert!(op["responses"]["200"].is_object(), "{}", m.name);
        }
        let text = doc.to_string();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("\"$ref\":\"#/") {
            let tail = &rest[i + 8..];
            let end = tail.find('"').expect("a closed string");
            let pointer = &tail[1..end];
            assert!(doc.pointer(pointer).is_some(), "{pointer} does not resolve");
            rest = &tail[end..];
        }
    }

    /// Every value a reply can carry has a shape: walking each method's reply schema through
    /// every `$ref`, no schema is empty (`{}`: anything) and no object is without properties,
    /// except the two raw records the document says are raw. Objects a reply names directly
    /// are closed, so a field the registry does not list fails the suite's reply checks.
    #[test]
    fn every_reply_is_typed_down_to_its_leaves() {
        const RAW: &[&str] = &["PhaseView.detail", "EventView.payload"];
        let doc = document(&crate::config::Config::builtin());
        fn walk(doc: &Value, v: &Value, at: &str, seen: &mut Vec<String>, bad: &mut Vec<String>) {
            let Some(o) = v.as_object() else { return };
            if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                if !seen.iter().any(|s| s == r) {
                    seen.push(r.to_string());
                    let name = r.rsplit('/').next().expect("a ref has a name");
                    walk(
                        doc,
                        doc.pointer(&r[1..]).expect("resolves"),
                        name,
                        seen,
                        bad,
                    );
                }
                return;
            }
            let kinds = ["type", "oneOf", "anyOf", "allOf", "enum", "const"];
            if !kinds.iter().any(|k| o.contains_key(*k)) {
                bad.push(format!("{at}: no type"));
            }
            let is_object = match &o.get("type") {
                Some(Value::String(t)) => t == "object",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
                _ => false,
            };
            let closed = o.get("additionalProperties") == Some(&Value::Bool(false));
            // A map whose values are typed (`additionalProperties` a schema) is typed too.
            let typed_map = o.get("additionalProperties").is_some_and(Value::is_object);
            if let Some(values) = o.get("additionalProperties").filter(|v| v.is_object()) {
                walk(doc, values, at, seen, bad);
            }
            if is_object
                && !o.contains_key("properties")
                && !closed
                && !typed_map
                && !RAW.contains(&at)
            {
                bad.push(format!("{at}: an object without properties"));
            }
            for (k, child) in o {
                match k.as_str() {
                    "properties" => {
                        for (name, p) in child.as_object().expect("properties") {
                            let field = format!("{}.{name}", at.split('.').next().unwrap_or(at));
                            walk(doc, p, &field, seen, bad);
                        }
                    }
                    "items" => walk(doc, child, at, seen, bad),
                    "oneOf" | "anyOf" | "allOf" => {
                        for alt in child.as_array().expect("alternatives") {
                            walk(doc, alt, at, seen, bad);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut bad = vec![];
        for m in METHODS {
            let reply = &doc["paths"][format!("/api/v1/{}", m.name)]["post"]["responses"]["200"]["content"]
                ["application/json"]["schema"];
            let mut seen = vec![];
            walk(&doc, reply, m.name, &mut seen, &mut bad);
            if reply["type"] == "object" {
                assert_eq!(reply["additionalProperties"], false, "{}", m.name);
            }
        }
        bad.sort();
        bad.dedup();
        assert!(bad.is_empty(), "untyped reply values:\n{}", bad.join("\n"));
    }

    /// The first `key` anywhere under `v` (an optional field's bounds sit beside its null).
    fn find<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
        match v {
            Value::Object(o) => o.get(key).or_else(|| o.values().find_map(|x| find(x, key))),
            Value::Array(a) => a.iter().find_map(|x| find(x, key)),
            _ => None,
        }
    }

    #[test]
    fn the_documented_bounds_are_the_named_limits() {
        use crate::candidate as c;
        use crate::limits as l;
        let doc = document(&crate::config::Config::builtin());
        let field = |ty: &str, f: &str| doc["components"]["schemas"][ty]["properties"][f].clone();
        let num = |ty: &str, f: &str, k: &str| {
            find(&field(ty, f), k)
                .and_then(Value::as_f64)
                .unwrap_or_else(|| panic!("{ty}.{f} documents no {k}"))
        };
        let bounds = [
            (
                "PatchParams",
                "offset",
                "maximum",
                c::MAX_PATCH_OFFSET as f64,
            ),
            (
                "PatchParams",
                "limit",
                "minimum",
                c::MIN_PATCH_PAGE_BYTES as f64,
            ),
            ("PatchParams", "limit", "maximum", c::MAX_PATCH_BYTES as f64),
            (
                "ListParams",
                "limit",
                "maximum",
                f64::from(l::MAX_CANDIDATE_LIST_LIMIT),
            ),
            (
                "ClaimListParams",
                "limit",
                "maximum",
                f64::from(l::MAX_CLAIM_LIST_LIMIT),
            ),
            (
                "ProposalListParams",
                "limit",
                "maximum",
                f64::from(l::MAX_CLAIM_LIST_LIMIT),
            ),
            (
                "ClaimExtendParams",
                "ttl_seconds",
                "minimum",
                *l::CLAIM_TTL_SECONDS.start() as f64,
            ),
            (
                "ClaimExtendParams",
                "ttl_seconds",
                "maximum",
                *l::CLAIM_TTL_SECONDS.end() as f64,
            ),
            (
                "VerifyParams",
                "timeout_seconds",
                "minimum",
                l::MIN_TIMEOUT_SECONDS as f64,
            ),
            (
                "VerifyParams",
                "timeout_seconds",
                "maximum",
                l::MAX_TIMEOUT_SECONDS as f64,
            ),
            (
                "VerifyParams",
                "argv",
                "maxItems",
                l::MAX_ARGV_ENTRIES as f64,
            ),
            (
                "ResolveParams",
                "files",
                "maxItems",
                c::MAX_RESOLVE_FILES as f64,
            ),
            (
                "PrepareParams",
                "submissions",
                "maxItems",
                c::MAX_SUBMISSIONS as f64,
            ),
            (
                "RequestParams",
                "verification_ids",
                "maxItems",
                c::MAX_REQUEST_VERIFICATIONS as f64,
            ),
        ];
        for (ty, f, k, want) in bounds {
            assert_eq!(num(ty, f, k), want, "{ty}.{f} {k}");
        }
        // Character counts documented for byte limits: at most 4 bytes a character.
        let title = num("ProposalCreateParams", "title", "maxLength");
        assert!(title * 4.0 <= l::MAX_PROPOSAL_TITLE_BYTES as f64);
        let key_field = field("VerifyParams", "idempotency_key");
        let key = find(&key_field, "pattern").unwrap();
        assert_eq!(
            key,
            &json!(format!(
                "^[\\x20-\\x7E]{{1,{}}}$",
                c::MAX_IDEMPOTENCY_KEY_BYTES
            ))
        );
    }
}
