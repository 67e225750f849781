//! The workspace seam: everything a job's checkout goes through on its way into a container and
//! back, so the pipeline never names a host path. A [`Workspaces`] backend stages an exact
//! commit for one job, checks the staged tree is still the one it made and hands the container
//! its [`WorkspaceSource`] (a bind mount here; an engine on another machine would upload), and
//! after the container is destroyed reads the job's output files and compares the tree with the
//! commit from trusted code.
//!
//! [`HostBind`] is the backend for an engine that shares this host's filesystem (the local
//! Docker engine and the scripted fake runtime): checkouts under the data dir's `checkouts/`,
//! bind-mounted. [`uploads::Uploads`] is the backend for an engine that holds its jobs'
//! workspaces itself ([`crate::sandbox::runtime::EngineVolumes`]): the tree is uploaded into a
//! volume and read back after the run.

pub mod uploads;

use crate::install::Image;
use crate::sandbox::WorkspaceSource;
use crate::sandbox::runtime::BoxFuture;
use crate::staging::cache::{Lease, Lookup, TreeCache};
use crate::staging::{self, CheckoutFs, Repo, StagingError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The data dir's directory of per-job checkouts.
pub const CHECKOUTS_DIR: &str = "checkouts";

/// What to stage for one job.
#[derive(Debug, Clone)]
pub struct StageRequest {
    pub repo: Repo,
    pub commit: String,
    /// The job's creation key: the workspace's name, unique per run.
    pub key: String,
    /// The checkout's filesystem and its disk and inode quota.
    pub fs: CheckoutFs,
    /// The sandbox user the tree is handed to.
    pub uid: u32,
    pub gid: u32,
}

/// What a harvest may read: every file beneath `dir` of the tree, within the bounds.
#[derive(Debug, Clone)]
pub struct HarvestLimits {
    pub dir: String,
    pub max_files: usize,
    pub max_bytes: u64,
}

/// A harvest's files by path relative to its `dir`, or why there are none.
pub type Harvested = Result<Vec<(String, Image)>, String>;

/// A source check's answer: up to `listed` changed paths and how many changed in all.
pub type ChangedPaths = (Vec<String>, usize);

/// Makes and removes jobs' workspaces for one engine.
pub trait Workspaces: Send + Sync {
    /// Stages `req.commit` for job `req.key` (whose workspace must not exist yet).
    fn stage<'a>(
        &'a self,
        req: StageRequest,
    ) -> BoxFuture<'a, Result<Box<dyn JobWorkspace>, StagingError>>;

    /// Makes the place job `req.key`'s workspace will be at, before it is staged, and says
    /// how the container will get it, so the container can be created while the tree is
    /// staged ([`Workspaces::stage`] then takes the reservation over); `None` when this
    /// backend's workspace cannot be named before it exists (the container is then created
    /// after staging). Refused when the workspace exists.
    fn reserve<'a>(
        &'a self,
        _req: &'a StageRequest,
    ) -> BoxFuture<'a, Result<Option<WorkspaceSource>, StagingError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Removes job `key`'s workspace; `false` when there was none.
    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>>;

    /// The keys of every workspace this backend still holds (for recovery's orphan sweep).
    fn leftovers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, StagingError>>;

    /// Where job `key`'s workspace is, for reports and logs.
    fn describe(&self, key: &str) -> String;

    /// Lets go of what the backend keeps between jobs (at a clean exit).
    fn close(&self) {}

    /// Starts, in the background, what staging `commit` for sandbox user `owner` will need
    /// first (host checkouts: opening the tree cache and reading the tree's entry, never
    /// filling it), so that a staging soon after finds it ready. A hint only: staging never
    /// depends on it, and waits for it when they meet. The caller awaits the handle before it
    /// closes the backend, so nothing it opened outlives the process.
    fn prefetch(
        &self,
        _repo: &Repo,
        _commit: &str,
        _owner: (u32, u32),
    ) -> Option<tokio::task::JoinHandle<()>> {
        None
    }
}

