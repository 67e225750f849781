//! The hand-over of a freshly written tree to the sandbox user: every path given to `uid:gid`
//! without following a symlink, and its stat recorded as it is after that, by one walker per
//! core.

use super::{StagingError, io_err, limits, stat_key_of};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Gives the staged tree to the sandbox user without following any symlink, and returns every
/// path's stat (relative path -> stat after the change) and the bytes the tree uses.
pub(super) type Stats = std::collections::HashMap<Vec<u8>, super::StatKey>;
pub(super) fn hand_over(tree: &Path, uid: u32, gid: u32) -> Result<(Stats, u64), StagingError> {
    // Directories are handed out to one worker per core (up to a bound): the walk is two
    // syscalls per path (chown, then lstat for the stat after it), and on a large tree it
    // costs as much as a third of writing the files.
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(limits::MAX_STAGING_WALKERS);
    let queue = WalkQueue {
        state: std::sync::Mutex::new((Vec::new(), 0)),
        wake: std::sync::Condvar::new(),
        failed: std::sync::Mutex::new(None),
    };
    let mut bytes = 0u64;
    let root_meta = hand_over_path(tree, uid, gid)?;
    bytes = bytes.saturating_add(root_meta.blocks().saturating_mul(512));
    if root_meta.is_dir() {
        queue
            .state
            .lock()
            .expect("walk queue")
            .0
            .push(tree.to_path_buf());
    }
    let results: Vec<(Stats, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| s.spawn(|| queue.work(tree, uid, gid)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a staging walker does not panic"))
            .collect()
    });
    if let Some(e) = queue.failed.lock().expect("walk failure").take() {
        return Err(e);
    }
    let mut stats = Stats::new();
    for (s, b) in results {
        stats.extend(s);
        bytes = bytes.saturating_add(b);
    }
    Ok((stats, bytes))
}

use std::os::unix::fs::MetadataExt;

/// Gives one path to `uid:gid` without following a symlink and returns its `lstat` after that.
fn hand_over_path(path: &Path, uid: u32, gid: u32) -> Result<std::fs::Metadata, StagingError> {
    if nix::unistd::geteuid().is_root() {
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            path,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| StagingError::Io {
            op: "chown",
            path: path.to_path_buf(),
            source: e.into(),
        })?;
    } else {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(path).map_err(io_err("lstat", path))?;
        if !meta.file_type().is_symlink() {
            let mode = meta.permissions().mode();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o666))
                .map_err(io_err("chmod", path))?;
        }
    }
    std::fs::symlink_metadata(path).map_err(io_err("lstat", path))
}

/// Directories still to hand over, how many workers are inside one, and the first failure.
struct WalkQueue {
    state: std::sync::Mutex<(Vec<PathBuf>, usize)>,
    wake: std::sync::Condvar,
    failed: std::sync::Mutex<Option<StagingError>>,
}

impl WalkQueue {
    /// One worker: takes directories until none is left and no other worker can add one.
    fn work(&self, tree: &Path, uid: u32, gid: u32) -> (Stats, u64) {
        let mut stats = Stats::new();
        let mut bytes = 0u64;
        loop {
            let dir = {
                let mut st = self.state.lock().expect("walk queue");
                loop {
                    if let Some(d) = st.0.pop() {
                        st.1 += 1;
                        break Some(d);
                    }
                    if st.1 == 0 {
                        break None;
                    }
                    st = self.wake.wait(st).expect("walk queue");
                }
            };
            let Some(dir) = dir else {
                self.wake.notify_all();
                return (stats, bytes);
            };
            let mut found = Vec::new();
            if let Err(e) = self.one_dir(&dir, tree, uid, gid, &mut stats, &mut bytes, &mut found) {
                self.failed.lock().expect("walk failure").get_or_insert(e);
                found.clear();
            }
            let abort = self.failed.lock().expect("walk failure").is_some();
            let mut st = self.state.lock().expect("walk queue");
            if abort {
                st.0.clear();
            } else {
                st.0.extend(found);
            }
            st.1 -= 1;
            drop(st);
            self.wake.notify_all();
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn one_dir(
        &self,
        dir: &Path,
        tree: &Path,
        uid: u32,
        gid: u32,
        stats: &mut Stats,
        bytes: &mut u64,
        found: &mut Vec<PathBuf>,
    ) -> Result<(), StagingError> {
        for entry in std::fs::read_dir(dir).map_err(io_err("read dir", dir))? {
            let entry = entry.map_err(io_err("read dir", dir))?;
            let path = entry.path();
            let meta = hand_over_path(&path, uid, gid)?;
            *bytes = bytes.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                found.push(path);
            } else if let Ok(rel) = path.strip_prefix(tree) {
                stats.insert(rel.as_os_str().as_bytes().to_vec(), stat_key_of(&meta));
            }
        }
        Ok(())
    }
}
