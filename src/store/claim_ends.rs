//! How claims end with their proposal and come back after a suspension: the release of a
//! holder's `proposal_end` claims inside the transaction that ends the proposal they covered,
//! and `resume`, the acquire's conflict check applied to a suspended claim's return.

use super::claims::{
    CLAIM_COLUMNS, ClaimRow, claim_by_id, conflicting, moved, not_being_applied, parsed, row,
};
use super::{Store, StoreError};
use crate::domain::claim::{ClaimEvent, ClaimState, ReleaseOn, ResourceId, covers};
use crate::domain::proposal::ProposalState;
use rusqlite::{TransactionBehavior, params};

/// A resume, as the engine checked it (the resource's hash taken now and found unchanged).
#[derive(Debug, Clone)]
pub struct Resume {
    pub claim_id: String,
    pub expected_version: i64,
    pub actor: String,
    pub forced: bool,
    pub now: i64,
    pub at: String,
    pub binding: Option<super::Binding>,
}

/// What a resume did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    Active(ClaimRow),
    /// Another holder's claim granted meanwhile conflicts: nothing changed.
    Blocked(Vec<ClaimRow>),
}

/// A revision's affected resources, as stored.
fn affected_by(proposal_id: &str, json: &str) -> Result<Vec<ResourceId>, StoreError> {
    Ok(serde_json::from_str::<Vec<String>>(json)
        .map_err(|e| StoreError::Corrupt {
            id: proposal_id.to_string(),
            message: format!("affected resources: {e}"),
        })?
        .iter()
        .filter_map(|id| ResourceId::parse(id).ok())
        .collect())
}

/// The proposal whose end releases claims: which one, its current revision, its workspace
/// and author.
pub(super) struct EndingProposal<'a> {
    pub proposal_id: &'a str,
    pub current_revision: &'a str,
    pub workspace_id: &'a str,
    pub author: &'a str,
}

/// Inside the transaction that accepts, withdraws or rejects `proposal`: releases every claim
/// of its author marked `release_on = proposal_end` that covers one of the current revision's
/// affected resources, each with its event. A claim that another open proposal of the author
/// still needs, or that another open apply holds, is kept. Answers the released ids.
pub(super) fn release_at_proposal_end(
    tx: &rusqlite::Transaction,
    proposal: EndingProposal<'_>,
    actor: &str,
    at: &str,
) -> Result<Vec<String>, StoreError> {
    let affected = affected_by(
        proposal.proposal_id,
        &tx.query_row(
            "SELECT affected_resources FROM proposal_revisions WHERE proposal_id = ?1 AND revision = ?2",
            params![proposal.proposal_id, proposal.current_revision],
            |r| r.get::<_, String>(0),
        )?,
    )?;
    // What the author's other open proposals still need: a claim covering one of them stays.
    let still_needed: Vec<ResourceId> = {
        let mut st = tx.prepare(&format!(
            "SELECT p.proposal_id, r.affected_resources FROM proposals p
             JOIN proposal_revisions r ON r.proposal_id = p.proposal_id AND r.revision = p.current_revision
             WHERE p.workspace_id = ?1 AND p.author = ?2 AND p.proposal_id != ?3 AND p.status IN ({})",
            crate::domain::candidate::sql_list(
                ProposalState::ALL
                    .into_iter()
                    .filter(|s| !s.is_terminal())
                    .map(ProposalState::as_str)
            )
        ))?;
        let rows: Vec<(String, String)> = st
            .query_map(
                params![proposal.workspace_id, proposal.author, proposal.proposal_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = vec![];
        for (id, json) in rows {
            out.extend(affected_by(&id, &json)?);
        }
        out
    };
    let candidates: Vec<ClaimRow> = {
        let mut st = tx.prepare(&format!(
            "SELECT {CLAIM_COLUMNS} FROM claims
             WHERE workspace_id = ?1 AND holder = ?2 AND release_on = ?3 AND status IN ({})",
            ClaimState::sql_list(|s| !s.is_terminal())
        ))?;
        st.query_map(
            params![
                proposal.workspace_id,
                proposal.author,
                ReleaseOn::ProposalEnd.as_str()
            ],
            row,
        )?
        .collect::<rusqlite::Result<_>>()?
    };
    let mut released = vec![];
    for c in candidates {
        let held = parsed(&c)?;
        if !affected.iter().any(|a| covers(&held, a))
            || still_needed.iter().any(|a| covers(&held, a))
            || super::fences::claim_holder(tx, &c.claim_id)?.is_some()
        {
            continue;
        }
        let next = c.status.on(ClaimEvent::Release)?;
        moved(
            tx,
            &c,
            next,
            ClaimEvent::Release,
            actor,
            serde_json::json!({"forced": false, "reason": "proposal_end",
                               "proposal_id": proposal.proposal_id}),
            at,
            None,
        )?;
        released.push(c.claim_id);
    }
    Ok(released)
}

impl Store {
    /// Resumes a suspended claim still at `expected_version`, unexpired, whose resource no
    /// open apply is installing and no other holder's active claim now conflicts with; the
    /// same fencing token, with its event and binding, in one transaction.
    pub async fn resume_claim(&self, r: Resume) -> Result<Resumed, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let id = &r.claim_id;
            let current = claim_by_id(&tx, id)?;
            if current.version != r.expected_version {
                return Err(StoreError::Conflict(format!(
                    "claim {id} is at version {}, not {}",
                    current.version, r.expected_version
                )));
            }
            let next = current.status.on(ClaimEvent::Resume)?;
            if current.expires_at <= r.now {
                return Err(StoreError::Precondition {
                    field: None,
                    message: format!("claim {id} is past its expiry: acquire the resource again"),
                });
            }
            let resource = parsed(&current)?;
            not_being_applied(&tx, &current.workspace_id, &resource)?;
            let blocked = conflicting(
                &tx,
                &current.workspace_id,
                &resource,
                current.span,
                &current.holder,
                current.mode,
                r.now,
            )?;
            if !blocked.is_empty() {
                return Ok(Resumed::Blocked(blocked));
            }
            let row = moved(
                &tx,
                &current,
                next,
                ClaimEvent::Resume,
                &r.actor,
                serde_json::json!({"forced": r.forced}),
                &r.at,
                r.binding.as_ref(),
            )?;
            tx.commit()?;
            Ok(Resumed::Active(row))
        })
        .await
    }
}
