//! `webhook.list`: a workspace's webhook subscriptions and their outbox.

use serde::{Deserialize, Serialize};

/// `webhook.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookListParams {
    pub workspace_id: String,
    /// Most deliveries listed per subscription, newest first (default 20).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// One delivery of one event to one subscription.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// The `X-Airlock-Delivery` header: the same on every attempt.
    pub delivery_id: String,
    /// The event's `seq` in the workspace's event log.
    pub event_seq: i64,
    pub kind: String,
    /// `pending` (tried again after a backoff), `delivered` (answered 2xx) or `failed` (every
    /// attempt failed).
    pub state: String,
    pub attempts: u32,
    /// The last answer's HTTP status (none when no answer came).
    pub last_status: Option<u16>,
    /// Why the last attempt failed (none once delivered).
    pub last_error: Option<String>,
    pub created_at: String,
    pub settled_at: Option<String>,
}

/// A subscription (its secret is never shown).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SubscriptionView {
    /// `wh_` and 16 hex digits, fixed by the workspace, URL and event kinds.
    pub subscription_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub max_attempts: u32,
    pub pending: i64,
    pub delivered: i64,
    pub failed: i64,
    /// The newest deliveries.
    pub deliveries: Vec<DeliveryView>,
}

/// `webhook.list`'s reply.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WebhookListReply {
    pub subscriptions: Vec<SubscriptionView>,
}
