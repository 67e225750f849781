//! The crash-safe installer of the governed path's apply: the rollback record is durable and
//! checksummed before the first file changes, so a crash at any point can be undone. Given the exact post-image of every
//! touched path, it:
//!
//! 1. **prepares**: reads each path's pre-image beneath the worktree root (never through a
//!    symlink; a path that is not a regular file, a symlink or absent where expected is
//!    refused), checks it against the pre-images a validation saw, creates missing parent
//!    directories, writes each post-image to a sibling temp file (`O_CREAT|O_EXCL|O_NOFOLLOW`,
//!    mode set, fsynced), and writes the rollback artifact (every pre-image's kind, mode,
//!    target and exact bytes, every post-image's hash, a checksum; temp, fsync, rename, fsync
//!    dir), all before the first visible change;
//! 2. **installs**: renames each staged file into place (`RENAME_NOREPLACE` for creations),
//!    unlinks deletions, fsyncs every distinct parent directory;
//! 3. and, after a crash, **inspects** each path against the artifact (`pre`, `post`,
//!    `staged_only`, `other`) so recovery can finish forward, undo a preparation, or stop and
//!    name the paths it will not touch.
//!
//! Only the touched paths are read, hashed or written: the cost grows with the patch, not the
//! worktree. The caller journals the phases (each committed before its side effect).

mod finish;
#[cfg(test)]
mod tests;

pub use finish::{
    PathReport, PathState, discard_preparation, finish_forward, inspect, remove_staged,
    undo_prepare,
};

use crate::beneath::Root;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// Largest pre-image one path may have (it is kept whole in the rollback artifact).
pub const MAX_PRE_IMAGE_BYTES: usize = 64 * 1024 * 1024;
/// The rollback artifact's format version.
pub const ARTIFACT_FORMAT: u32 = 1;

/// Why an apply step refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The worktree is not what the plan expects; nothing visible changed.
    #[error("{path:?}: {reason}")]
    Refused { path: String, reason: String },
    #[error("{path:?}: {op}: {source}")]
    Io {
        path: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("rollback artifact: {0}")]
    Artifact(String),
    /// No artifact was written (a crash before it was durable). Messages never hold a host
    /// path: the artifact is named by its transaction.
    #[error("rollback artifact: {0} does not exist")]
    ArtifactMissing(String),
}

fn refused(path: &str, reason: impl Into<String>) -> ApplyError {
    ApplyError::Refused {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn ioe<'a>(path: &'a str, op: &'static str) -> impl FnOnce(std::io::Error) -> ApplyError + 'a {
    move |source| ApplyError::Io {
        path: path.to_string(),
        op,
        source,
    }
}

fn errno(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

pub(crate) use crate::canonical::sha256_hex;

/// What a path holds, as far as apply cares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Image {
    Absent,
    File {
        executable: bool,
        #[serde(with = "b64")]
        bytes: Vec<u8>,
    },
    Symlink {
        target: String,
    },
}

/// An image without its bytes: what recovery compares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fingerprint {
    Absent,
    File { executable: bool, sha256: String },
    Symlink { sha256: String },
}

impl Image {
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            Image::Absent => Fingerprint::Absent,
            Image::File { executable, bytes } => Fingerprint::File {
                executable: *executable,
                sha256: sha256_hex(bytes),
            },
            Image::Symlink { target } => Fingerprint::Symlink {
                sha256: sha256_hex(target.as_bytes()),
            },
        }
    }
}

mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

/// One path's change: its post-image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub after: Image,
}

/// Checks that every symlink among `changes` resolves inside the worktree once the changes
/// are in place (see [`crate::worktree::links_stay_inside`]); Err names the path.
pub fn links_stay_inside(root: &Root, changes: &[Change]) -> Result<(), String> {
    let overlay = changes
        .iter()
        .map(|c| {
            let link = match &c.after {
                Image::Symlink { target } => Some(target.clone()),
                Image::Absent | Image::File { .. } => None,
            };
            (c.path.clone(), link)
        })
        .collect();
    let links: Vec<(String, String)> = changes
        .iter()
        .filter_map(|c| match &c.after {
            Image::Symlink { target } => Some((c.path.clone(), target.clone())),
            Image::Absent | Image::File { .. } => None,
        })
        .collect();
    crate::worktree::links_stay_inside(root, &links, &overlay)
}

/// What to install, for one transaction.
#[derive(Debug, Clone)]
pub struct Plan {
    pub transaction_id: String,
    /// The worktree's HEAD when the plan was made (recorded in the artifact).
    pub head: Option<String>,
    pub changes: Vec<Change>,
}

