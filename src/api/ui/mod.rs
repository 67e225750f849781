//! The web page for humans at `/ui/`: server-rendered (maud escapes every interpolated string),
//! no JavaScript at all, a strict Content-Security-Policy. Sign-in exchanges a member's bearer
//! token for a session cookie (`HttpOnly`, `SameSite=Strict`, path `/ui`); every form carries
//! the session's CSRF token. Every page and every button goes through the API's dispatcher as
//! the signed-in member, so the permissions are the API's, checked on the server; a button the
//! member may not use is not shown, and its POST is refused anyway.

mod candidate;
mod compare;
mod diff;
mod jobs;
mod overview;
mod proposal;
mod transaction;

use super::{AppState, run};
use crate::config::Permission;
use crate::domain::candidate::CandidateState;
use crate::domain::delivery::RequestState;
use crate::domain::proposal::{ProposalEvent, ProposalState};
use crate::engine::service::{Actor, ServiceError, authenticate};
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use candidate::*;
use maud::{DOCTYPE, Markup, html};
use proposal::*;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use transaction::*;

const COOKIE: &str = "airlock_session";
/// The sign-in form's CSRF cookie (double submit: the form carries the same value).
const LOGIN_COOKIE: &str = "airlock_login";
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";
const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;\
padding:0 1rem;color:#1b1b1b}table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px \
solid #ccc;padding:.2rem .5rem;vertical-align:top;text-align:left}pre{background:#f4f4f4;\
padding:.5rem;overflow:auto;max-height:30rem;white-space:pre-wrap}.badge{background:#eee;\
border-radius:.3rem;padding:0 .4rem}.stale{background:#fde2c8}.missing{color:#a15c00}\
.blocked{color:#b00020}.satisfied{color:#1b6e20}form.inline{display:inline}nav a{margin-right:1rem}\
td code{word-break:break-all;font-size:.85em}pre.diff{max-height:none;white-space:pre-wrap;background:#fafafa}.diff .add{background:#e6ffec}.diff .del{background:#ffebe9}.diff .hunk{background:#eef3ff;color:#44546a}.diff .meta{color:#57606a}.headline{padding:.6rem 1rem;border-radius:.3rem;font-size:1.1rem}.headline.ready{background:#e6ffec}.headline.blocked{background:#ffebe9}.headline.waiting{background:#fff8c5}section.file{margin:1rem 0}pre.log{max-height:none}.phase{color:#44546a;font-weight:600}";

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
        .route("/ui/", get(overview::index))
        .route("/ui/style.css", get(style))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/w/{ws}/candidates/{id}", get(candidate_page))
        .route("/ui/w/{ws}/candidates/{id}/decide", post(candidate_decide))
        .route(
            "/ui/w/{ws}/candidates/{id}/act",
            post(candidate_act).layer(axum::extract::DefaultBodyLimit::max(
                crate::limits::UI_RESOLVE_FORM_LIMIT,
            )),
        )
        .route("/ui/w/{ws}/proposals/{id}", get(proposal_page))
        .route("/ui/w/{ws}/approvals/{id}/decide", post(approval_decide))
        .route("/ui/w/{ws}/proposals/{id}/act", post(proposal_act))
        .route("/ui/w/{ws}/jobs", get(jobs::jobs_page))
        .route("/ui/w/{ws}/jobs/{id}", get(jobs::job_page))
        .route("/ui/w/{ws}/jobs/{id}/cancel", post(jobs::job_cancel))
        .route("/ui/w/{ws}/transactions/{id}", get(transaction_page))
        .route("/ui/w/{ws}/transactions/{id}/act", post(transaction_act))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::limits::UI_FORM_LIMIT,
        ))
        .layer(axum::middleware::map_response(harden))
}

/// A `/ui/...` path the page does not have, or a verb it does not take there: an HTML page
/// (with the pages' headers), never the API's JSON envelope.
pub async fn no_page(method: &axum::http::Method, path: &str, known_path: bool) -> Response {
    let (status, message) = if known_path {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} is not accepted on {path}"),
        )
    } else {
        (
            StatusCode::NOT_FOUND,
            format!(
                "There is no page at {path}. The overview at /ui/ links to every page you may see."
            ),
        )
    };
    harden(refusal(status, None, &message)).await
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
        // Our own form POSTs then carry their real Origin (no-referrer made it "null");
        // nothing is sent to other sites.
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    named_cookie(headers, COOKIE)
}

