//! The warm tree cache: every base tree an overlay checkout stands on, staged once per
//! (tree id, sandbox user) by the same rules as a full checkout (modes, symlinks, no filters,
//! the nanosecond stat snapshot) and never written again.
//!
//! It lives on its own sparse ext4 image, `<data_dir>/tree-cache/cache.img`, loop-mounted
//! `nosuid,nodev` at `tree-cache/mnt` (file creation there costs what it costs in a job's own
//! filesystem, not the data dir's): `mnt/entries/<key>/` is an entry (`tree/` and its
//! `manifest`), `mnt/incoming/` holds entries being filled and entries being deleted. An entry
//! is published by one rename once it is complete, so a process killed while filling leaves
//! only `incoming/`, which the next open empties.
//!
//! **Read-only.** `mnt/entries` is a read-only bind of itself: nothing beneath it can be
//! written through the filesystem, by root either (`EROFS`). The fill publishes and removes
//! entries by renames relative to a handle on the directory opened before the bind went over
//! it, and writes only in `incoming/`.
//!
//! **Trust across restarts.** An entry found at open is used only after it is verified: its
//! manifest's checksum must hold, every path must `lstat` exactly as recorded when it was
//! filled (inode, size, mode, mtime and ctime to the nanosecond; nobody can set a ctime back),
//! and its content must be the revision's ([`content`]: the manifest's paths and ids are the
//! tree's per git, and every byte hashes to its blob id, so a raw write to the image while no
//! daemon ran is caught). That costs reading the tree once per entry per process, unless the
//! [`seal`] a clean close left beside the image shows the image unwritten since a process that
//! trusted the entry unmounted it (then its manifest is read and its checksum checked, and
//! nothing more). Nothing is fsynced while filling, so an image left by an earlier boot (its
//! `boot_id` differs) is discarded whole and made anew.
//!
//! **Bound.** Entries are kept while their bytes stay within `tree_cache_bytes`; past it, the
//! least recently used entry no job holds a [`Lease`] on is evicted. A tree that does not fit
//! (`ENOSPC` even after evicting every unheld entry) is refused, and its job stages in full.
//!
//! One process owns a cache at a time (an exclusive `flock` on `tree-cache/lock`); another
//! process on the same data dir runs without it.

mod content;
mod manifest;
mod seal;

use super::{Repo, Snapshot, StagingError};
use crate::limits;
use manifest::{check_stats, read_manifest, write_manifest};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The cache's directory beneath the data dir.
pub const CACHE_DIR: &str = "tree-cache";
const IMAGE: &str = "cache.img";
const MOUNT: &str = "mnt";
const LOCK: &str = "lock";
const BOOT_ID: &str = "boot_id";
const ENTRIES: &str = "entries";
const INCOMING: &str = "incoming";
const MANIFEST: &str = "manifest";
const MANIFEST_HEADER: &str = "airlock-tree-cache 1";

/// Largest manifest read back at verification (a 500,000-path tree's is about 60 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 512 << 20;

/// How a job's base tree was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Cached (and verified, if it was found at start-up).
    Hit,
    /// Staged into the cache for this job.
    Miss,
}

impl Lookup {
    pub fn as_str(self) -> &'static str {
        match self {
            Lookup::Hit => "hit",
            Lookup::Miss => "miss",
        }
    }
}

/// The cache's figures, for `/metrics` and `airlock doctor`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStatus {
    pub entries: u64,
    pub bytes: u64,
    pub bound: u64,
    /// Entries evicted and entries discarded (corrupt, partial, unverifiable) since open.
    pub evicted: u64,
    pub discarded: u64,
    /// Entries found at open and used since: verified by reading their bytes, or trusted
    /// through the seal of the last clean close.
    pub verified: u64,
    pub sealed: u64,
}

struct Entry {
    key: String,
    dir: PathBuf,
    bytes: u64,
    owner: (u32, u32),
    empty_tree: String,
    snapshot: Snapshot,
    last_used: AtomicU64,
}

/// A job's hold on a cached tree: an entry with a lease is never evicted.
#[derive(Clone)]
pub struct Lease(Arc<Entry>);

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.0.key).finish()
    }
}

