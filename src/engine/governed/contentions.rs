//! `claim.contentions` and `claim.resolve_contention`: refused acquires as the admin sees
//! them, and their one-time resolution.

use super::claims::Record;
use super::requests::{check_text, next_cursor, page_limit, parse_cursor};
use crate::config::Permission;
use crate::domain::claim::{ClaimState, ResourceId};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Claims;
use crate::engine::idempotency::Prologue;
use crate::wire::{
    ContentionListParams, ContentionState, ContentionView, ResolutionKind, ResolveContentionParams,
};
use serde_json::Value;

impl Claims {
    /// `claim.contentions`: each with the challenged claim's current lease and the
    /// resolutions its current state allows.
    pub async fn claim_contentions(
        &self,
        actor: &Actor,
        p: ContentionListParams,
    ) -> Result<crate::wire::ContentionListReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = page_limit(p.limit)?;
        let after = parse_cursor("cnc_", p.cursor.as_deref())?.unwrap_or(0);
        let rows = self
            .ctx
            .data
            .store
            .list_contentions(
                &p.workspace_id,
                p.state,
                p.resource_id.clone(),
                after,
                limit,
            )
            .await?;
        let next = next_cursor("cnc_", rows.len(), limit, rows.last().map(|c| c.seq));
        let now = self.ctx.clock.now().unix_timestamp();
        let mut out = Vec::new();
        for c in rows {
            let challenged = self.ctx.data.store.claim(&c.challenged_claim).await?;
            let live = challenged
                .as_ref()
                .is_some_and(|x| x.status == ClaimState::Active && x.expires_at > now);
            use ResolutionKind as K;
            let state = c.state;
            let allowed: &[ResolutionKind] = match (state, live) {
                (ContentionState::Open, true) => &[
                    K::KeepOwner,
                    K::RejectContender,
                    K::Transfer,
                    K::ExtendLease,
                ],
                (ContentionState::Open, false) => &[K::KeepOwner, K::RejectContender],
                (ContentionState::Resolved, _) => &[],
            };
            let lease = challenged.as_ref().and_then(|x| {
                time::OffsetDateTime::from_unix_timestamp(x.expires_at)
                    .ok()
                    .map(crate::ids::rfc3339)
            });
            let field = |k: &str| -> Result<Option<String>, ServiceError> {
                match c.record.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(v)) => Ok(Some(v.clone())),
                    Some(other) => Err(ServiceError::internal(format!(
                        "contention {} has {k} {other}",
                        c.contention_id
                    ))),
                }
            };
            let requested = field("resource_id")?.unwrap_or_default();
            let requested_path = ResourceId::parse(&requested)
                .ok()
                .and_then(|r| r.path().map(str::to_string));
            let mode = field("mode")?
                .as_deref()
                .and_then(crate::domain::claim::ClaimMode::parse)
                .ok_or_else(|| {
                    ServiceError::internal(format!("contention {} has no mode", c.contention_id))
                })?;
            let resolution = field("resolution")?
                .map(|r| serde_json::from_value(Value::String(r)))
                .transpose()
                .map_err(|e| ServiceError::record("a contention's resolution", e))?;
            let reason = field("reason")?;
            out.push(ContentionView {
                contention_id: c.contention_id.clone(),
                requested_resource_id: requested,
                requested_path,
                agent: c.requester.clone(),
                task_id: c.record["request"]["task_id"].as_str().map(str::to_string),
                mode,
                challenged_claim: c.challenged_claim.clone(),
                holder: challenged.as_ref().map(|x| x.holder.clone()),
                state,
                resolution,
                reason,
                created_at: c.created_at.clone(),
                lease_expires_at: lease,
                allowed_resolutions: allowed.to_vec(),
            });
        }
        Ok(crate::wire::ContentionListReply {
            contentions: out,
            next_cursor: next,
        })
    }

    /// `claim.resolve_contention` (admin): exactly one of concurrent resolvers wins; a
    /// transfer re-checks conflicts for the new holder and changes nothing when it fails.
    pub async fn claim_resolve_contention(
        &self,
        actor: &Actor,
        p: ResolveContentionParams,
    ) -> Result<crate::wire::ContentionResolveReply, ServiceError> {
        use crate::store::contentions::{Resolution, Resolve};
        self.ctx
            .governed(actor, &p.workspace_id, Permission::Admin)?;
        check_text("reason", &p.reason, true)?;
        let actor_key = actor.key();
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.resolve_contention",
                &p.idempotency_key,
                &ResolveContentionParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(_) => {
                // The original answer: the resolution and the claim it extended or transferred.
                let c = self
                    .ctx
                    .data
                    .store
                    .contention(&p.workspace_id, &p.contention_id)
                    .await?
                    .ok_or_else(|| ServiceError::internal("a bound contention is gone"))?;
                let claim = match p.resolution {
                    ResolutionKind::Transfer | ResolutionKind::ExtendLease => {
                        Some(self.claim_view(
                            &self.claim_in(&p.workspace_id, &c.challenged_claim).await?,
                        )?)
                    }
                    ResolutionKind::KeepOwner
                    | ResolutionKind::RejectContender
                    | ResolutionKind::Split
                    | ResolutionKind::Narrow => None,
                };
                return Ok(crate::wire::ContentionResolveReply {
                    contention_id: c.contention_id,
                    resolution: p.resolution,
                    claim,
                });
            }
            Prologue::Fresh(k) => k,
        };
        let open = self
            .ctx
            .data
            .store
            .contention(&p.workspace_id, &p.contention_id)
            .await?
            .ok_or_else(|| {
                ServiceError::NotFound(format!("contention {:?} not found", p.contention_id))
            })?;
        if open.state != ContentionState::Open {
            return Err(ServiceError::precondition(format!(
                "contention {} is already resolved",
                p.contention_id
            )));
        }
        let resolution = match p.resolution {
            ResolutionKind::KeepOwner => Resolution::KeepOwner,
            ResolutionKind::RejectContender => Resolution::RejectContender,
            ResolutionKind::Transfer => {
                // The contender's own request becomes the claim's record, with the base hash
                // taken now (the resource may have changed since the refused attempt).
                let mut request: Record = serde_json::from_value(open.record["request"].clone())
                    .map_err(|e| {
                        ServiceError::record(
                            format!("contention {} request", open.contention_id),
                            e,
                        )
                    })?;
                let challenged = self
                    .claim_in(&p.workspace_id, &open.challenged_claim)
                    .await?;
                let wants_write =
                    matches!(open.record["mode"].as_str(), Some("write" | "exclusive"));
                request.base_hash = if wants_write {
                    let worktree = self
                        .ctx
                        .governed(actor, &p.workspace_id, Permission::Admin)?;
                    let resource = ResourceId::parse(&challenged.resource_id)
                        .map_err(ServiceError::internal)?;
                    Some(
                        Self::current_hash(worktree, resource)
                            .await
                            .map_err(|e| {
                                ServiceError::precondition(format!(
                                    "the resource cannot be read for the transfer: {e}"
                                ))
                            })?
                            .unwrap_or_default(),
                    )
                } else {
                    None
                };
                let now = crate::ids::rfc3339(self.ctx.clock.now());
                request.acquired_at = now.clone();
                request.heartbeat_at = now;
                Resolution::Transfer {
                    task_id: request.task_id.clone(),
                    session_id: request.session_id.clone(),
                    record: serde_json::to_string(&request).expect("a claim record serializes"),
                }
            }
            ResolutionKind::ExtendLease => {
                let c = self
                    .claim_in(&p.workspace_id, &open.challenged_claim)
                    .await?;
                let r: Record = serde_json::from_str(&c.record)
                    .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
                Resolution::ExtendLease {
                    ttl_seconds: r.ttl_seconds as i64,
                }
            }
            ResolutionKind::Split | ResolutionKind::Narrow => {
                return Err(ServiceError::invalid_field(
                    "resolution",
                    "split and narrow are not supported; use keep_owner, reject_contender, transfer or extend_lease",
                ));
            }
        };
        let now = self.ctx.clock.now();
        let resolved = self
            .ctx
            .data
            .store
            .resolve_contention(Resolve {
                workspace_id: p.workspace_id.clone(),
                contention_id: p.contention_id.clone(),
                resolution,
                reason: p.reason.clone(),
                actor: actor_key.clone(),
                now: now.unix_timestamp(),
                at: crate::ids::rfc3339(now),
                binding: Some(k.binding_for(&p.workspace_id, &actor_key, &p.contention_id)),
            })
            .await
            .map_err(|e| match e {
                crate::store::StoreError::Conflict(m) if m.contains("already resolved") => {
                    ServiceError::precondition(m)
                }
                other => other.into(),
            })?;
        let claim = match &resolved.claim_id {
            Some(id) => Some(self.claim_view(&self.claim_in(&p.workspace_id, id).await?)?),
            None => None,
        };
        Ok(crate::wire::ContentionResolveReply {
            contention_id: resolved.contention_id,
            resolution: p.resolution,
            claim,
        })
    }
}
