//! The verification pipeline: validate, resolve the spec, insert `running`, stage, run, destroy,
//! check the sources, write the artifact, settle, clean up.

mod container;
mod placement;
mod resume;

pub use super::error::RunError;

use super::environment::EnvironmentSpec;
use super::pool::{BuiltImage, Needs, Placed};
use super::{Runner, WorkerLock};
use crate::config::Profile;
use crate::crash;
use crate::domain::verification::{Settlement, Unfinished};
use crate::engine::error::Refusal;
use crate::ids;
use crate::limits;
use crate::staging::{self, Repo};
use crate::verification::{self, Status, Verification};
use crate::workspace::{HarvestLimits, Harvested};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What a caller asks for. Only the profile *name* reaches the server's configuration.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub repo: PathBuf,
    pub rev: String,
    pub profile: String,
    pub argv: Vec<String>,
    pub timeout_seconds: u64,
}

/// A check run on the host after the container is destroyed, besides the tree check: returns
/// why the sources must be considered changed, if they must.
pub type ExtraSourceCheck = std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// A step of a job that an admission policy may refuse, asked just before it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    CreateContainer,
    StartContainer,
}

/// Asked before each [`Step`]; what it returns is held until that step is done (never while
/// the command runs). `Err(reason)` ends the job as `error` before the step.
pub type StepGate = std::sync::Arc<
    dyn Fn(Step) -> Result<crate::engine::admission::Admitted, String> + Send + Sync,
>;

/// A request that passed every check; nothing has run or been recorded yet.
pub struct Prepared {
    /// Admission of container creation and start, for candidate verifications.
    gate: Option<StepGate>,
    repo: Repo,
    commit: String,
    /// The commit's tree (its attestation's second subject).
    tree: String,
    profile: Profile,
    spec: EnvironmentSpec,
    argv: Vec<String>,
    timeout_seconds: u64,
    extra_check: Option<ExtraSourceCheck>,
    harvest: Option<Harvest>,
    /// Where the job's output goes as it arrives (a live log, `airlock run --follow`).
    output: Option<crate::sandbox::OutputTap>,
    /// The job's dependency set, when its profile has one.
    deps: Option<super::deps::DepsPlan>,
}

/// Where a harvest's files (or why there are none) are put for the caller.
pub type HarvestSlot = std::sync::Arc<std::sync::Mutex<Option<Harvested>>>;

/// A job whose output is files: after the container is destroyed and before the source
/// check, trusted code reads every file and symlink the job left beneath `limits.dir` of its
/// workspace (see [`crate::workspace::JobWorkspace::harvest`]) and hands them to `into`.
#[derive(Clone)]
pub struct Harvest {
    pub limits: HarvestLimits,
    pub into: HarvestSlot,
}

/// Links a verification to a candidate: recorded with the row, in the same transaction.
pub struct CandidateLink {
    pub candidate_id: String,
    pub binding: crate::store::Binding,
    /// A pass is never valid past this time (the candidate's expiry).
    pub expires_cap: time::OffsetDateTime,
}

/// What a verification is recorded with, in the same transaction as its `running` row.
pub enum Link {
    /// A candidate's verification (queued until a worker starts it).
    Candidate(CandidateLink),
    /// A submitted job: its row (the verification id is filled in here) and its binding.
    Job {
        row: Box<crate::store::jobs::JobRow>,
        binding: crate::store::Binding,
    },
}

/// A verification whose `running` row is durable; the worker lock is held until it settles.
pub struct Started {
    p: Prepared,
    pub verification: Verification,
    lock: WorkerLock,
    insert_us: u64,
}

impl Started {
    /// Hands the job's output to `tap` as it arrives (see [`Prepared::streaming`]).
    pub fn streaming(mut self, tap: crate::sandbox::OutputTap) -> Started {
        self.p.output = Some(tap);
        self
    }
}

impl Prepared {
    /// Asks `gate` before the job's container is created and before it is started.
    pub fn admitting(mut self, gate: StepGate) -> Prepared {
        self.gate = Some(gate);
        self
    }

    /// Hands the job's output to `tap` as it arrives, besides the bounded capture.
    pub fn streaming(mut self, tap: crate::sandbox::OutputTap) -> Prepared {
        self.output = Some(tap);
        self
    }

    /// Collects the files the job writes beneath `h.dir` (see [`Harvest`]).
    pub fn harvesting(mut self, h: Harvest) -> Prepared {
        self.harvest = Some(h);
        self
    }
}

