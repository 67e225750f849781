//! A bounded, fair pool of cancellable background jobs, keyed by id: at most `max` run at
//! once, each under a tenant (its workspace) with its own bounds on running and queued jobs.
//! A free slot goes to the next tenant in turn that has a job waiting and room to run it
//! (round robin), so one busy tenant cannot starve another. Any job can be cancelled, queued
//! or running, and waited for until it has settled. Candidate verifications, a validation's
//! tests and submitted jobs all run on it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// One tenant's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    /// Most of its jobs running at once.
    pub max_running: usize,
    /// Most of its jobs waiting for a slot (reserved or queued).
    pub max_queued: usize,
}

/// A job refused because its tenant's queue is full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workspace {tenant:?} has {queued} jobs queued; its max_queued_jobs is {max}")]
pub struct QueueFull {
    pub tenant: String,
    pub queued: usize,
    pub max: usize,
}

/// One live job: how to cancel it and how to know it has settled.
struct Live {
    cancel: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

/// What a job is started with.
pub struct Slot {
    /// True when the job got a permit; false when it was cancelled while still queued (it then
    /// runs only to settle itself as cancelled, without doing the work).
    pub admitted: bool,
    /// Flips to `true` when the job is cancelled.
    pub cancel: watch::Receiver<bool>,
}

struct Waiter {
    id: String,
    grant: oneshot::Sender<Permit>,
}

#[derive(Default)]
struct Tenant {
    running: usize,
    /// Reservations not yet turned into queued jobs.
    reserved: usize,
    waiting: VecDeque<Waiter>,
}

struct State {
    max: usize,
    running: usize,
    tenants: BTreeMap<String, Tenant>,
    /// The tenant served last: the next slot goes to the first one after it with work.
    last: Option<String>,
    live: HashMap<String, Live>,
}

struct Inner {
    state: Mutex<State>,
    limits: Box<dyn Fn(&str) -> TenantLimits + Send + Sync>,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("the worker state is never poisoned")
    }

    /// Hands free slots to waiting jobs, tenants in turn. Called with the state locked.
    fn schedule(self: &Arc<Self>, st: &mut State) {
        while st.running < st.max {
            let names: Vec<&String> = st.tenants.keys().collect();
            let start = match &st.last {
                Some(last) => names.iter().position(|n| *n > last).unwrap_or(0),
                None => 0,
            };
            let pick = (0..names.len())
                .map(|i| names[(start + i) % names.len()])
                .find(|name| {
                    let t = &st.tenants[*name];
                    !t.waiting.is_empty() && t.running < (self.limits)(name).max_running
                })
                .cloned();
            let Some(name) = pick else { return };
            let tenant = st.tenants.get_mut(&name).expect("picked from the map");
            let waiter = tenant.waiting.pop_front().expect("picked with a waiter");
            tenant.running += 1;
            st.running += 1;
            st.last = Some(name.clone());
            let permit = Permit {
                pool: Some(self.clone()),
                tenant: name,
            };
            if let Err(mut back) = waiter.grant.send(permit) {
                // Its job is gone (cancelled between queueing and now): take the slot back
                // here, without the permit's drop locking the state again.
                back.pool = None;
                let tenant = st.tenants.get_mut(&back.tenant).expect("still present");
                tenant.running -= 1;
                st.running -= 1;
            }
        }
    }
}

/// A running job's slot; dropping it frees the slot for the next job in turn.
struct Permit {
    pool: Option<Arc<Inner>>,
    tenant: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let mut st = pool.lock();
            if let Some(t) = st.tenants.get_mut(&self.tenant) {
                t.running -= 1;
            }
            st.running -= 1;
            pool.schedule(&mut st);
        }
    }
}

/// Room for one job in its tenant's queue, taken before the job is recorded so the bound is
/// never exceeded by two racing callers; dropping it unused gives the room back.
pub struct Reservation {
    pool: Arc<Inner>,
    tenant: String,
    armed: bool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            let mut st = self.pool.lock();
            if let Some(t) = st.tenants.get_mut(&self.tenant) {
                t.reserved -= 1;
            }
        }
    }
}

/// The pool.
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
}