fn named_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether a POST comes from this site's own pages: its `Origin` (which browsers send with
/// every form POST) is the address it was sent to (`Host`) or `public_url`'s, and its
/// `Sec-Fetch-Site`, when sent, is not cross-site. A request without either header (not a
/// browser, or a very old one) still needs the CSRF token.
fn same_origin(st: &AppState, headers: &HeaderMap) -> bool {
    let text = |h: header::HeaderName| headers.get(h).and_then(|v| v.to_str().ok());
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site) = site
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    let Some(origin) = text(header::ORIGIN) else {
        return true;
    };
    // An opaque origin (a sandboxed frame, a data: page, or a referrer policy that hides
    // it) is trusted only when the browser itself says the request is same-origin.
    if origin == "null" {
        return site == Some("same-origin");
    }
    let host = text(header::HOST).unwrap_or_default();
    let public = st
        .service
        .config()
        .public_url
        .as_deref()
        .map(|u| u.trim_end_matches('/'));
    let own = [format!("http://{host}"), format!("https://{host}")];
    (!host.is_empty() && own.iter().any(|o| o == origin))
        || public.is_some_and(|p| {
            // The origin part of public_url (scheme://host[:port]).
            let end = p
                .find("://")
                .and_then(|i| p[i + 3..].find('/').map(|j| i + 3 + j))
                .unwrap_or(p.len());
            &p[..end] == origin
        })
}

fn cross_site() -> Response {
    refusal(
        StatusCode::FORBIDDEN,
        None,
        "a form sent from another site is refused (its Origin is not this daemon's)",
    )
}

fn session(st: &AppState, headers: &HeaderMap) -> Option<(String, UiSession)> {
    let id = cookie_of(headers)?;
    st.ui_sessions.get(&id).map(|s| (id, s))
}

/// A form's sender has a session, checked from the headers before the body is read (a form
/// route with a large body limit is only open to signed-in members).
struct SessionFirst;

impl axum::extract::FromRequestParts<AppState> for SessionFirst {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &AppState,
    ) -> Result<Self, Response> {
        session(st, &parts.headers)
            .map(|_| SessionFirst)
            .ok_or_else(|| refusal(StatusCode::UNAUTHORIZED, None, "sign in first"))
    }
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
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        document(title, who, body),
    )
        .into_response()
}

/// A page cut where its body goes: what comes before it and after it (a streamed page sends
/// its body between them as it is made).
fn page_parts(title: &str, who: Option<&UiSession>) -> (String, String) {
    const CUT: &str = "\u{1}airlock-body\u{1}";
    let doc = document(title, who, maud::PreEscaped(CUT.to_string()));
    let (a, b) = doc.split_once(CUT).expect("the cut is in the page");
    (a.to_string(), b.to_string())
}

fn document(title: &str, who: Option<&UiSession>, body: Markup) -> String {
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
    doc.into_string()
}

fn refusal(status: StatusCode, who: Option<&UiSession>, message: &str) -> Response {
    let mut r = page("Refused", who, html! { p { (message) } });
    *r.status_mut() = status;
    r
}

/// A form POST naming an action its page does not have.
fn unknown_op(s: &UiSession, op: &str) -> Response {
    refusal(
        StatusCode::BAD_REQUEST,
        Some(s),
        &format!("op: unknown form action {op:?}"),
    )
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
    st.service.may(&s.actor, ws, p)
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
    if !same_origin(st, headers) {
        return Err(Box::new(cross_site()));
    }
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

async fn login_page(State(st): State<AppState>) -> Response {
    // A fresh nonce, as a cookie and in the form: a cross-site form has neither the cookie
    // (SameSite=Strict) nor the value, so nobody signs a browser in under another token.
    let nonce = crate::ids::new_creation_key();
    let mut resp = page(
        "Sign in",
        None,
        html! {
            p { "Sign in with your member bearer token. It is exchanged for a session cookie and never stored in the browser." }
            form method="post" action="/ui/login" {
                input type="hidden" name="csrf" value=(nonce);
                label { "Token " input type="password" name="token" autocomplete="off" required; }
                " " button type="submit" { "Sign in" }
            }
        },
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{LOGIN_COOKIE}={nonce}; Path=/ui/login; HttpOnly; SameSite=Strict; Max-Age={}{}",
        crate::limits::UI_LOGIN_FORM_TTL.as_secs(),
        secure(&st)
    )) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// `; Secure` when browsers reach the daemon over TLS (`public_url` is https://: Airlock
/// itself speaks plain HTTP behind a TLS proxy), nothing otherwise: a Secure cookie over plain
/// HTTP would never come back.
fn secure(st: &AppState) -> &'static str {
    let tls = st
        .service
        .config()
        .public_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"));
    if tls { "; Secure" } else { "" }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    csrf: String,
}

