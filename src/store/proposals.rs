//! Proposals and their immutable revisions, and the decisions recorded about them.
//! Every change is one `BEGIN IMMEDIATE` transaction: the compare-and-set on the proposal's
//! `version`, the revision row, the event and the idempotency binding commit together or not
//! at all. A revision row names a patch artifact that was fsynced before the transaction began.

use super::candidates::{existing_binding, insert_binding, insert_binding_checked};
use super::events::event;
use super::{Binding, Inserted, Store, StoreError};
use crate::domain::proposal::{ProposalEvent, ProposalState};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// A proposal row as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposalRow {
    pub proposal_id: String,
    pub workspace_id: String,
    pub author: String,
    pub task_id: String,
    pub status: ProposalState,
    pub version: i64,
    /// SHA-256 hex of the current revision's patch bytes.
    pub current_revision: String,
    /// The rest of the wire object (title, summary, risk, tests, notes, times), as JSON.
    pub record: String,
    /// The row's position (a paging cursor).
    pub seq: i64,
}

impl ProposalRow {
    /// What ending this proposal releases claims by.
    pub(super) fn ending(&self) -> super::claim_ends::EndingProposal<'_> {
        super::claim_ends::EndingProposal {
            proposal_id: &self.proposal_id,
            current_revision: &self.current_revision,
            workspace_id: &self.workspace_id,
            author: &self.author,
        }
    }
}

/// One immutable revision of a proposal's patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionRow {
    pub number: i64,
    pub revision: String,
    pub bytes: i64,
    pub created_at: String,
    /// The affected resource ids of this revision, as a JSON list.
    pub affected_resources: String,
}

/// A decision recorded with a transition (`rejected` today; `decision.record` next issue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDecision {
    pub decision_id: String,
    pub decision: String,
    pub rationale_md: String,
}

/// Which proposals `list_proposals` returns (every `None` matches all).
#[derive(Debug, Clone, Default)]
pub struct ProposalFilter {
    pub workspace_id: String,
    pub task_id: Option<String>,
    pub status: Option<ProposalState>,
    pub author: Option<String>,
    /// Only rows past this cursor (a `seq` of a previous page), in the listing's order.
    pub after: Option<i64>,
    pub newest_first: bool,
    pub limit: u32,
}

const COLUMNS: &str =
    "proposal_id, workspace_id, author, task_id, status, version, current_revision, record, seq";

fn row(r: &rusqlite::Row) -> rusqlite::Result<ProposalRow> {
    let status: String = r.get(4)?;
    Ok(ProposalRow {
        proposal_id: r.get(0)?,
        workspace_id: r.get(1)?,
        author: r.get(2)?,
        task_id: r.get(3)?,
        status: ProposalState::ALL
            .into_iter()
            .find(|s| s.as_str() == status)
            .ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    4,
                    rusqlite::types::Type::Text,
                    format!("proposal status {status:?}").into(),
                )
            })?,
        version: r.get(5)?,
        current_revision: r.get(6)?,
        record: r.get(7)?,
        seq: r.get(8)?,
    })
}

pub(super) fn load(tx: &rusqlite::Transaction, id: &str) -> Result<ProposalRow, StoreError> {
    tx.query_row(
        &format!("SELECT {COLUMNS} FROM proposals WHERE proposal_id = ?1"),
        params![id],
        row,
    )
    .optional()?
    .ok_or_else(|| StoreError::Conflict(format!("proposal {id} does not exist")))
}

fn insert_revision(
    tx: &rusqlite::Transaction,
    proposal_id: &str,
    r: &RevisionRow,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO proposal_revisions (proposal_id, number, revision, bytes, created_at, affected_resources)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![proposal_id, r.number, r.revision, r.bytes, r.created_at, r.affected_resources],
    )?;
    Ok(())
}

