//! The wire: every API method's request parameters and the results that are not domain values.
//! A leaf module (it names only candidate types): the API parses requests into these and the
//! engine takes them as its inputs, so both depend on it and neither on the other's internals.
//! (Kept out of `api/` on purpose: there, the engine would import the API that calls it.)
//! Every request type refuses unknown fields; `agent_id`-style identity never comes from here.

use crate::candidate::{DeliveryAction, EvidenceSource, ResolveFile, SubmissionRef};
use serde::{Deserialize, Serialize};

/// `evidence.record` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordParams {
    pub workspace_id: String,
    pub run_id: String,
    pub base_revision: String,
    pub revision: String,
    #[serde(default)]
    pub transcript: Option<String>,
    pub idempotency_key: String,
}

/// `evidence.show` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowParams {
    pub workspace_id: String,
    pub evidence_ref: String,
}

/// `integration.prepare` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrepareParams {
    pub workspace_id: String,
    pub submissions: Vec<SubmissionRef>,
    pub target_ref: String,
    pub expected_target_revision: String,
    #[serde(default)]
    pub required_sources: Option<Vec<EvidenceSource>>,
    #[serde(default)]
    pub mission_id: Option<String>,
    pub idempotency_key: String,
}

/// `integration.show`, `integration.patch` and `integration.delete` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateParams {
    pub workspace_id: String,
    pub candidate_id: String,
}

/// `integration.list` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub limit: Option<u32>,
}

/// `integration.resolve` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveParams {
    pub workspace_id: String,
    pub candidate_id: String,
    #[serde(default)]
    pub expected_version: Option<i64>,
    pub files: Vec<ResolveFile>,
    pub idempotency_key: String,
}

/// `integration.patch` result.
#[derive(Debug, Clone, Serialize)]
pub struct PatchResult {
    pub patch: String,
    pub truncated: bool,
}

/// `integration.verify` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub candidate_revision: String,
    pub argv: Vec<String>,
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    pub idempotency_key: String,
}

/// `integration.cancel_verification` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub verification_id: String,
}

/// `integration.request_delivery` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub candidate_revision: String,
    pub verification_ids: Vec<String>,
    pub action: DeliveryAction,
    pub idempotency_key: String,
}

/// `integration.decide` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub request_id: String,
    pub request_version: u64,
    pub approve: bool,
}

/// `integration.deliver` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub request_id: String,
    pub request_version: u64,
}
