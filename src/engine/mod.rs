//! Workflows: where configuration, git, the sandbox, artifacts and the store meet.

pub mod actor;
pub mod admission;
pub mod attesting;
pub mod background;
pub mod blocking;
pub mod clock;
pub mod context;
pub mod doctor;
pub mod error;
pub mod event_feed;
pub mod governed;
pub mod idempotency;
pub mod integration;
pub mod jobs;
pub mod layout;
pub mod live_log;
pub mod maintenance;
pub mod request;
pub mod runner;
pub mod scrape;
pub mod service;
pub mod webhooks;
pub mod workers;

pub use context::{Clock, Context};
pub use runner::WorkerLock;

use crate::artifacts::{ArtifactIoError, Artifacts};
use crate::store::{Store, StoreError};
use std::path::{Path, PathBuf};

/// Errors opening a data directory.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The data dir, or something in it, could be changed by someone other than Airlock.
    #[error(
        "data dir {path} is {what} owned by uid {owner} with mode {mode:04o}; Airlock runs as uid {uid} and needs every directory of its data dir (and the database files) owned by uid {uid} and not writable by group or others: {fix}"
    )]
    Unsafe {
        path: PathBuf,
        what: &'static str,
        owner: u32,
        mode: u32,
        uid: u32,
        fix: String,
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
    /// Every path beneath `root`.
    pub layout: layout::DataLayout,
    pub store: Store,
    pub artifacts: Artifacts,
    /// The id its containers are labelled with (`airlock.instance`).
    pub instance_id: String,
    /// The ids this data dir had before it was copied (see [`crate::store::Store::instance`]):
    /// their containers belong to the data dir it was copied from and are never touched.
    pub previous_instances: Vec<String>,
}

impl DataDir {
    /// Opens (creating) `root` with mode 0700 and its database. Refuses a data dir that anyone
    /// but Airlock's own uid could change (see [`audit`]); every directory beneath it is created
    /// without following symlinks.
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
        audit(&root)?;
        let beneath = crate::beneath::Root::open(&root).map_err(dd)?;
        for sub in layout::SUBDIRS {
            beneath
                .mkdir(Path::new(sub), 0o700)
                .map_err(|source| OpenError::DataDir {
                    path: root.join(sub),
                    source,
                })?;
        }
        let layout = layout::DataLayout::new(&root);
        let store = Store::open(&layout.database())?;
        let artifacts = Artifacts::open(&layout.verification_artifacts(), &layout.quarantine())?;
        let home = {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(&root).map_err(dd)?;
            crate::store::Home {
                dev: m.dev(),
                ino: m.ino(),
                path: root.display().to_string(),
            }
        };
        let instance = store.instance(home).await?;
        if instance.new_copy {
            tracing::warn!(
                instance_id = %instance.id,
                previous = %instance.previous.join(", "),
                "this data dir is a copy (a restored backup, or copied elsewhere): it takes a new instance id and never touches the containers of the one it was copied from"
            );
        }
        Ok(DataDir {
            root,
            layout,
            store,
            artifacts,
            instance_id: instance.id,
            previous_instances: instance.previous,
        })
    }

    /// The data dir as a [`crate::beneath::Root`], for creating paths beneath it.
    pub fn beneath(&self) -> std::io::Result<crate::beneath::Root> {
        crate::beneath::Root::open(&self.root)
    }

    pub fn checkouts(&self) -> PathBuf {
        self.layout.checkouts()
    }

    pub fn checkout_dir(&self, creation_key: &str) -> PathBuf {
        self.layout.checkout_dir(creation_key)
    }

    pub fn lock_path(&self, creation_key: &str) -> PathBuf {
        self.layout.lock_path(creation_key)
    }
}

