//! Overlay checkouts: a job's tree is an overlay mount whose read-only lower layer is a cached
//! base tree ([`super::cache`]) and whose upper and work directories sit on the job's own
//! filesystem (`mnt/upper`, `mnt/work`, beside the mount point `mnt/tree`), so `disk_bytes`
//! and `inodes` bound what the job writes and nothing it does reaches the cache.
//!
//! The mount has no redirects, no index and no metacopy: a renamed directory is copied and
//! whited out, and a copy-up holds the whole file, so the upper directory alone names every
//! path the job touched. That makes the source check cost what the job wrote.

use super::{Repo, Snapshot, Staged, StagingError, Verdict};
use crate::domain::git::FileMode;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The job's writes, beside the mount point on the job's filesystem.
pub const UPPER: &str = "upper";
/// Overlay's own scratch directory (same filesystem as the upper one).
pub const WORK: &str = "work";

/// Every behaviour that would let a change escape the upper directory is off.
const OPTIONS: &str = "redirect_dir=off,index=off,metacopy=off,xino=off";

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StagingError + 'a {
    move |source| StagingError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Mounts the overlay of `lower` on `tree` (an empty directory on the job's filesystem), the
/// upper directory's root owned by `owner` (the merged root takes its owner from it). Returns
/// the upper directory.
pub(crate) fn mount(tree: &Path, lower: &Path, owner: (u32, u32)) -> Result<PathBuf, StagingError> {
    use std::os::unix::fs::PermissionsExt;
    let parent = tree
        .parent()
        .ok_or_else(|| StagingError::Space(format!("{} has no parent", tree.display())))?;
    let upper = parent.join(UPPER);
    let work = parent.join(WORK);
    for (d, mode) in [(&upper, 0o755), (&work, 0o700)] {
        std::fs::create_dir(d).map_err(io("create", d))?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))
            .map_err(io("chmod", d))?;
    }
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(
            &upper,
            Some(nix::unistd::Uid::from_raw(owner.0)),
            Some(nix::unistd::Gid::from_raw(owner.1)),
        )
        .map_err(|e| StagingError::Io {
            op: "chown",
            path: upper.clone(),
            source: e.into(),
        })?;
    }
    // The option string separates with ',' and ':' and escapes with '\'.
    for p in [lower, &upper, &work] {
        if p.as_os_str()
            .as_bytes()
            .iter()
            .any(|b| matches!(b, b',' | b':' | b'\\' | b'\n'))
        {
            return Err(StagingError::Space(format!(
                "{} holds ',', ':' or '\\', which an overlay mount cannot name",
                p.display()
            )));
        }
    }
    let data = format!(
        "lowerdir={},upperdir={},workdir={},{OPTIONS}",
        lower.display(),
        upper.display(),
        work.display()
    );
    nix::mount::mount(
        Some("overlay"),
        tree,
        Some("overlay"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| StagingError::Space(format!("overlay mount on {}: {e}", tree.display())))?;
    if !super::space::is_mounted(tree) {
        return Err(StagingError::Space(format!(
            "{} is not an overlay after mount",
            tree.display()
        )));
    }
    Ok(upper)
}

/// The snapshot entry of `path`, if it is tracked.
fn tracked<'a>(snapshot: &'a [(Vec<u8>, Staged)], path: &[u8]) -> Option<&'a Staged> {
    snapshot
        .binary_search_by(|(p, _)| p.as_slice().cmp(path))
        .ok()
        .map(|i| &snapshot[i].1)
}

/// Every tracked path strictly beneath directory `dir` (contiguous: the snapshot is in
/// bytewise order, and every path with the prefix `dir/` sorts together).
fn beneath<'a>(snapshot: &'a [(Vec<u8>, Staged)], dir: &[u8]) -> &'a [(Vec<u8>, Staged)] {
    let mut prefix = dir.to_vec();
    prefix.push(b'/');
    let start = snapshot.partition_point(|(p, _)| p.as_slice() < prefix.as_slice());
    let len = snapshot[start..]
        .iter()
        .take_while(|(p, _)| p.starts_with(&prefix))
        .count();
    &snapshot[start..start + len]
}

fn is_opaque(path: &Path) -> bool {
    // `xattr::get` reads the link itself, never a symlink's target.
    matches!(xattr::get(path, "trusted.overlay.opaque"), Ok(Some(v)) if v == b"y")
}

