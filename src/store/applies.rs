//! Validations and apply transactions (issue 13). A validation is an immutable record (stages,
//! pre-images, post-images) with an expiry; a transaction moves through its phases by checked
//! compare-and-set, each move with its phase row and event in the same transaction, and its
//! final move to `applied` accepts the proposal in that same transaction.

use super::candidates::insert_binding_checked;
use super::claims::event;
use super::{Binding, Store, StoreError};
use crate::domain::proposal::{ProposalEvent, ProposalState};
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

const VALIDATION_COLUMNS: &str =
    "validation_id, workspace_id, proposal_id, revision, expires_at, record";

fn validation_row(r: &rusqlite::Row) -> rusqlite::Result<ValidationRow> {
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

    /// Opens a transaction in `prepared` (its intent committed before any file is staged),
    /// with its phase row, event and binding. Refused while another transaction of the
    /// workspace is open.
    pub async fn open_transaction(
        &self,
        t: TxRow,
        actor: &str,
        detail: &str,
        at: &str,
        binding: Binding,
    ) -> Result<TxRow, StoreError> {
        let (actor, detail, at) = (actor.to_string(), detail.to_string(), at.to_string());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let open: Option<String> = tx
                .query_row(
                    "SELECT transaction_id FROM transactions
                     WHERE workspace_id = ?1 AND status IN ('prepared','installing')",
                    params![t.workspace_id],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(o) = open {
                return Err(StoreError::Conflict(format!(
                    "transaction {o} of this workspace is still open"
                )));
            }
            tx.execute(
                "INSERT INTO transactions (transaction_id, workspace_id, proposal_id, revision, validation_id, status, version, record)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'prepared', 1, ?6)",
                params![t.transaction_id, t.workspace_id, t.proposal_id, t.revision, t.validation_id, t.record],
            )?;
            phase(&tx, &t.transaction_id, "prepared", &actor, &detail, &at)?;
            event(
                &tx,
                &t.workspace_id,
                &t.transaction_id,
                "transaction.prepared",
                &actor,
                None,
                Some("prepared"),
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
    /// reaching `applied` accepts the proposal too.
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub async fn advance_transaction(
        &self,
        id: &str,
        expected_version: i64,
        ev: TxEvent,
        record: String,
        actor: &str,
        detail: &str,
        at: &str,
        binding: Option<Binding>,
    ) -> Result<TxRow, StoreError> {
        let (id, actor, detail, at) = (
            id.to_string(),
            actor.to_string(),
            detail.to_string(),
            at.to_string(),
        );
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
                let (status, version): (String, i64) = tx.query_row(
                    "SELECT status, version FROM proposals WHERE proposal_id = ?1",
                    params![cur.proposal_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let from = ProposalState::ALL
                    .into_iter()
                    .find(|s| s.as_str() == status)
                    .ok_or_else(|| StoreError::Corrupt {
                        id: cur.proposal_id.clone(),
                        message: format!("status {status:?}"),
                    })?;
                let to = from.on(ProposalEvent::Accept)?;
                let n = tx.execute(
                    "UPDATE proposals SET status = ?1, version = version + 1
                     WHERE proposal_id = ?2 AND version = ?3",
                    params![to.as_str(), cur.proposal_id, version],
                )?;
                if n != 1 {
                    return Err(StoreError::Conflict(format!(
                        "proposal {} moved",
                        cur.proposal_id
                    )));
                }
                event(
                    &tx,
                    &cur.workspace_id,
                    &cur.proposal_id,
                    "proposal.accept",
                    &actor,
                    Some(from.as_str()),
                    Some(to.as_str()),
                    &serde_json::json!({"transaction_id": id}).to_string(),
                    &at,
                )?;
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
                "SELECT {TX_COLUMNS} FROM transactions WHERE status IN ('prepared','installing') ORDER BY seq"
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
