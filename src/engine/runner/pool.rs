//! The engines jobs run on, and where each job goes. A job is placed on an engine that is
//! healthy, has a free slot (`max_jobs`), carries the labels its profile requires and holds
//! every image the job needs with exactly the id Airlock built (see [`images`]); among those,
//! the least loaded (by share of its slots in use, then by order of configuration). A job that
//! fits nowhere waits, with the reason visible, until a slot frees, an engine comes back, or
//! its own timeout passes. Placement reads only what background checks found: it never waits
//! on an engine, so one that hangs delays no job placed elsewhere. An engine that fails stops
//! receiving jobs and is checked again with exponential backoff. Capacity is counted per
//! Airlock process.

pub mod images;

use crate::domain::isolation::Isolation;
use crate::sandbox::Runtime;
use crate::workspace::Workspaces;
use images::{ImageSet, ImageView, Reference, Seen, Unknown};
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
    /// The engine's ids of the images jobs need, as last checked.
    pub images: ImageView,
    /// Its images whose id is not the one Airlock built, as last logged.
    mismatched: Mutex<Vec<String>>,
    /// The isolation levels it offers, as the engine last said (`None` until it answered).
    offered: Mutex<Option<Vec<Isolation>>>,
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
            images: ImageView::default(),
            mismatched: Mutex::default(),
            offered: Mutex::default(),
        }
    }

    /// The isolation levels the engine offers, as it last said (`None` until it answered).
    pub fn offered(&self) -> Option<Vec<Isolation>> {
        self.offered.lock().expect("never poisoned").clone()
    }

    /// Whether the engine offers `isolation`: `Some(false)` only when it said so. runc is
    /// taken as offered until the engine says otherwise (every engine registers it); any
    /// other level waits for the engine's word.
    pub fn offers(&self, isolation: Isolation) -> Option<bool> {
        match (self.offered(), isolation) {
            (Some(levels), _) => Some(levels.contains(&isolation)),
            (None, Isolation::Runc) => Some(true),
            (None, Isolation::Runsc) => None,
        }
    }

    /// Records what the engine said it offers.
    fn record_offered(&self, levels: Vec<Isolation>) {
        let mut o = self.offered.lock().expect("never poisoned");
        if o.as_ref() != Some(&levels) {
            tracing::info!(engine = %self.name, runtimes = ?levels, "engine's isolation levels");
        }
        *o = Some(levels);
    }

    /// Each of `images` whose id on this engine is not the one Airlock built, as `"<image> is
    /// <id>, not the built <id>"` (images either side has not answered about are left out).
    pub fn image_mismatches(&self, reference: &Reference, images: &[String]) -> Vec<String> {
        images
            .iter()
            .filter_map(
                |image| match (self.images.seen(image), reference.built_id(image)) {
                    (Some(Seen::Id(id)), Ok(built)) if id != built => {
                        Some(format!("image {image} is {id}, not the built {built}"))
                    }
                    _ => None,
                },
            )
            .collect()
    }

    /// Logs a change in which images mismatch (once per change, not per check).
    fn note_mismatches(&self, now: Vec<String>) {
        let mut last = self.mismatched.lock().expect("never poisoned");
        if *last == now {
            return;
        }
        if now.is_empty() {
            tracing::info!(engine = %self.name, "engine's images are the built ones again");
        } else {
            tracing::warn!(engine = %self.name, mismatches = %now.join("; "), "engine's images are not the ones Airlock built: it takes no job needing them");
        }
        *last = now;
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

    /// How long until the engine is to be checked again.
    fn next_check(&self) -> Duration {
        match &*self.health.lock().expect("health is never poisoned") {
            Health::Up => crate::limits::IMAGE_RECHECK_INTERVAL,
            Health::Down { next_probe, .. } => next_probe.saturating_duration_since(Instant::now()),
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
                    Health::Up => {
                        self.failures.fetch_add(1, Ordering::SeqCst);
                        tracing::warn!(engine = %self.name, reason = %why, "engine taken out of placement");
                        PROBE_BACKOFF_MIN
                    }
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
    /// The engine Airlock's images are built on: the ids jobs are resolved with.
    reference: Arc<Reference>,
    /// The images the background checks ask about.
    wanted: Arc<ImageSet>,
    /// Dropped with the pool: its background checks end.
    _stop: watch::Sender<()>,
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
    /// Every image the job's containers use, each with the id Airlock built.
    pub images: &'a [(String, String)],
    pub labels: &'a [String],
    /// The isolation level (OCI runtime) the job's profile runs under.
    pub isolation: Isolation,
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
    /// A pool of `engines` whose images are checked against `reference`'s, watching `images`
    /// from the start. Its background checks start at once (on the current tokio runtime) and
    /// end when it is dropped; their first round asks about `images` (a set given later would
    /// cost every engine a second round).
    pub fn new<'a>(
        engines: Vec<PoolEngine>,
        reference: Reference,
        images: impl IntoIterator<Item = &'a str>,
    ) -> Pool {
        assert!(!engines.is_empty(), "a pool has at least one engine");
        let (stop, _) = watch::channel(());
        let wanted = Arc::new(ImageSet::default());
        wanted.add(images);
        let pool = Pool {
            engines: engines.into_iter().map(Arc::new).collect(),
            freed: Arc::new(Notify::new()),
            reference: Arc::new(reference),
            wanted,
            _stop: stop,
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            if pool.reference.runtime().is_some() {
                rt.spawn(watch_reference(
                    pool.reference.clone(),
                    pool.wanted.clone(),
                    pool.freed.clone(),
                    pool._stop.subscribe(),
                ));
            }
            for e in &pool.engines {
                rt.spawn(watch_engine(
                    e.clone(),
                    pool.reference.clone(),
                    pool.wanted.clone(),
                    pool.freed.clone(),
                    pool._stop.subscribe(),
                ));
            }
        }
        pool
    }

    /// A pool of one engine, which is also the engine its images are built on, watching
    /// `images` from the start.
    pub fn single<'a>(
        name: &str,
        runtime: Runtime,
        workspaces: Arc<dyn Workspaces>,
        max_jobs: usize,
        images: impl IntoIterator<Item = &'a str>,
    ) -> Pool {
        let reference = Reference::new(format!("engine {name:?}"), Ok(runtime.clone()));
        Pool::new(
            vec![PoolEngine::new(name, runtime, workspaces, max_jobs, vec![])],
            reference,
            images,
        )
    }

    /// The engine Airlock's images are built on.
    pub fn reference(&self) -> &Reference {
        &self.reference
    }

    /// This machine's engine, where images are built and dependency sets fetched, when it
    /// could be reached.
    pub fn build_engine(&self) -> Option<Runtime> {
        self.reference.runtime().cloned()
    }

    /// Why no engine can ever take a job needing `image` as `built` under `isolation` with
    /// `labels`, when every engine that carries the labels answered and none both offers the
    /// isolation level and holds the image as built; `None` while one might (it does, or has
    /// not answered: the job then waits for it).
    pub fn unplaceable(
        &self,
        image: &str,
        built: &str,
        isolation: Isolation,
        labels: &[String],
    ) -> Option<String> {
        let mut why = Vec::new();
        let mut lacking = Vec::new();
        for e in &self.engines {
            if !labels.iter().all(|l| e.labels.contains(l)) {
                continue;
            }
            match e.offers(isolation) {
                None => return None,
                Some(false) => {
                    let offered: Vec<&str> = e
                        .offered()
                        .unwrap_or_default()
                        .iter()
                        .map(|i| i.as_str())
                        .collect();
                    lacking.push(format!("{} offers {}", e.name, offered.join(", ")));
                    continue;
                }
                Some(true) => {}
            }
            match e.images.seen(image) {
                Some(Seen::Id(id)) if id == built => return None,
                Some(Seen::Id(id)) => why.push(format!("{}: it is {id}", e.name)),
                Some(Seen::Missing) => why.push(format!("{}: missing", e.name)),
                None => return None,
            }
        }
        if why.is_empty() && !lacking.is_empty() {
            return Some(format!(
                "no engine offers the isolation level (runtime) {isolation}: {}; register the runtime in an engine's daemon.json (see docs/security.md, isolation levels)",
                lacking.join("; ")
            ));
        }
        Some(format!(
            "no engine holds image {image} as built ({built}): {}; `airlock images push` copies it to the configured engines",
            if why.is_empty() {
                "no engine carries the profile's engine_labels".to_string()
            } else {
                why.join("; ")
            }
        ))
    }

    /// The images the background checks ask about.
    pub fn watched_images(&self) -> Vec<String> {
        self.wanted.list()
    }

    /// Waits (up to `bound`) until an engine in placement said it offers `isolation`, or
    /// every engine said which levels it offers or is out of placement: a job of a level other
    /// than runc is refused at once when no engine offers it, which needs their word (runc is
    /// taken as offered until an engine says otherwise, so a runc job never waits for it). An
    /// engine that has not answered holds a job up only while no other engine can take it.
    pub async fn runtimes_known(&self, isolation: Isolation, bound: Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let told = self.freed.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            let offered_here =
                |e: &PoolEngine| e.offers(isolation) == Some(true) && e.down_reason().is_none();
            if self.engines.iter().any(|e| offered_here(e))
                || self
                    .engines
                    .iter()
                    .all(|e| e.offered().is_some() || e.down_reason().is_some())
            {
                return;
            }
            if tokio::time::timeout_at(deadline, told).await.is_err() {
                return;
            }
        }
    }

    /// Waits (up to `bound`) until the reference and every engine answered about every image
    /// asked about (or a check of it failed): start-up calls it so that the first submission
    /// finds the ids known.
    pub async fn checked(&self, bound: Duration) {
        let images = self.wanted.list();
        let deadline = tokio::time::Instant::now() + bound;
        let views =
            std::iter::once(&self.reference.images).chain(self.engines.iter().map(|e| &e.images));
        // Each view, until it answered about every wanted image (or a check of it failed).
        let waits = views.map(|v| {
            let images = images.clone();
            async move {
                for image in &images {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    v.known(image, 0, left).await;
                }
            }
        });
        futures_util::future::join_all(waits).await;
    }

    /// The id Airlock built `image` as, from the last answer of the engine images are built
    /// on: never an engine call unless this image was never asked about (then one bounded
    /// wait for the first check).
    pub async fn built_image_id(&self, image: &str) -> Result<String, BuiltImage> {
        let view = &self.reference.images;
        let before = view.checks();
        let new = self.wanted.add([image]);
        // Waited for only when nothing is known yet and no check has failed: an image asked
        // about for the first time, or a first check still under way.
        let unknown = view.seen(image).is_none() && view.error().is_none();
        if (new || unknown) && self.reference.runtime().is_some() {
            view.known(image, before, crate::limits::ENGINE_CALL_TIMEOUT)
                .await;
        }
        self.reference.built_id(image).map_err(|why| match why {
            Unknown::Missing => BuiltImage::Missing,
            Unknown::NotAnswered(why) => BuiltImage::Unknown(format!(
                "the id of image {image} is not known: the engine Airlock's images are built on ({}) has not answered: {why}",
                self.reference.describe
            )),
        })
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

    /// Why no engine takes `needs` now, or the engine whose slot was taken. Reads only what
    /// the background checks found: no engine is asked anything here.
    fn try_place(&self, needs: &Needs<'_>) -> Result<Placed, String> {
        let mut reasons = Vec::new();
        let mut fits: Vec<&Arc<PoolEngine>> = Vec::new();
        'engines: for e in &self.engines {
            if let Some(missing) = needs.labels.iter().find(|l| !e.labels.contains(l)) {
                reasons.push(format!("{}: lacks label {missing:?}", e.name));
                continue;
            }
            if let Some(why) = e.down_reason() {
                reasons.push(format!("{}: unreachable ({why})", e.name));
                continue;
            }
            match e.offers(needs.isolation) {
                Some(true) => {}
                Some(false) => {
                    reasons.push(format!(
                        "{}: does not offer the runtime {}",
                        e.name, needs.isolation
                    ));
                    continue;
                }
                None => {
                    reasons.push(format!("{}: its runtimes not checked yet", e.name));
                    continue;
                }
            }
            if e.running() >= e.max_jobs {
                reasons.push(format!("{}: all {} slots in use", e.name, e.max_jobs));
                continue;
            }
            for (image, built) in needs.images {
                match e.images.seen(image) {
                    Some(Seen::Id(id)) if &id == built => {}
                    Some(Seen::Id(id)) => {
                        reasons.push(format!(
                            "{}: image {image} is {id}, not the built {built}",
                            e.name
                        ));
                        continue 'engines;
                    }
                    Some(Seen::Missing) => {
                        reasons.push(format!("{}: has no image {image}", e.name));
                        continue 'engines;
                    }
                    None => {
                        reasons.push(format!("{}: image {image} not checked yet", e.name));
                        continue 'engines;
                    }
                }
            }
            fits.push(e);
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
            // Asked about from now on (a no-op once they are).
            self.wanted
                .add(needs.images.iter().map(|(i, _)| i.as_str()));
            match self.try_place(needs) {
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
                _ = crate::cancel::requested(cancel) => return Err(Unplaced::Cancelled),
            }
        }
    }
}