/// One path of the rollback artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    pub before: Image,
    pub after: Fingerprint,
    /// The staged temp file's name in the path's directory (`None` for a deletion).
    pub staged: Option<String>,
}

/// The rollback artifact's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollback {
    pub format: u32,
    pub transaction_id: String,
    pub head: Option<String>,
    pub entries: Vec<Entry>,
    /// Directories prepare created (parents first), removed again when it is undone.
    pub created_dirs: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    body: Rollback,
    sha256: String,
}

impl Rollback {
    /// The artifact's bytes: canonical JSON of the body with its SHA-256.
    pub fn to_bytes(&self) -> Vec<u8> {
        let sha256 = sha256_hex(crate::canonical::to_string(self).as_bytes());
        crate::canonical::to_string(&Envelope {
            body: self.clone(),
            sha256,
        })
        .into_bytes()
    }

    /// Parses and checks an artifact (a wrong checksum, format or transaction is refused).
    pub fn from_bytes(bytes: &[u8], transaction_id: &str) -> Result<Rollback, ApplyError> {
        let env: Envelope = serde_json::from_slice(bytes)
            .map_err(|e| ApplyError::Artifact(format!("does not parse: {e}")))?;
        let want = sha256_hex(crate::canonical::to_string(&env.body).as_bytes());
        if want != env.sha256 {
            return Err(ApplyError::Artifact("checksum mismatch".into()));
        }
        if env.body.format != ARTIFACT_FORMAT {
            return Err(ApplyError::Artifact(format!(
                "format {} is not {ARTIFACT_FORMAT}",
                env.body.format
            )));
        }
        if env.body.transaction_id != transaction_id {
            return Err(ApplyError::Artifact(format!(
                "names transaction {}, not {transaction_id}",
                env.body.transaction_id
            )));
        }
        Ok(env.body)
    }

    /// The artifact's digest (what the transaction records, never a host path).
    pub fn digest(&self) -> String {
        sha256_hex(&self.to_bytes())
    }
}

/// Splits `path` into its parent (`""` for the top) and its name.
fn split(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some((p, n)) => (p, n),
        None => ("", path),
    }
}

/// The parent directory of `path`, opened beneath the root without following symlinks.
/// `Ok(None)` when it does not exist.
pub(crate) fn parent_dir(root: &Root, path: &str) -> Result<Option<OwnedFd>, ApplyError> {
    let (parent, _) = split(path);
    if parent.is_empty() {
        return root
            .reopen(OFlag::O_RDONLY)
            .map(Some)
            .map_err(ioe(path, "open the worktree"));
    }
    match root.open_at(
        Path::new(parent),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(Errno::ELOOP as i32) => Err(refused(
            path,
            "a parent directory is a symlink; apply never writes through one",
        )),
        Err(e) if e.raw_os_error() == Some(Errno::ENOTDIR as i32) => {
            // The last parent itself may be the symlink (O_DIRECTORY|O_NOFOLLOW says ENOTDIR).
            let link = match root.open_at(Path::new(parent), OFlag::O_PATH, Mode::empty()) {
                Ok(fd) => nix::sys::stat::fstat(fd.as_fd()).is_ok_and(|st| {
                    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
                }),
                Err(e) => e.raw_os_error() == Some(Errno::ELOOP as i32),
            };
            Err(refused(
                path,
                if link {
                    "a parent directory is a symlink; apply never writes through one"
                } else {
                    "a parent of this path is not a directory"
                },
            ))
        }
        Err(e) => Err(ioe(path, "open its directory")(e)),
    }
}

/// The image `name` holds in `dir` now.
pub(crate) fn read_image(dir: &OwnedFd, path: &str, name: &str) -> Result<Image, ApplyError> {
    let st = match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(Image::Absent),
        Err(e) => return Err(ioe(path, "stat")(errno(e))),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFLNK {
        let target = nix::fcntl::readlinkat(dir.as_fd(), name)
            .map_err(|e| ioe(path, "readlink")(errno(e)))?;
        return Ok(Image::Symlink {
            target: target.to_string_lossy().into_owned(),
        });
    }
    if kind != SFlag::S_IFREG {
        return Err(refused(
            path,
            "is neither a regular file nor a symlink (a directory, fifo, socket or device)",
        ));
    }
    if st.st_size as u64 > MAX_PRE_IMAGE_BYTES as u64 {
        return Err(refused(
            path,
            format!(
                "is {} bytes; apply keeps at most {MAX_PRE_IMAGE_BYTES} per path",
                st.st_size
            ),
        ));
    }
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ioe(path, "open")(errno(e)))?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(ioe(path, "read"))?;
    Ok(Image::File {
        executable: st.st_mode & 0o111 != 0,
        bytes,
    })
}

