//! `airlock serve`: deletion, expiry with an injectable clock, graceful shutdown and restart,
//! stale git locks and missing owned refs.
//! Real HTTP on loopback, real git, real SQLite; jobs on the scripted fake runtime.

use crate::support::*;
use serde_json::json;
use std::time::Duration;

#[test]
fn delete_fences_first_then_removes_owned_state() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let b = s.agent_commit("b", &base, &[("a.txt", "b\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some("ta")),
        s.evidence("run_b", &base, &b, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    let version = cand(&v)["version"].clone();
    assert!(
        !s.git_refs(&format!("refs/airlock/candidates/{cid}/"))
            .is_empty()
    );
    let transcripts = s.dir.path().join("data/candidates").join(&cid);
    assert!(transcripts.exists());
    let key = json!({"workspace_id": "ws1", "candidate_id": cid});
    assert_eq!(s.ok(ALICE, "integration.delete", key.clone()), json!({}));
    let shown = s.ok(ALICE, "integration.show", key.clone());
    assert_eq!(cand(&shown)["state"], "deleting");
    // The event log says who deleted it, in the transaction of the fence.
    let events = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": cid, "kind": "candidate.deleted"}),
    );
    let deleted = &events["events"][0];
    assert_eq!(deleted["actor"], "member:alice", "{events}");
    assert_eq!(deleted["new"], "deleting");
    assert!(
        s.git_refs(&format!("refs/airlock/candidates/{cid}/"))
            .is_empty()
    );
    assert!(!transcripts.exists());
    assert_eq!(
        s.git_refs("refs/airlock/evidence/").len(),
        2,
        "packets are not the candidate's to delete"
    );
    s.err(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": version,
        "files": [{"path": "a.txt", "content": "x\n"}], "idempotency_key": "after"}),
        "failed_precondition",
    );
    assert_eq!(
        s.ok(ALICE, "integration.delete", key),
        json!({}),
        "deleting again is a no-op"
    );
}

#[test]
fn expiry_with_an_injectable_clock() {
    let s = Server::fake_with("maintenance_interval_seconds = 1");
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    let later = s.evidence("run_b", &base, &a, None);
    // Eight days on: packets have expired; a new candidate cannot use them.
    let now = time::OffsetDateTime::now_utc();
    s.set_clock(now + Duration::from_secs(8 * 86_400));
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![later.clone()], &base, "late"),
        "failed_precondition",
    );
    assert!(m.contains("expired") || m.contains("does not exist"), "{m}");
    // The pass deletes a packet's ref, then its transcript, then its row: wait for the row.
    wait_for(
        || {
            let (_, v) = s.call(
                ALICE,
                "evidence.show",
                json!({"workspace_id": "ws1", "evidence_ref": later["evidence_ref"]}),
            );
            v["error"]["code"] == "not_found"
        },
        "evidence rows purged",
    );
    assert!(
        s.git_refs("refs/airlock/evidence/").is_empty(),
        "refs purged"
    );
    // The frozen candidate does not depend on the purged packets.
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&shown)["state"], "frozen", "{shown}");
    // Thirty-one days on: the candidate has expired and its owned refs are gone.
    s.set_clock(now + Duration::from_secs(31 * 86_400));
    wait_for(
        || {
            let v = s.ok(
                ALICE,
                "integration.show",
                json!({"workspace_id": "ws1", "candidate_id": cid}),
            );
            cand(&v)["state"] == "expired"
        },
        "candidate expired",
    );
    let events = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": cid, "kind": "candidate.state_changed"}),
    );
    let expired = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["new"] == "expired")
        .unwrap_or_else(|| panic!("no expiry event: {events}"));
    assert_eq!(
        (&expired["prior"], &expired["actor"]),
        (&json!("frozen"), &json!("system:airlock"))
    );
    // The fence is saved before the clean-up; the tombstone's retention starts when the
    // clean-up has finished (its purge time is then saved). Moving the clock before that would
    // start the retention 62 days on, so wait for both, reading the daemon's database.
    wait_for(
        || {
            s.git_refs(&format!("refs/airlock/candidates/{cid}/"))
                .is_empty()
        },
        "owned refs removed",
    );
    let db = s.dir.path().join("data/airlock.db");
    wait_for(
        || {
            let c = rusqlite::Connection::open_with_flags(
                &db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            c.query_row(
                "SELECT purge_after IS NOT NULL FROM candidates WHERE candidate_id = ?1",
                [&cid],
                |r| r.get::<_, bool>(0),
            )
            .unwrap()
        },
        "tombstone retention started",
    );
    // Sixty-two days on: the tombstone is purged.
    s.set_clock(now + Duration::from_secs(62 * 86_400));
    wait_for(
        || {
            s.call(
                ALICE,
                "integration.show",
                json!({"workspace_id": "ws1", "candidate_id": cid}),
            )
            .0 == 404
        },
        "tombstone purged",
    );
}

#[test]
fn graceful_shutdown_exits_cleanly_and_state_survives_a_restart() {
    let mut s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    assert_eq!(s.stop(), Some(0), "SIGTERM stops the daemon with exit 0");
    s.restart(None);
    let cid = cand(&v)["candidate_id"].clone();
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(shown, v);
}

#[test]
fn stale_git_locks_are_cleared_at_start_up_and_missing_owned_refs_make_a_candidate_unavailable() {
    let mut s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    // A git process killed while holding a ref lock leaves <ref>.lock behind.
    let git_dir = s.repo.join(".git");
    let lock = git_dir.join(format!("refs/airlock/candidates/{cid}/revision.lock"));
    std::fs::write(&lock, b"").unwrap();
    assert_eq!(s.stop(), Some(0));
    s.restart(None);
    assert!(!lock.exists(), "start-up recovery removed the stale lock");
    // Another candidate can be prepared, so the repository is usable again.
    s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p2"),
    );

    // Someone deletes a candidate-owned ref behind Airlock's back.
    git(
        &s.repo,
        &[
            "update-ref",
            "-d",
            &format!("refs/airlock/candidates/{cid}/inputs/0"),
        ],
    );
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&shown)["state"], "unavailable", "{shown}");
    assert!(
        cand(&shown)["error"]
            .as_str()
            .unwrap()
            .contains("owned input 0")
    );
    s.err(
        ALICE,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
        "failed_precondition",
    );
}