/// Refuses a data dir that another local user could change: the data dir itself, every
/// directory in it (except the insides of per-job checkouts and of the tree cache's
/// filesystem, which belong to the sandbox users),
/// and the files at its top (the database and its journals) must be owned by Airlock's uid and
/// not writable by group or others, and none of them may be a symlink. Every ancestor of the
/// data dir must be owned by root or by Airlock and be either not writable by others or sticky
/// (like `/tmp`), so nobody can swap the data dir itself.
pub fn audit(root: &Path) -> Result<(), OpenError> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let dd = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::DataDir { path, source }
    };
    let unsafe_entry = |path: &Path, what: &'static str, m: &std::fs::Metadata| {
        let fix = if what == "a symlink" {
            format!(
                "remove {} (Airlock never creates symlinks there)",
                path.display()
            )
        } else {
            format!("chown {uid} {p} && chmod go-w {p}", p = path.display())
        };
        OpenError::Unsafe {
            path: path.to_path_buf(),
            what,
            owner: m.uid(),
            mode: m.mode() & 0o7777,
            uid,
            fix,
        }
    };
    for anc in root.ancestors().skip(1) {
        let m = std::fs::metadata(anc).map_err(dd(anc))?;
        let writable = m.mode() & 0o022 != 0;
        let sticky = m.mode() & 0o1000 != 0;
        if (m.uid() != 0 && m.uid() != uid) || (writable && !sticky) {
            return Err(OpenError::Unsafe {
                path: anc.to_path_buf(),
                what: "an ancestor directory",
                owner: m.uid(),
                mode: m.mode() & 0o7777,
                uid,
                fix: format!(
                    "make {} owned by root or uid {uid} and not writable by group or others (or sticky), or choose another data dir",
                    anc.display()
                ),
            });
        }
    }
    fn walk(
        dir: &Path,
        depth: usize,
        check: &mut dyn FnMut(&Path, &std::fs::Metadata, usize) -> Result<bool, OpenError>,
    ) -> Result<(), OpenError> {
        let rd = std::fs::read_dir(dir).map_err(|source| OpenError::DataDir {
            path: dir.to_path_buf(),
            source,
        })?;
        for entry in rd {
            let entry = entry.map_err(|source| OpenError::DataDir {
                path: dir.to_path_buf(),
                source,
            })?;
            // Plain files below the top level (artifacts, locks, transcripts) need no check of
            // their own: their directories' modes protect them. Skip their lstat, so opening a
            // data dir stays cheap however many results it keeps.
            let ft = entry.file_type().map_err(|source| OpenError::DataDir {
                path: entry.path(),
                source,
            })?;
            if depth > 0 && ft.is_file() {
                continue;
            }
            let path = entry.path();
            let m = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                // Gone between the listing and now (SQLite removes its -shm and -wal files as
                // the last connection closes): nothing there can be unsafe.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(OpenError::DataDir {
                        path: path.clone(),
                        source,
                    });
                }
            };
            if check(&path, &m, depth)? && m.is_dir() {
                walk(&path, depth + 1, check)?;
            }
        }
        Ok(())
    }
    let top = std::fs::symlink_metadata(root).map_err(dd(root))?;
    let mut check = |path: &Path, m: &std::fs::Metadata, depth: usize| {
        let ft = m.file_type();
        if ft.is_symlink() {
            return Err(unsafe_entry(path, "a symlink", m));
        }
        let parent = path.parent().and_then(Path::file_name);
        let grandparent = path
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name);
        let in_deps = |sub: &str| {
            depth == 2 && parent == Some(sub.as_ref()) && grandparent == Some("deps".as_ref())
        };
        // `deps/mnt/<set>.<pid>`: a set's own read-only filesystem (its files belong to the
        // sandbox user and are verified against the set's manifest on use).
        if in_deps("mnt") {
            return Ok(false);
        }
        let checked = ft.is_dir() || depth == 0;
        if checked && (m.uid() != uid || m.mode() & 0o022 != 0) {
            let what = if ft.is_dir() { "a directory" } else { "a file" };
            return Err(unsafe_entry(path, what, m));
        }
        // `checkouts/<key>/`: the key directory is Airlock's; what is inside belongs to a job.
        let in_checkouts =
            path.parent().and_then(Path::file_name) == Some("checkouts".as_ref()) && depth == 1;
        // `tree-cache/mnt` is the cache's own filesystem, mode 0700: its trees belong to the
        // sandbox users, and entries are verified on use (see `staging::cache`).
        let cache_fs = depth == 1
            && path.file_name() == Some("mnt".as_ref())
            && path.parent().and_then(Path::file_name)
                == Some(crate::staging::cache::CACHE_DIR.as_ref());
        // `deps/incoming/<set>`: Airlock's; inside, the fetch's own filesystem (never used
        // unless published, then verified).
        Ok(ft.is_dir() && !in_checkouts && !cache_fs && !in_deps("incoming"))
    };
    if top.uid() != uid || top.mode() & 0o022 != 0 {
        return Err(unsafe_entry(root, "a directory", &top));
    }
    walk(root, 0, &mut check)
}
