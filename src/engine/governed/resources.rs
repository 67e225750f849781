//! Resources as they are in the worktree now: `resource.show`, `claim.reconcile` (suspend
//! claims whose resource changed) and `claim.end_session`.

use super::claims::Record;
use super::requests::{Keyed, check_text};
use crate::config::Permission;
use crate::domain::claim::{ClaimEvent, ClaimState, ResourceId, Span};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Claims;
use crate::engine::idempotency::Prologue;
use crate::store::Inserted;
use crate::store::claims::{ClaimFilter, Transition};
use crate::wire::{EndSessionParams, ReconcileParams, ResourceShowParams};

/// Why a resource cannot be read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// Reading it would pass a named bound (a file nesting too deep to resolve symbols in).
    Exhausted(String),
    /// It is missing, unparsable or not readable.
    Refused(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Exhausted(m) | Unreadable::Refused(m) => f.write_str(m),
        }
    }
}

impl Unreadable {
    /// The refusal of a request about `field`'s resource.
    pub(super) fn refusal(self, field: &str) -> ServiceError {
        match self {
            Unreadable::Exhausted(m) => ServiceError::exhausted_field(field, m),
            Unreadable::Refused(m) => {
                ServiceError::precondition_field(field, format!("the resource cannot be read: {m}"))
            }
        }
    }
}

impl Claims {
    /// The current content hash of a resource beneath `worktree` (a symbol's is the hash of
    /// its lines as resolved now).
    pub(super) async fn current_hash(
        worktree: std::path::PathBuf,
        resource: ResourceId,
    ) -> Result<Option<String>, Unreadable> {
        Ok(Self::inspect(worktree, resource).await?.0)
    }

    /// A resource as it is in the worktree now: its content hash and, for a symbol, the span a
    /// parser finds. An unresolvable symbol is an error, never a zero span.
    pub(super) async fn inspect(
        worktree: std::path::PathBuf,
        resource: ResourceId,
    ) -> Result<(Option<String>, Option<Span>), Unreadable> {
        let refused = |e: std::io::Error| Unreadable::Refused(e.to_string());
        tokio::task::spawn_blocking(move || {
            let root = crate::beneath::Root::open(&worktree).map_err(refused)?;
            match &resource {
                ResourceId::File { path } => crate::worktree::file_hash(&root, path)
                    .map(|h| (h, None))
                    .map_err(refused),
                ResourceId::Directory { path } => crate::worktree::directory_hash(&root, path)
                    .map(|h| (h, None))
                    .map_err(refused),
                ResourceId::Symbol { path, name } => {
                    let span =
                        crate::symbols::resolve_in(&root, path, name).map_err(|e| match e {
                            crate::symbols::SymbolError::TooComplex { .. } => {
                                Unreadable::Exhausted(e.to_string())
                            }
                            other => Unreadable::Refused(other.to_string()),
                        })?;
                    let hash = crate::worktree::range_hash(&root, path, span).map_err(refused)?;
                    Ok((hash, Some(span)))
                }
                ResourceId::Other { .. } => Ok((None, None)),
            }
        })
        .await
        .expect("hashing does not panic")
    }

