//! Recovery of interrupted applies, at every start, every maintenance pass and `airlock
//! recover`: each open transaction is judged from its files. `installing` rolls forward from
//! the verified staged files, `prepared` is undone, anything that is neither pre- nor
//! post-image becomes `needs_attention` with the paths named, and a corrupt rollback artifact
//! is quarantined, never used. A transaction whose apply is still live (its lock held) is
//! left alone. `transaction.recovery` answers the same judgement for one transaction.

use super::TxRecord;
use crate::config::Permission;
use crate::domain::transaction::FailureCode;
use crate::domain::transaction::{TxEvent, TxState};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Applies;
use crate::install;
use crate::install::PathState;
use crate::store::applies::TxRow;
use crate::wire::TransactionParams;
use serde::Serialize;
use serde_json::json;

impl Applies {
    /// A preparation recovery took back (`undone` is `Ok`) cancels `t`; one it could not take
    /// back flags it `needs_attention` with the reason and `code` in its phase detail.
    async fn settle_preparation(
        &self,
        t: &TxRow,
        mut r: TxRecord,
        undone: Result<(), String>,
        mut detail: serde_json::Value,
        code: FailureCode,
    ) -> Result<(), ServiceError> {
        let ev = match undone {
            Ok(()) => TxEvent::Cancel,
            Err(reason) => {
                detail["reason"] = json!(reason);
                detail["failure_code"] = json!(code);
                r.blocked_reason = Some(reason);
                TxEvent::Flag
            }
        };
        self.advance(
            &t.transaction_id,
            t.version,
            ev,
            &mut r,
            "system:recovery",
            &detail.to_string(),
        )
        .await
        .map(|_| ())
    }

    /// Moves a corrupt rollback artifact (present but unreadable, failing its checksum or
    /// naming another transaction) to the quarantine; returns its name there.
    async fn quarantine_if_corrupt(
        &self,
        transaction_id: &str,
        e: &install::ApplyError,
    ) -> Result<Option<String>, ServiceError> {
        if matches!(e, install::ApplyError::ArtifactMissing(_)) {
            return Ok(None);
        }
        let layout = self.ctx.data.layout.clone();
        let id = transaction_id.to_string();
        let q = tokio::task::spawn_blocking(move || {
            install::quarantine_artifact(
                &layout.transactions(),
                &layout.transactions_quarantine(),
                &id,
            )
        })
        .await
        .expect("quarantine does not panic")
        .map_err(|e| ServiceError::internal(e.to_string()))?;
        tracing::error!(transaction = %transaction_id, quarantined = %q, error = %e, "a corrupt rollback artifact was quarantined");
        Ok(Some(q))
    }