/// Keeps `e`'s health and image view fresh until the pool is dropped: a check every
/// [`crate::limits::IMAGE_RECHECK_INTERVAL`] while it answers, at its backoff while it does
/// not, and at once when a new image is wanted.
async fn watch_engine(
    e: Arc<PoolEngine>,
    reference: Arc<Reference>,
    wanted: Arc<ImageSet>,
    freed: Arc<Notify>,
    mut stop: watch::Receiver<()>,
) {
    loop {
        let added = wanted.added.notified();
        tokio::pin!(added);
        added.as_mut().enable();
        let images = wanted.list();
        // The images and the engine's runtimes are asked about at once, and each answer is
        // used as it comes: a runc job needs only the images (the engine's `info`, which
        // carries the runtimes, is its slowest answer); a job of another isolation level
        // waits for the runtimes, believed only from an engine that also answered about the
        // images.
        let images_known = async {
            let checked = images::check(&e.runtime, &images).await;
            let answered = checked.is_ok();
            e.probed(checked.as_ref().map(|_| ()).map_err(Clone::clone));
            e.images.record(checked);
            freed.notify_waiters();
            // Mismatches are judged against the ids Airlock built: at start-up the reference
            // is asked at the same moment, so its answer is waited for (bounded).
            let deadline = tokio::time::Instant::now() + crate::limits::ENGINE_CALL_TIMEOUT;
            for image in &images {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                reference.images.known(image, 0, left).await;
            }
            e.note_mismatches(e.image_mismatches(&reference, &images));
            answered
        };
        let (answered, facts) = tokio::join!(
            images_known,
            tokio::time::timeout(crate::limits::ENGINE_CALL_TIMEOUT, e.runtime.facts())
        );
        if answered && let Ok(Ok(facts)) = facts {
            e.record_offered(facts.runtimes);
            freed.notify_waiters();
        }
        tokio::select! {
            _ = tokio::time::sleep(e.next_check()) => {}
            _ = added => {}
            _ = stop.changed() => return,
        }
    }
}

