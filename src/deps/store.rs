//! The dependency sets, content-addressed by their key, beneath `<data_dir>/deps/`:
//!
//! - `incoming/<key>.<pid>.<nonce>/`: a set being fetched: `set.img`, a sparse ext4 image of
//!   the profile's bound (its own quota filesystem: bytes and inodes), mounted read-write at
//!   `mnt/` for the fetch container only;
//! - `sets/<key>/`: a published set: `set.img` and its `manifest` (every path with its type,
//!   mode, size and SHA-256 or link target, and what it resolved to), moved there in one rename
//!   once complete, so a process killed while fetching publishes nothing;
//! - `mnt/<key>.<pid>/`: a set mounted read-only (`ro,nosuid,nodev`) by process `pid`, which
//!   jobs bind-mount at `/deps`.
//!
//! A set is used by a process only after it verified the set against its manifest (every
//! file's bytes hashed, nothing added, nothing missing): a raw write into the image, an edited
//! manifest that no longer matches, or a torn set is discarded, never used. Published sets are
//! kept while their images' blocks stay within `dependencies.cache_bytes`; past it the least
//! recently used set no job holds is evicted. Several processes may share the directory: names
//! carry the process id, publishing is a rename that never replaces, and a process removes only
//! what dead processes left.

use super::spec::Resolved;
use crate::limits;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const IMAGE: &str = "set.img";
const MANIFEST: &str = "manifest";
const MOUNT: &str = "mnt";
const SETS: &str = "sets";
const INCOMING: &str = "incoming";

/// One entry of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    Dir {
        mode: u32,
    },
    File {
        mode: u32,
        size: u64,
        sha256: String,
    },
    Symlink {
        target: String,
    },
}

/// What a set holds and what it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub key: String,
    /// Every path beneath the set's root (`/`-separated), in order.
    pub entries: BTreeMap<String, Entry>,
    pub resolved: Vec<Resolved>,
}

impl Manifest {
    /// The set's content digest (`dependencies_sha256`): the SHA-256 of its entries' canonical
    /// form, so two sets hash alike exactly when they hold the same paths and bytes.
    pub fn digest(&self) -> String {
        let v = serde_json::to_value(&self.entries).expect("entries serialize");
        hex::encode(sha2::Sha256::digest(
            crate::canonical::to_string(&v).as_bytes(),
        ))
    }
}

/// Why a set store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Tool(String),
    #[error(
        "the set holds {count} paths; the limit is {max}",
        max = limits::MAX_DEPENDENCY_SET_PATHS
    )]
    TooManyPaths { count: usize },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A mounted, verified set of this process.
struct Mounted {
    key: String,
    dir: PathBuf,
    manifest: Manifest,
    digest: String,
    bytes: u64,
    last_used: AtomicU64,
}

/// A job's hold on a set: while it lives, the set is neither evicted nor unmounted.
#[derive(Clone)]
pub struct Lease(Arc<Mounted>);

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.0.key).finish()
    }
}

impl Lease {
    /// The read-only mount jobs bind at `/deps`.
    pub fn dir(&self) -> &Path {
        &self.0.dir
    }
    pub fn key(&self) -> &str {
        &self.0.key
    }
    /// `dependencies_sha256`.
    pub fn digest(&self) -> &str {
        &self.0.digest
    }
    pub fn manifest(&self) -> &Manifest {
        &self.0.manifest
    }
    /// Blocks the set's image uses.
    pub fn bytes(&self) -> u64 {
        self.0.bytes
    }
}

/// A set being fetched: its fresh filesystem, mounted read-write for the fetch.
pub struct Incoming {
    key: String,
    dir: PathBuf,
    mounted: bool,
}

