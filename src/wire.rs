//! The wire: every API method's request parameters here, and in `views` the replies that are
//! not domain values.
//! A leaf module (it names only candidate, domain, patch and apply types): the API parses requests into these and the
//! engine takes them as its inputs, so both depend on it and neither on the other's internals.
//! (Kept out of `api/` on purpose: there, the engine would import the API that calls it.)
//! Every request type refuses unknown fields; `agent_id`-style identity never comes from here.

pub mod jobs;
mod lists;
mod schemas;
pub use lists::*;
mod views;
pub mod webhooks;
pub use views::*;

use crate::candidate::{DeliveryAction, EvidenceSource, ResolveFile, SubmissionRef};
use serde::{Deserialize, Serialize};

/// `evidence.record` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordParams {
    pub workspace_id: String,
    #[schema(pattern = r"^[A-Za-z0-9_.-]{1,128}$")]
    pub run_id: String,
    #[schema(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub base_revision: String,
    #[schema(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub revision: String,
    #[serde(default)]
    pub transcript: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `evidence.show` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowParams {
    pub workspace_id: String,
    pub evidence_ref: String,
}

/// `integration.prepare` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareParams {
    pub workspace_id: String,
    /// At most `candidate::MAX_SUBMISSIONS`.
    #[schema(min_items = 1, max_items = 256)]
    pub submissions: Vec<SubmissionRef>,
    #[schema(pattern = r"^refs/heads/[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$")]
    pub target_ref: String,
    #[schema(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub expected_target_revision: String,
    #[serde(default)]
    pub required_sources: Option<Vec<EvidenceSource>>,
    #[serde(default)]
    pub mission_id: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `integration.show` and `integration.delete` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateParams {
    pub workspace_id: String,
    pub candidate_id: String,
}

/// `integration.resolve` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveParams {
    pub workspace_id: String,
    pub candidate_id: String,
    #[serde(default)]
    #[schema(minimum = 1)]
    #[schema(required = true, nullable = false)]
    pub expected_version: Option<i64>,
    #[schema(min_items = 1, max_items = 32)]
    pub files: Vec<ResolveFile>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `integration.patch` parameters: one page of the combined diff, `limit` bytes from byte
/// `offset` (0 and [`crate::candidate::MAX_PATCH_BYTES`] by default); follow `next_offset`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchParams {
    pub workspace_id: String,
    pub candidate_id: String,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 268_435_456)]
    pub offset: u64,
    #[serde(default)]
    #[schema(minimum = 1024, maximum = 1_048_576)]
    pub limit: Option<u64>,
}

/// `integration.conflict` parameters: one of a conflicted candidate's `conflicts`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConflictParams {
    pub workspace_id: String,
    pub candidate_id: String,
    /// A path the candidate lists in `conflicts`.
    pub path: String,
}

/// `integration.verify` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyParams {
    pub workspace_id: String,
    pub candidate_id: String,
    #[schema(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub candidate_revision: String,
    #[schema(min_items = 1, max_items = 64)]
    pub argv: Vec<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1800)]
    pub timeout_seconds: Option<u64>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `integration.cancel_verification` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub verification_id: String,
}

/// `integration.request_delivery` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestParams {
    pub workspace_id: String,
    pub candidate_id: String,
    #[schema(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub candidate_revision: String,
    #[schema(min_items = 1, max_items = 64)]
    pub verification_ids: Vec<String>,
    pub action: DeliveryAction,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `integration.decide` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub request_id: String,
    pub request_version: u64,
    pub approve: bool,
    /// Why (kept with the decision; at most 4096 bytes of text).
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
}

/// `integration.deliver` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliverParams {
    pub workspace_id: String,
    pub candidate_id: String,
    pub request_id: String,
    pub request_version: u64,
}

/// How a claim behaves when its session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumePolicy {
    #[default]
    Hold,
    Release,
}

/// `claim.acquire` parameters. The holder is the authenticated actor (there is no `agent_id`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimAcquireParams {
    pub workspace_id: String,
    #[schema(min_length = 1)]
    pub task_id: String,
    #[serde(default)]
    #[schema(min_length = 1)]
    pub session_id: Option<String>,
    #[schema(
        pattern = r"^((file|directory):[A-Za-z0-9_][A-Za-z0-9_-]{0,120}|symbol:[A-Za-z0-9_][A-Za-z0-9_-]{0,120}#[A-Za-z0-9_]{1,64})$"
    )]
    pub resource_id: String,
    pub mode: crate::domain::claim::ClaimMode,
    #[serde(default)]
    #[schema(minimum = 10, maximum = 86_400)]
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    pub renewable: Option<bool>,
    #[serde(default)]
    pub resume_policy: Option<ResumePolicy>,
    /// `proposal_end`: also released when a proposal of the holder that the claim covers is
    /// accepted, withdrawn or rejected (default: the workspace policy's `claims_release_on`).
    #[serde(default)]
    pub release_on: Option<crate::domain::claim::ReleaseOn>,
    #[serde(default)]
    pub rationale: Option<String>,
    #[serde(default)]
    pub base_hash: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `claim.show` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimParams {
    pub workspace_id: String,
    pub claim_id: String,
}

