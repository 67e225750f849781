//! The web page for humans at `/ui/`: server-rendered (maud escapes every interpolated string),
//! no JavaScript at all, a strict Content-Security-Policy. Sign-in exchanges a member's bearer
//! token for a session cookie (`HttpOnly`, `SameSite=Strict`, path `/ui`); every form carries
//! the session's CSRF token. Every page and every button goes through the API's dispatcher as
//! the signed-in member, so the permissions are the API's, checked on the server; a button the
//! member may not use is not shown, and its POST is refused anyway.

use super::{AppState, run};
use crate::config::Permission;
use crate::domain::candidate::CandidateState;
use crate::domain::delivery::RequestState;
use crate::domain::proposal::ProposalState;
use crate::engine::service::{Actor, ServiceError, authenticate};
use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

const COOKIE: &str = "airlock_session";
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";
const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;\
padding:0 1rem;color:#1b1b1b}table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px \
solid #ccc;padding:.2rem .5rem;vertical-align:top;text-align:left}pre{background:#f4f4f4;\
padding:.5rem;overflow:auto;max-height:30rem;white-space:pre-wrap}.badge{background:#eee;\
border-radius:.3rem;padding:0 .4rem}.stale{background:#fde2c8}.missing{color:#a15c00}\
.blocked{color:#b00020}.satisfied{color:#1b6e20}form.inline{display:inline}nav a{margin-right:1rem}";

/// One signed-in browser.
#[derive(Clone)]
struct UiSession {
    actor: Actor,
    member: String,
    csrf: String,
    created: Instant,
}

/// The web page's sessions, in memory: a restart signs everyone out (the token signs in again).
#[derive(Default)]
pub struct UiSessions {
    map: Mutex<HashMap<String, UiSession>>,
}

impl UiSessions {
    fn get(&self, id: &str) -> Option<UiSession> {
        let mut map = self.map.lock().expect("never poisoned");
        map.retain(|_, s| s.created.elapsed() < crate::limits::UI_SESSION_TTL);
        map.get(id).cloned()
    }

    fn insert(&self, s: UiSession) -> String {
        let mut map = self.map.lock().expect("never poisoned");
        if map.len() >= crate::limits::UI_MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        let id = crate::ids::new_creation_key() + &crate::ids::new_creation_key();
        map.insert(id.clone(), s);
        id
    }

    fn remove(&self, id: &str) {
        self.map.lock().expect("never poisoned").remove(id);
    }
}

/// The `/ui` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/style.css", get(style))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/w/{ws}/candidates/{id}", get(candidate_page))
        .route("/ui/w/{ws}/candidates/{id}/decide", post(candidate_decide))
        .route("/ui/w/{ws}/candidates/{id}/act", post(candidate_act))
        .route("/ui/w/{ws}/proposals/{id}", get(proposal_page))
        .route("/ui/w/{ws}/approvals/{id}/decide", post(approval_decide))
        .route("/ui/w/{ws}/proposals/{id}/act", post(proposal_act))
        .route("/ui/w/{ws}/transactions/{id}", get(transaction_page))
        .route("/ui/w/{ws}/transactions/{id}/act", post(transaction_act))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::limits::UI_FORM_LIMIT,
        ))
        .layer(axum::middleware::map_response(harden))
}

/// Every page: the CSP, no sniffing, no referrer, no caching, no framing.
async fn harden(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

fn session(st: &AppState, headers: &HeaderMap) -> Option<(String, UiSession)> {
    let id = cookie_of(headers)?;
    st.ui_sessions.get(&id).map(|s| (id, s))
}

/// A page's signed-in member; a browser without a session is sent to sign in.
struct Signed(UiSession);

impl axum::extract::FromRequestParts<AppState> for Signed {
    type Rejection = Redirect;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &AppState,
    ) -> Result<Self, Redirect> {
        session(st, &parts.headers)
            .map(|(_, s)| Signed(s))
            .ok_or_else(|| Redirect::to("/ui/login"))
    }
}

fn page(title: &str, who: Option<&UiSession>, body: Markup) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Airlock" }
                link rel="stylesheet" href="/ui/style.css";
            }
            body {
                nav {
                    a href="/ui/" { "Airlock" }
                    @if let Some(s) = who {
                        "signed in as " strong { (s.member) } " "
                        form.inline method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(s.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                h1 { (title) }
                (body)
            }
        }
    };
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        doc.into_string(),
    )
        .into_response()
}

