//! Webhooks: each workspace's subscriptions (`[[workspaces.<id>.webhooks]]`) get their events
//! from the durable event log through an outbox (`store::webhooks`): one task per subscription
//! turns new events of its kinds into deliveries (the cursor moves in the same transaction),
//! then sends the oldest pending one, signed, until the receiver answers 2xx or its attempts
//! run out, waiting between attempts with exponential backoff. Deliveries of one subscription
//! go in order; a receiver that hangs, redirects, fails or closes mid-answer delays only its
//! own subscription. A restart resumes from the outbox: no event is lost, and a delivery sent
//! again (the process died before its answer was recorded) carries the same delivery id.
//!
//! Every request is `POST` of a JSON body `{delivery_id, subscription_id, workspace_id,
//! timestamp, attempt, event}` (the event as `event.list` shows it) with headers
//! [`SIGNATURE_HEADER`] (`sha256=` and the hex HMAC-SHA256 of the secret over the body),
//! [`DELIVERY_HEADER`], [`EVENT_HEADER`] and [`TIMESTAMP_HEADER`] (unix seconds, also in the
//! signed body, so a receiver can refuse a replay of an old request).

pub mod send;

use crate::config::Permission;
use crate::config::webhooks::Webhook;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::limits;
use crate::store::Store;
use crate::store::webhooks::{Attempted, Delivery, DeliveryState};
use hmac::{Hmac, KeyInit, Mac};
use send::Answer;
use sha2::Sha256;
use std::sync::Arc;
use std::time::Duration;

/// `sha256=<hex HMAC-SHA256 of the secret over the body>`.
pub const SIGNATURE_HEADER: &str = "x-airlock-signature-256";
/// The delivery id: the same on every attempt of one event's delivery (deduplicate on it).
pub const DELIVERY_HEADER: &str = "x-airlock-delivery";
/// The event's kind.
pub const EVENT_HEADER: &str = "x-airlock-event";
/// When this attempt was sent (unix seconds; the body's `timestamp`).
pub const TIMESTAMP_HEADER: &str = "x-airlock-timestamp";
/// How long a subscription with nothing to send sleeps before it looks at the log again even
/// without a write signal.
const IDLE_RECHECK: Duration = Duration::from_secs(30);
/// How long a subscription waits after its outbox could not be read or written.
const STORE_RETRY: Duration = Duration::from_secs(5);

/// `sha256=<hex>` of `body` under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait before attempt `attempts + 1` of a delivery that failed `attempts` times.
pub fn backoff(attempts: u32) -> Duration {
    let doubled =
        limits::WEBHOOK_FIRST_BACKOFF.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    doubled.min(limits::MAX_WEBHOOK_BACKOFF)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One subscription's sender.
struct Subscription {
    store: Store,
    workspace_id: String,
    hook: Webhook,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    metrics: Arc<crate::metrics::Metrics>,
    handles: crate::engine::context::Handles,
}

/// Starts one sender per configured subscription; they run until aborted (a delivery cut
/// mid-attempt is sent again after a restart, under the same id). A new subscription's cursor
/// is placed before this returns, so call it before the daemon takes requests: every event
/// committed after that is delivered.
pub async fn spawn(
    ctx: &crate::engine::Context,
) -> Result<Vec<tokio::task::JoinHandle<()>>, crate::store::StoreError> {
    let mut out = Vec::new();
    for ws in ctx.config.workspaces.values() {
        for hook in &ws.webhooks {
            ctx.data.store.webhook_start(&hook.id, &ws.id).await?;
            let tls = match send::tls_config(hook) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(webhook = %hook.id, error = %e, "a webhook's TLS settings are unusable; it sends nothing");
                    continue;
                }
            };
            let sub = Subscription {
                store: ctx.data.store.clone(),
                workspace_id: ws.id.clone(),
                hook: hook.clone(),
                tls,
                metrics: ctx.metrics.clone(),
                handles: ctx.handles.clone(),
            };
            out.push(tokio::spawn(sub.run()));
        }
    }
    Ok(out)
}

impl Subscription {
    async fn run(self) {
        let mut changes = self.store.changes();
        loop {
            changes.borrow_and_update();
            match self.step().await {
                Ok(Some(wait)) if wait.is_zero() => continue,
                Ok(Some(wait)) => {
                    tokio::time::sleep(wait).await;
                }
                Ok(None) => {
                    let _ = tokio::time::timeout(IDLE_RECHECK, changes.changed()).await;
                }
                Err(e) => {
                    tracing::warn!(webhook = %self.hook.id, error = %e, "webhook outbox");
                    tokio::time::sleep(STORE_RETRY).await;
                }
            }
        }
    }

    /// Makes deliveries of new events, then attempts the oldest pending one if it is due.
    /// Answers how long to wait before the next step (`None`: until something is written).
    async fn step(&self) -> Result<Option<Duration>, crate::store::StoreError> {
        let at = self.handles.now_rfc3339();
        self.store
            .webhook_enqueue(
                &self.hook.id,
                &self.workspace_id,
                self.hook.events.clone(),
                limits::WEBHOOK_ENQUEUE_PAGE,
                now_ms(),
                at,
            )
            .await?;
        let Some(d) = self.store.webhook_next(&self.hook.id).await? else {
            return Ok(None);
        };
        let due = d.next_attempt_ms - now_ms();
        if due > 0 {
            return Ok(Some(Duration::from_millis(due as u64)));
        }
        let outcome = self.attempt(&d).await;
        self.store
            .webhook_attempted(
                &d.delivery_id,
                d.attempts,
                outcome,
                limits::WEBHOOK_DELIVERIES_KEPT,
            )
            .await?;
        Ok(Some(Duration::ZERO))
    }

