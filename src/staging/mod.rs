//! Git plumbing (through the git CLI) and disposable checkouts: the only module that runs git.
//!
//! A checkout lives in `<data_dir>/checkouts/<creation_key>/`: `tree/` is the working tree that
//! is bind-mounted into the job container; `index` is a private git index (never mounted) whose
//! stat cache makes the after-run source check cost a `stat` per tracked path, not a re-hash.

use crate::domain::git::FileMode;
use crate::limits;
use crate::process::{Command, Stdio};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Longest revision expression accepted.
pub const MAX_REV_BYTES: usize = 1024;

/// Errors of git and staging.
#[derive(Debug, thiserror::Error)]
pub enum StagingError {
    #[error("{path} is not a git repository")]
    NotARepository { path: PathBuf },
    #[error("{rev:?} does not resolve to a commit in {repo}")]
    UnknownRevision { rev: String, repo: PathBuf },
    #[error("{0}")]
    InvalidRevision(String),
    #[error("git {args} failed (exit {code:?}): {stderr}")]
    Git {
        args: String,
        code: Option<i32>,
        stderr: String,
    },
    #[error("git output exceeded {limit} bytes")]
    OutputTooLarge { limit: usize },
    #[error("checkout filesystem: {0}")]
    Space(String),
    /// The engine holding a job's workspace volume failed or refused.
    #[error("workspace volume: {0}")]
    Volume(String),
    /// The engine holding a job's workspace volume stopped answering.
    #[error("workspace volume: {0}")]
    EngineUnresponsive(String),
    #[error("checkout tree {path} is not the directory Airlock created for it")]
    TreeReplaced { path: PathBuf },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl StagingError {
    /// git refused because another process holds a ref's lock (`cannot lock ref`): nothing
    /// changed, and the same call may succeed once that process is done.
    pub fn is_ref_locked(&self) -> bool {
        matches!(self, StagingError::Git { stderr, .. } if stderr.contains("cannot lock ref"))
    }
}

fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> StagingError + 'a {
    move |source| StagingError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A repository on this host (bare or non-bare).
#[derive(Debug, Clone)]
pub struct Repo {
    git_dir: PathBuf,
    /// Remembered ref answers for hot read paths (see [`refcache`]).
    ref_cache: std::sync::Arc<refcache::RefCache>,
    /// Commit summaries already read, by commit id (a commit id names its content, so an
    /// answer never goes stale); bounded by [`limits::MAX_REMEMBERED_SUMMARIES`].
    summaries: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, plumbing::CommitSummary>>,
    >,
    /// The tree of each commit already asked (by full commit id, so never stale); bounded by
    /// [`limits::MAX_REMEMBERED_TREES`]. Every job on a revision asks it once.
    trees: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// A job's empty checkout filesystem: the tree directory on it and that directory's identity.
pub struct Allocated((PathBuf, crate::beneath::Identity));

impl From<(PathBuf, crate::beneath::Identity)> for Allocated {
    fn from(a: (PathBuf, crate::beneath::Identity)) -> Allocated {
        Allocated(a)
    }
}

/// Settings forced on every git call Airlock makes: no hooks, no fsmonitor, no filters or
/// line-ending conversion, exact modes and symlinks, and a stat check that includes ctime.
const FORCED_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.trustctime=true",
    "core.checkStat=default",
    "core.ignoreStat=false",
    "core.sparseCheckout=false",
    "core.splitIndex=false",
    "core.untrackedCache=false",
    "core.quotePath=false",
    // Full object ids are never looked up as ref names first.
    "core.warnAmbiguousRefs=false",
    "core.fsync=all",
    "core.fsyncMethod=fsync",
    "gc.auto=0",
    "safe.directory=*",
];

mod check;
use check::{Verdict, listing};
pub mod cache;
mod commits;
mod hand_over;
pub mod notes;
mod objects;
pub mod overlay;
pub mod plumbing;
use hand_over::{Stats, hand_over};
use std::os::unix::fs::MetadataExt;
pub mod refcache;
pub mod space;

pub use space::CheckoutFs;

/// A git command with a clean environment: no inherited GIT_* variables, no system or global
/// config, and the forced settings above.
pub(crate) fn git_command() -> Command {
    let mut cmd = crate::process::command(git_program());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        // Paths Airlock passes are always literal: `:(glob)x` or `:!x` is a file name, never
        // pathspec magic.
        .env("GIT_LITERAL_PATHSPECS", "1");
    for c in FORCED_CONFIG {
        cmd.arg("-c").arg(c);
    }
    cmd
}

/// The git executable, found on `PATH` once: the child then execs it directly instead of trying
/// every `PATH` entry after each fork.
fn git_program() -> &'static OsStr {
    static GIT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    GIT.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join("git"))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| PathBuf::from("git"))
    })
    .as_os_str()
}