/// Keeps the reference's image view fresh until the pool is dropped.
async fn watch_reference(
    reference: Arc<Reference>,
    wanted: Arc<ImageSet>,
    freed: Arc<Notify>,
    mut stop: watch::Receiver<()>,
) {
    let Some(runtime) = reference.runtime().cloned() else {
        return;
    };
    let mut backoff = PROBE_BACKOFF_MIN;
    loop {
        let added = wanted.added.notified();
        tokio::pin!(added);
        added.as_mut().enable();
        let checked = images::check(&runtime, &wanted.list()).await;
        let wait = match &checked {
            Ok(_) => {
                backoff = PROBE_BACKOFF_MIN;
                crate::limits::IMAGE_RECHECK_INTERVAL
            }
            Err(why) => {
                tracing::warn!(engine = %reference.describe, reason = %why, "the engine images are built on does not answer; the ids it last gave are used");
                let wait = backoff;
                backoff = (backoff * 2).min(PROBE_BACKOFF_MAX);
                wait
            }
        };
        reference.images.record(checked);
        freed.notify_waiters();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = added => {}
            _ = stop.changed() => return,
        }
    }
}

/// Why a built image id is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuiltImage {
    /// The engine images are built on does not have it: `airlock images build` it.
    Missing,
    /// That engine has not answered about it (the message says which engine and why).
    Unknown(String),
}

#[cfg(test)]
mod tests;