struct Walk<'a> {
    repo: &'a Repo,
    upper: &'a Path,
    snapshot: &'a [(Vec<u8>, Staged)],
    changed: BTreeSet<Vec<u8>>,
    suspects: Vec<(Vec<u8>, String)>,
}

impl Walk<'_> {
    /// Marks every tracked path (gitlinks aside, as the full check skips them) of `paths`.
    fn hidden(&mut self, paths: &[(Vec<u8>, Staged)]) {
        for (p, s) in paths {
            if s.mode != FileMode::Gitlink {
                self.changed.insert(p.clone());
            }
        }
    }

    fn visit(&mut self, rel: &[u8]) -> Result<(), StagingError> {
        let dir = if rel.is_empty() {
            self.upper.to_path_buf()
        } else {
            self.upper.join(OsStr::from_bytes(rel))
        };
        for entry in std::fs::read_dir(&dir).map_err(io("read dir", &dir))? {
            let entry = entry.map_err(io("read dir", &dir))?;
            let mut path = rel.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(entry.file_name().as_bytes());
            // Never follows a symlink.
            let meta = entry.metadata().map_err(io("lstat", &entry.path()))?;
            let ft = meta.file_type();
            let below = beneath(self.snapshot, &path);
            if ft.is_char_device() && meta.rdev() == 0 {
                // A whiteout: the path, and everything beneath it, is gone.
                if let Some(s) = tracked(self.snapshot, &path)
                    && s.mode != FileMode::Gitlink
                {
                    self.changed.insert(path.clone());
                }
                self.hidden(below);
                continue;
            }
            if ft.is_dir() {
                if let Some(s) = tracked(self.snapshot, &path) {
                    // A directory where a file was (a submodule's directory is untracked).
                    if s.mode != FileMode::Gitlink {
                        self.changed.insert(path);
                    }
                    continue;
                }
                if below.is_empty() {
                    // Untracked: nothing it holds can hide a tracked path.
                    continue;
                }
                if is_opaque(&entry.path()) {
                    // Made anew: every tracked path beneath it that the upper directory does
                    // not hold again is gone (those it holds are judged below).
                    for (p, s) in below {
                        if s.mode != FileMode::Gitlink
                            && std::fs::symlink_metadata(self.upper.join(OsStr::from_bytes(p)))
                                .is_err()
                        {
                            self.changed.insert(p.clone());
                        }
                    }
                }
                self.visit(&path)?;
                continue;
            }
            // A file, symlink or other non-directory: a tracked directory here is gone.
            self.hidden(below);
            if let Some(s) = tracked(self.snapshot, &path) {
                if s.mode == FileMode::Gitlink {
                    continue;
                }
                match self.repo.judge(self.upper, &path, s, meta.mode())? {
                    Verdict::Same => {}
                    Verdict::Changed => {
                        self.changed.insert(path);
                    }
                    Verdict::Rehash => self.suspects.push((path, s.oid.clone())),
                }
            }
        }
        Ok(())
    }
}

/// Tracked paths an overlay checkout's job changed, read from its upper directory alone: a
/// tracked path present there (rewritten, chmod'ed, replaced by another type) whose content,
/// type or executable bit differs, or hidden by a whiteout, an opaque directory or a
/// non-directory in place of its directory. Untracked additions are allowed. The same answer
/// as [`Repo::changed_in_tree`] over the merged tree, at the cost of what the job wrote.
pub(crate) fn changed_in_upper(
    repo: &Repo,
    upper: &Path,
    snapshot: &Snapshot,
    limit: usize,
) -> Result<(Vec<String>, usize), StagingError> {
    let mut walk = Walk {
        repo,
        upper,
        snapshot,
        changed: BTreeSet::new(),
        suspects: Vec::new(),
    };
    walk.visit(b"")?;
    let Walk {
        mut changed,
        suspects,
        ..
    } = walk;
    let suspects: Vec<(&[u8], &str)> = suspects
        .iter()
        .map(|(p, o)| (p.as_slice(), o.as_str()))
        .collect();
    repo.rehash_suspects(upper, &suspects, &mut changed)?;
    Ok(super::listing(changed, limit))
}
