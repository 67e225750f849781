//! The list methods an orchestrator or a reviewer reads a page at a time: candidates (with
//! state, target and delivery-request filters, so pending delivery requests are one call),
//! a proposal's validations, and human approvals (all, or only those the caller may decide).
//! Every cursor is the `next_cursor` of the previous page; a made-up one is refused.

use crate::candidate::CandidateSummary;
use crate::domain::candidate::CandidateState;
use crate::domain::delivery::RequestState;
use serde::{Deserialize, Serialize};

/// `integration.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub workspace_id: String,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// Only candidates in this state.
    #[serde(default)]
    pub state: Option<CandidateState>,
    /// Only candidates for this target ref (`refs/heads/...`).
    #[serde(default)]
    #[schema(max_length = 256)]
    pub target_ref: Option<String>,
    /// Only candidates whose delivery request is in this state (`requested`: the requests
    /// waiting for a decision).
    #[serde(default)]
    pub request_state: Option<RequestState>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    #[schema(max_length = 64)]
    pub cursor: Option<String>,
}

/// `integration.list`'s answer: newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CandidatePage {
    pub candidates: Vec<CandidateSummary>,
    /// Set when the page was full: pass it as `cursor` for the next one.
    pub next_cursor: Option<String>,
}

/// `patch.validation_list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidationListParams {
    pub workspace_id: String,
    pub proposal_id: String,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    #[serde(default)]
    #[schema(max_length = 64)]
    pub cursor: Option<String>,
}

/// Which approvals `human.approval_list` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalFilter {
    /// Pending approvals the caller may decide now: it holds `approve`, is not the author,
    /// not the requester while `distinct_approver` is on, and the revision is still current.
    Decidable,
    Pending,
    Approved,
    Denied,
    All,
}

/// `human.approval_list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalListParams {
    pub workspace_id: String,
    /// Default `decidable`.
    #[serde(default)]
    pub filter: Option<ApprovalFilter>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    #[serde(default)]
    #[schema(max_length = 64)]
    pub cursor: Option<String>,
}

/// `human.approval_list`'s answer: oldest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApprovalPage {
    pub approvals: Vec<super::views::Approval>,
    pub next_cursor: Option<String>,
}