impl Incoming {
    /// The read-write mount the fetch container binds at `/deps`.
    pub fn mount_dir(&self) -> PathBuf {
        self.dir.join(MOUNT)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // Not published: nothing of it is ever used.
        if self.mounted {
            let _ = nix::mount::umount2(&self.dir.join(MOUNT), nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Default)]
struct State {
    mounted: HashMap<String, Arc<Mounted>>,
    tick: u64,
    evicted: u64,
    discarded: u64,
}

/// The dependency sets of one data dir.
pub struct SetStore {
    root: PathBuf,
    bound: u64,
    state: Mutex<State>,
}

/// What the store holds, for `/metrics` and `airlock doctor`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStatus {
    pub sets: u64,
    pub bytes: u64,
    pub bound: u64,
    pub evicted: u64,
    pub discarded: u64,
}

fn pid_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid a name `[<what>-]<key>.<pid>[.<nonce>]` carries.
fn pid_of(name: &str) -> Option<u32> {
    name.split('.').nth(1)?.parse().ok()
}

impl SetStore {
    /// Opens (creating) the store beneath `data_root`, bounded by `bound` bytes, and removes
    /// what dead processes left: half-made sets and read-only mounts.
    pub fn open(data_root: &Path, bound: u64) -> Result<SetStore, StoreError> {
        let root = data_root.join("deps");
        for d in [SETS, INCOMING, MOUNT] {
            let p = root.join(d);
            std::fs::create_dir_all(&p).map_err(io("create", &p))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o711))
                .map_err(io("chmod", &p))?;
        }
        let store = SetStore {
            root,
            bound,
            state: Mutex::default(),
        };
        store.sweep()?;
        Ok(store)
    }

    /// Removes the half-made sets and mounts of processes that are gone.
    pub fn sweep(&self) -> Result<Vec<String>, StoreError> {
        sweep_dead(&self.root)
    }

    /// The store's figures now.
    pub fn status(&self) -> StoreStatus {
        let (sets, bytes) = self.published();
        let st = self.state.lock().expect("set store state");
        StoreStatus {
            sets: sets.len() as u64,
            bytes,
            bound: self.bound,
            evicted: st.evicted,
            discarded: st.discarded,
        }
    }

    /// The content digests of the sets this process has mounted (published and verified, not
    /// evicted since).
    pub fn mounted_digests(&self) -> Vec<String> {
        let st = self.state.lock().expect("set store state");
        st.mounted.values().map(|m| m.digest.clone()).collect()
    }

    /// Published keys with their images' used bytes, and the total.
    fn published(&self) -> (Vec<(String, u64)>, u64) {
        let dir = self.root.join(SETS);
        let mut out = Vec::new();
        let mut total = 0;
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let bytes = std::fs::metadata(e.path().join(IMAGE))
                .map(|m| m.blocks() * 512)
                .unwrap_or(0);
            total += bytes;
            out.push((e.file_name().to_string_lossy().into_owned(), bytes));
        }
        (out, total)
    }

    /// A lease on the published set `key`, mounting and verifying it first when this process
    /// has not; `None` when there is none (or it was discarded: torn, tampered, unverifiable).
    pub fn get(&self, key: &str) -> Result<Option<Lease>, StoreError> {
        {
            let mut st = self.state.lock().expect("set store state");
            st.tick += 1;
            let tick = st.tick;
            if let Some(m) = st.mounted.get(key) {
                m.last_used.store(tick, Ordering::Relaxed);
                return Ok(Some(Lease(m.clone())));
            }
        }
        let set = self.root.join(SETS).join(key);
        if !set.join(IMAGE).is_file() {
            return Ok(None);
        }
        match self.mount_verified(key, &set, None) {
            Ok(m) => {
                let mut st = self.state.lock().expect("set store state");
                st.tick += 1;
                m.last_used.store(st.tick, Ordering::Relaxed);
                let m = Arc::new(m);
                st.mounted.insert(key.to_string(), m.clone());
                Ok(Some(Lease(m)))
            }
            Err(why) => {
                tracing::warn!(set = %set.display(), %why, "dependency set discarded");
                self.discard(key)?;
                Ok(None)
            }
        }
    }

    /// Mounts `set` read-only at this process's mount point and checks every path against its
    /// manifest; `sealed`: the manifest this process made of the same filesystem moments ago
    /// (publishing it), whose paths need no second reading.
    fn mount_verified(
        &self,
        key: &str,
        set: &Path,
        sealed: Option<Manifest>,
    ) -> Result<Mounted, String> {
        let check = sealed.is_none();
        let manifest: Manifest = if let Some(m) = sealed {
            m
        } else {
            let path = set.join(MANIFEST);
            let mut text = Vec::new();
            use std::io::Read;
            std::fs::File::open(&path)
                .and_then(|f| {
                    f.take(limits::MAX_DEPENDENCY_MANIFEST_BYTES + 1)
                        .read_to_end(&mut text)
                })
                .map_err(|e| format!("manifest: {e}"))?;
            if text.len() as u64 > limits::MAX_DEPENDENCY_MANIFEST_BYTES {
                return Err("the manifest is too large".into());
            }
            serde_json::from_slice(&text).map_err(|e| format!("manifest: {e}"))?
        };
        if manifest.key != key {
            return Err(format!("the manifest names set {}", manifest.key));
        }
        let dir = self
            .root
            .join(MOUNT)
            .join(format!("{key}.{}", std::process::id()));
        let _ = nix::mount::umount2(&dir, nix::mount::MntFlags::MNT_DETACH);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        mount_image(&set.join(IMAGE), &dir, true).map_err(|e| e.to_string())?;
        let bytes = std::fs::metadata(set.join(IMAGE))
            .map(|m| m.blocks() * 512)
            .unwrap_or(0);
        let verified = if check {
            verify(&dir, &manifest)
        } else {
            Ok(())
        };
        match verified {
            Ok(()) => Ok(Mounted {
                key: key.to_string(),
                digest: manifest.digest(),
                dir,
                manifest,
                bytes,
                last_used: AtomicU64::new(0),
            }),
            Err(why) => {
                let _ = nix::mount::umount2(&dir, nix::mount::MntFlags::MNT_DETACH);
                let _ = std::fs::remove_dir(&dir);
                Err(why)
            }
        }
    }

    /// Moves the published set `key` out of `sets/` in one rename and removes it.
    fn discard(&self, key: &str) -> Result<(), StoreError> {
        let from = self.root.join(SETS).join(key);
        let doomed = self.root.join(INCOMING).join(format!(
            "discard-{key}.{}.{}",
            std::process::id(),
            crate::ids::new_creation_key()
        ));
        match std::fs::rename(&from, &doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io("discard", &from)(e)),
        }
        self.state.lock().expect("set store state").discarded += 1;
        let _ = std::fs::remove_dir_all(&doomed);
        Ok(())
    }

    /// A fresh filesystem of `disk_bytes` and `inodes`, owned by `uid:gid`, mounted read-write
    /// for the fetch of set `key`.
    pub fn begin(
        &self,
        key: &str,
        disk_bytes: u64,
        inodes: u64,
        owner: (u32, u32),
    ) -> Result<Incoming, StoreError> {
        let dir = self.root.join(INCOMING).join(format!(
            "{key}.{}.{}",
            std::process::id(),
            crate::ids::new_creation_key()
        ));
        std::fs::create_dir(&dir).map_err(io("create", &dir))?;
        let mut incoming = Incoming {
            key: key.to_string(),
            dir: dir.clone(),
            mounted: false,
        };
        let img = dir.join(IMAGE);
        let f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&img)
            .map_err(io("create", &img))?;
        f.set_len(disk_bytes).map_err(io("size", &img))?;
        drop(f);
        // At most one inode per KiB of the filesystem (mkfs needs room for its tables).
        let inodes = inodes.min(disk_bytes / 1024).max(limits::MIN_INODES);
        let mut mkfs = crate::process::command("mkfs.ext4");
        mkfs.args(["-q", "-F", "-O", "^has_journal", "-m", "0", "-b", "4096"])
            .arg("-N")
            .arg(inodes.to_string())
            .arg("-E")
            .arg(format!(
                "nodiscard,lazy_itable_init=1,root_owner={}:{}",
                owner.0, owner.1
            ))
            .arg(&img);
        run_tool(mkfs, "mkfs.ext4")?;
        let mnt = incoming.mount_dir();
        std::fs::create_dir(&mnt).map_err(io("create", &mnt))?;
        mount_image(&img, &mnt, false)?;
        incoming.mounted = true;
        Ok(incoming)
    }

    /// Seals a fetched set: its manifest (every path hashed, what it `resolved` to), the
    /// filesystem unmounted, the set published by one rename; then a lease on it.
    pub fn publish(
        &self,
        mut incoming: Incoming,
        resolved: Vec<Resolved>,
    ) -> Result<Lease, StoreError> {
        let mnt = incoming.mount_dir();
        let entries = walk(&mnt)?;
        let manifest = Manifest {
            key: incoming.key.clone(),
            entries,
            resolved,
        };
        let text = serde_json::to_vec(&manifest).expect("a manifest serializes");
        // The filesystem first: its blocks reach the image before it is renamed into place.
        nix::mount::umount2(&mnt, nix::mount::MntFlags::empty())
            .map_err(|e| StoreError::Tool(format!("unmount {}: {e}", mnt.display())))?;
        incoming.mounted = false;
        let _ = std::fs::remove_dir(&mnt);
        let path = incoming.dir.join(MANIFEST);
        write_synced(&path, &text)?;
        std::fs::File::open(incoming.dir.join(IMAGE))
            .and_then(|f| f.sync_all())
            .map_err(io("fsync", &incoming.dir.join(IMAGE)))?;
        let to = self.root.join(SETS).join(&incoming.key);
        // Never over another process's set of the same key: that one stands.
        let ours = match nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &incoming.dir,
            nix::fcntl::AT_FDCWD,
            &to,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {
                incoming.dir = PathBuf::new();
                true
            }
            Err(nix::errno::Errno::EEXIST) | Err(nix::errno::Errno::ENOTEMPTY) => false,
            Err(e) => return Err(io("publish", &to)(std::io::Error::from(e))),
        };
        drop(incoming);
        if let Ok(d) = std::fs::File::open(self.root.join(SETS)) {
            let _ = d.sync_all();
        }
        let key = manifest.key.clone();
        // Leased before eviction runs, so the set just made is never the one evicted.
        let lease = if ours {
            let m = self
                .mount_verified(&key, &to, Some(manifest))
                .map_err(StoreError::Tool)?;
            let mut st = self.state.lock().expect("set store state");
            st.tick += 1;
            m.last_used.store(st.tick, Ordering::Relaxed);
            let m = Arc::new(m);
            st.mounted.insert(key.clone(), m.clone());
            Lease(m)
        } else {
            self.get(&key)?
                .ok_or_else(|| StoreError::Tool(format!("set {key} vanished once published")))?
        };
        self.evict(self.bound);
        Ok(lease)
    }

    /// Evicts least recently used sets no job holds until the published ones use at most
    /// `within` bytes.
    pub fn evict(&self, within: u64) {
        let (sets, mut total) = self.published();
        if total <= within {
            return;
        }
        let mut st = self.state.lock().expect("set store state");
        // Sets this process never used go first (another process may still use them: its
        // mount outlives the file), then this process's by last use.
        let mut order: Vec<(u64, String, u64)> = sets
            .into_iter()
            .map(|(key, bytes)| {
                let used = st
                    .mounted
                    .get(&key)
                    .map_or(0, |m| m.last_used.load(Ordering::Relaxed));
                (used, key, bytes)
            })
            .collect();
        order.sort();
        for (_, key, bytes) in order {
            if total <= within {
                break;
            }
            if let Some(m) = st.mounted.get(&key) {
                if Arc::strong_count(m) > 1 {
                    continue;
                }
                let m = st.mounted.remove(&key).expect("present");
                let _ = nix::mount::umount2(&m.dir, nix::mount::MntFlags::MNT_DETACH);
                let _ = std::fs::remove_dir(&m.dir);
            }
            let from = self.root.join(SETS).join(&key);
            let doomed = self.root.join(INCOMING).join(format!(
                "evicted-{key}.{}.{}",
                std::process::id(),
                crate::ids::new_creation_key()
            ));
            if std::fs::rename(&from, &doomed).is_ok() {
                let _ = std::fs::remove_dir_all(&doomed);
                total = total.saturating_sub(bytes);
                st.evicted += 1;
                tracing::info!(set = %key, bytes, "dependency set evicted");
            }
        }
    }

    /// Unmounts this process's sets no job holds (a clean exit).
    pub fn close(&self) {
        let mut st = self.state.lock().expect("set store state");
        st.mounted.retain(|_, m| {
            if Arc::strong_count(m) > 1 {
                return true;
            }
            let _ = nix::mount::umount2(&m.dir, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(&m.dir);
            false
        });
    }
}

