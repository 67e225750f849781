//! The live log of a running job: its output handed to followers as it arrives. The job only
//! ever appends (a bounded copy of the first bytes, one broadcast send that never waits); a
//! follower that falls [`LIVE_LOG_FOLLOWER_CHUNKS`] behind is dropped with a note instead of
//! slowing the job, so a reader that never reads costs the job nothing and the daemon at most
//! that many chunks. Once the job has settled its log is the verification's retained output.

use crate::limits::{LIVE_LOG_FOLLOWER_CHUNKS, LIVE_LOG_HEAD_BYTES, MAX_LOG_FOLLOWERS};
use crate::verification::Status;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// What a follower receives.
#[derive(Debug, Clone)]
pub enum LogEvent {
    /// Output, in order.
    Output(Arc<[u8]>),
    /// The job settled with this status (`None`: this process could not settle it; recovery
    /// will); nothing follows.
    Settled(Option<Status>),
}

/// A follower's start: what it missed, then the live events.
pub struct Follow {
    /// The output so far, when it all fits in the kept head; else the head.
    pub head: Vec<u8>,
    /// Bytes written between the kept head and the first live event (shown as a note).
    pub skipped: u64,
    pub events: broadcast::Receiver<LogEvent>,
    /// Turns `true` when the daemon begins to stop: the follower should end.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// Why a follower could not join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this job already has {MAX_LOG_FOLLOWERS} followers; the limit is {MAX_LOG_FOLLOWERS}")]
pub struct TooManyFollowers;

struct Inner {
    head: Vec<u8>,
    total: u64,
    settled: bool,
}

/// One running job's live log.
pub struct LiveLog {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<LogEvent>,
    stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl LiveLog {
    fn new(stopping: Arc<tokio::sync::watch::Sender<bool>>) -> LiveLog {
        LiveLog {
            stopping,
            inner: Mutex::new(Inner {
                head: Vec::new(),
                total: 0,
                settled: false,
            }),
            tx: broadcast::channel(LIVE_LOG_FOLLOWER_CHUNKS).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("a live log is never poisoned")
    }

    /// Appends output. Never waits for a follower.
    pub fn push(&self, chunk: &[u8]) {
        let mut inner = self.lock();
        inner.total += chunk.len() as u64;
        let room = LIVE_LOG_HEAD_BYTES.saturating_sub(inner.head.len());
        let keep = room.min(chunk.len());
        inner.head.extend_from_slice(&chunk[..keep]);
        // Sent under the lock, so a follower's snapshot and its first event never overlap or
        // leave a gap. With no follower the send fails; that is fine.
        let _ = self.tx.send(LogEvent::Output(Arc::from(chunk)));
    }

    /// Ends the log with the job's settled status.
    fn settle(&self, status: Option<Status>) {
        let mut inner = self.lock();
        inner.settled = true;
        let _ = self.tx.send(LogEvent::Settled(status));
    }

    /// Joins as a follower: the output so far (as much as is kept) and every event after it.
    /// `None` when the job has settled already (its log is the verification's output).
    fn follow(&self) -> Result<Option<Follow>, TooManyFollowers> {
        let inner = self.lock();
        if inner.settled {
            return Ok(None);
        }
        if self.tx.receiver_count() >= MAX_LOG_FOLLOWERS {
            return Err(TooManyFollowers);
        }
        Ok(Some(Follow {
            head: inner.head.clone(),
            skipped: inner.total - inner.head.len() as u64,
            events: self.tx.subscribe(),
            stopping: self.stopping.subscribe(),
        }))
    }

    /// The output so far as far as it is kept, and the total written.
    pub fn snapshot(&self) -> (Vec<u8>, u64) {
        let inner = self.lock();
        (inner.head.clone(), inner.total)
    }
}

/// The live logs of this process's running jobs, by verification id.
#[derive(Clone)]
pub struct LiveLogs {
    logs: Arc<Mutex<HashMap<String, Arc<LiveLog>>>>,
    stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for LiveLogs {
    fn default() -> LiveLogs {
        LiveLogs {
            logs: Arc::default(),
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }
}

impl LiveLogs {
    /// Tells every follower, now and later, that the daemon is stopping.
    pub fn stop_followers(&self) {
        self.stopping.send_replace(true);
    }

    /// Becomes `true` when the daemon stops: every long-lived stream (log followers, event
    /// streams) ends then, so none holds the connection drain open.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Joins `verification_id`'s live log as a follower (see [`LiveLog::follow`]); `Ok(None)`
    /// when it has no live log (settled, or not this process's) or the daemon is stopping.
    pub fn follow(&self, verification_id: &str) -> Result<Option<Follow>, TooManyFollowers> {
        match self.get(verification_id) {
            Some(log) if !*self.stopping.borrow() => log.follow(),
            _ => Ok(None),
        }
    }

    /// A new log for `verification_id` and the tap that feeds it.
    pub fn open(&self, verification_id: &str) -> crate::sandbox::OutputTap {
        let log = Arc::new(LiveLog::new(self.stopping.clone()));
        self.logs
            .lock()
            .expect("the live log map is never poisoned")
            .insert(verification_id.to_string(), log.clone());
        crate::sandbox::OutputTap(Arc::new(move |chunk| log.push(chunk)))
    }

    /// The live log of a running job of this process.
    pub fn get(&self, verification_id: &str) -> Option<Arc<LiveLog>> {
        self.logs
            .lock()
            .expect("the live log map is never poisoned")
            .get(verification_id)
            .cloned()
    }

    /// Ends `verification_id`'s log (its followers receive the status) and forgets it.
    pub fn settle(&self, verification_id: &str, status: Option<Status>) {
        let log = self
            .logs
            .lock()
            .expect("the live log map is never poisoned")
            .remove(verification_id);
        if let Some(log) = log {
            log.settle(status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_follower_sees_everything_in_order_and_a_stalled_one_is_dropped_not_waited_for() {
        let logs = LiveLogs::default();
        let tap = logs.open("v1");
        (tap.0)(b"early ");
        let log = logs.get("v1").unwrap();
        let mut f = logs.follow("v1").unwrap().unwrap();
        assert_eq!(f.head, b"early ");
        assert_eq!(f.skipped, 0);
        let mut stalled = log.follow().unwrap().unwrap();
        (tap.0)(b"late");
        match f.events.recv().await.unwrap() {
            LogEvent::Output(b) => assert_eq!(&b[..], b"late"),
            e => panic!("{e:?}"),
        }
        // The job writes far more than a follower may fall behind; pushing never waits.
        for _ in 0..LIVE_LOG_FOLLOWER_CHUNKS * 3 {
            (tap.0)(&[b'x'; 100]);
        }
        assert!(matches!(
            stalled.events.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        let (head, total) = log.snapshot();
        assert_eq!(head.len(), LIVE_LOG_HEAD_BYTES);
        assert_eq!(total, 10 + (LIVE_LOG_FOLLOWER_CHUNKS * 3 * 100) as u64);
        // A late follower is told how much it missed beyond the kept head.
        let late = log.follow().unwrap().unwrap();
        assert_eq!(late.skipped, total - LIVE_LOG_HEAD_BYTES as u64);
        logs.settle("v1", Some(Status::Passed));
        assert!(log.follow().unwrap().is_none(), "settled: no live log");
        assert!(logs.get("v1").is_none());
        assert!(logs.follow("v1").unwrap().is_none());
        // A stopping daemon takes no new followers and tells the present ones.
        let _tap = logs.open("v2");
        let mut f = logs.follow("v2").unwrap().unwrap();
        logs.stop_followers();
        assert!(logs.follow("v2").unwrap().is_none());
        f.stopping.wait_for(|s| *s).await.unwrap();
    }

    #[test]
    fn followers_are_bounded() {
        let logs = LiveLogs::default();
        let _tap = logs.open("v1");
        let log = logs.get("v1").unwrap();
        let held: Vec<_> = (0..MAX_LOG_FOLLOWERS)
            .map(|_| log.follow().unwrap().unwrap())
            .collect();
        assert_eq!(log.follow().err(), Some(TooManyFollowers));
        drop(held);
        assert!(log.follow().unwrap().is_some());
    }
}
