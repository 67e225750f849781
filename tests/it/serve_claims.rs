//! Claims over a real daemon on loopback (fake runtime: no container is involved), on a real
//! governed worktree: identity from the token, the conflict matrix end to end,
//! fencing tokens, expiry without a sweep, extension that never shortens, release rules,
//! idempotent replays and hostile input.

use crate::support::daemon::{ALICE, BOB, DAVE, RUN_A, Server};
use serde_json::{Value, json};

fn claim(v: &Value) -> &Value {
    &v["claim"]
}

#[test]
fn claims_follow_the_matrix_with_tokens_that_never_repeat() {
    let s = Server::fake_governed();
    let (st, a) = s.acquire(ALICE, "directory:", "write", "a1");
    assert_eq!(st, 200, "{a}");
    let a = claim(&a).clone();
    assert_eq!(
        a["holder"], "member:alice",
        "the holder is the token's actor"
    );
    assert_eq!(a["status"], "active");
    assert_eq!(a["fencing_token"], 1);
    assert_eq!(a["resource"]["type"], "directory");
    assert!(
        a["base_hash"].as_str().unwrap().len() == 64,
        "a write claim carries the hash: {a}"
    );
    // dave's overlapping write is refused, naming alice's claim; reads are not.
    let m = s.err(DAVE, "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t2", "resource_id": "file:README", "mode": "write", "idempotency_key": "d1"}),
        "conflict");
    assert!(m.contains(a["claim_id"].as_str().unwrap()), "{m}");
    let (st, r) = s.acquire(DAVE, "file:README", "read", "d2");
    assert_eq!(st, 200, "{r}");
    assert_eq!(claim(&r)["base_hash"], Value::Null, "reads carry no hash");
    // Released, the resource is free; the next grant has a larger token.
    let released = s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": a["claim_id"], "idempotency_key": "rel1"}),
    );
    assert_eq!(released["changed"], true);
    assert_eq!(claim(&released)["status"], "released");
    let again = s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": a["claim_id"], "idempotency_key": "rel2"}),
    );
    assert_eq!(
        again["changed"], false,
        "a repeated release changes nothing and says so"
    );
    let replayed = s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": a["claim_id"], "idempotency_key": "rel1"}),
    );
    assert_eq!(
        replayed["changed"], true,
        "a replay answers what the original call answered"
    );
    s.err(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": a["claim_id"]}),
        "invalid_argument",
    );
    let (st, d) = s.acquire(DAVE, "file:README", "write", "d3");
    assert_eq!(st, 200, "{d}");
    assert_eq!(
        claim(&d)["fencing_token"],
        2,
        "a counter per resource: dave's read was its first grant"
    );
    let (st, e) = s.acquire(ALICE, "directory:", "write", "a2");
    assert_eq!(st, 409, "dave writes README inside it: {e}");
    s.ok(
        DAVE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": claim(&d)["claim_id"], "idempotency_key": "rel3"}),
    );
    let (st, e) = s.acquire(ALICE, "directory:", "write", "a3");
    assert_eq!(st, 200, "{e}");
    assert_eq!(
        claim(&e)["fencing_token"],
        2,
        "tokens never repeat for a resource"
    );
    // Filters by task and session are columns, not JSON scans.
    let by_task = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "task_id": "t2"}),
    );
    assert_eq!(
        by_task["claims"].as_array().unwrap().len(),
        0,
        "dave's t2 acquire was refused"
    );
    let t1 = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "task_id": "t1"}),
    );
    assert!(t1["claims"].as_array().unwrap().len() >= 3, "{t1}");
    let none = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "session_id": "nope"}),
    );
    assert_eq!(none["claims"].as_array().unwrap().len(), 0);
    // Pages follow next_cursor to the end; a made-up cursor is refused.
    let mut seen = vec![];
    let mut cursor = Value::Null;
    loop {
        let page = s.ok(
            ALICE,
            "claim.list",
            json!({"workspace_id": "ws1", "limit": 1, "cursor": cursor}),
        );
        seen.extend(
            page["claims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["claim_id"].clone()),
        );
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let all = s.ok(ALICE, "claim.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        seen,
        *all["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["claim_id"].clone())
            .collect::<Vec<_>>()
    );
    s.err(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "cursor": "12"}),
        "invalid_argument",
    );
    // Listing, newest first, filtered by holder.
    let mine = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "holder": "member:alice"}),
    );
    let ids: Vec<&str> = mine["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["claim_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            claim(&e)["claim_id"].as_str().unwrap(),
            a["claim_id"].as_str().unwrap()
        ]
    );
}

