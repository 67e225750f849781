//! A workspace's event log as a feed that waits: each step answers the next events after the
//! last one given (a page), or, when there are none, waits for the store's "something was
//! written" signal (never polling) or the daemon stopping. `GET /api/v1/events` serves it as
//! server-sent events; this module knows no HTTP.

use super::actor::Actor;
use super::error::ServiceError;
use crate::config::Permission;
use crate::store::Store;
use crate::wire::EventView;
use tokio::sync::watch;

/// Most events one step answers.
pub const EVENT_FEED_PAGE: u32 = 100;

/// What a feed's step gives.
#[derive(Debug)]
pub enum FeedStep {
    /// The next events, in order (never empty).
    Events(Vec<EventView>),
    /// The daemon is stopping: the feed ends (a client reconnects with the last event's seq).
    Stopping,
    /// The log could not be read (logged); the feed ends.
    Failed,
    /// The store is gone; the feed ends without a word.
    Closed,
}

/// One reader's position in a workspace's event log, filtered.
pub struct EventFeed {
    store: Store,
    workspace_id: String,
    subject: Option<String>,
    kind: Option<String>,
    after: i64,
    changes: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
}

impl crate::engine::context::Handles {
    /// A feed of `workspace_id`'s events after `after` (its newest when `None`), filtered by
    /// subject and kind, for a member who may view it; it ends when `stopping` says so.
    pub async fn event_feed(
        &self,
        actor: &Actor,
        workspace_id: &str,
        subject: Option<String>,
        kind: Option<String>,
        after: Option<i64>,
        stopping: watch::Receiver<bool>,
    ) -> Result<EventFeed, ServiceError> {
        self.authorize(actor, workspace_id, Permission::View)?;
        let store = self.data.store.clone();
        let after = match after {
            Some(n) => n,
            None => store.last_event_seq(workspace_id).await?,
        };
        Ok(EventFeed {
            changes: store.changes(),
            store,
            workspace_id: workspace_id.to_string(),
            subject,
            kind,
            after,
            stopping,
        })
    }
}

impl EventFeed {
    /// The next page of events, waiting for one to be written when there is none.
    pub async fn step(&mut self) -> FeedStep {
        loop {
            // Seen before the read: a write that lands after it wakes the wait below.
            self.changes.borrow_and_update();
            let rows = match self
                .store
                .list_events(
                    &self.workspace_id,
                    self.subject.clone(),
                    self.kind.clone(),
                    self.after,
                    EVENT_FEED_PAGE,
                )
                .await
            {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::error!(error = %e, "an event feed could not read the log");
                    return FeedStep::Failed;
                }
            };
            if !rows.is_empty() {
                let events: Vec<EventView> = rows
                    .into_iter()
                    .map(
                        |(seq, subject, kind, actor, prior, new, payload, at)| EventView {
                            seq,
                            subject,
                            kind,
                            actor,
                            prior,
                            new,
                            payload: serde_json::from_str(&payload)
                                .unwrap_or(serde_json::Value::Null),
                            at,
                        },
                    )
                    .collect();
                self.after = events.last().map_or(self.after, |e| e.seq);
                return FeedStep::Events(events);
            }
            if *self.stopping.borrow() {
                return FeedStep::Stopping;
            }
            tokio::select! {
                r = self.changes.changed() => {
                    if r.is_err() {
                        return FeedStep::Closed;
                    }
                }
                _ = self.stopping.wait_for(|s| *s) => {}
            }
        }
    }
}