/// Removes what processes that are gone left beneath the store at `<data_root>/deps`: sets
/// half made (a fetch killed before publishing) and read-only mounts; their paths. Recovery
/// calls it; opening a store does too.
pub fn sweep_dead_at(data_root: &Path) -> Result<Vec<String>, StoreError> {
    let root = data_root.join("deps");
    if !root.is_dir() {
        return Ok(vec![]);
    }
    sweep_dead(&root)
}

fn sweep_dead(root: &Path) -> Result<Vec<String>, StoreError> {
    let mut removed = vec![];
    for sub in [INCOMING, MOUNT] {
        let dir = root.join(sub);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if pid_of(&name).is_some_and(pid_alive) {
                continue;
            }
            let path = e.path();
            let mnt = if sub == MOUNT {
                path.clone()
            } else {
                path.join(MOUNT)
            };
            let _ = nix::mount::umount2(&mnt, nix::mount::MntFlags::MNT_DETACH);
            if std::fs::remove_dir_all(&path).is_ok() {
                tracing::info!(path = %path.display(), "removed what a dead process left of a dependency set");
                removed.push(path.display().to_string());
            }
        }
    }
    Ok(removed)
}

fn run_tool(mut cmd: crate::process::Command, what: &str) -> Result<(), StoreError> {
    let out = cmd
        .output()
        .map_err(|e| StoreError::Tool(format!("{what}: {e}")))?;
    if !out.status.success() {
        return Err(StoreError::Tool(format!(
            "{what} failed (exit {:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn mount_image(img: &Path, at: &Path, read_only: bool) -> Result<(), StoreError> {
    let opts = if read_only {
        "loop,ro,nosuid,nodev,noatime"
    } else {
        "loop,nosuid,nodev,noatime"
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut mount = crate::process::command("mount");
        mount.args(["-t", "ext4", "-o", opts]).arg(img).arg(at);
        match run_tool(mount, "mount") {
            Ok(()) => return Ok(()),
            Err(e) if attempt < limits::TREE_CACHE_MOUNT_ATTEMPTS => {
                tracing::debug!(attempt, error = %e, "dependency set image not mountable yet");
                std::thread::sleep(limits::TREE_CACHE_MOUNT_RETRY_DELAY);
            }
            Err(e) => return Err(e),
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .map_err(io("create", path))?;
    f.write_all(bytes).map_err(io("write", path))?;
    f.sync_all().map_err(io("fsync", path))
}

/// Every path beneath `root` with its entry, the files hashed (on every core).
fn walk(root: &Path) -> Result<BTreeMap<String, Entry>, StoreError> {
    let mut entries = BTreeMap::new();
    let mut files = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let dir = root.join(&rel);
        for e in std::fs::read_dir(&dir).map_err(io("read", &dir))? {
            let e = e.map_err(io("read", &dir))?;
            let path = rel.join(e.file_name());
            let name = path.to_string_lossy().into_owned();
            if name == "lost+found" {
                continue;
            }
            let meta = std::fs::symlink_metadata(e.path()).map_err(io("stat", &e.path()))?;
            let mode = meta.mode() & 0o7777;
            let kind = meta.file_type();
            if kind.is_dir() {
                entries.insert(name, Entry::Dir { mode });
                todo.push(path);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(e.path()).map_err(io("readlink", &e.path()))?;
                entries.insert(
                    name,
                    Entry::Symlink {
                        target: target.to_string_lossy().into_owned(),
                    },
                );
            } else if kind.is_file() {
                files.push((name, mode, meta.len()));
            } else {
                return Err(StoreError::Tool(format!(
                    "{name}: a set holds only files, directories and symlinks"
                )));
            }
            if entries.len() + files.len() > limits::MAX_DEPENDENCY_SET_PATHS {
                return Err(StoreError::TooManyPaths {
                    count: entries.len() + files.len(),
                });
            }
        }
    }
    for (name, mode, size, sha256) in hash_files(root, files)? {
        entries.insert(name, Entry::File { mode, size, sha256 });
    }
    Ok(entries)
}

type Hashed = (String, u32, u64, String);

fn hash_files(root: &Path, files: Vec<(String, u32, u64)>) -> Result<Vec<Hashed>, StoreError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let per = files.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = files
            .chunks(per)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|(name, mode, size)| {
                            let path = root.join(name);
                            let sha = sha256_file(&path).map_err(io("hash", &path))?;
                            Ok((name.clone(), *mode, *size, sha))
                        })
                        .collect::<Result<Vec<Hashed>, StoreError>>()
                })
            })
            .collect();
        let mut out = Vec::new();
        for p in parts {
            out.extend(p.join().expect("hashing does not panic")?);
        }
        Ok(out)
    })
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Why the set mounted at `dir` is not what `manifest` says, or `Ok` when it is exactly.
fn verify(dir: &Path, manifest: &Manifest) -> Result<(), String> {
    let found = walk(dir).map_err(|e| e.to_string())?;
    if found == manifest.entries {
        return Ok(());
    }
    let first = found
        .iter()
        .find(|(p, e)| manifest.entries.get(*p) != Some(e))
        .map(|(p, _)| p.clone())
        .or_else(|| {
            manifest
                .entries
                .keys()
                .find(|p| !found.contains_key(*p))
                .cloned()
        })
        .unwrap_or_default();
    Err(format!("{first:?} is not as the manifest records it"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET_BYTES: u64 = 8 << 20;

    fn store(bound: u64) -> (tempfile::TempDir, SetStore) {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the set store is tested as root (loop mounts; the CI machine runs as root)"
        );
        let d = tempfile::tempdir().unwrap();
        let s = SetStore::open(d.path(), bound).unwrap();
        (d, s)
    }

    /// A set of `key` holding `files`, fetched (written) and published by `s`.
    fn published(s: &SetStore, key: &str, files: &[(&str, &str)]) -> Lease {
        let incoming = s.begin(key, SET_BYTES, 1024, (0, 0)).unwrap();
        for (p, text) in files {
            let at = incoming.mount_dir().join(p);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        s.publish(incoming, vec![]).unwrap()
    }

    #[test]
    fn a_published_set_is_verified_by_the_next_process_and_a_tampered_one_discarded() {
        let (d, s) = store(1 << 30);
        let lease = published(&s, "k1", &[("a/b.txt", "bytes\n"), ("c", "c\n")]);
        assert_eq!(
            std::fs::read_to_string(lease.dir().join("a/b.txt")).unwrap(),
            "bytes\n"
        );
        let digest = lease.digest().to_string();
        assert_eq!(s.mounted_digests(), vec![digest.clone()]);
        drop(lease);
        s.close();
        // The next process: the set is mounted and checked, and has the same digest.
        let s2 = SetStore::open(d.path(), 1 << 30).unwrap();
        let again = s2.get("k1").unwrap().expect("the published set");
        assert_eq!(again.digest(), digest);
        drop(again);
        s2.close();
        // The manifest edited to record other bytes: no longer the filesystem's; discarded.
        let manifest = d.path().join("deps/sets/k1/manifest");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let m: Manifest = serde_json::from_str(&text).unwrap();
        let mut edited = m.clone();
        edited.entries.insert(
            "c".into(),
            Entry::File {
                mode: 0o644,
                size: 2,
                sha256: hex::encode(sha2::Sha256::digest(b"d\n")),
            },
        );
        std::fs::write(&manifest, serde_json::to_vec(&edited).unwrap()).unwrap();
        let s3 = SetStore::open(d.path(), 1 << 30).unwrap();
        assert!(s3.get("k1").unwrap().is_none());
        assert_eq!(s3.status().discarded, 1);
        assert_eq!(s3.status().sets, 0, "the discarded set is gone");
        // A manifest naming another key is refused too.
        published(&s3, "k2", &[("x", "x\n")]);
        s3.close();
        let manifest = d.path().join("deps/sets/k2/manifest");
        let mut m: Manifest =
            serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        m.key = "k3".into();
        std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
        let s4 = SetStore::open(d.path(), 1 << 30).unwrap();
        assert!(s4.get("k2").unwrap().is_none());
    }

    #[test]
    fn eviction_takes_the_least_recently_used_set_no_job_holds_never_the_one_just_made() {
        // A bound below one set's blocks: each publish evicts what it can.
        let (_d, s) = store(1);
        let a = published(&s, "a", &[("f", "a\n")]);
        assert_eq!(s.status().sets, 1, "the set just made stays while leased");
        let b = published(&s, "b", &[("f", "b\n")]);
        assert_eq!(s.status().sets, 2, "both are held");
        drop(a);
        let c = published(&s, "c", &[("f", "c\n")]);
        let left: Vec<String> = std::fs::read_dir(_d.path().join("deps/sets"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(left, vec!["b", "c"], "a, held by no job, went");
        assert_eq!(s.status().evicted, 1);
        assert!(s.get("a").unwrap().is_none());
        assert_eq!(std::fs::read_to_string(b.dir().join("f")).unwrap(), "b\n");
        assert_eq!(std::fs::read_to_string(c.dir().join("f")).unwrap(), "c\n");
        drop((b, c));
        s.close();
    }

    #[test]
    fn a_set_holds_only_files_directories_and_symlinks_and_a_dead_fetch_is_swept() {
        let (d, s) = store(1 << 30);
        let incoming = s.begin("p", SET_BYTES, 1024, (0, 0)).unwrap();
        nix::unistd::mkfifo(
            &incoming.mount_dir().join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = s.publish(incoming, vec![]).expect_err("a fifo is refused");
        assert!(e.to_string().contains("only files"), "{e}");
        assert_eq!(s.status().sets, 0);
        // What a dead process left: a half-made set with its mount, a read-only mount.
        let dead = d.path().join("deps/incoming/q.999999999.x");
        std::fs::create_dir_all(dead.join("mnt")).unwrap();
        let swept = sweep_dead_at(d.path()).unwrap();
        assert_eq!(swept, vec![dead.display().to_string()]);
        assert!(!dead.exists());
    }
}
