//! Review evidence bound to proposal revisions: review plans, votes, security
//! reviews, human approvals and decisions. Every write is one `BEGIN IMMEDIATE` transaction
//! that re-reads the proposal and refuses evidence for a revision that is no longer current
//! (so an attach racing a vote can never leave the vote on the wrong bytes), with its event
//! and idempotency binding.

use super::candidates::insert_binding_checked;
use super::events::event;
use super::{Binding, Store, StoreError};
use crate::domain::policy::{ApprovalEvent, ApprovalState, SecurityVerdict, VoteKind};
use crate::domain::proposal::ProposalState;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// A vote as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteRow {
    pub vote_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub voter: String,
    /// The roles the voter held when voting.
    pub roles: Vec<String>,
    pub vote: VoteKind,
    pub confidence: f64,
    pub reason_md: String,
    /// The voter's newest vote on this revision (older ones are history).
    pub current: bool,
    pub created_at: String,
}

/// A security review as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityReviewRow {
    pub review_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub reviewer: String,
    pub verdict: SecurityVerdict,
    pub notes_md: String,
    pub created_at: String,
}

/// A human approval as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRow {
    pub approval_id: String,
    pub workspace_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub requested_by: String,
    pub state: ApprovalState,
    pub decided_by: Option<String>,
    pub override_votes: bool,
    pub reason_md: Option<String>,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// A decision as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRow {
    pub decision_id: String,
    pub workspace_id: String,
    pub proposal_id: Option<String>,
    pub revision: Option<String>,
    pub task_id: Option<String>,
    pub decision: String,
    pub decided_by: String,
    pub rationale_md: String,
    pub created_at: String,
}

fn parse_enum<T: Copy>(
    all: &[T],
    name: impl Fn(T) -> &'static str,
    v: &str,
) -> rusqlite::Result<T> {
    all.iter().copied().find(|x| name(*x) == v).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown value {v:?}").into(),
        )
    })
}

const VOTE_COLUMNS: &str = "vote_id, proposal_id, revision, voter, roles, vote, confidence, reason_md, current, created_at";

fn vote_row(r: &rusqlite::Row) -> rusqlite::Result<VoteRow> {
    let roles: String = r.get(4)?;
    let vote: String = r.get(5)?;
    Ok(VoteRow {
        vote_id: r.get(0)?,
        proposal_id: r.get(1)?,
        revision: r.get(2)?,
        voter: r.get(3)?,
        roles: serde_json::from_str(&roles).unwrap_or_default(),
        vote: parse_enum(&VoteKind::ALL, VoteKind::as_str, &vote)?,
        confidence: r.get(6)?,
        reason_md: r.get(7)?,
        current: r.get::<_, i64>(8)? == 1,
        created_at: r.get(9)?,
    })
}

const REVIEW_COLUMNS: &str =
    "review_id, proposal_id, revision, reviewer, verdict, notes_md, created_at";

fn review_row(r: &rusqlite::Row) -> rusqlite::Result<SecurityReviewRow> {
    let verdict: String = r.get(4)?;
    Ok(SecurityReviewRow {
        review_id: r.get(0)?,
        proposal_id: r.get(1)?,
        revision: r.get(2)?,
        reviewer: r.get(3)?,
        verdict: parse_enum(&SecurityVerdict::ALL, SecurityVerdict::as_str, &verdict)?,
        notes_md: r.get(5)?,
        created_at: r.get(6)?,
    })
}

pub(super) const APPROVAL_COLUMNS: &str = "approval_id, workspace_id, proposal_id, revision, requested_by, state, decided_by, override, reason_md, created_at, decided_at";

pub(super) fn approval_row(r: &rusqlite::Row) -> rusqlite::Result<ApprovalRow> {
    let state: String = r.get(5)?;
    Ok(ApprovalRow {
        approval_id: r.get(0)?,
        workspace_id: r.get(1)?,
        proposal_id: r.get(2)?,
        revision: r.get(3)?,
        requested_by: r.get(4)?,
        state: parse_enum(&ApprovalState::ALL, ApprovalState::as_str, &state)?,
        decided_by: r.get(6)?,
        override_votes: r.get::<_, i64>(7)? == 1,
        reason_md: r.get(8)?,
        created_at: r.get(9)?,
        decided_at: r.get(10)?,
    })
}

