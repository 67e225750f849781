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
    // A destination inside the data dir is refused, and nothing is written there.
    let inside = s.dir.path().join("data").join("backups").join("b1");
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    let refused = Command::new(BIN)
        .args(["backup", "--config"])
        .arg(&s.config)
        .arg(&inside)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("is inside the data dir"), "{err}");
    assert!(!inside.exists());
    // Without a named data dir, backup names the default it would have copied and copies nothing.
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("state");
    std::fs::create_dir_all(state.join("airlock")).unwrap();
    std::fs::copy(dest.join("airlock.db"), state.join("airlock/airlock.db")).unwrap();
    let guessed = Command::new(BIN)
        .arg("backup")
        .arg(home.path().join("copy"))
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    assert_eq!(guessed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&guessed.stderr);
    assert!(
        err.contains("pass --data-dir DIR") && err.contains(&state.display().to_string()),
        "{err}"
    );
    assert!(!home.path().join("copy").exists());

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

/// A restored backup started beside the live daemon it was taken from (both on this machine's
/// engine): the copy takes an instance id of its own at its first start, so its recovery
/// settles the job it copied as `running` without touching that job's container, which the
/// original runs to its pass; `airlock recover` on the copy names the original's container as
/// another instance's and leaves it.
#[test]
fn a_restored_backup_beside_the_live_daemon_never_touches_its_containers() {
    if !crate::support::docker() {
        return;
    }
    let s = Server::start_with("maintenance_interval_seconds = 1\n");
    let job = s.ok(
        ALICE,
        "job.submit",
        json!({"workspace_id": "ws1", "revision": "main",
               "argv": ["sh", "-c", "echo started; sleep 20; echo finished"],
               "idempotency_key": "long"}),
    )["job"]
        .clone();
    let id = job["job_id"].as_str().unwrap().to_string();
    let key = job["verification"]["creation_key"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(
        || !crate::support::containers_with_key(&key).is_empty(),
        "the job's container runs",
    );
    let dest = s.dir.path().join("restored");
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
    let meta = |db: &std::path::Path, key: &str| -> Option<String> {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .ok()
    };
    let original = meta(&s.dir.path().join("data/airlock.db"), "instance_id").unwrap();
    assert_eq!(
        meta(&dest.join("airlock.db"), "instance_copied_from").as_deref(),
        Some(original.as_str()),
        "the backup marks its copy"
    );
    // The copy starts beside the original, recovers and sweeps every second.
    let mut copy = s.beside(&dest);
    let copied = meta(&dest.join("airlock.db"), "instance_id").unwrap();
    assert_ne!(copied, original, "the copy took an instance id of its own");
    let in_copy = || {
        copy.ok(
            ALICE,
            "job.show",
            json!({"workspace_id": "ws1", "job_id": id}),
        )["job"]
            .clone()
    };
    wait_for(
        || in_copy()["state"] != "running",
        "the copy's recovery settles the job it copied as running",
    );
    let settled = in_copy();
    assert_eq!(settled["state"], "error", "{settled}");
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        crate::support::containers_with_key(&key).len(),
        1,
        "the original's container is untouched by the copy's passes"
    );
    // `airlock recover` on the copy names it as the original's, and leaves it too.
    assert_eq!(copy.stop(), Some(0));
    let out = Command::new(BIN)
        .args(["recover", "--config"])
        .arg(&copy.config)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let listed = report["previous_instance_containers"].to_string();
    assert!(
        listed.contains(&format!("(instance {original})")),
        "{report}"
    );
    assert_eq!(crate::support::containers_with_key(&key).len(), 1);
    // The original runs its job to the end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let done = loop {
        let j = s.ok(
            ALICE,
            "job.show",
            json!({"workspace_id": "ws1", "job_id": id}),
        )["job"]
            .clone();
        if j["state"] != "running" && j["state"] != "queued" {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "{j}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(done["state"], "passed", "{done}");
    assert!(
        done["verification"]["output"]
            .as_str()
            .unwrap()
            .contains("finished"),
        "{done}"
    );
}