/// The installed git's `git --version` line (the same executable and environment every
/// other git call uses), for `airlock doctor`.
pub fn git_version() -> Result<String, StagingError> {
    let mut cmd = git_command();
    cmd.arg("--version");
    let (_, out) = run_git(cmd, &[0])?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// Runs a git command and returns stdout, bounded by [`limits::MAX_GIT_OUTPUT_BYTES`].
pub(crate) fn run_git(mut cmd: Command, ok_codes: &[i32]) -> Result<(i32, Vec<u8>), StagingError> {
    let args = format!("{:?}", cmd.get_args().collect::<Vec<&OsStr>>());
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| StagingError::Git {
            args: args.clone(),
            code: None,
            stderr: format!("cannot run git: {e}"),
        })?;
    if out.stdout.len() > limits::MAX_GIT_OUTPUT_BYTES {
        return Err(StagingError::OutputTooLarge {
            limit: limits::MAX_GIT_OUTPUT_BYTES,
        });
    }
    let code = out.status.code().unwrap_or(-1);
    if !ok_codes.contains(&code) {
        return Err(StagingError::Git {
            args,
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok((code, out.stdout))
}

/// `git version 2.47.3` -> (2, 47).
pub fn parse_git_version(s: &str) -> Option<(u32, u32)> {
    let v = s.trim().strip_prefix("git version ")?;
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The first git that merges trees, not only commits, given an explicit merge base
/// (`merge-tree --merge-base=<base> <tree> <tree>`).
pub const GIT_MERGES_TREES: (u32, u32) = (2, 45);

/// Whether the installed git merges trees given a base ([`GIT_MERGES_TREES`]), asked once.
pub fn git_merges_trees() -> bool {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| {
        git_version()
            .ok()
            .and_then(|v| parse_git_version(&v))
            .is_some_and(|v| v >= GIT_MERGES_TREES)
    })
}

pub(crate) fn is_oid(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Repo {
    /// Opens the repository at `path`.
    pub fn open(path: &Path) -> Result<Repo, StagingError> {
        let not_repo = || StagingError::NotARepository {
            path: path.to_path_buf(),
        };
        if !path.is_dir() {
            return Err(not_repo());
        }
        let mut cmd = git_command();
        cmd.arg("-C").arg(path).args([
            "rev-parse",
            "--path-format=absolute",
            "--absolute-git-dir",
            "--git-common-dir",
        ]);
        let (_, out) = run_git(cmd, &[0]).map_err(|_| not_repo())?;
        let out = String::from_utf8(out).map_err(|_| not_repo())?;
        let mut lines = out.lines();
        let (Some(git_dir), Some(common_dir)) = (lines.next(), lines.next()) else {
            return Err(not_repo());
        };
        let git_dir = PathBuf::from(git_dir);
        // Ref answers are remembered only when refs are plain files (the `files` backend).
        let mut cmd = git_command();
        cmd.arg("--git-dir")
            .arg(&git_dir)
            .args(["config", "--get", "extensions.refStorage"]);
        let (code, backend) = run_git(cmd, &[0, 1])?;
        let files = code == 1 || String::from_utf8_lossy(&backend).trim() == "files";
        Ok(Repo {
            git_dir,
            ref_cache: std::sync::Arc::new(refcache::RefCache::new(
                files.then(|| PathBuf::from(common_dir)),
            )),
            summaries: Default::default(),
            trees: Default::default(),
        })
    }

    /// The remembered ref answers of this repository.
    pub fn ref_cache(&self) -> &refcache::RefCache {
        &self.ref_cache
    }

    /// The repository's git directory.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    pub(crate) fn git(&self) -> Command {
        let mut cmd = git_command();
        cmd.arg("--git-dir").arg(&self.git_dir);
        cmd
    }

    /// The empty tree's id in this repository's hash format.
    pub fn empty_tree(&self) -> Result<String, StagingError> {
        let mut cmd = self.git();
        cmd.args(["hash-object", "-t", "tree", "--stdin"]);
        // hash-object reads stdin; an empty tree is zero bytes.
        let (_, out) = run_git(cmd, &[0])?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Git with the repository, a work tree and a private index; attributes are read from the
    /// empty tree so the revision's own .gitattributes (export-ignore, export-subst, eol,
    /// filters) never change the bytes that are staged or compared.
    fn git_worktree(&self, tree: &Path, index: &Path, empty_tree: &str) -> Command {
        let mut cmd = self.git();
        cmd.arg("--work-tree")
            .arg(tree)
            .arg(format!("--attr-source={empty_tree}"))
            .env("GIT_INDEX_FILE", index);
        cmd
    }

    /// Fills the empty directory `tree` with `rev` (a commit or tree id) through the private
    /// index `index`: every tracked path with its mode, symlinks as symlinks, no filters, no
    /// `.git`; then gives it to `uid:gid` and records every path's mode, blob id and stat (to
    /// the nanosecond) as it is after that. Returns the snapshot and the bytes the tree uses.
    pub(crate) fn materialize(
        &self,
        tree: &Path,
        index: &Path,
        empty_tree: &str,
        rev: &str,
        owner: (u32, u32),
    ) -> Result<(Snapshot, u64), StagingError> {
        let t0 = std::time::Instant::now();
        let mut cmd = self.git_worktree(tree, index, empty_tree);
        cmd.args(["read-tree", "--end-of-options"]).arg(rev);
        run_git(cmd, &[0])?;
        let read_us = t0.elapsed().as_micros() as u64;
        // The index's listing (every path's mode and blob id) needs only what read-tree
        // wrote: it runs beside the checkout and the hand-over, which never write the index.
        let (listed, written) = std::thread::scope(|scope| {
            let listing = scope.spawn(|| {
                let listed = self.index_entries(tree, index, empty_tree);
                (listed, t0.elapsed().as_micros() as u64 - read_us)
            });
            let written = self.checkout_and_hand_over(tree, index, empty_tree, owner, t0);
            (
                listing.join().expect("listing the index does not panic"),
                written,
            )
        });
        let ((mut stats, bytes), checkout_us, hand_over_us) = written?;
        let (listed, list_us) = listed;
        let snapshot: Vec<_> = listed?
            .into_iter()
            .map(|(path, mode, oid)| {
                let stat = stats.remove(&path);
                (path, Staged { mode, oid, stat })
            })
            .collect();
        tracing::debug!(
            paths = snapshot.len(),
            read_us,
            checkout_us,
            hand_over_us,
            list_us,
            "tree materialized"
        );
        Ok((std::sync::Arc::new(snapshot), bytes))
    }

    /// The index's files written into `tree`, then given to `uid:gid` with every path's stat
    /// recorded as it is after that: the stats and bytes, and the microseconds each took.
    fn checkout_and_hand_over(
        &self,
        tree: &Path,
        index: &Path,
        empty_tree: &str,
        owner: (u32, u32),
        t0: std::time::Instant,
    ) -> Result<((Stats, u64), u64, u64), StagingError> {
        let started = t0.elapsed().as_micros() as u64;
        let mut cmd = self.git_worktree(tree, index, empty_tree);
        // Parallel checkout (one worker per core; git keeps small trees sequential): the same
        // files, modes and symlinks, written by several processes. On 2 cores it halves the
        // time to write 50,000 files, which is what staging a cold tree costs.
        cmd.args([
            "-c",
            "checkout.workers=0",
            "checkout-index",
            "--all",
            "--force",
        ]);
        run_git(cmd, &[0])?;
        let checkout_us = t0.elapsed().as_micros() as u64 - started;
        // One walk gives the tree to the sandbox user and records every path's stat as it is
        // after that (ownership changes move ctime), to the nanosecond. The check after the run
        // compares against this snapshot, so neither git's one-second stat cache nor a refresh
        // pass over the whole tree is needed.
        let handed = hand_over(tree, owner.0, owner.1)?;
        let hand_over_us = t0.elapsed().as_micros() as u64 - started - checkout_us;
        Ok((handed, checkout_us, hand_over_us))
    }

    /// Stages a disposable checkout of `commit` into `checkouts/<key>/` (which must not exist),
    /// on the filesystem `fs` chooses: every tracked path with its mode, symlinks as symlinks,
    /// no `.git`. Every directory is created beneath `checkouts` without following symlinks.
    /// Files are owned by `uid:gid` when Airlock runs as root; otherwise they are made group-
    /// and world-writable.
    pub fn stage_checkout(
        &self,
        commit: &str,
        checkouts: &std::sync::Arc<crate::beneath::Root>,
        key: &str,
        fs: CheckoutFs,
        uid: u32,
        gid: u32,
    ) -> Result<Checkout, StagingError> {
        let dir = checkouts.path().join(key);
        let (tree, tree_identity) = space::allocate(checkouts, key, fs)?;
        let mut checkout = Checkout {
            index: dir.join("index"),
            dir,
            tree,
            tree_rel: Path::new(key).join(space::tree_rel(fs)),
            tree_identity,
            checkouts: checkouts.clone(),
            empty_tree: self.empty_tree()?,
            commit: commit.to_string(),
            snapshot: std::sync::Arc::new(Vec::new()),
            upper: None,
        };
        // Git writes by path: make sure the path still names the tree created above.
        checkout.verify_tree()?;
        let (snapshot, _) = self.materialize(
            &checkout.tree,
            &checkout.index,
            &checkout.empty_tree,
            commit,
            (uid, gid),
        )?;
        checkout.snapshot = snapshot;
        Ok(checkout)
    }

    /// Stages `commit` for job `key` as an overlay of a cached base tree (`lease`): the job's
    /// filesystem is made as for [`Repo::stage_checkout`], and its tree is an overlay mount
    /// whose read-only lower layer is the cached tree and whose upper and work directories
    /// live on that filesystem, so the job's writes count against its own quota and nothing
    /// it does reaches the cache.
    pub fn stage_overlay(
        &self,
        commit: &str,
        checkouts: &std::sync::Arc<crate::beneath::Root>,
        key: &str,
        fs: CheckoutFs,
        lease: &cache::Lease,
    ) -> Result<Checkout, StagingError> {
        let allocated = space::allocate(checkouts, key, fs)?;
        self.stage_overlay_on(commit, checkouts, key, fs, lease, allocated)
    }

    /// Job `key`'s empty checkout filesystem, on its own (see [`Repo::stage_overlay_on`]).
    pub fn allocate_checkout(
        checkouts: &crate::beneath::Root,
        key: &str,
        fs: CheckoutFs,
    ) -> Result<Allocated, StagingError> {
        space::allocate(checkouts, key, fs).map(Allocated)
    }

    /// [`Repo::stage_overlay`] on a filesystem [`Repo::allocate_checkout`] made (while the
    /// base tree was being leased, say).
    pub fn stage_overlay_on(
        &self,
        commit: &str,
        checkouts: &std::sync::Arc<crate::beneath::Root>,
        key: &str,
        fs: CheckoutFs,
        lease: &cache::Lease,
        allocated: impl Into<Allocated>,
    ) -> Result<Checkout, StagingError> {
        let dir = checkouts.path().join(key);
        let Allocated((tree, _)) = allocated.into();
        let tree_rel = Path::new(key).join(space::tree_rel(fs));
        let upper = overlay::mount(&tree, &lease.tree(), lease.owner())?;
        let tree_identity = checkouts
            .identity(Some(&tree_rel))
            .map_err(io_err("stat overlay tree", &tree))?;
        Ok(Checkout {
            index: dir.join("index"),
            dir,
            tree,
            tree_rel,
            tree_identity,
            checkouts: checkouts.clone(),
            empty_tree: lease.empty_tree().to_string(),
            commit: commit.to_string(),
            snapshot: lease.snapshot(),
            upper: Some(upper),
        })
    }

    /// (path, mode, blob id) of every stage-0 entry of the checkout's private index.
    fn index_entries(
        &self,
        tree: &Path,
        index: &Path,
        empty_tree: &str,
    ) -> Result<Vec<(Vec<u8>, FileMode, String)>, StagingError> {
        let mut cmd = self.git_worktree(tree, index, empty_tree);
        cmd.args(["ls-files", "-s", "-z"]);
        let (_, out) = run_git(cmd, &[0])?;
        let mut entries = Vec::new();
        for rec in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let Some(tab) = rec.iter().position(|b| *b == b'\t') else {
                continue;
            };
            let meta = String::from_utf8_lossy(&rec[..tab]);
            let mut parts = meta.split(' ');
            let (Some(mode), Some(oid)) = (parts.next(), parts.next()) else {
                continue;
            };
            let mode = FileMode::parse(mode).ok_or_else(|| StagingError::Git {
                args: "ls-files -s".into(),
                code: None,
                stderr: format!("unknown mode {mode:?}"),
            })?;
            entries.push((rec[tab + 1..].to_vec(), mode, oid.to_string()));
        }
        Ok(entries)
    }
}

/// Every tracked path of a staged tree, in git's index order (bytewise by path): mode, blob
/// id and the stat it had once staged.
pub(crate) type Snapshot = std::sync::Arc<Vec<(Vec<u8>, Staged)>>;

/// A staged checkout.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// `<data_dir>/checkouts/<creation_key>`, removed as a whole.
    pub dir: PathBuf,
    /// The working tree mounted into the container.
    pub tree: PathBuf,
    /// The tree relative to `checkouts`, and its identity when it was created.
    tree_rel: PathBuf,
    tree_identity: crate::beneath::Identity,
    checkouts: std::sync::Arc<crate::beneath::Root>,
    /// Private index; never visible to the job.
    pub index: PathBuf,
    empty_tree: String,
    pub commit: String,
    /// Every tracked path as staged: mode, blob id and nanosecond stat.
    snapshot: Snapshot,
    /// For an overlay checkout: its upper directory (the job's writes).
    upper: Option<PathBuf>,
}

impl Checkout {
    /// Checks that the tree path still names, without any symlink, the directory created for
    /// it. Called before git writes into it and before it is handed to Docker as a mount source.
    pub fn verify_tree(&self) -> Result<(), StagingError> {
        match self.checkouts.identity(Some(&self.tree_rel)) {
            Ok(id) if id == self.tree_identity => Ok(()),
            _ => Err(StagingError::TreeReplaced {
                path: self.tree.clone(),
            }),
        }
    }
}

/// One staged index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Staged {
    pub(crate) mode: FileMode,
    pub(crate) oid: String,
    pub(crate) stat: Option<StatKey>,
}

/// A path's stat at full precision. ctime cannot be set by the job, so an unchanged ctime to the
/// nanosecond means the inode was not touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatKey {
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
    pub(crate) mode: u32,
}

