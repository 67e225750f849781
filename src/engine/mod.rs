//! Workflows: where configuration, git, the sandbox, artifacts and the store meet.

pub mod candidates;
pub mod crash;
pub mod delivery;
pub mod environment;
pub mod evidence;
pub mod recovery;
pub mod service;
pub mod verify;

use crate::artifacts::{ArtifactIoError, Artifacts};
use crate::config::Config;
use crate::sandbox::Sandbox;
use crate::sandbox::seccomp::SeccompProfile;
use crate::store::{Store, StoreError};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Errors opening a data directory.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Artifacts(#[from] ArtifactIoError),
}

/// A data directory: database, artifacts, checkouts and worker locks.
#[derive(Clone)]
pub struct DataDir {
    pub root: PathBuf,
    pub store: Store,
    pub artifacts: Artifacts,
    pub instance_id: String,
}

impl DataDir {
    /// Opens (creating) `root` with mode 0700 and its database.
    pub async fn open(root: &Path) -> Result<DataDir, OpenError> {
        use std::os::unix::fs::DirBuilderExt;
        let dd = |source| OpenError::DataDir {
            path: root.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(dd)?;
        let root = std::fs::canonicalize(root).map_err(dd)?;
        for sub in ["checkouts", "locks"] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root.join(sub))
                .map_err(dd)?;
        }
        let store = Store::open(&root.join("airlock.db"))?;
        let artifacts = Artifacts::open(&root)?;
        let instance_id = store.instance_id().await?;
        Ok(DataDir {
            root,
            store,
            artifacts,
            instance_id,
        })
    }

    pub fn checkouts(&self) -> PathBuf {
        self.root.join("checkouts")
    }

    pub fn checkout_dir(&self, creation_key: &str) -> PathBuf {
        self.checkouts().join(creation_key)
    }

    pub fn lock_path(&self, creation_key: &str) -> PathBuf {
        self.root.join("locks").join(format!("{creation_key}.lock"))
    }
}

/// Everything a verification needs.
#[derive(Clone)]
pub struct Engine {
    pub config: Config,
    pub data: DataDir,
    pub sandbox: Sandbox,
    pub seccomp: SeccompProfile,
}

/// Proof that a worker (in any process) owns a creation key: an exclusive `flock` on
/// `<data_dir>/locks/<key>.lock`, released by the kernel when the process dies, however it dies.
/// Recovery treats a key whose lock it cannot take as having a live worker.
pub struct WorkerLock {
    path: PathBuf,
    _lock: nix::fcntl::Flock<File>,
}

impl WorkerLock {
    /// Takes the lock, or `None` when another live worker holds it.
    pub fn try_acquire(path: &Path) -> std::io::Result<Option<WorkerLock>> {
        use std::os::unix::fs::MetadataExt;
        // A lock taken on a file that another holder unlinked meanwhile protects nothing, so
        // the lock only counts when the path still names the locked inode.
        for _ in 0..8 {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)?;
            let lock =
                match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                    Ok(lock) => lock,
                    Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                    Err((_, e)) => return Err(e.into()),
                };
            let locked_ino = lock.metadata()?.ino();
            match std::fs::metadata(path) {
                Ok(m) if m.ino() == locked_ino => {
                    return Ok(Some(WorkerLock {
                        path: path.to_path_buf(),
                        _lock: lock,
                    }));
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "lock file {} keeps being replaced",
            path.display()
        )))
    }
}

impl Drop for WorkerLock {
    fn drop(&mut self) {
        // Unlink while still holding the lock; the flock itself goes with the file handle.
        let _ = std::fs::remove_file(&self.path);
    }
}