#[test]
fn expiry_needs_no_sweep_and_extension_never_shortens() {
    let s = Server::fake_governed();
    let t0 = time::OffsetDateTime::from_unix_timestamp(1_780_315_200).unwrap(); // 2026-06-01T12:00:00Z
    s.set_clock(t0);
    let (st, a) = s.call(ALICE, "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:README", "mode": "exclusive",
               "ttl_seconds": 60, "idempotency_key": "k"}));
    assert_eq!(st, 200, "{a}");
    let id = claim(&a)["claim_id"].clone();
    assert_eq!(claim(&a)["expires_at"], "2026-06-01T12:01:00.000000000Z");
    // Extending by less than what is left keeps the later expiry.
    let ext = s.ok(
        ALICE,
        "claim.extend",
        json!({"workspace_id": "ws1", "claim_id": id, "ttl_seconds": 10, "idempotency_key": "e1"}),
    );
    assert_eq!(claim(&ext)["expires_at"], "2026-06-01T12:01:00.000000000Z");
    assert_eq!(claim(&ext)["fencing_token"], claim(&a)["fencing_token"]);
    s.set_clock(t0 + time::Duration::seconds(30));
    let ext = s.ok(
        ALICE,
        "claim.extend",
        json!({"workspace_id": "ws1", "claim_id": id, "ttl_seconds": 120, "idempotency_key": "e2"}),
    );
    assert_eq!(claim(&ext)["expires_at"], "2026-06-01T12:02:30.000000000Z");
    // A replay extends nothing more; the key with another ttl is a conflict.
    let replay = s.ok(
        ALICE,
        "claim.extend",
        json!({"workspace_id": "ws1", "claim_id": id, "ttl_seconds": 120, "idempotency_key": "e2"}),
    );
    assert_eq!(claim(&replay)["version"], claim(&ext)["version"]);
    s.err(
        ALICE,
        "claim.extend",
        json!({"workspace_id": "ws1", "claim_id": id, "ttl_seconds": 600, "idempotency_key": "e2"}),
        "conflict",
    );
    // A keyed heartbeat replays too; an unkeyed one is simply sent again.
    let hb = json!({"workspace_id": "ws1", "claim_id": id, "idempotency_key": "h1"});
    let first = s.ok(ALICE, "claim.heartbeat", hb.clone());
    assert_eq!(
        s.ok(ALICE, "claim.heartbeat", hb)["claim"]["version"],
        first["claim"]["version"]
    );
    let unkeyed = s.ok(
        ALICE,
        "claim.heartbeat",
        json!({"workspace_id": "ws1", "claim_id": id}),
    );
    assert_ne!(unkeyed["claim"]["version"], first["claim"]["version"]);
    // Only the holder extends.
    s.err(
        DAVE,
        "claim.extend",
        json!({"workspace_id": "ws1", "claim_id": id, "ttl_seconds": 60, "idempotency_key": "x"}),
        "permission_denied",
    );
    // One second before expiry it blocks; at the instant it expires it does not, unswept.
    s.set_clock(t0 + time::Duration::seconds(149));
    assert_eq!(s.acquire(DAVE, "file:README", "read", "d1").0, 409);
    s.set_clock(t0 + time::Duration::seconds(150));
    let shown = s.ok(
        ALICE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": id}),
    );
    assert_eq!(claim(&shown)["status"], "expired");
    assert_eq!(s.acquire(DAVE, "file:README", "write", "d2").0, 200);
    s.err(
        ALICE,
        "claim.extend",
        json!({"workspace_id": "ws1", "claim_id": id, "ttl_seconds": 60, "idempotency_key": "e3"}),
        "failed_precondition",
    );
    // Every idempotency binding is stamped by the daemon's one clock, not the host's.
    let db = rusqlite::Connection::open_with_flags(
        s.dir.path().join("data/airlock.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let stamps: Vec<(String, String)> = db
        .prepare("SELECT idempotency_key, created_at FROM idempotency ORDER BY idempotency_key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let at = |k: &str| {
        stamps
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, t)| t.as_str())
    };
    assert_eq!(
        at("k"),
        Some("2026-06-01T12:00:00.000000000Z"),
        "{stamps:?}"
    );
    assert_eq!(
        at("e2"),
        Some("2026-06-01T12:00:30.000000000Z"),
        "{stamps:?}"
    );
    assert_eq!(
        at("d2"),
        Some("2026-06-01T12:02:30.000000000Z"),
        "{stamps:?}"
    );
}

