//! Claims on resources, each change one `BEGIN IMMEDIATE` transaction: the conflict
//! check and the grant together (no check-then-insert race), the contention rows of a refusal
//! with the refusal, a per-resource fencing token that only grows, an event row with every
//! state change, and transitions that compare-and-set the prior state.

use super::candidates::insert_binding_checked;
use super::events::event;
use super::{Store, StoreError};
use crate::domain::claim::{
    ClaimEvent, ClaimMode, ClaimState, ContentionState, ReleaseOn, ResourceId, Span, overlap,
};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// A claim row as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRow {
    pub claim_id: String,
    pub workspace_id: String,
    pub resource_id: String,
    pub holder: String,
    pub mode: ClaimMode,
    pub status: ClaimState,
    pub fencing_token: i64,
    /// Unix seconds; at or after this instant the claim blocks nobody, swept or not.
    pub expires_at: i64,
    pub span: Option<Span>,
    pub version: i64,
    /// The rest of the wire object (task, session, rationale, base hash, times), as JSON.
    pub record: String,
    /// The row's position in the table (a paging cursor), when the query asked for it.
    pub seq: Option<i64>,
}

/// One checked state change of a claim.
#[derive(Debug, Clone)]
pub struct Transition {
    pub claim_id: String,
    pub expected_version: i64,
    pub event: ClaimEvent,
    pub actor: String,
    /// An admin acting on another's claim.
    pub forced: bool,
    pub reason: Option<String>,
    pub at: String,
    /// The idempotency binding of the call that asked for it, committed with the change.
    pub binding: Option<super::Binding>,
}

/// Which claims `list_claims` returns (every `None` matches all).
#[derive(Debug, Clone, Default)]
pub struct ClaimFilter {
    pub workspace_id: String,
    pub status: Option<ClaimState>,
    pub holder: Option<String>,
    pub resource_id: Option<String>,
    pub task_id: Option<String>,
    pub session_id: Option<String>,
    /// Only claims older than this cursor (a `seq` from a previous page).
    pub before: Option<i64>,
    pub limit: u32,
}

/// An acquire, as the engine resolved it (the resource parsed, its span found, the hash taken).
#[derive(Debug, Clone)]
pub struct Acquire {
    pub claim_id: String,
    pub workspace_id: String,
    pub resource: ResourceId,
    pub span: Option<Span>,
    pub holder: String,
    pub task_id: String,
    pub session_id: Option<String>,
    pub mode: ClaimMode,
    pub release_on: ReleaseOn,
    pub expires_at: i64,
    pub now: i64,
    pub now_rfc3339: String,
    pub record: String,
    /// The idempotency binding recorded with the grant (same transaction).
    pub binding: Option<super::Binding>,
}

/// What an acquire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    Granted(ClaimRow),
    /// Nothing was granted and no resource row was created; each challenged claim has one
    /// open contention for this requester (`opened` lists the ones this attempt created).
    Refused {
        challenged: Vec<ClaimRow>,
        opened: Vec<String>,
    },
}

pub(super) const CLAIM_COLUMNS: &str = "claim_id, workspace_id, resource_id, holder, mode, status, fencing_token, expires_at, span_start, span_end, version, record";
/// [`CLAIM_COLUMNS`] plus the row's position, for paging.
const CLAIM_COLUMNS_SEQ: &str = "claim_id, workspace_id, resource_id, holder, mode, status, fencing_token, expires_at, span_start, span_end, version, record, rowid";

