//! Git notes Airlock owns (`refs/notes/airlock`): a note per landed commit holding the
//! attestations of its delivery, so that `git` alone can carry them
//! (`git notes --ref=airlock show <commit>`, `git fetch origin refs/notes/airlock:...`).
//!
//! The note is added as one more [`RefOp`] of the delivery's own ref transaction, so the
//! landed commit, its receipt and its note appear together or not at all.

use super::plumbing::{CommitStamp, RefOp};
use super::{Repo, StagingError};
use crate::domain::git::FileMode;

/// The notes ref attestations are written to.
pub const NOTES_REF: &str = "refs/notes/airlock";

impl Repo {
    /// The ref change that adds (or replaces) `object`'s note in `NOTES_REF` with `blob`,
    /// made on the notes ref as it is now; the op fails the transaction if it moved since.
    /// Notes are stored flat (`<object id>` at the tree's root), which git reads at any
    /// fanout.
    pub fn note_op(&self, object: &str, blob: &str, time: i64) -> Result<RefOp, StagingError> {
        let old = self.ref_value(NOTES_REF)?;
        let base = match &old {
            Some(commit) => self.commit_tree_of(commit)?,
            None => self.empty_tree()?,
        };
        let tree = self.edit_tree(
            &base,
            &[(
                object.to_string(),
                Some((blob.to_string(), FileMode::Regular)),
            )],
        )?;
        let parents: Vec<&str> = old.iter().map(String::as_str).collect();
        let message = format!("Airlock: attestations of {object}\n");
        let new = self.commit_tree(
            &tree,
            &parents,
            &CommitStamp {
                message: &message,
                time,
            },
        )?;
        Ok(match old {
            Some(old) => RefOp::Update {
                name: NOTES_REF.into(),
                new,
                old,
            },
            None => RefOp::Create {
                name: NOTES_REF.into(),
                new,
            },
        })
    }

    /// The note of `object` in `NOTES_REF`, if any.
    pub fn note(&self, object: &str) -> Result<Option<Vec<u8>>, StagingError> {
        let Some(commit) = self.ref_value(NOTES_REF)? else {
            return Ok(None);
        };
        let tree = self.commit_tree_of(&commit)?;
        match self.tree_entry(&tree, object)? {
            Some(e) => self.read_blob(&e.oid).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_read_by_git_itself_and_a_second_note_keeps_the_first() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("r");
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(&path)
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        std::fs::create_dir(&path).unwrap();
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(path.join("f"), "1").unwrap();
        git(&["add", "-A"]);
        git(&[
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@x",
            "commit",
            "-qm",
            "one",
        ]);
        let first = git(&["rev-parse", "HEAD"]).trim().to_string();
        std::fs::write(path.join("f"), "2").unwrap();
        git(&[
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@x",
            "commit",
            "-qam",
            "two",
        ]);
        let second = git(&["rev-parse", "HEAD"]).trim().to_string();

        let repo = Repo::open(&path).unwrap();
        for (commit, text) in [(&first, "note one\n"), (&second, "note two\n")] {
            let blob = repo.write_blob(text.as_bytes()).unwrap();
            let op = repo.note_op(commit, &blob, 1_700_000_000).unwrap();
            repo.update_refs(&[op]).unwrap();
        }
        assert_eq!(
            git(&["notes", "--ref=airlock", "show", &first]),
            "note one\n"
        );
        assert_eq!(
            git(&["notes", "--ref=airlock", "show", &second]),
            "note two\n"
        );
        assert_eq!(repo.note(&first).unwrap().unwrap(), b"note one\n");
        // An op made on a notes ref that moved since fails the transaction: nothing changes.
        let blob = repo.write_blob(b"late\n").unwrap();
        let stale = repo.note_op(&first, &blob, 1_700_000_001).unwrap();
        let fresh = repo.note_op(&first, &blob, 1_700_000_002).unwrap();
        repo.update_refs(&[fresh]).unwrap();
        assert!(repo.update_refs(&[stale]).is_err());
        assert_eq!(git(&["notes", "--ref=airlock", "show", &first]), "late\n");
        assert_eq!(
            git(&["notes", "--ref=airlock", "show", &second]),
            "note two\n"
        );
    }
}
