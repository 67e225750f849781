//! Jobs in the web page: a workspace's jobs (`/ui/w/{ws}/jobs`: waiting with their place in
//! the queue, running, and the recent ones, filtered by state and label, a page at a time) and
//! a job's page (`/ui/w/{ws}/jobs/{id}`). A running job's page is one streamed response the
//! browser renders as it arrives: its facts, then its log as the job writes it with the
//! phases marked where they happen (started, settled), then the settled result; no
//! JavaScript, the strict policy kept. A member with `verify` gets a Cancel button (a form
//! with the session's CSRF token, like every form).

use super::*;
use crate::engine::event_feed::FeedStep;
use crate::engine::jobs::Following;
use crate::engine::live_log::LogEvent;
use axum::body::{Body, Bytes};
use tokio::sync::broadcast::error::RecvError;

/// Most jobs one page of the jobs view lists.
pub const JOBS_PER_PAGE: u32 = 50;

#[derive(Deserialize, Default)]
pub(super) struct JobsQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

fn job_link(ws: &str, j: &Value) -> Option<String> {
    j["job_id"]
        .as_str()
        .map(|id| format!("/ui/w/{}/jobs/{}", urlencode(ws), urlencode(id)))
}

/// A job as a table row's fields.
fn flat(j: &Value) -> Value {
    json!({
        "job_id": j["job_id"],
        "state": j["state"],
        "position": j["position"],
        "revision": j["revision"],
        "commit": j["verification"]["candidate_revision"].as_str().map(|c| c.chars().take(12).collect::<String>()),
        "profile": j["profile"],
        "labels": j["labels"].as_array().map(|l| l.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")),
        "exit_code": j["verification"]["exit_code"],
        "queued_at": j["queued_at"],
        "started_at": j["started_at"],
        "engine": j["verification"]["engine"],
    })
}

/// `job.list` of `ws` as rows (or the refusal, in words).
async fn listed(
    st: &AppState,
    s: &UiSession,
    body: Value,
) -> Result<(Vec<Value>, Value), ServiceError> {
    let v = call(st, s, "job.list", body).await?;
    let jobs = v["jobs"]
        .as_array()
        .map(|a| a.iter().map(flat).collect())
        .unwrap_or_default();
    Ok((jobs, v["next_cursor"].clone()))
}

/// The running and waiting jobs of `ws` (for the overview, and the jobs view's top).
pub(super) async fn active(st: &AppState, s: &UiSession, ws: &str) -> Markup {
    let enc = urlencode(ws);
    let mut out = Vec::new();
    for (state, empty, cols) in [
        (
            "running",
            "No job is running.",
            &["job_id", "revision", "profile", "labels", "started_at"][..],
        ),
        (
            "queued",
            "No job is waiting.",
            &[
                "job_id",
                "position",
                "revision",
                "profile",
                "labels",
                "queued_at",
            ][..],
        ),
    ] {
        let r = listed(
            st,
            s,
            json!({"workspace_id": ws, "state": state, "limit": JOBS_PER_PAGE}),
        )
        .await;
        out.push(html! {
            h4 { (if state == "running" { "Running" } else { "Waiting" }) }
            @match &r {
                Err(e) => p.blocked { (e.code()) ": " (e.to_string()) },
                Ok((jobs, _)) if jobs.is_empty() => p { (empty) },
                Ok((jobs, _)) => (rows(jobs, cols, |j| job_link(ws, j))),
            }
        });
    }
    html! {
        @for o in out { (o) }
        p { a href=(format!("/ui/w/{enc}/jobs")) { "All jobs of " (ws) } }
    }
}

pub(super) async fn jobs_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path(ws): Path<String>,
    q: Result<Query<JobsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = q else {
        return refusal(
            StatusCode::BAD_REQUEST,
            Some(&s),
            "query: state, label and cursor only",
        );
    };
    if !st.service.config().workspaces.contains_key(&ws) || !may(&st, &s, &ws, Permission::View) {
        return refusal(
            StatusCode::NOT_FOUND,
            Some(&s),
            &format!("no workspace {ws:?} you may view"),
        );
    }
    let state = q.state.filter(|x| !x.is_empty());
    let label = q.label.filter(|x| !x.is_empty());
    let mut body = json!({"workspace_id": ws, "limit": JOBS_PER_PAGE});
    if let Some(x) = &state {
        body["state"] = json!(x);
    }
    if let Some(l) = &label {
        body["labels"] = json!([l]);
    }
    if let Some(c) = &q.cursor {
        body["cursor"] = json!(c);
    }
    let recent = match listed(&st, &s, body).await {
        Ok(r) => r,
        Err(e) => return error_page(&e, &s),
    };
    let enc = urlencode(&ws);
    let filtered = state.is_some() || label.is_some();
    let next = recent.1.as_str().map(|c| {
        let mut href = format!("/ui/w/{enc}/jobs?cursor={}", urlencode(c));
        if let Some(x) = &state {
            href.push_str(&format!("&state={}", urlencode(x)));
        }
        if let Some(l) = &label {
            href.push_str(&format!("&label={}", urlencode(l)));
        }
        href
    });
    let states = crate::wire::jobs::JobState::ALL;
    let top = if filtered || q.cursor.is_some() {
        html! {}
    } else {
        active(&st, &s, &ws).await
    };
    page(
        &format!("Jobs of {ws}"),
        Some(&s),
        html! {
            form method="get" action=(format!("/ui/w/{enc}/jobs")) {
                label { "State " select name="state" {
                    option value="" selected[state.is_none()] { "any" }
                    @for x in states {
                        option value=(x.as_str()) selected[state.as_deref() == Some(x.as_str())] { (x.as_str()) }
                    }
                } }
                " " label { "Label " input type="text" name="label" value=(label.clone().unwrap_or_default()); }
                " " button type="submit" { "Filter" }
            }
            (top)
            h3 { @if filtered { "Jobs" } @else { "Recent" } }
            @if recent.0.is_empty() {
                p { "No jobs" @if filtered { " match" } "." }
            } @else {
                (rows(&recent.0, &["job_id", "state", "position", "revision", "commit", "profile", "labels", "exit_code", "queued_at", "started_at"], |j| job_link(&ws, j)))
            }
            @if let Some(n) = next { p { a href=(n) { "Older jobs →" } } }
        },
    )
}

