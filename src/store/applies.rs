//! Validations and apply transactions. A validation is an immutable record (stages,
//! pre-images, post-images) with an expiry; a transaction moves through its phases by checked
//! compare-and-set, each move with its phase row and event in the same transaction, and its
//! final move to `applied` accepts the proposal in that same transaction.

use super::candidates::insert_binding_checked;
use super::claims::ClaimRow;
use super::events::event;
use super::proposals::ProposalRow;
use super::reviews::ReviewEvidence;
use super::{Binding, Store, StoreError};
use crate::domain::proposal::ProposalEvent;
use crate::domain::transaction::{TxEvent, TxState};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// A stored validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationRow {
    pub validation_id: String,
    pub workspace_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub expires_at: i64,
    pub record: String,
}

pub(super) const VALIDATION_COLUMNS: &str =
    "validation_id, workspace_id, proposal_id, revision, expires_at, record";

pub(super) fn validation_row(r: &rusqlite::Row) -> rusqlite::Result<ValidationRow> {
    Ok(ValidationRow {
        validation_id: r.get(0)?,
        workspace_id: r.get(1)?,
        proposal_id: r.get(2)?,
        revision: r.get(3)?,
        expires_at: r.get(4)?,
        record: r.get(5)?,
    })
}

/// A stored transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxRow {
    pub transaction_id: String,
    pub workspace_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub validation_id: String,
    pub status: TxState,
    pub version: i64,
    pub record: String,
    pub seq: i64,
}

const TX_COLUMNS: &str = "transaction_id, workspace_id, proposal_id, revision, validation_id, status, version, record, seq";

fn tx_row(r: &rusqlite::Row) -> rusqlite::Result<TxRow> {
    let status: String = r.get(5)?;
    Ok(TxRow {
        transaction_id: r.get(0)?,
        workspace_id: r.get(1)?,
        proposal_id: r.get(2)?,
        revision: r.get(3)?,
        validation_id: r.get(4)?,
        status: TxState::ALL
            .into_iter()
            .find(|s| s.as_str() == status)
            .ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    5,
                    rusqlite::types::Type::Text,
                    format!("transaction status {status:?}").into(),
                )
            })?,
        version: r.get(6)?,
        record: r.get(7)?,
        seq: r.get(8)?,
    })
}

fn phase(
    tx: &rusqlite::Transaction,
    id: &str,
    name: &str,
    actor: &str,
    detail: &str,
    at: &str,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO transaction_phases (transaction_id, phase, actor, detail, at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, name, actor, detail, at],
    )?;
    Ok(())
}

fn load_tx(tx: &rusqlite::Transaction, id: &str) -> Result<TxRow, StoreError> {
    tx.query_row(
        &format!("SELECT {TX_COLUMNS} FROM transactions WHERE transaction_id = ?1"),
        params![id],
        tx_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::Conflict(format!("transaction {id} does not exist")))
}

/// What an open transaction holds until it settles: the claims its validation relied on and
/// every path it reads or writes.
#[derive(Debug, Clone, Default)]
pub struct Fence {
    pub claims: Vec<String>,
    pub paths: Vec<String>,
}

/// Every fact apply's gates depend on, read inside the transaction that commits `prepared`.
#[derive(Debug, Clone)]
pub struct ApplyFacts {
    pub proposal: ProposalRow,
    pub validation: ValidationRow,
    /// The evidence about the transaction's revision.
    pub review: ReviewEvidence,
    /// Each claim of the fence by id, `None` when it no longer exists.
    pub claims: Vec<(String, Option<ClaimRow>)>,
}

/// One move of a transaction ([`Store::advance_transaction`]).
#[derive(Debug, Clone)]
pub struct Move {
    pub id: String,
    pub expected_version: i64,
    pub ev: TxEvent,
    /// The transaction's new record.
    pub record: String,
    pub actor: String,
    /// The phase's detail, as JSON.
    pub detail: String,
    pub at: String,
    /// The control call's idempotency binding, committed with the move.
    pub binding: Option<Binding>,
    /// Claims whose base hash becomes the given hash when the move reaches `applied`: an
    /// apply's own change does not make the claims it landed under stale.
    pub rebase: Vec<(String, String)>,
}

/// Why a gate refused, and the request field it is about when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRefusal {
    pub field: Option<&'static str>,
    pub message: String,
}

