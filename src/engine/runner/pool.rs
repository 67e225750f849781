//! The engines jobs run on, and where each job goes. A job is placed on an engine that is
//! healthy, has a free slot (`max_jobs`), carries the labels its profile requires and holds
//! the profile's image with exactly the id the job's environment was resolved with; among
//! those, the least loaded (by share of its slots in use, then by order of configuration).
//! A job that fits nowhere waits, with the reason visible, until a slot frees, an engine comes
//! back, or its own timeout passes. An engine that fails stops receiving jobs and is probed
//! again with exponential backoff. Capacity is counted per Airlock process.

use crate::sandbox::Runtime;
use crate::workspace::Workspaces;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};

/// First delay before a failed engine is probed again; it doubles up to [`PROBE_BACKOFF_MAX`].
pub const PROBE_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest delay between probes of a failed engine.
pub const PROBE_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// How often a waiting job looks again even when nothing was freed (a probe may be due).
const REPLACE_TICK: Duration = Duration::from_millis(500);

/// Whether an engine takes jobs.
#[derive(Debug, Clone)]
enum Health {
    Up,
    Down {
        why: String,
        next_probe: Instant,
        backoff: Duration,
    },
}

/// One engine of the pool.
pub struct PoolEngine {
    pub name: String,
    pub runtime: Runtime,
    pub workspaces: Arc<dyn Workspaces>,
    pub max_jobs: usize,
    pub labels: Vec<String>,
    running: AtomicUsize,
    /// Times the engine went out of placement.
    failures: AtomicU64,
    health: Mutex<Health>,
}

impl PoolEngine {
    pub fn new(
        name: &str,
        runtime: Runtime,
        workspaces: Arc<dyn Workspaces>,
        max_jobs: usize,
        labels: Vec<String>,
    ) -> PoolEngine {
        PoolEngine {
            name: name.to_string(),
            runtime,
            workspaces,
            max_jobs,
            labels,
            running: AtomicUsize::new(0),
            failures: AtomicU64::new(0),
            health: Mutex::new(Health::Up),
        }
    }

    /// Jobs placed on this engine by this process and not yet finished.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Times the engine went out of placement (each time it was up and then failed).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// `None` while the engine takes jobs, else why not.
    pub fn down_reason(&self) -> Option<String> {
        match &*self.health.lock().expect("health is never poisoned") {
            Health::Up => None,
            Health::Down { why, .. } => Some(why.clone()),
        }
    }

    /// Takes the engine out of placement after a malfunction talking to it.
    pub fn mark_down(&self, why: &str) {
        let mut h = self.health.lock().expect("health is never poisoned");
        let backoff = match &*h {
            Health::Up => {
                self.failures.fetch_add(1, Ordering::SeqCst);
                PROBE_BACKOFF_MIN
            }
            Health::Down { backoff, .. } => *backoff,
        };
        tracing::warn!(engine = %self.name, reason = %why, "engine taken out of placement");
        *h = Health::Down {
            why: why.to_string(),
            next_probe: Instant::now() + backoff,
            backoff,
        };
    }

    fn probe_due(&self) -> bool {
        match &*self.health.lock().expect("health is never poisoned") {
            Health::Up => false,
            Health::Down { next_probe, .. } => Instant::now() >= *next_probe,
        }
    }

    fn probed(&self, ok: Result<(), String>) {
        let mut h = self.health.lock().expect("health is never poisoned");
        match ok {
            Ok(()) => {
                if matches!(*h, Health::Down { .. }) {
                    tracing::info!(engine = %self.name, "engine answers again; placing jobs on it");
                }
                *h = Health::Up;
            }
            Err(why) => {
                let backoff = match &*h {
                    Health::Up => PROBE_BACKOFF_MIN,
                    Health::Down { backoff, .. } => (*backoff * 2).min(PROBE_BACKOFF_MAX),
                };
                *h = Health::Down {
                    why,
                    next_probe: Instant::now() + backoff,
                    backoff,
                };
            }
        }
    }

    /// Takes a slot if one is free.
    fn try_take(&self) -> bool {
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max_jobs).then_some(n + 1)
            })
            .is_ok()
    }
}

/// The engines of this process.
pub struct Pool {
    engines: Vec<Arc<PoolEngine>>,
    freed: Arc<Notify>,
}

/// A job's slot on the engine it was placed on; dropping it frees the slot.
pub struct Placed {
    pub engine: Arc<PoolEngine>,
    freed: Arc<Notify>,
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.engine.running.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
    }
}

/// What a job asks of its engine.
#[derive(Debug, Clone)]
pub struct Needs<'a> {
    pub image: &'a str,
    pub image_id: &'a str,
    pub labels: &'a [String],
}