pub(super) fn row(r: &rusqlite::Row) -> rusqlite::Result<ClaimRow> {
    let mode: String = r.get(4)?;
    let status: String = r.get(5)?;
    let bad = |what: &str, v: &str| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("{what} {v:?}").into(),
        )
    };
    let span = match (r.get::<_, Option<i64>>(8)?, r.get::<_, Option<i64>>(9)?) {
        (Some(s), Some(e)) => Some(Span {
            start: s as u64,
            end: e as u64,
        }),
        _ => None,
    };
    Ok(ClaimRow {
        claim_id: r.get(0)?,
        workspace_id: r.get(1)?,
        resource_id: r.get(2)?,
        holder: r.get(3)?,
        mode: ClaimMode::parse(&mode).ok_or_else(|| bad("mode", &mode))?,
        status: ClaimState::ALL
            .into_iter()
            .find(|s| s.as_str() == status)
            .ok_or_else(|| bad("status", &status))?,
        fencing_token: r.get(6)?,
        expires_at: r.get(7)?,
        span,
        version: r.get(10)?,
        record: r.get(11)?,
        seq: r.get::<_, i64>(12).ok(),
    })
}

/// Takes the resource's next fencing token (its counter only grows) for `claim_id`, with the
/// resource's event, inside the grant's transaction.
pub(super) fn issue_token(
    tx: &rusqlite::Transaction,
    workspace_id: &str,
    resource_id: &str,
    actor: &str,
    claim_id: &str,
    at: &str,
) -> rusqlite::Result<i64> {
    let token: i64 = tx.query_row(
        "UPDATE resources SET next_token = next_token + 1
         WHERE workspace_id = ?1 AND resource_id = ?2 RETURNING next_token - 1",
        params![workspace_id, resource_id],
        |r| r.get(0),
    )?;
    event(
        tx,
        workspace_id,
        resource_id,
        "resource.token_issued",
        actor,
        None,
        None,
        &serde_json::json!({"fencing_token": token, "claim_id": claim_id}).to_string(),
        at,
    )?;
    Ok(token)
}

/// The claim `id` inside a transaction, or `Conflict` when there is none.
pub(super) fn claim_by_id(tx: &rusqlite::Transaction, id: &str) -> Result<ClaimRow, StoreError> {
    tx.query_row(
        &format!("SELECT {CLAIM_COLUMNS} FROM claims WHERE claim_id = ?1"),
        params![id],
        row,
    )
    .optional()?
    .ok_or_else(|| StoreError::Conflict(format!("claim {id} does not exist")))
}

/// Inside a transaction: refused when `resource` overlaps a path an open apply of the
/// workspace is installing (whatever the modes, and even once the apply's own claims are past
/// their expiry: they are held).
pub(super) fn not_being_applied(
    tx: &rusqlite::Transaction,
    workspace_id: &str,
    resource: &ResourceId,
) -> Result<(), StoreError> {
    for (txn, path) in super::fences::held_paths(tx, workspace_id)? {
        let file = ResourceId::File { path: path.clone() };
        if overlap(resource, &file, None).is_some() {
            return Err(StoreError::fenced(format!(
                "{} overlaps {path:?}, which transaction {txn} is applying: no claim on it is granted until that transaction settles",
                resource.id()
            )));
        }
    }
    Ok(())
}

