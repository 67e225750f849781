//! What the pool knows of images, kept fresh in the background so that neither a submission
//! nor placement ever waits on an engine:
//!
//! - the **reference**: the ids of the images Airlock built, read from the engine they are
//!   built on (this machine's engine: `DOCKER_HOST`, else the default socket, where `airlock
//!   images build` makes them and `airlock images push` copies them from). A job's environment
//!   is resolved with the reference's id, never with whatever some engine says its tag is;
//! - each engine's ids for the same references. Placement compares them with the reference: an
//!   engine whose tag names another image takes no job needing it, and says why (the job's
//!   `queued_reason`, the log, `/metrics`, `airlock doctor`).
//!
//! Every check is one bounded call per image ([`limits::ENGINE_CALL_TIMEOUT`]); a check runs
//! every [`limits::IMAGE_RECHECK_INTERVAL`] (on an engine out of placement, at its probe
//! backoff instead), and at once when a new image is asked for. Jobs create their containers
//! by image id, so a tag moved between two checks cannot swap the image a job runs.

use crate::limits;
use crate::sandbox::{Runtime, SandboxError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tokio::sync::{Notify, watch};

/// What an engine said about one image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Id(String),
    Missing,
}

/// The images to check, shared by every watcher of a pool; adding one wakes them all.
#[derive(Default)]
pub struct ImageSet {
    images: Mutex<BTreeSet<String>>,
    pub(super) added: Notify,
}

impl ImageSet {
    /// Adds `images`; `true` when one was new (the watchers are woken to check it).
    pub fn add<'a>(&self, images: impl IntoIterator<Item = &'a str>) -> bool {
        let mut set = self.images.lock().expect("the image set is never poisoned");
        let mut new = false;
        for i in images {
            new |= set.insert(i.to_string());
        }
        drop(set);
        if new {
            self.added.notify_waiters();
        }
        new
    }

    pub fn list(&self) -> Vec<String> {
        self.images
            .lock()
            .expect("the image set is never poisoned")
            .iter()
            .cloned()
            .collect()
    }
}

#[derive(Debug, Default)]
struct ViewState {
    /// The last answer for each image (kept while the engine does not answer).
    images: BTreeMap<String, Seen>,
    /// Why the last check failed, while it does.
    error: Option<String>,
}

/// One engine's images as last checked.
pub struct ImageView {
    state: Mutex<ViewState>,
    /// Counts finished checks (answered or failed), so a caller can wait for the next one.
    checks: watch::Sender<u64>,
}

impl Default for ImageView {
    fn default() -> Self {
        ImageView {
            state: Mutex::default(),
            checks: watch::channel(0).0,
        }
    }
}

impl ImageView {
    /// What the engine said about `image` at its last answer; `None` when it never answered
    /// about it.
    pub fn seen(&self, image: &str) -> Option<Seen> {
        self.lock().images.get(image).cloned()
    }

    /// Why the last check failed, while the engine does not answer.
    pub fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// Finished checks so far.
    pub fn checks(&self) -> u64 {
        *self.checks.borrow()
    }

    /// Waits (up to `bound`) until the engine answered about `image`, or a check that
    /// finished after more than `after` checks failed.
    pub async fn known(&self, image: &str, after: u64, bound: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        let mut rx = self.checks.subscribe();
        loop {
            let n = *rx.borrow_and_update();
            if self.seen(image).is_some() || (n > after && self.error().is_some()) {
                return;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        self.state.lock().expect("an image view is never poisoned")
    }

    /// Records a check's result: its answers, or why there were none.
    pub(super) fn record(&self, checked: Result<BTreeMap<String, Seen>, String>) {
        {
            let mut st = self.lock();
            match checked {
                Ok(images) => {
                    st.images.extend(images);
                    st.error = None;
                }
                Err(why) => st.error = Some(why),
            }
        }
        self.checks.send_modify(|n| *n += 1);
    }
}

/// Asks `runtime` for the id of every image in `images`, each call bounded: the answers, or
/// why the engine did not give them.
pub async fn check(runtime: &Runtime, images: &[String]) -> Result<BTreeMap<String, Seen>, String> {
    // Asked at once: the answers do not depend on each other.
    let asked =
        futures_util::future::join_all(images.iter().map(|image| {
            tokio::time::timeout(limits::ENGINE_CALL_TIMEOUT, runtime.image_id(image))
        }))
        .await;
    let mut out = BTreeMap::new();
    for (image, asked) in images.iter().zip(asked) {
        match asked {
            Ok(Ok(id)) => {
                out.insert(image.clone(), Seen::Id(id));
            }
            Ok(Err(SandboxError::ImageMissing { .. })) => {
                out.insert(image.clone(), Seen::Missing);
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => {
                return Err(format!(
                    "no answer about image {image} within {} s",
                    limits::ENGINE_CALL_TIMEOUT.as_secs()
                ));
            }
        }
    }
    Ok(out)
}

/// The engine Airlock's images are built on: the ids of the images Airlock built.
pub struct Reference {
    /// How the engine is named in messages.
    pub describe: String,
    runtime: Result<Runtime, String>,
    pub images: ImageView,
}

impl Reference {
    /// The engine at `runtime`, or (when it could not be connected) why not.
    pub fn new(describe: impl Into<String>, runtime: Result<Runtime, String>) -> Reference {
        let images = ImageView::default();
        if let Err(why) = &runtime {
            images.record(Err(why.clone()));
        }
        Reference {
            describe: describe.into(),
            runtime,
            images,
        }
    }

    pub(super) fn runtime(&self) -> Option<&Runtime> {
        self.runtime.as_ref().ok()
    }

    /// The built id of `image`, from the last answer; without one, why not.
    pub fn built_id(&self, image: &str) -> Result<String, Unknown> {
        match self.images.seen(image) {
            Some(Seen::Id(id)) => Ok(id),
            Some(Seen::Missing) => Err(Unknown::Missing),
            None => Err(Unknown::NotAnswered(
                self.images
                    .error()
                    .unwrap_or_else(|| "it has not been asked yet".to_string()),
            )),
        }
    }
}

/// Why a built image id is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unknown {
    /// The engine images are built on does not have it: it was never built.
    Missing,
    /// The engine images are built on has not answered about it (why).
    NotAnswered(String),
}