async fn login(
    State(st): State<AppState>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    if !same_origin(&st, &headers) {
        return cross_site();
    }
    let nonce = named_cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    let (a, b) = (nonce.as_bytes(), f.csrf.as_bytes());
    let matches = !a.is_empty()
        && a.len() == b.len()
        && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0;
    if !matches {
        return refusal(
            StatusCode::FORBIDDEN,
            None,
            "the sign-in form's CSRF token is missing or wrong: open /ui/login and sign in from there",
        );
    }
    let member = match authenticate(st.service.config(), &f.token) {
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
        "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{}",
        crate::limits::UI_SESSION_TTL.as_secs(),
        secure(&st)
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
    if !same_origin(&st, &headers) {
        return cross_site();
    }
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
                format!(
                    "{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{}",
                    secure(&st)
                ),
            ),
            (header::LOCATION, "/ui/login".to_string()),
        ],
    )
        .into_response()
}

/// Renders any JSON value as escaped HTML: objects as tables, arrays as lists, strings as text
/// (multi-line ones as preformatted text). Nothing from a value is ever markup.
/// An attestation (a DSSE envelope, or null): the key it is signed with, checked here
/// against the daemon's keys, with a verified mark or the reason it does not verify.
fn attestation(a: &Value, keys: &crate::engine::attesting::Attestor) -> Markup {
    if a.is_null() {
        return html! { span.badge { "not signed" } };
    }
    let checked = serde_json::from_value::<crate::attest::Envelope>(a.clone())
        .map_err(|e| e.to_string())
        .and_then(|env| keys.check(&env).map_err(|e| e.to_string()));
    html! {
        @match checked {
            Ok(v) => span.satisfied.attestation data-verified="true" {
                "✓ verified · key " code { (v.key_id) } " · " code { (v.digest) }
            },
            Err(why) => span.blocked.attestation data-verified="false" {
                "✗ does not verify: " (why)
            },
        }
    }
}

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

/// Where the ids a page shows lead: each kind of id to the page (or the place on a page) that
/// shows its record, within the page's workspace. The candidate or proposal the page is about
/// places the ids that live on its page (a verification, a delivery request, a validation).
pub(super) struct Links<'a> {
    pub ws: &'a str,
    pub candidate: Option<&'a str>,
    pub proposal: Option<&'a str>,
}

impl Links<'_> {
    /// The link of `id`, when its kind has a page and `id` has the shape of one.
    pub fn href(&self, id: &str) -> Option<String> {
        let (prefix, rest) = id.split_once('_')?;
        if rest.len() != 32 || !rest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let ws = urlencode(self.ws);
        let on = |page: &str, of: Option<&str>, anchor: &str| {
            of.map(|o| format!("/ui/w/{ws}/{page}/{}#{anchor}", urlencode(o)))
        };
        match prefix {
            "cand" => Some(format!("/ui/w/{ws}/candidates/{id}")),
            "prp" => Some(format!("/ui/w/{ws}/proposals/{id}")),
            "txn" => Some(format!("/ui/w/{ws}/transactions/{id}")),
            "job" => Some(format!("/ui/w/{ws}/jobs/{id}")),
            "ver" => on("candidates", self.candidate, &format!("verification-{id}"))
                .or_else(|| on("proposals", self.proposal, &format!("verification-{id}"))),
            "req" => on("candidates", self.candidate, "delivery-request"),
            "rcpt" => on("candidates", self.candidate, "receipt"),
            "val" => on("proposals", self.proposal, &format!("validation-{id}")),
            "apr" => on("proposals", self.proposal, &format!("approval-{id}")),
            _ => None,
        }
    }

    /// `id` as a link to its record, or as code when it has none.
    pub fn id(&self, id: &str) -> Markup {
        match self.href(id) {
            Some(h) => html! { a href=(h) { code { (visible(id)) } } },
            None => html! { code { (visible(id)) } },
        }
    }

    /// [`value`], with every id in it a link.
    pub fn value(&self, v: &Value) -> Markup {
        match v {
            Value::String(s) if self.href(s).is_some() => self.id(s),
            Value::Array(a) if !a.is_empty() => {
                html! { ol { @for x in a { li { (self.value(x)) } } } }
            }
            Value::Object(o) => html! {
                table { @for (k, x) in o { tr { th { (k) } td { (self.value(x)) } } } }
            },
            other => value(other),
        }
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

/// Candidates with their `age` and time to expiry, as the index lists them.
fn with_times(st: &AppState, list: &Value) -> Vec<Value> {
    list.as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c["age"] = json!(age(st, &c["created_at"]));
            c["expires"] = json!(countdown(st, &c["expires_at"]));
            c
        })
        .collect()
}