    /// Start-up and maintenance: finishes every interrupted apply from the files. `installing`
    /// rolls forward, `prepared` is undone, and anything that is neither pre- nor post-image
    /// becomes `needs_attention` with the paths named. Returns how many were settled.
    pub async fn recover_transactions(&self) -> Result<TxRecovery, ServiceError> {
        let mut out = TxRecovery::default();
        for t in self.ctx.data.store.open_transactions().await? {
            let Some(ws) = self.ctx.config.workspaces.get(&t.workspace_id) else {
                continue;
            };
            let Some(worktree) = ws.worktree.clone() else {
                continue;
            };
            let lock = self.apply_lock(&t.workspace_id)?;
            let _guard = lock.lock().await;
            // An apply in progress (in this process or another on the same data dir) holds
            // its transaction's lock: never recovered under its feet.
            let Some(_owner) = self.tx_lock(&t.transaction_id)? else {
                out.live.push(t.transaction_id.clone());
                continue;
            };
            let Some(t) = self.ctx.data.store.transaction(&t.transaction_id).await? else {
                continue;
            };
            if !t.status.is_open() {
                continue;
            }
            let mut r = Self::tx_record(&t)?;
            let dir = self.ctx.data.layout.transactions();
            let id = t.transaction_id.clone();
            let artifact = tokio::task::spawn_blocking(move || install::read_artifact(&dir, &id))
                .await
                .expect("reading an artifact does not panic");
            let system = "system:recovery";
            match (t.status, artifact) {
                (TxState::Installing, Ok(rb)) => {
                    self.finish_install(&worktree, t.clone(), r, rb, system).await.map(|_| ()).or_else(|e| {
                        tracing::error!(transaction = %t.transaction_id, error = %e, "an interrupted apply needs attention");
                        Ok::<(), ServiceError>(())
                    })?;
                }
                (TxState::Prepared, Ok(rb)) => {
                    let wt = worktree.clone();
                    let undone = tokio::task::spawn_blocking(move || {
                        let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
                        install::undo_prepare(&root, &rb).map_err(|e| e.to_string())
                    })
                    .await
                    .expect("undo does not panic");
                    self.settle_preparation(
                        &t,
                        r,
                        undone,
                        json!({"recovered": true}),
                        FailureCode::UndoRefused,
                    )
                    .await?;
                }
                (TxState::Prepared, Err(e)) => {
                    // Interrupted before the artifact was durable (or it is corrupt: then it
                    // is quarantined, never used). Nothing visible changed before
                    // `installing`; only staged temp files (by their deterministic names) can
                    // exist: remove them, beneath the worktree.
                    let quarantined = self.quarantine_if_corrupt(&t.transaction_id, &e).await?;
                    let wt = worktree.clone();
                    let paths = r.paths.clone();
                    let id = t.transaction_id.clone();
                    let removed = tokio::task::spawn_blocking(move || {
                        let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
                        install::remove_staged(&root, &id, &paths).map_err(|e| e.to_string())
                    })
                    .await
                    .expect("cleanup does not panic")
                    .map(|names| out.staged_files_removed.extend(names));
                    let artifact = quarantined
                        .as_ref()
                        .map_or("absent".to_string(), |q| format!("quarantined as {q}"));
                    self.settle_preparation(
                        &t,
                        r,
                        removed,
                        json!({"recovered": true, "artifact": artifact}),
                        FailureCode::CleanupFailed,
                    )
                    .await?;
                }
                (TxState::Installing, Err(e)) => {
                    let quarantined = self.quarantine_if_corrupt(&t.transaction_id, &e).await?;
                    r.blocked_reason = Some(format!(
                        "the rollback artifact is unusable ({e}){}: the touched paths are left as they are",
                        quarantined
                            .map(|q| format!(", quarantined as {q}"))
                            .unwrap_or_default()
                    ));
                    let detail = json!({"recovered": true, "reason": r.blocked_reason,
                                        "failure_code": FailureCode::ArtifactUnusable})
                    .to_string();
                    self.advance(
                        &t.transaction_id,
                        t.version,
                        TxEvent::Flag,
                        &mut r,
                        system,
                        &detail,
                    )
                    .await?;
                }
                (
                    TxState::Applied
                    | TxState::RolledBack
                    | TxState::Cancelled
                    | TxState::Failed
                    | TxState::NeedsAttention,
                    _,
                ) => continue,
            }
            if let Some(now) = self.ctx.data.store.transaction(&t.transaction_id).await? {
                out.settled.push(TxSettled {
                    transaction_id: now.transaction_id,
                    status: now.status,
                });
            }
        }
        out.artifact_temp_files_removed = self.sweep_rollback_temps().await?;
        Ok(out)
    }

    /// Removes the temp files of rollback artifact writes a crash interrupted
    /// (`.<txn>.rollback.json.tmp.<key>`), unless that transaction's apply is live.
    async fn sweep_rollback_temps(&self) -> Result<Vec<String>, ServiceError> {
        let dir = self.ctx.data.layout.transactions();
        let names = tokio::task::spawn_blocking(move || crate::artifacts::temp_files(&dir))
            .await
            .expect("listing a directory does not panic")
            .map_err(|e| ServiceError::artifact("list rollback temp files", e))?;
        let mut removed = vec![];
        for name in names {
            let txn = name
                .trim_start_matches('.')
                .split(".rollback.json")
                .next()
                .unwrap_or_default()
                .to_string();
            // A live apply may be writing it right now.
            if !txn.starts_with("txn_") || self.tx_lock(&txn)?.is_none() {
                continue;
            }
            let path = self.ctx.data.layout.transactions().join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => removed.push(name),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ServiceError::io("remove a rollback temp file", e)),
            }
        }
        if !removed.is_empty() {
            let dir = self.ctx.data.layout.transactions();
            tokio::task::spawn_blocking(move || crate::artifacts::fsync_dir(&dir))
                .await
                .expect("fsync does not panic")
                .map_err(|e| ServiceError::artifact("fsync the transactions directory", e))?;
            tracing::warn!(files = ?removed, "removed temp files of interrupted rollback artifact writes");
        }
        Ok(removed)
    }

    /// The lock an apply holds on its transaction while it runs (a `flock`, released by the
    /// kernel however the process dies); `None` when a live apply holds it.
    pub(super) fn tx_lock(
        &self,
        transaction_id: &str,
    ) -> Result<Option<crate::engine::WorkerLock>, ServiceError> {
        crate::engine::WorkerLock::try_acquire(&self.ctx.data.lock_path(transaction_id)).map_err(
            |e| ServiceError::internal(format!("the lock of transaction {transaction_id}: {e}")),
        )
    }
}