/// The facts of a job, above its log.
fn facts(j: &Value, live: bool) -> Markup {
    let v = &j["verification"];
    html! {
        table.job {
            tr { th { @if live { "state when this page opened" } @else { "state" } } td { strong.state { (value(&j["state"])) } } }
            tr { th { "revision" } td { (value(&j["revision"])) " → " code { (value(&v["candidate_revision"])) } } }
            tr { th { "profile" } td { (value(&j["profile"])) } }
            tr { th { "argv" } td { code { (v["argv"].as_array().map(|a| a.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect::<Vec<_>>().join(" ")).unwrap_or_default()) } } }
            tr { th { "image" } td { code { (value(&v["image"])) } } }
            tr { th { "environment" } td { code { (value(&v["environment_sha256"])) } } }
            tr { th { "isolation" } td { (value(&v["runtime"])) } }
            tr { th { "limits" } td { (value(&v["cpu_limit"])) " CPU · " (v["memory_limit_bytes"].as_i64().map(|b| format!("{} MiB", b >> 20)).unwrap_or_default()) " · timeout " (value(&v["timeout_seconds"])) " s" } }
            tr { th { "labels" } td { (value(&j["labels"])) } }
            tr { th { "queued at" } td { (value(&j["queued_at"])) @if let Some(p) = j["position"].as_u64() { " · place " (p) " in the queue" } } }
            tr { th { "started at" } td { (value(&j["started_at"])) } }
            @if !v["engine"].is_null() {
                tr { th { "engine" } td { (value(&v["engine"])) } }
            }
            @if v["dependencies"].is_object() {
                tr { th { "dependencies" } td { (value(&v["dependencies"])) } }
            }
        }
    }
}

