//! `claim.acquire`, `claim.extend`, `claim.heartbeat`, `claim.release`, `claim.show` and
//! `claim.list` on governed workspaces. The holder is always the authenticated
//! actor. A claim whose `expires_at` has passed shows (and counts) as `expired` whether or not
//! the maintenance pass has swept it.

use super::requests::{check_text, next_cursor, page_limit, parse_cursor};
use crate::config::Permission;
use crate::domain::claim::{ClaimEvent, ClaimState, ResourceId, extended_expiry};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Claims;
use crate::engine::idempotency::Prologue;
use crate::limits;
use crate::store::StoreError;
use crate::store::claims::{Acquire, Acquired, ClaimRow, Transition};
use crate::wire::{
    ClaimAcquireParams, ClaimAdminParams, ClaimExtendParams, ClaimKeyedParams, ClaimListParams,
    ClaimListReply, ClaimParams, ClaimReleaseReply, ClaimReply, ClaimView, EventListParams,
};
use serde_json::Value;

/// The private part of a claim row's record: what the wire object carries beyond the columns.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    pub(super) task_id: String,
    pub(super) session_id: Option<String>,
    pub(super) renewable: bool,
    pub(super) resume_policy: crate::wire::ResumePolicy,
    #[serde(default)]
    pub(super) release_on: crate::domain::claim::ReleaseOn,
    pub(super) rationale: Option<String>,
    pub(super) base_hash: Option<String>,
    pub(super) ttl_seconds: u64,
    pub(super) acquired_at: String,
    pub(super) heartbeat_at: String,
}

/// A claim after [`Claims::move_claim`]: as it now is, and whether this call moved it.
pub(super) struct MovedClaim {
    pub(super) claim: ClaimRow,
    pub(super) changed: bool,
}