/// Why a job was not placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaced {
    /// Cancelled while waiting.
    Cancelled,
    /// Still not placed when the wait ended; the last reason.
    Waited(String),
}

impl Pool {
    pub fn new(engines: Vec<PoolEngine>) -> Pool {
        assert!(!engines.is_empty(), "a pool has at least one engine");
        Pool {
            engines: engines.into_iter().map(Arc::new).collect(),
            freed: Arc::new(Notify::new()),
        }
    }

    /// A pool of one engine.
    pub fn single(
        name: &str,
        runtime: Runtime,
        workspaces: Arc<dyn Workspaces>,
        max_jobs: usize,
    ) -> Pool {
        Pool::new(vec![PoolEngine::new(
            name,
            runtime,
            workspaces,
            max_jobs,
            vec![],
        )])
    }

    pub fn engines(&self) -> &[Arc<PoolEngine>] {
        &self.engines
    }

    /// The first engine (what a run's environment is resolved on: every engine of a pool
    /// renders environments alike, and placement checks each engine's image id).
    pub fn first(&self) -> &Arc<PoolEngine> {
        &self.engines[0]
    }

    /// Lets go of what each engine's workspaces keep between jobs (the tree cache's mount),
    /// at a clean exit.
    pub fn close(&self) {
        for e in &self.engines {
            e.workspaces.close();
        }
    }

    /// Every engine's runtime and workspaces, for recovery.
    pub fn job_engines(&self) -> Vec<crate::workspace::JobEngine> {
        self.engines
            .iter()
            .map(|e| crate::workspace::JobEngine {
                name: e.name.clone(),
                runtime: e.runtime.clone(),
                workspaces: e.workspaces.clone(),
            })
            .collect()
    }

    /// Why no engine takes `needs` now, or the engine whose slot was taken. Probes engines
    /// that are due.
    async fn try_place(&self, needs: &Needs<'_>) -> Result<Placed, String> {
        let mut reasons = Vec::new();
        let mut fits: Vec<&Arc<PoolEngine>> = Vec::new();
        for e in &self.engines {
            if let Some(missing) = needs.labels.iter().find(|l| !e.labels.contains(l)) {
                reasons.push(format!("{}: lacks label {missing:?}", e.name));
                continue;
            }
            if e.probe_due() {
                let probe = e.runtime.image_id(needs.image).await;
                e.probed(match &probe {
                    Err(crate::sandbox::SandboxError::ImageMissing { .. }) | Ok(_) => Ok(()),
                    Err(err) => Err(err.to_string()),
                });
            }
            if let Some(why) = e.down_reason() {
                reasons.push(format!("{}: unreachable ({why})", e.name));
                continue;
            }
            if e.running() >= e.max_jobs {
                reasons.push(format!("{}: all {} slots in use", e.name, e.max_jobs));
                continue;
            }
            match e.runtime.image_id(needs.image).await {
                Ok(id) if id == needs.image_id => fits.push(e),
                Ok(id) => reasons.push(format!(
                    "{}: image {} is {id}, not {}",
                    e.name, needs.image, needs.image_id
                )),
                Err(crate::sandbox::SandboxError::ImageMissing { .. }) => {
                    reasons.push(format!("{}: has no image {}", e.name, needs.image))
                }
                Err(err) => {
                    e.mark_down(&err.to_string());
                    reasons.push(format!("{}: unreachable ({err})", e.name));
                }
            }
        }
        // Least loaded by share of slots in use; configuration order breaks ties.
        fits.sort_by(|a, b| (a.running() * b.max_jobs).cmp(&(b.running() * a.max_jobs)));
        for e in fits {
            if e.try_take() {
                return Ok(Placed {
                    engine: e.clone(),
                    freed: self.freed.clone(),
                });
            }
            reasons.push(format!("{}: all {} slots in use", e.name, e.max_jobs));
        }
        Err(format!(
            "no engine can take the job now: {}",
            reasons.join("; ")
        ))
    }