impl Runner {
    /// Validates a request and resolves its environment. Nothing is written.
    pub async fn prepare(&self, req: RunRequest) -> Result<Prepared, RunError> {
        let repo = Repo::open(&req.repo).map_err(RunError::from_git)?;
        // Checked before the revision, so a malformed request never reaches git.
        verification::validate_argv(&req.argv).map_err(|e| RunError::refused("argv", e))?;
        let commit = repo.resolve_commit(&req.rev).map_err(RunError::from_git)?;
        self.prepare_commit(
            repo,
            commit,
            &req.profile,
            req.argv,
            req.timeout_seconds,
            None,
        )
        .await
    }

    /// Validates a request for an already-resolved commit and resolves its environment.
    pub async fn prepare_commit(
        &self,
        repo: Repo,
        commit: String,
        profile: &str,
        argv: Vec<String>,
        timeout_seconds: u64,
        extra_check: Option<ExtraSourceCheck>,
    ) -> Result<Prepared, RunError> {
        verification::validate_argv(&argv).map_err(|e| RunError::refused("argv", e))?;
        verification::validate_timeout(timeout_seconds)
            .map_err(|e| RunError::refused("timeout_seconds", e))?;
        let profile = self
            .config
            .profile(profile)
            .map_err(|e| RunError::refused("profile", format!("profile: {e}")))?
            .clone();
        // The id Airlock built the image as (from the engine images are built on, as last
        // checked: no engine is asked here); placement puts the job only on an engine whose
        // image has exactly this id.
        let image_id = self
            .pool
            .built_image_id(&profile.image)
            .await
            .map_err(|why| match why {
                BuiltImage::Missing => {
                    RunError::from_image(crate::sandbox::SandboxError::ImageMissing {
                        image: profile.image.clone(),
                    })
                }
                BuiltImage::Unknown(why) => RunError::Unavailable(why),
            })?;
        if profile.runtime != crate::domain::isolation::Isolation::Runc {
            self.pool
                .runtimes_known(profile.runtime, crate::limits::ENGINE_CALL_TIMEOUT)
                .await;
        }
        if let Some(why) = self.pool.unplaceable(
            &profile.image,
            &image_id,
            profile.runtime,
            &profile.engine_labels,
        ) {
            return Err(RunError::refused(
                "profile",
                format!("profile {}: {why}", profile.name),
            ));
        }
        let tree = repo.tree_of(&commit).map_err(RunError::from_git)?;
        let deps = self.dependency_plan(&repo, &commit, &tree, &profile, &image_id)?;
        let engine = self.pool.first().runtime.clone();
        let mut spec = EnvironmentSpec::resolve(
            engine.as_ref(),
            &profile,
            &image_id,
            &self.seccomp,
            self.config.checkout_filesystem,
        );
        if let Some(plan) = &deps {
            spec = spec.with_dependencies(
                engine.as_ref(),
                &profile.dependencies,
                plan.environment_inputs(),
            );
        }
        self.check_free_space(&spec)?;
        Ok(Prepared {
            gate: None,
            repo,
            commit,
            tree,
            profile,
            spec,
            argv,
            timeout_seconds,
            extra_check,
            harvest: None,
            output: None,
            deps,
        })
    }

    /// Refuses new work while the data dir's filesystem is short of space: it must keep
    /// `min_free_bytes` free even after this job fills its whole checkout filesystem.
    fn check_free_space(&self, spec: &EnvironmentSpec) -> Result<(), RunError> {
        let st = nix::sys::statvfs::statvfs(&self.data.root).map_err(|e| RunError::Host {
            what: "reading the data dir's free space",
            source: e.into(),
        })?;
        let free = st.blocks_available() as u64 * st.fragment_size() as u64;
        // An uploaded workspace lives on its engine, not in the data dir.
        let uploaded = crate::sandbox::pool_workspace_kind(&self.config)
            == crate::sandbox::spec::WorkspaceKind::Volume;
        let job = match spec.checkout_fs {
            staging::CheckoutFs::Loop { disk_bytes, .. } if !uploaded => disk_bytes,
            _ => 0,
        };
        let needed = self.config.min_free_bytes.saturating_add(job);
        if free < needed {
            return Err(RunError::Exhausted(Refusal::from(format!(
                "the data dir's filesystem has {free} bytes free; new work needs min_free_bytes {} plus the job's disk_bytes {job}",
                self.config.min_free_bytes
            ))));
        }
        Ok(())
    }

    /// Runs a prepared request to a settled verification. `cancel` flipping to true cancels it.
    pub async fn execute(
        &self,
        p: Prepared,
        cancel: watch::Receiver<bool>,
    ) -> Result<Verification, RunError> {
        let started = self.begin(p, None).await?;
        self.finish(started, cancel).await
    }

