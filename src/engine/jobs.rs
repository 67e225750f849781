//! The runner's background side: verification jobs whose `running` row is durable, run on the
//! bounded [`Workers`] pool through the same pipeline as `airlock run`, and the first failure
//! to settle one (after which `airlock serve` exits non-zero). Candidate verifications and a
//! validation's tests both run here, so one `max_concurrent_verifications` bounds them all.

use super::Context;
use super::runner::Runner;
use super::workers::Workers;
use crate::engine::runner::pipeline::Started;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The background verification jobs of this process.
pub struct Jobs {
    /// The runner every job runs through (callers prepare and begin their runs on it).
    pub runner: Runner,
    workers: Workers,
    /// The first failure to make an asynchronous result durable (a worker that could not
    /// settle its verification).
    failure: Arc<Mutex<Option<String>>>,
}

impl Jobs {
    pub fn new(ctx: Context) -> Jobs {
        Jobs {
            workers: Workers::new(ctx.config.max_concurrent_verifications),
            runner: Runner::new(&ctx),
            failure: Arc::new(Mutex::new(None)),
        }
    }

    /// Runs a recorded verification in the background, bounded by the concurrency permits.
    pub fn spawn(&self, started: Started) {
        let vid = started.verification.verification_id.clone();
        let engine = self.runner.clone();
        let failures = self.failure.clone();
        let id = vid.clone();
        let queued_at = std::time::Instant::now();
        engine.metrics.queue_depth.inc();
        self.workers.spawn(id, move |slot| async move {
            // Queued until a permit frees up; a cancel while queued settles without running.
            engine.metrics.queue_depth.dec();
            if slot.admitted {
                engine
                    .metrics
                    .queue_wait_seconds
                    .observe(queued_at.elapsed().as_secs_f64());
                let _ = engine.data.store.mark_started(&vid).await;
            }
            match engine.finish(started, slot.cancel).await {
                Ok(v) => {
                    tracing::info!(verification_id = %vid, status = v.status.as_str(), "verification settled")
                }
                Err(e) => {
                    tracing::error!(verification_id = %vid, error = %e, "verification left for recovery");
                    let mut first = failures.lock().expect("the failure slot is never poisoned");
                    if first.is_none() {
                        *first = Some(format!("verification {vid} could not be settled: {e}"));
                    }
                }
            }
        });
    }

    /// Cancels one job of this process and waits (bounded by `wait`) until it has settled.
    pub async fn cancel(&self, verification_id: &str, wait: Duration) -> bool {
        self.workers.cancel(verification_id, wait).await
    }

    /// Cancels every job of this process (daemon shutdown). Returns how many did not settle
    /// within `wait`.
    pub async fn cancel_all(&self, wait: Duration) -> usize {
        self.workers.cancel_all(wait).await
    }

    /// The first asynchronous persistence failure, if there was one.
    pub fn persistence_failure(&self) -> Option<String> {
        self.failure
            .lock()
            .expect("the failure slot is never poisoned")
            .clone()
    }
}
