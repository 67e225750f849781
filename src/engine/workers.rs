//! A bounded pool of cancellable background jobs, keyed by id: at most `max` run at once, the
//! others wait (queued) for a permit; any job can be cancelled, queued or running, and waited for
//! until it has settled. Candidate verifications run on it; governed patch validation will.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

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

/// The pool.
#[derive(Clone)]
pub struct Workers {
    permits: Arc<Semaphore>,
    live: Arc<Mutex<HashMap<String, Live>>>,
}

impl Workers {
    /// A pool running at most `max` jobs at once.
    pub fn new(max: usize) -> Workers {
        Workers {
            permits: Arc::new(Semaphore::new(max)),
            live: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Starts `job` under `id` in the background: it waits for a permit (or a cancel), runs
    /// holding the permit, and is forgotten once it returns.
    pub fn spawn<F, Fut>(&self, id: String, job: F)
    where
        F: FnOnce(Slot) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (done_tx, done_rx) = watch::channel(false);
        self.live
            .lock()
            .expect("the worker map is never poisoned")
            .insert(
                id.clone(),
                Live {
                    cancel: cancel_tx,
                    done: done_rx,
                },
            );
        let permits = self.permits.clone();
        let live = self.live.clone();
        tokio::spawn(async move {
            let mut cancelled = cancel_rx.clone();
            let permit = tokio::select! {
                p = permits.acquire_owned() => p.ok(),
                r = cancelled.wait_for(|c| *c) => {
                    drop(r);
                    None
                }
            };
            job(Slot {
                admitted: permit.is_some(),
                cancel: cancel_rx,
            })
            .await;
            drop(permit);
            live.lock()
                .expect("the worker map is never poisoned")
                .remove(&id);
            let _ = done_tx.send(true);
        });
    }

    /// Cancels job `id` and waits up to `wait` for it to settle. True when it settled (or was not
    /// running in this process).
    pub async fn cancel(&self, id: &str, wait: Duration) -> bool {
        let done = {
            let live = self.live.lock().expect("the worker map is never poisoned");
            match live.get(id) {
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
            let live = self.live.lock().expect("the worker map is never poisoned");
            live.values()
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
        let pool = Workers::new(1);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (release_tx, release_rx) = watch::channel(false);
        let admitted = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let (running, peak, admitted) = (running.clone(), peak.clone(), admitted.clone());
            let mut release = release_rx.clone();
            pool.spawn(format!("j{i}"), move |slot| async move {
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
        tokio::time::sleep(Duration::from_millis(50)).await;
        // j0 holds the only permit; j1 and j2 are queued. Cancelling j2 settles it unadmitted.
        assert!(pool.cancel("j2", Duration::from_secs(5)).await);
        release_tx.send(true).unwrap();
        // j0 finishes and hands its permit to j1, which runs and finishes too.
        let start = std::time::Instant::now();
        while admitted.lock().unwrap().len() < 3 || running.load(Ordering::SeqCst) > 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "j1 never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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
}