impl Lease {
    /// The cached tree (the overlay's lower layer).
    pub fn tree(&self) -> PathBuf {
        self.0.dir.join("tree")
    }
    pub fn owner(&self) -> (u32, u32) {
        self.0.owner
    }
    pub fn empty_tree(&self) -> &str {
        &self.0.empty_tree
    }
    pub(crate) fn snapshot(&self) -> Snapshot {
        self.0.snapshot.clone()
    }
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Arc<Entry>>,
    /// Entries found at open, used only once verified.
    unverified: HashSet<String>,
    /// Entries found at open that the seal vouches for, used once their manifest is read.
    sealed: HashSet<String>,
    bytes: u64,
    tick: u64,
    evicted: u64,
    discarded: u64,
    verified: u64,
    sealed_used: u64,
}

/// The warm tree cache of one data dir.
pub struct TreeCache {
    dir: PathBuf,
    mnt: PathBuf,
    bound: u64,
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// `entries/` as the fill writes it (opened before the read-only bind went over it, so
    /// publishing and removing an entry are renames relative to this directory, while every
    /// path beneath `mnt/entries` is read-only: `EROFS`, for root too), and `incoming/`, for
    /// renames into and out of it. Let go at [`TreeCache::close`] (an open directory keeps
    /// the filesystem busy).
    handles: Mutex<Option<Handles>>,
    state: Mutex<State>,
    /// One filler per key: a second job on a tree being filled waits for it.
    filling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StagingError + 'a {
    move |source| StagingError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn nonce() -> String {
    crate::ids::new_creation_key()
}

/// Why overlay checkouts cannot work on this host, or `None` when they can.
pub fn overlay_support_problem() -> Option<String> {
    if let Some(p) = super::space::loop_support_problem() {
        return Some(p);
    }
    match std::fs::read_to_string("/proc/filesystems") {
        Ok(s) if s.lines().any(|l| l.split_whitespace().last() == Some("overlay")) => None,
        Ok(_) => Some(
            "the kernel has no overlay filesystem (modprobe overlay): every job stages its whole tree"
                .into(),
        ),
        Err(e) => Some(format!("cannot read /proc/filesystems: {e}")),
    }
}

impl TreeCache {
    /// Opens (mounting, or making anew) the cache beneath `data_root`, bounded by `bound`
    /// bytes. `Err` says why there is no cache (jobs then stage in full).
    pub fn open(data_root: &Path, bound: u64) -> Result<TreeCache, String> {
        if let Some(p) = overlay_support_problem() {
            return Err(p);
        }
        let dir = data_root.join(CACHE_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let lock_path = dir.join(LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("open {}: {e}", lock_path.display()))?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| {
                format!(
                    "another process holds {} ({e}): this one runs without the tree cache",
                    lock_path.display()
                )
            })?;
        let mnt = dir.join(MOUNT);
        let cache = TreeCache {
            dir,
            mnt,
            bound,
            _lock: lock,
            handles: Mutex::default(),
            state: Mutex::default(),
            filling: Mutex::default(),
        };
        // The seal is taken before the mount, which writes the image.
        let vouched = seal::take(
            &cache.dir,
            &cache.dir.join(IMAGE),
            &boot_id(),
            super::space::is_mounted(&cache.mnt),
        )
        .unwrap_or_else(|why| {
            tracing::debug!(%why, "tree cache entries found at open will be verified");
            HashSet::new()
        });
        cache.mount().map_err(|e| e.to_string())?;
        cache.load(vouched).map_err(|e| e.to_string())?;
        Ok(cache)
    }

