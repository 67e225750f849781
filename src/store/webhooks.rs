//! The webhook outbox: each subscription's cursor over its workspace's event log and the
//! deliveries made from it. Turning events into deliveries and moving the cursor past them is
//! one transaction, and a delivery's id is fixed when it is made, so a crash loses no event and
//! never gives one event two delivery ids; each attempt's outcome is a compare-and-set on the
//! delivery's attempt count.

use super::{Store, StoreError};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Not yet accepted by the receiver; tried again at `next_attempt_ms`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed; the last error is kept.
    Failed,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 3] = [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> DeliveryState {
        DeliveryState::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .unwrap_or(DeliveryState::Failed)
    }
}

/// One delivery of one event to one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub delivery_id: String,
    pub subscription_id: String,
    pub event_seq: i64,
    pub kind: String,
    /// The event as `event.list` shows it (JSON), copied when the delivery was made.
    pub event: String,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_attempt_ms: i64,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: String,
    pub settled_at: Option<String>,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    pub state: DeliveryState,
    pub next_attempt_ms: i64,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub at: String,
}

const PENDING: &str = DeliveryState::Pending.as_str();

const COLUMNS: &str = "delivery_id, subscription_id, event_seq, kind, event, state, attempts,
    next_attempt_ms, last_status, last_error, created_at, settled_at";

fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Delivery> {
    Ok(Delivery {
        delivery_id: r.get(0)?,
        subscription_id: r.get(1)?,
        event_seq: r.get(2)?,
        kind: r.get(3)?,
        event: r.get(4)?,
        state: DeliveryState::parse(&r.get::<_, String>(5)?),
        attempts: r.get(6)?,
        next_attempt_ms: r.get(7)?,
        last_status: r.get(8)?,
        last_error: r.get(9)?,
        created_at: r.get(10)?,
        settled_at: r.get(11)?,
    })
}

/// The delivery id of event `seq` for `subscription_id`: fixed by both, so the same event is
/// never sent under two ids.
pub fn delivery_id(subscription_id: &str, seq: i64) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{subscription_id}\0{seq}").as_bytes());
    format!("whd_{}", &hex::encode(d)[..32])
}