    /// Places a job, waiting up to `wait` (reporting each new reason to `waiting`) until an
    /// engine can take it; `cancel` flipping to `true` ends the wait.
    pub async fn place(
        &self,
        needs: &Needs<'_>,
        wait: Duration,
        cancel: &mut watch::Receiver<bool>,
        mut waiting: impl FnMut(&str),
    ) -> Result<Placed, Unplaced> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut last = String::new();
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_place(needs).await {
                Ok(p) => return Ok(p),
                Err(why) => {
                    if why != last {
                        waiting(&why);
                        last = why;
                    }
                }
            }
            if *cancel.borrow() {
                return Err(Unplaced::Cancelled);
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(REPLACE_TICK) => {}
                _ = tokio::time::sleep_until(deadline) => return Err(Unplaced::Waited(last)),
                _ = cancel.changed() => {
                    if *cancel.borrow() {
                        return Err(Unplaced::Cancelled);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::fake::FakeRuntime;
    use crate::sandbox::runtime::ContainerRuntime;

    fn engine(name: &str, fake: &Arc<FakeRuntime>, max_jobs: usize, labels: &[&str]) -> PoolEngine {
        PoolEngine::new(
            name,
            fake.clone(),
            Arc::new(crate::workspace::HostBind::new(std::path::Path::new(
                "/nonexistent",
            ))),
            max_jobs,
            labels.iter().map(|l| l.to_string()).collect(),
        )
    }

    #[tokio::test]
    async fn jobs_go_to_the_least_loaded_engine_with_a_slot_and_wait_when_none_has_one() {
        let a = Arc::new(FakeRuntime::new());
        let b = Arc::new(FakeRuntime::new());
        let pool = Pool::new(vec![engine("a", &a, 1, &[]), engine("b", &b, 2, &[])]);
        let id = a.image_id("img").await.unwrap();
        let needs = Needs {
            image: "img",
            image_id: &id,
            labels: &[],
        };
        let (_tx, mut cancel) = watch::channel(false);
        let short = Duration::from_millis(50);
        let p1 = pool
            .place(&needs, short, &mut cancel, |_| {})
            .await
            .unwrap();
        let p2 = pool
            .place(&needs, short, &mut cancel, |_| {})
            .await
            .unwrap();
        let p3 = pool
            .place(&needs, short, &mut cancel, |_| {})
            .await
            .unwrap();
        let mut names: Vec<&str> = [&p1, &p2, &p3]
            .iter()
            .map(|p| p.engine.name.as_str())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b", "b"]);
        let mut reasons = Vec::new();
        let full = pool
            .place(&needs, short, &mut cancel, |r| reasons.push(r.to_string()))
            .await;
        let full = full.err();
        assert!(
            matches!(&full, Some(Unplaced::Waited(w)) if w.contains("a: all 1 slots in use") && w.contains("b: all 2 slots in use")),
            "{full:?}"
        );
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        // A freed slot wakes a waiting job at once.
        let waiter = async {
            pool.place(&needs, Duration::from_secs(30), &mut cancel, |_| {})
                .await
        };
        let freer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(p1);
        };
        let (placed, ()) = tokio::join!(waiter, freer);
        assert_eq!(placed.unwrap().engine.name, "a");
    }

    #[tokio::test]
    async fn labels_image_ids_and_health_keep_jobs_off_an_engine() {
        let a = Arc::new(FakeRuntime::new());
        let b = Arc::new(FakeRuntime::new());
        let pool = Pool::new(vec![engine("a", &a, 4, &[]), engine("b", &b, 4, &["gpu"])]);
        let id = a.image_id("img").await.unwrap();
        let (_tx, mut cancel) = watch::channel(false);
        let short = Duration::from_millis(20);
        let gpu = ["gpu".to_string()];
        let needs = Needs {
            image: "img",
            image_id: &id,
            labels: &gpu,
        };
        assert_eq!(
            pool.place(&needs, short, &mut cancel, |_| {})
                .await
                .unwrap()
                .engine
                .name,
            "b"
        );
        // An engine whose image has another id never gets the job.
        let other = Needs {
            image: "img",
            image_id: "sha256:other",
            labels: &[],
        };
        let e = pool
            .place(&other, short, &mut cancel, |_| {})
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&e, Unplaced::Waited(w) if w.contains("not sha256:other")),
            "{e:?}"
        );
        // A failed engine is skipped until a probe finds it answering again.
        pool.engines()[1].mark_down("connection refused");
        let e = pool
            .place(&needs, short, &mut cancel, |_| {})
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&e, Unplaced::Waited(w) if w.contains("b: unreachable (connection refused)") && w.contains("a: lacks label \"gpu\"")),
            "{e:?}"
        );
        let placed = pool
            .place(&needs, PROBE_BACKOFF_MIN * 3, &mut cancel, |_| {})
            .await
            .unwrap();
        assert_eq!(placed.engine.name, "b", "probed again after the backoff");
        // Cancelled while waiting.
        let (tx, mut cancel) = watch::channel(false);
        tx.send(true).unwrap();
        assert_eq!(
            pool.place(&other, Duration::from_secs(30), &mut cancel, |_| {})
                .await
                .err(),
            Some(Unplaced::Cancelled)
        );
    }
}