/// One job's staged workspace.
pub trait JobWorkspace: Send + Sync {
    /// Checks the staged tree is still the one staged, and answers how the container gets it.
    /// Called just before the container is created, or, where the workspace was reserved
    /// ahead and the container created while it was staged, just before it is started.
    fn attach(&self) -> Result<WorkspaceSource, StagingError>;

    /// The job has ended: a scratch workspace's files as the runtime handed them back
    /// ([`crate::sandbox::JobOutcome::scratch`]), before the harvest and the source check read
    /// them. Nothing for a workspace that outlives its container.
    fn ended(&self, _scratch: Option<crate::sandbox::volumes::VolumeFiles>) {}

    /// After the container is destroyed: the files the job left beneath `limits.dir` (never
    /// following a symlink), then that directory removed, so the source check still sees any
    /// other change.
    fn harvest<'a>(&'a self, limits: &'a HarvestLimits) -> BoxFuture<'a, Harvested>;

    /// After the container is destroyed: which tracked paths differ from the commit.
    fn check_sources(&self, listed: usize) -> BoxFuture<'_, Result<ChangedPaths, StagingError>>;

    /// What staging and reading back this workspace moved to and from its engine so far;
    /// nothing for a workspace the engine sees in place.
    fn transfers(&self) -> Transfers {
        Transfers::default()
    }

    /// How the workspace's tree was made, for a backend that can keep trees warm.
    fn warmth(&self) -> Option<Warmth> {
        None
    }
}

/// How a job's tree was made by a backend with a tree cache.
#[derive(Debug, Clone, PartialEq)]
pub struct Warmth {
    /// `Ok`: an overlay of a cached tree (found or filled); `Err`: staged in full, and why.
    pub lookup: Result<staging::cache::Lookup, String>,
    /// The cache's figures after this job's tree was found or filled.
    pub cache: Option<staging::cache::CacheStatus>,
}

/// Bytes (file contents) and time spent moving a workspace to and from its engine.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Transfers {
    pub uploads: u32,
    pub upload_bytes: u64,
    pub upload: std::time::Duration,
    pub readbacks: u32,
    pub readback_bytes: u64,
    pub readback: std::time::Duration,
}

/// The backend for an engine that sees this host's filesystem: checkouts beneath
/// `<data_dir>/checkouts`, each bind-mounted into its container.
#[derive(Clone)]
pub struct HostBind {
    data_root: PathBuf,
    /// The warm tree cache's bound (`tree_cache_bytes`; 0: none) and the cache, opened on
    /// first use (`Err`: why there is none).
    tree_cache_bytes: u64,
    cache: Arc<std::sync::OnceLock<Result<Arc<TreeCache>, String>>>,
    /// Each overlay checkout's lease on its base tree, held until the checkout is removed.
    leases: Arc<std::sync::Mutex<std::collections::HashMap<String, Lease>>>,
}

impl HostBind {
    /// Host checkouts, each staged in full.
    pub fn new(data_root: &Path) -> HostBind {
        HostBind::with_tree_cache(data_root, 0)
    }

    /// Host checkouts as overlays of a warm tree cache of `tree_cache_bytes` (0: none).
    pub fn with_tree_cache(data_root: &Path, tree_cache_bytes: u64) -> HostBind {
        HostBind {
            data_root: data_root.to_path_buf(),
            tree_cache_bytes,
            cache: Arc::default(),
            leases: Arc::default(),
        }
    }

    /// The tree cache, opened on first use; `Err` says why jobs stage in full.
    pub fn tree_cache(&self) -> Result<Arc<TreeCache>, String> {
        self.cache
            .get_or_init(|| {
                if self.tree_cache_bytes == 0 {
                    return Err("tree_cache_bytes = 0".into());
                }
                TreeCache::open(&self.data_root, self.tree_cache_bytes)
                    .map(Arc::new)
                    .inspect_err(|why| {
                        tracing::warn!(%why, "no warm tree cache: every job stages its whole tree")
                    })
            })
            .clone()
    }

    fn checkouts(&self) -> PathBuf {
        self.data_root.join(CHECKOUTS_DIR)
    }
}

