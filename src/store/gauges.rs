//! Counts of live state by status, read at each `/metrics` scrape (one read transaction).

use super::{Store, StoreError};
use rusqlite::params;

/// How many rows of each kind are in each state right now.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gauges {
    pub candidates: Vec<(String, i64)>,
    pub proposals: Vec<(String, i64)>,
    pub transactions: Vec<(String, i64)>,
    /// Active claims not yet past their expiry.
    pub claims_active: i64,
    pub contentions_open: i64,
}

fn grouped(tx: &rusqlite::Transaction, sql: &str) -> Result<Vec<(String, i64)>, StoreError> {
    let mut st = tx.prepare(sql)?;
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

impl Store {
    /// The gauges as of `now` (unix seconds).
    pub async fn gauges(&self, now: i64) -> Result<Gauges, StoreError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            let g = Gauges {
                candidates: grouped(&tx, "SELECT state, COUNT(*) FROM candidates GROUP BY state")?,
                proposals: grouped(
                    &tx,
                    "SELECT status, COUNT(*) FROM proposals GROUP BY status",
                )?,
                transactions: grouped(
                    &tx,
                    "SELECT status, COUNT(*) FROM transactions GROUP BY status",
                )?,
                claims_active: tx.query_row(
                    "SELECT COUNT(*) FROM claims WHERE status = ?2 AND expires_at > ?1",
                    params![now, crate::domain::claim::ClaimState::Active.as_str()],
                    |r| r.get(0),
                )?,
                contentions_open: tx.query_row(
                    "SELECT COUNT(*) FROM contentions WHERE state = ?1",
                    params![crate::domain::claim::ContentionState::Open.as_str()],
                    |r| r.get(0),
                )?,
            };
            tx.commit()?;
            Ok(g)
        })
        .await
    }
}
