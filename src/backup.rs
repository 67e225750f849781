//! `airlock backup DEST`: a consistent copy of a data dir, taken while the daemon runs.
//!
//! The database is copied first, by the store's snapshot (SQLite's online backup API from a
//! read-only connection, in one step: one snapshot of the committed state, WAL included; the
//! daemon's writers are not blocked). The file trees are copied after it: every file a committed row refers to
//! (a patch revision, a verification's recovery artifact, a rollback artifact, a transcript) is
//! made durable before its row commits, so it exists when the snapshot is taken and is copied
//! with it. A file written after the snapshot is copied too and is harmless: recovery at the
//! restored daemon's start judges artifacts against the rows, as after any crash. Checkouts,
//! locks and the daemon's lock file are not copied (their directories are created empty: they
//! belong to running jobs, which the restored daemon's recovery settles from their artifacts or
//! marks `error`).
//!
//! Everything lands under a new directory (refused if DEST exists), each file and directory
//! fsynced, the database last renamed into place: a DEST holding `airlock.db` is complete.
//! Restoring is starting `airlock serve` with `data_dir` set to the copy. The copy is marked as
//! one: its first start takes a new instance id, so a restore started beside the live original
//! never touches the original's containers (its recovery destroys only containers labelled
//! with its own instance id).

use serde::Serialize;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The trees copied with the database, relative to the data dir.
pub const COPIED_TREES: [&str; 5] = [
    "artifacts",
    "evidence",
    "candidates",
    "patches",
    "transactions",
];

/// What one backup copied.
#[derive(Debug, Serialize)]
pub struct BackupReport {
    pub dest: PathBuf,
    pub database_bytes: u64,
    /// Files copied beside the database, and their bytes.
    pub files: u64,
    pub file_bytes: u64,
    /// Temp files of interrupted writes, left out (recovery removes them at the source).
    pub skipped_temp_files: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("DEST {0}: it exists; a backup writes a new directory")]
    DestExists(PathBuf),
    #[error(
        "DEST {dest}: it is inside the data dir {root}; a backup there would be copied into itself and lost with the data dir: name a directory outside it"
    )]
    DestInside { dest: PathBuf, root: PathBuf },
    #[error("no Airlock data dir at {0} (it has no airlock.db)")]
    NoDatabase(PathBuf),
    #[error("{path}: {what} is not a regular file or directory; the data dir holds only those")]
    Unexpected { path: PathBuf, what: &'static str },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("SQLite backup of {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: crate::store::StoreError,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BackupError + 'a {
    move |source| BackupError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Copies the data dir `root` to the new directory `dest`.
pub fn backup(root: &Path, dest: &Path) -> Result<BackupReport, BackupError> {
    let database = root.join("airlock.db");
    if !database.is_file() {
        return Err(BackupError::NoDatabase(root.to_path_buf()));
    }
    // Inside the data dir, a backup would be copied into itself and lost with it.
    let absolute = |p: &Path| {
        std::path::absolute(p)
            .map(|a| a.components().collect::<PathBuf>())
            .unwrap_or_else(|_| p.to_path_buf())
    };
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| absolute(root));
    let real_dest = match dest.parent().map(std::fs::canonicalize) {
        Some(Ok(parent)) => parent.join(dest.file_name().unwrap_or_default()),
        _ => absolute(dest),
    };
    if real_dest.starts_with(&real_root) {
        return Err(BackupError::DestInside {
            dest: dest.to_path_buf(),
            root: root.to_path_buf(),
        });
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(BackupError::DestExists(dest.to_path_buf()));
        }
        Err(e) => return Err(io("create", dest)(e)),
    }
    let partial = dest.join("airlock.db.partial");
    crate::store::snapshot::copy_database(&database, &partial).map_err(|source| {
        BackupError::Sqlite {
            path: database.clone(),
            source,
        }
    })?;
    fsync_file(&partial)?;
    let mut report = BackupReport {
        dest: dest.to_path_buf(),
        database_bytes: std::fs::metadata(&partial)
            .map_err(io("stat", &partial))?
            .len(),
        files: 0,
        file_bytes: 0,
        skipped_temp_files: 0,
    };
    for tree in COPIED_TREES {
        let from = root.join(tree);
        if from.is_dir() {
            copy_tree(&from, &dest.join(tree), &mut report)?;
        }
    }
    // The directories of running work start empty, so DEST is a whole data dir.
    for sub in crate::engine::layout::SUBDIRS {
        let dir = dest.join(sub);
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&dir)
                .map_err(io("create", &dir))?;
        }
    }
    let db = dest.join("airlock.db");
    std::fs::rename(&partial, &db).map_err(io("rename", &db))?;
    fsync_dir(dest)?;
    Ok(report)
}