/// The data dir's checkouts directory, opened without following symlinks.
fn open_checkouts(root: &Path) -> Result<crate::beneath::Root, StagingError> {
    crate::beneath::Root::open(root)
        .and_then(|r| r.open_dir(Path::new(CHECKOUTS_DIR)))
        .map_err(|source| StagingError::Io {
            op: "open checkouts dir",
            path: root.join(CHECKOUTS_DIR),
            source,
        })
}

impl Workspaces for HostBind {
    /// The checkout's tree path, as empty directories (see [`staging::space::reserve`]).
    fn reserve<'a>(
        &'a self,
        req: &'a StageRequest,
    ) -> BoxFuture<'a, Result<Option<WorkspaceSource>, StagingError>> {
        let root = self.data_root.clone();
        let (key, fs) = (req.key.clone(), req.fs);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let tree = staging::space::reserve(&open_checkouts(&root)?, &key, fs)?;
                Ok(Some(WorkspaceSource::HostBind(tree)))
            })
            .await
            .expect("reserving a checkout does not panic")
        })
    }

    fn stage<'a>(
        &'a self,
        req: StageRequest,
    ) -> BoxFuture<'a, Result<Box<dyn JobWorkspace>, StagingError>> {
        let this = self.clone();
        Box::pin(async move {
            let staged = tokio::task::spawn_blocking(move || {
                let checkouts = Arc::new(open_checkouts(&this.data_root)?);
                let warm = match this.stage_warm(&req, &checkouts) {
                    Ok((checkout, lookup, cache)) => {
                        return Ok(HostCheckout {
                            repo: req.repo,
                            checkout,
                            warmth: Some(Warmth {
                                lookup: Ok(lookup),
                                cache: Some(cache),
                            }),
                        });
                    }
                    Err(why) => why,
                };
                let checkout = req.repo.stage_checkout(
                    &req.commit,
                    &checkouts,
                    &req.key,
                    req.fs,
                    req.uid,
                    req.gid,
                )?;
                Ok::<_, StagingError>(HostCheckout {
                    repo: req.repo,
                    checkout,
                    warmth: Some(Warmth {
                        lookup: Err(warm),
                        cache: this.tree_cache().ok().map(|c| c.status()),
                    }),
                })
            })
            .await
            .expect("staging does not panic")?;
            Ok(Box::new(staged) as Box<dyn JobWorkspace>)
        })
    }

    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>> {
        let dir = self.checkouts().join(key);
        let leases = self.leases.clone();
        let key = key.to_string();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                if std::fs::symlink_metadata(&dir).is_err() {
                    leases.lock().expect("leases").remove(&key);
                    return Ok(false);
                }
                let removed = staging::remove_checkout(&dir).map(|()| true);
                if removed.is_ok() {
                    // The overlay is gone: its base tree may be evicted now.
                    leases.lock().expect("leases").remove(&key);
                }
                removed
            })
            .await
            .expect("checkout removal does not panic")
        })
    }

    fn leftovers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, StagingError>> {
        let dir = self.checkouts();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || match std::fs::read_dir(&dir) {
                Ok(rd) => Ok(rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
                Err(source) => Err(StagingError::Io {
                    op: "list checkouts",
                    path: dir,
                    source,
                }),
            })
            .await
            .expect("listing checkouts does not panic")
        })
    }

    fn describe(&self, key: &str) -> String {
        self.checkouts().join(key).display().to_string()
    }

    /// Unmounts the tree cache if it is open and no job holds it.
    fn close(&self) {
        if let Some(Ok(cache)) = self.cache.get() {
            cache.close();
        }
    }

    fn prefetch(
        &self,
        repo: &Repo,
        commit: &str,
        owner: (u32, u32),
    ) -> Option<tokio::task::JoinHandle<()>> {
        if self.tree_cache_bytes == 0 {
            return None;
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (this, repo, commit) = (self.clone(), repo.clone(), commit.to_string());
        Some(runtime.spawn_blocking(move || {
            if let Ok(cache) = this.tree_cache()
                && let Err(e) = cache.preload(&repo, &commit, owner)
            {
                tracing::debug!(error = %e, "tree cache: nothing preloaded");
            }
        }))
    }
}