const DECISION_COLUMNS: &str = "decision_id, workspace_id, proposal_id, revision, task_id, decision, actor, rationale_md, created_at";

fn decision_row(r: &rusqlite::Row) -> rusqlite::Result<DecisionRow> {
    Ok(DecisionRow {
        decision_id: r.get(0)?,
        workspace_id: r.get(1)?,
        proposal_id: r.get(2)?,
        revision: r.get(3)?,
        task_id: r.get(4)?,
        decision: r.get(5)?,
        decided_by: r.get(6)?,
        rationale_md: r.get(7)?,
        created_at: r.get(8)?,
    })
}

fn vote_by_id(c: &rusqlite::Connection, id: &str) -> rusqlite::Result<Option<VoteRow>> {
    c.query_row(
        &format!("SELECT {VOTE_COLUMNS} FROM votes WHERE vote_id = ?1"),
        params![id],
        vote_row,
    )
    .optional()
}

fn approval_by_id(c: &rusqlite::Connection, id: &str) -> rusqlite::Result<Option<ApprovalRow>> {
    c.query_row(
        &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = ?1"),
        params![id],
        approval_row,
    )
    .optional()
}

/// A row this transaction just wrote.
fn written<T>(row: rusqlite::Result<Option<T>>, what: &str) -> Result<T, StoreError> {
    row?.ok_or_else(|| StoreError::Conflict(format!("{what} vanished inside its transaction")))
}

