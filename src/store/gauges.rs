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

/// Jobs by workspace and state, and each workspace's queue.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JobGauges {
    /// (workspace, state, count) for the states that have jobs.
    pub by_state: Vec<(String, String, i64)>,
    /// (workspace, jobs waiting, seconds the oldest has waited) for workspaces with one.
    pub queues: Vec<(String, i64, i64)>,
}

impl Store {
    /// The job gauges as of `now` (unix seconds): one read transaction.
    pub async fn job_gauges(&self, now: i64) -> Result<JobGauges, StoreError> {
        let running = crate::verification::Status::Running.as_str();
        // A running job still waiting for its slot or engine (the job state `queued`).
        let queued = "queued";
        self.call(move |c| {
            let tx = c.transaction()?;
            let by_state = {
                let mut st = tx.prepare(
                    "SELECT j.workspace_id,
                            CASE WHEN v.status = ?1 AND v.queued = 1 THEN ?2 ELSE v.status END,
                            COUNT(*)
                     FROM jobs j JOIN verifications v ON v.verification_id = j.verification_id
                     GROUP BY 1, 2",
                )?;
                st.query_map(params![running, queued], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect::<Result<Vec<_>, _>>()?
            };
            let queues = {
                let mut st = tx.prepare(
                    "SELECT j.workspace_id, COUNT(*), MIN(j.queued_at)
                     FROM jobs j JOIN verifications v ON v.verification_id = j.verification_id
                     WHERE v.status = ?1 AND v.queued = 1
                     GROUP BY 1",
                )?;
                st.query_map(params![running], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .map(|(ws, n, oldest)| {
                    let at = time::OffsetDateTime::parse(
                        &oldest,
                        &time::format_description::well_known::Rfc3339,
                    )
                    .map_or(now, |t| t.unix_timestamp());
                    (ws, n, now.saturating_sub(at).max(0))
                })
                .collect()
            };
            tx.commit()?;
            Ok(JobGauges { by_state, queues })
        })
        .await
    }

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