    /// Mounts the cache's image, making it first when there is none or it is an earlier
    /// boot's.
    fn mount(&self) -> Result<(), StagingError> {
        let boot = boot_id();
        let boot_file = self.dir.join(BOOT_ID);
        let same_boot = std::fs::read_to_string(&boot_file).is_ok_and(|b| b.trim() == boot);
        if super::space::is_mounted(&self.mnt) {
            if same_boot {
                return Ok(());
            }
            super::space::unmount_at(&self.mnt)?;
        }
        let img = self.dir.join(IMAGE);
        if !same_boot || !img.exists() {
            let _ = std::fs::remove_file(&img);
            let _ = std::fs::remove_file(&boot_file);
            // Room for the bound plus one more tree of up to the bound and metadata: a tree is
            // filled before eviction brings the cache back within its bound. The file is
            // sparse (and mounted with discard), so the disk holds only what the cache holds.
            // Never smaller than the smallest configurable cache (a smaller bound is only
            // ever a test's, to make eviction cheap to reach).
            let size = self
                .bound
                .saturating_mul(2)
                .saturating_add(self.bound / 8)
                .max(limits::MIN_TREE_CACHE_BYTES);
            let f = std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(&img)
                .map_err(io("create tree cache image", &img))?;
            f.set_len(size).map_err(io("size tree cache image", &img))?;
            drop(f);
            let inodes = (size / limits::TREE_CACHE_BYTES_PER_INODE).max(limits::MIN_INODES);
            let mut mkfs = crate::process::command("mkfs.ext4");
            mkfs.args(["-q", "-F", "-O", "^has_journal", "-m", "0", "-b", "4096"])
                .arg("-N")
                .arg(inodes.to_string())
                .args(["-E", "nodiscard,lazy_itable_init=1,root_owner=0:0"])
                .arg(&img);
            super::space::run_tool(mkfs, "mkfs.ext4")?;
            std::fs::write(&boot_file, &boot).map_err(io("write boot id", &boot_file))?;
        }
        std::fs::create_dir_all(&self.mnt).map_err(io("create mount point", &self.mnt))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut mount = crate::process::command("mount");
            mount
                .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard"])
                .arg(&img)
                .arg(&self.mnt);
            match super::space::run_tool(mount, "mount") {
                Ok(()) => break,
                Err(e) if attempt < limits::TREE_CACHE_MOUNT_ATTEMPTS => {
                    tracing::debug!(attempt, error = %e, "tree cache image not mountable yet");
                    std::thread::sleep(limits::TREE_CACHE_MOUNT_RETRY_DELAY);
                }
                Err(e) => return Err(e),
            }
        }
        if !super::space::is_mounted(&self.mnt) {
            return Err(StagingError::Space(format!(
                "{} is not the tree cache's filesystem after mount",
                self.mnt.display()
            )));
        }
        Ok(())
    }

