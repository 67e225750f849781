//! `transaction.control`: `cancel` undoes a transaction left in `prepared`;
//! `compensate` files the reverse of an applied transaction as a new high-risk proposal by
//! the requesting member, built from the rollback artifact against the current files, with
//! write claims on the touched paths, so it goes through validation and policy like any
//! other change. `retry` applies a fresh validation of the same revision (made after the
//! retried transaction's) as a new transaction linked to the failed or cancelled one.

use super::requests::Keyed;
use crate::config::Permission;
use crate::domain::git::FileMode;
use crate::domain::proposal::Risk;
use crate::domain::transaction::{ControlAction, TxEvent};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Applies;
use crate::engine::idempotency::Prologue;
use crate::install::{self, Image, PathState};
use crate::wire::{
    ApplyParams, ClaimAcquireParams, ProposalCreateParams, TransactionControlParams,
    TransactionParams,
};
use serde_json::json;

fn blob_of(repo: &crate::staging::Repo, img: &Image) -> Result<Option<(String, FileMode)>, String> {
    let e = |x: crate::staging::StagingError| x.to_string();
    Ok(match img {
        Image::Absent => None,
        Image::File { executable, bytes } => Some((
            repo.write_blob(bytes).map_err(e)?,
            if *executable {
                FileMode::Executable
            } else {
                FileMode::Regular
            },
        )),
        Image::Symlink { target } => Some((
            repo.write_blob(target.as_bytes()).map_err(e)?,
            FileMode::Symlink,
        )),
    })
}

/// `transaction.control`'s answer, by action: the transaction (cancel, resolve, and a replay
/// of cancel or compensate), the retry's new transaction, the compensation's proposal, or the
/// validation a `validate` ran.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
// Built once per call and serialized at once: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum ControlReply {
    Transaction(crate::wire::TransactionReply),
    Applied(crate::wire::ApplyReply),
    Compensation(crate::wire::CompensationReply),
    Validation(super::validation::ValidationReply),
}