fn refusal(status: StatusCode, who: Option<&UiSession>, message: &str) -> Response {
    let mut r = page("Refused", who, html! { p { (message) } });
    *r.status_mut() = status;
    r
}

fn error_page(e: &ServiceError, who: &UiSession) -> Response {
    let text = match super::envelope(e, None)["error"]["message"].as_str() {
        Some(m) => format!("{}: {m}", e.code()),
        None => e.code().to_string(),
    };
    refusal(super::status_of(e), Some(who), &text)
}

/// A method call as the signed-in member, through the API's dispatcher.
async fn call(
    st: &AppState,
    s: &UiSession,
    method: &str,
    body: Value,
) -> Result<Value, ServiceError> {
    let bytes = serde_json::to_vec(&body).expect("a JSON value serializes");
    run(st, s.actor.clone(), method, bytes.into(), None)
        .await
        .map(super::Reply::into_value)
}

fn may(st: &AppState, s: &UiSession, ws: &str, p: Permission) -> bool {
    st.service.authorize(&s.actor, ws, p).is_ok()
}

/// A form's call as the signed-in member: back to the page it came from on success, the
/// refusal's page otherwise.
async fn act(st: &AppState, s: &UiSession, method: &str, body: Value, back: &str) -> Response {
    match call(st, s, method, body).await {
        Ok(_) => Redirect::to(back).into_response(),
        Err(e) => error_page(&e, s),
    }
}

/// The session of a form's POST, refused unless signed in and carrying the session's own CSRF
/// token.
fn form_session(
    st: &AppState,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<UiSession, Box<Response>> {
    let Some((_, s)) = session(st, headers) else {
        return Err(Box::new(refusal(
            StatusCode::UNAUTHORIZED,
            None,
            "sign in first",
        )));
    };
    if !csrf_ok(&s, csrf) {
        return Err(Box::new(refusal(
            StatusCode::FORBIDDEN,
            Some(&s),
            "the form's CSRF token is wrong",
        )));
    }
    Ok(s)
}

fn csrf_ok(s: &UiSession, presented: &str) -> bool {
    let (a, b) = (s.csrf.as_bytes(), presented.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

async fn login_page() -> Response {
    page(
        "Sign in",
        None,
        html! {
            p { "Sign in with your member bearer token. It is exchanged for a session cookie and never stored in the browser." }
            form method="post" action="/ui/login" {
                label { "Token " input type="password" name="token" autocomplete="off" required; }
                " " button type="submit" { "Sign in" }
            }
        },
    )
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(st): State<AppState>, Form(f): Form<LoginForm>) -> Response {
    let member = match authenticate(&st.service.ctx.config, &f.token) {
        Some(Actor::Member { member_id }) => member_id,
        Some(_) => {
            return refusal(
                StatusCode::FORBIDDEN,
                None,
                "the web page is for members; a run token cannot sign in",
            );
        }
        None => return refusal(StatusCode::UNAUTHORIZED, None, "unknown bearer token"),
    };
    let id = st.ui_sessions.insert(UiSession {
        actor: Actor::Member {
            member_id: member.clone(),
        },
        member,
        csrf: crate::ids::new_creation_key(),
        created: Instant::now(),
    });
    let cookie = format!(
        "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}",
        crate::limits::UI_SESSION_TTL.as_secs()
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/ui/".to_string()),
        ],
    )
        .into_response()
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(
    State(st): State<AppState>,
    headers: HeaderMap,
    Form(f): Form<CsrfForm>,
) -> Response {
    if let Some((id, s)) = session(&st, &headers) {
        if !csrf_ok(&s, &f.csrf) {
            return refusal(
                StatusCode::FORBIDDEN,
                Some(&s),
                "the form's CSRF token is wrong",
            );
        }
        st.ui_sessions.remove(&id);
    }
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"),
            ),
            (header::LOCATION, "/ui/login".to_string()),
        ],
    )
        .into_response()
}