/// The settled result: status, exit, phases, the retained output and the attestation.
fn result(st: &AppState, j: &Value) -> Markup {
    let v = &j["verification"];
    html! {
        h2 { "Result" }
        p.headline.(if j["state"] == "passed" { "ready" } else { "blocked" }) {
            "Settled " strong { (value(&j["state"])) }
            @if let Some(code) = v["exit_code"].as_i64() { " · exit " (code) }
            @if let Some(ms) = v["duration_ms"].as_u64() { " · ran " (ms) " ms" }
            @if v["oom_killed"] == true { " · killed for memory" }
            " · finished " (value(&v["finished_at"]))
        }
        @if let Some(e) = v["error"].as_str() { p.blocked { "Error: " (e) } }
        @if j["phases"].is_object() {
            h3 { "Phases" }
            (value(&j["phases"]))
        }
        h3 { "Output (" (value(&v["output_bytes_total"])) " bytes" @if v["output_truncated"] == true { "; head and tail kept" } ")" }
        pre.output { (visible(v["output"].as_str().unwrap_or(""))) }
        p { "Attestation: " (attestation(&v["attestation"], st.service.attestor())) }
    }
}

fn cancel_form(s: &UiSession, ws: &str, id: &str) -> Markup {
    html! {
        form method="post" action=(format!("/ui/w/{}/jobs/{}/cancel", urlencode(ws), urlencode(id))) {
            input type="hidden" name="csrf" value=(s.csrf);
            button type="submit" { "Cancel job" }
        }
    }
}

/// Bytes of output as escaped HTML text, carrying an incomplete UTF-8 sequence over to the
/// next chunk.
#[derive(Default)]
struct Escaper {
    carry: Vec<u8>,
}

impl Escaper {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.carry.extend_from_slice(bytes);
        let cut = match std::str::from_utf8(&self.carry) {
            Ok(_) => self.carry.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.carry.len(),
        };
        let rest = self.carry.split_off(cut);
        let text = String::from_utf8_lossy(&self.carry).into_owned();
        self.carry = rest;
        html! { (visible(&text)) }.into_string()
    }

    fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.carry);
        html! { (String::from_utf8_lossy(&rest)) }.into_string()
    }
}

fn marker(text: &str) -> String {
    html! { span.phase { "\n▶ " (text) "\n" } }.into_string()
}

/// What a live page's stream is doing.
enum Live {
    Streaming,
    /// The log ended; the result is rendered next.
    Ended(Option<String>),
    Done,
}