impl Store {
    /// Inserts a new proposal with its first revision, its `created` event and its binding,
    /// unless the binding exists (then nothing changes and the existing binding is returned).
    pub async fn create_proposal(
        &self,
        p: ProposalRow,
        first: RevisionRow,
        binding: Binding,
    ) -> Result<Inserted, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(existing) = existing_binding(&tx, &binding)? {
                return Ok(existing);
            }
            insert_binding(&tx, &binding)?;
            tx.execute(
                "INSERT INTO proposals (proposal_id, workspace_id, author, task_id, status, version, current_revision, record)
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7)",
                params![
                    p.proposal_id,
                    p.workspace_id,
                    p.author,
                    p.task_id,
                    p.status.as_str(),
                    p.current_revision,
                    p.record
                ],
            )?;
            insert_revision(&tx, &p.proposal_id, &first)?;
            event(
                &tx,
                &p.workspace_id,
                &p.proposal_id,
                "proposal.created",
                &p.author,
                None,
                Some(p.status.as_str()),
                &serde_json::json!({"revision": first.revision, "number": 1}).to_string(),
                &first.created_at,
            )?;
            tx.commit()?;
            Ok(Inserted::New)
        })
        .await
    }

    /// Adds revision n+1 to a proposal at `expected_version` (compare-and-set), replacing its
    /// record, with its event and binding in the same transaction (and, for a proposal in
    /// review, the new revision's review plan).
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub async fn attach_revision(
        &self,
        proposal_id: &str,
        expected_version: i64,
        record: String,
        next: RevisionRow,
        actor: &str,
        binding: Binding,
        plan: Option<String>,
    ) -> Result<ProposalRow, StoreError> {
        let (id, actor) = (proposal_id.to_string(), actor.to_string());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let p = load(&tx, &id)?;
            super::fences::proposal_fence(&tx, &id)?;
            if p.version != expected_version {
                return Err(StoreError::Conflict(format!(
                    "proposal {id} is at version {}, not expected_version {expected_version}",
                    p.version
                )));
            }
            let status = p.status.on(ProposalEvent::AttachPatch)?;
            let last: i64 = tx.query_row(
                "SELECT COALESCE(MAX(number), 0) FROM proposal_revisions WHERE proposal_id = ?1",
                params![id],
                |r| r.get(0),
            )?;
            if next.number != last + 1 {
                return Err(StoreError::Conflict(format!(
                    "proposal {id} has {last} revisions; revision {} is not the next",
                    next.number
                )));
            }
            insert_revision(&tx, &id, &next)?;
            let n = tx.execute(
                "UPDATE proposals SET version = version + 1, current_revision = ?1, record = ?2
                 WHERE proposal_id = ?3 AND version = ?4",
                params![next.revision, record, id, expected_version],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!("proposal {id} moved")));
            }
            event(
                &tx,
                &p.workspace_id,
                &id,
                "proposal.revision_attached",
                &actor,
                Some(p.status.as_str()),
                Some(status.as_str()),
                &serde_json::json!({
                    "revision": next.revision,
                    "number": next.number,
                    "invalidated_revision": p.current_revision,
                })
                .to_string(),
                &next.created_at,
            )?;
            // A proposal in review gets a fresh plan for the new revision, in this transaction.
            if status == ProposalState::InReview
                && let Some(plan) = &plan
            {
                super::reviews::save_plan(&tx, &id, &next.revision, plan, &next.created_at)?;
            }
            insert_binding_checked(&tx, &binding)?;
            let p = load(&tx, &id)?;
            tx.commit()?;
            Ok(p)
        })
        .await
    }

    /// Moves a proposal at `expected_version` by `ev` (compare-and-set; the domain decides
    /// whether the move is legal), with its event, an optional decision and the binding.
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub async fn transition_proposal(
        &self,
        proposal_id: &str,
        expected_version: i64,
        ev: ProposalEvent,
        record: String,
        actor: &str,
        decision: Option<NewDecision>,
        binding: Binding,
        at: &str,
        plan: Option<String>,
    ) -> Result<ProposalRow, StoreError> {
        let (id, actor, at) = (proposal_id.to_string(), actor.to_string(), at.to_string());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let p = load(&tx, &id)?;
            super::fences::proposal_fence(&tx, &id)?;
            // A state that no longer allows the move is the answer (an apply that landed
            // meanwhile makes a withdrawal illegal, not merely late).
            let next = p.status.on(ev)?;
            if p.version != expected_version {
                return Err(StoreError::Conflict(format!("proposal {id} moved")));
            }
            let n = tx.execute(
                "UPDATE proposals SET version = version + 1, status = ?1, record = ?2
                 WHERE proposal_id = ?3 AND version = ?4 AND status = ?5",
                params![next.as_str(), record, id, expected_version, p.status.as_str()],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!("proposal {id} moved")));
            }
            let mut payload = serde_json::json!({"revision": p.current_revision});
            if next.is_terminal() {
                let released = super::claim_ends::release_at_proposal_end(&tx, p.ending(), &actor, &at)?;
                if !released.is_empty() {
                    payload["released_claims"] = released.into();
                }
            }
            if let Some(d) = &decision {
                tx.execute(
                    "INSERT INTO decisions (decision_id, workspace_id, proposal_id, revision, task_id, decision, actor, rationale_md, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        d.decision_id,
                        p.workspace_id,
                        id,
                        p.current_revision,
                        p.task_id,
                        d.decision,
                        actor,
                        d.rationale_md,
                        at
                    ],
                )?;
                payload["decision_id"] = d.decision_id.clone().into();
            }
            event(
                &tx,
                &p.workspace_id,
                &id,
                &format!("proposal.{}", ev.as_str()),
                &actor,
                Some(p.status.as_str()),
                Some(next.as_str()),
                &payload.to_string(),
                &at,
            )?;
            if next == ProposalState::InReview
                && let Some(plan) = &plan
            {
                super::reviews::save_plan(&tx, &id, &p.current_revision, plan, &at)?;
            }
            insert_binding_checked(&tx, &binding)?;
            let p = load(&tx, &id)?;
            tx.commit()?;
            Ok(p)
        })
        .await
    }

    /// The open (pending or in review) proposal compensating `transaction_id`, if any.
    pub async fn open_compensation(
        &self,
        transaction_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let id = transaction_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!(
                    "SELECT proposal_id FROM proposals
                     WHERE json_extract(record, '$.compensates') = ?1 AND status IN ({})
                     ORDER BY seq LIMIT 1",
                    crate::domain::candidate::sql_list(
                        ProposalState::ALL
                            .into_iter()
                            .filter(|s| !s.is_terminal())
                            .map(ProposalState::as_str)
                    )
                ),
                params![id],
                |r| r.get(0),
            )
            .optional()?)
        })
        .await
    }

    /// One proposal.
    pub async fn proposal(&self, proposal_id: &str) -> Result<Option<ProposalRow>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {COLUMNS} FROM proposals WHERE proposal_id = ?1"),
                params![id],
                row,
            )
            .optional()?)
        })
        .await
    }

    /// A proposal's revisions, first first.
    pub async fn revisions(&self, proposal_id: &str) -> Result<Vec<RevisionRow>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT number, revision, bytes, created_at, affected_resources
                 FROM proposal_revisions WHERE proposal_id = ?1 ORDER BY number",
            )?;
            let rows = st
                .query_map(params![id], |r| {
                    Ok(RevisionRow {
                        number: r.get(0)?,
                        revision: r.get(1)?,
                        bytes: r.get(2)?,
                        created_at: r.get(3)?,
                        affected_resources: r.get(4)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Proposals of a workspace matching `f`, oldest or newest first, one page.
    pub async fn list_proposals(&self, f: ProposalFilter) -> Result<Vec<ProposalRow>, StoreError> {
        self.call(move |c| {
            let (cmp, order) = if f.newest_first {
                ("<", "DESC")
            } else {
                (">", "ASC")
            };
            let after = f.after.unwrap_or(if f.newest_first { i64::MAX } else { 0 });
            let mut st = c.prepare(&format!(
                "SELECT {COLUMNS} FROM proposals
                 WHERE workspace_id = ?1 AND seq {cmp} ?2
                   AND (?3 IS NULL OR task_id = ?3)
                   AND (?4 IS NULL OR status = ?4)
                   AND (?5 IS NULL OR author = ?5)
                 ORDER BY seq {order} LIMIT ?6"
            ))?;
            let rows = st
                .query_map(
                    params![
                        f.workspace_id,
                        after,
                        f.task_id,
                        f.status.map(|s| s.as_str()),
                        f.author,
                        f.limit
                    ],
                    row,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Decisions about a proposal, oldest first: (decision_id, revision, decision, actor,
    /// rationale, created_at).
    pub async fn decisions_of(
        &self,
        proposal_id: &str,
    ) -> Result<Vec<(String, String, String, String, String, String)>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT decision_id, COALESCE(revision, ''), decision, actor, rationale_md, created_at
                 FROM decisions WHERE proposal_id = ?1 ORDER BY seq",
            )?;
            let rows = st
                .query_map(params![id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
}
