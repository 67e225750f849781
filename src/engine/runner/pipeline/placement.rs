//! Placing a job on an engine of the pool: the wait, made visible while it lasts (the row's
//! `queued` and reason, `airlock_jobs_unplaced`), where the job went (for recovery), its
//! workspace staged there, and what moving that workspace cost, per engine.

use super::{Prepared, StageTimings, unfinished};
use crate::domain::verification::Unfinished;
use crate::engine::runner::Runner;
use crate::engine::runner::pool::{Needs, Placed, Unplaced};
use crate::verification::{CheckoutKind, Verification};
use crate::workspace::StageRequest;
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
    /// the workspace cost that engine.
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
        let staged = engine
            .workspaces
            .stage(StageRequest {
                repo: p.repo.clone(),
                commit: p.commit.clone(),
                key: v.creation_key.clone(),
                fs: p.spec.checkout_fs,
                uid: p.profile.uid,
                gid: p.profile.gid,
            })
            .await;
        let workspace = match staged {
            Ok(w) => w,
            Err(e @ crate::staging::StagingError::EngineUnresponsive(_)) => {
                engine.mark_down(&e.to_string());
                unfinished(
                    v,
                    Unfinished::EngineUnresponsive {
                        engine: engine.name.clone(),
                        what: format!("staging the job's workspace: {e}"),
                    },
                );
                return timings;
            }
            Err(e @ crate::staging::StagingError::Volume(_)) => {
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
                return timings;
            }
            Err(e) => {
                unfinished(v, Unfinished::Staging(e.to_string()));
                return timings;
            }
        };
        timings.stage_us = t_stage.elapsed().as_micros() as u64;
        timings.checkout = Some(match workspace.warmth() {
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
        });
        let timings = self
            .run_in(engine, workspace.as_ref(), p, v, deps, cancel, timings)
            .await;
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
        timings
    }
}