    /// Records the `running` verification durably (and its candidate link and idempotency
    /// binding, in the same transaction) and takes its worker lock. Nothing has run yet.
    pub async fn begin(&self, p: Prepared, link: Option<Link>) -> Result<Started, RunError> {
        let creation_key = ids::new_creation_key();
        let verification_id = ids::new_verification_id();
        let lock = WorkerLock::try_acquire(&self.data.lock_path(&creation_key))
            .map_err(|source| RunError::Host {
                what: "creating the worker lock",
                source,
            })?
            .ok_or(RunError::Invariant(
                "a fresh creation key is already locked",
            ))?;
        let created = self.clock.now();
        let mut expires = created + limits::VERIFICATION_VALIDITY;
        if let Some(Link::Candidate(l)) = &link {
            expires = expires.min(l.expires_cap);
        }
        let v = Verification {
            verification_id: verification_id.clone(),
            candidate_revision: p.commit.clone(),
            argv: p.argv.clone(),
            image: p.spec.image.clone(),
            observed_image: None,
            user: p.spec.runtime.user.clone(),
            working_dir: p.spec.runtime.working_dir.clone(),
            timeout_seconds: p.timeout_seconds,
            cpu_limit: p.spec.cpus,
            memory_limit_bytes: p.spec.runtime.memory_bytes,
            environment_sha256: p.spec.sha256(),
            setup_script_sha256: p.spec.setup_script_sha256.clone(),
            status: Status::Running,
            exit_code: None,
            output: String::new(),
            output_truncated: false,
            output_bytes_total: 0,
            oom_killed: false,
            duration_ms: None,
            error: None,
            created_at: ids::rfc3339(created),
            finished_at: None,
            expires_at: ids::rfc3339(expires),
            creation_key: creation_key.clone(),
            container_id: None,
            engine: None,
            runtime: Some(p.spec.runtime.isolation),
            queued: None,
            queued_reason: None,
            phases: None,
            candidate_tree: Some(p.tree.clone()),
            repository: Some(p.repo.git_dir().display().to_string()),
            dependencies: p.deps.as_ref().map(super::deps::DepsPlan::record),
            attestation: None,
        };
        let t_insert = Instant::now();
        let store = &self.data.store;
        let spec = p.spec.canonical_json();
        match link {
            None => store.insert_running_linked(&v, spec, None).await,
            Some(Link::Candidate(l)) => {
                store
                    .insert_running_linked(&v, spec, Some((l.candidate_id, l.binding)))
                    .await
            }
            Some(Link::Job { mut row, binding }) => {
                row.verification_id = verification_id.clone();
                store.insert_job(&v, spec, *row, binding).await
            }
        }
        .map_err(|e| match e {
            // Another request already holds this idempotency binding: a value, not a fault.
            crate::store::StoreError::Conflict(m) => RunError::Conflict(m),
            e => RunError::Record(e),
        })?;
        let insert_us = t_insert.elapsed().as_micros() as u64;
        crash::point(crash::CrashPoint::AfterInsert);
        tracing::info!(%verification_id, %creation_key, commit = %p.commit, "verification recorded");
        Ok(Started {
            p,
            verification: v,
            lock,
            insert_us,
        })
    }

