//! Pages of the list methods (`integration.list`, `patch.validation_list`,
//! `human.approval_list`): each ordered by its table's own sequence, so a cursor is a plain
//! sequence number and a page never repeats or skips a row that was there when it was read.

use super::applies::{VALIDATION_COLUMNS, ValidationRow, validation_row};
use super::reviews::{APPROVAL_COLUMNS, ApprovalRow, approval_row};
use super::{Store, StoreError};
use rusqlite::params;

/// What `integration.list` filters on (all optional).
#[derive(Debug, Clone, Default)]
pub struct CandidateFilter {
    pub state: Option<&'static str>,
    pub target_ref: Option<String>,
    pub request_state: Option<&'static str>,
}

impl Store {
    /// A workspace's candidates newest first (by insertion), before row `before` if given:
    /// (rowid, record).
    pub async fn candidates_page(
        &self,
        workspace_id: &str,
        filter: CandidateFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT rowid, record FROM candidates
                 WHERE workspace_id = ?1 AND (?2 IS NULL OR state = ?2)
                   AND (?3 IS NULL OR json_extract(record, '$.target_ref') = ?3)
                   AND (?4 IS NULL OR request_state = ?4)
                   AND (?5 IS NULL OR rowid < ?5)
                 ORDER BY rowid DESC LIMIT ?6",
            )?;
            let rows = st
                .query_map(
                    params![
                        ws,
                        filter.state,
                        filter.target_ref,
                        filter.request_state,
                        before,
                        limit
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// A proposal's validations oldest first, after `after`: (seq, row).
    pub async fn validations_page(
        &self,
        proposal_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, ValidationRow)>, StoreError> {
        let id = proposal_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {VALIDATION_COLUMNS}, seq FROM validations
                 WHERE proposal_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
            ))?;
            let rows = st
                .query_map(params![id, after, limit], |r| {
                    // The columns first (the row reader's order), then the sequence.
                    Ok((r.get(6)?, validation_row(r)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// A workspace's approvals oldest first, in `state` if given, after `after`: (seq, row).
    pub async fn approvals_page(
        &self,
        workspace_id: &str,
        state: Option<&'static str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, ApprovalRow)>, StoreError> {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS}, seq FROM approvals
                 WHERE workspace_id = ?1 AND (?2 IS NULL OR state = ?2) AND seq > ?3
                 ORDER BY seq LIMIT ?4"
            ))?;
            let rows = st
                .query_map(params![ws, state, after, limit], |r| {
                    Ok((r.get(11)?, approval_row(r)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
}