impl HostBind {
    /// Stages an overlay checkout of a cached tree, or says why this job stages in full.
    fn stage_warm(
        &self,
        req: &StageRequest,
        checkouts: &Arc<crate::beneath::Root>,
    ) -> Result<(staging::Checkout, Lookup, staging::cache::CacheStatus), String> {
        if !matches!(req.fs, CheckoutFs::Loop { .. }) {
            return Err("checkout_filesystem = \"directory\" has no overlay".into());
        }
        let cache = self.tree_cache()?;
        // A reserved checkout (its container may already be created, mounting the reserved
        // path) is given back as that reservation when this fails, never removed.
        let reserved = staging::space::is_reservation(checkouts, &req.key, req.fs);
        // The job's own filesystem (mkfs, loop mount) is made while the base tree is leased
        // (at most a lookup, or mounting and verifying the cache in a new process, or a fill):
        // neither needs the other.
        let (allocated, leased) = std::thread::scope(|scope| {
            let allocating = scope.spawn(|| Repo::allocate_checkout(checkouts, &req.key, req.fs));
            let leased = cache.lease(&req.repo, &req.commit, (req.uid, req.gid), &|| {
                crate::crash::point(crate::crash::CrashPoint::TreeCacheFilled)
            });
            (
                allocating
                    .join()
                    .expect("allocating a checkout does not panic"),
                leased,
            )
        });
        let undo = |why: String| -> String {
            let undone = if reserved {
                staging::space::back_to_reservation(checkouts, &req.key, req.fs)
            } else {
                staging::remove_checkout(&checkouts.path().join(&req.key))
            };
            match undone {
                Ok(()) => why,
                Err(e) => format!("{why}; the checkout was not removed: {e}"),
            }
        };
        let (lease, lookup) = match leased {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "tree cache: this job stages its whole tree");
                let why = format!("tree cache: {e}");
                // What allocating made, whole or in part, goes: the full staging that follows
                // makes its own.
                return Err(undo(why));
            }
        };
        let staged = allocated.and_then(|a| {
            req.repo
                .stage_overlay_on(&req.commit, checkouts, &req.key, req.fs, &lease, a)
        });
        match staged {
            Ok(checkout) => {
                self.leases
                    .lock()
                    .expect("leases")
                    .insert(req.key.clone(), lease);
                Ok((checkout, lookup, cache.status()))
            }
            Err(e) => {
                tracing::warn!(error = %e, "overlay checkout failed: this job stages its whole tree");
                Err(undo(format!("overlay checkout: {e}")))
            }
        }
    }
}

/// A checkout on this host.
struct HostCheckout {
    repo: Repo,
    checkout: staging::Checkout,
    warmth: Option<Warmth>,
}

impl JobWorkspace for HostCheckout {
    fn attach(&self) -> Result<WorkspaceSource, StagingError> {
        // Docker mounts by path: the path must still name the tree staged.
        self.checkout.verify_tree()?;
        Ok(WorkspaceSource::HostBind(self.checkout.tree.clone()))
    }

    fn harvest<'a>(&'a self, limits: &'a HarvestLimits) -> BoxFuture<'a, Harvested> {
        let tree = self.checkout.tree.clone();
        let h = limits.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let got = crate::install::collect_tree(&tree, &h.dir, h.max_files, h.max_bytes);
                let removed = match std::fs::remove_dir_all(tree.join(&h.dir)) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(format!("remove the job's {}: {e}", h.dir)),
                };
                removed.and(got)
            })
            .await
            .expect("harvesting does not panic")
        })
    }

    fn check_sources(&self, listed: usize) -> BoxFuture<'_, Result<ChangedPaths, StagingError>> {
        let repo = self.repo.clone();
        let checkout = self.checkout.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || repo.changed_paths(&checkout, listed))
                .await
                .expect("the source check does not panic")
        })
    }

    fn warmth(&self) -> Option<Warmth> {
        self.warmth.clone()
    }
}

/// One engine jobs can run on: its containers and how its jobs' workspaces reach them.
/// Recovery works over every engine the daemon has.
#[derive(Clone)]
pub struct JobEngine {
    /// The configured name (`local` without `[[engines]]`).
    pub name: String,
    pub runtime: crate::sandbox::Runtime,
    pub workspaces: Arc<dyn Workspaces>,
}