/// Decides on [`ApplyFacts`]: the new transaction's record, or why apply is refused.
pub type ApplyGate = Box<dyn FnOnce(&ApplyFacts) -> Result<String, GateRefusal> + Send>;

/// The refusal while `transaction_id` (in `status`) is open: what it is and what clears it.
pub fn still_open(transaction_id: &str, status: &str) -> String {
    let clears = if status == TxState::Prepared.as_str() {
        "it settles when its apply returns; if that apply died, recovery (the next maintenance pass, a restart or `airlock recover`) undoes it, or transaction.control cancel does"
    } else {
        "it settles when its apply returns; if that apply died, recovery (the next maintenance pass, a restart or `airlock recover`) finishes it forward or flags it needs_attention for transaction.control resolve"
    };
    format!("transaction {transaction_id} of this workspace is still open ({status}): {clears}")
}

/// Inside the transaction that moves `cur` to `applied`: accepts its proposal (an apply that
/// completes needs it still in review: otherwise `Precondition`, and the caller flags the
/// transaction; an operator's `resolve` leaves a proposal that left review as it is), and when
/// that proposal compensates an applied transaction, rolls that one back.
fn landed(
    tx: &rusqlite::Transaction,
    cur: &TxRow,
    ev: TxEvent,
    actor: &str,
    at: &str,
) -> Result<(), StoreError> {
    let p = super::proposals::load(tx, &cur.proposal_id)?;
    match p.status.on(ProposalEvent::Accept) {
        Ok(to) => {
            let released = super::claim_ends::release_at_proposal_end(tx, p.ending(), actor, at)?;
            let n = tx.execute(
                "UPDATE proposals SET status = ?1, version = version + 1
                 WHERE proposal_id = ?2 AND version = ?3",
                params![to.as_str(), p.proposal_id, p.version],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!(
                    "proposal {} moved",
                    p.proposal_id
                )));
            }
            event(
                tx,
                &cur.workspace_id,
                &p.proposal_id,
                "proposal.accept",
                actor,
                Some(p.status.as_str()),
                Some(to.as_str()),
                &serde_json::json!({"transaction_id": cur.transaction_id,
                                    "released_claims": released})
                .to_string(),
                at,
            )?;
        }
        Err(e) if ev == TxEvent::Complete => {
            return Err(StoreError::fenced(format!(
                "proposal {} cannot be accepted ({e}); the files hold the post-image",
                p.proposal_id
            )));
        }
        Err(_) => {}
    }
    let compensated: Option<String> = tx.query_row(
        "SELECT json_extract(record, '$.compensates') FROM proposals WHERE proposal_id = ?1",
        params![p.proposal_id],
        |r| r.get(0),
    )?;
    if let Some(orig) = compensated {
        let o = load_tx(tx, &orig)?;
        if let Ok(to) = o.status.on(TxEvent::RollBack) {
            let n = tx.execute(
                "UPDATE transactions SET status = ?1, version = version + 1
                 WHERE transaction_id = ?2 AND version = ?3",
                params![to.as_str(), orig, o.version],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!("transaction {orig} moved")));
            }
            let detail =
                serde_json::json!({"compensated_by": cur.transaction_id, "proposal_id": p.proposal_id})
                    .to_string();
            phase(tx, &orig, to.as_str(), actor, &detail, at)?;
            event(
                tx,
                &o.workspace_id,
                &orig,
                &format!("transaction.{}", to.as_str()),
                actor,
                Some(o.status.as_str()),
                Some(to.as_str()),
                &detail,
                at,
            )?;
        }
    }
    Ok(())
}

