//! `GET /api/v1/jobs/{job_id}/log[?follow=1]`: a job's log as `text/plain`. Without `follow`
//! it is `job.log`'s text. With it, a running job's output streams (chunked) as it arrives:
//! the output so far, then every chunk, then one closing line with the settled status. A
//! follower that falls behind is dropped with a note; the job never waits for it.

use super::{ApiError, AppState, authenticate, bearer, hygiene, server};
use crate::engine::jobs::Following;
use crate::engine::live_log::LogEvent;
use crate::engine::service::ServiceError;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use std::sync::atomic::Ordering;
use tokio::sync::broadcast::error::RecvError;

/// The query string.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogQuery {
    /// `1` or `true` to stream a running job's output.
    #[serde(default)]
    follow: Option<String>,
}

fn settled_line(status: Option<&str>) -> String {
    match status {
        Some(s) => format!("\n[airlock: job settled: {s}]\n"),
        None => {
            "\n[airlock: the job ended without a result in this daemon; recovery will settle it]\n"
                .to_string()
        }
    }
}

pub(super) async fn job_log(
    State(st): State<AppState>,
    Path(job_id): Path<String>,
    q: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
    req: axum::extract::Request,
) -> Response {
    let id = hygiene::request_id(&req);
    let q = match super::query_or_refuse(q, id.clone()) {
        Ok(q) => q,
        Err(refused) => return *refused,
    };
    let conn = req.extensions().get::<server::ConnHandle>().cloned();
    match answer(&st, &job_id, q, req.headers(), conn).await {
        Ok(r) => r,
        Err(e) => ApiError(e, id).into_response(),
    }
}

async fn answer(
    st: &AppState,
    job_id: &str,
    q: LogQuery,
    headers: &HeaderMap,
    conn: Option<server::ConnHandle>,
) -> Result<Response, ServiceError> {
    if !st.ready.load(Ordering::SeqCst) {
        return Err(ServiceError::Unavailable(
            "recovery has not finished".into(),
        ));
    }
    let follow = match q.follow.as_deref() {
        None | Some("0") | Some("false") => false,
        Some("1") | Some("true") => true,
        Some(other) => {
            return Err(ServiceError::invalid_field(
                "follow",
                format!("follow {other:?} must be 1, true, 0 or false"),
            ));
        }
    };
    let token = bearer(headers)?;
    let actor = authenticate(st.service.config(), token)
        .ok_or_else(|| ServiceError::Unauthenticated("unknown bearer token".into()))?;
    let jobs = &st.service.jobs;
    let workspace = jobs.workspace_visible_to(&actor, job_id).await?;
    let text = |body: Body| {
        let mut r = Response::new(body);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    };
    if !follow {
        let log = jobs
            .log(
                &actor,
                crate::wire::jobs::JobLogParams {
                    workspace_id: workspace,
                    job_id: job_id.to_string(),
                    follow: false,
                },
            )
            .await?;
        return Ok(text(Body::from(log.log)));
    }
    match jobs.follow(&actor, &workspace, job_id).await? {
        Following::Done(log) => {
            let end = settled_line(Some(log.state.as_str()));
            Ok(text(Body::from(log.log + &end)))
        }
        Following::Live(f) => {
            // The connection is serving this stream: never closed to make room for another.
            let dispatching = conn.as_ref().map(server::ConnHandle::dispatching);
            let mut first = f.head;
            if f.skipped > 0 {
                first.extend_from_slice(
                    format!(
                        "\n[airlock: {} bytes omitted before this follower joined]\n",
                        f.skipped
                    )
                    .as_bytes(),
                );
            }
            let stopping = f.stopping;
            let state = (Some(first), Some(f.events), (dispatching, stopping));
            let stream = futures_util::stream::unfold(
                state,
                |(first, events, mut guard)| async move {
                    if let Some(first) = first {
                        return Some((
                            Ok::<_, std::convert::Infallible>(Bytes::from(first)),
                            (None, events, guard),
                        ));
                    }
                    let mut events = events?;
                    let received = tokio::select! {
                        r = events.recv() => Some(r),
                        _ = async { let _ = guard.1.wait_for(|s| *s).await; } => None,
                    };
                    let Some(received) = received else {
                        let note = "\n[airlock: the daemon is stopping; this follow ends here]\n";
                        return Some((Ok(Bytes::from(note)), (None, None, guard)));
                    };
                    let (chunk, more) = match received {
                        Ok(LogEvent::Output(b)) => (Bytes::copy_from_slice(&b), true),
                        Ok(LogEvent::Settled(status)) => {
                            (Bytes::from(settled_line(status.map(|s| s.as_str()))), false)
                        }
                        Err(RecvError::Lagged(n)) => (
                            Bytes::from(format!(
                                "\n[airlock: this follower fell {n} chunks behind and was dropped; job.log has the retained output once the job settles]\n"
                            )),
                            false,
                        ),
                        Err(RecvError::Closed) => return None,
                    };
                    Some((Ok(chunk), (None, more.then_some(events), guard)))
                },
            );
            Ok(text(Body::from_stream(stream)))
        }
    }
}