    async fn attempt(&self, d: &Delivery) -> Attempted {
        let ts = now_ms() / 1000;
        let event: serde_json::Value =
            serde_json::from_str(&d.event).unwrap_or(serde_json::Value::Null);
        let body = serde_json::json!({
            "delivery_id": d.delivery_id,
            "subscription_id": self.hook.id,
            "workspace_id": self.workspace_id,
            "timestamp": ts,
            "attempt": d.attempts + 1,
            "event": event,
        })
        .to_string()
        .into_bytes();
        let headers = [
            (SIGNATURE_HEADER, signature(self.hook.secret.bytes(), &body)),
            (DELIVERY_HEADER, d.delivery_id.clone()),
            (EVENT_HEADER, d.kind.clone()),
            (TIMESTAMP_HEADER, ts.to_string()),
            (
                "user-agent",
                format!("airlock-webhook/{}", env!("CARGO_PKG_VERSION")),
            ),
        ];
        let answer = send::post(&self.hook, &self.tls, &headers, body).await;
        let at = self.handles.now_rfc3339();
        let attempts = d.attempts + 1;
        let (status, error) = match &answer {
            Answer::Accepted(s) => (Some(*s), None),
            Answer::Refused(s, text) => (Some(*s), Some(format!("answered {s}: {text}"))),
            Answer::Failed(e) => (None, Some(e.clone())),
        };
        let state = match (&answer, attempts >= self.hook.max_attempts) {
            (Answer::Accepted(_), _) => DeliveryState::Delivered,
            (_, true) => DeliveryState::Failed,
            (_, false) => DeliveryState::Pending,
        };
        let result = match state {
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Pending => "retried",
        };
        self.metrics.record_webhook(result);
        if let Some(e) = &error {
            tracing::info!(webhook = %self.hook.id, delivery = %d.delivery_id, attempt = attempts, error = %e, "webhook attempt failed");
        }
        Attempted {
            state,
            next_attempt_ms: match state {
                DeliveryState::Pending => now_ms() + backoff(attempts).as_millis() as i64,
                _ => now_ms(),
            },
            status,
            error,
            at,
        }
    }
}

/// The `webhook.*` workflow (what the API reads of the outbox).
#[derive(Clone)]
pub struct Webhooks {
    ctx: crate::engine::context::Handles,
}

impl Webhooks {
    pub fn new(ctx: crate::engine::context::Handles) -> Webhooks {
        Webhooks { ctx }
    }

    /// `webhook.list`: a workspace's subscriptions (never their secrets) with their outbox:
    /// how many deliveries are pending, delivered and failed, and the newest ones with their
    /// last error.
    pub async fn list(
        &self,
        actor: &Actor,
        p: crate::wire::webhooks::WebhookListParams,
    ) -> Result<crate::wire::webhooks::WebhookListReply, ServiceError> {
        use crate::wire::webhooks::{DeliveryView, SubscriptionView, WebhookListReply};
        let handles = &self.ctx;
        let ws = handles.authorize(actor, &p.workspace_id, Permission::View)?;
        let limit = p.limit.unwrap_or(20);
        if !(1..=limits::WEBHOOK_DELIVERIES_KEPT).contains(&limit) {
            return Err(ServiceError::invalid_field(
                "limit",
                format!(
                    "limit {limit} must be between 1 and {}",
                    limits::WEBHOOK_DELIVERIES_KEPT
                ),
            ));
        }
        let mut subscriptions = Vec::new();
        for hook in &ws.webhooks {
            let (recent, counts) = handles
                .data
                .store
                .webhook_deliveries(&hook.id, limit)
                .await?;
            let count = |s: DeliveryState| counts.iter().find(|(k, _)| *k == s).map_or(0, |c| c.1);
            subscriptions.push(SubscriptionView {
                subscription_id: hook.id.clone(),
                url: hook.url.clone(),
                events: hook.events.clone(),
                max_attempts: hook.max_attempts,
                pending: count(DeliveryState::Pending),
                delivered: count(DeliveryState::Delivered),
                failed: count(DeliveryState::Failed),
                deliveries: recent
                    .into_iter()
                    .map(|d| DeliveryView {
                        delivery_id: d.delivery_id,
                        event_seq: d.event_seq,
                        kind: d.kind,
                        state: d.state.as_str().to_string(),
                        attempts: d.attempts,
                        last_status: d.last_status,
                        last_error: d.last_error,
                        created_at: d.created_at,
                        settled_at: d.settled_at,
                    })
                    .collect(),
            });
        }
        Ok(WebhookListReply { subscriptions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn backoff_doubles_from_the_first_wait_up_to_the_bound() {
        assert_eq!(backoff(1), limits::WEBHOOK_FIRST_BACKOFF);
        assert_eq!(backoff(2), limits::WEBHOOK_FIRST_BACKOFF * 2);
        assert_eq!(backoff(4), limits::WEBHOOK_FIRST_BACKOFF * 8);
        assert_eq!(backoff(40), limits::MAX_WEBHOOK_BACKOFF);
    }
}