    /// Empties `incoming/` (what a killed filler left) and lists the entries to verify (or,
    /// those the seal vouches for, to read).
    fn load(&self, vouched: HashSet<String>) -> Result<(), StagingError> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.mnt, std::fs::Permissions::from_mode(0o700))
            .map_err(io("chmod", &self.mnt))?;
        let entries = self.mnt.join(ENTRIES);
        let incoming = self.mnt.join(INCOMING);
        // A killed process left its read-only bind over entries/: lift it (detached: overlays
        // still standing on it keep it) to reach the directory beneath.
        if read_only(&entries) && !read_only(&self.mnt) {
            nix::mount::umount2(&entries, nix::mount::MntFlags::MNT_DETACH)
                .map_err(|e| StagingError::Space(format!("unmount {}: {e}", entries.display())))?;
        }
        for d in [&entries, &incoming] {
            std::fs::create_dir_all(d).map_err(io("create", d))?;
        }
        let open_dir = |d: &Path| std::fs::File::open(d).map_err(io("open", d));
        *self.handles.lock().expect("tree cache handles") = Some(Handles {
            entries: open_dir(&entries)?,
            incoming: open_dir(&incoming)?,
        });
        bind_read_only(&entries)?;
        let mut st = self.state.lock().expect("tree cache state");
        for e in std::fs::read_dir(&incoming)
            .map_err(io("read", &incoming))?
            .flatten()
        {
            remove_all(&e.path())?;
            st.discarded += 1;
        }
        for e in std::fs::read_dir(&entries)
            .map_err(io("read", &entries))?
            .flatten()
        {
            let key = e.file_name().to_string_lossy().into_owned();
            if vouched.contains(&key) {
                st.sealed.insert(key);
            } else {
                st.unverified.insert(key);
            }
        }
        Ok(())
    }

    /// The cache's figures now.
    pub fn status(&self) -> CacheStatus {
        let st = self.state.lock().expect("tree cache state");
        CacheStatus {
            entries: st.entries.len() as u64,
            bytes: st.bytes,
            bound: self.bound,
            evicted: st.evicted,
            discarded: st.discarded,
            verified: st.verified,
            sealed: st.sealed_used,
        }
    }

    /// Where the cache is.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A lease on `commit`'s tree for `owner`, filling the cache with it first when it is not
    /// there. `filled` is called once a fill is complete and before it is published.
    pub fn lease(
        &self,
        repo: &Repo,
        commit: &str,
        owner: (u32, u32),
        filled: &dyn Fn(),
    ) -> Result<(Lease, Lookup), StagingError> {
        let tree = repo.tree_of(commit)?;
        let key = entry_key(&tree, owner);
        self.as_filler(&key, || self.lease_locked(repo, &tree, &key, owner, filled))
    }

    /// Reads (verifying it, unless the seal vouches for it) `commit`'s entry for `owner` when
    /// it was found at open and not read yet, so that the lease which follows is a lookup.
    /// Never fills: a tree the cache does not hold is left to the job that needs it.
    pub fn preload(
        &self,
        repo: &Repo,
        commit: &str,
        owner: (u32, u32),
    ) -> Result<(), StagingError> {
        let tree = repo.tree_of(commit)?;
        let key = entry_key(&tree, owner);
        self.as_filler(&key, || self.take_found(repo, &tree, &key, owner).map(drop))
    }

    /// Runs `f` as `key`'s only filler: a second caller on the same key waits for the first.
    fn as_filler<T>(&self, key: &str, f: impl FnOnce() -> T) -> T {
        let filler = self
            .filling
            .lock()
            .expect("tree cache fillers")
            .entry(key.to_string())
            .or_default()
            .clone();
        let result = {
            let _filling = filler.lock().expect("tree cache filler");
            f()
        };
        // The filler goes from the map only with its last user: a waiter that already holds it
        // and a caller that arrives now must never fill the same key side by side.
        let mut fillers = self.filling.lock().expect("tree cache fillers");
        if Arc::strong_count(&filler) <= 2 {
            fillers.remove(key);
        }
        result
    }

    /// [`TreeCache::lease`] as `key`'s filler: a lookup, else the entry found at open, else a
    /// fill.
    fn lease_locked(
        &self,
        repo: &Repo,
        tree: &str,
        key: &str,
        owner: (u32, u32),
        filled: &dyn Fn(),
    ) -> Result<(Lease, Lookup), StagingError> {
        let found = {
            let mut st = self.state.lock().expect("tree cache state");
            st.tick += 1;
            let tick = st.tick;
            match st.entries.get(key) {
                Some(e) => {
                    e.last_used.store(tick, Ordering::Relaxed);
                    Some(Lease(e.clone()))
                }
                None => None,
            }
        };
        if let Some(lease) = found {
            return Ok((lease, Lookup::Hit));
        }
        if let Some(lease) = self.take_found(repo, tree, key, owner)? {
            return Ok((lease, Lookup::Hit));
        }
        let dir = self.mnt.join(ENTRIES).join(key);
        if dir.exists() {
            // Neither known nor found at open: not ours to trust.
            self.discard(&dir)?;
        }
        let entry = match self.fill(repo, tree, key, owner, filled) {
            Ok(entry) => entry,
            Err(e) if is_no_space(&e) => {
                // Make room by evicting every entry no job holds, then try once more.
                self.evict(0);
                self.fill(repo, tree, key, owner, filled)?
            }
            Err(e) => return Err(e),
        };
        let lease = self.insert(entry);
        self.evict(self.bound);
        Ok((lease, Lookup::Miss))
    }

    /// The entry `key` found at open and not read yet, once read (and verified, unless the
    /// seal vouches for it); `None` when there is none, or it failed and was discarded.
    fn take_found(
        &self,
        repo: &Repo,
        tree: &str,
        key: &str,
        owner: (u32, u32),
    ) -> Result<Option<Lease>, StagingError> {
        let (unverified, sealed) = {
            let mut st = self.state.lock().expect("tree cache state");
            (st.unverified.remove(key), st.sealed.remove(key))
        };
        if !sealed && !unverified {
            return Ok(None);
        }
        let dir = self.mnt.join(ENTRIES).join(key);
        // Vouched for by the seal: its manifest (and checksum). Otherwise its manifest, its
        // stats, then its bytes against the revision's blob ids (what a raw write to the
        // image's blocks would change unseen by any stat).
        let checked = read_manifest(&dir, key, owner).and_then(|entry| {
            if !sealed {
                check_stats(&entry)?;
                content::verify(repo, tree, &dir.join("tree"), &entry.snapshot)?;
            }
            Ok(entry)
        });
        match checked {
            Ok(entry) => {
                let mut st = self.state.lock().expect("tree cache state");
                if sealed {
                    st.sealed_used += 1;
                } else {
                    st.verified += 1;
                }
                drop(st);
                Ok(Some(self.insert(entry)))
            }
            Err(why) => {
                tracing::warn!(entry = %dir.display(), %why, "tree cache entry discarded");
                self.discard(&dir)?;
                Ok(None)
            }
        }
    }

    fn insert(&self, entry: Entry) -> Lease {
        let mut st = self.state.lock().expect("tree cache state");
        st.tick += 1;
        entry.last_used.store(st.tick, Ordering::Relaxed);
        st.bytes = st.bytes.saturating_add(entry.bytes);
        let entry = Arc::new(entry);
        st.entries.insert(entry.key.clone(), entry.clone());
        Lease(entry)
    }

    /// Moves an entry out of `entries/` in one rename, then deletes it.
    fn discard(&self, dir: &Path) -> Result<(), StagingError> {
        let name = format!("discard-{}", nonce());
        let doomed = self.mnt.join(INCOMING).join(&name);
        self.withdraw_entry(dir, &name)
            .map_err(io("discard tree cache entry", dir))?;
        self.state.lock().expect("tree cache state").discarded += 1;
        remove_all(&doomed)
    }

    /// Evicts least recently used entries no job holds until the cache holds at most
    /// `within` bytes.
    fn evict(&self, within: u64) {
        let mut doomed = Vec::new();
        {
            let mut st = self.state.lock().expect("tree cache state");
            while st.bytes > within {
                let Some(victim) = st
                    .entries
                    .values()
                    .filter(|e| Arc::strong_count(e) == 1)
                    .min_by_key(|e| e.last_used.load(Ordering::Relaxed))
                    .map(|e| e.key.clone())
                else {
                    break;
                };
                let e = st.entries.remove(&victim).expect("the victim is cached");
                st.bytes = st.bytes.saturating_sub(e.bytes);
                st.evicted += 1;
                let name = format!("evicted-{}", nonce());
                let to = self.mnt.join(INCOMING).join(&name);
                match self.withdraw_entry(&e.dir, &name) {
                    Ok(()) => doomed.push(to),
                    Err(err) => tracing::warn!(entry = %e.dir.display(), error = %err, "evicting"),
                }
            }
        }
        for d in doomed {
            if let Err(e) = remove_all(&d) {
                tracing::warn!(error = %e, "removing an evicted tree cache entry");
            }
        }
    }

    /// Stages `tree` into `incoming/`, writes its manifest, and publishes it by one rename.
    fn fill(
        &self,
        repo: &Repo,
        tree: &str,
        key: &str,
        owner: (u32, u32),
        filled: &dyn Fn(),
    ) -> Result<Entry, StagingError> {
        let tmp = self.mnt.join(INCOMING).join(format!("{key}.{}", nonce()));
        let result = (|| {
            std::fs::create_dir(&tmp).map_err(io("create", &tmp))?;
            let work = tmp.join("tree");
            std::fs::create_dir(&work).map_err(io("create", &work))?;
            let empty_tree = repo.empty_tree()?;
            let index = tmp.join("index");
            let (snapshot, bytes) = repo.materialize(&work, &index, &empty_tree, tree, owner)?;
            std::fs::remove_file(&index).map_err(io("remove", &index))?;
            write_manifest(&tmp.join(MANIFEST), &empty_tree, bytes, &snapshot)?;
            filled();
            let dir = self.mnt.join(ENTRIES).join(key);
            self.publish_entry(&tmp, key)
                .map_err(io("publish tree cache entry", &dir))?;
            Ok(Entry {
                key: key.to_string(),
                dir,
                bytes,
                owner,
                empty_tree,
                snapshot,
                last_used: AtomicU64::new(0),
            })
        })();
        if result.is_err() {
            let _ = remove_all(&tmp);
        }
        result
    }

    /// Unmounts the cache when no job holds an entry (a clean shutdown) and seals the image
    /// with the entries this process trusted; the next open mounts the image again, and uses
    /// them on the seal's word when the image was not written since, else verifies them.
    pub fn close(&self) {
        let st = self.state.lock().expect("tree cache state");
        if st.entries.values().any(|e| Arc::strong_count(e) > 1) {
            return;
        }
        self.handles.lock().expect("tree cache handles").take();
        let trusted: Vec<String> = st.entries.keys().chain(&st.sealed).cloned().collect();
        let entries = self.mnt.join(ENTRIES);
        // Busy for a moment while another thread's child process, forked and not yet
        // exec'ed, holds a copy of a descriptor beneath it.
        let mut attempt = 0;
        while read_only(&entries) {
            attempt += 1;
            match nix::mount::umount2(&entries, nix::mount::MntFlags::empty()) {
                Ok(()) => {}
                Err(nix::errno::Errno::EBUSY) if attempt < limits::UNMOUNT_ATTEMPTS => {
                    std::thread::sleep(limits::UNMOUNT_RETRY_DELAY * attempt);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the tree cache's read-only entries stay mounted");
                    return;
                }
            }
        }
        if let Err(e) = super::space::unmount_at(&self.mnt) {
            tracing::warn!(error = %e, "the tree cache stays mounted");
            return;
        }
        let image = self.dir.join(IMAGE);
        match seal::write(
            &self.dir,
            &image,
            &boot_id(),
            trusted.iter().map(String::as_str),
        ) {
            Ok(true) => {}
            Ok(false) => tracing::debug!("the tree cache's image is not sealed"),
            Err(e) => tracing::warn!(error = %e, "sealing the tree cache's image"),
        }
    }

    /// Renames `incoming/<name of from>` to `entries/<key>` through the writable handle.
    fn publish_entry(&self, from: &Path, key: &str) -> std::io::Result<()> {
        let name = from.file_name().ok_or(std::io::ErrorKind::InvalidInput)?;
        self.with_handles(|h| nix::fcntl::renameat(&h.incoming, name, &h.entries, key))
    }

    /// Renames the entry at `dir` (`entries/<key>`) to `incoming/<name>` through the writable
    /// handle.
    fn withdraw_entry(&self, dir: &Path, name: &str) -> std::io::Result<()> {
        let key = dir.file_name().ok_or(std::io::ErrorKind::InvalidInput)?;
        self.with_handles(|h| nix::fcntl::renameat(&h.entries, key, &h.incoming, name))
    }

    fn with_handles(&self, f: impl FnOnce(&Handles) -> nix::Result<()>) -> std::io::Result<()> {
        match &*self.handles.lock().expect("tree cache handles") {
            Some(h) => f(h).map_err(std::io::Error::from),
            None => Err(std::io::Error::other("the tree cache is closed")),
        }
    }
}