    /// `claim.reconcile`: every active write or exclusive claim (optionally of one holder)
    /// whose resource no longer has its `base_hash` is suspended, one transaction and one event
    /// each. A resource that cannot be read is reported as such, never as unchanged.
    pub async fn claim_reconcile(
        &self,
        actor: &Actor,
        p: ReconcileParams,
    ) -> Result<crate::wire::ReconcileReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Admin)?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.reconcile",
                &p.idempotency_key,
                &ReconcileParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(answer) => {
                return stored_answer(&answer);
            }
            Prologue::Fresh(k) => k,
        };
        let rows = self
            .ctx
            .data
            .store
            .list_claims(ClaimFilter {
                workspace_id: p.workspace_id.clone(),
                status: Some(ClaimState::Active),
                holder: p.holder.clone(),
                limit: u32::MAX,
                ..Default::default()
            })
            .await?;
        let now = self.ctx.clock.now().unix_timestamp();
        let (mut unchanged, mut suspended, mut unreadable) = (vec![], vec![], vec![]);
        for c in rows
            .into_iter()
            .filter(|c| c.mode.writes() && c.expires_at > now)
        {
            let r: Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
            let resource = ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
            match Self::current_hash(worktree.clone(), resource).await {
                Err(reason) => unreadable.push(crate::wire::UnreadableClaim {
                    claim_id: c.claim_id.clone(),
                    reason: reason.to_string(),
                }),
                Ok(current)
                    if current.as_deref().unwrap_or_default()
                        == r.base_hash.as_deref().unwrap_or_default() =>
                {
                    unchanged.push(c.claim_id.clone())
                }
                Ok(current) => {
                    // Judged again on each read: an apply that settled meanwhile re-based the
                    // claim onto the bytes it installed, and then nothing changed under it.
                    let moved = self
                        .move_claim(&p.workspace_id, &c.claim_id, |now_row| {
                            let r: Record = serde_json::from_str(&now_row.record).map_err(|e| {
                                ServiceError::record(format!("claim {} record", c.claim_id), e)
                            })?;
                            if now_row.status != ClaimState::Active
                                || current.as_deref().unwrap_or_default()
                                    == r.base_hash.as_deref().unwrap_or_default()
                            {
                                return Ok(None);
                            }
                            Ok(Some(Transition {
                                claim_id: now_row.claim_id.clone(),
                                expected_version: now_row.version,
                                event: ClaimEvent::Suspend,
                                actor: actor.key(),
                                forced: true,
                                reason: Some(
                                    "the resource changed since the claim was granted".into(),
                                ),
                                at: self.ctx.now_rfc3339(),
                                binding: None,
                            }))
                        })
                        .await?;
                    if moved.changed {
                        suspended.push(c.claim_id.clone());
                    } else {
                        unchanged.push(c.claim_id.clone());
                    }
                }
            }
        }
        let answer = crate::wire::ReconcileReply {
            suspended,
            unchanged,
            unreadable,
        };
        self.keep_answer(&p.workspace_id, actor, &k, answer).await
    }

    /// `claim.end_session`: the session's claims with `resume_policy = "release"` are
    /// released (each with its event); `hold` claims stay.
    pub async fn claim_end_session(
        &self,
        actor: &Actor,
        p: EndSessionParams,
    ) -> Result<crate::wire::EndSessionReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::Propose)?;
        check_text("session_id", &p.session_id, true)?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.end_session",
                &p.idempotency_key,
                &EndSessionParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(answer) => {
                return stored_answer(&answer);
            }
            Prologue::Fresh(k) => k,
        };
        let rows = self
            .ctx
            .data
            .store
            .list_claims(ClaimFilter {
                workspace_id: p.workspace_id.clone(),
                status: Some(ClaimState::Active),
                holder: Some(actor.key()),
                session_id: Some(p.session_id.clone()),
                limit: u32::MAX,
                ..Default::default()
            })
            .await?;
        let mut released = vec![];
        for c in rows {
            let r: Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
            if r.session_id.as_deref() == Some(p.session_id.as_str())
                && r.resume_policy == crate::wire::ResumePolicy::Release
            {
                let moved = self
                    .move_claim(&p.workspace_id, &c.claim_id, |now_row| {
                        if now_row.status != ClaimState::Active || now_row.holder != actor.key() {
                            return Ok(None);
                        }
                        Ok(Some(Transition {
                            claim_id: now_row.claim_id.clone(),
                            expected_version: now_row.version,
                            event: ClaimEvent::Release,
                            actor: actor.key(),
                            forced: false,
                            reason: Some(format!("session {} ended", p.session_id)),
                            at: self.ctx.now_rfc3339(),
                            binding: None,
                        }))
                    })
                    .await?;
                if moved.changed {
                    released.push(c.claim_id);
                }
            }
        }
        self.keep_answer(
            &p.workspace_id,
            actor,
            &k,
            crate::wire::EndSessionReply { released },
        )
        .await
    }

    /// Binds the key of a call made of several transactions to its answer (kept as the
    /// binding's result), after those transactions. A crash before this leaves the key
    /// unbound; a retry then does the work again, which finds nothing left to change. Two
    /// concurrent calls with one key: the first answer recorded is the one both replay.
    async fn keep_answer<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        workspace_id: &str,
        actor: &Actor,
        k: &Keyed,
        answer: T,
    ) -> Result<T, ServiceError> {
        let text = serde_json::to_string(&answer).expect("an answer serializes");
        match self
            .ctx
            .data
            .store
            .bind(k.binding(workspace_id, actor, &text))
            .await?
        {
            Inserted::New => Ok(answer),
            Inserted::Existing { digest, result_id } => {
                stored_answer(&k.judge(&digest, result_id)?)
            }
        }
    }

    /// `resource.show`: what an agent inspects before claiming.
    pub async fn resource_show(
        &self,
        actor: &Actor,
        p: ResourceShowParams,
    ) -> Result<crate::wire::ResourceReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let resource = ResourceId::parse(&p.resource_id)
            .map_err(|m| ServiceError::invalid_field("resource_id", m))?;
        let (kind, symbol) = match &resource {
            ResourceId::File { .. } => ("file", None),
            ResourceId::Directory { .. } => ("directory", None),
            ResourceId::Symbol { name, .. } => ("symbol", Some(name.clone())),
            ResourceId::Other { kind, .. } => (kind.as_str(), None),
        };
        let path = resource.path().map(str::to_string);
        let language = path.as_deref().and_then(language_of);
        let (hash, span) = Self::inspect(worktree, resource.clone())
            .await
            .map_err(|e| e.refusal("resource_id"))?;
        let exists = hash.is_some() || matches!(resource, ResourceId::Other { .. });
        Ok(crate::wire::ResourceReply {
            resource: crate::wire::ResourceView {
                resource_id: resource.id(),
                kind: kind.to_string(),
                path,
                symbol,
                language: language.map(str::to_string),
                span,
                exists,
                current_hash: hash.unwrap_or_default(),
            },
        })
    }
}

