//! The verification runner: `pipeline` (validate, record, stage, run, destroy, check, write the
//! artifact, settle), `recovery` (destroy, then decide, after a crash) and `environment` (the
//! server-side environment builder). [`Runner`] holds the parts of the context a run touches.

pub mod deps;
pub mod environment;
pub mod error;
pub mod pipeline;
pub mod pool;
pub mod recovery;

use crate::config::Config;
use crate::engine::{Clock, Context, DataDir};
use crate::sandbox::seccomp::SeccompProfile;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The verification runner: what one run reads and writes, and nothing else of the context
/// (no workspace repository: a run is handed the repository it stages from, and no
/// authorization: its callers have decided). `airlock run`, candidate verifications and a
/// validation's dry run and tests all run through it.
#[derive(Clone)]
pub struct Runner {
    pub config: Arc<Config>,
    /// The store the `running` row and its settle go to, the artifacts, the layout.
    pub data: DataDir,
    /// The engines jobs run on, each with how its jobs get their workspaces.
    pub pool: Arc<pool::Pool>,
    pub seccomp: SeccompProfile,
    pub clock: Clock,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Signs each settled result (when a signing key is configured).
    pub attest: Arc<crate::engine::attesting::Attestor>,
    /// The dependency sets jobs get (fetched once per key).
    pub deps: Arc<deps::DependencySets>,
    /// Turns true when the process stops: a dependency fetch (shared by jobs) ends then.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

impl Runner {
    /// The runner over `ctx`'s engine, store and clock.
    pub fn new(ctx: &Context) -> Runner {
        Runner {
            config: ctx.config.clone(),
            data: ctx.data.clone(),
            pool: ctx.pool.clone(),
            seccomp: ctx.seccomp.clone(),
            clock: ctx.clock.clone(),
            metrics: ctx.metrics.clone(),
            attest: ctx.attest.clone(),
            deps: ctx.deps.clone(),
            stopping: ctx.stopping.subscribe(),
        }
    }
}

/// Start-up check: when checkouts get their own loop-mounted filesystem, this host must support
/// it. The message says what to install or configure. An engine that holds its jobs' workspaces
/// needs nothing of this host (the quota is its volume's).
pub fn check_checkout_support(config: &Config) -> Result<(), String> {
    if config.engines.iter().any(|e| e.holds_workspaces()) {
        return Ok(());
    }
    match config.checkout_filesystem {
        crate::config::CheckoutFilesystem::Loop => {
            match crate::staging::space::loop_support_problem() {
                Some(p) => Err(format!("checkout_filesystem = \"loop\": {p}")),
                None => Ok(()),
            }
        }
        crate::config::CheckoutFilesystem::Directory => Ok(()),
    }
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
        for _ in 0..crate::limits::WORKER_LOCK_ATTEMPTS {
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
