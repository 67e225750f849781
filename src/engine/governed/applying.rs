//! `patch.apply`, the transaction reads, and the recovery of interrupted applies.
//!
//! Under a per-workspace apply lock: recheck the validation (valid, complete, unexpired, for
//! the current revision), the verdict (approvable now, with the validation's test results),
//! every claim the validation recorded (still active, unexpired, the same fencing token) and
//! the pre-images (checked again by the installer, byte for byte). Then the journal: the
//! `prepared` row is committed before anything is staged, `installing` before the first
//! rename, `applied` (and the proposal `accepted`) after every path holds its post-image.

mod attesting;
pub mod recovery;

use super::requests::{Keyed, next_cursor, page_limit, parse_cursor};
use super::reviews::evidence_of;
use super::validation::Record as ValidationRecord;
use crate::config::Permission;
use crate::domain::claim::ClaimState;
use crate::domain::policy::evaluate;
use crate::domain::proposal::ProposalEvent;
use crate::domain::transaction::{FailureCode, TxEvent, TxState};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::{Applies, Claims, Proposals, Validations};
use crate::engine::idempotency::Prologue;
use crate::install::{self, Change, Image, Plan};
use crate::limits;
use crate::store::applies::{ApplyFacts, ApplyGate, Fence, GateRefusal, Move, TxRow};
use crate::wire::{
    ApplyParams, ApplyReply, PhasesReply, TransactionListParams, TransactionListReply,
    TransactionParams, TransactionReply,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The private part of a transaction row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TxRecord {
    applied_by: String,
    pub(super) paths: Vec<String>,
    head_before: Option<String>,
    head_after: Option<String>,
    claims: Vec<String>,
    approvals: Vec<String>,
    /// The failed or cancelled transaction this one retries (`transaction.control retry`).
    #[serde(default)]
    retry_of: Option<String>,
    test_verifications: Vec<String>,
    pub(super) rollback_sha256: Option<String>,
    /// Per path: (before, after) fingerprints once applied.
    pub(super) hashes: Vec<crate::wire::PathHashes>,
    pub(super) blocked_reason: Option<String>,
    created_at: String,
    updated_at: String,
    /// Once applied, when a signing key is configured: the signed statement of the apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attestation: Option<crate::attest::Envelope>,
}

impl Applies {
    pub(super) fn tx_record(t: &TxRow) -> Result<TxRecord, ServiceError> {
        serde_json::from_str(&t.record)
            .map_err(|e| ServiceError::record(format!("transaction {}", t.transaction_id), e))
    }

    /// Moves a transaction by `ev` with `r` as its new record (stamped now), its phase detail
    /// and event.
    pub(super) async fn advance(
        &self,
        transaction_id: &str,
        version: i64,
        ev: TxEvent,
        r: &mut TxRecord,
        actor: &str,
        detail: &str,
    ) -> Result<TxRow, ServiceError> {
        self.advance_with(transaction_id, version, ev, r, actor, detail, None, vec![])
            .await
    }

    /// [`Applies::advance`] with a control call's binding, and the claims to re-base when
    /// the move reaches `applied`.
    #[allow(clippy::too_many_arguments)] // one value each; a struct would only rename them
    pub(super) async fn advance_with(
        &self,
        transaction_id: &str,
        version: i64,
        ev: TxEvent,
        r: &mut TxRecord,
        actor: &str,
        detail: &str,
        binding: Option<crate::store::Binding>,
        rebase: Vec<(String, String)>,
    ) -> Result<TxRow, ServiceError> {
        r.updated_at = self.ctx.now_rfc3339();
        Ok(self
            .ctx
            .data
            .store
            .advance_transaction(Move {
                id: transaction_id.to_string(),
                expected_version: version,
                ev,
                record: serde_json::to_string(r).expect("a transaction record serializes"),
                actor: actor.to_string(),
                detail: crate::engine::request::stamp(detail),
                at: self.ctx.now_rfc3339(),
                binding,
                rebase,
            })
            .await?)
    }

    /// The transaction `t` retries, if any.
    pub(super) fn retried_of(t: &TxRow) -> Result<Option<String>, ServiceError> {
        Ok(Self::tx_record(t)?.retry_of)
    }

    fn tx_view(t: &TxRow) -> Result<crate::wire::TransactionView, ServiceError> {
        let r = Self::tx_record(t)?;
        Ok(crate::wire::TransactionView {
            transaction_id: t.transaction_id.clone(),
            workspace_id: t.workspace_id.clone(),
            proposal_id: t.proposal_id.clone(),
            revision: t.revision.clone(),
            validation_id: t.validation_id.clone(),
            status: t.status,
            version: t.version,
            applied_by: r.applied_by,
            paths: r.paths,
            hashes: r.hashes,
            head_before: r.head_before,
            head_after: r.head_after,
            claims: r.claims,
            approvals: r.approvals,
            test_verifications: r.test_verifications,
            rollback_sha256: r.rollback_sha256,
            blocked_reason: r.blocked_reason,
            retry_of: r.retry_of,
            created_at: r.created_at,
            updated_at: r.updated_at,
            attestation: r.attestation,
        })
    }

    pub(super) async fn tx_in(&self, workspace_id: &str, id: &str) -> Result<TxRow, ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "transaction {id:?} not found in workspace {workspace_id:?}"
            ))
        };
        let t = self
            .ctx
            .data
            .store
            .transaction(id)
            .await?
            .ok_or_else(not_found)?;
        if t.workspace_id != workspace_id {
            return Err(not_found());
        }
        Ok(t)
    }

    /// `patch.apply`: members with `apply`.
    pub async fn patch_apply(
        &self,
        actor: &Actor,
        p: ApplyParams,
    ) -> Result<ApplyReply, ServiceError> {
        if matches!(actor, Actor::Run { .. }) {
            return Err(ServiceError::PermissionDenied(
                "patch.apply is for members with apply, never a run token".into(),
            ));
        }
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Apply)?;
        let lock = self.apply_lock(&p.workspace_id)?;
        let _guard = lock.lock().await;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "patch.apply",
                &p.idempotency_key,
                &ApplyParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let t = self.tx_in(&p.workspace_id, &id).await?;
                return self.replayed_apply(&t).await;
            }
            Prologue::Fresh(k) => k,
        };
        self.apply_locked(actor, &worktree, &p, &k, None).await
    }

    /// The apply itself, under the workspace's apply lock (held by the caller): every
    /// recheck, then the journaled install. `k` binds the new transaction to the caller's
    /// key (`patch.apply`'s, or `transaction.control`'s for a retry of `retry_of`).
    pub(super) async fn apply_locked(
        &self,
        actor: &Actor,
        worktree: &std::path::Path,
        p: &ApplyParams,
        k: &Keyed,
        retry_of: Option<String>,
    ) -> Result<ApplyReply, ServiceError> {
        let (vrow, vrec) = self
            .validations
            .validation_in(&p.workspace_id, &p.validation_id)
            .await?;
        let prop = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        if vrow.proposal_id != prop.proposal_id {
            return Err(ServiceError::precondition_field(
                "validation_id",
                "the validation is of another proposal",
            ));
        }
        // What the validation itself says (fixed once it is complete).
        let view = self.validations.validation_state(&vrow, &vrec).await?;
        if !view.complete || !view.valid {
            let stages: Vec<String> = view
                .stages
                .iter()
                .filter(|s| s.name.decides_validity() && !s.state.passes())
                .map(|s| format!("{} {}: {}", s.name.as_str(), s.state.as_str(), s.reason))
                .collect();
            return Err(ServiceError::precondition_field(
                "validation_id",
                format!(
                    "the validation is not {}: {}",
                    if view.complete { "valid" } else { "complete" },
                    stages.join("; ")
                ),
            ));
        }
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::Apply)?;
        let tests = super::validation::test_evidence(&self.ctx, &vrec).await?;
        let paths = self.proposals.touched_paths(&vrow.revision).await?;
        let changes = self.post_images(&p.workspace_id, &vrec).await?;

        let transaction_id = format!("txn_{}", crate::ids::new_creation_key());
        // Held until this call returns: recovery (here or in `airlock recover`) skips it.
        let _owner = self
            .tx_lock(&transaction_id)?
            .ok_or_else(|| ServiceError::internal("a fresh transaction id is locked"))?;
        let at = self.ctx.now_rfc3339();
        let mut record = TxRecord {
            applied_by: actor.key(),
            paths: changes.iter().map(|c| c.path.clone()).collect(),
            head_before: vrec.worktree_head.clone(),
            head_after: None,
            claims: vrec.claims.iter().map(|c| c.claim_id.clone()).collect(),
            retry_of,
            approvals: vec![],
            test_verifications: vrec.test_verifications.clone(),
            rollback_sha256: None,
            hashes: vec![],
            blocked_reason: None,
            created_at: at.clone(),
            updated_at: at.clone(),
            attestation: None,
        };
        // The one decision: every gate is judged on the facts as committed, in the
        // transaction that commits `prepared` (and the fence that keeps them so).
        let gate = {
            let policy = ws.policy.clone();
            let held = vrec.claims.clone();
            let now = self.ctx.clock.now().unix_timestamp();
            let expires_at = vrec.expires_at.clone();
            let mut record = record.clone();
            Box::new(move |f: &ApplyFacts| -> Result<String, GateRefusal> {
                let refuse =
                    |field: Option<&'static str>, message: String| GateRefusal { field, message };
                let prop = &f.proposal;
                prop.status.on(ProposalEvent::Accept).map_err(|e| {
                    refuse(None, format!("{e}: only a proposal in review is applied"))
                })?;
                if f.validation.revision != prop.current_revision {
                    return Err(refuse(
                        Some("validation_id"),
                        format!(
                            "the validation is of revision {}, not the current {}",
                            f.validation.revision, prop.current_revision
                        ),
                    ));
                }
                if f.validation.expires_at <= now {
                    return Err(refuse(
                        Some("validation_id"),
                        format!("the validation expired at {expires_at}"),
                    ));
                }
                let risk = Proposals::record_of(prop)
                    .map_err(|e| refuse(None, e.to_string()))?
                    .risk;
                let verdict = evaluate(&policy, &evidence_of(&f.review, risk, paths, tests));
                if !verdict.approvable {
                    let unmet: Vec<String> = verdict
                        .requirements
                        .iter()
                        .filter(|r| !r.state.holds())
                        .map(|r| format!("{} {}: {}", r.name, r.state.as_str(), r.detail))
                        .collect();
                    return Err(refuse(
                        None,
                        format!(
                            "the policy verdict is not approvable now: {}",
                            unmet.join("; ")
                        ),
                    ));
                }
                for (h, (_, c)) in held.iter().zip(&f.claims) {
                    let why = match c {
                        None => Some("it no longer exists".to_string()),
                        Some(c) if c.status != ClaimState::Active => {
                            Some(format!("it is {}", c.status.as_str()))
                        }
                        Some(c) if c.fencing_token != h.fencing_token => Some(format!(
                            "it was re-granted with fencing token {} (the validation saw {})",
                            c.fencing_token, h.fencing_token
                        )),
                        Some(c) if c.expires_at <= now => Some("it expired".to_string()),
                        Some(c) if c.expires_at <= now + limits::APPLY_CLAIM_MARGIN_SECONDS => {
                            Some(format!(
                                "it expires in {} s, within the {} s an apply may take: extend it (claim.extend), then apply",
                                c.expires_at - now,
                                limits::APPLY_CLAIM_MARGIN_SECONDS
                            ))
                        }
                        Some(_) => None,
                    };
                    if let Some(why) = why {
                        return Err(refuse(
                            None,
                            format!(
                                "claim {} on {} (fencing token {}) is no longer the validated grant: {why}",
                                h.claim_id, h.resource_id, h.fencing_token
                            ),
                        ));
                    }
                }
                record.approvals = verdict
                    .requirements
                    .iter()
                    .flat_map(|r| r.evidence.clone())
                    .collect();
                Ok(serde_json::to_string(&record).expect("a record serializes"))
            }) as ApplyGate
        };
        let fence = Fence {
            claims: vrec.claims.iter().map(|c| c.claim_id.clone()).collect(),
            paths: vrec.pre_images.iter().map(|(p, _)| p.clone()).collect(),
        };
        let t = self
            .ctx
            .data
            .store
            .open_transaction(
                TxRow {
                    transaction_id: transaction_id.clone(),
                    workspace_id: p.workspace_id.clone(),
                    proposal_id: prop.proposal_id.clone(),
                    revision: vrow.revision.clone(),
                    validation_id: vrow.validation_id.clone(),
                    status: TxState::Prepared,
                    version: 1,
                    record: String::new(),
                    seq: 0,
                },
                fence,
                gate,
                &actor.key(),
                &crate::engine::request::stamp("{}"),
                &at,
                k.binding(&p.workspace_id, actor, &transaction_id),
            )
            .await?;
        record = Self::tx_record(&t)?;
        crate::crash::point(crate::crash::CrashPoint::ApplyAfterPrepared);
        let plan = Plan {
            transaction_id: transaction_id.clone(),
            head: vrec.worktree_head.clone(),
            changes,
        };
        let prepared = self.prepare_checked(worktree, &vrec, plan).await?;
        let rb = match prepared {
            Ok(rb) => rb,
            Err(why) => {
                // Nothing visible changed either way: the transaction fails, and the caller
                // hears a refusal as a precondition, a malfunction as one (its detail only in
                // the server log, since it can name host paths).
                let (reason, answer) = match why {
                    NotPrepared::Refused(reason) => {
                        let answer = ServiceError::precondition(format!(
                            "apply refused before anything changed: {reason}"
                        ));
                        (reason, answer)
                    }
                    NotPrepared::Failed(e) => {
                        tracing::error!(%transaction_id, error = %e, "apply could not stage");
                        (
                            "a malfunction while staging (the server log has it)".to_string(),
                            e,
                        )
                    }
                };
                let mut r = record.clone();
                r.blocked_reason = Some(reason.clone());
                self.advance(
                    &transaction_id,
                    t.version,
                    TxEvent::Fail,
                    &mut r,
                    &actor.key(),
                    &json!({"reason": reason, "failure_code": FailureCode::RefusedBeforeInstall})
                        .to_string(),
                )
                .await?;
                return Err(answer);
            }
        };
        crate::crash::point(crate::crash::CrashPoint::ApplyAfterStaged);
        let mut r = record.clone();
        r.rollback_sha256 = Some(rb.digest());
        let t = self
            .advance(
                &transaction_id,
                t.version,
                TxEvent::BeginInstall,
                &mut r,
                &actor.key(),
                &json!({"rollback_sha256": rb.digest()}).to_string(),
            )
            .await?;
        crate::crash::point(crate::crash::CrashPoint::ApplyAfterInstalling);
        let t = self
            .finish_install(worktree, t, r, rb, &actor.key())
            .await?;
        self.apply_reply(&t).await
    }

    /// After `prepared`: every path the validation read still holds the image it saw, no
    /// claim it relied on is stale (its resource changed since the grant, by anything but an
    /// apply under it), then [`install::prepare`] stages the post-images and writes the
    /// rollback artifact. `Ok(Err(reason))` is a refusal: nothing visible changed.
    async fn prepare_checked(
        &self,
        worktree: &std::path::Path,
        vrec: &ValidationRecord,
        plan: Plan,
    ) -> Result<Result<install::Rollback, NotPrepared>, ServiceError> {
        let expected = vrec.pre_images.clone();
        let wt = worktree.to_path_buf();
        let unchanged = tokio::task::spawn_blocking(move || -> Result<(), NotPrepared> {
            let root = crate::beneath::Root::open(&wt)
                .map_err(|e| NotPrepared::Failed(ServiceError::worktree(e)))?;
            for (path, fp) in &expected {
                let now = install::current(&root, path).map_err(NotPrepared::from)?;
                if now.fingerprint() != *fp {
                    return Err(NotPrepared::Refused(format!(
                        "{path:?} changed since it was validated"
                    )));
                }
            }
            Ok(())
        })
        .await
        .expect("reading pre-images does not panic");
        if let Err(why) = unchanged {
            return Ok(Err(why));
        }
        let mut relied = vec![];
        for h in &vrec.claims {
            if let Some(c) = self.ctx.data.store.claim(&h.claim_id).await? {
                relied.push(c);
            }
        }
        let stale = Validations::stale_among(worktree, &relied).await?;
        if !stale.is_empty() {
            return Ok(Err(NotPrepared::Refused(format!(
                "stale claims: the resources of {} changed since they were granted; reconcile or acquire them again, then validate",
                stale.join(", ")
            ))));
        }
        let expected = vrec.pre_images.clone();
        let dir = self.ctx.data.layout.transactions();
        let wt = worktree.to_path_buf();
        Ok(tokio::task::spawn_blocking(move || {
            let root = crate::beneath::Root::open(&wt)
                .map_err(|e| NotPrepared::Failed(ServiceError::worktree(e)))?;
            // The tree may have changed since validation (a link elsewhere now on the way).
            install::links_stay_inside(&root, &plan.changes).map_err(NotPrepared::Refused)?;
            install::prepare(&root, &plan, Some(&expected), &dir).map_err(NotPrepared::from)
        })
        .await
        .expect("prepare does not panic"))
    }

    /// The validation's post-images, read back from the blobs it stored and checked against
    /// their hashes.
    async fn post_images(
        &self,
        workspace_id: &str,
        vrec: &ValidationRecord,
    ) -> Result<Vec<Change>, ServiceError> {
        let repo = self.ctx.repo(workspace_id).clone();
        let posts = vrec.post_images.clone();
        tokio::task::spawn_blocking(move || -> Result<Vec<Change>, String> {
            posts
                .iter()
                .map(|pi| {
                    let after = match (&pi.fingerprint, &pi.blob) {
                        (install::Fingerprint::Absent, _) => Image::Absent,
                        (install::Fingerprint::File { executable, .. }, Some(b)) => Image::File {
                            executable: *executable,
                            bytes: repo.read_blob(b).map_err(|e| e.to_string())?,
                        },
                        (install::Fingerprint::Symlink { .. }, Some(b)) => Image::Symlink {
                            target: String::from_utf8_lossy(
                                &repo.read_blob(b).map_err(|e| e.to_string())?,
                            )
                            .into_owned(),
                        },
                        (_, None) => {
                            return Err(format!("{}: the post-image blob is missing", pi.path));
                        }
                    };
                    if after.fingerprint() != pi.fingerprint {
                        return Err(format!(
                            "{}: the stored post-image does not match its hash",
                            pi.path
                        ));
                    }
                    Ok(Change {
                        path: pi.path.clone(),
                        after,
                    })
                })
                .collect()
        })
        .await
        .expect("reading post-images does not panic")
        .map_err(ServiceError::internal)
    }

    /// Installs a transaction in `installing` and records it `applied`.
    pub(super) async fn finish_install(
        &self,
        worktree: &std::path::Path,
        t: TxRow,
        mut r: TxRecord,
        rb: install::Rollback,
        actor: &str,
    ) -> Result<TxRow, ServiceError> {
        let wt = worktree.to_path_buf();
        let rb2 = rb.clone();
        let installed = tokio::task::spawn_blocking(move || {
            let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
            install::finish_forward(&root, &rb2).map_err(|e| e.to_string())
        })
        .await
        .expect("install does not panic");
        if let Err(reason) = installed {
            r.blocked_reason = Some(reason.clone());
            self.advance(
                &t.transaction_id,
                t.version,
                TxEvent::Flag,
                &mut r,
                actor,
                &json!({"reason": reason, "failure_code": FailureCode::InstallStopped}).to_string(),
            )
            .await?;
            return Err(ServiceError::internal(format!(
                "the install of {} stopped and needs attention: {reason}",
                t.transaction_id
            )));
        }
        r.hashes = rb
            .entries
            .iter()
            .map(|e| crate::wire::PathHashes {
                path: e.path.clone(),
                before: e.before.fingerprint(),
                after: e.after.clone(),
            })
            .collect();
        r.head_after = {
            let repo = self.ctx.repo(&t.workspace_id).clone();
            tokio::task::spawn_blocking(move || repo.resolve_commit("HEAD").ok())
                .await
                .expect("rev-parse does not panic")
        };
        r.attestation = self.attest_apply(&t, &r).await?;
        // The claims this apply landed under now describe the files as it left them.
        let mut rebase = vec![];
        for id in &r.claims {
            let Some(c) = self.ctx.data.store.claim(id).await? else {
                continue;
            };
            if !c.mode.writes() {
                continue;
            }
            let resource = crate::domain::claim::ResourceId::parse(&c.resource_id)
                .map_err(ServiceError::internal)?;
            if let Ok(hash) = Claims::current_hash(worktree.to_path_buf(), resource).await {
                rebase.push((c.claim_id.clone(), hash.unwrap_or_default()));
            }
        }
        match self
            .advance_with(
                &t.transaction_id,
                t.version,
                TxEvent::Complete,
                &mut r,
                actor,
                "{}",
                None,
                rebase,
            )
            .await
        {
            // The files are installed but the proposal left review (no fence should let that
            // happen): flagged, never left `installing`, so nothing waits on it forever.
            Err(ServiceError::FailedPrecondition(why)) => {
                r.blocked_reason = Some(why.message.clone());
                self.advance(
                    &t.transaction_id,
                    t.version,
                    TxEvent::Flag,
                    &mut r,
                    actor,
                    &json!({"reason": why.message, "failure_code": FailureCode::ProposalUnsettled})
                        .to_string(),
                )
                .await?;
                Err(ServiceError::precondition(format!(
                    "transaction {} installed every post-image, but {}; it is needs_attention: transaction.control resolve settles it",
                    t.transaction_id, why.message
                )))
            }
            other => other,
        }
    }

    /// What a replayed apply answers: the same refusal when the first call was refused before
    /// anything changed, else the transaction as it is now.
    pub(super) async fn replayed_apply(&self, t: &TxRow) -> Result<ApplyReply, ServiceError> {
        if t.status == TxState::Failed {
            let why = Self::tx_record(t)?.blocked_reason.unwrap_or_default();
            return Err(ServiceError::precondition(format!(
                "apply refused before anything changed: {why}"
            )));
        }
        self.apply_reply(t).await
    }

    pub(super) async fn apply_reply(&self, t: &TxRow) -> Result<ApplyReply, ServiceError> {
        let prop = self
            .proposals
            .proposal_in(&t.workspace_id, &t.proposal_id)
            .await?;
        Ok(ApplyReply {
            transaction: Self::tx_view(t)?,
            proposal: self.proposals.proposal_view(&prop).await?,
        })
    }

    /// `transaction.show`.
    pub async fn transaction_show(
        &self,
        actor: &Actor,
        p: TransactionParams,
    ) -> Result<TransactionReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let t = self.tx_in(&p.workspace_id, &p.transaction_id).await?;
        Ok(TransactionReply {
            transaction: Self::tx_view(&t)?,
        })
    }

    /// `transaction.phases`: oldest first.
    pub async fn transaction_phases(
        &self,
        actor: &Actor,
        p: TransactionParams,
    ) -> Result<PhasesReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let t = self.tx_in(&p.workspace_id, &p.transaction_id).await?;
        let rows = self
            .ctx
            .data
            .store
            .transaction_phases(&t.transaction_id)
            .await?;
        // A phase lasts until the next one begins; the last one is where the transaction is.
        let mut phases = Vec::with_capacity(rows.len());
        for (i, (phase, actor, detail, at)) in rows.iter().enumerate() {
            let phase = TxState::parse(phase).ok_or_else(|| {
                ServiceError::internal(format!("transaction phase {phase:?} is not a state"))
            })?;
            let detail = serde_json::from_str::<Value>(detail).unwrap_or(Value::Null);
            let text = |k: &str| detail.get(k).and_then(Value::as_str).map(str::to_string);
            phases.push(crate::wire::PhaseView {
                phase,
                actor: actor.clone(),
                at: at.clone(),
                started_at: at.clone(),
                ended_at: rows.get(i + 1).map(|n| n.3.clone()),
                reason: text("reason"),
                request_id: text("request_id"),
                failure_code: detail
                    .get("failure_code")
                    .and_then(|c| serde_json::from_value(c.clone()).ok()),
                detail,
            });
        }
        Ok(PhasesReply {
            transaction_id: t.transaction_id,
            phases,
        })
    }

    /// `transaction.list`: newest first.
    pub async fn transaction_list(
        &self,
        actor: &Actor,
        p: TransactionListParams,
    ) -> Result<TransactionListReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = page_limit(p.limit)?;
        let before = parse_cursor("txc_", p.cursor.as_deref())?;
        let rows = self
            .ctx
            .data
            .store
            .list_transactions(&p.workspace_id, p.status, p.proposal_id, before, limit)
            .await?;
        let items = rows
            .iter()
            .map(Self::tx_view)
            .collect::<Result<Vec<_>, _>>()?;
        let next = next_cursor("txc_", rows.len(), limit, rows.last().map(|t| t.seq));
        Ok(TransactionListReply {
            transactions: items,
            next_cursor: next,
        })
    }
}

/// Why apply's preparation stopped before anything visible changed.
enum NotPrepared {
    /// The worktree, its links or the claims refuse: a precondition the caller can act on.
    Refused(String),
    /// Reading the worktree or staging failed: a malfunction, with its typed source.
    Failed(ServiceError),
}

impl From<install::ApplyError> for NotPrepared {
    fn from(e: install::ApplyError) -> Self {
        match e {
            e @ install::ApplyError::Io { .. } => NotPrepared::Failed(ServiceError::from(e)),
            e @ (install::ApplyError::Refused { .. }
            | install::ApplyError::Artifact(_)
            | install::ApplyError::ArtifactMissing(_)) => NotPrepared::Refused(e.to_string()),
        }
    }
}
