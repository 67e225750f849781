//! The runner's background side: verification jobs whose `running` row is durable, run on the
//! bounded [`Workers`] pool through the same pipeline as `airlock run`, and the first failure
//! to settle one (after which `airlock serve` exits non-zero). Candidate verifications and a
//! validation's tests both run here, so one `max_concurrent_verifications` bounds them all.
//! Every job runs under its workspace on the fair [`Workers`] pool (that workspace's
//! `max_running_jobs` and `max_queued_jobs`), with a [`LiveLog`](super::live_log) while it runs.

use super::Context;
use super::error::{Refusal, ServiceError};
use super::live_log::LiveLogs;
use super::runner::Runner;
use super::workers::{Reservation, TenantLimits, Workers};
use crate::engine::runner::pipeline::Started;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The background verification jobs of this process.
pub struct Background {
    /// The runner every job runs through (callers prepare and begin their runs on it).
    pub runner: Runner,
    workers: Workers,
    /// The output of this process's running jobs, for followers.
    pub logs: LiveLogs,
    /// The first failure to make an asynchronous result durable (a worker that could not
    /// settle its verification).
    failure: Arc<Mutex<Option<String>>>,
    /// Runs a call makes itself, outside the pool (a validation's dry run): shutdown cancels
    /// them and waits for them to settle, as it does the pool's jobs.
    inline: Inline,
}

/// The runs made outside the pool: a stop signal they are cancelled by, and how many run now.
struct Inline {
    stop: tokio::sync::watch::Sender<bool>,
    running: Arc<tokio::sync::watch::Sender<usize>>,
}

/// One inline run counted while it lives.
struct Counted(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Background {
    pub fn new(ctx: Context) -> Background {
        let config = ctx.config.clone();
        let limits = move |workspace: &str| match config.workspaces.get(workspace) {
            Some(w) => TenantLimits {
                max_running: w.max_running_jobs,
                max_queued: w.max_queued_jobs,
            },
            None => TenantLimits {
                max_running: config.max_concurrent_verifications,
                max_queued: crate::limits::DEFAULT_MAX_QUEUED_JOBS,
            },
        };
        Background {
            workers: Workers::new(ctx.config.max_concurrent_verifications, limits),
            logs: LiveLogs::default(),
            runner: Runner::new(&ctx),
            failure: Arc::new(Mutex::new(None)),
            inline: Inline {
                stop: tokio::sync::watch::channel(false).0,
                running: Arc::new(tokio::sync::watch::channel(0).0),
            },
        }
    }

    /// Runs `p` to its settled verification in the caller's task (a validation's dry run,
    /// whose call waits for it), cancelled like every job when the daemon stops: its container
    /// is destroyed and its row settled `cancelled` before the process exits, never left for
    /// recovery.
    pub async fn execute_inline(
        &self,
        p: crate::engine::runner::pipeline::Prepared,
    ) -> Result<crate::verification::Verification, crate::engine::runner::pipeline::RunError> {
        self.inline.running.send_modify(|n| *n += 1);
        let _counted = Counted(self.inline.running.clone());
        let cancel = self.inline.stop.subscribe();
        self.runner.execute(p, cancel).await
    }

    /// Room for one job of `workspace_id` in its queue, taken before the job is recorded:
    /// `resource_exhausted` naming `max_queued_jobs` when it is full.
    pub fn reserve(&self, workspace_id: &str) -> Result<Reservation, ServiceError> {
        self.workers.reserve(workspace_id).map_err(|full| {
            ServiceError::ResourceExhausted(Refusal::about("max_queued_jobs", full.to_string()))
        })
    }

    /// Room for a job admitted before this process started (never refused).
    pub fn reserve_resumed(&self, workspace_id: &str) -> Reservation {
        self.workers.reserve_resumed(workspace_id)
    }

    /// Where a queued job waits in its workspace's queue (1 is next).
    pub fn position(&self, verification_id: &str) -> Option<usize> {
        self.workers.position(verification_id)
    }

    /// Runs a recorded verification in the background in the room `r` holds, when its
    /// workspace's turn comes; its output is followable while it runs.
    pub fn spawn(&self, r: Reservation, started: Started) {
        self.spawn_timed(r, started, None)
    }

    /// [`Background::spawn`] for a submitted job of `profile`: its time from now to settling
    /// is observed in `airlock_job_seconds`.
    pub fn spawn_job(&self, r: Reservation, started: Started, profile: String) {
        self.spawn_timed(r, started, Some(profile))
    }

    fn spawn_timed(&self, r: Reservation, started: Started, job_profile: Option<String>) {
        let vid = started.verification.verification_id.clone();
        let started = started.streaming(self.logs.open(&vid));
        let logs = self.logs.clone();
        let engine = self.runner.clone();
        let failures = self.failure.clone();
        let id = vid.clone();
        let queued_at = std::time::Instant::now();
        engine.metrics.queue_depth.inc();
        self.workers.spawn(r, id, move |slot| async move {
            // Queued until a permit frees up; a cancel while queued settles without running.
            engine.metrics.queue_depth.dec();
            if slot.admitted {
                engine
                    .metrics
                    .queue_wait_seconds
                    .observe(queued_at.elapsed().as_secs_f64());
                // Durable before anything is placed or created: a restart resumes only a job
                // that was never started, so none runs twice.
                let now = crate::ids::rfc3339(engine.clock.now());
                if let Err(e) = engine.data.store.mark_started(&vid, now).await {
                    tracing::error!(verification_id = %vid, error = %e, "a job could not be marked started; it is left queued for the next start");
                    let mut first = failures.lock().expect("the failure slot is never poisoned");
                    if first.is_none() {
                        *first = Some(format!("verification {vid} could not be marked started: {e}"));
                    }
                    return;
                }
            }
            match engine.finish(started, slot.cancel).await {
                Ok(v) => {
                    logs.settle(&vid, Some(v.status));
                    if let Some(profile) = job_profile {
                        engine
                            .metrics
                            .job_seconds
                            .get_or_create(&crate::metrics::ProfileStatus {
                                profile,
                                status: v.status.as_str().to_string(),
                            })
                            .observe(queued_at.elapsed().as_secs_f64());
                    }
                    tracing::info!(verification_id = %vid, status = v.status.as_str(), "verification settled")
                }
                Err(e) => {
                    logs.settle(&vid, None);
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

    /// Cancels the inline runs (a dry run a call waits for) at once: shutdown does it first,
    /// so the calls waiting for them answer and let the connections drain.
    pub fn stop_inline(&self) {
        self.inline.stop.send_replace(true);
    }

    /// Cancels every job of this process, the pool's and the inline ones (daemon shutdown).
    /// Returns how many did not settle within `wait`.
    pub async fn cancel_all(&self, wait: Duration) -> usize {
        self.inline.stop.send_replace(true);
        let deadline = tokio::time::Instant::now() + wait;
        let pool = self.workers.cancel_all(wait).await;
        let mut running = self.inline.running.subscribe();
        let _ = tokio::time::timeout_at(deadline, running.wait_for(|n| *n == 0)).await;
        let inline = *running.borrow();
        pool + inline
    }

    /// The first asynchronous persistence failure, if there was one.
    pub fn persistence_failure(&self) -> Option<String> {
        self.failure
            .lock()
            .expect("the failure slot is never poisoned")
            .clone()
    }
}
