//! One job's container on its engine: its spec, its run (the container created, started once
//! its workspace is ready, destroyed), and the judgement made from trusted code once it is gone
//! (harvest, source check, settlement).

use super::{Prepared, StageTimings, Step, unfinished};
use crate::crash;
use crate::domain::verification::{self as outcome, Settlement, SourceCheck, Unfinished};
use crate::engine::runner::Runner;
use crate::engine::runner::pool::PoolEngine;
use crate::limits;
use crate::sandbox::runtime::{StartWhen, start_now};
use crate::sandbox::{
    ContainerSpec, JobEnd, JobOutcome, Phase, RunIdentity, SandboxError, WorkspaceSource,
};
use crate::staging;
use crate::verification::Verification;
use crate::workspace::JobWorkspace;
use std::time::{Duration, Instant};
use tokio::sync::watch;

impl Runner {
    /// Runs a job in its staged workspace on its engine, then checks it; fills `v`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_in(
        &self,
        engine: &PoolEngine,
        workspace: &dyn JobWorkspace,
        p: &Prepared,
        v: &mut Verification,
        deps: Option<&crate::deps::store::Lease>,
        cancel: watch::Receiver<bool>,
        mut timings: StageTimings,
    ) -> StageTimings {
        let source = match workspace.attach() {
            Ok(source) => source,
            Err(e) => {
                unfinished(v, Unfinished::Staging(e.to_string()));
                return timings;
            }
        };
        let spec = match self.job_spec(engine, source, p, v, deps).await {
            Ok(spec) => spec,
            Err(why) => {
                unfinished(v, why);
                return timings;
            }
        };
        let ran = self
            .run_container(engine, &spec, p, cancel.clone(), start_now(), &mut timings)
            .await;
        self.judge(engine, workspace, p, v, ran, &cancel, timings)
            .await
    }

    /// Job `v`'s container spec on `engine`, mounting its workspace from `source`.
    pub(super) async fn job_spec(
        &self,
        engine: &PoolEngine,
        source: WorkspaceSource,
        p: &Prepared,
        v: &Verification,
        deps: Option<&crate::deps::store::Lease>,
    ) -> Result<ContainerSpec, Unfinished> {
        let deps = match deps {
            None => None,
            Some(lease) => Some(
                self.deps_source(engine, lease)
                    .await
                    .map_err(Unfinished::Dependencies)?,
            ),
        };
        Ok(ContainerSpec {
            runtime: p.spec.runtime.clone(),
            run: RunIdentity {
                creation_key: v.creation_key.clone(),
                verification_id: v.verification_id.clone(),
                instance_id: self.data.instance_id.clone(),
                argv: p.spec.command(&p.profile.setup_script, &p.argv),
                workspace: source,
                deps,
                output: p.output.clone(),
            },
        })
    }

    /// Runs `spec` on `engine` to its end, the container started once `start_when` allows:
    /// the admission gate asked before its creation and its start, live containers counted,
    /// the crash points passed, and the create, start and destroy times kept in `timings`.
    pub(super) async fn run_container(
        &self,
        engine: &PoolEngine,
        spec: &ContainerSpec,
        p: &Prepared,
        cancel: watch::Receiver<bool>,
        start_when: StartWhen<'_>,
        timings: &mut StageTimings,
    ) -> Result<JobOutcome, SandboxError> {
        // The admission of the step in progress, released once it is done.
        let mut held: Option<crate::engine::admission::Admitted> = None;
        let gate = p.gate.clone();
        let admit = move |step: Step| match &gate {
            Some(gate) => gate(step).map(Some),
            None => Ok(None),
        };
        // Live containers: counted from `Created` until `Destroyed` (or the run's end).
        let live = self.metrics.live_containers.clone();
        let mut counted = false;
        // When each phase began: creating, created, starting, started, destroyed.
        let marks: std::sync::Mutex<[Option<Instant>; 5]> = Default::default();
        let mark = |i: usize| marks.lock().expect("phase marks")[i] = Some(Instant::now());
        let mut on_phase = |ph: Phase| -> Result<(), String> {
            match ph {
                Phase::Creating => {
                    held = admit(Step::CreateContainer)?;
                    mark(0);
                }
                Phase::Created { .. } => {
                    mark(1);
                    held = None;
                    live.inc();
                    counted = true;
                    crash::point(crash::CrashPoint::AfterCreate)
                }
                Phase::Starting => {
                    // From here: a wait for the workspace in between is neither's time.
                    mark(2);
                    held = admit(Step::StartContainer)?
                }
                Phase::Started => {
                    mark(3);
                    held = None;
                    crash::point(crash::CrashPoint::AfterStart)
                }
                Phase::Destroyed => {
                    mark(4);
                    if std::mem::take(&mut counted) {
                        live.dec();
                    }
                    crash::point(crash::CrashPoint::AfterDestroy)
                }
            }
            Ok(())
        };
        let timeout = Duration::from_secs(p.timeout_seconds);
        let ran = engine
            .runtime
            .run(spec, timeout, &mut on_phase, cancel, start_when)
            .await;
        // `on_phase` is done with `counted` here.
        if counted {
            // The runtime gave up after creating the container; its removal guard removes it.
            self.metrics.live_containers.dec();
        }
        let marks = marks.into_inner().expect("phase marks");
        let between = |a: usize, b: usize| match (marks[a], marks[b]) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_micros() as u64,
            _ => 0,
        };
        timings.create_us = between(0, 1);
        timings.start_us = between(2, 3);
        if let Ok(o) = &ran {
            let ran_for = o.duration.as_micros() as u64;
            timings.destroy_us = between(3, 4).saturating_sub(ran_for);
        }
        ran
    }

    /// Judges a run whose container is gone, from trusted code: the job's output files
    /// harvested, its tree compared with the revision, the verification settled; a run that
    /// failed settles unfinished (and an engine that stopped answering leaves placement).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn judge(
        &self,
        engine: &PoolEngine,
        workspace: &dyn JobWorkspace,
        p: &Prepared,
        v: &mut Verification,
        ran: Result<JobOutcome, SandboxError>,
        cancel: &watch::Receiver<bool>,
        mut timings: StageTimings,
    ) -> StageTimings {
        let mut outcome = match ran {
            Ok(o) => o,
            Err(e) if e.is_unresponsive() => {
                // An engine that stopped answering takes no more jobs until a check finds it
                // answering again; the job settles now, on Airlock's clock.
                engine.mark_down(&e.to_string());
                unfinished(
                    v,
                    Unfinished::EngineUnresponsive {
                        engine: engine.name.clone(),
                        what: e.to_string(),
                    },
                );
                return timings;
            }
            Err(SandboxError::Refused {
                step: "container start",
                ..
            }) if *cancel.borrow() => {
                unfinished(v, Unfinished::CancelledBeforeStart);
                return timings;
            }
            Err(e) => {
                // An engine that no longer answers takes no more jobs until a check finds it;
                // one bounded question tells a broken engine from a refused job.
                let asked = tokio::time::timeout(
                    limits::ENGINE_CALL_TIMEOUT,
                    engine.runtime.image_id(&p.profile.image),
                )
                .await;
                match asked {
                    Ok(Err(down)) if !matches!(down, SandboxError::ImageMissing { .. }) => {
                        engine.mark_down(&down.to_string())
                    }
                    Err(_) => engine.mark_down("no answer after a failed job"),
                    Ok(_) => {}
                }
                unfinished(v, Unfinished::Sandbox(e.to_string()));
                return timings;
            }
        };
        workspace.ended(outcome.scratch.take());
        v.container_id = Some(outcome.container_id.clone());
        v.observed_image = Some(outcome.observed_image.clone());
        v.output = outcome.output.text;
        v.output_truncated = outcome.output.truncated;
        v.output_bytes_total = outcome.output.total_bytes;
        v.duration_ms = Some(outcome.duration.as_millis() as u64);
        if let JobEnd::Exited { code, oom_killed } = outcome.end {
            v.exit_code = Some(code);
            v.oom_killed = oom_killed;
        }
        // The container is gone: collect a harvesting job's output files first.
        if let Some(h) = &p.harvest {
            let collected = workspace.harvest(&h.limits).await;
            *h.into.lock().expect("the harvest slot is not poisoned") = Some(collected);
        }
        // The container is gone; trusted code now compares the tree with the revision.
        let check = if outcome.end.needs_source_check() {
            let t_check = Instant::now();
            let checked = workspace
                .check_sources(limits::SOURCE_CHANGED_LISTED_PATHS)
                .await;
            timings.check_us = t_check.elapsed().as_micros() as u64;
            match checked {
                Ok((_, 0)) => match p.extra_check.as_ref().and_then(|check| check()) {
                    Some(reason) => SourceCheck::ExtraChanged(reason),
                    None => SourceCheck::Unchanged,
                },
                Ok((listed, total)) => SourceCheck::Changed { listed, total },
                Err(e) => {
                    if matches!(e, staging::StagingError::EngineUnresponsive(_)) {
                        engine.mark_down(&e.to_string());
                    }
                    SourceCheck::Failed(e.to_string())
                }
            }
        } else {
            SourceCheck::NotRun
        };
        v.settle(Settlement::Judged {
            end: &outcome.end,
            check: &check,
            cx: outcome::Context {
                commit: &p.commit,
                memory_bytes: p.spec.runtime.memory_bytes,
                timeout_seconds: p.timeout_seconds,
            },
        })
        .expect("the run being judged was recorded running and is settled once");
        timings
    }
}
