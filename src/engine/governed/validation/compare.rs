//! Two revisions of a proposal compared by their files: for every path either touches, what
//! the file holds after each revision, as the sandbox's dry run made it. No patch is applied
//! here: the post-images are the blobs each revision's validation read back from its dry run,
//! checked against their fingerprints, and a path one revision leaves alone holds what the
//! worktree held (its pre-image, read from the worktree's HEAD only when that is the same
//! content).

use super::{PostImage, Record};
use crate::config::Permission;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Validations;
use crate::install::{Fingerprint, Image};
use crate::staging::Repo;
use std::collections::BTreeSet;

/// Largest file compared line by line; a bigger one is compared by its digest.
pub const MAX_COMPARED_FILE_BYTES: usize = 1024 * 1024;

/// Most differing paths whose contents one comparison reads and shows; the rest are counted
/// (a revision may touch 10,000 paths, and each shown one reads two blobs).
pub const MAX_COMPARED_FILES: usize = 100;

/// What a path holds after one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// The file or link's bytes (a link's are its target).
    Known(Image),
    /// Content whose fingerprint is known but whose bytes were not kept.
    Unkept(Fingerprint),
}

/// One path of the comparison.
#[derive(Debug, Clone)]
pub struct FileComparison {
    pub path: String,
    pub old: Side,
    pub new: Side,
}

impl FileComparison {
    /// Whether the two revisions leave the path the same.
    pub fn same(&self) -> bool {
        fingerprint(&self.old) == fingerprint(&self.new)
    }
}

/// The outcome: the files compared, or why they cannot be (no validation made a revision's
/// post-images yet).
#[derive(Debug, Clone)]
pub enum Comparison {
    Files {
        old_validation: String,
        new_validation: String,
        compared: Compared,
    },
    Unavailable(String),
}

/// What a comparison found: how many paths either revision touches, how many of them differ,
/// and the first [`MAX_COMPARED_FILES`] that differ, with what each revision leaves there.
#[derive(Debug, Clone)]
pub struct Compared {
    pub paths: usize,
    pub differ: usize,
    pub shown: Vec<FileComparison>,
}

fn fingerprint(s: &Side) -> Fingerprint {
    match s {
        Side::Known(i) => i.fingerprint(),
        Side::Unkept(f) => f.clone(),
    }
}

impl Validations {
    /// Compares revisions `old` and `new` of a proposal by their post-images (permission
    /// `view`): each from the newest validation of that revision whose dry run made them.
    pub async fn compare_revisions(
        &self,
        actor: &Actor,
        workspace_id: &str,
        proposal_id: &str,
        old: &str,
        new: &str,
    ) -> Result<Comparison, ServiceError> {
        self.ctx.governed(actor, workspace_id, Permission::View)?;
        let mut newest: [Option<(String, Record)>; 2] = [None, None];
        for row in self.ctx.data.store.validations_of(proposal_id).await? {
            if row.workspace_id != workspace_id {
                continue;
            }
            let (row, rec) = self.validation_in(workspace_id, &row.validation_id).await?;
            if rec.post_images.is_empty() {
                continue;
            }
            for (slot, rev) in newest.iter_mut().zip([old, new]) {
                if rec.revision == rev {
                    *slot = Some((row.validation_id.clone(), rec.clone()));
                }
            }
        }
        let (old_id, old_rec, new_id, new_rec) = match newest {
            [Some((o, orec)), Some((n, nrec))] => (o, orec, n, nrec),
            [None, _] => {
                return Ok(Comparison::Unavailable(
                    "the comparison reads the files each revision's validation made in the sandbox, and the older revision was not validated (with a passing dry run) while it was current, so its files were never made"
                        .into(),
                ));
            }
            [Some(_), None] => {
                return Ok(Comparison::Unavailable(
                    "the comparison reads the files each revision's validation made in the sandbox: validate the newer revision (a passing dry run) to compare it with the older one"
                        .into(),
                ));
            }
        };
        let repo = self.ctx.repo(workspace_id).clone();
        let compared = tokio::task::spawn_blocking(move || compare(&repo, &old_rec, &new_rec))
            .await
            .expect("comparing revisions does not panic")
            .map_err(ServiceError::internal)?;
        Ok(Comparison::Files {
            old_validation: old_id,
            new_validation: new_id,
            compared,
        })
    }
}

