//! `transaction.control` (issue 13): `cancel` undoes a transaction left in `prepared`;
//! `compensate` files the reverse of an applied transaction as a new high-risk proposal by
//! the requesting member, built from the rollback artifact against the current files, with
//! write claims on the touched paths, so it goes through validation and policy like any
//! other change. `retry` applies a fresh validation of the same revision (made after the
//! retried transaction's) as a new transaction linked to the failed or cancelled one.

use super::claims::Keyed;
use crate::apply::{self, Image, PathState};
use crate::config::Permission;
use crate::domain::git::FileMode;
use crate::domain::proposal::Risk;
use crate::domain::transaction::{ControlAction, TxEvent, TxState};
use crate::engine::service::{Actor, Service, ServiceError};
use crate::wire::{
    ApplyParams, ClaimAcquireParams, ProposalCreateParams, TransactionControlParams,
    TransactionParams,
};
use serde_json::{Value, json};

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

impl Service {
    /// `transaction.control`: members with `apply`.
    pub async fn transaction_control(
        &self,
        actor: &Actor,
        p: TransactionControlParams,
    ) -> Result<Value, ServiceError> {
        if matches!(actor, Actor::Run { .. }) {
            return Err(ServiceError::PermissionDenied(
                "transaction.control is for members with apply".into(),
            ));
        }
        let worktree = self.governed(actor, &p.workspace_id, Permission::Apply)?;
        let k = Keyed::new(
            "transaction.control",
            &p.idempotency_key,
            &TransactionControlParams {
                idempotency_key: String::new(),
                ..p.clone()
            },
        )?;
        if let Some(r) = &p.reason {
            super::claims::check_text("reason", r, true)?;
        }
        if p.validation_id.is_some() && p.action != ControlAction::Retry {
            return Err(ServiceError::invalid_field(
                "validation_id",
                "only retry takes a validation_id",
            ));
        }
        let lock = self.candidate_lock(&format!("apply/{}", p.workspace_id));
        let _guard = lock.lock().await;
        let show = TransactionParams {
            workspace_id: p.workspace_id.clone(),
            transaction_id: p.transaction_id.clone(),
        };
        // A replay answers what the first call did (compensate replays through the keys it
        // derives for its claims and proposal).
        if let Some(id) = self.replay_of(&p.workspace_id, actor, &k).await? {
            return match p.action {
                ControlAction::Retry => {
                    let t = self.tx_in(&p.workspace_id, &id).await?;
                    self.replayed_apply(&t).await
                }
                ControlAction::Cancel | ControlAction::Compensate => {
                    self.transaction_show(actor, show).await
                }
            };
        }
        let t = self.transaction_show(actor, show.clone()).await?;
        let status: TxState = serde_json::from_value(t["transaction"]["status"].clone())
            .map_err(|e| ServiceError::record("a transaction status", e))?;
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
                tokio::task::spawn_blocking(move || {
                    let rb = apply::read_artifact(&dir, &id).map_err(|e| e.to_string())?;
                    let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
                    apply::undo_prepare(&root, &rb).map_err(|e| e.to_string())
                })
                .await
                .expect("undo does not panic")
                .map_err(ServiceError::precondition)?;
                let row = self
                    .ctx
                    .data
                    .store
                    .transaction(&p.transaction_id)
                    .await?
                    .ok_or_else(|| ServiceError::internal("the transaction is gone"))?;
                self.ctx
                    .data
                    .store
                    .advance_transaction(
                        &row.transaction_id,
                        row.version,
                        TxEvent::Cancel,
                        row.record.clone(),
                        &actor.key(),
                        &crate::engine::request::stamp(&json!({"reason": p.reason}).to_string()),
                        &self.now_rfc3339(),
                        Some(k.binding(&p.workspace_id, actor, &p.transaction_id)),
                    )
                    .await?;
                self.transaction_show(actor, show).await
            }
            ControlAction::Compensate => self.compensate(actor, &worktree, &p, &k).await,
            ControlAction::Retry => self.retry(actor, &worktree, &p, &k).await,
        }
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
    ) -> Result<Value, ServiceError> {
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
                        "retry needs a fresh validation: run patch.validate on proposal {} revision {} (made after {}'s validation {}), then retry",
                        old.proposal_id, old.revision, old.transaction_id, old.validation_id
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
    ) -> Result<Value, ServiceError> {
        let dir = self.ctx.data.layout.transactions();
        let id = p.transaction_id.clone();
        let wt = worktree.to_path_buf();
        let (rb, now, states) = tokio::task::spawn_blocking(move || {
            let rb = apply::read_artifact(&dir, &id).map_err(|e| e.to_string())?;
            let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
            let states = apply::inspect(&root, &rb).map_err(|e| e.to_string())?;
            let now = rb
                .entries
                .iter()
                .map(|e| apply::current(&root, &e.path).map_err(|x| x.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, String>((rb, now, states))
        })
        .await
        .expect("reading the rollback artifact does not panic")
        .map_err(ServiceError::precondition)?;
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
        let repo = self.repo(&p.workspace_id).clone();
        let cap = self.ctx.config.max_patch_bytes;
        let entries = rb.entries.clone();
        let (patch, truncated) =
            tokio::task::spawn_blocking(move || -> Result<(String, bool), String> {
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
        // Write claims on every touched path for the requesting member.
        let task = format!("compensate-{}", p.transaction_id);
        for (i, e) in rb.entries.iter().enumerate() {
            self.claim_acquire(
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
                    rationale: Some(format!("compensating transaction {}", p.transaction_id)),
                    base_hash: None,
                    idempotency_key: format!("{}/claim/{i}", k.key),
                },
            )
            .await?;
        }
        let proposal = self
            .proposal_create(
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
                    patch,
                    affected_resources: None,
                    expected_tests: None,
                    rollback_notes: Some(format!(
                        "a compensation of {}; apply the original proposal again to undo it",
                        p.transaction_id
                    )),
                    base_revision: None,
                    idempotency_key: format!("{}/proposal", k.key),
                },
            )
            .await?;
        let id = proposal["proposal"]["proposal_id"]
            .as_str()
            .ok_or_else(|| ServiceError::internal("proposal.create answered no proposal_id"))?;
        let row = self.proposal_in(&p.workspace_id, id).await?;
        Ok(json!(crate::wire::CompensationReply {
            transaction_id: p.transaction_id.clone(),
            proposal: self.proposal_view(&row).await?,
        }))
    }
}
