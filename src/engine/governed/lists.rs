//! `patch.validation_list` and `human.approval_list`: the pages a reviewer or an orchestrator
//! reads instead of fetching records one id at a time.

use super::Validations;
use super::requests::{next_cursor, parse_cursor};
use super::validation::ValidationView;
use crate::config::Permission;
use crate::domain::policy::ApprovalState;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::wire::{ApprovalFilter, ApprovalListParams, ApprovalPage, ValidationListParams};
use serde::Serialize;

/// Largest page of these lists.
pub const MAX_REVIEW_LIST_LIMIT: u32 = 100;
/// Their default page.
pub const DEFAULT_REVIEW_LIST_LIMIT: u32 = 50;

fn limit_of(limit: Option<u32>) -> Result<u32, ServiceError> {
    let limit = limit.unwrap_or(DEFAULT_REVIEW_LIST_LIMIT);
    if !(1..=MAX_REVIEW_LIST_LIMIT).contains(&limit) {
        return Err(ServiceError::invalid_field(
            "limit",
            format!("limit is {limit}; it must be between 1 and {MAX_REVIEW_LIST_LIMIT}"),
        ));
    }
    Ok(limit)
}

/// `patch.validation_list`'s answer: oldest first, each as `patch.validation_show` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ValidationPage {
    pub validations: Vec<ValidationView>,
    /// Set when the page was full: pass it as `cursor` for the next one.
    pub next_cursor: Option<String>,
}

impl Validations {
    /// `patch.validation_list`: a proposal's validations, a page at a time.
    pub async fn validation_page(
        &self,
        actor: &Actor,
        p: ValidationListParams,
    ) -> Result<ValidationPage, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = limit_of(p.limit)?;
        let after = parse_cursor("val:", p.cursor.as_deref())?.unwrap_or(0);
        // An unknown proposal (or another workspace's) is not_found, never an empty page.
        self.proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let rows = self
            .ctx
            .data
            .store
            .validations_page(&p.proposal_id, after, limit)
            .await?;
        let last = rows.last().map(|(seq, _)| *seq);
        let mut validations = Vec::with_capacity(rows.len());
        for (_, row) in &rows {
            let (row, rec) = self
                .validation_in(&p.workspace_id, &row.validation_id)
                .await?;
            validations.push(self.validation_state(&row, &rec).await?);
        }
        Ok(ValidationPage {
            next_cursor: next_cursor("val:", rows.len(), limit, last),
            validations,
        })
    }
}

impl super::reviews::Reviews {
    /// `human.approval_list`: a workspace's human approvals; by default only the pending ones
    /// the caller may decide now (what `human.decide` would not refuse for who it is).
    pub async fn approval_page(
        &self,
        actor: &Actor,
        p: ApprovalListParams,
    ) -> Result<ApprovalPage, ServiceError> {
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = limit_of(p.limit)?;
        let after = parse_cursor("apr:", p.cursor.as_deref())?.unwrap_or(0);
        let filter = p.filter.unwrap_or(ApprovalFilter::Decidable);
        let state = match filter {
            ApprovalFilter::Decidable | ApprovalFilter::Pending => Some(ApprovalState::Pending),
            ApprovalFilter::Approved => Some(ApprovalState::Approved),
            ApprovalFilter::Denied => Some(ApprovalState::Denied),
            ApprovalFilter::All => None,
        };
        let may_approve = !matches!(actor, Actor::Run { .. })
            && self
                .ctx
                .authorize(actor, &p.workspace_id, Permission::Approve)
                .is_ok();
        let me = actor.key();
        let rows = self
            .ctx
            .data
            .store
            .approvals_page(
                &p.workspace_id,
                state.map(ApprovalState::as_str),
                after,
                limit,
            )
            .await?;
        let last = rows.last().map(|(seq, _)| *seq);
        let mut approvals = Vec::with_capacity(rows.len());
        for (_, a) in &rows {
            if filter == ApprovalFilter::Decidable {
                if !may_approve || (ws.distinct_approver && a.requested_by == me) {
                    continue;
                }
                let proposal = self
                    .proposals
                    .proposal_in(&p.workspace_id, &a.proposal_id)
                    .await?;
                if proposal.author == me || proposal.current_revision != a.revision {
                    continue;
                }
            }
            approvals.push(a.clone().into());
        }
        // The cursor follows the rows read, so a page thinned by the filter still moves on.
        Ok(ApprovalPage {
            next_cursor: next_cursor("apr:", rows.len(), limit, last),
            approvals,
        })
    }
}
