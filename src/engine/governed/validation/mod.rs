//! `patch.validate` and `patch.validation_show`: a probe of one revision with no
//! side effect on claims or resources. Stages: `claims`, `artifact`, `parse`, `coverage`,
//! `dry_run` (Git applies the patch **inside a sandbox container** to a scratch index holding
//! only the touched paths' current bytes; trusted code harvests the post-images the job wrote
//! and checks that git changed exactly the paths the parser found), `tests` (each expected
//! test runs as a verification against a private commit of the worktree's HEAD tree with the
//! post-images, asynchronously) and `policy` (reported).

use crate::config::Permission;
use crate::domain::claim::{ClaimState, ResourceId};
use crate::domain::validation::{StageEvent, StageName, StageState};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::{Claims, Proposals, Validations};
use crate::engine::idempotency::Prologue;
use crate::install::Fingerprint;
use crate::patch::coverage::Held;
use crate::store::applies::ValidationRow;
use crate::verification::Status;
use crate::wire::{ValidateParams, ValidationShowParams};
use serde::{Deserialize, Serialize};
use std::time::Instant;

pub mod compare;
mod sandboxed;

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct Stage {
    pub(super) name: StageName,
    pub(super) state: StageState,
    pub(super) reason: String,
    pub(super) duration_ms: u64,
}

/// A claim the validation relied on, with the token apply must still see.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct HeldClaim {
    pub(super) claim_id: String,
    pub(super) resource_id: String,
    pub(super) fencing_token: i64,
}

/// A post-image as the validation stored it: files and symlink targets as blobs in the
/// worktree's object store (retained by the validation's private ref).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PostImage {
    pub(super) path: String,
    pub(super) fingerprint: Fingerprint,
    pub(super) blob: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Record {
    pub(super) validation_id: String,
    pub(super) proposal_id: String,
    pub(super) revision: String,
    pub(super) requested_by: String,
    pub(super) created_at: String,
    pub(super) expires_at: String,
    pub(super) worktree_head: Option<String>,
    pub(super) stages: Vec<Stage>,
    pub(super) claims: Vec<HeldClaim>,
    pub(super) stale_claims: Vec<String>,
    pub(super) pre_images: Vec<(String, Fingerprint)>,
    pub(super) post_images: Vec<PostImage>,
    pub(super) dry_run_verification: Option<String>,
    /// Every test that ran: the author's expected tests, then the policy's required checks.
    pub(super) test_verifications: Vec<String>,
    /// The required checks among them, by name.
    #[serde(default)]
    pub(super) checks: Vec<CheckRun>,
    pub(super) tests_commit: Option<String>,
    /// The transaction whose retry this validation was made for (`transaction.control
    /// validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) for_transaction: Option<String>,
}

/// A required check a validation ran, and its verification.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub(super) struct CheckRun {
    pub(super) name: String,
    pub(super) verification_id: String,
}

/// A validation as every validation method answers it: `valid` once every stage but policy
/// executed or was skipped, `tests` as the verifications stand now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ValidationView {
    validation_id: String,
    proposal_id: String,
    revision: String,
    requested_by: String,
    /// The transaction whose retry it was made for (`transaction.control validate`).
    for_transaction_id: Option<String>,
    pub(in crate::engine::governed) valid: bool,
    pub(in crate::engine::governed) complete: bool,
    expired: bool,
    pub(in crate::engine::governed) stages: Vec<Stage>,
    claims: Vec<HeldClaim>,
    stale_claims: Vec<String>,
    worktree_head: Option<String>,
    pre_images: Vec<PathImage>,
    post_images: Vec<PathImage>,
    dry_run_verification: Option<String>,
    test_verifications: Vec<String>,
    /// The policy's required checks among `test_verifications`, by name.
    checks: Vec<CheckRun>,
    tests: Vec<crate::verification::Verification>,
    created_at: String,
    expires_at: String,
}

/// `patch.validate`'s reply (and `transaction.control validate`'s).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ValidationReply {
    pub validation: ValidationView,
}

/// A path and what it holds (before the apply, or after it).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
struct PathImage {
    path: String,
    image: crate::install::Fingerprint,
}

fn stage(name: StageName, event: StageEvent, reason: impl Into<String>, t: Instant) -> Stage {
    Stage {
        name,
        state: StageState::begin(event),
        reason: reason.into(),
        duration_ms: t.elapsed().as_millis() as u64,
    }
}

