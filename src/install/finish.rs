//! After a crash: what each touched path holds, judged from the files themselves against the
//! rollback artifact, and the two ways out that never guess: finish the install (every path
//! is its pre- or post-image and every missing post-image is staged intact), or undo a
//! preparation (no path has changed yet). Anything else is left alone and named.

use super::{
    ApplyError, Entry, Fingerprint, Image, Rollback, current, install, parent_dir, read_image,
    refused, split,
};
use crate::beneath::Root;
use nix::errno::Errno;
use serde::Serialize;
use std::os::fd::AsFd;
use std::path::Path;

/// What a touched path holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PathState {
    /// Its pre-image; nothing staged beside it.
    Pre,
    /// Its post-image.
    Post,
    /// Its pre-image, with the staged post-image beside it (prepared, not installed).
    StagedOnly,
    /// Neither: someone else changed it, or the crash left something apply did not write.
    Other,
}

/// One path of [`inspect`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PathReport {
    pub path: String,
    pub state: PathState,
}

/// The staged image of `e`, if its temp file is there.
fn staged_image(root: &Root, e: &Entry) -> Result<Option<Image>, ApplyError> {
    let Some(name) = &e.staged else {
        return Ok(None);
    };
    let Some(dir) = parent_dir(root, &e.path)? else {
        return Ok(None);
    };
    match read_image(&dir, &e.path, name)? {
        Image::Absent => Ok(None),
        other => Ok(Some(other)),
    }
}

/// Every touched path's state.
pub fn inspect(root: &Root, rb: &Rollback) -> Result<Vec<PathReport>, ApplyError> {
    rb.entries
        .iter()
        .map(|e| {
            let now = current(root, &e.path)?.fingerprint();
            let state = if now == e.before.fingerprint() {
                if staged_image(root, e)?.is_some() {
                    PathState::StagedOnly
                } else {
                    PathState::Pre
                }
            } else if now == e.after {
                PathState::Post
            } else {
                PathState::Other
            };
            Ok(PathReport {
                path: e.path.clone(),
                state,
            })
        })
        .collect()
}

fn others(reports: &[PathReport], bad: impl Fn(PathState) -> bool) -> Vec<String> {
    reports
        .iter()
        .filter(|r| bad(r.state))
        .map(|r| r.path.clone())
        .collect()
}

/// Rolls an interrupted install forward: only when every path is its pre- or post-image and
/// every path not yet in its post-image has its staged post-image intact (the hash the
/// artifact recorded). Otherwise nothing is touched and the paths are named.
pub fn finish_forward(root: &Root, rb: &Rollback) -> Result<(), ApplyError> {
    let reports = inspect(root, rb)?;
    let bad = others(&reports, |s| s == PathState::Other);
    if !bad.is_empty() {
        return Err(refused(
            &bad.join(", "),
            "neither its pre- nor its post-image: left untouched for a human",
        ));
    }
    for (e, r) in rb.entries.iter().zip(&reports) {
        if r.state == PathState::Post || e.after == Fingerprint::Absent {
            continue;
        }
        let staged = staged_image(root, e)?.map(|i| i.fingerprint());
        if staged.as_ref() != Some(&e.after) {
            return Err(refused(
                &e.path,
                "its staged post-image is missing or does not match the artifact",
            ));
        }
    }
    install(root, rb)
}

/// Takes back a preparation: removes the staged files and the directories prepare created
/// (when empty). Refused when any path already shows its post-image or another image.
pub fn undo_prepare(root: &Root, rb: &Rollback) -> Result<(), ApplyError> {
    let reports = inspect(root, rb)?;
    let bad = others(&reports, |s| {
        matches!(s, PathState::Post | PathState::Other)
    });
    // A path whose pre- and post-images are equal is never "changed".
    let bad: Vec<String> = bad
        .into_iter()
        .filter(|p| {
            rb.entries
                .iter()
                .any(|e| e.path == *p && e.before.fingerprint() != e.after)
        })
        .collect();
    if !bad.is_empty() {
        return Err(refused(
            &bad.join(", "),
            "already changed: an install began, so a preparation cannot be undone",
        ));
    }
    discard_preparation(root, rb)
}

/// Removes what a preparation wrote, without judging the paths: every staged file the
/// artifact names and the directories prepare created (when empty). For a preparation that
/// failed part way (nothing was installed) and for the undo above.
pub fn discard_preparation(root: &Root, rb: &Rollback) -> Result<(), ApplyError> {
    for e in &rb.entries {
        let Some(name) = &e.staged else { continue };
        let dir = match parent_dir(root, &e.path) {
            Ok(Some(dir)) => dir,
            // Gone, or a symlink now: apply never staged through one.
            Ok(None) | Err(ApplyError::Refused { .. }) => continue,
            Err(e) => return Err(e),
        };
        match nix::unistd::unlinkat(
            dir.as_fd(),
            name.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(x) => {
                return Err(super::ioe(&e.path, "remove the staged file")(super::errno(
                    x,
                )));
            }
        }
        nix::unistd::fsync(dir.as_fd())
            .map_err(|x| super::ioe(&e.path, "fsync")(super::errno(x)))?;
    }
    for d in rb.created_dirs.iter().rev() {
        let (parent, name) = split(d);
        let pfd = if parent.is_empty() {
            root.reopen(nix::fcntl::OFlag::O_RDONLY)
        } else {
            root.open_at(
                Path::new(parent),
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
        };
        let Ok(pfd) = pfd else { continue };
        match nix::unistd::unlinkat(pfd.as_fd(), name, nix::unistd::UnlinkatFlags::RemoveDir) {
            // Not empty (someone else wrote there) or already gone: left as it is.
            Ok(()) | Err(Errno::ENOENT) | Err(Errno::ENOTEMPTY) | Err(Errno::EEXIST) => {}
            Err(x) => return Err(super::ioe(d, "remove a created directory")(super::errno(x))),
        }
    }
    Ok(())
}

/// Removes the staged temp files of transaction `transaction_id` by their names (entry `i` of
/// `paths` is staged as [`super::staged_name`]`(id, i)` beside it), opened beneath the root and
/// never through a symlink: used when no usable rollback artifact lists them. Missing files
/// and missing parents are fine.
pub fn remove_staged(
    root: &Root,
    transaction_id: &str,
    paths: &[String],
) -> Result<Vec<String>, ApplyError> {
    let mut removed = vec![];
    for (i, path) in paths.iter().enumerate() {
        let dir = match parent_dir(root, path) {
            Ok(Some(dir)) => dir,
            // Gone, or a symlink now: apply never staged through one.
            Ok(None) | Err(ApplyError::Refused { .. }) => continue,
            Err(e) => return Err(e),
        };
        let name = super::staged_name(transaction_id, i);
        match nix::unistd::unlinkat(
            dir.as_fd(),
            name.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) => {
                nix::unistd::fsync(dir.as_fd())
                    .map_err(|x| super::ioe(path, "fsync")(super::errno(x)))?;
                let (parent, _) = split(path);
                removed.push(if parent.is_empty() {
                    name
                } else {
                    format!("{parent}/{name}")
                });
            }
            Err(Errno::ENOENT) => {}
            Err(x) => {
                return Err(super::ioe(path, "remove the staged file")(super::errno(x)));
            }
        }
    }
    Ok(removed)
}
