//! A consistent copy of the database, taken beside a live daemon (`airlock backup`).
//!
//! SQLite's online backup API from a read-only connection, in one step of every page: the copy is
//! one read snapshot of the committed state (WAL included), never restarted by the daemon's
//! writes between steps, and the daemon's writers are not blocked. The copy is marked as one
//! ([`super::COPIED_FROM_KEY`]): its first open takes an instance id of its own.

use super::StoreError;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// The pause before retrying a backup step the daemon's lock held off.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// Copies the database at `database` into the new file `dest` (not fsynced: the caller makes
/// it durable and renames it into place).
pub fn copy_database(database: &Path, dest: &Path) -> Result<(), StoreError> {
    let src = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    src.busy_timeout(crate::limits::SQLITE_BUSY_TIMEOUT)?;
    let mut dst = Connection::open(dest)?;
    {
        let copy = Backup::new(&src, &mut dst)?;
        loop {
            match copy.step(-1)? {
                StepResult::Done => break,
                StepResult::Busy | StepResult::Locked => std::thread::sleep(BUSY_RETRY),
                _ => {}
            }
        }
    }
    // The copy is another data dir: its first start takes an instance id of its own, so that
    // started beside the original it never takes the original's containers for its own (see
    // `Store::instance`).
    let has_meta: bool = dst.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
        [],
        |r| r.get(0),
    )?;
    if has_meta {
        dst.execute(
            "INSERT INTO meta (key, value) \
             SELECT ?1, value FROM meta WHERE key = 'instance_id' \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [super::COPIED_FROM_KEY],
        )?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A database at `path` whose two rows of table `t` are in its WAL only while the returned
    /// connection stays open.
    pub(crate) fn wal_only_rows(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        conn
    }

    /// The rows of table `t` in the database at `path`.
    pub(crate) fn rows(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn the_copy_holds_rows_only_in_the_wal_and_is_marked_as_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let live = wal_only_rows(&dir.path().join("a.db"));
        live.execute_batch(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); \
             INSERT INTO meta VALUES ('instance_id', 'inst_1');",
        )
        .unwrap();
        let copy = dir.path().join("b.db");
        copy_database(&dir.path().join("a.db"), &copy).unwrap();
        assert_eq!(rows(&copy), 2);
        let marked: String = Connection::open(&copy)
            .unwrap()
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                [crate::store::COPIED_FROM_KEY],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(marked, "inst_1");
        drop(live);
    }
}
