//! `airlock backup` against a running daemon on real Docker while another client writes, then a
//! daemon started on the copy: it serves the proposal (its patch revision file included), the
//! settled job with its output, and every claim the snapshot held. A clean stop checkpoints
//! the WAL, so `airlock.db` alone holds the data.

use crate::support::BIN;
use crate::support::daemon::{ALICE, Server, wait_for};
use serde_json::{Value, json};
use std::process::Command;

fn claims(s: &Server) -> usize {
    s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "task_id": "t1", "limit": 200}),
    )["claims"]
        .as_array()
        .unwrap()
        .len()
}

fn count(db: &std::path::Path, table: &str) -> i64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_backup_taken_under_writes_restores_into_a_daemon_that_serves_it() {
    let mut s = Server::governed_with("");
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c0"}),
    );
    std::fs::write(s.repo.join("README"), "base\nmore\n").unwrap();
    let diff = Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    std::fs::write(s.repo.join("README"), "base\n").unwrap();
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": String::from_utf8(diff.stdout).unwrap(), "idempotency_key": "p"}),
    )["proposal"]
        .clone();
    let job = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main", "argv": ["sh", "-c", "echo restored"],
               "idempotency_key": "j"}),
    )["job"]["job_id"]
        .clone();
    let show_job = |s: &Server| -> Value {
        s.ok(
            ALICE,
            "job.show",
            json!({"workspace_id": "ws1", "job_id": job}),
        )["job"]
            .clone()
    };
    wait_for(|| show_job(&s)["state"] == "passed", "the job passes");

    // A writer keeps committing claims while the backup runs.
    let addr = s.addr.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..40 {
            let body = json!({"workspace_id": "ws1", "task_id": "t1",
                              "resource_id": format!("file:w{i}"), "mode": "read",
                              "idempotency_key": format!("w{i}")});
            let (status, v) = crate::support::http::request(
                &addr,
                "POST",
                "/api/v1/claim.acquire",
                Some(ALICE),
                body.to_string().as_bytes(),
            )
            .unwrap();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&v));
        }
    });
    let dest = s.dir.path().join("backup");
    let out = Command::new(BIN)
        .args(["backup", "--config"])
        .arg(&s.config)
        .arg(&dest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["files"].as_u64().unwrap() >= 2, "{report}");
    writer.join().unwrap();
    let at_backup = count(&dest.join("airlock.db"), "claims");
    assert!(at_backup >= 1, "the snapshot holds the first claim");

    let integrity: String = rusqlite::Connection::open(dest.join("airlock.db"))
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let again = Command::new(BIN)
        .args(["backup", "--config"])
        .arg(&s.config)
        .arg(&dest)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("it exists"));

    // A clean stop leaves no data in the WAL: the database file alone is complete.
    let live = s.dir.path().join("data");
    let claims_live = claims(&s);
    assert_eq!(claims_live, 41);
    assert_eq!(s.stop(), Some(0));
    let wal = std::fs::metadata(live.join("airlock.db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "the shutdown checkpoint emptied the WAL");
    let alone = s.dir.path().join("alone.db");
    std::fs::copy(live.join("airlock.db"), &alone).unwrap();
    assert_eq!(count(&alone, "claims"), 41);

    // Restore: the daemon starts on the copy.
    let config = std::fs::read_to_string(&s.config).unwrap().replace(
        &format!("data_dir = \"{}\"", live.display()),
        &format!("data_dir = \"{}\"", dest.display()),
    );
    assert!(config.contains(&dest.display().to_string()));
    std::fs::write(&s.config, config).unwrap();
    s.log = Some(s.dir.path().join("restored.log"));
    s.restart(None);
    let shown = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"]}),
    )["proposal"]
        .clone();
    assert_eq!(shown["current_revision"], p["current_revision"]);
    let restored = show_job(&s);
    assert_eq!(restored["state"], "passed", "{restored}");
    let log = s.ok(
        ALICE,
        "job.log",
        json!({"workspace_id": "ws1", "job_id": job}),
    );
    assert!(log.to_string().contains("restored"), "{log}");
    assert_eq!(claims(&s) as i64, at_backup);
}