/// What one recovery pass did to interrupted applies (printed by `airlock recover`).
#[derive(Debug, Default, Serialize)]
pub struct TxRecovery {
    /// Transactions moved out of `prepared` or `installing`, with where they ended.
    pub settled: Vec<TxSettled>,
    /// Open transactions skipped because a live apply holds their lock.
    pub live: Vec<String>,
    /// Staged temp files removed from worktrees (worktree-relative paths).
    pub staged_files_removed: Vec<String>,
    /// Temp files of rollback artifacts whose write was interrupted (file names).
    pub artifact_temp_files_removed: Vec<String>,
}

/// One transaction a recovery pass settled.
#[derive(Debug, Serialize)]
pub struct TxSettled {
    pub transaction_id: String,
    pub status: TxState,
}

impl Applies {
    /// `transaction.recovery`: each touched path's state from the files, the repository state
    /// and what control would accept now.
    pub async fn transaction_recovery(
        &self,
        actor: &Actor,
        p: TransactionParams,
    ) -> Result<crate::wire::RecoveryView, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let t = self.tx_in(&p.workspace_id, &p.transaction_id).await?;
        let r = Self::tx_record(&t)?;
        let dir = self.ctx.data.layout.transactions();
        let id = t.transaction_id.clone();
        let inspected = tokio::task::spawn_blocking(move || {
            let rb = install::read_artifact(&dir, &id)?;
            let root = crate::beneath::Root::open(&worktree)
                .map_err(|e| install::ApplyError::Artifact(format!("the worktree: {e}")))?;
            install::inspect(&root, &rb)
        })
        .await
        .expect("inspection does not panic");
        // Without an artifact, only the journal speaks: nothing visible changes before
        // `installing`, so a transaction that never got there did not start.
        let never_installed = matches!(
            t.status,
            TxState::Prepared | TxState::Failed | TxState::Cancelled
        );
        use crate::wire::RepositoryState as R;
        // The artifact is named by the digest the journal recorded, never by a host path.
        let named = |e: install::ApplyError| {
            let digest = r
                .rollback_sha256
                .as_deref()
                .map_or("never recorded".to_string(), |d| format!("sha256 {d}"));
            format!("{e} (rollback artifact digest: {digest})")
        };
        let (paths, state, artifact_error) = match inspected {
            Err(e @ install::ApplyError::ArtifactMissing(_)) if never_installed => {
                (vec![], R::NotStarted, Some(named(e)))
            }
            Err(e) => (vec![], R::Unknown, Some(named(e))),
            Ok(reports) => {
                let all = |s: PathState| reports.iter().all(|r| r.state == s);
                let state = if all(PathState::Post) {
                    if t.status == TxState::Applied {
                        R::Applied
                    } else {
                        R::PartiallyApplied
                    }
                } else if reports
                    .iter()
                    .all(|r| matches!(r.state, PathState::Pre | PathState::StagedOnly))
                {
                    R::NotStarted
                } else if reports.iter().any(|r| r.state == PathState::Other) {
                    if t.status == TxState::Applied {
                        R::AppliedThenModified
                    } else {
                        R::Unknown
                    }
                } else {
                    R::PartiallyApplied
                };
                (reports, state, None)
            }
        };
        Ok(crate::wire::RecoveryView {
            transaction_id: t.transaction_id.clone(),
            status: t.status,
            repository_state: state,
            paths,
            actions: t.status.actions().to_vec(),
            blocked_reason: r.blocked_reason,
            artifact_error,
        })
    }
}
