//! Every path beneath the data dir, in one place.
//!
//! ```text
//! <data_dir>/airlock.db                          SQLite (WAL)
//! <data_dir>/serve.lock                          the running daemon's flock and pid
//! <data_dir>/artifacts/verifications/<id>.json   terminal results
//! <data_dir>/artifacts/quarantine/               rejected artifacts
//! <data_dir>/checkouts/<key>/                    a job's checkout (disk.img, mnt/tree, index)
//! <data_dir>/locks/<key>.lock                    a live worker's flock
//! <data_dir>/tree-cache/                         warm base trees (cache.img mounted at mnt/,
//!                                                mnt/entries/<tree>-<uid>-<gid>/; see
//!                                                staging::cache)
//! <data_dir>/evidence/<ref>.transcript           evidence packet transcripts
//! <data_dir>/candidates/<id>/transcripts/<i>     candidate-owned transcript copies
//! <data_dir>/patches/<sha256>.patch               proposal revisions, named by their digest
//! <data_dir>/transactions/<id>.rollback.json      apply rollback artifacts
//! <data_dir>/transactions/quarantine/             corrupt rollback artifacts, never used
//! ```

use std::path::{Path, PathBuf};

/// Directories Airlock keeps beneath its data dir, created (without following symlinks) in
/// this order when the data dir is opened.
pub const SUBDIRS: [&str; 10] = [
    "checkouts",
    "locks",
    "artifacts",
    "artifacts/verifications",
    "artifacts/quarantine",
    "evidence",
    "candidates",
    "patches",
    "transactions",
    "transactions/quarantine",
];

/// The paths of one data dir.
#[derive(Debug, Clone)]
pub struct DataLayout {
    root: PathBuf,
}

impl DataLayout {
    /// The layout of the (canonical) data dir `root`.
    pub fn new(root: &Path) -> DataLayout {
        DataLayout {
            root: root.to_path_buf(),
        }
    }

    pub fn database(&self) -> PathBuf {
        self.root.join("airlock.db")
    }

    pub fn checkouts(&self) -> PathBuf {
        self.root.join("checkouts")
    }

    pub fn checkout_dir(&self, creation_key: &str) -> PathBuf {
        self.checkouts().join(creation_key)
    }

    pub fn locks(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// The lock one `airlock serve` holds on its data dir (with its pid inside).
    pub fn serve_lock(&self) -> PathBuf {
        self.root.join("serve.lock")
    }

    pub fn lock_path(&self, creation_key: &str) -> PathBuf {
        self.locks().join(format!("{creation_key}.lock"))
    }

    pub fn verification_artifacts(&self) -> PathBuf {
        self.root.join("artifacts").join("verifications")
    }

    pub fn quarantine(&self) -> PathBuf {
        self.root.join("artifacts").join("quarantine")
    }

    pub fn evidence(&self) -> PathBuf {
        self.root.join("evidence")
    }

    pub fn transcript(&self, evidence_ref: &str) -> PathBuf {
        self.evidence().join(format!("{evidence_ref}.transcript"))
    }

    pub fn candidate_dir(&self, candidate_id: &str) -> PathBuf {
        self.root.join("candidates").join(candidate_id)
    }

    /// Where apply keeps its rollback artifacts.
    pub fn transactions(&self) -> PathBuf {
        self.root.join("transactions")
    }

    /// Where recovery moves a rollback artifact that fails its checksum.
    pub fn transactions_quarantine(&self) -> PathBuf {
        self.transactions().join("quarantine")
    }

    pub fn patches(&self) -> PathBuf {
        self.root.join("patches")
    }

    /// The artifact of the proposal revision whose patch bytes have SHA-256 `digest`.
    pub fn patch_artifact(&self, digest: &str) -> PathBuf {
        self.patches().join(format!("{digest}.patch"))
    }

    pub fn candidate_transcripts(&self, candidate_id: &str) -> PathBuf {
        self.candidate_dir(candidate_id).join("transcripts")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_lies_beneath_the_root_in_a_known_subdir() {
        let l = DataLayout::new(Path::new("/d"));
        for p in [
            l.checkout_dir("k"),
            l.lock_path("k"),
            l.verification_artifacts(),
            l.quarantine(),
            l.transcript("e"),
            l.candidate_transcripts("c"),
            l.patch_artifact("d"),
            l.transactions_quarantine(),
        ] {
            let rel = p.strip_prefix("/d").unwrap().to_string_lossy().into_owned();
            assert!(
                SUBDIRS.iter().any(|s| rel.starts_with(s)),
                "{rel} is not under a listed subdir"
            );
        }
        assert_eq!(l.database(), Path::new("/d/airlock.db"));
    }
}