impl Workers {
    /// A pool running at most `max` jobs at once, one tenant's within `limits(tenant)`.
    pub fn new(
        max: usize,
        limits: impl Fn(&str) -> TenantLimits + Send + Sync + 'static,
    ) -> Workers {
        Workers {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    max,
                    running: 0,
                    tenants: BTreeMap::new(),
                    last: None,
                    live: HashMap::new(),
                }),
                limits: Box::new(limits),
            }),
        }
    }

    /// Takes room for one job of `tenant`, or says its queue is full.
    pub fn reserve(&self, tenant: &str) -> Result<Reservation, QueueFull> {
        let max = (self.inner.limits)(tenant).max_queued;
        let mut st = self.inner.lock();
        let t = st.tenants.entry(tenant.to_string()).or_default();
        let queued = t.reserved + t.waiting.len();
        if queued >= max {
            return Err(QueueFull {
                tenant: tenant.to_string(),
                queued,
                max,
            });
        }
        t.reserved += 1;
        Ok(self.reservation(tenant))
    }

    /// Room for a job that was admitted before (one a restarted daemon resumes): never refused.
    pub fn reserve_resumed(&self, tenant: &str) -> Reservation {
        let mut st = self.inner.lock();
        st.tenants.entry(tenant.to_string()).or_default().reserved += 1;
        drop(st);
        self.reservation(tenant)
    }

    fn reservation(&self, tenant: &str) -> Reservation {
        Reservation {
            pool: self.inner.clone(),
            tenant: tenant.to_string(),
            armed: true,
        }
    }

    /// Where job `id` waits in its tenant's queue (1 is next), while it waits.
    pub fn position(&self, id: &str) -> Option<usize> {
        let st = self.inner.lock();
        st.tenants
            .values()
            .find_map(|t| t.waiting.iter().position(|w| w.id == id).map(|i| i + 1))
    }

    /// Starts `job` under `id` in the background in the room `r` holds: it waits for its turn
    /// (or a cancel), runs holding the slot, and is forgotten once it returns.
    pub fn spawn<F, Fut>(&self, mut r: Reservation, id: String, job: F)
    where
        F: FnOnce(Slot) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        let (grant_tx, mut grant_rx) = oneshot::channel();
        {
            let mut st = self.inner.lock();
            st.live.insert(
                id.clone(),
                Live {
                    cancel: cancel_tx,
                    done: done_rx,
                },
            );
            let t = st.tenants.entry(r.tenant.clone()).or_default();
            t.reserved -= 1;
            r.armed = false;
            t.waiting.push_back(Waiter {
                id: id.clone(),
                grant: grant_tx,
            });
            self.inner.schedule(&mut st);
        }
        let inner = self.inner.clone();
        let tenant = r.tenant.clone();
        tokio::spawn(async move {
            let mut cancelled = cancel_rx.clone();
            let permit = tokio::select! {
                p = &mut grant_rx => p.ok(),
                _ = crate::cancel::requested(&mut cancelled) => None,
            };
            let permit = match permit {
                Some(p) => Some(p),
                None => {
                    // Cancelled while waiting: leave the queue, or take a grant that raced in.
                    let mut st = inner.lock();
                    if let Some(t) = st.tenants.get_mut(&tenant) {
                        t.waiting.retain(|w| w.id != id);
                    }
                    drop(st);
                    grant_rx.close();
                    grant_rx.try_recv().ok()
                }
            };
            job(Slot {
                admitted: permit.is_some(),
                cancel: cancel_rx,
            })
            .await;
            drop(permit);
            inner.lock().live.remove(&id);
            let _ = done_tx.send(true);
        });
    }

    /// Cancels job `id` and waits up to `wait` for it to settle. True when it settled (or was not
    /// running in this process).
    pub async fn cancel(&self, id: &str, wait: Duration) -> bool {
        let done = {
            let st = self.inner.lock();
            match st.live.get(id) {
                Some(w) => {
                    let _ = w.cancel.send(true);
                    w.done.clone()
                }
                None => return true,
            }
        };
        let mut done = done;
        tokio::time::timeout(wait, done.wait_for(|d| *d))
            .await
            .is_ok()
    }

    /// Cancels every job; returns how many did not settle within `wait`.
    pub async fn cancel_all(&self, wait: Duration) -> usize {
        let dones: Vec<_> = {
            let st = self.inner.lock();
            st.live
                .values()
                .map(|w| {
                    let _ = w.cancel.send(true);
                    w.done.clone()
                })
                .collect()
        };
        let mut unsettled = 0;
        for mut d in dones {
            if tokio::time::timeout(wait, d.wait_for(|x| *x))
                .await
                .is_err()
            {
                unsettled += 1;
            }
        }
        unsettled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn at_most_max_run_and_a_queued_job_cancelled_is_never_admitted() {
        let pool = Workers::new(1, |_| TenantLimits {
            max_running: 1,
            max_queued: 10,
        });
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (release_tx, release_rx) = watch::channel(false);
        let admitted = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let (running, peak, admitted) = (running.clone(), peak.clone(), admitted.clone());
            let mut release = release_rx.clone();
            let r = pool.reserve("w").unwrap();
            pool.spawn(r, format!("j{i}"), move |slot| async move {
                admitted.lock().unwrap().push((i, slot.admitted));
                if !slot.admitted {
                    return;
                }
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let mut cancel = slot.cancel;
                tokio::select! {
                    _ = release.wait_for(|r| *r) => {}
                    _ = cancel.wait_for(|c| *c) => {}
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        until("j0 runs, j1 and j2 queued", || {
            running.load(Ordering::SeqCst) == 1
                && pool.position("j1") == Some(1)
                && pool.position("j2") == Some(2)
        })
        .await;
        // j0 holds the only permit; j1 and j2 are queued. Cancelling j2 settles it unadmitted.
        assert!(pool.cancel("j2", Duration::from_secs(5)).await);
        release_tx.send(true).unwrap();
        // j0 finishes and hands its permit to j1, which runs and finishes too.
        until("j1 ran and finished", || {
            admitted.lock().unwrap().len() == 3 && running.load(Ordering::SeqCst) == 0
        })
        .await;
        assert_eq!(pool.cancel_all(Duration::from_secs(5)).await, 0);
        assert_eq!(
            peak.load(Ordering::SeqCst),
            1,
            "never more than max at once"
        );
        let mut seen = admitted.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, vec![(0, true), (1, true), (2, false)]);
        assert!(pool.cancel("unknown", Duration::from_secs(1)).await);
    }

    /// A job that records its start and then waits for `release` (or its cancel).
    fn hold(
        pool: &Workers,
        tenant: &str,
        id: String,
        order: Arc<Mutex<Vec<String>>>,
        release: watch::Receiver<bool>,
    ) {
        let r = pool.reserve(tenant).unwrap();
        pool.spawn(r, id.clone(), move |slot| async move {
            if !slot.admitted {
                return;
            }
            order.lock().unwrap().push(id);
            let (mut release, mut cancel) = (release, slot.cancel);
            tokio::select! {
                _ = release.wait_for(|r| *r) => {}
                _ = cancel.wait_for(|c| *c) => {}
            }
        });
    }

    /// How long a test waits for a state before it calls the state never reached: a bound on
    /// a hang, never a measure of speed.
    const UNTIL_BOUND: Duration = Duration::from_secs(60);

    /// Waits until `cond` holds: the pool's state, polled (its jobs announce nothing else).
    async fn until(what: &str, cond: impl Fn() -> bool) {
        let reached = tokio::time::timeout(UNTIL_BOUND, async {
            while !cond() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(reached.is_ok(), "never reached: {what}");
    }

    #[tokio::test]
    async fn a_busy_tenant_cannot_starve_another_and_each_keeps_its_running_bound() {
        let pool = Workers::new(2, |t| TenantLimits {
            max_running: if t == "capped" { 1 } else { 2 },
            max_queued: 100,
        });
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut releases = HashMap::new();
        fn release_of(
            releases: &mut HashMap<String, watch::Sender<bool>>,
            id: &str,
        ) -> watch::Receiver<bool> {
            let (tx, rx) = watch::channel(false);
            releases.insert(id.to_string(), tx);
            rx
        }
        // "busy" fills both slots and queues 48 more.
        for i in 0..50 {
            let id = format!("busy{i}");
            let rx = release_of(&mut releases, &id);
            hold(&pool, "busy", id, order.clone(), rx);
        }
        until("two busy jobs start", || order.lock().unwrap().len() == 2).await;
        let rx = release_of(&mut releases, "quiet0");
        hold(&pool, "quiet", "quiet0".into(), order.clone(), rx);
        assert_eq!(pool.position("quiet0"), Some(1), "first in its own queue");
        assert_eq!(pool.position("busy2"), Some(1));
        assert_eq!(pool.position("busy49"), Some(48));
        // The next free slot goes to the quiet tenant, not to busy's 48 waiting jobs.
        releases["busy0"].send(true).unwrap();
        until("the next job starts", || order.lock().unwrap().len() == 3).await;
        assert_eq!(order.lock().unwrap()[2], "quiet0");
        assert_eq!(pool.position("quiet0"), None);
        // Turns go round the tenants in order: busy (after quiet), then capped, then busy.
        for i in 0..3 {
            let id = format!("capped{i}");
            let rx = release_of(&mut releases, &id);
            hold(&pool, "capped", id, order.clone(), rx);
        }
        releases["busy1"].send(true).unwrap();
        until("a fourth job starts", || order.lock().unwrap().len() == 4).await;
        releases["quiet0"].send(true).unwrap();
        until("a fifth job starts", || order.lock().unwrap().len() == 5).await;
        let seen = order.lock().unwrap().clone();
        assert_eq!(&seen[3..], ["busy2", "capped0"], "{seen:?}");
        // After capped0 the turn is busy's again (capped1 waits its next turn).
        releases["busy2"].send(true).unwrap();
        until("a sixth job starts", || order.lock().unwrap().len() == 6).await;
        let seen = order.lock().unwrap().clone();
        assert_eq!(seen[5], "busy3", "{seen:?}");
        assert_eq!(pool.position("capped1"), Some(1));
        assert_eq!(pool.cancel_all(Duration::from_secs(10)).await, 0);

        // Alone, a tenant bounded to one running job never holds two slots, even both free.
        let pool = Workers::new(2, |_| TenantLimits {
            max_running: 1,
            max_queued: 10,
        });
        let order = Arc::new(Mutex::new(Vec::new()));
        let (_keep, rx) = watch::channel(false);
        for i in 0..3 {
            hold(&pool, "capped", format!("c{i}"), order.clone(), rx.clone());
        }
        until("c0 starts", || order.lock().unwrap().len() == 1).await;
        // The pool's own account: c1 and c2 wait in line though a slot is idle (a pool that
        // had started one would no longer give it a position).
        assert_eq!(order.lock().unwrap().len(), 1, "one running, one slot idle");
        assert_eq!(pool.position("c1"), Some(1));
        assert_eq!(pool.position("c2"), Some(2));
        assert_eq!(pool.cancel_all(Duration::from_secs(10)).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_reservations_never_exceed_the_queue_bound() {
        for round in 0..50 {
            let pool = Workers::new(1, |_| TenantLimits {
                max_running: 1,
                max_queued: 3,
            });
            let barrier = Arc::new(tokio::sync::Barrier::new(8));
            let mut tasks = Vec::new();
            for side in 0..8u64 {
                let (pool, barrier) = (pool.clone(), barrier.clone());
                // A deterministic jitter per round and side, up to 200 µs.
                let jitter = (round as u64 * 7919 + side * 104_729) % 200;
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    tokio::time::sleep(Duration::from_micros(jitter)).await;
                    pool.reserve("w").ok()
                }));
            }
            let mut held = Vec::new();
            for t in tasks {
                if let Some(r) = t.await.unwrap() {
                    held.push(r);
                }
            }
            assert_eq!(
                held.len(),
                3,
                "round {round}: exactly max_queued reservations"
            );
            let full = pool.reserve("w").err().expect("the queue is full");
            assert_eq!((full.queued, full.max), (3, 3));
            assert!(full.to_string().contains("max_queued_jobs is 3"), "{full}");
            // A reservation given back makes room again; another tenant has its own queue.
            held.pop();
            assert!(pool.reserve("w").is_ok());
            assert!(pool.reserve("other").is_ok());
        }
    }
}