/// Renders any JSON value as escaped HTML: objects as tables, arrays as lists, strings as text
/// (multi-line ones as preformatted text). Nothing from a value is ever markup.
fn value(v: &Value) -> Markup {
    match v {
        Value::Null => html! { span.badge { "none" } },
        Value::Bool(b) => html! { (b) },
        Value::Number(n) => html! { (n.to_string()) },
        Value::String(s) if s.contains('\n') => html! { pre { (visible(s)) } },
        Value::String(s) => html! { (visible(s)) },
        Value::Array(a) if a.is_empty() => html! { span.badge { "empty" } },
        Value::Array(a) => html! { ol { @for x in a { li { (value(x)) } } } },
        Value::Object(o) => html! {
            table { @for (k, x) in o { tr { th { (k) } td { (value(x)) } } } }
        },
    }
}

/// `s` with control characters (terminal escapes among them) shown as their Unicode control
/// pictures, so command output can neither restyle a terminal it is copied to nor hide text.
fn visible(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('?'),
            '\u{7f}' => '\u{2421}',
            c => c,
        })
        .collect()
}

fn rows(items: &[Value], cols: &[&str], link: impl Fn(&Value) -> Option<String>) -> Markup {
    html! {
        table {
            tr { @for c in cols { th { (c) } } }
            @for it in items {
                tr {
                    @for (i, c) in cols.iter().enumerate() {
                        td {
                            @if i == 0 && let Some(href) = link(it) {
                                a href=(href) { (value(&it[*c])) }
                            } @else {
                                (value(&it[*c]))
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn index(State(st): State<AppState>, Signed(s): Signed) -> Response {
    let config = &st.service.ctx.config;
    let mut sections = Vec::new();
    for (ws_id, ws) in &config.workspaces {
        if !may(&st, &s, ws_id, Permission::View) {
            continue;
        }
        let body = json!({"workspace_id": ws_id});
        let candidates = if ws.worktree.is_none() {
            Some(call(&st, &s, "integration.list", body.clone()).await)
        } else {
            None
        };
        let proposals = if ws.worktree.is_some() {
            Some(
                call(
                    &st,
                    &s,
                    "proposal.list",
                    json!({"workspace_id": ws_id, "order": "newest"}),
                )
                .await,
            )
        } else {
            None
        };
        let transactions = if ws.worktree.is_some() {
            Some(call(&st, &s, "transaction.list", json!({"workspace_id": ws_id})).await)
        } else {
            None
        };
        let enc = urlencode(ws_id);
        sections.push(html! {
            h2 { "Workspace " (ws_id) }
            @if let Some(c) = candidates {
                h3 { "Candidates" }
                @match c {
                    Ok(v) => (rows(v["candidates"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                        &["candidate_id", "state", "target_ref", "created_at", "expires_at"],
                        |c| c["candidate_id"].as_str().map(|id| format!("/ui/w/{enc}/candidates/{}", urlencode(id))))),
                    Err(e) => p.blocked { (e.code()) ": " (e.to_string()) },
                }
            }
            @if let Some(p) = proposals {
                h3 { "Proposals" }
                @match p {
                    Ok(v) => (rows(v["proposals"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                        &["proposal_id", "title", "status", "author", "risk", "updated_at"],
                        |p| p["proposal_id"].as_str().map(|id| format!("/ui/w/{enc}/proposals/{}", urlencode(id))))),
                    Err(e) => p.blocked { (e.code()) ": " (e.to_string()) },
                }
            }
            @if let Some(t) = transactions {
                h3 { "Transactions" }
                @match t {
                    Ok(v) => (rows(v["transactions"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                        &["transaction_id", "status", "proposal_id", "created_at"],
                        |t| t["transaction_id"].as_str().map(|id| format!("/ui/w/{enc}/transactions/{}", urlencode(id))))),
                    Err(e) => p.blocked { (e.code()) ": " (e.to_string()) },
                }
            }
        });
    }
    page(
        "Airlock",
        Some(&s),
        html! {
            @if sections.is_empty() { p { "You are not a member of any workspace." } }
            @for sec in sections { (sec) }
        },
    )
}

/// The active claims on a proposal's resources: named in `affected_resources`, or on a path the
/// revision touches.
fn touching<'a>(claims: &'a Option<Value>, affected: &Value, files: &Value) -> Vec<&'a Value> {
    let named: Vec<&str> = affected
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let paths: Vec<&str> = files
        .as_array()
        .map(|a| {
            a.iter()
                .flat_map(|f| [f["old_path"].as_str(), f["new_path"].as_str()])
                .flatten()
                .collect()
        })
        .unwrap_or_default();
    claims
        .as_ref()
        .and_then(|c| c["claims"].as_array())
        .map(|all| {
            all.iter()
                .filter(|c| {
                    c["resource_id"]
                        .as_str()
                        .is_some_and(|r| named.contains(&r))
                        || c["resource"]["path"].as_str().is_some_and(|p| {
                            paths
                                .iter()
                                .any(|t| p.is_empty() || *t == p || t.starts_with(&format!("{p}/")))
                        })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// "in 5m 3s" or "expired", from an RFC 3339 time and the daemon's clock (no JavaScript: the
/// page says how long was left when it was rendered).
fn countdown(st: &AppState, at: &Value) -> String {
    let Some(t) = at.as_str().and_then(|s| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
    }) else {
        return "unknown".into();
    };
    let left = (t - st.service.ctx.clock.now()).whole_seconds();
    if left <= 0 {
        "expired".into()
    } else {
        format!("in {}m {}s", left / 60, left % 60)
    }
}

/// Percent-encodes a path segment (ids are validated shapes, but nothing is trusted here).
fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn candidate_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
) -> Response {
    let body = json!({"workspace_id": ws, "candidate_id": id});
    let c = match call(&st, &s, "integration.show", body.clone()).await {
        Ok(v) => v["candidate"].clone(),
        Err(e) => return error_page(&e, &s),
    };
    let patch = call(&st, &s, "integration.patch", body).await.ok();
    // The server refuses the requester's own decision while distinct_approver holds; the
    // page does not offer it either.
    let own_request = st
        .service
        .ctx
        .config
        .workspaces
        .get(&ws)
        .is_some_and(|w| w.distinct_approver)
        && c["delivery_request"]["requested_by"] == json!(format!("member:{}", s.member));
    let can_decide = may(&st, &s, &ws, Permission::Decide) && !own_request;
    let request = &c["delivery_request"];
    let pending = request["state"] == json!(RequestState::Requested);
    let act = format!("/ui/w/{}/candidates/{}/act", urlencode(&ws), urlencode(&id));
    let state = &c["state"];
    let frozen = *state == json!(CandidateState::Frozen);
    let conflicts: Vec<&str> = c["conflicts"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Passed verifications of the current revision: what a delivery request can name.
    let passed: Vec<&str> = c["verifications"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| {
                    v["status"] == json!(crate::domain::verification::Status::Passed)
                        && v["candidate_revision"] == c["candidate_revision"]
                })
                .filter_map(|v| v["verification_id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let open_request = [
        RequestState::Requested,
        RequestState::Approved,
        RequestState::Delivering,
    ]
    .iter()
    .any(|st| request["state"] == json!(st));
    let action = format!(
        "/ui/w/{}/candidates/{}/decide",
        urlencode(&ws),
        urlencode(&id)
    );
    page(
        &format!("Candidate {id}"),
        Some(&s),
        html! {
            p { "State " strong { (value(&c["state"])) } " · target " (value(&c["target_ref"]))
                " · created " (value(&c["created_at"])) " · expires " (value(&c["expires_at"])) }
            h2 { "Inputs, in order" } (value(&c["inputs"]))
            h2 { "Conflicts" } (value(&c["conflicts"]))
            @if *state == json!(CandidateState::Conflicted) && may(&st, &s, &ws, Permission::Integrate) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="resolve";
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    input type="hidden" name="expected_version" value=(c["version"].as_u64().unwrap_or(0));
                    @for (i, path) in conflicts.iter().enumerate() {
                        input type="hidden" name=(format!("path_{i}")) value=(path);
                        label { "New content of " code { (visible(path)) } br;
                            textarea name=(format!("content_{i}")) rows="6" cols="80" {} }
                        br;
                    }
                    button type="submit" { "Resolve" }
                }
            }
            h2 { "Verifications" } (value(&c["verifications"]))
            @if frozen && may(&st, &s, &ws, Permission::Verify) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="verify";
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    label { "Command, one argument per line " br;
                        textarea name="argv" rows="3" cols="60" required {} }
                    br;
                    label { "Timeout (seconds, empty for the default) " input type="number" name="timeout_seconds" min="1"; }
                    " " button type="submit" { "Verify" }
                }
            }
            h2 { "Delivery request" } (value(request))
            @if frozen && !passed.is_empty() && !open_request && may(&st, &s, &ws, Permission::Integrate) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="request";
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    input type="hidden" name="verification_ids" value=(passed.join(","));
                    label { "Land by " select name="action" {
                        option value="update_ref" { "updating the target ref" }
                        option value="proposal" { "a proposal ref" }
                    } }
                    " " button type="submit" { "Request delivery" }
                }
            }
            @if request["state"] == json!(RequestState::Approved) && may(&st, &s, &ws, Permission::Push) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="deliver";
                    input type="hidden" name="request_id" value=(request["request_id"].as_str().unwrap_or(""));
                    input type="hidden" name="request_version" value=(request["request_version"].as_u64().unwrap_or(0));
                    button type="submit" { "Deliver" }
                }
            }
            @if pending && can_decide {
                form method="post" action=(action) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="request_id" value=(request["request_id"].as_str().unwrap_or(""));
                    input type="hidden" name="request_version" value=(request["request_version"].as_u64().unwrap_or(0));
                    button type="submit" name="approve" value="true" { "Approve delivery" }
                    " "
                    button type="submit" name="approve" value="false" { "Deny delivery" }
                }
            }
            h2 { "Receipt" } (value(&c["delivery_receipt"]))
            h2 { "Combined diff" }
            @if let Some(p) = patch {
                @if p["truncated"] == true { p.missing { "truncated at the cap" } }
                pre { (visible(p["patch"].as_str().unwrap_or(""))) }
            } @else { p { "no frozen revision yet" } }
        },
    )
}

/// The candidate page's workflow forms: resolve, verify, request delivery, deliver. Each is the
/// API method of that name with the form's fields; the keys come from the rendered form, so a
/// resubmitted form replays instead of acting twice.
async fn candidate_act(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let s = match form_session(&st, &headers, field("csrf")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let number = |k: &str| field(k).trim().parse::<u64>().ok();
    let target = json!({"workspace_id": ws, "candidate_id": id});
    // The revision a verify or a request is about: the one the page showed is the frozen one
    // (a candidate's revision never changes once frozen).
    let revision = || async {
        call(&st, &s, "integration.show", target.clone())
            .await
            .map(|v| v["candidate"]["candidate_revision"].clone())
            .unwrap_or(Value::Null)
    };
    let (method, body) = match field("op") {
        "resolve" => {
            let mut files = Vec::new();
            for i in 0..crate::limits::UI_FORM_FILES {
                let Some(path) = f.get(&format!("path_{i}")) else {
                    break;
                };
                let content = field(&format!("content_{i}")).replace("\r\n", "\n");
                files.push(json!({"path": path, "content": content}));
            }
            (
                "integration.resolve",
                json!({"workspace_id": ws, "candidate_id": id,
                       "expected_version": number("expected_version"), "files": files,
                       "idempotency_key": field("idempotency_key")}),
            )
        }
        "verify" => {
            let argv: Vec<&str> = field("argv")
                .lines()
                .map(|l| l.trim_end_matches('\r'))
                .filter(|l| !l.is_empty())
                .collect();
            (
                "integration.verify",
                json!({"workspace_id": ws, "candidate_id": id,
                       "candidate_revision": revision().await, "argv": argv,
                       "timeout_seconds": number("timeout_seconds"),
                       "idempotency_key": field("idempotency_key")}),
            )
        }
        "request" => {
            let ids: Vec<&str> = field("verification_ids")
                .split(',')
                .filter(|x| !x.is_empty())
                .collect();
            (
                "integration.request_delivery",
                json!({"workspace_id": ws, "candidate_id": id,
                       "candidate_revision": revision().await, "verification_ids": ids,
                       "action": field("action"), "idempotency_key": field("idempotency_key")}),
            )
        }
        "deliver" => (
            "integration.deliver",
            json!({"workspace_id": ws, "candidate_id": id, "request_id": field("request_id"),
                   "request_version": number("request_version")}),
        ),
        other => {
            return refusal(
                StatusCode::BAD_REQUEST,
                Some(&s),
                &format!("op: unknown form action {other:?}"),
            );
        }
    };
    let back = format!("/ui/w/{}/candidates/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, method, body, &back).await
}

#[derive(Deserialize)]
struct DecideForm {
    #[serde(default)]
    csrf: String,
    request_id: String,
    request_version: u64,
    approve: bool,
}

async fn candidate_decide(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<DecideForm>,
) -> Response {
    let s = match form_session(&st, &headers, &f.csrf) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let body = json!({"workspace_id": ws, "candidate_id": id, "request_id": f.request_id,
                      "request_version": f.request_version, "approve": f.approve});
    let back = format!("/ui/w/{}/candidates/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, "integration.decide", body, &back).await
}

async fn proposal_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
) -> Response {
    let body = json!({"workspace_id": ws, "proposal_id": id});
    let got = match call(&st, &s, "proposal.get", body.clone()).await {
        Ok(v) => v,
        Err(e) => return error_page(&e, &s),
    };
    let p = &got["proposal"];
    let current = p["current_revision"].as_str().unwrap_or("").to_string();
    let verdict = call(&st, &s, "policy.evaluate", body.clone()).await.ok();
    let votes = call(&st, &s, "vote.list", body.clone()).await.ok();
    let claims = call(
        &st,
        &s,
        "claim.list",
        json!({"workspace_id": ws, "status": "active", "limit": crate::limits::UI_CLAIMS_SHOWN}),
    )
    .await
    .ok();
    let transactions = call(
        &st,
        &s,
        "transaction.list",
        json!({"workspace_id": ws, "proposal_id": id}),
    )
    .await
    .ok();
    let approvals = st
        .service
        .approval_list(&s.actor, &ws, &id)
        .await
        .unwrap_or_default();
    let can_approve = may(&st, &s, &ws, Permission::Approve);
    let validations = st
        .service
        .validation_list(&s.actor, &ws, &id)
        .await
        .unwrap_or_default();
    let me = json!(format!("member:{}", s.member));
    let author = p["author"] == me;
    let status = &p["status"];
    let in_review = *status == json!(ProposalState::InReview);
    let act = format!("/ui/w/{}/proposals/{}/act", urlencode(&ws), urlencode(&id));
    let pending_approval = approvals.iter().any(|a| {
        a["state"] == json!(crate::domain::policy::ApprovalState::Pending)
            && a["revision"] == p["current_revision"]
    });
    // The newest complete, valid, unexpired validation of the current revision: what apply takes.
    let applicable = validations.iter().rev().find(|v| {
        v["revision"] == p["current_revision"]
            && v["valid"] == true
            && v["complete"] == true
            && v["expired"] == false
    });
    let button = |op: &str, label: &str| {
        html! {
            form method="post" action=(act) {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="op" value=(op);
                input type="hidden" name="revision" value=(current);
                input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                button type="submit" { (label) }
            }
        }
    };
    let stale = |v: &Value| v["revision"].as_str().is_some_and(|r| r != current);
    page(
        &format!("Proposal {id}"),
        Some(&s),
        html! {
            p { strong { (value(&p["title"])) } " · " (value(&p["status"])) " · by " (value(&p["author"]))
                " · risk " (value(&p["risk"])) }
            h2 { "Summary (as written by its author)" } pre { (visible(p["summary_md"].as_str().unwrap_or(""))) }
            @if *status == json!(ProposalState::Pending) && author { (button("request_review", "Request review")) }
            @if in_review && !pending_approval
                && (author || [Permission::Review, Permission::Approve, Permission::Admin].into_iter().any(|x| may(&st, &s, &ws, x))) {
                (button("request_approval", "Request human approval"))
            }
            @if in_review && (author || may(&st, &s, &ws, Permission::Apply)) { (button("validate", "Validate")) }
            @if in_review && may(&st, &s, &ws, Permission::Apply) && let Some(v) = applicable {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="apply";
                    input type="hidden" name="validation_id" value=(v["validation_id"].as_str().unwrap_or(""));
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    button type="submit" { "Apply" }
                }
            }
            h2 { "Revisions" }
            table {
                tr { th { "number" } th { "revision" } th { "bytes" } th { "created" } }
                @for r in p["revisions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    tr {
                        td { (value(&r["number"])) @if r["current"] != true { " " span.badge.stale { "not current" } } }
                        td { (value(&r["revision"])) } td { (value(&r["bytes"])) } td { (value(&r["created_at"])) }
                    }
                }
            }
            h2 { "Policy verdict" }
            @if let Some(v) = &verdict {
                table {
                    tr { th { "requirement" } th { "state" } th { "detail" } }
                    @for r in v["verdict"]["requirements"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                        tr {
                            td { (value(&r["name"])) }
                            td class=(r["state"].as_str().unwrap_or("")) { (value(&r["state"])) }
                            td { (value(&r["detail"])) }
                        }
                    }
                }
            }
            h2 { "Votes" }
            @for v in votes.as_ref().and_then(|v| v["votes"].as_array()).map(Vec::as_slice).unwrap_or(&[]) {
                div { @if stale(v) { span.badge.stale { "not current" } } (value(v)) }
            }
            @if in_review && !author && may(&st, &s, &ws, Permission::Review) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="vote";
                    input type="hidden" name="revision" value=(current);
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    label { "Vote on the current revision " select name="vote" {
                        @for v in ["approve", "approve_with_notes", "revise", "reject", "veto", "abstain"] {
                            option value=(v) { (v) }
                        }
                    } }
                    " " label { "Reason " input type="text" name="reason_md" required; }
                    " " button type="submit" { "Cast vote" }
                }
            }
            h2 { "Validations" }
            @for v in &validations {
                div {
                    @if stale(v) { span.badge.stale { "not current" } }
                    p { (value(&v["validation_id"])) " · valid " (value(&v["valid"])) " · complete " (value(&v["complete"])) }
                    (rows(v["stages"].as_array().map(Vec::as_slice).unwrap_or(&[]), &["name", "state", "reason"], |_| None))
                }
            }
            h2 { "Human approvals" }
            @for a in &approvals {
                div {
                    @if stale(a) { span.badge.stale { "not current" } }
                    (value(a))
                    @if a["state"] == json!(crate::domain::policy::ApprovalState::Pending) && can_approve && !stale(a) {
                        form method="post" action=(format!("/ui/w/{}/approvals/{}/decide", urlencode(&ws), urlencode(a["approval_id"].as_str().unwrap_or("")))) {
                            input type="hidden" name="csrf" value=(s.csrf);
                            input type="hidden" name="proposal_id" value=(id);
                            label { "Reason " input type="text" name="reason_md" required; }
                            " "
                            button type="submit" name="approve" value="true" { "Approve" }
                            " "
                            button type="submit" name="approve" value="false" { "Deny" }
                        }
                    }
                }
            }
            h2 { "Claims on the touched resources" }
            table {
                tr { th { "resource" } th { "holder" } th { "mode" } th { "fencing token" } th { "expires" } }
                @for c in touching(&claims, &p["affected_resources"], &got["files"]) {
                    tr {
                        td { (value(&c["resource_id"])) } td { (value(&c["holder"])) } td { (value(&c["mode"])) }
                        td { (value(&c["fencing_token"])) }
                        td { (value(&c["expires_at"])) " (" (countdown(&st, &c["expires_at"])) ")" }
                    }
                }
            }
            h2 { "Transactions" }
            @if let Some(t) = &transactions {
                (rows(t["transactions"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                    &["transaction_id", "status", "created_at"],
                    |t| t["transaction_id"].as_str().map(|tid| format!("/ui/w/{}/transactions/{}", urlencode(&ws), urlencode(tid)))))
            }
            h2 { "Files of the current revision" } (value(&got["files"]))
            h2 { "Decisions" } (value(&got["decisions"]))
        },
    )
}

/// The proposal page's workflow forms: request review, vote, request a human approval,
/// validate, apply; each the API method of that name, with the key made when the page rendered.
async fn proposal_act(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let s = match form_session(&st, &headers, field("csrf")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let key = field("idempotency_key");
    let (method, body) = match field("op") {
        "request_review" => (
            "proposal.request_review",
            json!({"workspace_id": ws, "proposal_id": id, "idempotency_key": key}),
        ),
        "vote" => (
            "vote.cast",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "vote": field("vote"), "reason_md": field("reason_md"), "idempotency_key": key}),
        ),
        "request_approval" => (
            "human.request_approval",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "idempotency_key": key}),
        ),
        "validate" => (
            "patch.validate",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "idempotency_key": key}),
        ),
        "apply" => (
            "patch.apply",
            json!({"workspace_id": ws, "proposal_id": id, "validation_id": field("validation_id"),
                   "idempotency_key": key}),
        ),
        other => {
            return refusal(
                StatusCode::BAD_REQUEST,
                Some(&s),
                &format!("op: unknown form action {other:?}"),
            );
        }
    };
    let back = format!("/ui/w/{}/proposals/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, method, body, &back).await
}