/// The image at `path` beneath the root now (absent when its directory is missing).
pub fn current(root: &Root, path: &str) -> Result<Image, ApplyError> {
    match parent_dir(root, path)? {
        None => Ok(Image::Absent),
        Some(dir) => read_image(&dir, path, split(path).1),
    }
}

fn fsync_fd(fd: &OwnedFd, path: &str) -> Result<(), ApplyError> {
    nix::unistd::fsync(fd.as_fd()).map_err(|e| ioe(path, "fsync")(errno(e)))
}

/// The staged temp file's name for entry `i` of a transaction.
pub fn staged_name(transaction_id: &str, i: usize) -> String {
    format!(".airlock-stage-{transaction_id}-{i}")
}

/// Writes `image` as `name` in `dir` (exclusive create, mode set, fsynced).
fn write_staged(dir: &OwnedFd, path: &str, name: &str, image: &Image) -> Result<(), ApplyError> {
    match image {
        Image::Absent => Ok(()),
        Image::Symlink { target } => nix::unistd::symlinkat(target.as_str(), dir.as_fd(), name)
            .map_err(|e| ioe(path, "stage the symlink")(errno(e))),
        Image::File { executable, bytes } => {
            let mode = if *executable { 0o755 } else { 0o644 };
            let fd = nix::fcntl::openat(
                dir.as_fd(),
                name,
                OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_WRONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(mode),
            )
            .map_err(|e| ioe(path, "create the staged file")(errno(e)))?;
            // The umask may have narrowed the mode: set it exactly.
            nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(mode))
                .map_err(|e| ioe(path, "chmod the staged file")(errno(e)))?;
            let mut f = std::fs::File::from(fd);
            f.write_all(bytes)
                .map_err(ioe(path, "write the staged file"))?;
            f.sync_all().map_err(ioe(path, "fsync the staged file"))
        }
    }
}

/// Step 1: reads and checks every pre-image, stages every post-image and writes the rollback
/// artifact to `artifact_dir/<transaction_id>.rollback.json`, durably, before anything
/// visible changes. `expected` (a validation's pre-images, by path) must match exactly.
/// A refusal leaves the worktree as it was (staged files and created directories removed).
pub fn prepare(
    root: &Root,
    plan: &Plan,
    expected: Option<&[(String, Fingerprint)]>,
    artifact_dir: &Path,
) -> Result<Rollback, ApplyError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut entries = Vec::with_capacity(plan.changes.len());
    for c in &plan.changes {
        crate::patch::check_path(&c.path).map_err(|m| refused(&c.path, m))?;
        if !seen.insert(c.path.as_str()) {
            return Err(refused(&c.path, "is changed twice in one plan"));
        }
        let before = current(root, &c.path)?;
        if let Some(exp) = expected {
            let want = exp
                .iter()
                .find(|(p, _)| *p == c.path)
                .map(|(_, f)| f)
                .ok_or_else(|| refused(&c.path, "has no pre-image in the validation"))?;
            if *want != before.fingerprint() {
                return Err(refused(
                    &c.path,
                    "changed since it was validated (its bytes, kind or mode differ)",
                ));
            }
        }
        entries.push(Entry {
            path: c.path.clone(),
            before,
            after: c.after.fingerprint(),
            staged: None,
        });
    }
    let mut rb = Rollback {
        format: ARTIFACT_FORMAT,
        transaction_id: plan.transaction_id.clone(),
        head: plan.head.clone(),
        entries,
        created_dirs: vec![],
    };
    let staged = stage(root, plan, &mut rb);
    if let Err(e) = staged.and_then(|()| {
        crate::artifacts::write_atomic(
            artifact_dir,
            &format!("{}.rollback.json", plan.transaction_id),
            &rb.to_bytes(),
        )
        .map(|_| ())
        .map_err(|e| ApplyError::Artifact(e.to_string()))
    }) {
        // Nothing visible changed yet: take back everything staged so far (without judging
        // the paths: a refusal may be about one of them).
        let _ = discard_preparation(root, &rb);
        return Err(e);
    }
    Ok(rb)
}

