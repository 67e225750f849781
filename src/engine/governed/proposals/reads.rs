//! The read side of proposals: `proposal.get`, `proposal.list` and the wire object.

use super::super::requests::{next_cursor, page_limit, parse_cursor};
use super::Record;
use crate::config::Permission;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Proposals;
use crate::store::proposals::{ProposalFilter, ProposalRow};
use crate::wire::{
    ListOrder, ProposalGetReply, ProposalListParams, ProposalListReply, ProposalParams,
    ProposalReply,
};

impl Proposals {
    pub(in crate::engine::governed) async fn proposal_in(
        &self,
        workspace_id: &str,
        proposal_id: &str,
    ) -> Result<ProposalRow, ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "proposal {proposal_id:?} not found in workspace {workspace_id:?}"
            ))
        };
        let p = self
            .ctx
            .data
            .store
            .proposal(proposal_id)
            .await?
            .ok_or_else(not_found)?;
        if p.workspace_id != workspace_id {
            return Err(not_found());
        }
        Ok(p)
    }

    pub(in crate::engine::governed) fn record_of(p: &ProposalRow) -> Result<Record, ServiceError> {
        serde_json::from_str(&p.record)
            .map_err(|e| ServiceError::record(format!("proposal {} record", p.proposal_id), e))
    }

    /// The proposal as the API shows it.
    pub(in crate::engine::governed) async fn proposal_view(
        &self,
        p: &ProposalRow,
    ) -> Result<crate::wire::ProposalView, ServiceError> {
        let r = Self::record_of(p)?;
        let revisions = self
            .ctx
            .data
            .store
            .revisions(&p.proposal_id)
            .await?
            .into_iter()
            .map(|v| crate::wire::RevisionView {
                current: v.revision == p.current_revision,
                revision: v.revision,
                number: v.number,
                bytes: v.bytes,
                created_at: v.created_at,
            })
            .collect();
        let view = crate::wire::ProposalView {
            proposal_id: p.proposal_id.clone(),
            workspace_id: p.workspace_id.clone(),
            task_id: p.task_id.clone(),
            session_id: r.session_id,
            deliberation_id: r.deliberation_id,
            author: p.author.clone(),
            title: r.title,
            summary_md: r.summary_md,
            risk: r.risk,
            status: p.status,
            version: p.version,
            current_revision: p.current_revision.clone(),
            revisions,
            affected_resources: r.affected_resources,
            expected_tests: r.expected_tests,
            rollback_notes: r.rollback_notes,
            base_revision: r.base_revision,
            reason_md: r.reason_md,
            created_at: r.created_at,
            updated_at: r.updated_at,
        };
        Ok(view)
    }

    pub(super) async fn proposal_reply(
        &self,
        p: &ProposalRow,
    ) -> Result<ProposalReply, ServiceError> {
        Ok(ProposalReply {
            proposal: self.proposal_view(p).await?,
            review_plan: None,
        })
    }

    /// `proposal.get`: the proposal, its current revision's file list (from the parser) and
    /// the decisions recorded about it.
    pub async fn proposal_get(
        &self,
        actor: &Actor,
        p: ProposalParams,
    ) -> Result<ProposalGetReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let row = self.proposal_in(&p.workspace_id, &p.proposal_id).await?;
        let bytes = self.read_patch(&row.current_revision).await?;
        let patch = crate::patch::parse(&bytes).map_err(|e| {
            ServiceError::internal(format!(
                "stored revision {} no longer parses: {e}",
                row.current_revision
            ))
        })?;
        let files: Vec<crate::wire::FileView> =
            patch.files.iter().map(crate::wire::FileView::of).collect();
        let decisions: Vec<crate::wire::ProposalDecisionView> = self
            .ctx
            .data
            .store
            .decisions_of(&row.proposal_id)
            .await?
            .into_iter()
            .map(
                |(decision_id, revision, decision, actor, rationale_md, created_at)| {
                    crate::wire::ProposalDecisionView {
                        decision_id,
                        revision,
                        decision,
                        actor,
                        rationale_md,
                        created_at,
                    }
                },
            )
            .collect();
        let risk = Self::record_of(&row)?.risk;
        Ok(ProposalGetReply {
            review: self.review_picture(&row, risk).await?,
            proposal: self.proposal_view(&row).await?,
            files,
            decisions,
        })
    }

    /// `proposal.list`: oldest first unless `order = "newest"`; default 50, 1..=200.
    pub async fn proposal_list(
        &self,
        actor: &Actor,
        p: ProposalListParams,
    ) -> Result<ProposalListReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = page_limit(p.limit)?;
        let after = parse_cursor("prc_", p.cursor.as_deref())?;
        let rows = self
            .ctx
            .data
            .store
            .list_proposals(ProposalFilter {
                workspace_id: p.workspace_id.clone(),
                task_id: p.task_id,
                status: p.status,
                author: p.author,
                after,
                newest_first: p.order.unwrap_or_default() == ListOrder::Newest,
                limit,
            })
            .await?;
        let mut proposals = Vec::with_capacity(rows.len());
        for r in &rows {
            proposals.push(self.proposal_view(r).await?);
        }
        let next = next_cursor("prc_", rows.len(), limit, rows.last().map(|r| r.seq));
        Ok(ProposalListReply {
            proposals,
            next_cursor: next,
        })
    }
}
