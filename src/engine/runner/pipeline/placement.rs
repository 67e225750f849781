//! Placing a job on an engine of the pool: the wait, made visible while it lasts (the row's
//! `queued` and reason, `airlock_jobs_unplaced`), where the job went (for recovery), its
//! workspace staged there, and what moving that workspace cost, per engine.

use super::{Prepared, StageTimings, unfinished};
use crate::domain::verification::Unfinished;
use crate::engine::runner::Runner;
use crate::engine::runner::pool::{Needs, Placed, PoolEngine, Unplaced};
use crate::sandbox::runtime::StartWhen;
use crate::verification::{CheckoutKind, Verification};
use crate::workspace::{JobWorkspace, StageRequest};
use std::time::{Duration, Instant};
use tokio::sync::watch;

impl Runner {
    /// Places a job, waiting up to `wait`; how the wait ended when no engine took it.
    pub(super) async fn place_job(
        &self,
        needs: &Needs<'_>,
        wait: Duration,
        verification_id: &str,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Placed, Unfinished> {
        let vid = verification_id.to_string();
        let unplaced = self.metrics.jobs_unplaced.clone();
        let mut counted_unplaced = false;
        // Each new reason is written to the row (readers see `queued` and why) by one task, so
        // a slow store never holds placement up; only the latest reason matters.
        let (reason_tx, mut reason_rx) = watch::channel(None::<String>);
        let store = self.data.store.clone();
        let writer_id = vid.clone();
        let writer = tokio::spawn(async move {
            while reason_rx.changed().await.is_ok() {
                let why = reason_rx.borrow_and_update().clone();
                if let Some(why) = why
                    && let Err(e) = store.mark_waiting(&writer_id, &why).await
                {
                    tracing::warn!(error = %e, "could not record why the job waits");
                }
            }
        });
        let placement = self
            .pool
            .place(needs, wait, cancel, |why| {
                if !std::mem::replace(&mut counted_unplaced, true) {
                    unplaced.inc();
                }
                tracing::info!(verification_id = %vid, reason = %why, "waiting for an engine");
                reason_tx.send_replace(Some(why.to_string()));
            })
            .await;
        drop(reason_tx);
        let _ = writer.await;
        if counted_unplaced {
            self.metrics.jobs_unplaced.dec();
        }
        let placed = match placement {
            Ok(placed) => placed,
            Err(Unplaced::Cancelled) => return Err(Unfinished::CancelledBeforeStart),
            Err(Unplaced::Waited(why)) => return Err(Unfinished::NotPlaced(why)),
        };
        // Where the job runs, for recovery: only a pool of several engines needs it written
        // (recovery otherwise looks on the one engine there is), and a row without it is
        // looked for on every engine, so the write need not precede the container. A waited
        // job's row also drops its reason here.
        if (counted_unplaced || self.pool.engines().len() > 1)
            && let Err(e) = self
                .data
                .store
                .mark_placed(verification_id, &placed.engine.name)
                .await
        {
            tracing::warn!(error = %e, "could not record the job's engine");
        }
        Ok(placed)
    }

    /// Stages the job's workspace on its engine, runs the job there, and counts what moving
    /// the workspace cost that engine. Where the engine's workspace can be named before it is
    /// staged (a host checkout), the container is created while the tree is staged and
    /// started once it is staged and checked.
    pub(super) async fn run_placed(
        &self,
        placed: &Placed,
        p: &Prepared,
        v: &mut Verification,
        deps: Option<&crate::deps::store::Lease>,
        cancel: watch::Receiver<bool>,
    ) -> StageTimings {
        let engine = &placed.engine;
        let mut timings = StageTimings::default();
        let t_stage = Instant::now();
        let req = StageRequest {
            repo: p.repo.clone(),
            commit: p.commit.clone(),
            key: v.creation_key.clone(),
            fs: p.spec.checkout_fs,
            uid: p.profile.uid,
            gid: p.profile.gid,
        };
        let reserved = match engine.workspaces.reserve(&req).await {
            Ok(reserved) => reserved,
            Err(e) => {
                self.staging_failed(engine, p, v, e).await;
                return timings;
            }
        };
        let Some(source) = reserved else {
            let workspace = match engine.workspaces.stage(req).await {
                Ok(w) => w,
                Err(e) => {
                    self.staging_failed(engine, p, v, e).await;
                    return timings;
                }
            };
            timings.stage_us = t_stage.elapsed().as_micros() as u64;
            timings.checkout = Some(self.checkout_kind(workspace.as_ref(), v));
            let timings = self
                .run_in(engine, workspace.as_ref(), p, v, deps, cancel, timings)
                .await;
            self.count_transfers(engine, workspace.as_ref());
            return timings;
        };
        let spec = match self.job_spec(engine, source.clone(), p, v, deps).await {
            Ok(spec) => spec,
            Err(why) => {
                unfinished(v, why);
                return timings;
            }
        };
        // The tree is staged while the container is created; the start waits for it, and
        // for the check that the path the container mounts names the tree staged, made
        // just before the start.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
        let staging = async {
            let staged = engine.workspaces.stage(req).await;
            let stage_us = t_stage.elapsed().as_micros() as u64;
            let attached = match &staged {
                Ok(w) => match w.attach() {
                    Ok(attached) if attached == source => Ok(()),
                    Ok(attached) => Err(format!(
                        "the staged workspace is {attached:?}, not {source:?} as the container was created with"
                    )),
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e.to_string()),
            };
            let _ = ready_tx.send(attached.clone());
            (staged, attached, stage_us)
        };
        let start_when: StartWhen<'_> = Box::pin(async move {
            ready_rx
                .await
                .unwrap_or_else(|_| Err("the workspace's staging ended".into()))
        });
        let (ran, (staged, attached, stage_us)) = tokio::join!(
            self.run_container(engine, &spec, p, cancel.clone(), start_when, &mut timings),
            staging
        );
        timings.stage_us = stage_us;
        let workspace = match staged {
            Ok(w) => w,
            Err(e) => {
                self.staging_failed(engine, p, v, e).await;
                return timings;
            }
        };
        timings.checkout = Some(self.checkout_kind(workspace.as_ref(), v));
        let timings = match attached {
            Err(why) => {
                unfinished(v, Unfinished::Staging(why));
                timings
            }
            Ok(()) => {
                self.judge(engine, workspace.as_ref(), p, v, ran, &cancel, timings)
                    .await
            }
        };
        self.count_transfers(engine, workspace.as_ref());
        timings
    }

    /// Settles a job whose workspace could not be staged on `engine`: an engine that stopped
    /// answering leaves placement, one that failed is asked one bounded question.
    async fn staging_failed(
        &self,
        engine: &PoolEngine,
        p: &Prepared,
        v: &mut Verification,
        e: crate::staging::StagingError,
    ) {
        match e {
            e @ crate::staging::StagingError::EngineUnresponsive(_) => {
                engine.mark_down(&e.to_string());
                unfinished(
                    v,
                    Unfinished::EngineUnresponsive {
                        engine: engine.name.clone(),
                        what: format!("staging the job's workspace: {e}"),
                    },
                );
            }
            e @ crate::staging::StagingError::Volume(_) => {
                // The engine failed: one bounded question tells whether it still answers.
                let asked = tokio::time::timeout(
                    crate::limits::ENGINE_CALL_TIMEOUT,
                    engine.runtime.image_id(&p.profile.image),
                )
                .await;
                match asked {
                    Ok(Err(down))
                        if !matches!(down, crate::sandbox::SandboxError::ImageMissing { .. }) =>
                    {
                        engine.mark_down(&down.to_string())
                    }
                    Err(_) => engine.mark_down("no answer after a failed staging"),
                    Ok(_) => {}
                }
                unfinished(
                    v,
                    Unfinished::Staging(format!("on engine {}: {e}", engine.name)),
                );
            }
            e => unfinished(v, Unfinished::Staging(e.to_string())),
        }
    }

    /// How the job's tree was made, counted in the cache's metrics.
    fn checkout_kind(&self, workspace: &dyn JobWorkspace, v: &Verification) -> CheckoutKind {
        match workspace.warmth() {
            Some(w) => {
                self.metrics.record_warmth(&w);
                match &w.lookup {
                    Ok(crate::staging::cache::Lookup::Hit) => CheckoutKind::Warm,
                    Ok(crate::staging::cache::Lookup::Miss) => CheckoutKind::Filled,
                    Err(why) => {
                        tracing::debug!(key = %v.creation_key, %why, "tree cache bypassed: staged in full");
                        CheckoutKind::Full
                    }
                }
            }
            None => CheckoutKind::Full,
        }
    }

    /// Counts what moving `workspace` to and from `engine` cost.
    fn count_transfers(&self, engine: &PoolEngine, workspace: &dyn JobWorkspace) {
        let moved = workspace.transfers();
        let label = crate::metrics::EngineLabel {
            engine: engine.name.clone(),
        };
        let m = &self.metrics;
        if moved.uploads > 0 {
            m.engine_upload_bytes
                .get_or_create(&label)
                .inc_by(moved.upload_bytes);
            m.engine_upload_seconds
                .get_or_create(&label)
                .observe(moved.upload.as_secs_f64());
        }
        if moved.readbacks > 0 {
            m.engine_readback_bytes
                .get_or_create(&label)
                .inc_by(moved.readback_bytes);
            m.engine_readback_seconds
                .get_or_create(&label)
                .observe(moved.readback.as_secs_f64());
        }
    }
}
