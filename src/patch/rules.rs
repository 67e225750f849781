//! The safety rules of the governed path that a well-formed patch must still pass: safe paths,
//! symlink targets inside the tree, no path touched twice, nothing beyond a symlink.

use super::{ChangeKind, FileChange, Patch, PatchError, err};
use crate::domain::git::FileMode;

pub use crate::domain::path::check_repo_path as check_path;

/// A symlink target must be relative and stay inside the tree, resolved from the link's
/// directory.
pub(super) fn check_symlink_target(link: &str, target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err("has an empty target".into());
    }
    if target.starts_with('/') {
        return Err("points to an absolute path".into());
    }
    let mut depth: i64 = link.matches('/').count() as i64;
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err("leaves the tree".into());
                }
            }
            c if crate::domain::path::is_dotgit_alias(c) => {
                return Err("points into .git".into());
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Checks across sections: no path touched twice, no path beyond a symlink the patch touches.
pub(super) fn check_whole(patch: &Patch) -> Result<(), PatchError> {
    // A copy only reads its source (git applies every section against the original tree),
    // so a copy source may also be modified, renamed or copied again by another section;
    // every other touch of a path happens once.
    let mut seen = std::collections::HashSet::new();
    for f in &patch.files {
        for p in f.paths() {
            let copy_source = f.kind == ChangeKind::Copy && f.old_path.as_deref() == Some(p);
            if !copy_source && !seen.insert(p) {
                return err(0, format!("path {p:?} is touched twice"));
            }
        }
    }
    // Git's CVE-2023-23946 and GNU patch's CVE-2019-13636: a patch that makes (or keeps) a
    // symlink and then writes through it. Any touched path below a path this patch leaves or
    // makes a symlink is refused; so is one below a path it deletes and recreates.
    let links: Vec<&str> = patch
        .files
        .iter()
        .filter(|f| f.new_mode == Some(FileMode::Symlink) || f.old_mode == Some(FileMode::Symlink))
        .flat_map(|f| f.paths())
        .collect();
    for f in &patch.files {
        for p in f.paths() {
            for l in &links {
                if p.len() > l.len() && p.starts_with(l) && p.as_bytes()[l.len()] == b'/' {
                    return err(
                        0,
                        format!(
                            "path {p:?} lies beyond the symbolic link {l:?} this patch touches"
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Git writes a type change (a symlink becoming a file, or back) as a deletion of the path
/// followed by its creation: one [`ChangeKind::TypeChange`] here, so reviewers see one change
/// of kind and coverage, claims and images see the path once.
pub(super) fn merge_type_changes(patch: &mut Patch) {
    let mut out: Vec<FileChange> = Vec::with_capacity(patch.files.len());
    for f in std::mem::take(&mut patch.files) {
        if let Some(prev) = out.last_mut()
            && prev.kind == ChangeKind::Delete
            && f.kind == ChangeKind::Create
            && prev.old_path == f.new_path
            && prev.old_mode != f.new_mode
        {
            prev.kind = ChangeKind::TypeChange;
            prev.new_path = f.new_path;
            prev.new_mode = f.new_mode;
            prev.new_oid = f.new_oid;
            prev.binary |= f.binary;
            prev.added += f.added;
            prev.symlink_target = f.symlink_target;
            continue;
        }
        out.push(f);
    }
    patch.files = out;
}
