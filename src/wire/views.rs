//! The governed path's reply objects: each service builds one of these and serializes it, so
//! `/openapi.json` documents exactly what the API answers.

use super::ResumePolicy;
use serde::Serialize;

/// A claim as every claim method answers it: `status` is `expired` once its time passed,
/// swept or not.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimView {
    pub claim_id: String,
    pub workspace_id: String,
    pub resource_id: String,
    pub resource: ClaimResource,
    pub mode: crate::domain::claim::ClaimMode,
    pub holder: String,
    pub task_id: String,
    pub session_id: Option<String>,
    pub fencing_token: i64,
    pub status: crate::domain::claim::ClaimState,
    pub base_hash: Option<String>,
    pub renewable: bool,
    pub resume_policy: ResumePolicy,
    pub rationale: Option<String>,
    pub acquired_at: String,
    pub heartbeat_at: String,
    pub expires_at: String,
    pub version: i64,
}

/// A claimed resource, parsed: its type, path, and for a symbol its name and span.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimResource {
    /// `file`, `directory`, `symbol`, or another lowercase category.
    #[serde(rename = "type")]
    pub kind: String,
    pub path: Option<String>,
    pub symbol: Option<String>,
    pub span: Option<crate::domain::claim::Span>,
}

/// A proposal as every proposal method answers it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProposalView {
    pub proposal_id: String,
    pub workspace_id: String,
    pub task_id: String,
    pub session_id: Option<String>,
    pub deliberation_id: Option<String>,
    pub author: String,
    pub title: String,
    pub summary_md: String,
    pub risk: crate::domain::proposal::Risk,
    pub status: crate::domain::proposal::ProposalState,
    pub version: i64,
    /// SHA-256 hex of the current revision's patch bytes.
    pub current_revision: String,
    /// Every revision, oldest first.
    pub revisions: Vec<RevisionView>,
    pub affected_resources: Vec<String>,
    pub expected_tests: Vec<Vec<String>>,
    pub rollback_notes: Option<String>,
    pub base_revision: Option<String>,
    /// The reason given with the last transition (a rejection's, a withdrawal's).
    pub reason_md: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One immutable revision of a proposal's patch.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RevisionView {
    pub revision: String,
    pub number: i64,
    pub bytes: i64,
    pub created_at: String,
    pub current: bool,
}

/// A transaction as every transaction method answers it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TransactionView {
    pub transaction_id: String,
    pub workspace_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub validation_id: String,
    pub status: crate::domain::transaction::TxState,
    pub version: i64,
    pub applied_by: String,
    /// Every path the apply touches.
    pub paths: Vec<String>,
    /// Per path: its fingerprints before and after, once applied.
    #[schema(value_type = Vec<Object>)]
    pub hashes: Vec<serde_json::Value>,
    pub head_before: Option<String>,
    pub head_after: Option<String>,
    pub claims: Vec<String>,
    pub approvals: Vec<String>,
    pub test_verifications: Vec<String>,
    pub rollback_sha256: Option<String>,
    pub blocked_reason: Option<String>,
    /// The failed or cancelled transaction this one retries.
    pub retry_of: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One entry of a workspace's event log (`event.list`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventView {
    /// The log position: poll with `since` set to the last one seen.
    pub seq: i64,
    /// What the event is about (a claim, proposal, transaction, ... id).
    pub subject: String,
    pub kind: String,
    pub actor: String,
    pub prior: Option<String>,
    pub new: Option<String>,
    /// The event's detail, as the method that wrote it recorded it (null if unreadable).
    #[schema(value_type = Object, nullable = true)]
    pub payload: serde_json::Value,
    pub at: String,
}