    /// Stages, runs, checks, writes the artifact and settles a started verification.
    pub async fn finish(
        &self,
        s: Started,
        cancel: watch::Receiver<bool>,
    ) -> Result<Verification, RunError> {
        let Started {
            p,
            verification: mut v,
            lock,
            insert_us,
        } = s;
        let verification_id = v.verification_id.clone();
        let creation_key = v.creation_key.clone();
        let started = Instant::now();
        let cancelled_early = *cancel.borrow();
        let mut timings = StageTimings::default();
        let mut placed = None;
        if cancelled_early {
            unfinished(&mut v, Unfinished::CancelledBeforeStart);
        } else {
            (timings, placed) = self.run_staged(&p, &mut v, cancel).await;
        }
        if v.duration_ms.is_none() {
            v.duration_ms = Some(started.elapsed().as_millis() as u64);
        }
        // A run that reached an engine says where its time went.
        if placed.is_some() {
            v.phases = Some(timings.phases(&v));
        }
        v.finished_at = Some(ids::rfc3339(self.clock.now()));

        // The result is complete: it is signed, and the signature goes into the artifact with
        // it. A crash before the artifact leaves recovery to settle (and sign) the run.
        crash::point(crash::CrashPoint::BeforeSign);
        let t_sign = Instant::now();
        self.attest.attest_verification(&mut v);
        let sign_us = t_sign.elapsed().as_micros() as u64;

        // Durability before acknowledgement: the artifact, then the row.
        let t_artifact = Instant::now();
        match crate::engine::blocking::blocking(|| self.data.artifacts.write_timed(&v)) {
            Ok((_, fsyncs)) => self.metrics.fsync_seconds.observe(fsyncs.as_secs_f64()),
            Err(e) => {
                // What is settled is not what was signed: the settled record is signed anew.
                v.settle(Settlement::Undurable(&e.to_string()))
                    .expect("the pipeline settles the record before writing its artifact");
                self.attest.attest_verification(&mut v);
            }
        }
        let artifact_us = t_artifact.elapsed().as_micros() as u64;
        self.metrics
            .artifact_write_seconds
            .get_or_create(&crate::metrics::KindLabel {
                kind: "verification".into(),
            })
            .observe(artifact_us as f64 / 1e6);
        crash::point(crash::CrashPoint::AfterArtifact);
        let t_settle = Instant::now();
        self.data
            .store
            .settle_with_phases(&v, v.phases)
            .await
            .map_err(|source| RunError::Settle {
                verification_id: verification_id.clone(),
                source,
            })?;
        let settle_us = t_settle.elapsed().as_micros() as u64;
        if placed.is_some() {
            timings.observe(&self.metrics, &v, artifact_us, settle_us);
        }
        // Counted once the row is settled (a reader may see the row a moment before these).
        self.count_settled(&p, &v);
        crash::point(crash::CrashPoint::AfterSettle);
        if let Some(placed) = &placed
            && let Err(e) = placed.engine.workspaces.remove(&creation_key).await
        {
            tracing::warn!(error = %e, "workspace left for recovery to remove");
        }
        drop(placed);
        drop(lock);
        tracing::info!(
            %verification_id,
            status = v.status.as_str(),
            insert_us,
            sign_us,
            artifact_us,
            settle_us,
            wait_us = timings.wait_us,
            stage_us = timings.stage_us,
            create_us = timings.create_us,
            start_us = timings.start_us,
            run_us = v.duration_ms.unwrap_or(0) * 1000,
            destroy_us = timings.destroy_us,
            check_us = timings.check_us,
            checkout = ?timings.checkout,
            durability_us = insert_us + sign_us + artifact_us + settle_us,
            "verification settled"
        );
        Ok(v)
    }

    /// The settled verification's metrics.
    fn count_settled(&self, p: &Prepared, v: &Verification) {
        let m = &self.metrics;
        m.verifications
            .get_or_create(&crate::metrics::ProfileStatus {
                profile: p.profile.name.clone(),
                status: v.status.as_str().to_string(),
            })
            .inc();
        if let Some(ms) = v.duration_ms {
            m.verification_seconds
                .get_or_create(&crate::metrics::ProfileLabel {
                    profile: p.profile.name.clone(),
                })
                .observe(ms as f64 / 1000.0);
        }
        if let Some(engine) = &v.engine {
            m.engine_verifications
                .get_or_create(&crate::metrics::EngineStatus {
                    engine: engine.clone(),
                    status: v.status.as_str().to_string(),
                })
                .inc();
        }
        m.output_bytes.inc_by(v.output_bytes_total);
        if v.output_truncated {
            m.output_truncated.inc();
        }
        if v.status == Status::SourceChanged {
            m.source_changed.inc();
        }
        if v.oom_killed {
            m.oom_killed.inc();
        }
    }