/// `claim.release` and `claim.heartbeat` parameters (the key is optional for a heartbeat,
/// which changes nothing but `heartbeat_at`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimKeyedParams {
    pub workspace_id: String,
    pub claim_id: String,
    #[serde(default)]
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: Option<String>,
}

/// `claim.release` parameters: the key is required (a release changes the claim).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimReleaseParams {
    pub workspace_id: String,
    pub claim_id: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

impl From<ClaimReleaseParams> for ClaimKeyedParams {
    fn from(p: ClaimReleaseParams) -> Self {
        ClaimKeyedParams {
            workspace_id: p.workspace_id,
            claim_id: p.claim_id,
            idempotency_key: Some(p.idempotency_key),
        }
    }
}

/// `claim.force_release` parameters: a reason is required.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimForceReleaseParams {
    pub workspace_id: String,
    pub claim_id: String,
    #[schema(min_length = 1)]
    pub reason: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

impl From<ClaimForceReleaseParams> for ClaimAdminParams {
    fn from(p: ClaimForceReleaseParams) -> Self {
        ClaimAdminParams {
            workspace_id: p.workspace_id,
            claim_id: p.claim_id,
            reason: Some(p.reason),
            idempotency_key: p.idempotency_key,
        }
    }
}

/// `claim.extend` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimExtendParams {
    pub workspace_id: String,
    pub claim_id: String,
    #[schema(minimum = 10, maximum = 86_400)]
    pub ttl_seconds: u64,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `claim.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub status: Option<crate::domain::claim::ClaimState>,
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    #[schema(
        pattern = r"^((file|directory):[A-Za-z0-9_][A-Za-z0-9_-]{0,120}|symbol:[A-Za-z0-9_][A-Za-z0-9_-]{0,120}#[A-Za-z0-9_]{1,64})$"
    )]
    pub resource_id: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// `claim.resume` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimResumeParams {
    pub workspace_id: String,
    pub claim_id: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `claim.suspend`, `claim.revoke` and `claim.force_release` parameters (`reason` is required
/// for a forced release).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimAdminParams {
    pub workspace_id: String,
    pub claim_id: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `event.list` parameters: events after sequence number `since` (a cursor: the last `seq`
/// seen), oldest first.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    #[schema(minimum = 0)]
    pub since: Option<i64>,
    /// `next_cursor` of the previous page (the same position as `since`, opaque).
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// `claim.contentions` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentionListParams {
    pub workspace_id: String,
    #[serde(default)]
    #[schema(
        pattern = r"^((file|directory):[A-Za-z0-9_][A-Za-z0-9_-]{0,120}|symbol:[A-Za-z0-9_][A-Za-z0-9_-]{0,120}#[A-Za-z0-9_]{1,64})$"
    )]
    pub resource_id: Option<String>,
    #[serde(default)]
    pub state: Option<ContentionState>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

pub use crate::domain::claim::ContentionState;

/// How an admin resolves a contention; `split` and `narrow` are refused as unsupported (they
/// would need the claims' resources rewritten, which no holder asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResolutionKind {
    KeepOwner,
    RejectContender,
    Transfer,
    ExtendLease,
    Split,
    Narrow,
}

/// `claim.resolve_contention` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveContentionParams {
    pub workspace_id: String,
    pub contention_id: String,
    pub resolution: ResolutionKind,
    #[schema(min_length = 1)]
    pub reason: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `claim.reconcile` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileParams {
    pub workspace_id: String,
    #[serde(default)]
    pub holder: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `claim.end_session` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndSessionParams {
    pub workspace_id: String,
    #[schema(min_length = 1)]
    pub session_id: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `resource.show` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceShowParams {
    pub workspace_id: String,
    #[schema(
        pattern = r"^((file|directory):[A-Za-z0-9_][A-Za-z0-9_-]{0,120}|symbol:[A-Za-z0-9_][A-Za-z0-9_-]{0,120}#[A-Za-z0-9_]{1,64})$"
    )]
    pub resource_id: String,
}

/// `proposal.create` parameters. The author is the authenticated actor.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalCreateParams {
    pub workspace_id: String,
    #[schema(min_length = 1)]
    pub task_id: String,
    #[serde(default)]
    #[schema(min_length = 1)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub deliberation_id: Option<String>,
    #[schema(pattern = r"\S", max_length = 128)]
    pub title: String,
    #[schema(pattern = r"\S")]
    pub summary_md: String,
    #[serde(default)]
    pub risk: Option<crate::domain::proposal::Risk>,
    /// The patch, in Git's extended diff format, as text. Give this or `patch_base64`.
    #[serde(default)]
    pub patch: Option<String>,
    /// The patch's exact bytes, base64 (standard alphabet, padded): for patches that are not
    /// UTF-8 (a Latin-1 file's hunks). The revision is the SHA-256 of these bytes.
    #[serde(default)]
    pub patch_base64: Option<String>,
    #[serde(default)]
    pub affected_resources: Option<Vec<String>>,
    #[serde(default)]
    pub expected_tests: Option<Vec<Vec<String>>>,
    #[serde(default)]
    pub rollback_notes: Option<String>,
    /// The commit the patch was written against (full object id), if the author says.
    #[serde(default)]
    #[schema(pattern = r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub base_revision: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `proposal.attach_patch` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalAttachParams {
    pub workspace_id: String,
    pub proposal_id: String,
    /// The proposal's `version` the author saw; another is `conflict`.
    pub expected_version: u64,
    /// The patch as text. Give this or `patch_base64`.
    #[serde(default)]
    pub patch: Option<String>,
    /// The patch's exact bytes, base64 (standard alphabet, padded).
    #[serde(default)]
    pub patch_base64: Option<String>,
    #[serde(default)]
    pub affected_resources: Option<Vec<String>>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `proposal.get` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalParams {
    pub workspace_id: String,
    pub proposal_id: String,
}

/// Oldest or newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    #[default]
    Oldest,
    Newest,
}

/// `proposal.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub status: Option<crate::domain::proposal::ProposalState>,
    #[serde(default)]
    pub author: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    #[serde(default)]
    pub order: Option<ListOrder>,
}