/// Creates missing parent directories (recorded in `rb`) and writes every staged file.
fn stage(root: &Root, plan: &Plan, rb: &mut Rollback) -> Result<(), ApplyError> {
    for (i, c) in plan.changes.iter().enumerate() {
        if c.after == Image::Absent {
            continue;
        }
        let (parent, _) = split(&c.path);
        if !parent.is_empty() {
            let mut acc = String::new();
            for comp in parent.split('/') {
                if !acc.is_empty() {
                    acc.push('/');
                }
                acc.push_str(comp);
                let made = root
                    .mkdir(Path::new(&acc), 0o755)
                    .map_err(ioe(&c.path, "create its directory"))?;
                if made {
                    rb.created_dirs.push(acc.clone());
                }
            }
        }
        let dir = parent_dir(root, &c.path)?
            .ok_or_else(|| refused(&c.path, "its directory vanished while staging"))?;
        let name = staged_name(&plan.transaction_id, i);
        write_staged(&dir, &c.path, &name, &c.after)?;
        rb.entries[i].staged = Some(name);
        test_pause();
    }
    // Staged names and created directories are durable before the artifact names them.
    let mut dirs: Vec<&str> = plan.changes.iter().map(|c| split(&c.path).0).collect();
    dirs.extend(rb.created_dirs.iter().map(|d| split(d).0));
    fsync_dirs(root, dirs)
}

/// Test builds only: `AIRLOCK_TEST_APPLY_STEP_MS=<n>` sleeps `n` ms after every staged file
/// and every rename or unlink, so that a test's kill -9 at a random moment lands inside an
/// apply rather than before or after it. Other builds ignore the variable.
fn test_pause() {
    #[cfg(feature = "test-hooks")]
    {
        static MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let ms = *MS.get_or_init(|| {
            std::env::var("AIRLOCK_TEST_APPLY_STEP_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        });
        if ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
}

/// Fsyncs each distinct directory of `dirs` (`""` is the worktree's top); a missing one is
/// skipped.
fn fsync_dirs(root: &Root, mut dirs: Vec<&str>) -> Result<(), ApplyError> {
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        let fd = if d.is_empty() {
            root.reopen(OFlag::O_RDONLY).map_err(ioe(d, "open"))?
        } else {
            match root.open_at(
                Path::new(d),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ioe(d, "open")(e)),
            }
        };
        fsync_fd(&fd, d)?;
    }
    Ok(())
}

/// Step 2: puts every staged post-image in place and removes deletions, then fsyncs every
/// touched directory. Paths already in their post-image are left alone, so it can be called
/// again to finish an interrupted install.
pub fn install(root: &Root, rb: &Rollback) -> Result<(), ApplyError> {
    install_steps(root, rb, usize::MAX)
}

/// [`install`], stopping after `limit` renames or unlinks (the tests' crash points).
pub(crate) fn install_steps(root: &Root, rb: &Rollback, limit: usize) -> Result<(), ApplyError> {
    let mut steps = 0;
    let mut dirs: Vec<&str> = Vec::new();
    for e in &rb.entries {
        let (parent, name) = split(&e.path);
        let Some(dir) = parent_dir(root, &e.path)? else {
            if e.after == Fingerprint::Absent {
                // Deleted, and its emptied directory removed with it.
                continue;
            }
            return Err(refused(&e.path, "its directory is gone"));
        };
        if read_image(&dir, &e.path, name)?.fingerprint() == e.after {
            // Already there: a staged copy beside it is not left behind.
            if let Some(staged) = &e.staged {
                match nix::unistd::unlinkat(
                    dir.as_fd(),
                    staged.as_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                ) {
                    Ok(()) => dirs.push(parent),
                    Err(Errno::ENOENT) => {}
                    Err(x) => return Err(ioe(&e.path, "remove the staged file")(errno(x))),
                }
            }
            continue;
        }
        if steps == limit {
            return Ok(());
        }
        steps += 1;
        match (&e.staged, &e.after) {
            (None, Fingerprint::Absent) => {
                nix::unistd::unlinkat(dir.as_fd(), name, nix::unistd::UnlinkatFlags::NoRemoveDir)
                    .map_err(|x| ioe(&e.path, "unlink")(errno(x)))?
            }
            (Some(staged), _) => {
                let flags = if e.before == Image::Absent {
                    nix::fcntl::RenameFlags::RENAME_NOREPLACE
                } else {
                    nix::fcntl::RenameFlags::empty()
                };
                nix::fcntl::renameat2(dir.as_fd(), staged.as_str(), dir.as_fd(), name, flags)
                    .map_err(|x| ioe(&e.path, "rename into place")(errno(x)))?;
            }
            (None, Fingerprint::File { .. } | Fingerprint::Symlink { .. }) => {
                return Err(refused(&e.path, "has a post-image but nothing was staged"));
            }
        }
        dirs.push(parent);
        test_pause();
    }
    let removed = remove_emptied_dirs(root, rb)?;
    dirs.extend(removed.iter().map(|d| split(d).0));
    // A removed directory is skipped (gone); its parent records the removal.
    fsync_dirs(root, dirs)
}

/// Removes the directories a deletion left empty, from the deleted path's parent upwards (as
/// `git apply` does), never the worktree's top and never a directory that still holds
/// anything. Returns the removed directories.
fn remove_emptied_dirs(root: &Root, rb: &Rollback) -> Result<Vec<String>, ApplyError> {
    let mut removed: Vec<String> = vec![];
    for e in rb.entries.iter().filter(|e| e.after == Fingerprint::Absent) {
        let mut dir = split(&e.path).0.to_string();
        while !dir.is_empty() {
            let (parent, name) = split(&dir);
            let pfd = match parent_dir(root, &dir)? {
                Some(fd) => fd,
                None => break,
            };
            match nix::unistd::unlinkat(pfd.as_fd(), name, nix::unistd::UnlinkatFlags::RemoveDir) {
                Ok(()) => removed.push(dir.clone()),
                // Gone already (another deletion emptied it), still in use, or not a
                // directory: stop climbing.
                Err(Errno::ENOENT) => {}
                Err(Errno::ENOTEMPTY | Errno::EEXIST | Errno::ENOTDIR | Errno::EBUSY) => break,
                Err(x) => return Err(ioe(&dir, "remove an emptied directory")(errno(x))),
            }
            dir = parent.to_string();
        }
    }
    Ok(removed)
}

/// Reads the rollback artifact of `transaction_id` from `artifact_dir`.
pub fn read_artifact(artifact_dir: &Path, transaction_id: &str) -> Result<Rollback, ApplyError> {
    let path = artifact_dir.join(format!("{transaction_id}.rollback.json"));
    let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            ApplyError::ArtifactMissing(format!("the one of {transaction_id}"))
        }
        _ => ApplyError::Artifact(format!("the one of {transaction_id} is unreadable: {e}")),
    })?;
    Rollback::from_bytes(&bytes, transaction_id)
}