/// Seconds from now to an RFC 3339 time by the daemon's clock (negative when past).
fn seconds_until(st: &AppState, at: &Value) -> Option<i64> {
    let t = at.as_str().and_then(crate::ids::parse_rfc3339)?;
    Some((t - st.service.now()).whole_seconds())
}

/// "2d 3h", "3h 5m" or "5m 3s": the two largest units of a duration.
fn span(secs: i64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h) {
        (0, 0) => format!("{m}m {s}s"),
        (0, h) => format!("{h}h {m}m"),
        (d, h) => format!("{d}d {h}h"),
    }
}

/// "in 5m 3s" or "expired" (no JavaScript: the page says how long was left when it was
/// rendered).
fn countdown(st: &AppState, at: &Value) -> String {
    match seconds_until(st, at) {
        None => "unknown".into(),
        Some(left) if left <= 0 => "expired".into(),
        Some(left) => format!("in {}", span(left)),
    }
}

/// "3h 5m ago", from an RFC 3339 time.
fn age(st: &AppState, at: &Value) -> String {
    match seconds_until(st, at) {
        None => "unknown".into(),
        Some(left) => format!("{} ago", span((-left).max(0))),
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

#[cfg(test)]
mod tests {
    #[test]
    fn ids_link_to_their_records_and_nothing_else_does() {
        let hex = "0123456789abcdef0123456789abcdef";
        let on_candidate = super::Links {
            ws: "w s",
            candidate: Some("cand_1"),
            proposal: None,
        };
        assert_eq!(
            on_candidate.href(&format!("ver_{hex}")).unwrap(),
            format!("/ui/w/w%20s/candidates/cand_1#verification-ver_{hex}")
        );
        assert_eq!(
            on_candidate.href(&format!("txn_{hex}")).unwrap(),
            format!("/ui/w/w%20s/transactions/txn_{hex}")
        );
        assert_eq!(
            on_candidate.href(&format!("req_{hex}")).unwrap(),
            "/ui/w/w%20s/candidates/cand_1#delivery-request"
        );
        // A validation lives on a proposal's page: none here.
        assert_eq!(on_candidate.href(&format!("val_{hex}")), None);
        for not_an_id in [
            "ver_<script>".to_string(),
            format!("ver_{hex}0"),
            format!("clm_{hex}"),
            "main".into(),
        ] {
            assert_eq!(on_candidate.href(&not_an_id), None, "{not_an_id}");
        }
        let html = on_candidate
            .value(&serde_json::json!({"a": [format!("prp_{hex}"), "<b>"]}))
            .into_string();
        assert!(
            html.contains(&format!(
                "<a href=\"/ui/w/w%20s/proposals/prp_{hex}\"><code>prp_{hex}</code></a>"
            )),
            "{html}"
        );
        assert!(html.contains("&lt;b&gt;"), "{html}");
    }

    #[test]
    fn spans_name_their_two_largest_units() {
        assert_eq!(super::span(0), "0m 0s");
        assert_eq!(super::span(303), "5m 3s");
        assert_eq!(super::span(3 * 3600 + 5 * 60 + 9), "3h 5m");
        assert_eq!(super::span(30 * 86_400 - 1), "29d 23h");
    }
}