impl Applies {
    /// `transaction.control`: members with `apply`.
    pub async fn transaction_control(
        &self,
        actor: &Actor,
        p: TransactionControlParams,
    ) -> Result<ControlReply, ServiceError> {
        if matches!(actor, Actor::Run { .. }) {
            return Err(ServiceError::PermissionDenied(
                "transaction.control is for members with apply".into(),
            ));
        }
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Apply)?;
        if let Some(r) = &p.reason {
            super::requests::check_text("reason", r, true)?;
        }
        if p.validation_id.is_some() && p.action != ControlAction::Retry {
            return Err(ServiceError::invalid_field(
                "validation_id",
                "only retry takes a validation_id",
            ));
        }
        let lock = self.apply_lock(&p.workspace_id)?;
        let _guard = lock.lock().await;
        let show = TransactionParams {
            workspace_id: p.workspace_id.clone(),
            transaction_id: p.transaction_id.clone(),
        };
        // A replay answers what the first call did (compensate replays through the keys it
        // derives for its claims and proposal).
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "transaction.control",
                &p.idempotency_key,
                &TransactionControlParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                return match p.action {
                    ControlAction::Retry => {
                        let t = self.tx_in(&p.workspace_id, &id).await?;
                        self.replayed_apply(&t).await.map(ControlReply::Applied)
                    }
                    ControlAction::Cancel | ControlAction::Compensate | ControlAction::Resolve => {
                        self.transaction_show(actor, show)
                            .await
                            .map(ControlReply::Transaction)
                    }
                    ControlAction::Validate | ControlAction::Stage => {
                        Err(ServiceError::internal("validate and stage bind no key"))
                    }
                };
            }
            Prologue::Fresh(k) => k,
        };
        if p.action == ControlAction::Stage {
            return Err(ServiceError::precondition_field(
                "action",
                crate::domain::transaction::STAGE_REFUSAL,
            ));
        }
        let status = self
            .transaction_show(actor, show.clone())
            .await?
            .transaction
            .status;
        let allowed = status.actions();
        match p.action {
            a if !allowed.contains(&a) => Err(ServiceError::precondition_field(
                "action",
                format!(
                    "transaction {} is {}; it accepts {}",
                    p.transaction_id,
                    status.as_str(),
                    serde_json::to_string(allowed).expect("actions serialize")
                ),
            )),
            ControlAction::Cancel => {
                let dir = self.ctx.data.layout.transactions();
                let id = p.transaction_id.clone();
                let wt = worktree.clone();
                tokio::task::spawn_blocking(move || -> Result<(), ServiceError> {
                    let rb = install::read_artifact(&dir, &id)?;
                    let root = crate::beneath::Root::open(&wt).map_err(ServiceError::worktree)?;
                    Ok(install::undo_prepare(&root, &rb)?)
                })
                .await
                .expect("undo does not panic")?;
                let row = self
                    .ctx
                    .data
                    .store
                    .transaction(&p.transaction_id)
                    .await?
                    .ok_or_else(|| ServiceError::internal("the transaction is gone"))?;
                let mut r = Self::tx_record(&row)?;
                self.advance_with(
                    &row.transaction_id,
                    row.version,
                    TxEvent::Cancel,
                    &mut r,
                    &actor.key(),
                    &json!({"reason": p.reason}).to_string(),
                    Some(k.binding(&p.workspace_id, actor, &p.transaction_id)),
                    vec![],
                )
                .await?;
                self.transaction_show(actor, show)
                    .await
                    .map(ControlReply::Transaction)
            }
            ControlAction::Compensate => self
                .compensate(actor, &worktree, &p, &k)
                .await
                .map(ControlReply::Compensation),
            ControlAction::Retry => self
                .retry(actor, &worktree, &p, &k)
                .await
                .map(ControlReply::Applied),
            ControlAction::Resolve => {
                self.resolve_flagged(actor, &worktree, &p, &k).await?;
                self.transaction_show(actor, show)
                    .await
                    .map(ControlReply::Transaction)
            }
            // Its own key (derived, per transaction) makes a replay answer the same validation.
            ControlAction::Validate => {
                let old = self.tx_in(&p.workspace_id, &p.transaction_id).await?;
                self.validations
                    .validate_for(
                        actor,
                        crate::wire::ValidateParams {
                            workspace_id: p.workspace_id.clone(),
                            proposal_id: old.proposal_id.clone(),
                            revision: old.revision.clone(),
                            idempotency_key: k.derived(&format!("validate/{}", p.transaction_id)),
                        },
                        Some(old.transaction_id),
                    )
                    .await
                    .map(ControlReply::Validation)
            }
            ControlAction::Stage => unreachable!("stage is refused above"),
        }
    }

    /// `resolve`: an admin settles a flagged transaction as its files stand, judged against
    /// the validation's fingerprints (so a missing or quarantined rollback artifact does not
    /// matter): `applied` when every touched path holds its post-image (its proposal is
    /// accepted if it is still in review), `rolled_back` when every one holds its pre-image
    /// (staged temp files are removed). Anything else is refused, naming the paths: restore
    /// them to one side first.
    async fn resolve_flagged(
        &self,
        actor: &Actor,
        worktree: &std::path::Path,
        p: &TransactionControlParams,
        k: &Keyed,
    ) -> Result<(), ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Admin)?;
        let reason = p.reason.clone().ok_or_else(|| {
            ServiceError::invalid_field("reason", "resolve needs a reason (what was checked)")
        })?;
        let t = self.tx_in(&p.workspace_id, &p.transaction_id).await?;
        let (_, vrec) = self
            .validations
            .validation_in(&p.workspace_id, &t.validation_id)
            .await?;
        let mut r = Self::tx_record(&t)?;
        let images: Vec<(String, Option<install::Fingerprint>, install::Fingerprint)> = vrec
            .pre_images
            .iter()
            .map(|(path, pre)| {
                let post = vrec
                    .post_images
                    .iter()
                    .find(|i| &i.path == path)
                    .map(|i| i.fingerprint.clone());
                (path.clone(), post, pre.clone())
            })
            .collect();
        let wt = worktree.to_path_buf();
        let (id, paths) = (t.transaction_id.clone(), r.paths.clone());
        let judged = tokio::task::spawn_blocking(move || -> Result<TxEvent, ServiceError> {
            let root = crate::beneath::Root::open(&wt).map_err(ServiceError::worktree)?;
            let mut post = true;
            let mut pre = true;
            let mut neither = vec![];
            for (path, after, before) in &images {
                let now = install::current(&root, path)?.fingerprint();
                // A path the patch only reads (a copy source) is the same on both sides.
                let after = after.as_ref().unwrap_or(before);
                let (is_post, is_pre) = (now == *after, now == *before);
                post &= is_post;
                pre &= is_pre;
                if !is_post && !is_pre {
                    neither.push(path.clone());
                }
            }
            // Either way, the staged copies an interrupted apply left are not needed.
            if post || pre {
                install::remove_staged(&root, &id, &paths)?;
            }
            if post {
                return Ok(TxEvent::ResolveApplied);
            }
            if pre {
                return Ok(TxEvent::ResolveRolledBack);
            }
            Err(ServiceError::precondition_field(
                "action",
                if neither.is_empty() {
                    "some touched paths hold their post-image and others their pre-image: restore every one to the same side, then resolve".to_string()
                } else {
                    format!(
                        "{} hold neither the pre-image nor the post-image: restore them (every touched path to the same side), then resolve",
                        neither.join(", ")
                    )
                },
            ))
        })
        .await
        .expect("judging the files does not panic")?;
        if judged == TxEvent::ResolveApplied {
            r.hashes = vrec
                .pre_images
                .iter()
                .filter_map(|(path, before)| {
                    let after = vrec.post_images.iter().find(|i| &i.path == path)?;
                    Some(crate::wire::PathHashes {
                        path: path.clone(),
                        before: before.clone(),
                        after: after.fingerprint.clone(),
                    })
                })
                .collect();
        }
        self.advance_with(
            &t.transaction_id,
            t.version,
            judged,
            &mut r,
            &actor.key(),
            &json!({"reason": reason}).to_string(),
            Some(k.binding(&p.workspace_id, actor, &t.transaction_id)),
            vec![],
        )
        .await?;
        Ok(())
    }

    /// `retry`: applies a fresh validation of the retried transaction's revision (named, or the
    /// newest made after the transaction's own) as a new transaction with `retry_of` set.
    /// A transaction is retried at most once; the new one goes through every recheck.
    async fn retry(
        &self,
        actor: &Actor,
        worktree: &std::path::Path,
        p: &TransactionControlParams,
        k: &Keyed,
    ) -> Result<crate::wire::ApplyReply, ServiceError> {
        let old = self.tx_in(&p.workspace_id, &p.transaction_id).await?;
        let siblings = self
            .ctx
            .data
            .store
            .list_transactions(
                &p.workspace_id,
                None,
                Some(old.proposal_id.clone()),
                None,
                u32::MAX,
            )
            .await?;
        for t in &siblings {
            if Self::retried_of(t)?.as_deref() == Some(old.transaction_id.as_str()) {
                return Err(ServiceError::precondition_field(
                    "action",
                    format!(
                        "transaction {} was already retried by {}",
                        old.transaction_id, t.transaction_id
                    ),
                ));
            }
        }
        let validations = self.ctx.data.store.validations_of(&old.proposal_id).await?;
        let after = validations
            .iter()
            .position(|v| v.validation_id == old.validation_id)
            .map_or(0, |i| i + 1);
        let mut fresh = validations[after..]
            .iter()
            .filter(|v| v.revision == old.revision);
        let chosen = match &p.validation_id {
            Some(id) => fresh.find(|v| &v.validation_id == id).ok_or_else(|| {
                ServiceError::precondition_field(
                    "validation_id",
                    format!(
                        "{id} is not a validation of revision {} made after {}'s validation {}",
                        old.revision, old.transaction_id, old.validation_id
                    ),
                )
            })?,
            None => fresh.next_back().ok_or_else(|| {
                ServiceError::precondition_field(
                    "action",
                    format!(
                        "retry needs a fresh validation: run transaction.control validate on {} (or patch.validate on proposal {} revision {}; one made after validation {}), then retry",
                        old.transaction_id, old.proposal_id, old.revision, old.validation_id
                    ),
                )
            })?,
        };
        let params = ApplyParams {
            workspace_id: p.workspace_id.clone(),
            proposal_id: old.proposal_id.clone(),
            validation_id: chosen.validation_id.clone(),
            idempotency_key: p.idempotency_key.clone(),
        };
        self.apply_locked(actor, worktree, &params, k, Some(old.transaction_id))
            .await
    }

    async fn compensate(
        &self,
        actor: &Actor,
        worktree: &std::path::Path,
        p: &TransactionControlParams,
        k: &Keyed,
    ) -> Result<crate::wire::CompensationReply, ServiceError> {
        let dir = self.ctx.data.layout.transactions();
        let id = p.transaction_id.clone();
        let wt = worktree.to_path_buf();
        let (rb, now, states) = tokio::task::spawn_blocking(move || {
            let rb = install::read_artifact(&dir, &id)?;
            let root = crate::beneath::Root::open(&wt).map_err(ServiceError::worktree)?;
            let states = install::inspect(&root, &rb)?;
            let now = rb
                .entries
                .iter()
                .map(|e| install::current(&root, &e.path))
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, ServiceError>((rb, now, states))
        })
        .await
        .expect("reading the rollback artifact does not panic")?;
        let later: Vec<&str> = states
            .iter()
            .filter(|s| s.state != PathState::Post)
            .map(|s| s.path.as_str())
            .collect();
        if !later.is_empty() {
            if p.allow_later_changes != Some(true) {
                return Err(ServiceError::precondition_field(
                    "allow_later_changes",
                    format!(
                        "applied_then_modified: {} changed after the apply; set allow_later_changes (with a reason) to revert them too",
                        later.join(", ")
                    ),
                ));
            }
            if p.reason.is_none() {
                return Err(ServiceError::invalid_field(
                    "reason",
                    "allow_later_changes needs a reason",
                ));
            }
        }
        // The reverse patch: from what the touched paths hold now to their pre-images.
        let repo = self.ctx.repo(&p.workspace_id).clone();
        let cap = self.ctx.config.max_patch_bytes;
        let entries = rb.entries.clone();
        let (patch, truncated) =
            tokio::task::spawn_blocking(move || -> Result<(Vec<u8>, bool), String> {
                let e = |x: crate::staging::StagingError| x.to_string();
                let empty = repo.empty_tree().map_err(e)?;
                let mut from = vec![];
                let mut to = vec![];
                for (entry, current) in entries.iter().zip(&now) {
                    from.push((entry.path.clone(), blob_of(&repo, current)?));
                    to.push((entry.path.clone(), blob_of(&repo, &entry.before)?));
                }
                let a = repo.edit_tree(&empty, &from).map_err(e)?;
                let b = repo.edit_tree(&empty, &to).map_err(e)?;
                repo.diff_bounded(&a, &b, cap).map_err(e)
            })
            .await
            .expect("diffing does not panic")
            .map_err(ServiceError::internal)?;
        if truncated {
            return Err(ServiceError::exhausted(format!(
                "the reverse patch exceeds max_patch_bytes {cap}"
            )));
        }
        if patch.is_empty() {
            return Err(ServiceError::precondition(
                "every touched path already holds its pre-image: nothing to compensate",
            ));
        }
        // One open compensation per transaction: a second request answers the first.
        if let Some(open) = self
            .ctx
            .data
            .store
            .open_compensation(&p.transaction_id)
            .await?
        {
            let row = self.proposals.proposal_in(&p.workspace_id, &open).await?;
            return Ok(crate::wire::CompensationReply {
                transaction_id: p.transaction_id.clone(),
                proposal: self.proposals.proposal_view(&row).await?,
            });
        }
        // Write claims on every touched path for the requesting member.
        let task = format!("compensate-{}", p.transaction_id);
        for (i, e) in rb.entries.iter().enumerate() {
            self.claims
                .claim_acquire(
                    actor,
                    ClaimAcquireParams {
                        workspace_id: p.workspace_id.clone(),
                        task_id: task.clone(),
                        session_id: None,
                        resource_id: format!("file:{}", e.path),
                        mode: crate::domain::claim::ClaimMode::Write,
                        ttl_seconds: None,
                        renewable: None,
                        resume_policy: None,
                        // They exist for the compensation: they end with it.
                        release_on: Some(crate::domain::claim::ReleaseOn::ProposalEnd),
                        rationale: Some(format!("compensating transaction {}", p.transaction_id)),
                        base_hash: None,
                        idempotency_key: k.derived(&format!("claim/{i}")),
                    },
                )
                .await?;
        }
        let proposal = self
            .proposals
            .create_proposal_as(
                actor,
                ProposalCreateParams {
                    workspace_id: p.workspace_id.clone(),
                    task_id: task,
                    session_id: None,
                    deliberation_id: None,
                    title: format!("Compensate transaction {}", p.transaction_id),
                    summary_md: format!(
                        "Restores the pre-images transaction {} replaced.{}",
                        p.transaction_id,
                        p.reason
                            .as_deref()
                            .map(|r| format!(" Reason: {r}"))
                            .unwrap_or_default()
                    ),
                    risk: Some(Risk::High),
                    patch: None,
                    patch_base64: Some(base64::Engine::encode(
                        &base64::engine::general_purpose::STANDARD,
                        &patch,
                    )),
                    affected_resources: None,
                    expected_tests: None,
                    rollback_notes: Some(format!(
                        "a compensation of {}; apply the original proposal again to undo it",
                        p.transaction_id
                    )),
                    base_revision: None,
                    idempotency_key: k.derived("proposal"),
                },
                Some(p.transaction_id.clone()),
            )
            .await?;
        Ok(crate::wire::CompensationReply {
            transaction_id: p.transaction_id.clone(),
            proposal: proposal.proposal,
        })
    }
}