/// Moves the unusable rollback artifact of `transaction_id` into `quarantine` (never read
/// again), durably; returns its new name there.
pub fn quarantine_artifact(
    artifact_dir: &Path,
    quarantine: &Path,
    transaction_id: &str,
) -> Result<String, ApplyError> {
    let name = format!("{transaction_id}.rollback.json");
    let mut target = name.clone();
    let mut n = 1;
    while quarantine.join(&target).exists() {
        target = format!("{name}.{n}");
        n += 1;
    }
    std::fs::rename(artifact_dir.join(&name), quarantine.join(&target))
        .map_err(ioe(&name, "quarantine the rollback artifact"))?;
    for d in [quarantine, artifact_dir] {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(ioe(&name, "fsync the artifact directories"))?;
    }
    Ok(target)
}

/// Every file and symlink beneath `dir` of the tree at `root_path` (a job's output), by path
/// relative to `dir`, read without following any symlink, within `max_files` and `max_bytes`.
/// A missing `dir` is an empty harvest; a fifo, socket or device is refused.
pub fn collect_tree(
    root_path: &Path,
    dir: &str,
    max_files: usize,
    max_bytes: u64,
) -> Result<Vec<(String, Image)>, String> {
    let root = Root::open(root_path).map_err(|e| format!("open {}: {e}", root_path.display()))?;
    let top = match root.open_at(
        Path::new(dir),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(format!("{dir}: {e}")),
    };
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut stack = vec![(top, String::new())];
    while let Some((fd, prefix)) = stack.pop() {
        let keep = fd.try_clone().map_err(|e| e.to_string())?;
        let d = nix::dir::Dir::from_fd(fd).map_err(|e| e.to_string())?;
        let mut names = Vec::new();
        for e in d {
            let e = e.map_err(|e| e.to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        for name in names {
            let rel = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let st =
                nix::sys::stat::fstatat(keep.as_fd(), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map_err(|e| format!("{rel}: {e}"))?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                let sub = nix::fcntl::openat(
                    keep.as_fd(),
                    name.as_str(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("{rel}: {e}"))?;
                stack.push((sub, rel));
                continue;
            }
            if out.len() == max_files {
                return Err(format!("the job wrote more than {max_files} files"));
            }
            let image = read_image(&keep, &rel, &name).map_err(|e| e.to_string())?;
            bytes += match &image {
                Image::File { bytes, .. } => bytes.len() as u64,
                Image::Symlink { target } => target.len() as u64,
                Image::Absent => 0,
            };
            if bytes > max_bytes {
                return Err(format!("the job wrote more than {max_bytes} bytes"));
            }
            out.push((rel, image));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
