//! Contentions: the refused acquires a claim challenged, listed and resolved
//! exactly once, each resolution one transaction with its events.

use super::claims::{CLAIM_COLUMNS, ClaimRow, row};
use super::events::event;
use super::{Store, StoreError};
use crate::domain::claim::ContentionState;
use crate::domain::claim::{ClaimEvent, ClaimMode, ClaimState, ResourceId, overlap};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// A contention row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentionRow {
    pub contention_id: String,
    pub requester: String,
    pub challenged_claim: String,
    pub state: ContentionState,
    pub created_at: String,
    /// `{resource_id, mode, request, resolution?, reason?, resolved_by?, resolved_at?}`.
    pub record: serde_json::Value,
    /// The row's position (a paging cursor).
    pub seq: i64,
}

fn contention_row(r: &rusqlite::Row) -> rusqlite::Result<ContentionRow> {
    let record: String = r.get(5)?;
    let state: String = r.get(3)?;
    Ok(ContentionRow {
        contention_id: r.get(0)?,
        requester: r.get(1)?,
        challenged_claim: r.get(2)?,
        state: ContentionState::parse(&state).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                3,
                rusqlite::types::Type::Text,
                format!("unknown contention state {state:?}").into(),
            )
        })?,
        created_at: r.get(4)?,
        record: serde_json::from_str(&record).unwrap_or_default(),
        seq: r.get(6)?,
    })
}

/// How a contention is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    KeepOwner,
    RejectContender,
    /// The challenged claim goes to the contender, with a new fencing token and the
    /// contender's record (task, session, base hash taken now).
    Transfer {
        record: String,
        task_id: String,
        session_id: Option<String>,
    },
    /// The challenged claim's lease grows by `ttl_seconds` (never shorter).
    ExtendLease {
        ttl_seconds: i64,
    },
}

impl Resolution {
    pub fn as_str(&self) -> &'static str {
        match self {
            Resolution::KeepOwner => "keep_owner",
            Resolution::RejectContender => "reject_contender",
            Resolution::Transfer { .. } => "transfer",
            Resolution::ExtendLease { .. } => "extend_lease",
        }
    }
}

/// A resolution to apply.
#[derive(Debug, Clone)]
pub struct Resolve {
    pub workspace_id: String,
    pub contention_id: String,
    pub resolution: Resolution,
    pub reason: String,
    pub actor: String,
    pub now: i64,
    pub at: String,
    pub binding: Option<super::Binding>,
}

/// What a resolution changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub contention_id: String,
    /// The claim it extended or transferred.
    pub claim_id: Option<String>,
}

impl Store {
    /// Contentions of a workspace, oldest first, filtered.
    pub async fn list_contentions(
        &self,
        workspace_id: &str,
        state: Option<ContentionState>,
        resource_id: Option<String>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<ContentionRow>, StoreError> {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT contention_id, requester, challenged_claim, state, created_at, record, rowid
                 FROM contentions WHERE workspace_id = ?1 AND (?2 IS NULL OR state = ?2)
                   AND (?3 IS NULL OR json_extract(record, '$.resource_id') = ?3)
                   AND rowid > ?4
                 ORDER BY rowid LIMIT ?5",
            )?;
            let rows = st
                .query_map(
                    params![
                        ws,
                        state.map(ContentionState::as_str),
                        resource_id,
                        after,
                        limit
                    ],
                    contention_row,
                )?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
        .await
    }