impl Store {
    /// Turns `workspace_id`'s events after the subscription's cursor whose kind is one of
    /// `kinds` into pending deliveries (at most `page`), and moves the cursor past every event
    /// looked at, in one transaction. A subscription seen for the first time starts at the
    /// log's end. Returns how many deliveries were made.
    pub async fn webhook_enqueue(
        &self,
        subscription_id: &str,
        workspace_id: &str,
        kinds: Vec<String>,
        page: u32,
        now_ms: i64,
        at: String,
    ) -> Result<usize, StoreError> {
        let (sub, ws) = (subscription_id.to_string(), workspace_id.to_string());
        let kinds = serde_json::to_string(&kinds).expect("kinds serialize");
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let end: i64 = tx.query_row(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE workspace_id = ?1",
                params![ws],
                |r| r.get(0),
            )?;
            let after: Option<i64> = tx
                .query_row(
                    "SELECT after_seq FROM webhook_cursors WHERE subscription_id = ?1",
                    params![sub],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(after) = after else {
                tx.execute(
                    "INSERT INTO webhook_cursors (subscription_id, workspace_id, after_seq)
                     VALUES (?1, ?2, ?3)",
                    params![sub, ws, end],
                )?;
                tx.commit()?;
                return Ok(0);
            };
            // (seq, kind, the event as `event.list` shows it)
            let rows: Vec<(i64, String, serde_json::Value)> = {
                let mut st = tx.prepare(
                    "SELECT seq, subject, kind, actor, prior, new, payload, at FROM events
                     WHERE workspace_id = ?1 AND seq > ?2 AND seq <= ?3
                       AND kind IN (SELECT value FROM json_each(?4))
                     ORDER BY seq LIMIT ?5",
                )?;
                st.query_map(params![ws, after, end, kinds, page], |r| {
                    let (seq, kind): (i64, String) = (r.get(0)?, r.get(2)?);
                    let payload: String = r.get(6)?;
                    let event = serde_json::json!({
                        "seq": seq,
                        "subject": r.get::<_, String>(1)?,
                        "kind": kind,
                        "actor": r.get::<_, String>(3)?,
                        "prior": r.get::<_, Option<String>>(4)?,
                        "new": r.get::<_, Option<String>>(5)?,
                        "payload": serde_json::from_str::<serde_json::Value>(&payload)
                            .unwrap_or(serde_json::Value::Null),
                        "at": r.get::<_, String>(7)?,
                    });
                    Ok((seq, kind, event))
                })?
                .collect::<Result<_, _>>()?
            };
            // A full page stops at its last event; a short one saw everything up to `end`.
            let moved_to = if rows.len() == page as usize {
                rows.last().map_or(end, |r| r.0)
            } else {
                end
            };
            for (seq, kind, event) in &rows {
                tx.execute(
                    "INSERT INTO webhook_deliveries (delivery_id, subscription_id, event_seq, kind,
                        event, state, attempts, next_attempt_ms, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?8, 0, ?6, ?7)
                     ON CONFLICT DO NOTHING",
                    params![
                        delivery_id(&sub, *seq),
                        sub,
                        seq,
                        kind,
                        event.to_string(),
                        now_ms,
                        at,
                        PENDING
                    ],
                )?;
            }
            let n = tx.execute(
                "UPDATE webhook_cursors SET after_seq = ?2 WHERE subscription_id = ?1 AND after_seq = ?3",
                params![sub, moved_to, after],
            )?;
            super::changed_one(n, || format!("webhook cursor {sub}"))?;
            tx.commit()?;
            Ok(rows.len())
        })
        .await
    }

    /// Gives a subscription seen for the first time its cursor at the end of its workspace's
    /// log (a subscription already known keeps its own). Called before the daemon takes
    /// requests, so no event committed after the start can fall before the cursor.
    pub async fn webhook_start(
        &self,
        subscription_id: &str,
        workspace_id: &str,
    ) -> Result<(), StoreError> {
        let (sub, ws) = (subscription_id.to_string(), workspace_id.to_string());
        self.call(move |c| {
            c.execute(
                "INSERT INTO webhook_cursors (subscription_id, workspace_id, after_seq)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(seq), 0) FROM events WHERE workspace_id = ?2))
                 ON CONFLICT DO NOTHING",
                params![sub, ws],
            )?;
            Ok(())
        })
        .await
    }

    /// The subscription's oldest pending delivery (deliveries go in order: a later one waits
    /// for it to be delivered or given up).
    pub async fn webhook_next(
        &self,
        subscription_id: &str,
    ) -> Result<Option<Delivery>, StoreError> {
        let sub = subscription_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM webhook_deliveries
                     WHERE subscription_id = ?1 AND state = ?2 ORDER BY event_seq LIMIT 1"
                ),
                params![sub, PENDING],
                read,
            )
            .optional()?)
        })
        .await
    }

    /// Records an attempt of a pending delivery made when it had `attempts` attempts:
    /// compare-and-set on both (a conflict means another process recorded it first).
    pub async fn webhook_attempted(
        &self,
        delivery_id: &str,
        attempts: u32,
        outcome: Attempted,
        keep: u32,
    ) -> Result<(), StoreError> {
        let id = delivery_id.to_string();
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let settled = (outcome.state != DeliveryState::Pending).then_some(&outcome.at);
            let n = tx.execute(
                "UPDATE webhook_deliveries SET state = ?3, attempts = attempts + 1,
                    next_attempt_ms = ?4, last_status = ?5, last_error = ?6, settled_at = ?7
                 WHERE delivery_id = ?1 AND attempts = ?2 AND state = ?8",
                params![
                    id,
                    attempts,
                    outcome.state.as_str(),
                    outcome.next_attempt_ms,
                    outcome.status,
                    outcome.error,
                    settled,
                    PENDING
                ],
            )?;
            super::changed_one(n, || format!("webhook delivery {id}"))?;
            if settled.is_some() {
                // Keep the newest `keep` settled deliveries of the subscription.
                tx.execute(
                    "DELETE FROM webhook_deliveries WHERE state != ?3
                       AND subscription_id = (SELECT subscription_id FROM webhook_deliveries WHERE delivery_id = ?1)
                       AND event_seq < (SELECT event_seq FROM webhook_deliveries
                           WHERE state != ?3 AND subscription_id =
                               (SELECT subscription_id FROM webhook_deliveries WHERE delivery_id = ?1)
                           ORDER BY event_seq DESC LIMIT 1 OFFSET ?2)",
                    params![id, keep, PENDING],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// A subscription's deliveries, newest first (at most `limit`), and how many are in each
    /// state.
    pub async fn webhook_deliveries(
        &self,
        subscription_id: &str,
        limit: u32,
    ) -> Result<(Vec<Delivery>, Vec<(DeliveryState, i64)>), StoreError> {
        let sub = subscription_id.to_string();
        self.call(move |c| {
            let tx = c.transaction()?;
            let recent = {
                let mut st = tx.prepare(&format!(
                    "SELECT {COLUMNS} FROM webhook_deliveries WHERE subscription_id = ?1
                     ORDER BY event_seq DESC LIMIT ?2"
                ))?;
                st.query_map(params![sub, limit], read)?
                    .collect::<Result<Vec<_>, _>>()?
            };
            let mut counts = Vec::new();
            for s in DeliveryState::ALL {
                let n: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM webhook_deliveries WHERE subscription_id = ?1 AND state = ?2",
                    params![sub, s.as_str()],
                    |r| r.get(0),
                )?;
                counts.push((s, n));
            }
            tx.commit()?;
            Ok((recent, counts))
        })
        .await
    }
}