/// The transaction page's control buttons: `transaction.control` with the advised action.
async fn transaction_act(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let s = match form_session(&st, &headers, field("csrf")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let reason = Some(field("reason")).filter(|r| !r.trim().is_empty());
    let body = json!({"workspace_id": ws, "transaction_id": id, "action": field("action"),
                      "reason": reason, "idempotency_key": field("idempotency_key")});
    let back = format!("/ui/w/{}/transactions/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, "transaction.control", body, &back).await
}

#[derive(Deserialize)]
struct ApprovalForm {
    #[serde(default)]
    csrf: String,
    proposal_id: String,
    approve: bool,
    reason_md: String,
}

async fn approval_decide(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<ApprovalForm>,
) -> Response {
    let s = match form_session(&st, &headers, &f.csrf) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let body = json!({"workspace_id": ws, "approval_id": id, "approve": f.approve,
                      "reason_md": f.reason_md, "idempotency_key": crate::ids::new_creation_key()});
    let back = format!(
        "/ui/w/{}/proposals/{}",
        urlencode(&ws),
        urlencode(&f.proposal_id)
    );
    act(&st, &s, "human.decide", body, &back).await
}

async fn transaction_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
) -> Response {
    let body = json!({"workspace_id": ws, "transaction_id": id});
    let t = match call(&st, &s, "transaction.show", body.clone()).await {
        Ok(v) => v["transaction"].clone(),
        Err(e) => return error_page(&e, &s),
    };
    let phases = call(&st, &s, "transaction.phases", body.clone()).await;
    let recovery = call(&st, &s, "transaction.recovery", body).await;
    let section = |r: &Result<Value, ServiceError>, f: &dyn Fn(&Value) -> Markup| match r {
        Ok(v) => f(v),
        Err(e) => html! { p.blocked { (e.code()) ": " (e.to_string()) } },
    };
    page(
        &format!("Transaction {id}"),
        Some(&s),
        html! {
            p { "Status " strong { (value(&t["status"])) } " · proposal "
                a href=(format!("/ui/w/{}/proposals/{}", urlencode(&ws), urlencode(t["proposal_id"].as_str().unwrap_or("")))) {
                    (value(&t["proposal_id"]))
                }
            }
            h2 { "Phases" }
            (section(&phases, &|v| rows(v["phases"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                &["phase", "actor", "started_at", "ended_at", "reason", "failure_code", "request_id"], |_| None)))
            h2 { "Recovery: each touched path judged from the file" }
            (section(&recovery, &|v| html! {
                p { "Repository state " strong { (value(&v["repository_state"])) } }
                (rows(v["paths"].as_array().map(Vec::as_slice).unwrap_or(&[]), &["path", "state"], |_| None))
                h3 { "Advice" } (value(&v["actions"]))
                @if may(&st, &s, &ws, Permission::Apply) {
                    @for a in v["actions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                        @if let Some(action) = a.as_str().filter(|a| ["retry", "cancel", "compensate"].contains(a)) {
                            form method="post" action=(format!("/ui/w/{}/transactions/{}/act", urlencode(&ws), urlencode(&id))) {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="action" value=(action);
                                input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                                label { "Reason " input type="text" name="reason"; }
                                " " button type="submit" { (action) }
                            }
                        }
                    }
                }
                @if !v["blocked_reason"].is_null() { p.blocked { "Blocked: " (value(&v["blocked_reason"])) } }
                @if !v["artifact_error"].is_null() { p.blocked { "Rollback artifact: " (value(&v["artifact_error"])) } }
            }))
            h2 { "The transaction" } (value(&t))
        },
    )
}
