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

use crate::apply::Image;
use crate::sandbox::WorkspaceSource;
use crate::sandbox::runtime::BoxFuture;
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

    /// Removes job `key`'s workspace; `false` when there was none.
    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>>;

    /// The keys of every workspace this backend still holds (for recovery's orphan sweep).
    fn leftovers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, StagingError>>;

    /// Where job `key`'s workspace is, for reports and logs.
    fn describe(&self, key: &str) -> String;
}

/// One job's staged workspace.
pub trait JobWorkspace: Send + Sync {
    /// Checks the staged tree is still the one staged, and answers how the container gets it.
    /// Called just before the container is created.
    fn attach(&self) -> Result<WorkspaceSource, StagingError>;

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
#[derive(Debug, Clone)]
pub struct HostBind {
    data_root: PathBuf,
}

impl HostBind {
    pub fn new(data_root: &Path) -> HostBind {
        HostBind {
            data_root: data_root.to_path_buf(),
        }
    }

    fn checkouts(&self) -> PathBuf {
        self.data_root.join(CHECKOUTS_DIR)
    }
}

impl Workspaces for HostBind {
    fn stage<'a>(
        &'a self,
        req: StageRequest,
    ) -> BoxFuture<'a, Result<Box<dyn JobWorkspace>, StagingError>> {
        let root = self.data_root.clone();
        Box::pin(async move {
            let staged = tokio::task::spawn_blocking(move || {
                let checkouts = crate::beneath::Root::open(&root)
                    .and_then(|r| r.open_dir(Path::new(CHECKOUTS_DIR)))
                    .map_err(|source| StagingError::Io {
                        op: "open checkouts dir",
                        path: root.join(CHECKOUTS_DIR),
                        source,
                    })?;
                let checkout = req.repo.stage_checkout(
                    &req.commit,
                    &Arc::new(checkouts),
                    &req.key,
                    req.fs,
                    req.uid,
                    req.gid,
                )?;
                Ok::<_, StagingError>(HostCheckout {
                    repo: req.repo,
                    checkout,
                })
            })
            .await
            .expect("staging does not panic")?;
            Ok(Box::new(staged) as Box<dyn JobWorkspace>)
        })
    }

    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>> {
        let dir = self.checkouts().join(key);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                if std::fs::symlink_metadata(&dir).is_err() {
                    return Ok(false);
                }
                staging::remove_checkout(&dir).map(|()| true)
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
}

/// A checkout on this host.
struct HostCheckout {
    repo: Repo,
    checkout: staging::Checkout,
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
                let got = crate::apply::collect_tree(&tree, &h.dir, h.max_files, h.max_bytes);
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