pub(crate) const S_IFMT: u32 = 0o170000;
pub(crate) const S_IFREG: u32 = 0o100000;
pub(crate) const S_IFLNK: u32 = 0o120000;

pub(crate) fn stat_key(path: &Path) -> Option<StatKey> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| stat_key_of(&m))
}

/// The stat fields the source check compares, from an `lstat`.
fn stat_key_of(m: &std::fs::Metadata) -> StatKey {
    StatKey {
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        mode: m.mode(),
    }
}

/// A private temporary directory (an index, fast-import marks), removed when dropped; `op`
/// names it in the error.
fn scratch_dir(op: &'static str) -> Result<tempfile::TempDir, StagingError> {
    tempfile::tempdir().map_err(|e| StagingError::Io {
        op,
        path: std::env::temp_dir(),
        source: e,
    })
}

pub(crate) fn walk_no_follow(
    path: &Path,
    f: &mut dyn FnMut(&Path, &std::fs::Metadata) -> Result<(), StagingError>,
) -> Result<(), StagingError> {
    let meta = std::fs::symlink_metadata(path).map_err(io_err("lstat", path))?;
    f(path, &meta)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io_err("read dir", path))? {
            let entry = entry.map_err(io_err("read dir", path))?;
            walk_no_follow(&entry.path(), f)?;
        }
    }
    Ok(())
}

/// Removes a checkout directory, including files a job made unwritable: unmounts its job
/// filesystem first, then removes the directory, retrying while something is still writing
/// into it. Succeeds only when the directory is gone.
pub fn remove_checkout(dir: &Path) -> Result<(), StagingError> {
    space::unmount(dir)?;
    let mut last = None;
    for attempt in 1..=limits::CHECKOUT_REMOVE_ATTEMPTS {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        // A job may have removed write permission from its own directories; restore it
        // (without following symlinks) and try again after a pause.
        let _ = walk_no_follow(dir, &mut |p, m| {
            use std::os::unix::fs::PermissionsExt;
            if m.is_dir() {
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
            }
            Ok(())
        });
        std::thread::sleep(limits::CHECKOUT_REMOVE_RETRY_DELAY * attempt);
    }
    if !dir.exists() {
        return Ok(());
    }
    Err(StagingError::Io {
        op: "remove checkout",
        path: dir.to_path_buf(),
        source: last.unwrap_or_else(|| std::io::Error::other("still present")),
    })
}

#[cfg(test)]
mod tests;