/// The writable handles of an open cache (see [`TreeCache`]'s `handles`).
struct Handles {
    entries: std::fs::File,
    incoming: std::fs::File,
}

/// Whether `path`'s filesystem is mounted read-only there.
fn read_only(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// Mounts `dir` over itself read-only (`nosuid,nodev`): beneath it nothing can be written,
/// by root either, except through a handle opened before.
fn bind_read_only(dir: &Path) -> Result<(), StagingError> {
    use nix::mount::{MsFlags, mount};
    let failed = |e: nix::errno::Errno| {
        StagingError::Space(format!("bind {} read-only: {e}", dir.display()))
    };
    mount(Some(dir), dir, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(failed)?;
    mount(
        None::<&str>,
        dir,
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| {
        let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
        failed(e)
    })
}

/// Unmounts a cache that a killed process left mounted, when no process holds it now
/// (`airlock recover`'s tidy-up). `Ok(true)` when it was unmounted; a mount still in use (an
/// overlay checkout recovery could not remove yet) stays, for the next recovery or opener. The
/// next opener mounts the image again and verifies its entries, as after any restart.
pub fn release_orphan(data_root: &Path) -> Result<bool, String> {
    let dir = data_root.join(CACHE_DIR);
    let mnt = dir.join(MOUNT);
    if !super::space::is_mounted(&mnt) {
        return Ok(false);
    }
    let lock_path = dir.join(LOCK);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("open {}: {e}", lock_path.display()))?;
    let Ok(_lock) = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
    else {
        // A live process uses it.
        return Ok(false);
    };
    let entries = mnt.join(ENTRIES);
    if read_only(&entries) && !read_only(&mnt) {
        match nix::mount::umount2(&entries, nix::mount::MntFlags::empty()) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => return Ok(false),
            Err(e) => return Err(format!("unmount {}: {e}", entries.display())),
        }
    }
    match nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::EBUSY) => Ok(false),
        Err(e) => Err(format!("unmount the tree cache at {}: {e}", mnt.display())),
    }
}

fn is_no_space(e: &StagingError) -> bool {
    match e {
        StagingError::Io { source, .. } => source.kind() == std::io::ErrorKind::StorageFull,
        // checkout-index says "unable to write file" (or "create") without the errno; on the
        // cache's own filesystem that is a full disk or inode table, and the retry after
        // eviction is harmless when it is not.
        StagingError::Git { stderr, .. } => {
            stderr.contains("No space left")
                || stderr.contains("unable to write")
                || stderr.contains("unable to create")
        }
        _ => false,
    }
}

fn remove_all(dir: &Path) -> Result<(), StagingError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StagingError::Io {
            op: "remove",
            path: dir.to_path_buf(),
            source: e,
        }),
    }
}

/// The name of the entry holding `tree` staged for `owner` (uid, gid): the cache's key.
fn entry_key(tree: &str, owner: (u32, u32)) -> String {
    format!("{tree}-{}-{}", owner.0, owner.1)
}