/// The language a path's extension names, for the languages the governed path knows.
pub fn language_of(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1;
    Some(match ext {
        "rs" => "rust",
        "py" => "python",
        "go" => "go",
        "js" | "mjs" | "cjs" | "jsx" => "javascript",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "tsx",
        "c" | "h" => "c",
        "cc" | "cpp" | "hpp" | "cxx" => "cpp",
        "java" => "java",
        "rb" => "ruby",
        "sh" => "shell",
        "md" => "markdown",
        "toml" => "toml",
        "json" => "json",
        "yaml" | "yml" => "yaml",
        _ => return None,
    })
}

/// The answer a keyed multi-transaction call recorded.
fn stored_answer<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ServiceError> {
    serde_json::from_str(text).map_err(|e| ServiceError::record("a recorded answer", e))
}

impl Claims {
    /// `claim.resume`: the holder (or an admin, recorded as forced) makes a suspended claim
    /// active again with its fencing token, when its resource is what it was at the grant
    /// (for write and exclusive claims, the hash the grant recorded), it is not past its
    /// expiry, and no claim of another holder granted meanwhile conflicts with it.
    pub async fn claim_resume(
        &self,
        actor: &Actor,
        p: crate::wire::ClaimResumeParams,
    ) -> Result<crate::wire::ClaimReply, ServiceError> {
        let admin = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Admin)
            .is_ok();
        let worktree = self.ctx.governed(
            actor,
            &p.workspace_id,
            if admin {
                Permission::Admin
            } else {
                Permission::Propose
            },
        )?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "claim.resume",
                &p.idempotency_key,
                &crate::wire::ClaimResumeParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let c = self.claim_in(&p.workspace_id, &id).await?;
                return Ok(crate::wire::ClaimReply {
                    claim: self.claim_view(&c)?,
                });
            }
            Prologue::Fresh(k) => k,
        };
        let c = self.claim_in(&p.workspace_id, &p.claim_id).await?;
        let holder = c.holder == actor.key();
        if !holder && !admin {
            return Err(ServiceError::PermissionDenied(
                "only the holder or an admin resumes a claim".into(),
            ));
        }
        if c.status != ClaimState::Suspended {
            return Err(ServiceError::precondition(format!(
                "claim {} is {}: only a suspended claim resumes",
                c.claim_id,
                c.status.as_str()
            )));
        }
        if c.mode.writes() {
            let r: Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record(format!("claim {} record", c.claim_id), e))?;
            let resource = ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
            let now = Self::current_hash(worktree, resource)
                .await
                .map_err(|e| e.refusal("claim_id"))?
                .unwrap_or_default();
            let granted = r.base_hash.unwrap_or_default();
            if now != granted {
                return Err(ServiceError::precondition_field(
                    "claim_id",
                    format!(
                        "{} changed since the grant: its current hash is {now:?}, the grant recorded {granted:?}; acquire it again",
                        c.resource_id
                    ),
                ));
            }
        }
        let resumed = self
            .ctx
            .data
            .store
            .resume_claim(crate::store::claim_ends::Resume {
                claim_id: c.claim_id.clone(),
                expected_version: c.version,
                actor: actor.key(),
                forced: !holder,
                now: self.ctx.clock.now().unix_timestamp(),
                at: self.ctx.now_rfc3339(),
                binding: Some(k.binding(&p.workspace_id, actor, &c.claim_id)),
            })
            .await?;
        match resumed {
            crate::store::claim_ends::Resumed::Active(c) => Ok(crate::wire::ClaimReply {
                claim: self.claim_view(&c)?,
            }),
            crate::store::claim_ends::Resumed::Blocked(others) => {
                let held: Vec<String> = others
                    .iter()
                    .map(|o| format!("{} ({} by {})", o.claim_id, o.mode.as_str(), o.holder))
                    .collect();
                Err(ServiceError::Conflict(format!(
                    "claim {} cannot resume: {} was granted while it was suspended and conflicts with it",
                    c.claim_id,
                    held.join(", ")
                )))
            }
        }
    }
}