impl Store {
    /// Records a validation with its idempotency binding.
    pub async fn insert_validation(
        &self,
        v: ValidationRow,
        actor: &str,
        at: &str,
        binding: Binding,
    ) -> Result<(), StoreError> {
        let (actor, at) = (actor.to_string(), at.to_string());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO validations (validation_id, workspace_id, proposal_id, revision, expires_at, record)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![v.validation_id, v.workspace_id, v.proposal_id, v.revision, v.expires_at, v.record],
            )?;
            event(
                &tx,
                &v.workspace_id,
                &v.proposal_id,
                "patch.validated",
                &actor,
                None,
                None,
                &serde_json::json!({"validation_id": v.validation_id, "revision": v.revision}).to_string(),
                &at,
            )?;
            insert_binding_checked(&tx, &binding)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// One validation.
    pub async fn validation(&self, id: &str) -> Result<Option<ValidationRow>, StoreError> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {VALIDATION_COLUMNS} FROM validations WHERE validation_id = ?1"),
                params![id],
                validation_row,
            )
            .optional()?)
        })
        .await
    }

    /// A proposal's validations, oldest first.
    pub async fn validations_of(
        &self,
        proposal_id: &str,
    ) -> Result<Vec<ValidationRow>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {VALIDATION_COLUMNS} FROM validations WHERE proposal_id = ?1 ORDER BY seq"
            ))?;
            let rows = st
                .query_map(params![id], validation_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Opens a transaction in `prepared` as **one decision**: in a single `BEGIN IMMEDIATE`
    /// transaction it refuses while another transaction of the workspace is open, reads every
    /// fact the gates depend on ([`ApplyFacts`]: the proposal, the validation, the current
    /// revision's votes, security review and approval, the validated claims) as committed,
    /// lets `gate` decide on them (it returns the transaction's record, or the refusal), and
    /// only then inserts the row with its fence (the claims and paths it holds until it
    /// settles), phase row, event and binding. Nothing committed before this transaction is
    /// ignored; every write that could change a gate checks the fence in its own transaction.
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub async fn open_transaction(
        &self,
        t: TxRow,
        fence: Fence,
        gate: ApplyGate,
        actor: &str,
        detail: &str,
        at: &str,
        binding: Binding,
    ) -> Result<TxRow, StoreError> {
        let (actor, detail, at) = (actor.to_string(), detail.to_string(), at.to_string());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let open: Option<(String, String)> = tx
                .query_row(
                    &format!(
                        "SELECT transaction_id, status FROM transactions
                         WHERE workspace_id = ?1 AND status IN ({})",
                        TxState::open_sql_list()
                    ),
                    params![t.workspace_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((o, status)) = open {
                return Err(StoreError::Conflict(still_open(&o, &status)));
            }
            let facts = ApplyFacts {
                proposal: super::proposals::load(&tx, &t.proposal_id)?,
                validation: tx
                    .query_row(
                        &format!(
                            "SELECT {VALIDATION_COLUMNS} FROM validations WHERE validation_id = ?1"
                        ),
                        params![t.validation_id],
                        validation_row,
                    )
                    .optional()?
                    .ok_or_else(|| {
                        StoreError::Conflict(format!("validation {} does not exist", t.validation_id))
                    })?,
                review: super::reviews::evidence_in(&tx, &t.proposal_id, &t.revision)?,
                claims: fence
                    .claims
                    .iter()
                    .map(|id| {
                        Ok((
                            id.clone(),
                            tx.query_row(
                                &format!(
                                    "SELECT {} FROM claims WHERE claim_id = ?1",
                                    super::claims::CLAIM_COLUMNS
                                ),
                                params![id],
                                super::claims::row,
                            )
                            .optional()?,
                        ))
                    })
                    .collect::<Result<_, StoreError>>()?,
            };
            let record = gate(&facts).map_err(|r| StoreError::Precondition {
                field: r.field,
                message: r.message,
            })?;
            tx.execute(
                &format!(
                    "INSERT INTO transactions (transaction_id, workspace_id, proposal_id, revision, validation_id, status, version, record)
                     VALUES (?1, ?2, ?3, ?4, ?5, '{}', 1, ?6)",
                    TxState::Prepared.as_str()
                ),
                params![t.transaction_id, t.workspace_id, t.proposal_id, t.revision, t.validation_id, record],
            )?;
            for id in &fence.claims {
                tx.execute(
                    "INSERT OR IGNORE INTO transaction_claims (transaction_id, claim_id) VALUES (?1, ?2)",
                    params![t.transaction_id, id],
                )?;
            }
            for p in &fence.paths {
                tx.execute(
                    "INSERT OR IGNORE INTO transaction_paths (transaction_id, path) VALUES (?1, ?2)",
                    params![t.transaction_id, p],
                )?;
            }
            let prepared = TxState::Prepared.as_str();
            phase(&tx, &t.transaction_id, prepared, &actor, &detail, &at)?;
            event(
                &tx,
                &t.workspace_id,
                &t.transaction_id,
                &format!("transaction.{prepared}"),
                &actor,
                None,
                Some(prepared),
                &serde_json::json!({"proposal_id": t.proposal_id, "revision": t.revision}).to_string(),
                &at,
            )?;
            insert_binding_checked(&tx, &binding)?;
            let row = load_tx(&tx, &t.transaction_id)?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// Moves a transaction at `expected_version` by `ev` (the domain decides), replacing its
    /// record, with its phase row, event and (for a control action) idempotency binding;
    /// reaching `applied` accepts the proposal too and re-bases the claims it names.
    pub async fn advance_transaction(&self, m: Move) -> Result<TxRow, StoreError> {
        let Move {
            id,
            expected_version,
            ev,
            record,
            actor,
            detail,
            at,
            binding,
            rebase,
        } = m;
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let cur = load_tx(&tx, &id)?;
            if cur.version != expected_version {
                return Err(StoreError::Conflict(format!("transaction {id} moved")));
            }
            let next = cur.status.on(ev)?;
            let n = tx.execute(
                "UPDATE transactions SET status = ?1, version = version + 1, record = ?2
                 WHERE transaction_id = ?3 AND version = ?4",
                params![next.as_str(), record, id, expected_version],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!("transaction {id} moved")));
            }
            phase(&tx, &id, next.as_str(), &actor, &detail, &at)?;
            if let Some(b) = &binding {
                insert_binding_checked(&tx, b)?;
            }
            event(
                &tx,
                &cur.workspace_id,
                &id,
                &format!("transaction.{}", next.as_str()),
                &actor,
                Some(cur.status.as_str()),
                Some(next.as_str()),
                &detail,
                &at,
            )?;
            if next == TxState::Applied {
                // Re-based first: the proposal's end may then release some of them.
                for (claim_id, hash) in &rebase {
                    let n = tx.execute(
                        "UPDATE claims SET record = json_set(record, '$.base_hash', ?1), version = version + 1
                         WHERE claim_id = ?2",
                        params![hash, claim_id],
                    )?;
                    super::changed_one(n, || format!("claim {claim_id}"))?;
                    event(
                        &tx,
                        &cur.workspace_id,
                        claim_id,
                        "claim.rebased",
                        &actor,
                        None,
                        None,
                        &serde_json::json!({"base_hash": hash, "transaction_id": id}).to_string(),
                        &at,
                    )?;
                }
                landed(&tx, &cur, ev, &actor, &at)?;
            }
            let row = load_tx(&tx, &id)?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// One transaction.
    pub async fn transaction(&self, id: &str) -> Result<Option<TxRow>, StoreError> {
        let id = id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {TX_COLUMNS} FROM transactions WHERE transaction_id = ?1"),
                params![id],
                tx_row,
            )
            .optional()?)
        })
        .await
    }

    /// Transactions still `prepared` or `installing` (recovery's work list).
    pub async fn open_transactions(&self) -> Result<Vec<TxRow>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {TX_COLUMNS} FROM transactions WHERE status IN ({}) ORDER BY seq",
                TxState::open_sql_list()
            ))?;
            let rows = st.query_map([], tx_row)?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// A workspace's transactions, newest first, one page.
    pub async fn list_transactions(
        &self,
        workspace_id: &str,
        status: Option<TxState>,
        proposal_id: Option<String>,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TxRow>, StoreError> {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {TX_COLUMNS} FROM transactions
                 WHERE workspace_id = ?1 AND (?2 IS NULL OR status = ?2)
                   AND (?3 IS NULL OR proposal_id = ?3) AND seq < ?4
                 ORDER BY seq DESC LIMIT ?5"
            ))?;
            let rows = st
                .query_map(
                    params![
                        ws,
                        status.map(|s| s.as_str()),
                        proposal_id,
                        before.unwrap_or(i64::MAX),
                        limit
                    ],
                    tx_row,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// A transaction's phases, oldest first: (phase, actor, detail JSON, at).
    pub async fn transaction_phases(
        &self,
        id: &str,
    ) -> Result<Vec<(String, String, String, String)>, StoreError> {
        let id = id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT phase, actor, detail, at FROM transaction_phases WHERE transaction_id = ?1 ORDER BY seq",
            )?;
            let rows = st
                .query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
}