#[test]
fn identity_permissions_replays_and_hostile_input() {
    let s = Server::fake_governed();
    // agent_id in JSON is an unknown field; a view-only member cannot claim.
    let m = s.err(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:README", "mode": "read",
               "agent_id": "mallory", "idempotency_key": "k"}),
        "invalid_argument",
    );
    assert!(m.contains("agent_id"), "{m}");
    s.err(BOB, "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:README", "mode": "read", "idempotency_key": "k"}),
        "permission_denied");
    // A run token claims as its run.
    let (st, r) = s.acquire(RUN_A, "file:notes.md", "write", "r1");
    assert_eq!(st, 200, "{r}");
    assert_eq!(claim(&r)["holder"], "run:ws1/run_a");
    assert_eq!(claim(&r)["base_hash"], "", "a missing file hashes as empty");
    // The same key: the same claim; other parameters: conflict.
    let (_, again) = s.acquire(RUN_A, "file:notes.md", "write", "r1");
    assert_eq!(claim(&again)["claim_id"], claim(&r)["claim_id"]);
    assert_eq!(s.acquire(RUN_A, "file:other.md", "write", "r1").0, 409);
    // Only the holder or an admin releases; an admin's release is forced.
    s.err(
        DAVE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": claim(&r)["claim_id"], "idempotency_key": "x"}),
        "permission_denied",
    );
    let forced = s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": claim(&r)["claim_id"], "idempotency_key": "x"}),
    );
    assert_eq!(claim(&forced)["status"], "released");
    // Hostile resource ids, modes, ttl and a stale base hash, each naming its field.
    for (body, field) in [
        (
            json!({"resource_id": "file:../etc/passwd", "mode": "read"}),
            "resource_id",
        ),
        (
            json!({"resource_id": "file:./README", "mode": "read"}),
            "resource_id",
        ),
        (
            json!({"resource_id": "file:.git/config", "mode": "write"}),
            "resource_id",
        ),
        (
            json!({"resource_id": "directory:src/", "mode": "read"}),
            "resource_id",
        ),
        (json!({"resource_id": "file:README", "mode": "own"}), "mode"),
        (
            json!({"resource_id": "file:README", "mode": "read", "ttl_seconds": 5}),
            "ttl_seconds",
        ),
        (
            json!({"resource_id": "file:README", "mode": "read", "ttl_seconds": 86_401}),
            "ttl_seconds",
        ),
        (
            json!({"resource_id": "file:README", "mode": "write", "base_hash": "0".repeat(64)}),
            "base_hash",
        ),
    ] {
        let mut b = json!({"workspace_id": "ws1", "task_id": "t", "idempotency_key": format!("h-{field}-{}", body["resource_id"])});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (st, v) = s.call(ALICE, "claim.acquire", b.clone());
        assert!(st == 400 || st == 412, "{b}: {st} {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{b}: {v}"
        );
    }
    // A workspace without a worktree refuses the governed methods.
    let plain = Server::fake();
    plain.err(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1"}),
        "failed_precondition",
    );
    assert_eq!(
        s.ok(
            ALICE,
            "claim.list",
            json!({"workspace_id": "ws1", "status": "released"})
        )["claims"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn admins_suspend_revoke_and_force_release_with_events_and_the_sweep_marks_expiry() {
    let s = Server::fake_governed_with("maintenance_interval_seconds = 1");
    let t0 = time::OffsetDateTime::now_utc();
    s.set_clock(t0);
    let (_, d) = s.acquire(DAVE, "file:README", "write", "d1");
    let id = claim(&d)["claim_id"].clone();
    let n = std::cell::Cell::new(0);
    let body = |reason: Option<&str>| {
        n.set(n.get() + 1);
        json!({"workspace_id": "ws1", "claim_id": id, "reason": reason,
               "idempotency_key": format!("adm{}", n.get())})
    };
    // Only admins; a forced release needs a reason.
    s.err(DAVE, "claim.suspend", body(None), "permission_denied");
    let m = s.err(ALICE, "claim.force_release", body(None), "invalid_argument");
    assert!(m.contains("reason"), "{m}");
    // A suspended claim blocks nobody; suspending it again is not allowed.
    let sus_body = body(Some("reconcile by hand"));
    let sus = s.ok(ALICE, "claim.suspend", sus_body.clone());
    assert_eq!(claim(&sus)["status"], "suspended");
    let replay = s.ok(ALICE, "claim.suspend", sus_body.clone());
    assert_eq!(
        claim(&replay)["version"],
        claim(&sus)["version"],
        "a replay moves nothing"
    );
    let mut other = sus_body.clone();
    other["reason"] = json!("another reason");
    s.err(ALICE, "claim.suspend", other, "conflict");
    s.err(ALICE, "claim.suspend", body(None), "failed_precondition");
    let (st, a) = s.acquire(ALICE, "file:README", "write", "a1");
    assert_eq!(st, 200, "{a}");
    let forced = s.ok(ALICE, "claim.force_release", body(Some("stuck agent")));
    assert_eq!(claim(&forced)["status"], "released");
    s.err(ALICE, "claim.revoke", body(None), "failed_precondition");
    // Heartbeats are the holder's and move heartbeat_at only.
    s.set_clock(t0 + time::Duration::seconds(5));
    let hb = s.ok(
        ALICE,
        "claim.heartbeat",
        json!({"workspace_id": "ws1", "claim_id": claim(&a)["claim_id"]}),
    );
    assert_ne!(claim(&hb)["heartbeat_at"], claim(&a)["heartbeat_at"]);
    assert_eq!(claim(&hb)["expires_at"], claim(&a)["expires_at"]);
    s.err(
        DAVE,
        "claim.heartbeat",
        json!({"workspace_id": "ws1", "claim_id": claim(&a)["claim_id"]}),
        "permission_denied",
    );
    // Every change of dave's claim is an event, in order, with who did it.
    let ev = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": id}),
    );
    let seen: Vec<(String, String)> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("claim.granted".to_string(), "member:dave".to_string()),
            ("claim.suspend".to_string(), "member:alice".to_string()),
            ("claim.release".to_string(), "member:alice".to_string()),
        ]
    );
    assert_eq!(ev["events"][2]["payload"]["forced"], true);
    assert_eq!(ev["events"][2]["payload"]["reason"], "stuck agent");
    // The cursor continues after the last event seen.
    let after = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "since": ev["next_since"]}),
    );
    assert!(
        after["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["seq"].as_i64() > ev["next_since"].as_i64())
    );
    // Pages of one, by cursor, walk every event of the workspace once, in order.
    let all = s.ok(ALICE, "event.list", json!({"workspace_id": "ws1"}));
    let mut paged = vec![];
    let mut cursor = Value::Null;
    loop {
        let v = s.ok(
            ALICE,
            "event.list",
            json!({"workspace_id": "ws1", "limit": 1, "cursor": cursor}),
        );
        paged.extend(
            v["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["seq"].clone()),
        );
        cursor = v["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let every: Vec<Value> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].clone())
        .collect();
    assert_eq!(paged, every);
    s.err(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "since": 1, "cursor": "evc_1"}),
        "invalid_argument",
    );
    // The maintenance pass marks an expired claim with an event.
    s.set_clock(t0 + time::Duration::seconds(2000));
    let aid = claim(&a)["claim_id"].clone();
    crate::support::daemon::wait_for(
        || {
            s.ok(
                ALICE,
                "event.list",
                json!({"workspace_id": "ws1", "subject": aid, "kind": "claim.expire"}),
            )["events"]
                .as_array()
                .unwrap()
                .len()
                == 1
        },
        "the sweep's claim.expire event",
    );
    let shown = s.ok(
        ALICE,
        "claim.list",
        json!({"workspace_id": "ws1", "status": "expired"}),
    );
    assert_eq!(shown["claims"].as_array().unwrap().len(), 1);
}

#[test]
fn reconcile_suspends_changed_resources_and_sessions_release_what_they_asked() {
    let s = Server::fake_governed();
    let body = |resource: &str, session: &str, policy: &str, key: &str| {
        json!({"workspace_id": "ws1", "task_id": "t", "session_id": session, "resource_id": resource,
               "mode": "write", "resume_policy": policy, "idempotency_key": key})
    };
    let readme = s.ok(
        DAVE,
        "claim.acquire",
        body("file:README", "s1", "release", "k1"),
    );
    let whole = s.ok(
        ALICE,
        "claim.acquire",
        body("directory:docs", "s9", "hold", "k2"),
    );
    let kept = s.ok(
        DAVE,
        "claim.acquire",
        body("file:kept.txt", "s1", "hold", "k3"),
    );
    // resource.show says what is there before anyone claims it.
    let shown = s.ok(
        DAVE,
        "resource.show",
        json!({"workspace_id": "ws1", "resource_id": "file:README"}),
    );
    assert_eq!(
        shown["resource"]["current_hash"],
        claim(&readme)["base_hash"]
    );
    assert_eq!(shown["resource"]["exists"], true);
    let rs = s.ok(
        DAVE,
        "resource.show",
        json!({"workspace_id": "ws1", "resource_id": "file:src/main.rs"}),
    );
    assert_eq!(
        (
            rs["resource"]["language"].as_str(),
            rs["resource"]["exists"].as_bool()
        ),
        (Some("rust"), Some(false))
    );
    s.err(
        DAVE,
        "resource.show",
        json!({"workspace_id": "ws1", "resource_id": "file:a//b"}),
        "invalid_argument",
    );
    // Someone edits README behind the claims' backs: reconcile suspends exactly that claim.
    std::fs::write(s.repo.join("README"), "edited\n").unwrap();
    std::fs::create_dir_all(s.repo.join("docs")).unwrap();
    std::fs::write(s.repo.join("docs/new.md"), "new\n").unwrap();
    s.err(
        DAVE,
        "claim.reconcile",
        json!({"workspace_id": "ws1", "idempotency_key": "rc0"}),
        "permission_denied",
    );
    let r = s.ok(
        ALICE,
        "claim.reconcile",
        json!({"workspace_id": "ws1", "idempotency_key": "rc1"}),
    );
    let replay = s.ok(
        ALICE,
        "claim.reconcile",
        json!({"workspace_id": "ws1", "idempotency_key": "rc1"}),
    );
    assert_eq!(replay, r, "a replay answers the original answer");
    // README changed; docs/ did not exist at grant and now does: both are changes.
    let mut suspended: Vec<&str> = r["suspended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    suspended.sort();
    let mut want = [
        claim(&readme)["claim_id"].as_str().unwrap(),
        claim(&whole)["claim_id"].as_str().unwrap(),
    ];
    want.sort();
    assert_eq!(suspended, want, "{r}");
    assert_eq!(r["unchanged"], json!([claim(&kept)["claim_id"]]), "{r}");
    let readme_now = s.ok(
        DAVE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": claim(&readme)["claim_id"]}),
    );
    assert_eq!(claim(&readme_now)["status"], "suspended");
    // A file turned into something unreadable is reported, not called unchanged.
    std::fs::create_dir(s.repo.join("kept.txt")).unwrap();
    let r = s.ok(
        ALICE,
        "claim.reconcile",
        json!({"workspace_id": "ws1", "holder": "member:dave", "idempotency_key": "rc2"}),
    );
    assert_eq!(
        r["unreadable"][0]["claim_id"],
        claim(&kept)["claim_id"],
        "{r}"
    );
    // Ending session s1 releases its release-policy claims only (README is suspended, kept.txt
    // holds): nothing active with policy release remains.
    let fresh = s.ok(
        DAVE,
        "claim.acquire",
        body("file:other.txt", "s1", "release", "k4"),
    );
    let ended = s.ok(
        DAVE,
        "claim.end_session",
        json!({"workspace_id": "ws1", "session_id": "s1", "idempotency_key": "es1"}),
    );
    assert_eq!(ended["released"], json!([claim(&fresh)["claim_id"]]));
    let k = s.ok(
        DAVE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": claim(&kept)["claim_id"]}),
    );
    assert_eq!(claim(&k)["status"], "active", "hold claims stay");
}