/// Runs `attempt` (a read of a claim, a judgement, and a write checked against the version
/// read) until its write is not refused for a version only this server read: another change
/// got in between, so the claim is read and judged again, at most
/// [`limits::CLAIM_MOVE_ATTEMPTS`] times; the last refusal is answered `conflict`.
async fn on_fresh_read<T, F, Fut>(attempt: F) -> Result<T, ServiceError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Result<T, StoreError>, ServiceError>>,
{
    let mut n = 1;
    loop {
        match attempt().await? {
            Ok(t) => return Ok(t),
            Err(StoreError::Conflict(_)) if n < limits::CLAIM_MOVE_ATTEMPTS => n += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

fn check_ttl(ttl: u64) -> Result<(), ServiceError> {
    if !limits::CLAIM_TTL_SECONDS.contains(&ttl) {
        return Err(ServiceError::invalid_field(
            "ttl_seconds",
            format!(
                "ttl_seconds is {ttl}; it must be between {} and {}",
                limits::CLAIM_TTL_SECONDS.start(),
                limits::CLAIM_TTL_SECONDS.end()
            ),
        ));
    }
    Ok(())
}

impl Claims {
    /// The answer a replayed claim call gives: the claim its first call bound, as it is now.
    async fn replayed_claim(
        &self,
        workspace_id: &str,
        claim_id: &str,
    ) -> Result<ClaimReply, ServiceError> {
        let c = self.claim_in(workspace_id, claim_id).await?;
        Ok(ClaimReply {
            claim: self.claim_view(&c)?,
        })
    }

    /// The claim as the API shows it: `expired` once its time passed, swept or not.
    pub(super) fn claim_view(&self, c: &ClaimRow) -> Result<ClaimView, ServiceError> {
        let r: Record = serde_json::from_str(&c.record)
            .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
        let now = self.ctx.clock.now().unix_timestamp();
        let status = if c.status == ClaimState::Active && c.expires_at <= now {
            ClaimState::Expired
        } else {
            c.status
        };
        let resource = ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
        let (kind, symbol) = match &resource {
            ResourceId::File { .. } => ("file", None),
            ResourceId::Directory { .. } => ("directory", None),
            ResourceId::Symbol { name, .. } => ("symbol", Some(name.clone())),
            ResourceId::Other { kind, .. } => (kind.as_str(), None),
        };
        let expires = time::OffsetDateTime::from_unix_timestamp(c.expires_at)
            .map(crate::ids::rfc3339)
            .unwrap_or_default();
        let view = crate::wire::ClaimView {
            claim_id: c.claim_id.clone(),
            workspace_id: c.workspace_id.clone(),
            resource_id: c.resource_id.clone(),
            resource: crate::wire::ClaimResource {
                kind: kind.to_string(),
                path: resource.path().map(str::to_string),
                symbol,
                span: c.span,
            },
            mode: c.mode,
            holder: c.holder.clone(),
            task_id: r.task_id,
            session_id: r.session_id,
            fencing_token: c.fencing_token,
            status,
            base_hash: r.base_hash,
            renewable: r.renewable,
            resume_policy: r.resume_policy,
            release_on: r.release_on,
            rationale: r.rationale,
            acquired_at: r.acquired_at,
            heartbeat_at: r.heartbeat_at,
            expires_at: expires,
            version: c.version,
        };
        Ok(view)
    }

    pub(super) async fn claim_in(
        &self,
        workspace_id: &str,
        claim_id: &str,
    ) -> Result<ClaimRow, ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "claim {claim_id:?} not found in workspace {workspace_id:?}"
            ))
        };
        let c = self
            .ctx
            .data
            .store
            .claim(claim_id)
            .await?
            .ok_or_else(not_found)?;
        if c.workspace_id != workspace_id {
            return Err(not_found());
        }
        Ok(c)
    }

    /// Moves a claim as `judge` decides from a fresh read of it. The version the move is
    /// checked against is the one this read saw, not one a client sent; so when the claim
    /// moved between the read and the write (another request, or an apply re-basing it as it
    /// settled), the claim is read and judged again, at most [`limits::CLAIM_MOVE_ATTEMPTS`]
    /// times, and the caller never sees a version it did not ask about. `judge` answering
    /// `None` leaves the claim as it is (`changed: false`).
    pub(super) async fn move_claim<F>(
        &self,
        workspace_id: &str,
        claim_id: &str,
        judge: F,
    ) -> Result<MovedClaim, ServiceError>
    where
        F: Fn(&ClaimRow) -> Result<Option<Transition>, ServiceError>,
    {
        on_fresh_read(|| async {
            let c = self.claim_in(workspace_id, claim_id).await?;
            let Some(t) = judge(&c)? else {
                return Ok(Ok(MovedClaim {
                    claim: c,
                    changed: false,
                }));
            };
            Ok(self
                .ctx
                .data
                .store
                .transition_claim_with(t)
                .await
                .map(|claim| MovedClaim {
                    claim,
                    changed: true,
                }))
        })
        .await
    }

    /// `claim.acquire`.
    pub async fn claim_acquire(
        &self,
        actor: &Actor,
        p: ClaimAcquireParams,
    ) -> Result<ClaimReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Propose)?;
        let release_on = p.release_on.unwrap_or(
            self.ctx
                .authorize(actor, &p.workspace_id, Permission::Propose)?
                .policy
                .claims_release_on,
        );
        check_text("task_id", &p.task_id, true)?;
        for (field, v) in [("session_id", &p.session_id), ("rationale", &p.rationale)] {
            if let Some(v) = v {
                check_text(field, v, true)?;
            }
        }
        let ttl = p.ttl_seconds.unwrap_or(limits::DEFAULT_CLAIM_TTL_SECONDS);
        check_ttl(ttl)?;
        let resource = ResourceId::parse(&p.resource_id)
            .map_err(|m| ServiceError::invalid_field("resource_id", m))?;
        let actor_key = actor.key();
        // The digest covers the defaults as resolved, so a later change of a default does not
        // turn a replay into another request.
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.acquire",
                &p.idempotency_key,
                &ClaimAcquireParams {
                    idempotency_key: String::new(),
                    ttl_seconds: Some(ttl),
                    release_on: Some(release_on),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(claim_id) => {
                let c = self.claim_in(&p.workspace_id, &claim_id).await?;
                return Ok(ClaimReply {
                    claim: self.claim_view(&c)?,
                });
            }
            Prologue::Fresh(k) => k,
        };
        // A symbol's span is resolved in the worktree now (an unresolvable symbol is refused);
        // write and exclusive claims carry the resource's hash at grant.
        let needs_inspection = p.mode.writes() || matches!(resource, ResourceId::Symbol { .. });
        let (current, span) = if needs_inspection {
            Self::inspect(worktree, resource.clone())
                .await
                .map_err(|e| e.refusal("resource_id"))?
        } else {
            (None, None)
        };
        let base_hash = if p.mode.writes() {
            let current = current.unwrap_or_default();
            if let Some(given) = &p.base_hash
                && *given != current
            {
                return Err(ServiceError::precondition_field(
                    "base_hash",
                    format!(
                        "base_hash {given:?} is stale: the resource's current hash is {current:?}"
                    ),
                ));
            }
            Some(current)
        } else {
            None
        };
        let now = self.ctx.clock.now();
        let claim_id = format!("clm_{}", crate::ids::new_creation_key());
        let record = Record {
            task_id: p.task_id.clone(),
            session_id: p.session_id.clone(),
            renewable: p.renewable.unwrap_or(true),
            resume_policy: p.resume_policy.unwrap_or_default(),
            release_on,
            rationale: p.rationale.clone(),
            base_hash,
            ttl_seconds: ttl,
            acquired_at: crate::ids::rfc3339(now),
            heartbeat_at: crate::ids::rfc3339(now),
        };
        let acquired = self
            .ctx
            .data
            .store
            .acquire_claim(Acquire {
                claim_id: claim_id.clone(),
                workspace_id: p.workspace_id.clone(),
                resource,
                span,
                holder: actor_key.clone(),
                task_id: p.task_id.clone(),
                session_id: p.session_id.clone(),
                mode: p.mode,
                release_on,
                expires_at: now.unix_timestamp() + ttl as i64,
                now: now.unix_timestamp(),
                now_rfc3339: crate::ids::rfc3339(now),
                record: serde_json::to_string(&record).expect("a claim record serializes"),
                binding: Some(k.binding_for(&p.workspace_id, &actor_key, &claim_id)),
            })
            .await?;
        match acquired {
            Acquired::Granted(c) => Ok(ClaimReply {
                claim: self.claim_view(&c)?,
            }),
            Acquired::Refused { challenged, .. } => {
                let held: Vec<String> = challenged
                    .iter()
                    .map(|c| format!("{} ({} by {})", c.claim_id, c.mode.as_str(), c.holder))
                    .collect();
                Err(ServiceError::Conflict(format!(
                    "{} conflicts with {}; a contention was recorded",
                    p.mode.as_str(),
                    held.join(", ")
                )))
            }
        }
    }

    /// `claim.extend`: holder only, renewable, active and unexpired; never shortens.
    pub async fn claim_extend(
        &self,
        actor: &Actor,
        p: ClaimExtendParams,
    ) -> Result<ClaimReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::Propose)?;
        check_ttl(p.ttl_seconds)?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.extend",
                &p.idempotency_key,
                &ClaimExtendParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => return self.replayed_claim(&p.workspace_id, &id).await,
            Prologue::Fresh(k) => k,
        };
        let c = on_fresh_read(|| async {
            let c = self.claim_in(&p.workspace_id, &p.claim_id).await?;
            if c.holder != actor.key() {
                return Err(ServiceError::PermissionDenied(
                    "only the holder extends a claim".into(),
                ));
            }
            let mut r: Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
            if !r.renewable {
                return Err(ServiceError::precondition("the claim is not renewable"));
            }
            let now = self.ctx.clock.now();
            if c.status != ClaimState::Active || c.expires_at <= now.unix_timestamp() {
                return Err(ServiceError::precondition(format!(
                    "only an active, unexpired claim is extended; this one is {}",
                    if c.status == ClaimState::Active {
                        "expired"
                    } else {
                        c.status.as_str()
                    }
                )));
            }
            r.heartbeat_at = crate::ids::rfc3339(now);
            let expiry = extended_expiry(c.expires_at, now.unix_timestamp(), p.ttl_seconds as i64);
            Ok(self
                .ctx
                .data
                .store
                .extend_claim(
                    &c.claim_id,
                    c.version,
                    expiry,
                    serde_json::to_string(&r).expect("a claim record serializes"),
                    &actor.key(),
                    &crate::ids::rfc3339(now),
                    Some(k.binding(&p.workspace_id, actor, &p.claim_id)),
                )
                .await)
        })
        .await?;
        Ok(ClaimReply {
            claim: self.claim_view(&c)?,
        })
    }

    /// `claim.release`: by the holder (or an admin, recorded as forced). Releasing a released
    /// claim again changes nothing and says so (`changed: false`, no event, no binding); a
    /// replay of the call that released it answers `changed: true` again.
    pub async fn claim_release(
        &self,
        actor: &Actor,
        p: ClaimKeyedParams,
    ) -> Result<ClaimReleaseReply, ServiceError> {
        let admin = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Admin)
            .is_ok();
        if !admin {
            self.ctx
                .governed(actor, &p.workspace_id, Permission::Propose)?;
        }
        let key = p.idempotency_key.clone().ok_or_else(|| {
            ServiceError::invalid_field("idempotency_key", "claim.release needs an idempotency_key")
        })?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.release",
                &key,
                &ClaimKeyedParams {
                    idempotency_key: None,
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let c = self.claim_in(&p.workspace_id, &id).await?;
                return Ok(ClaimReleaseReply {
                    claim: self.claim_view(&c)?,
                    changed: true,
                });
            }
            Prologue::Fresh(k) => k,
        };
        let binding = k.binding(&p.workspace_id, actor, &p.claim_id);
        let moved = self
            .move_claim(&p.workspace_id, &p.claim_id, |c| {
                let holder = c.holder == actor.key();
                if !holder && !admin {
                    return Err(ServiceError::PermissionDenied(
                        "only the holder or an admin releases a claim".into(),
                    ));
                }
                if c.status == ClaimState::Released {
                    return Ok(None);
                }
                Ok(Some(Transition {
                    claim_id: c.claim_id.clone(),
                    expected_version: c.version,
                    event: ClaimEvent::Release,
                    actor: actor.key(),
                    forced: !holder,
                    reason: None,
                    at: self.ctx.now_rfc3339(),
                    binding: Some(binding.clone()),
                }))
            })
            .await?;
        Ok(ClaimReleaseReply {
            claim: self.claim_view(&moved.claim)?,
            changed: moved.changed,
        })
    }

    /// `claim.show`.
    pub async fn claim_show(
        &self,
        actor: &Actor,
        p: ClaimParams,
    ) -> Result<ClaimReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let c = self.claim_in(&p.workspace_id, &p.claim_id).await?;
        Ok(ClaimReply {
            claim: self.claim_view(&c)?,
        })
    }

    /// `claim.list`: newest first, default 50, 1..=200.
    pub async fn claim_list(
        &self,
        actor: &Actor,
        p: ClaimListParams,
    ) -> Result<ClaimListReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = page_limit(p.limit)?;
        let before = parse_cursor("clc_", p.cursor.as_deref())?;
        let rows = self
            .ctx
            .data
            .store
            .list_claims(crate::store::claims::ClaimFilter {
                before,
                workspace_id: p.workspace_id.clone(),
                status: p.status,
                holder: p.holder,
                resource_id: p.resource_id,
                task_id: p.task_id,
                session_id: p.session_id,
                limit,
            })
            .await?;
        let claims = rows
            .iter()
            .map(|c| self.claim_view(c))
            .collect::<Result<Vec<_>, _>>()?;
        let next = next_cursor("clc_", rows.len(), limit, rows.last().and_then(|c| c.seq));
        Ok(ClaimListReply {
            claims,
            next_cursor: next,
        })
    }

    /// `claim.heartbeat`: the holder refreshes `heartbeat_at` of an active, unexpired claim.
    pub async fn claim_heartbeat(
        &self,
        actor: &Actor,
        p: ClaimKeyedParams,
    ) -> Result<ClaimReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::Propose)?;
        // The key is optional here: a heartbeat without one is simply sent again.
        let k = match &p.idempotency_key {
            None => None,
            Some(key) => match self
                .ctx
                .keys
                .begin(
                    &p.workspace_id,
                    actor,
                    "claim.heartbeat",
                    key,
                    &ClaimKeyedParams {
                        idempotency_key: None,
                        ..p.clone()
                    },
                )
                .await?
            {
                Prologue::Replay(id) => return self.replayed_claim(&p.workspace_id, &id).await,
                Prologue::Fresh(k) => Some(k),
            },
        };
        let c = on_fresh_read(|| async {
            let mut c = self.claim_in(&p.workspace_id, &p.claim_id).await?;
            if c.holder != actor.key() {
                return Err(ServiceError::PermissionDenied(
                    "only the holder sends a claim's heartbeat".into(),
                ));
            }
            let now = self.ctx.clock.now();
            if c.status != ClaimState::Active || c.expires_at <= now.unix_timestamp() {
                return Err(ServiceError::precondition(
                    "only an active, unexpired claim has a heartbeat",
                ));
            }
            let mut r: Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
            r.heartbeat_at = crate::ids::rfc3339(now);
            let record = serde_json::to_string(&r).expect("a claim record serializes");
            Ok(self
                .ctx
                .data
                .store
                .touch_claim(
                    &c.claim_id,
                    c.version,
                    record.clone(),
                    k.as_ref()
                        .map(|k| k.binding(&p.workspace_id, actor, &p.claim_id)),
                )
                .await
                .map(|version| {
                    c.version = version;
                    c.record = record;
                    c
                }))
        })
        .await?;
        Ok(ClaimReply {
            claim: self.claim_view(&c)?,
        })
    }

    /// `claim.suspend`, `claim.revoke` and `claim.force_release`: an admin's actions, each a
    /// checked transition from an allowed prior state with its event (`forced` when the claim
    /// is another's). A forced release needs a reason.
    pub async fn claim_admin(
        &self,
        actor: &Actor,
        event: ClaimEvent,
        p: ClaimAdminParams,
    ) -> Result<ClaimReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::Admin)?;
        let operation = match event {
            ClaimEvent::Suspend => "claim.suspend",
            ClaimEvent::Revoke => "claim.revoke",
            ClaimEvent::Release => "claim.force_release",
            ClaimEvent::Resume | ClaimEvent::Expire | ClaimEvent::Transfer | ClaimEvent::Extend => {
                return Err(ServiceError::internal(format!(
                    "{} is not an admin method",
                    event.as_str()
                )));
            }
        };
        if let Some(r) = &p.reason {
            check_text("reason", r, true)?;
        }
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                operation,
                &p.idempotency_key,
                &ClaimAdminParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => return self.replayed_claim(&p.workspace_id, &id).await,
            Prologue::Fresh(k) => k,
        };
        if event == ClaimEvent::Release && p.reason.is_none() {
            return Err(ServiceError::invalid_field(
                "reason",
                "claim.force_release needs a reason",
            ));
        }
        let binding = k.binding(&p.workspace_id, actor, &p.claim_id);
        let moved = self
            .move_claim(&p.workspace_id, &p.claim_id, |c| {
                Ok(Some(Transition {
                    claim_id: c.claim_id.clone(),
                    expected_version: c.version,
                    event,
                    actor: actor.key(),
                    forced: c.holder != actor.key(),
                    reason: p.reason.clone(),
                    at: self.ctx.now_rfc3339(),
                    binding: Some(binding.clone()),
                }))
            })
            .await?;
        Ok(ClaimReply {
            claim: self.claim_view(&moved.claim)?,
        })
    }

    /// The maintenance pass's sweep: claims past their expiry become `expired`, each with an
    /// event. (They stopped blocking at the instant they expired; this makes it visible.)
    pub async fn expire_claims(&self) -> Result<usize, ServiceError> {
        let now = self.ctx.clock.now();
        Ok(self
            .ctx
            .data
            .store
            .expire_due_claims(now.unix_timestamp(), &crate::ids::rfc3339(now))
            .await?)
    }

    /// The maintenance pass's retention: ended claims more than `claim_retention_days` past
    /// their expiry are removed with their events and contentions, a bounded batch at a time.
    pub async fn purge_ended_claims(&self) -> Result<usize, ServiceError> {
        let keep = self.ctx.config.claim_retention.as_secs() as i64;
        let before = self.ctx.clock.now().unix_timestamp().saturating_sub(keep);
        Ok(self
            .ctx
            .data
            .store
            .purge_ended_claims(before, limits::CLAIM_PURGE_BATCH)
            .await?)
    }

    /// `event.list`: a governed workspace's events after `since`, oldest first.
    pub async fn event_list(
        &self,
        actor: &Actor,
        p: EventListParams,
    ) -> Result<crate::wire::EventListReply, ServiceError> {
        // Every workspace has a log: the governed path's and the candidate flow's events.
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let limit = page_limit(p.limit)?;
        if let Some(kind) = &p.kind {
            crate::domain::event_kind::check_filter("kind", kind)
                .map_err(|e| ServiceError::invalid_field("kind", e))?;
        }
        let after = match (&p.cursor, p.since) {
            (Some(_), Some(_)) => {
                return Err(ServiceError::invalid_field(
                    "cursor",
                    "give cursor or since, not both",
                ));
            }
            (Some(c), None) => parse_cursor("evc_", Some(c))?.unwrap_or(0),
            (None, Some(since)) if since < 0 => {
                return Err(ServiceError::invalid_field(
                    "since",
                    format!("since is {since}; it is a sequence number, 0 or more"),
                ));
            }
            (None, since) => since.unwrap_or(0),
        };
        let rows = self
            .ctx
            .data
            .store
            .list_events(&p.workspace_id, p.subject, p.kind, after, limit)
            .await?;
        let events: Vec<crate::wire::EventView> = rows
            .into_iter()
            .map(
                |(seq, subject, kind, actor, prior, new, payload, at)| crate::wire::EventView {
                    seq,
                    subject,
                    kind,
                    actor,
                    prior,
                    new,
                    payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
                    at,
                },
            )
            .collect();
        // `next_since` is the last seq seen (poll with it for what comes later);
        // `next_cursor` is set when the page was full.
        let last = events.last().map(|e| e.seq);
        let next = next_cursor("evc_", events.len(), limit, last);
        Ok(crate::wire::EventListReply {
            events,
            next_since: last,
            next_cursor: next,
        })
    }
}