/// Copies the directory `from` to the new directory `to`: regular files (fsynced) and
/// directories only; a temp file of an interrupted atomic write is left out.
fn copy_tree(from: &Path, to: &Path, report: &mut BackupReport) -> Result<(), BackupError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(to)
        .map_err(io("create", to))?;
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .map_err(io("read dir", from))?
        .collect::<Result<_, _>>()
        .map_err(io("read dir", from))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let path = entry.path();
        let target = to.join(&name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Removed since the listing (retention, a quarantine move): nothing to copy.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io("stat", &path)(e)),
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            copy_tree(&path, &target, report)?;
        } else if kind.is_file() {
            let lossy = name.to_string_lossy();
            if lossy.starts_with('.') && lossy.contains(crate::artifacts::TEMP_MARKER) {
                report.skipped_temp_files += 1;
                continue;
            }
            match copy_file(&path, &target) {
                Ok(n) => {
                    report.files += 1;
                    report.file_bytes += n;
                }
                Err(BackupError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            }
        } else {
            return Err(BackupError::Unexpected {
                path,
                what: if kind.is_symlink() {
                    "a symlink"
                } else {
                    "a special file"
                },
            });
        }
    }
    fsync_dir(to)
}

fn copy_file(from: &Path, to: &Path) -> Result<u64, BackupError> {
    let mut src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(from)
        .map_err(io("open", from))?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(io("create", to))?;
    let n = std::io::copy(&mut src, &mut dst).map_err(io("copy to", to))?;
    dst.sync_all().map_err(io("fsync", to))?;
    Ok(n)
}

fn fsync_file(path: &Path) -> Result<(), BackupError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync", path))
}

fn fsync_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_holds_the_committed_rows_and_the_trees_and_refuses_an_existing_dest() {
        let root = tempfile::tempdir().unwrap();
        // Two rows in the WAL only (the connection stays open, no checkpoint).
        let conn = crate::store::snapshot::tests::wal_only_rows(&root.path().join("airlock.db"));
        std::fs::create_dir_all(root.path().join("patches")).unwrap();
        std::fs::write(root.path().join("patches/abc.patch"), b"diff").unwrap();
        std::fs::write(root.path().join("patches/.x.json.tmp.k"), b"half").unwrap();
        std::fs::create_dir_all(root.path().join("checkouts/k")).unwrap();
        std::fs::write(root.path().join("checkouts/k/disk.img"), b"big").unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("b");
        let r = backup(root.path(), &dest).unwrap();
        assert_eq!((r.files, r.skipped_temp_files), (1, 1));
        assert_eq!(
            crate::store::snapshot::tests::rows(&dest.join("airlock.db")),
            2
        );
        assert_eq!(
            std::fs::read(dest.join("patches/abc.patch")).unwrap(),
            b"diff"
        );
        assert!(!dest.join("checkouts/k").exists());
        assert!(dest.join("checkouts").is_dir());
        assert!(!dest.join("airlock.db.partial").exists());
        assert!(matches!(
            backup(root.path(), &dest),
            Err(BackupError::DestExists(_))
        ));
        assert!(matches!(
            backup(out.path(), &out.path().join("c")),
            Err(BackupError::NoDatabase(_))
        ));
        std::os::unix::fs::symlink("/etc/passwd", root.path().join("patches/evil")).unwrap();
        let e = backup(root.path(), &out.path().join("d")).unwrap_err();
        assert!(e.to_string().contains("a symlink"), "{e}");
        drop(conn);
    }
}