/// Inside a transaction: the active, unexpired claims of other holders on resources
/// overlapping `resource` whose modes conflict with `mode`.
pub(super) fn conflicting(
    tx: &rusqlite::Transaction,
    workspace_id: &str,
    resource: &ResourceId,
    span: Option<Span>,
    holder: &str,
    mode: ClaimMode,
    now: i64,
) -> Result<Vec<ClaimRow>, StoreError> {
    let blocking: Vec<ClaimRow> = {
        let mut st = tx.prepare(&format!(
            "SELECT {CLAIM_COLUMNS} FROM claims
             WHERE workspace_id = ?1 AND status IN ({}) AND expires_at > ?2",
            ClaimState::sql_list(ClaimState::blocks)
        ))?;
        st.query_map(params![workspace_id, now], row)?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut challenged = Vec::new();
    for other in blocking {
        if other.holder == holder || !other.mode.conflicts_with(mode) {
            continue;
        }
        let theirs = parsed(&other)?;
        if overlap(resource, &theirs, span.zip(other.span)).is_some() {
            challenged.push(other);
        }
    }
    Ok(challenged)
}

pub(super) fn parsed(c: &ClaimRow) -> Result<ResourceId, StoreError> {
    ResourceId::parse(&c.resource_id).map_err(|m| StoreError::Corrupt {
        id: c.claim_id.clone(),
        message: m,
    })
}

/// Inside a transaction: moves `current` to `next` by `ev` (a compare-and-set on its version),
/// with its event and the call's binding; answers the row as it is now.
#[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
pub(super) fn moved(
    tx: &rusqlite::Transaction,
    current: &ClaimRow,
    next: ClaimState,
    ev: ClaimEvent,
    actor: &str,
    payload: serde_json::Value,
    at: &str,
    binding: Option<&super::Binding>,
) -> Result<ClaimRow, StoreError> {
    let id = &current.claim_id;
    let changed = tx.execute(
        "UPDATE claims SET status = ?1, version = version + 1
         WHERE claim_id = ?2 AND version = ?3",
        params![next.as_str(), id, current.version],
    )?;
    if changed != 1 {
        return Err(StoreError::Conflict(format!(
            "claim {id} changed meanwhile"
        )));
    }
    event(
        tx,
        &current.workspace_id,
        id,
        &format!("claim.{}", ev.as_str()),
        actor,
        Some(current.status.as_str()),
        Some(next.as_str()),
        &payload.to_string(),
        at,
    )?;
    if let Some(b) = binding {
        insert_binding_checked(tx, b)?;
    }
    Ok(ClaimRow {
        status: next,
        version: current.version + 1,
        ..current.clone()
    })
}

impl Store {
    /// Grants `a` unless an active, unexpired claim of another holder on an overlapping
    /// resource conflicts with its mode; the check and the grant are one transaction.
    pub async fn acquire_claim(&self, a: Acquire) -> Result<Acquired, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            not_being_applied(&tx, &a.workspace_id, &a.resource)?;
            let challenged = conflicting(&tx, &a.workspace_id, &a.resource, a.span, &a.holder, a.mode, a.now)?;
            if !challenged.is_empty() {
                let mut opened = Vec::new();
                for other in &challenged {
                    let id = format!("cnt_{}", crate::ids::new_creation_key());
                    let inserted = tx.execute(
                        "INSERT INTO contentions
                            (contention_id, workspace_id, requester, challenged_claim, state, created_at, record)
                         VALUES (?1, ?2, ?3, ?4, ?7, ?5, ?6)
                         ON CONFLICT DO NOTHING",
                        params![
                            id,
                            a.workspace_id,
                            a.holder,
                            other.claim_id,
                            a.now_rfc3339,
                            serde_json::json!({
                                "resource_id": a.resource.id(),
                                "mode": a.mode.as_str(),
                                "request": serde_json::from_str::<serde_json::Value>(&a.record)
                                    .unwrap_or_default(),
                            })
                            .to_string(),
                            ContentionState::Open.as_str(),
                        ],
                    )?;
                    if inserted == 1 {
                        event(
                            &tx,
                            &a.workspace_id,
                            &id,
                            "contention.opened",
                            &a.holder,
                            None,
                            Some(ContentionState::Open.as_str()),
                            &serde_json::json!({"challenged_claim": other.claim_id}).to_string(),
                            &a.now_rfc3339,
                        )?;
                        opened.push(id);
                    }
                }
                tx.commit()?;
                return Ok(Acquired::Refused { challenged, opened });
            }
            let resource_id = a.resource.id();
            let created = tx.execute(
                "INSERT INTO resources (workspace_id, resource_id, next_token, created_at)
                 VALUES (?1, ?2, 1, ?3) ON CONFLICT DO NOTHING",
                params![a.workspace_id, resource_id, a.now_rfc3339],
            )?;
            if created == 1 {
                event(
                    &tx,
                    &a.workspace_id,
                    &resource_id,
                    "resource.created",
                    &a.holder,
                    None,
                    None,
                    "{}",
                    &a.now_rfc3339,
                )?;
            }
            let token = issue_token(
                &tx,
                &a.workspace_id,
                &resource_id,
                &a.holder,
                &a.claim_id,
                &a.now_rfc3339,
            )?;
            let granted = ClaimRow {
                claim_id: a.claim_id.clone(),
                workspace_id: a.workspace_id.clone(),
                resource_id: resource_id.clone(),
                holder: a.holder.clone(),
                mode: a.mode,
                status: ClaimState::Active,
                fencing_token: token,
                expires_at: a.expires_at,
                span: a.span,
                version: 1,
                record: a.record.clone(),
                seq: None,
            };
            tx.execute(
                &format!("INSERT INTO claims ({CLAIM_COLUMNS}, task_id, session_id, release_on) VALUES (?1, ?2, ?3, ?4, ?5, ?13, ?6, ?7, ?8, ?9, 1, ?10, ?11, ?12, ?14)"),
                params![
                    granted.claim_id,
                    granted.workspace_id,
                    granted.resource_id,
                    granted.holder,
                    granted.mode.as_str(),
                    granted.fencing_token,
                    granted.expires_at,
                    granted.span.map(|s| s.start as i64),
                    granted.span.map(|s| s.end as i64),
                    granted.record,
                    a.task_id,
                    a.session_id,
                    ClaimState::Active.as_str(),
                    a.release_on.as_str(),
                ],
            )?;
            if let Some(b) = &a.binding {
                super::candidates::insert_binding_checked(&tx, b)?;
            }
            event(
                &tx,
                &a.workspace_id,
                &granted.claim_id,
                "claim.granted",
                &a.holder,
                None,
                Some(ClaimState::Active.as_str()),
                &serde_json::json!({
                    "resource_id": resource_id,
                    "mode": a.mode.as_str(),
                    "fencing_token": token,
                })
                .to_string(),
                &a.now_rfc3339,
            )?;
            tx.commit()?;
            Ok(Acquired::Granted(granted))
        })
        .await
    }

    /// A claim by id.
    pub async fn claim(&self, claim_id: &str) -> Result<Option<ClaimRow>, StoreError> {
        let id = claim_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                &format!("SELECT {CLAIM_COLUMNS} FROM claims WHERE claim_id = ?1"),
                params![id],
                row,
            )
            .optional()?)
        })
        .await
    }

    /// Applies `event` to a claim that is still at `expected_version`, with its event row, in
    /// one transaction. A lost race (the version moved) is `Conflict`; an event the state does
    /// not allow is `IllegalTransition`.
    pub async fn transition_claim(
        &self,
        claim_id: &str,
        expected_version: i64,
        claim_event: ClaimEvent,
        actor: &str,
        forced: bool,
        at: &str,
    ) -> Result<ClaimRow, StoreError> {
        self.transition_claim_with(Transition {
            claim_id: claim_id.into(),
            expected_version,
            event: claim_event,
            actor: actor.into(),
            forced,
            reason: None,
            at: at.into(),
            binding: None,
        })
        .await
    }

    /// [`Store::transition_claim`] with a reason recorded in the event and an idempotency
    /// binding committed with the change.
    pub async fn transition_claim_with(&self, t: Transition) -> Result<ClaimRow, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let id = &t.claim_id;
            let current = claim_by_id(&tx, id)?;
            super::fences::claim_fence(&tx, id)?;
            if current.version != t.expected_version {
                return Err(StoreError::Conflict(format!(
                    "claim {id} is at version {}, not {}",
                    current.version, t.expected_version
                )));
            }
            let next = current.status.on(t.event)?;
            let row = moved(
                &tx,
                &current,
                next,
                t.event,
                &t.actor,
                serde_json::json!({"forced": t.forced, "reason": t.reason}),
                &t.at,
                t.binding.as_ref(),
            )?;
            tx.commit()?;
            Ok(row)
        })
        .await
    }

    /// Claims of a workspace, newest first, filtered, at most `limit`.
    pub async fn list_claims(&self, f: ClaimFilter) -> Result<Vec<ClaimRow>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {CLAIM_COLUMNS_SEQ} FROM claims WHERE workspace_id = ?1
                   AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR holder = ?3)
                   AND (?4 IS NULL OR resource_id = ?4) AND (?5 IS NULL OR task_id = ?5)
                   AND (?6 IS NULL OR session_id = ?6) AND (?8 IS NULL OR rowid < ?8)
                 ORDER BY rowid DESC LIMIT ?7"
            ))?;
            let rows = st
                .query_map(
                    params![
                        f.workspace_id,
                        f.status.map(|s| s.as_str()),
                        f.holder,
                        f.resource_id,
                        f.task_id,
                        f.session_id,
                        f.limit,
                        f.before
                    ],
                    row,
                )?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
        .await
    }

    /// Moves an active claim's expiry to `new_expiry` (never earlier: the caller computed it
    /// with [`crate::domain::claim::extended_expiry`]) and its record, compare-and-set on the
    /// version, with its event and binding; the token does not change.
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub async fn extend_claim(
        &self,
        claim_id: &str,
        expected_version: i64,
        new_expiry: i64,
        record: String,
        actor: &str,
        at: &str,
        binding: Option<super::Binding>,
    ) -> Result<ClaimRow, StoreError> {
        let (id, actor, at) = (claim_id.to_string(), actor.to_string(), at.to_string());
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let current = claim_by_id(&tx, &id)?;
            current.status.on(ClaimEvent::Extend)?;
            if let Some(b) = &binding {
                insert_binding_checked(&tx, b)?;
            }
            let expiry = new_expiry.max(current.expires_at);
            let changed = tx.execute(
                "UPDATE claims SET expires_at = ?1, record = ?2, version = version + 1
                 WHERE claim_id = ?3 AND version = ?4",
                params![expiry, record, id, expected_version],
            )?;
            if changed != 1 {
                return Err(StoreError::Conflict(format!(
                    "claim {id} changed meanwhile"
                )));
            }
            event(
                &tx,
                &current.workspace_id,
                &id,
                "claim.extend",
                &actor,
                Some(current.status.as_str()),
                Some(current.status.as_str()),
                &serde_json::json!({"expires_at": expiry}).to_string(),
                &at,
            )?;
            tx.commit()?;
            Ok(ClaimRow {
                expires_at: expiry,
                record,
                version: current.version + 1,
                ..current
            })
        })
        .await
    }

    /// Moves every claim past its expiry whose state allows it (the domain's `Expire`:
    /// active and suspended claims) to its next state, each a compare-and-set with its event,
    /// in one transaction; returns how many. A claim an open apply holds is left until that
    /// transaction settles (the next sweep expires it).
    pub async fn expire_due_claims(&self, now: i64, at: &str) -> Result<usize, StoreError> {
        let at = at.to_string();
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let due: Vec<ClaimRow> = {
                let mut st = tx.prepare(&format!(
                    "SELECT {CLAIM_COLUMNS} FROM claims
                     WHERE status IN ({}) AND expires_at <= ?1",
                    ClaimState::sql_list(|s| s.on(ClaimEvent::Expire).is_ok())
                ))?;
                st.query_map(params![now], row)?
                    .collect::<rusqlite::Result<_>>()?
            };
            let mut n = 0;
            for c in &due {
                if super::fences::claim_holder(&tx, &c.claim_id)?.is_some() {
                    continue;
                }
                let next = c.status.on(ClaimEvent::Expire)?;
                let changed = tx.execute(
                    "UPDATE claims SET status = ?1, version = version + 1
                     WHERE claim_id = ?2 AND version = ?3",
                    params![next.as_str(), c.claim_id, c.version],
                )?;
                if changed != 1 {
                    return Err(StoreError::Conflict(format!(
                        "claim {} changed meanwhile",
                        c.claim_id
                    )));
                }
                event(
                    &tx,
                    &c.workspace_id,
                    &c.claim_id,
                    &format!("claim.{}", ClaimEvent::Expire.as_str()),
                    "system:maintenance",
                    Some(c.status.as_str()),
                    Some(next.as_str()),
                    "{}",
                    &at,
                )?;
                n += 1;
            }
            tx.commit()?;
            Ok(n)
        })
        .await
    }

    /// Removes claims that ended (released, revoked, expired) and expired before `before`
    /// (Unix seconds), with their events, their contentions and those contentions' events,
    /// at most `limit` per call, in one transaction. Resource rows stay: their token counters
    /// must never start again.
    pub async fn purge_ended_claims(&self, before: i64, limit: u32) -> Result<usize, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ids: Vec<String> = {
                let mut st = tx.prepare(&format!(
                    "SELECT claim_id FROM claims
                         WHERE status IN ({}) AND expires_at < ?1
                         ORDER BY expires_at LIMIT ?2",
                    ClaimState::sql_list(ClaimState::is_terminal)
                ))?;
                st.query_map(params![before, limit], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?
            };
            for id in &ids {
                tx.execute(
                    "DELETE FROM events WHERE subject IN
                        (SELECT contention_id FROM contentions WHERE challenged_claim = ?1)",
                    params![id],
                )?;
                tx.execute(
                    "DELETE FROM contentions WHERE challenged_claim = ?1",
                    params![id],
                )?;
                tx.execute("DELETE FROM events WHERE subject = ?1", params![id])?;
                tx.execute("DELETE FROM claims WHERE claim_id = ?1", params![id])?;
            }
            tx.commit()?;
            Ok(ids.len())
        })
        .await
    }

    /// Replaces an active claim's record (a heartbeat), compare-and-set on the version. Not a
    /// state change, so no event.
    pub async fn touch_claim(
        &self,
        claim_id: &str,
        expected_version: i64,
        record: String,
        binding: Option<super::Binding>,
    ) -> Result<i64, StoreError> {
        let id = claim_id.to_string();
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx.execute(
                "UPDATE claims SET record = ?1, version = version + 1
                 WHERE claim_id = ?2 AND version = ?3 AND status = ?4",
                params![record, id, expected_version, ClaimState::Active.as_str()],
            )?;
            if changed != 1 {
                return Err(StoreError::Conflict(format!(
                    "claim {id} changed or is no longer active"
                )));
            }
            if let Some(b) = &binding {
                insert_binding_checked(&tx, b)?;
            }
            tx.commit()?;
            Ok(expected_version + 1)
        })
        .await
    }

    /// A workspace's events in order after `since` (a sequence number), filtered, at most
    /// `limit`: (seq, subject, kind, actor, prior, new, payload, at).
    #[allow(clippy::type_complexity)]
    pub async fn list_events(
        &self,
        workspace_id: &str,
        subject: Option<String>,
        kind: Option<String>,
        since: i64,
        limit: u32,
    ) -> Result<
        Vec<(
            i64,
            String,
            String,
            String,
            Option<String>,
            Option<String>,
            String,
            String,
        )>,
        StoreError,
    > {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT seq, subject, kind, actor, prior, new, payload, at FROM events
                 WHERE workspace_id = ?1 AND seq > ?2 AND (?3 IS NULL OR subject = ?3)
                   AND (?4 IS NULL OR kind = ?4)
                 ORDER BY seq LIMIT ?5",
            )?;
            let rows = st
                .query_map(params![ws, since, subject, kind, limit], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
        .await
    }

    /// The newest event's sequence number in a workspace (0 when it has none).
    pub async fn last_event_seq(&self, workspace_id: &str) -> Result<i64, StoreError> {
        let ws = workspace_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT COALESCE(MAX(seq), 0) FROM events WHERE workspace_id = ?1",
                params![ws],
                |r| r.get(0),
            )?)
        })
        .await
    }

    /// Events about `subject`, oldest first: (kind, actor, prior, new).
    pub async fn events_of(
        &self,
        workspace_id: &str,
        subject: &str,
    ) -> Result<Vec<(String, String, Option<String>, Option<String>)>, StoreError> {
        let (ws, subject) = (workspace_id.to_string(), subject.to_string());
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT kind, actor, prior, new FROM events
                 WHERE workspace_id = ?1 AND subject = ?2 ORDER BY seq",
            )?;
            let rows = st
                .query_map(params![ws, subject], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
        .await
    }
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
