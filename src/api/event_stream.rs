//! `GET /api/v1/events?workspace_id=W[&since=N][&subject=S][&kind=K]`: a workspace's durable
//! event log (the one `event.list` reads: the governed path's and the candidate flow's events)
//! pushed as server-sent events, for orchestrators that would otherwise poll.
//!
//! Each event is `id: <seq>`, `event: <kind>` and `data:` the `event.list` event as one JSON
//! line. The stream starts after `since`, or after the `Last-Event-ID` a reconnecting client
//! sends (it wins over `since`), or, with neither, at the end of the log (only new events). It
//! reads the log in pages of [`EVENT_STREAM_PAGE`] when the store says something was written,
//! so a slow client holds back only its own stream: nothing is buffered beyond one page. A
//! comment line every [`EVENT_STREAM_HEARTBEAT`] keeps proxies from closing an idle stream. At
//! most [`MAX_EVENT_STREAMS`] are open at once; when the daemon stops, each ends with an
//! `airlock.stopping` event, and a client reconnects with `Last-Event-ID` to miss nothing.

use super::{ApiError, AppState, authenticate, bearer, hygiene, server};
use crate::config::Permission;
use crate::engine::service::ServiceError;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Events read from the log per query.
pub const EVENT_STREAM_PAGE: u32 = 100;
/// Event streams open at once (each holds a connection).
pub const MAX_EVENT_STREAMS: usize = 64;
/// The idle interval after which a stream sends a heartbeat comment.
pub const EVENT_STREAM_HEARTBEAT: Duration = Duration::from_secs(15);

/// The query string.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamQuery {
    workspace_id: String,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

/// The bound on open streams, shared by every request of one router.
#[derive(Debug, Clone)]
pub struct StreamSlots(Arc<tokio::sync::Semaphore>);

impl Default for StreamSlots {
    fn default() -> StreamSlots {
        StreamSlots(Arc::new(tokio::sync::Semaphore::new(MAX_EVENT_STREAMS)))
    }
}

pub(super) async fn events(
    State(st): State<AppState>,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
    req: axum::extract::Request,
) -> Response {
    let id = hygiene::request_id(&req);
    let q = match super::query_or_refuse(q, id.clone()) {
        Ok(q) => q,
        Err(refused) => return *refused,
    };
    let conn = req.extensions().get::<server::ConnHandle>().cloned();
    match answer(&st, q, req.headers(), conn).await {
        Ok(r) => r,
        Err(e) => ApiError(e, id).into_response(),
    }
}

fn position(field: &str, text: &str) -> Result<i64, ServiceError> {
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            ServiceError::invalid_field(
                field,
                format!("{field} {text:?} is not an event sequence number (0 or more)"),
            )
        })
}

async fn answer(
    st: &AppState,
    q: StreamQuery,
    headers: &axum::http::HeaderMap,
    conn: Option<server::ConnHandle>,
) -> Result<Response, ServiceError> {
    if !st.ready.load(Ordering::SeqCst) {
        return Err(ServiceError::Unavailable(
            "recovery has not finished".into(),
        ));
    }
    let token = bearer(headers)?;
    let actor = authenticate(&st.service.ctx.config, token)
        .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))?;
    let ctx = &st.service.ctx;
    ctx.authorize(&actor, &q.workspace_id, Permission::View)?;
    let last_event_id = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .map_err(|_| ServiceError::invalid_field("Last-Event-ID", "it is not ASCII"))
                .and_then(|t| position("Last-Event-ID", t))
        })
        .transpose()?;
    let since = q
        .since
        .as_deref()
        .map(|t| position("since", t))
        .transpose()?;
    for (name, v) in [("subject", &q.subject), ("kind", &q.kind)] {
        if v.as_ref().is_some_and(|s| s.is_empty() || s.len() > 256) {
            return Err(ServiceError::invalid_field(
                name,
                format!("{name} must be 1..=256 bytes"),
            ));
        }
    }
    let permit = st
        .event_streams
        .0
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            ServiceError::exhausted_field(
                "event_streams",
                format!("{MAX_EVENT_STREAMS} event streams are open; close one or poll event.list"),
            )
        })?;
    let store = ctx.data.store.clone();
    let after = match last_event_id.or(since) {
        Some(n) => n,
        None => store.last_event_seq(&q.workspace_id).await?,
    };
    let state = Stream {
        store,
        workspace_id: q.workspace_id,
        subject: q.subject,
        kind: q.kind,
        after,
        pending: VecDeque::new(),
        changes: ctx.data.store.changes(),
        stopping: st.service.background.logs.stopping(),
        done: false,
        _permit: permit,
        _dispatching: conn.as_ref().map(server::ConnHandle::dispatching),
    };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let event = s.next().await?;
        Some((Ok::<_, std::convert::Infallible>(event), s))
    });
    let mut resp = Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(EVENT_STREAM_HEARTBEAT)
                .text("heartbeat"),
        )
        .into_response();
    resp.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(resp)
}

struct Stream {
    store: crate::store::Store,
    workspace_id: String,
    subject: Option<String>,
    kind: Option<String>,
    after: i64,
    pending: VecDeque<Event>,
    changes: tokio::sync::watch::Receiver<u64>,
    stopping: tokio::sync::watch::Receiver<bool>,
    done: bool,
    _permit: tokio::sync::OwnedSemaphorePermit,
    _dispatching: Option<server::Dispatching>,
}

impl Stream {
    /// The next event: a pending one, else the next page of the log once something was
    /// written, else the closing `airlock.stopping` when the daemon stops.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            // Seen before the read: a write that lands after it wakes the wait below.
            self.changes.borrow_and_update();
            let rows =
                match self
                    .store
                    .list_events(
                        &self.workspace_id,
                        self.subject.clone(),
                        self.kind.clone(),
                        self.after,
                        EVENT_STREAM_PAGE,
                    )
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) => {
                        tracing::error!(error = %e, "an event stream could not read the log");
                        self.done = true;
                        return Some(Event::default().event("airlock.error").data(
                            "the event log could not be read; reconnect with Last-Event-ID",
                        ));
                    }
                };
            if !rows.is_empty() {
                for (seq, subject, kind, actor, prior, new, payload, at) in rows {
                    self.after = seq;
                    let view = crate::wire::EventView {
                        seq,
                        subject,
                        kind: kind.clone(),
                        actor,
                        prior,
                        new,
                        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                        at,
                    };
                    self.pending.push_back(
                        Event::default()
                            .id(seq.to_string())
                            .event(kind)
                            .data(serde_json::to_string(&view).expect("an event serializes")),
                    );
                }
                continue;
            }
            if *self.stopping.borrow() {
                self.done = true;
                return Some(
                    Event::default()
                        .event("airlock.stopping")
                        .data("the daemon is stopping; reconnect with Last-Event-ID"),
                );
            }
            tokio::select! {
                r = self.changes.changed() => {
                    if r.is_err() {
                        self.done = true;
                    }
                }
                _ = self.stopping.wait_for(|s| *s) => {}
            }
        }
    }
}