pub(super) async fn job_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
    req: axum::extract::Request,
) -> Response {
    let j = match call(
        &st,
        &s,
        "job.show",
        json!({"workspace_id": ws, "job_id": id}),
    )
    .await
    {
        Ok(v) => v["job"].clone(),
        Err(e) => return error_page(&e, &s),
    };
    let title = format!("Job {id}");
    let enc = urlencode(&ws);
    let back = html! { p { a href=(format!("/ui/w/{enc}/jobs")) { "← jobs of " (ws) } } };
    let live = matches!(j["state"].as_str(), Some("queued" | "running"));
    let can_cancel = live && may(&st, &s, &ws, Permission::Verify);
    if !live {
        return page(
            &title,
            Some(&s),
            html! { (back) (facts(&j, false)) (result(&st, &j)) },
        );
    }
    // Live: the facts, then the log as it arrives, then the result, in one response.
    let following = match st.service.jobs.follow(&s.actor, &ws, &id).await {
        Ok(f) => f,
        Err(e) => return error_page(&e, &s),
    };
    let feed = st
        .service
        .event_feed(
            &s.actor,
            &ws,
            Some(id.clone()),
            None,
            None,
            st.service.background.logs.stopping(),
        )
        .await;
    let (head, tail) = page_parts(&title, Some(&s));
    let mut first = head;
    first.push_str(
        &html! {
            (back)
            (facts(&j, true))
            @if can_cancel { (cancel_form(&s, &ws, &id)) }
            h2 { "Log" }
            p { "This page follows the job: the log grows as the job writes it, and the result follows when it settles." }
        }
        .into_string(),
    );
    first.push_str("<pre class=\"log\">");
    let mut esc = Escaper::default();
    let (events, stopping) = match following {
        Following::Done(log) => {
            first.push_str(&esc.push(log.log.as_bytes()));
            (None, None)
        }
        Following::Live(f) => {
            first.push_str(&esc.push(&f.head));
            if f.skipped > 0 {
                first.push_str(&marker(&format!(
                    "{} bytes omitted before this page opened",
                    f.skipped
                )));
            }
            (Some(f.events), Some(f.stopping))
        }
    };
    let conn = req
        .extensions()
        .get::<crate::api::server::ConnHandle>()
        .cloned();
    let dispatching = conn
        .as_ref()
        .map(crate::api::server::ConnHandle::dispatching);
    struct S {
        st: AppState,
        s: UiSession,
        ws: String,
        id: String,
        tail: String,
        first: Option<String>,
        events: Option<tokio::sync::broadcast::Receiver<LogEvent>>,
        stopping: Option<tokio::sync::watch::Receiver<bool>>,
        feed: Option<crate::engine::event_feed::EventFeed>,
        esc: Escaper,
        live: Live,
        _dispatching: Option<crate::api::server::Dispatching>,
    }
    let state = S {
        st: st.clone(),
        s: s.clone(),
        ws: ws.clone(),
        id: id.clone(),
        tail,
        first: Some(first),
        live: if events.is_some() {
            Live::Streaming
        } else {
            Live::Ended(None)
        },
        events,
        stopping,
        feed: feed.ok(),
        esc,
        _dispatching: dispatching,
    };
    let stream = futures_util::stream::unfold(state, |mut x| async move {
        if let Some(first) = x.first.take() {
            return Some((Ok::<_, std::convert::Infallible>(Bytes::from(first)), x));
        }
        match std::mem::replace(&mut x.live, Live::Done) {
            Live::Done => None,
            Live::Ended(note) => {
                let mut out = x.esc.finish();
                if let Some(n) = note {
                    out.push_str(&marker(&n));
                }
                out.push_str("</pre>");
                // The settled job, read again now.
                let body = json!({"workspace_id": x.ws, "job_id": x.id});
                match call(&x.st, &x.s, "job.show", body).await {
                    Ok(v) if !matches!(v["job"]["state"].as_str(), Some("queued" | "running")) => {
                        out.push_str(&result(&x.st, &v["job"]).into_string());
                    }
                    Ok(_) => out.push_str(&html! { p { "The job has not settled in this daemon; reload this page to see it." } }.into_string()),
                    Err(e) => out.push_str(&html! { p.blocked { (e.code()) ": " (e.to_string()) } }.into_string()),
                }
                out.push_str(&x.tail);
                Some((Ok(Bytes::from(out)), x))
            }
            Live::Streaming => {
                let events = x.events.as_mut()?;
                let stopping = x.stopping.as_mut();
                let feed = x.feed.as_mut();
                let chunk = tokio::select! {
                    r = events.recv() => match r {
                        Ok(LogEvent::Output(b)) => {
                            x.live = Live::Streaming;
                            x.esc.push(&b)
                        }
                        Ok(LogEvent::Settled(status)) => {
                            x.live = Live::Ended(Some(match status {
                                Some(st) => format!("settled: {}", st.as_str()),
                                None => "the job ended without a result in this daemon; recovery will settle it".into(),
                            }));
                            String::new()
                        }
                        Err(RecvError::Lagged(n)) => {
                            x.live = Live::Ended(Some(format!("this page fell {n} chunks behind; the retained output is below")));
                            String::new()
                        }
                        Err(RecvError::Closed) => {
                            x.live = Live::Ended(None);
                            String::new()
                        }
                    },
                    step = async {
                        match feed {
                            Some(f) => f.step().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        x.live = Live::Streaming;
                        match step {
                            FeedStep::Events(es) => es
                                .iter()
                                .filter(|e| e.kind == crate::domain::event_kind::JOB_STARTED)
                                .map(|e| marker(&format!("started at {}", e.at)))
                                .collect(),
                            _ => {
                                x.feed = None;
                                String::new()
                            }
                        }
                    },
                    _ = async {
                        match stopping {
                            Some(s) => { let _ = s.wait_for(|v| *v).await; }
                            None => std::future::pending::<()>().await,
                        }
                    } => {
                        x.live = Live::Ended(Some("the daemon is stopping; this page ends here".into()));
                        String::new()
                    }
                };
                Some((Ok(Bytes::from(chunk)), x))
            }
        }
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

/// The jobs page's Cancel button.
pub(super) async fn job_cancel(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<CsrfForm>,
) -> Response {
    let s = match form_session(&st, &headers, &f.csrf) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let back = format!("/ui/w/{}/jobs/{}", urlencode(&ws), urlencode(&id));
    act(
        &st,
        &s,
        "job.cancel",
        json!({"workspace_id": ws, "job_id": id}),
        &back,
    )
    .await
}
