//! `GET /api/v1/events?workspace_id=W[&since=N][&subject=S][&kind=K]`: a workspace's durable
//! event log (the one `event.list` reads: the governed path's and the candidate flow's events)
//! pushed as server-sent events, for orchestrators that would otherwise poll.
//!
//! Each event is `id: <seq>`, `event: <kind>` and `data:` the `event.list` event as one JSON
//! line. The stream starts after `since`, or after the `Last-Event-ID` a reconnecting client
//! sends (it wins over `since`), or, with neither, at the end of the log (only new events). It
//! reads the log through the engine's feed (pages of
//! [`crate::engine::event_feed::EVENT_FEED_PAGE`]) when the store says something was written,
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
    let actor = authenticate(st.service.config(), token)
        .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))?;
    st.service
        .authorize(&actor, &q.workspace_id, Permission::View)?;
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
    if let Some(kind) = &q.kind {
        crate::domain::event_kind::check_filter("kind", kind)
            .map_err(|e| ServiceError::invalid_field("kind", e))?;
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
    let feed = st
        .service
        .event_feed(
            &actor,
            &q.workspace_id,
            q.subject,
            q.kind,
            last_event_id.or(since),
            st.service.background.logs.stopping(),
        )
        .await?;
    let state = Stream {
        feed,
        pending: VecDeque::new(),
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
    feed: crate::engine::event_feed::EventFeed,
    pending: VecDeque<Event>,
    done: bool,
    _permit: tokio::sync::OwnedSemaphorePermit,
    _dispatching: Option<server::Dispatching>,
}

impl Stream {
    /// The next event: a pending one, else the feed's next page, else the closing
    /// `airlock.stopping` when the daemon stops.
    async fn next(&mut self) -> Option<Event> {
        use crate::engine::event_feed::FeedStep;
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            match self.feed.step().await {
                FeedStep::Events(events) => {
                    for view in events {
                        self.pending.push_back(
                            Event::default()
                                .id(view.seq.to_string())
                                .event(view.kind.clone())
                                .data(serde_json::to_string(&view).expect("an event serializes")),
                        );
                    }
                }
                FeedStep::Stopping => {
                    self.done = true;
                    return Some(
                        Event::default()
                            .event("airlock.stopping")
                            .data("the daemon is stopping; reconnect with Last-Event-ID"),
                    );
                }
                FeedStep::Failed => {
                    self.done = true;
                    return Some(
                        Event::default()
                            .event("airlock.error")
                            .data("the event log could not be read; reconnect with Last-Event-ID"),
                    );
                }
                FeedStep::Closed => return None,
            }
        }
    }
}