    /// Places, stages, runs and checks; returns the placement (slot held) for the cleanup.
    async fn run_staged(
        &self,
        p: &Prepared,
        v: &mut Verification,
        mut cancel: watch::Receiver<bool>,
    ) -> (StageTimings, Option<Placed>) {
        let mut images = vec![(p.profile.image.clone(), p.spec.runtime.image_id.clone())];
        // An engine holding uploaded workspaces also runs their holder's image: it must be
        // the built one too (it reads the tree back for the source check).
        if crate::sandbox::pool_workspace_kind(&self.config)
            == crate::sandbox::spec::WorkspaceKind::Volume
        {
            let holder = crate::sandbox::HOLDER_IMAGE;
            match self.pool.built_image_id(holder).await {
                Ok(id) => images.push((holder.to_string(), id)),
                Err(why) => {
                    unfinished(
                        v,
                        Unfinished::NotPlaced(match why {
                            BuiltImage::Missing => format!(
                                "image {holder} (the workspace holder) is not built: run `airlock images build`"
                            ),
                            BuiltImage::Unknown(why) => why,
                        }),
                    );
                    return (StageTimings::default(), None);
                }
            }
        }
        // The dependency set before any engine is taken: a fetch holds no slot.
        let mut deps_timing = None;
        let t_deps = Instant::now();
        let deps = match &p.deps {
            None => None,
            Some(plan) => match self.dependency_set(plan, &p.profile, cancel.clone()).await {
                Ok((lease, how)) => {
                    deps_timing = Some((t_deps.elapsed().as_micros() as u64, how));
                    if let Some(d) = v.dependencies.as_mut() {
                        d.sha256 = Some(lease.digest().to_string());
                        d.resolved = lease.manifest().resolved.clone();
                    }
                    Some(lease)
                }
                Err(why) => {
                    unfinished(v, Unfinished::Dependencies(why));
                    return (StageTimings::default(), None);
                }
            },
        };
        let needs = Needs {
            images: &images,
            labels: &p.profile.engine_labels,
            isolation: p.spec.runtime.isolation,
        };
        let t_wait = Instant::now();
        let placed = match self
            .place_job(
                &needs,
                Duration::from_secs(p.timeout_seconds),
                &v.verification_id,
                &mut cancel,
            )
            .await
        {
            Ok(placed) => placed,
            Err(why) => {
                unfinished(v, why);
                return (StageTimings::default(), None);
            }
        };
        let wait_us = t_wait.elapsed().as_micros() as u64;
        v.engine = Some(placed.engine.name.clone());
        // Airlock's clock, whatever the engine does: the job's own timeout plus the engine's
        // grace for everything around the command, then the job settles without it.
        let bound = Duration::from_secs(p.timeout_seconds) + limits::ENGINE_GRACE;
        let mut timings = match tokio::time::timeout(
            bound,
            self.run_placed(&placed, p, v, deps.as_ref(), cancel),
        )
        .await
        {
            Ok(timings) => timings,
            Err(_) => {
                let what = format!(
                    "the job did not finish within its timeout of {} s plus {} s for the engine",
                    p.timeout_seconds,
                    limits::ENGINE_GRACE.as_secs()
                );
                placed.engine.mark_down(&what);
                unfinished(
                    v,
                    Unfinished::EngineUnresponsive {
                        engine: placed.engine.name.clone(),
                        what,
                    },
                );
                StageTimings::default()
            }
        };
        timings.wait_us = wait_us;
        timings.deps = deps_timing;
        (timings, Some(placed))
    }
}

/// Where a run's time goes, for the record, `/metrics` and the log line (the benchmark
/// reads it).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct StageTimings {
    pub(super) wait_us: u64,
    pub(super) stage_us: u64,
    pub(super) create_us: u64,
    pub(super) start_us: u64,
    pub(super) destroy_us: u64,
    pub(super) check_us: u64,
    pub(super) checkout: Option<crate::verification::CheckoutKind>,
    pub(super) deps: Option<(u64, crate::verification::DependencySource)>,
}

impl StageTimings {
    /// Where a run's time went, as its record shows it.
    fn phases(&self, v: &Verification) -> crate::verification::JobPhases {
        let ms = |us: u64| us / 1000;
        crate::verification::JobPhases {
            wait_for_engine_ms: ms(self.wait_us),
            stage_ms: ms(self.stage_us),
            create_ms: ms(self.create_us),
            start_ms: ms(self.start_us),
            run_ms: v.duration_ms.unwrap_or(0),
            destroy_ms: ms(self.destroy_us),
            check_ms: ms(self.check_us),
            checkout: self.checkout,
            dependencies_ms: self.deps.map(|(us, _)| ms(us)),
            dependencies: self.deps.map(|(_, how)| how),
        }
    }

    /// Every phase into `airlock_verification_phase_seconds`, in
    /// [`crate::metrics::VERIFICATION_PHASES`]' order.
    fn observe(
        &self,
        m: &crate::metrics::Metrics,
        v: &Verification,
        artifact_us: u64,
        settle_us: u64,
    ) {
        let run_us = v.duration_ms.unwrap_or(0) * 1000;
        let all = [
            self.wait_us,
            self.stage_us,
            self.create_us,
            self.start_us,
            run_us,
            self.destroy_us,
            self.check_us,
            artifact_us,
            settle_us,
        ];
        for (phase, us) in crate::metrics::VERIFICATION_PHASES.iter().zip(all) {
            m.observe_phase(phase, us);
        }
    }
}

/// Settles `v` for a run that never reached a job end Airlock could classify.
pub(super) fn unfinished(v: &mut Verification, why: Unfinished) {
    v.settle(Settlement::Unfinished(&why))
        .expect("a run that did not finish was recorded running and is settled once");
}