/// `proposal.request_review` and `proposal.withdraw` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalTransitionParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[serde(default)]
    pub reason_md: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `proposal.reject` parameters: a reason is required.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalRejectParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[schema(min_length = 1)]
    pub reason_md: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

impl From<ProposalRejectParams> for ProposalTransitionParams {
    fn from(p: ProposalRejectParams) -> Self {
        ProposalTransitionParams {
            workspace_id: p.workspace_id,
            proposal_id: p.proposal_id,
            reason_md: Some(p.reason_md),
            idempotency_key: p.idempotency_key,
        }
    }
}

/// `vote.cast` parameters. The voter is the authenticated actor.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VoteCastParams {
    pub workspace_id: String,
    pub proposal_id: String,
    /// The current revision's digest.
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: String,
    pub vote: crate::domain::policy::VoteKind,
    #[serde(default)]
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub confidence: Option<f64>,
    #[schema(pattern = r"\S")]
    pub reason_md: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `vote.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VoteListParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[serde(default)]
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: Option<String>,
}

/// `security.review` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecurityReviewParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: String,
    pub verdict: crate::domain::policy::SecurityVerdict,
    pub notes_md: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `human.request_approval` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestApprovalParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `human.decide` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HumanDecideParams {
    pub workspace_id: String,
    pub approval_id: String,
    pub approve: bool,
    /// With `approve`: lift requirements that only votes block (never a security review).
    #[serde(default, rename = "override")]
    pub override_votes: Option<bool>,
    #[schema(pattern = r"\S")]
    pub reason_md: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `decision.record` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRecordParams {
    pub workspace_id: String,
    #[schema(pattern = r"^[a-z0-9_-]{1,64}$")]
    pub decision: String,
    #[schema(pattern = r"\S")]
    pub rationale_md: String,
    #[serde(default)]
    pub proposal_id: Option<String>,
    #[serde(default)]
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `decision.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub proposal_id: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// `policy.evaluate` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyEvaluateParams {
    pub workspace_id: String,
    pub proposal_id: String,
}

/// Which part of a revision `proposal.preview` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PreviewPart {
    Metadata,
    Files,
    Diff,
    Raw,
    Symbols,
}

/// `proposal.preview` parameters (the revision defaults to the current one).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalPreviewParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[serde(default)]
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: Option<String>,
    pub part: PreviewPart,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// `patch.validate` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[schema(pattern = r"^[0-9a-f]{64}$")]
    pub revision: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `patch.validation_show` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidationShowParams {
    pub workspace_id: String,
    pub validation_id: String,
}

/// `patch.apply` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyParams {
    pub workspace_id: String,
    pub proposal_id: String,
    pub validation_id: String,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `transaction.show`, `transaction.phases` and `transaction.recovery` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransactionParams {
    pub workspace_id: String,
    pub transaction_id: String,
}

/// `transaction.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransactionListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub status: Option<crate::domain::transaction::TxState>,
    #[serde(default)]
    pub proposal_id: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
}

/// `transaction.control` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransactionControlParams {
    pub workspace_id: String,
    pub transaction_id: String,
    pub action: crate::domain::transaction::ControlAction,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub allow_later_changes: Option<bool>,
    /// `retry` only: the fresh validation to apply (default: the newest complete one of the
    /// same revision made after the retried transaction's).
    #[serde(default)]
    pub validation_id: Option<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}