impl Validations {
    /// The claims among `held` whose resource changed since the grant: its hash now differs
    /// from the hash recorded with the grant (an unreadable resource counts as changed).
    pub(super) async fn stale_among(
        worktree: &std::path::Path,
        held: &[crate::store::claims::ClaimRow],
    ) -> Result<Vec<String>, ServiceError> {
        let mut stale = vec![];
        for c in held {
            let r: super::claims::Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record("a claim record", e))?;
            let resource = ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
            let current = Claims::current_hash(worktree.to_path_buf(), resource)
                .await
                .ok()
                .flatten();
            if current.unwrap_or_default() != r.base_hash.unwrap_or_default() {
                stale.push(c.claim_id.clone());
            }
        }
        Ok(stale)
    }

    /// The stored validation of `workspace_id`, or `not_found`.
    pub(super) async fn validation_in(
        &self,
        workspace_id: &str,
        validation_id: &str,
    ) -> Result<(ValidationRow, Record), ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "validation {validation_id:?} not found in workspace {workspace_id:?}"
            ))
        };
        let row = self
            .ctx
            .data
            .store
            .validation(validation_id)
            .await?
            .ok_or_else(not_found)?;
        if row.workspace_id != workspace_id {
            return Err(not_found());
        }
        let rec: Record = serde_json::from_str(&row.record)
            .map_err(|e| ServiceError::record(format!("validation {validation_id}"), e))?;
        Ok((row, rec))
    }

    /// The validation as the API shows it (the tests stage as it is now), in its reply.
    pub(super) async fn validation_reply(
        &self,
        row: &ValidationRow,
        rec: &Record,
    ) -> Result<ValidationReply, ServiceError> {
        Ok(ValidationReply {
            validation: self.validation_state(row, rec).await?,
        })
    }

    /// The validation as it stands now (the tests stage from its verifications).
    pub(super) async fn validation_state(
        &self,
        row: &ValidationRow,
        rec: &Record,
    ) -> Result<ValidationView, ServiceError> {
        let (tstate, treason, _) = tests_state(&self.ctx, rec).await?;
        let mut stages = rec.stages.clone();
        if let Some(t) = stages.iter_mut().find(|s| s.name == StageName::Tests)
            && t.state == StageState::Running
        {
            let event = match tstate {
                StageState::Running => StageEvent::Start,
                StageState::Executed => StageEvent::Pass,
                StageState::Failed => StageEvent::Fail,
                StageState::Skipped => StageEvent::Skip,
            };
            t.state = t.state.on(event)?;
            t.reason = treason;
        }
        let (complete, valid) = crate::domain::validation::judge(
            &stages.iter().map(|s| (s.name, s.state)).collect::<Vec<_>>(),
        );
        let now = self.ctx.clock.now().unix_timestamp();
        let mut tests = vec![];
        for id in &rec.test_verifications {
            if let Some(v) = self.ctx.data.store.get(id).await? {
                tests.push(v);
            }
        }
        Ok(ValidationView {
            validation_id: rec.validation_id.clone(),
            proposal_id: rec.proposal_id.clone(),
            revision: rec.revision.clone(),
            requested_by: rec.requested_by.clone(),
            for_transaction_id: rec.for_transaction.clone(),
            valid,
            complete,
            expired: row.expires_at <= now,
            stages,
            claims: rec.claims.clone(),
            stale_claims: rec.stale_claims.clone(),
            worktree_head: rec.worktree_head.clone(),
            pre_images: rec
                .pre_images
                .iter()
                .map(|(p, f)| PathImage {
                    path: p.clone(),
                    image: f.clone(),
                })
                .collect(),
            post_images: rec
                .post_images
                .iter()
                .map(|p| PathImage {
                    path: p.path.clone(),
                    image: p.fingerprint.clone(),
                })
                .collect(),
            dry_run_verification: rec.dry_run_verification.clone(),
            test_verifications: rec.test_verifications.clone(),
            checks: rec.checks.clone(),
            tests,
            created_at: rec.created_at.clone(),
            expires_at: rec.expires_at.clone(),
        })
    }

    /// `patch.validation_show`.
    pub async fn validation_show(
        &self,
        actor: &Actor,
        p: ValidationShowParams,
    ) -> Result<ValidationReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let (row, rec) = self
            .validation_in(&p.workspace_id, &p.validation_id)
            .await?;
        self.validation_reply(&row, &rec).await
    }

    /// A proposal's validations as the API shows them, oldest first (the web page's list).
    pub async fn validation_list(
        &self,
        actor: &Actor,
        workspace_id: &str,
        proposal_id: &str,
    ) -> Result<Vec<ValidationView>, ServiceError> {
        self.ctx.governed(actor, workspace_id, Permission::View)?;
        let mut out = vec![];
        for row in self.ctx.data.store.validations_of(proposal_id).await? {
            if row.workspace_id != workspace_id {
                continue;
            }
            let (row, rec) = self.validation_in(workspace_id, &row.validation_id).await?;
            out.push(self.validation_state(&row, &rec).await?);
        }
        Ok(out)
    }

    /// `patch.validate`: permission `apply`, or the proposal's author.
    pub async fn patch_validate(
        &self,
        actor: &Actor,
        p: ValidateParams,
    ) -> Result<ValidationReply, ServiceError> {
        self.validate_for(actor, p, None).await
    }

    /// [`Validations::patch_validate`], recording the transaction whose retry it is made for.
    pub(super) async fn validate_for(
        &self,
        actor: &Actor,
        p: ValidateParams,
        for_transaction: Option<String>,
    ) -> Result<ValidationReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "patch.validate",
                &p.idempotency_key,
                &ValidateParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let (row, rec) = self.validation_in(&p.workspace_id, &id).await?;
                return self.validation_reply(&row, &rec).await;
            }
            Prologue::Fresh(k) => k,
        };
        let prop = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let may = actor.key() == prop.author
            || self
                .ctx
                .authorize(actor, &p.workspace_id, Permission::Apply)
                .is_ok();
        if !may {
            return Err(ServiceError::PermissionDenied(
                "patch.validate needs the apply permission, or the proposal's author".into(),
            ));
        }
        if p.revision != prop.current_revision {
            return Err(ServiceError::precondition_field(
                "revision",
                format!(
                    "revision {} is not the proposal's current revision {}",
                    p.revision, prop.current_revision
                ),
            ));
        }
        if prop.status.is_terminal() {
            return Err(ServiceError::precondition(format!(
                "proposal {} is {}",
                prop.proposal_id,
                prop.status.as_str()
            )));
        }
        let precord = Proposals::record_of(&prop)?;
        let affected: Vec<ResourceId> = precord
            .affected_resources
            .iter()
            .map(|id| ResourceId::parse(id).map_err(ServiceError::internal))
            .collect::<Result<_, _>>()?;
        let validation_id = format!("val_{}", crate::ids::new_creation_key());
        let now = self.ctx.clock.now();
        let ttl = self.ctx.config.validation_ttl;
        let mut rec = Record {
            validation_id: validation_id.clone(),
            proposal_id: prop.proposal_id.clone(),
            revision: p.revision.clone(),
            requested_by: actor.key(),
            created_at: crate::ids::rfc3339(now),
            expires_at: crate::ids::rfc3339(now + ttl),
            worktree_head: {
                let repo = self.ctx.repo(&p.workspace_id).clone();
                tokio::task::spawn_blocking(move || repo.resolve_commit("HEAD").ok())
                    .await
                    .expect("rev-parse does not panic")
            },
            stages: vec![],
            claims: vec![],
            stale_claims: vec![],
            pre_images: vec![],
            post_images: vec![],
            dry_run_verification: None,
            test_verifications: vec![],
            checks: vec![],
            tests_commit: None,
            for_transaction,
        };
        let mut ok = true;

        // claims: the author's write/exclusive claims covering every affected resource.
        let t = Instant::now();
        let nowu = now.unix_timestamp();
        let held = self
            .ctx
            .data
            .store
            .list_claims(crate::store::claims::ClaimFilter {
                workspace_id: p.workspace_id.clone(),
                status: Some(ClaimState::Active),
                holder: Some(prop.author.clone()),
                limit: u32::MAX,
                ..Default::default()
            })
            .await?
            .into_iter()
            .filter(|c| c.mode.writes() && c.expires_at > nowu)
            .collect::<Vec<_>>();
        let mut missing = vec![];
        for a in &affected {
            let cover = held.iter().find(|c| {
                ResourceId::parse(&c.resource_id)
                    .is_ok_and(|r| super::proposals::claim_covers(&r, a))
            });
            match cover {
                None => missing.push(a.id()),
                Some(c) => {
                    if !rec.claims.iter().any(|h| h.claim_id == c.claim_id) {
                        rec.claims.push(HeldClaim {
                            claim_id: c.claim_id.clone(),
                            resource_id: c.resource_id.clone(),
                            fencing_token: c.fencing_token,
                        });
                    }
                }
            }
        }
        let relied: Vec<_> = held
            .iter()
            .filter(|c| rec.claims.iter().any(|h| h.claim_id == c.claim_id))
            .cloned()
            .collect();
        rec.stale_claims = Self::stale_among(&worktree, &relied).await?;
        rec.stages.push(if !missing.is_empty() {
            ok = false;
            stage(
                StageName::Claims,
                StageEvent::Fail,
                format!(
                    "no active write or exclusive claim of the author covers {}",
                    missing.join(", ")
                ),
                t,
            )
        } else if !rec.stale_claims.is_empty() {
            ok = false;
            stage(
                StageName::Claims,
                StageEvent::Fail,
                format!(
                    "stale claims: the resources of {} changed since they were granted; reconcile or acquire them again",
                    rec.stale_claims.join(", ")
                ),
                t,
            )
        } else {
            stage(
                StageName::Claims,
                StageEvent::Pass,
                format!("{} claims cover every affected resource", rec.claims.len()),
                t,
            )
        });

        // artifact and parse.
        let t = Instant::now();
        let bytes = match self.proposals.read_patch(&p.revision).await {
            Ok(b) => {
                rec.stages.push(stage(
                    StageName::Artifact,
                    StageEvent::Pass,
                    "present; its SHA-256 is the revision",
                    t,
                ));
                Some(b)
            }
            Err(e) => {
                ok = false;
                rec.stages.push(stage(
                    StageName::Artifact,
                    StageEvent::Fail,
                    e.to_string(),
                    t,
                ));
                None
            }
        };
        let t = Instant::now();
        let patch = match bytes.as_deref().map(crate::patch::parse) {
            Some(Ok(patch)) => {
                rec.stages.push(stage(
                    StageName::Parse,
                    StageEvent::Pass,
                    format!("{} file operations", patch.files.len()),
                    t,
                ));
                Some(patch)
            }
            Some(Err(e)) => {
                ok = false;
                rec.stages
                    .push(stage(StageName::Parse, StageEvent::Fail, e.to_string(), t));
                None
            }
            None => {
                rec.stages
                    .push(stage(StageName::Parse, StageEvent::Skip, "no artifact", t));
                None
            }
        };

        // coverage, with symbols re-resolved now.
        let t = Instant::now();
        match &patch {
            None => rec.stages.push(stage(
                StageName::Coverage,
                StageEvent::Skip,
                "no parsed patch",
                t,
            )),
            Some(patch) => {
                let mut covering = vec![];
                for c in &held {
                    let resource =
                        ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
                    let span = match &resource {
                        ResourceId::Symbol { .. } => {
                            Claims::inspect(worktree.clone(), resource.clone())
                                .await
                                .ok()
                                .and_then(|(_, s)| s)
                        }
                        ResourceId::File { .. }
                        | ResourceId::Directory { .. }
                        | ResourceId::Other { .. } => None,
                    };
                    covering.push(Held { resource, span });
                }
                let uncovered = crate::patch::coverage::check(patch, &covering);
                rec.stages.push(if uncovered.is_empty() {
                    stage(
                        StageName::Coverage,
                        StageEvent::Pass,
                        "every touched path and changed line is covered",
                        t,
                    )
                } else {
                    ok = false;
                    let items: Vec<String> = uncovered.iter().map(ToString::to_string).collect();
                    stage(StageName::Coverage, StageEvent::Fail, items.join("; "), t)
                });
            }
        }

        // dry_run, in the sandbox.
        let t = Instant::now();
        match (&patch, &bytes) {
            (Some(patch), Some(bytes)) if ok => {
                match self
                    .dry_run(&p.workspace_id, &worktree, patch, bytes, &mut rec)
                    .await
                {
                    Ok(reason) => {
                        rec.stages
                            .push(stage(StageName::DryRun, StageEvent::Pass, reason, t))
                    }
                    Err(reason) => {
                        ok = false;
                        rec.stages
                            .push(stage(StageName::DryRun, StageEvent::Fail, reason, t));
                    }
                }
            }
            _ => rec.stages.push(stage(
                StageName::DryRun,
                StageEvent::Skip,
                "an earlier stage failed",
                t,
            )),
        }

        // tests (the author's expected tests and the policy's required checks),
        // asynchronously.
        let t = Instant::now();
        let required = self
            .ctx
            .config
            .workspaces
            .get(&p.workspace_id)
            .map(|w| w.policy.required_checks.clone())
            .unwrap_or_default();
        if precord.expected_tests.is_empty() && required.is_empty() {
            rec.stages.push(stage(
                StageName::Tests,
                StageEvent::Skip,
                "the proposal names no expected tests and the policy no required checks",
                t,
            ));
        } else if !ok {
            rec.stages.push(stage(
                StageName::Tests,
                StageEvent::Skip,
                "an earlier stage failed",
                t,
            ));
        } else {
            match self
                .start_tests(
                    &p.workspace_id,
                    &validation_id,
                    &precord.expected_tests,
                    &required,
                    &mut rec,
                )
                .await
            {
                Ok(()) => rec
                    .stages
                    .push(stage(StageName::Tests, StageEvent::Start, "started", t)),
                Err(e) => rec
                    .stages
                    .push(stage(StageName::Tests, StageEvent::Fail, e, t)),
            }
        }

        // policy, reported.
        let t = Instant::now();
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let verdict = self.proposals.verdict(ws, &prop, precord.risk).await?;
        rec.stages.push(stage(
            StageName::Policy,
            StageEvent::Pass,
            if verdict.approvable {
                "approvable"
            } else {
                "not approvable"
            },
            t,
        ));

        let row = ValidationRow {
            validation_id: validation_id.clone(),
            workspace_id: p.workspace_id.clone(),
            proposal_id: prop.proposal_id.clone(),
            revision: p.revision.clone(),
            expires_at: (now + ttl).unix_timestamp(),
            record: serde_json::to_string(&rec).expect("a validation record serializes"),
        };
        self.ctx
            .data
            .store
            .insert_validation(
                row.clone(),
                &actor.key(),
                &self.ctx.now_rfc3339(),
                k.binding(&p.workspace_id, actor, &validation_id),
            )
            .await?;
        self.validation_reply(&row, &rec).await
    }
}
/// The tests stage now, from its verifications: (state, reason, all passed).
pub(super) async fn tests_state(
    ctx: &crate::engine::context::Handles,
    rec: &Record,
) -> Result<(StageState, String, bool), ServiceError> {
    // Only a running tests stage is judged from its verifications; one recorded settled
    // (skipped, or failed to start) keeps its outcome. Nothing that ran is never "every
    // test passed" (the verdict calls it missing).
    match rec.stages.iter().find(|s| s.name == StageName::Tests) {
        Some(s) if s.state == StageState::Running && !rec.test_verifications.is_empty() => {}
        Some(s) => return Ok((s.state, s.reason.clone(), false)),
        None => return Ok((StageState::Skipped, "no expected tests".into(), false)),
    }
    let mut running = 0;
    let mut bad = vec![];
    for id in &rec.test_verifications {
        let v = ctx
            .data
            .store
            .get(id)
            .await?
            .ok_or_else(|| ServiceError::internal(format!("verification {id} is gone")))?;
        match v.status {
            Status::Running => running += 1,
            Status::Passed => {}
            other => bad.push(format!("{id} {}", other.as_str())),
        }
    }
    Ok(if !bad.is_empty() {
        (
            StageState::Failed,
            format!("did not pass: {}", bad.join(", ")),
            false,
        )
    } else if running > 0 {
        (
            StageState::Running,
            format!("{running} still running"),
            false,
        )
    } else {
        (
            StageState::Executed,
            "every expected test passed".into(),
            true,
        )
    })
}

/// Test evidence of the current revision: the newest complete validation's tests.
pub(super) async fn test_evidence(
    ctx: &crate::engine::context::Handles,
    rec: &Record,
) -> Result<Option<crate::domain::policy::TestEvidence>, ServiceError> {
    let (state, _, passed) = tests_state(ctx, rec).await?;
    Ok(match state {
        StageState::Running => None,
        StageState::Executed | StageState::Skipped | StageState::Failed => {
            Some(crate::domain::policy::TestEvidence {
                all_passed: passed,
                verification_ids: rec.test_verifications.clone(),
            })
        }
    })
}