    /// One contention of a workspace.
    pub async fn contention(
        &self,
        workspace_id: &str,
        contention_id: &str,
    ) -> Result<Option<ContentionRow>, StoreError> {
        let (ws, id) = (workspace_id.to_string(), contention_id.to_string());
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT contention_id, requester, challenged_claim, state, created_at, record, rowid
                 FROM contentions WHERE contention_id = ?1 AND workspace_id = ?2",
                params![id, ws],
                contention_row,
            )
            .optional()?)
        })
        .await
    }

    /// Resolves an open contention, in one transaction with everything it changes and its
    /// events: exactly one of concurrent resolvers wins (the others get `Conflict`).
    pub async fn resolve_contention(&self, r: Resolve) -> Result<Resolved, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let cont = tx
                .query_row(
                    "SELECT contention_id, requester, challenged_claim, state, created_at, record, rowid
                     FROM contentions WHERE contention_id = ?1 AND workspace_id = ?2",
                    params![r.contention_id, r.workspace_id],
                    contention_row,
                )
                .optional()?
                .ok_or_else(|| StoreError::Conflict(format!("contention {} does not exist", r.contention_id)))?;
            if cont.state != ContentionState::Open {
                return Err(StoreError::Conflict(format!(
                    "contention {} is already resolved",
                    r.contention_id
                )));
            }
            let claim = tx.query_row(
                &format!("SELECT {CLAIM_COLUMNS} FROM claims WHERE claim_id = ?1"),
                params![cont.challenged_claim],
                row,
            )?;
            let mut changed_claim = None;
            let resolution_name = r.resolution.as_str();
            match r.resolution {
                Resolution::KeepOwner | Resolution::RejectContender => {}
                Resolution::ExtendLease { ttl_seconds } => {
                    claim.status.on(ClaimEvent::Extend)?;
                    let expiry = claim.expires_at.max(r.now.saturating_add(ttl_seconds));
                    let n = tx.execute(
                        "UPDATE claims SET expires_at = ?1, version = version + 1 WHERE claim_id = ?2 AND version = ?3",
                        params![expiry, claim.claim_id, claim.version],
                    )?;
                    super::changed_one(n, || format!("claim {}", claim.claim_id))?;
                    event(&tx, &r.workspace_id, &claim.claim_id, "claim.extend", &r.actor,
                        Some(claim.status.as_str()), Some(claim.status.as_str()),
                        &serde_json::json!({"expires_at": expiry, "contention": cont.contention_id}).to_string(), &r.at)?;
                    changed_claim = Some(claim.claim_id.clone());
                }
                Resolution::Transfer {
                    record,
                    task_id,
                    session_id,
                } => {
                    claim.status.on(ClaimEvent::Transfer)?;
                    super::fences::claim_fence(&tx, &claim.claim_id)?;
                    if claim.expires_at <= r.now {
                        return Err(StoreError::Conflict("the challenged claim has expired; nothing to transfer".into()));
                    }
                    let mode_str = cont.record["mode"].as_str().unwrap_or_default().to_string();
                    let mode = ClaimMode::ALL
                        .into_iter()
                        .find(|m| m.as_str() == mode_str)
                        .ok_or_else(|| StoreError::Corrupt { id: cont.contention_id.clone(), message: format!("mode {mode_str:?}") })?;
                    let resource = ResourceId::parse(&claim.resource_id)
                        .map_err(|m| StoreError::Corrupt { id: claim.claim_id.clone(), message: m })?;
                    // Re-check: the new holder must not conflict with anyone else.
                    let others: Vec<ClaimRow> = {
                        let mut st = tx.prepare(&format!(
                            "SELECT {CLAIM_COLUMNS} FROM claims
                             WHERE workspace_id = ?1 AND status IN ({}) AND expires_at > ?2 AND claim_id <> ?3",
                            ClaimState::sql_list(ClaimState::blocks)
                        ))?;
                        st.query_map(params![r.workspace_id, r.now, claim.claim_id], row)?
                            .collect::<rusqlite::Result<_>>()?
                    };
                    for o in &others {
                        if o.holder == cont.requester || !o.mode.conflicts_with(mode) {
                            continue;
                        }
                        let theirs = ResourceId::parse(&o.resource_id)
                            .map_err(|m| StoreError::Corrupt { id: o.claim_id.clone(), message: m })?;
                        if overlap(&resource, &theirs, claim.span.zip(o.span)).is_some() {
                            return Err(StoreError::Conflict(format!(
                                "the transfer would conflict with {} ({} by {})",
                                o.claim_id, o.mode.as_str(), o.holder
                            )));
                        }
                    }
                    let token = super::claims::issue_token(
                        &tx,
                        &r.workspace_id,
                        &claim.resource_id,
                        &r.actor,
                        &claim.claim_id,
                        &r.at,
                    )?;
                    let n = tx.execute(
                        "UPDATE claims SET holder = ?1, mode = ?2, fencing_token = ?3, record = ?4,
                            task_id = ?5, session_id = ?6, version = version + 1
                         WHERE claim_id = ?7 AND version = ?8",
                        params![cont.requester, mode.as_str(), token, record, task_id, session_id, claim.claim_id, claim.version],
                    )?;
                    super::changed_one(n, || format!("claim {}", claim.claim_id))?;
                    event(&tx, &r.workspace_id, &claim.claim_id, "claim.transfer", &r.actor,
                        Some(claim.status.as_str()), Some(claim.status.as_str()),
                        &serde_json::json!({"from": claim.holder, "to": cont.requester, "fencing_token": token,
                                            "contention": cont.contention_id}).to_string(), &r.at)?;
                    changed_claim = Some(claim.claim_id.clone());
                }
            }
            let n = tx.execute(
                "UPDATE contentions SET state = ?6,
                    record = json_set(record, '$.resolution', ?1, '$.reason', ?2, '$.resolved_by', ?3, '$.resolved_at', ?4)
                 WHERE contention_id = ?5 AND state = ?7",
                params![resolution_name, r.reason, r.actor, r.at, cont.contention_id,
                        ContentionState::Resolved.as_str(), ContentionState::Open.as_str()],
            )?;
            super::changed_one(n, || format!("contention {}", cont.contention_id))?;
            event(&tx, &r.workspace_id, &cont.contention_id, "contention.resolve", &r.actor,
                Some(ContentionState::Open.as_str()), Some(ContentionState::Resolved.as_str()),
                &serde_json::json!({"resolution": resolution_name, "reason": r.reason}).to_string(), &r.at)?;
            if let Some(b) = &r.binding {
                super::candidates::insert_binding_checked(&tx, b)?;
            }
            tx.commit()?;
            Ok(Resolved { contention_id: cont.contention_id, claim_id: changed_claim })
        })
        .await
    }
}
