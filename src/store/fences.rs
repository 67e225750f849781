//! The fences the apply transactions put on what they rely on: while a transaction is open,
//! its proposal, its claims and its paths do not change. Checked inside the transaction of
//! every change to them (a leaf every store module that changes them calls).

use super::StoreError;
use crate::domain::transaction::TxState;
use rusqlite::{OptionalExtension, params};

/// Inside a transaction: refuses a change to proposal `proposal_id` (its patch, state or
/// evidence) while a transaction applying it is open.
pub(super) fn proposal_fence(
    tx: &rusqlite::Transaction,
    proposal_id: &str,
) -> Result<(), StoreError> {
    let open: Option<String> = tx
        .query_row(
            &format!(
                "SELECT transaction_id FROM transactions WHERE proposal_id = ?1 AND status IN ({})",
                TxState::open_sql_list()
            ),
            params![proposal_id],
            |r| r.get(0),
        )
        .optional()?;
    match open {
        Some(t) => Err(StoreError::fenced(format!(
            "transaction {t} is applying proposal {proposal_id}: its patch, state, votes, reviews and approvals cannot change until it settles"
        ))),
        None => Ok(()),
    }
}

/// Inside a transaction: the open transaction holding claim `claim_id`, if any.
pub(super) fn claim_holder(
    tx: &rusqlite::Transaction,
    claim_id: &str,
) -> Result<Option<String>, StoreError> {
    Ok(tx
        .query_row(
            &format!(
                "SELECT t.transaction_id FROM transaction_claims f
                 JOIN transactions t ON t.transaction_id = f.transaction_id
                 WHERE f.claim_id = ?1 AND t.status IN ({})",
                TxState::open_sql_list()
            ),
            params![claim_id],
            |r| r.get(0),
        )
        .optional()?)
}

/// Inside a transaction: refuses a change to claim `claim_id` while an open transaction
/// holds it.
pub(super) fn claim_fence(tx: &rusqlite::Transaction, claim_id: &str) -> Result<(), StoreError> {
    match claim_holder(tx, claim_id)? {
        Some(t) => Err(StoreError::fenced(format!(
            "claim {claim_id} is held by transaction {t}, which is applying under it: it cannot be released, revoked, suspended, transferred or expired until that transaction settles"
        ))),
        None => Ok(()),
    }
}

/// Inside a transaction: (transaction, path) for every path an open transaction of
/// `workspace_id` holds.
pub(super) fn held_paths(
    tx: &rusqlite::Transaction,
    workspace_id: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let mut st = tx.prepare(&format!(
        "SELECT t.transaction_id, f.path FROM transaction_paths f
         JOIN transactions t ON t.transaction_id = f.transaction_id
         WHERE t.workspace_id = ?1 AND t.status IN ({})",
        TxState::open_sql_list()
    ))?;
    let rows = st
        .query_map(params![workspace_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