/// Every path either validation touched, in order: which differ (by the fingerprints the
/// records hold, reading nothing), and what each revision leaves at the first
/// [`MAX_COMPARED_FILES`] of those.
fn compare(repo: &Repo, old: &Record, new: &Record) -> Result<Compared, String> {
    let paths: BTreeSet<&str> = old
        .post_images
        .iter()
        .chain(&new.post_images)
        .map(|p| p.path.as_str())
        .collect();
    let differing: Vec<&str> = paths
        .iter()
        .copied()
        .filter(|p| fingerprint_after(old, new, p) != fingerprint_after(new, old, p))
        .collect();
    let head_tree = match new.worktree_head.as_ref().or(old.worktree_head.as_ref()) {
        Some(h) => Some(repo.commit_tree_of(h).map_err(|e| e.to_string())?),
        None => None,
    };
    let shown = differing
        .iter()
        .take(MAX_COMPARED_FILES)
        .map(|path| {
            Ok(FileComparison {
                path: path.to_string(),
                old: after(repo, head_tree.as_deref(), old, new, path)?,
                new: after(repo, head_tree.as_deref(), new, old, path)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Compared {
        paths: paths.len(),
        differ: differing.len(),
        shown,
    })
}

/// What the records say `rec`'s revision leaves at `path`: its post-image when it touches it,
/// else the file as the worktree held it (a pre-image, `other`'s first: `other` touched it).
enum Left<'a> {
    Post(&'a PostImage),
    Pre(&'a Fingerprint),
}

fn left_at<'a>(rec: &'a Record, other: &'a Record, path: &str) -> Option<Left<'a>> {
    if let Some(p) = rec.post_images.iter().find(|p| p.path == path) {
        return Some(Left::Post(p));
    }
    other
        .pre_images
        .iter()
        .chain(&rec.pre_images)
        .find(|(p, _)| p == path)
        .map(|(_, f)| Left::Pre(f))
}

/// The fingerprint of what `rec`'s revision leaves at `path` (see [`after`]), from the records.
fn fingerprint_after(rec: &Record, other: &Record, path: &str) -> Option<Fingerprint> {
    left_at(rec, other, path).map(|left| match left {
        Left::Post(p) => p.fingerprint.clone(),
        Left::Pre(f) => f.clone(),
    })
}

/// What `rec`'s revision leaves at `path`: its post-image when it touches it, else the file as
/// the worktree held it (`other`'s pre-image: `other` touched it), with its bytes from the
/// worktree's HEAD when they are that content.
fn after(
    repo: &Repo,
    head_tree: Option<&str>,
    rec: &Record,
    other: &Record,
    path: &str,
) -> Result<Side, String> {
    let pre = match left_at(rec, other, path) {
        Some(Left::Post(p)) => {
            return post_image(repo, &p.fingerprint, p.blob.as_deref(), path).map(Side::Known);
        }
        Some(Left::Pre(pre)) => pre,
        // Every touched path has a pre-image in the validation that touched it.
        None => return Err(format!("{path}: neither validation recorded what it held")),
    };
    if *pre == Fingerprint::Absent {
        return Ok(Side::Known(Image::Absent));
    }
    let from_head = match head_tree {
        Some(tree) => match repo.tree_entry(tree, path).map_err(|e| e.to_string())? {
            Some(entry) => {
                let bytes = repo.read_blob(&entry.oid).map_err(|e| e.to_string())?;
                Some(match entry.mode {
                    crate::domain::git::FileMode::Symlink => Image::Symlink {
                        target: String::from_utf8_lossy(&bytes).into_owned(),
                    },
                    mode => Image::File {
                        executable: mode == crate::domain::git::FileMode::Executable,
                        bytes,
                    },
                })
            }
            None => None,
        },
        None => None,
    };
    Ok(match from_head {
        Some(image) if image.fingerprint() == *pre => Side::Known(image),
        _ => Side::Unkept(pre.clone()),
    })
}

/// A validation's post-image, checked against its fingerprint.
fn post_image(
    repo: &Repo,
    fingerprint: &Fingerprint,
    blob: Option<&str>,
    path: &str,
) -> Result<Image, String> {
    let image = match (fingerprint, blob) {
        (Fingerprint::Absent, _) => Image::Absent,
        (Fingerprint::File { executable, .. }, Some(b)) => Image::File {
            executable: *executable,
            bytes: repo.read_blob(b).map_err(|e| e.to_string())?,
        },
        (Fingerprint::Symlink { .. }, Some(b)) => Image::Symlink {
            target: String::from_utf8_lossy(&repo.read_blob(b).map_err(|e| e.to_string())?)
                .into_owned(),
        },
        (_, None) => return Err(format!("{path}: the post-image blob is missing")),
    };
    if image.fingerprint() != *fingerprint {
        return Err(format!(
            "{path}: the stored post-image does not match its hash"
        ));
    }
    Ok(image)
}