/// Inside a transaction: the proposal must be in review with `revision` current, and no
/// transaction may be applying it (evidence cannot change under an apply).
fn require_current(
    tx: &rusqlite::Transaction,
    proposal_id: &str,
    revision: &str,
) -> Result<String, StoreError> {
    let (ws, status, current): (String, String, String) = tx
        .query_row(
            "SELECT workspace_id, status, current_revision FROM proposals WHERE proposal_id = ?1",
            params![proposal_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?
        .ok_or_else(|| StoreError::Conflict(format!("proposal {proposal_id} does not exist")))?;
    if current != revision {
        return Err(StoreError::Conflict(format!(
            "revision {revision} of proposal {proposal_id} is not current (the current one is {current})"
        )));
    }
    if status != ProposalState::InReview.as_str() {
        return Err(StoreError::Conflict(format!(
            "proposal {proposal_id} is {status}, not in_review"
        )));
    }
    super::fences::proposal_fence(tx, proposal_id)?;
    Ok(ws)
}

/// The evidence the verdict reads about one revision: each voter's current vote, the newest
/// security review and the newest human approval.
#[derive(Debug, Clone, Default)]
pub struct ReviewEvidence {
    pub votes: Vec<VoteRow>,
    pub security: Option<SecurityReviewRow>,
    pub approval: Option<ApprovalRow>,
}

/// [`ReviewEvidence`] of `revision`, read on `c` (inside the caller's transaction, if any).
pub(super) fn evidence_in(
    c: &rusqlite::Connection,
    proposal_id: &str,
    revision: &str,
) -> rusqlite::Result<ReviewEvidence> {
    let votes = c
        .prepare(&format!(
            "SELECT {VOTE_COLUMNS} FROM votes
             WHERE proposal_id = ?1 AND revision = ?2 AND current = 1 ORDER BY seq"
        ))?
        .query_map(params![proposal_id, revision], vote_row)?
        .collect::<Result<Vec<_>, _>>()?;
    let security = c
        .query_row(
            &format!(
                "SELECT {REVIEW_COLUMNS} FROM security_reviews
                 WHERE proposal_id = ?1 AND revision = ?2 ORDER BY seq DESC LIMIT 1"
            ),
            params![proposal_id, revision],
            review_row,
        )
        .optional()?;
    let approval = c
        .query_row(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals
                 WHERE proposal_id = ?1 AND revision = ?2 ORDER BY seq DESC LIMIT 1"
            ),
            params![proposal_id, revision],
            approval_row,
        )
        .optional()?;
    Ok(ReviewEvidence {
        votes,
        security,
        approval,
    })
}

/// A vote to record.
#[derive(Debug, Clone)]
pub struct NewVote {
    pub vote_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub voter: String,
    pub roles: Vec<String>,
    pub vote: VoteKind,
    pub confidence: f64,
    pub reason_md: String,
    pub at: String,
    pub binding: Binding,
}

impl Store {
    /// Records a vote on the current revision; the voter's earlier vote on it (if any) stops
    /// being current in the same transaction, so one voter has exactly one current vote.
    pub async fn cast_vote(&self, v: NewVote) -> Result<VoteRow, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ws = require_current(&tx, &v.proposal_id, &v.revision)?;
            let superseded: Option<String> = tx
                .query_row(
                    "UPDATE votes SET current = 0
                     WHERE proposal_id = ?1 AND revision = ?2 AND voter = ?3 AND current = 1
                     RETURNING vote_id",
                    params![v.proposal_id, v.revision, v.voter],
                    |r| r.get(0),
                )
                .optional()?;
            tx.execute(
                &format!("INSERT INTO votes (workspace_id, {VOTE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10)"),
                params![
                    ws,
                    v.vote_id,
                    v.proposal_id,
                    v.revision,
                    v.voter,
                    serde_json::to_string(&v.roles).expect("roles serialize"),
                    v.vote.as_str(),
                    v.confidence,
                    v.reason_md,
                    v.at
                ],
            )?;
            event(
                &tx,
                &ws,
                &v.proposal_id,
                "vote.cast",
                &v.voter,
                None,
                Some(v.vote.as_str()),
                &serde_json::json!({"vote_id": v.vote_id, "revision": v.revision,
                                    "superseded": superseded})
                .to_string(),
                &v.at,
            )?;
            insert_binding_checked(&tx, &v.binding)?;
            let row = written(vote_by_id(&tx, &v.vote_id), "the vote")?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// The evidence about `revision` the verdict reads, in one read.
    pub async fn review_evidence(
        &self,
        proposal_id: &str,
        revision: &str,
    ) -> Result<ReviewEvidence, StoreError> {
        let (p, r) = (proposal_id.to_string(), revision.to_string());
        self.call(move |c| Ok(evidence_in(c, &p, &r)?)).await
    }

    /// A proposal's votes (of one revision, if given), oldest first, history included.
    pub async fn votes(
        &self,
        proposal_id: &str,
        revision: Option<String>,
    ) -> Result<Vec<VoteRow>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {VOTE_COLUMNS} FROM votes
                 WHERE proposal_id = ?1 AND (?2 IS NULL OR revision = ?2) ORDER BY seq"
            ))?;
            let rows = st
                .query_map(params![id, revision], vote_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// One vote.
    pub async fn vote(&self, vote_id: &str) -> Result<Option<VoteRow>, StoreError> {
        let id = vote_id.to_string();
        self.call(move |c| Ok(vote_by_id(c, &id)?)).await
    }

    /// Records a security review of the current revision.
    #[allow(clippy::too_many_arguments)] // one column each; a struct would only rename them
    pub async fn record_security_review(
        &self,
        review_id: &str,
        proposal_id: &str,
        revision: &str,
        reviewer: &str,
        verdict: SecurityVerdict,
        notes_md: &str,
        at: &str,
        binding: Binding,
    ) -> Result<SecurityReviewRow, StoreError> {
        let (rid, pid, rev, who, notes, at) = (
            review_id.to_string(),
            proposal_id.to_string(),
            revision.to_string(),
            reviewer.to_string(),
            notes_md.to_string(),
            at.to_string(),
        );
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ws = require_current(&tx, &pid, &rev)?;
            tx.execute(
                &format!("INSERT INTO security_reviews (workspace_id, {REVIEW_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
                params![ws, rid, pid, rev, who, verdict.as_str(), notes, at],
            )?;
            event(
                &tx,
                &ws,
                &pid,
                "security.review",
                &who,
                None,
                Some(verdict.as_str()),
                &serde_json::json!({"review_id": rid, "revision": rev}).to_string(),
                &at,
            )?;
            insert_binding_checked(&tx, &binding)?;
            let row = tx.query_row(
                &format!("SELECT {REVIEW_COLUMNS} FROM security_reviews WHERE review_id = ?1"),
                params![rid],
                review_row,
            )?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// A proposal's security reviews, oldest first.
    pub async fn security_reviews(
        &self,
        proposal_id: &str,
    ) -> Result<Vec<SecurityReviewRow>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {REVIEW_COLUMNS} FROM security_reviews WHERE proposal_id = ?1 ORDER BY seq"
            ))?;
            let rows = st
                .query_map(params![id], review_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Requests a human approval of the current revision; one pending approval per revision
    /// (a second is `Conflict` naming the pending one).
    pub async fn request_approval(
        &self,
        approval_id: &str,
        proposal_id: &str,
        revision: &str,
        requested_by: &str,
        at: &str,
        binding: Binding,
    ) -> Result<ApprovalRow, StoreError> {
        let (aid, pid, rev, who, at) = (
            approval_id.to_string(),
            proposal_id.to_string(),
            revision.to_string(),
            requested_by.to_string(),
            at.to_string(),
        );
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ws = require_current(&tx, &pid, &rev)?;
            let pending: Option<String> = tx
                .query_row(
                    "SELECT approval_id FROM approvals
                     WHERE proposal_id = ?1 AND revision = ?2 AND state = ?3",
                    params![pid, rev, ApprovalState::Pending.as_str()],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(p) = pending {
                return Err(StoreError::Conflict(format!(
                    "human approval {p} of this revision is already pending"
                )));
            }
            tx.execute(
                "INSERT INTO approvals (approval_id, workspace_id, proposal_id, revision, requested_by, state, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?6)",
                params![aid, ws, pid, rev, who, at, ApprovalState::Pending.as_str()],
            )?;
            event(
                &tx,
                &ws,
                &pid,
                "approval.requested",
                &who,
                None,
                Some(ApprovalState::Pending.as_str()),
                &serde_json::json!({"approval_id": aid, "revision": rev}).to_string(),
                &at,
            )?;
            insert_binding_checked(&tx, &binding)?;
            let row = written(approval_by_id(&tx, &aid), "the approval")?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// Decides a pending approval whose revision is still current (compare-and-set on the
    /// state), with its event and binding.
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub async fn decide_approval(
        &self,
        approval_id: &str,
        decision: ApprovalEvent,
        decided_by: &str,
        override_votes: bool,
        reason_md: &str,
        at: &str,
        binding: Binding,
    ) -> Result<ApprovalRow, StoreError> {
        let (aid, who, reason, at) = (
            approval_id.to_string(),
            decided_by.to_string(),
            reason_md.to_string(),
            at.to_string(),
        );
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let a = approval_by_id(&tx, &aid)?.ok_or_else(|| StoreError::Conflict(format!("approval {aid} does not exist")))?;
            let next = a.state.on(decision)?;
            require_current(&tx, &a.proposal_id, &a.revision)?;
            let n = tx.execute(
                "UPDATE approvals SET state = ?1, decided_by = ?2, override = ?3, reason_md = ?4, decided_at = ?5
                 WHERE approval_id = ?6 AND state = ?7",
                params![next.as_str(), who, i64::from(override_votes), reason, at, aid, a.state.as_str()],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!("approval {aid} was decided meanwhile")));
            }
            event(
                &tx,
                &a.workspace_id,
                &a.proposal_id,
                &format!("approval.{}", next.as_str()),
                &who,
                Some(a.state.as_str()),
                Some(next.as_str()),
                &serde_json::json!({"approval_id": aid, "revision": a.revision,
                                    "override": override_votes})
                .to_string(),
                &at,
            )?;
            insert_binding_checked(&tx, &binding)?;
            let row = written(approval_by_id(&tx, &aid), "the approval")?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// One approval.
    pub async fn approval(&self, approval_id: &str) -> Result<Option<ApprovalRow>, StoreError> {
        let id = approval_id.to_string();
        self.call(move |c| Ok(approval_by_id(c, &id)?)).await
    }

    /// A proposal's approvals, oldest first.
    pub async fn approvals(&self, proposal_id: &str) -> Result<Vec<ApprovalRow>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE proposal_id = ?1 ORDER BY seq"
            ))?;
            let rows = st
                .query_map(params![id], approval_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Records an immutable decision (about nothing, a task, or a proposal revision that
    /// exists), with its event and binding.
    pub async fn record_decision(
        &self,
        d: DecisionRow,
        binding: Binding,
    ) -> Result<DecisionRow, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let (Some(p), Some(r)) = (&d.proposal_id, &d.revision) {
                let known: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM proposal_revisions WHERE proposal_id = ?1 AND revision = ?2",
                    params![p, r],
                    |x| x.get(0),
                )?;
                if known == 0 {
                    return Err(StoreError::Conflict(format!(
                        "proposal {p} has no revision {r}"
                    )));
                }
            }
            tx.execute(
                &format!("INSERT INTO decisions ({DECISION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
                params![
                    d.decision_id,
                    d.workspace_id,
                    d.proposal_id,
                    d.revision,
                    d.task_id,
                    d.decision,
                    d.decided_by,
                    d.rationale_md,
                    d.created_at
                ],
            )?;
            event(
                &tx,
                &d.workspace_id,
                d.proposal_id.as_deref().unwrap_or(&d.decision_id),
                "decision.recorded",
                &d.decided_by,
                None,
                Some(&d.decision),
                &serde_json::json!({"decision_id": d.decision_id, "revision": d.revision,
                                    "task_id": d.task_id})
                .to_string(),
                &d.created_at,
            )?;
            insert_binding_checked(&tx, &binding)?;
            tx.commit()?;
            Ok(d)
        })
        .await
    }

    /// One decision.
    pub async fn decision(&self, decision_id: &str) -> Result<Option<DecisionRow>, StoreError> {
        let id = decision_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {DECISION_COLUMNS} FROM decisions WHERE decision_id = ?1"),
                params![id],
                decision_row,
            )
            .optional()?)
        })
        .await
    }

    /// A workspace's decisions, oldest first, optionally about one proposal or task.
    pub async fn decisions(
        &self,
        workspace_id: &str,
        proposal_id: Option<String>,
        task_id: Option<String>,
        limit: u32,
    ) -> Result<Vec<DecisionRow>, StoreError> {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions
                 WHERE workspace_id = ?1 AND (?2 IS NULL OR proposal_id = ?2)
                   AND (?3 IS NULL OR task_id = ?3)
                 ORDER BY seq LIMIT ?4"
            ))?;
            let rows = st
                .query_map(params![ws, proposal_id, task_id, limit], decision_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// The review plan saved for a revision, as JSON.
    pub async fn review_plan(
        &self,
        proposal_id: &str,
        revision: &str,
    ) -> Result<Option<String>, StoreError> {
        let (p, r) = (proposal_id.to_string(), revision.to_string());
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT plan FROM review_plans WHERE proposal_id = ?1 AND revision = ?2",
                params![p, r],
                |x| x.get(0),
            )
            .optional()?)
        })
        .await
    }
}

/// Inside a proposal transition's transaction: saves the review plan of a revision.
pub(super) fn save_plan(
    tx: &rusqlite::Transaction,
    proposal_id: &str,
    revision: &str,
    plan: &str,
    at: &str,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO review_plans (proposal_id, revision, plan, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![proposal_id, revision, plan, at],
    )?;
    Ok(())
}
