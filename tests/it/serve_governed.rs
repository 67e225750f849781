//! The governed path's guarantees, end to end over loopback on a real worktree and a real
//! SQLite file: seed 003's conflict matrix for every mode pair and every overlap kind,
//! concurrent overlapping acquires with one winner, fencing tokens across grant, expiry,
//! re-grant, transfer and restart, refusals that leave no resource row, an event for every
//! mutation, and every unsafe path refused.

use crate::support::daemon::{ALICE, DAVE, Server, sha};
use crate::support::repo::git;
use serde_json::{Value, json};

const MODES: [&str; 4] = ["read", "write", "review", "exclusive"];

/// Seed 003's matrix, written out (not computed by the code under test): exclusive conflicts
/// with everything, write with write, read and review with nothing else.
fn seed_conflicts(a: &str, b: &str) -> bool {
    a == "exclusive" || b == "exclusive" || (a == "write" && b == "write")
}

fn governed_with_source(extra: &str) -> Server {
    let s = Server::fake_governed_with(extra);
    std::fs::create_dir_all(s.repo.join("m/sub")).unwrap();
    std::fs::write(
        s.repo.join("m/a.rs"),
        "fn f() {\n    1;\n}\n\nfn g() {\n    2;\n}\n\nmod outer {\n    fn inner() {}\n}\n",
    )
    .unwrap();
    std::fs::write(s.repo.join("m/ab.rs"), "x\n").unwrap();
    std::fs::write(s.repo.join("m/sub/c.txt"), "c\n").unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "source"]);
    s
}

struct Keys(std::cell::Cell<u32>);

impl Keys {
    fn next(&self) -> String {
        self.0.set(self.0.get() + 1);
        format!("k{}", self.0.get())
    }
}

#[test]
fn the_conflict_matrix_for_every_mode_pair_and_every_overlap_kind() {
    let s = governed_with_source("");
    let keys = Keys(std::cell::Cell::new(0));
    // (first resource, second resource, do they overlap?)
    let kinds = [
        ("file:m/a.rs", "file:m/a.rs", true),
        ("directory:m", "directory:m", true),
        ("db:users", "db:users", true),
        ("symbol:m/a.rs#f", "symbol:m/a.rs#f", true),
        ("symbol:m/a.rs#f", "file:m/a.rs", true),
        ("symbol:m/a.rs#f", "directory:m", true),
        ("symbol:m/a.rs#f", "directory:", true),
        ("file:m/a.rs", "directory:m", true),
        ("file:m/sub/c.txt", "directory:m", true),
        ("directory:m", "directory:m/sub", true),
        ("symbol:m/a.rs#outer", "symbol:m/a.rs#outer::inner", true),
        // Controls: these never overlap, whatever the modes.
        ("symbol:m/a.rs#f", "symbol:m/a.rs#g", false),
        ("file:m/a.rs", "file:m/ab.rs", false),
        ("directory:m/sub", "file:m/a.rs", false),
        ("db:users", "db:orders", false),
        ("db:m", "directory:m", false),
        ("symbol:m/a.rs#f", "file:m/ab.rs", false),
    ];
    let mut checked = 0;
    for (first, second, overlaps) in kinds {
        for a in MODES {
            for b in MODES {
                // Both orders: the matrix and the overlap rules are symmetric.
                for (r1, r2) in [(first, second), (second, first)] {
                    let (st, held) = s.acquire(ALICE, r1, a, &keys.next());
                    assert_eq!(st, 200, "{r1} {a}: {held}");
                    let (st, v) = s.acquire(DAVE, r2, b, &keys.next());
                    let want = if overlaps && seed_conflicts(a, b) {
                        409
                    } else {
                        200
                    };
                    assert_eq!(st, want, "{r1} as {a}, then {r2} as {b}: {v}");
                    let mut release = vec![(ALICE, held["claim"]["claim_id"].clone())];
                    if st == 200 {
                        release.push((DAVE, v["claim"]["claim_id"].clone()));
                    }
                    for (token, id) in release {
                        s.ok(
                            token,
                            "claim.release",
                            json!({"workspace_id": "ws1", "claim_id": id,
                                   "idempotency_key": keys.next()}),
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, kinds.len() * 16 * 2);
}

#[test]
fn twenty_concurrent_overlapping_write_acquires_have_exactly_one_winner() {
    // Twenty run tokens of ws1: runs may claim, and each is its own holder.
    let tokens: Vec<String> = (0..20).map(|i| format!("race-run-token-{i}")).collect();
    let extra: String = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "[[tokens]]\nsha256 = \"{}\"\nrun_id = \"race{i}\"\nworkspace_id = \"ws1\"\n",
                sha(t)
            )
        })
        .collect();
    let s = governed_with_source(&extra);
    for round in 0..8 {
        let barrier = std::sync::Barrier::new(tokens.len());
        let outcomes: Vec<(u16, Value)> = std::thread::scope(|scope| {
            let handles: Vec<_> = tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let (s, barrier) = (&s, &barrier);
                    scope.spawn(move || {
                        // Half claim the directory, half a file inside it: all overlap.
                        let id = if i % 2 == 0 {
                            format!("directory:r{round}")
                        } else {
                            format!("file:r{round}/x")
                        };
                        barrier.wait();
                        s.acquire(t, &id, "write", &format!("race{round}-{i}"))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let wins = outcomes.iter().filter(|(st, _)| *st == 200).count();
        let refused = outcomes.iter().filter(|(st, _)| *st == 409).count();
        assert_eq!((wins, refused), (1, 19), "round {round}: {outcomes:?}");
    }
}

#[test]
fn fencing_tokens_strictly_increase_across_grant_expiry_regrant_transfer_and_restart() {
    let mut s = governed_with_source("");
    let keys = Keys(std::cell::Cell::new(0));
    let t0 = time::OffsetDateTime::parse(
        "2026-06-01T12:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    s.set_clock(t0);
    let mut tokens = vec![];
    let token_of = |v: &Value| v["claim"]["fencing_token"].as_i64().unwrap();
    // Grant.
    let body = |mode: &str, ttl: u64, key: String| {
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:m/a.rs",
               "mode": mode, "ttl_seconds": ttl, "idempotency_key": key})
    };
    let a = s.ok(ALICE, "claim.acquire", body("write", 10, keys.next()));
    tokens.push(token_of(&a));
    // Expiry, then a re-grant to another holder.
    s.set_clock(t0 + time::Duration::seconds(10));
    let d = s.ok(DAVE, "claim.acquire", body("write", 600, keys.next()));
    tokens.push(token_of(&d));
    // A contention, resolved by transfer: a new grant, a new token.
    let (st, _) = s.call(ALICE, "claim.acquire", body("write", 600, keys.next()));
    assert_eq!(st, 409);
    let open = s.ok(
        ALICE,
        "claim.contentions",
        json!({"workspace_id": "ws1", "state": "open"}),
    );
    let t = s.ok(
        ALICE,
        "claim.resolve_contention",
        json!({"workspace_id": "ws1", "contention_id": open["contentions"][0]["contention_id"],
               "resolution": "transfer", "reason": "handover", "idempotency_key": keys.next()}),
    );
    assert_eq!(t["claim"]["holder"], "member:alice");
    tokens.push(t["claim"]["fencing_token"].as_i64().unwrap());
    // A restart forgets nothing: release, restart, grant again.
    s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": t["claim"]["claim_id"],
               "idempotency_key": keys.next()}),
    );
    s.restart(None);
    let after = s.ok(DAVE, "claim.acquire", body("read", 600, keys.next()));
    tokens.push(token_of(&after));
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase: {tokens:?}"
    );
}

fn resource_rows(s: &Server) -> Vec<(String, i64)> {
    let db = rusqlite::Connection::open_with_flags(
        s.dir.path().join("data/airlock.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut st = db
        .prepare("SELECT resource_id, next_token FROM resources ORDER BY resource_id")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_refused_acquire_creates_or_changes_no_resource_row() {
    let s = governed_with_source("");
    let (st, _) = s.acquire(ALICE, "directory:m", "exclusive", "a1");
    assert_eq!(st, 200);
    let (st, _) = s.acquire(ALICE, "file:m/ab.rs", "write", "a2");
    assert_eq!(st, 200);
    let before = resource_rows(&s);
    // A resource with no row yet, and one with a row: both refused, neither touched.
    for (i, id) in ["file:m/a.rs", "file:m/ab.rs", "symbol:m/a.rs#f"]
        .iter()
        .enumerate()
    {
        let (st, v) = s.acquire(DAVE, id, "read", &format!("d{i}"));
        assert_eq!(st, 409, "{id}: {v}");
    }
    // Refused for bad input too (an unresolvable symbol, a stale base hash).
    let (st, _) = s.acquire(DAVE, "symbol:m/a.rs#nope", "read", "d9");
    assert_eq!(st, 412);
    assert_eq!(resource_rows(&s), before);
}

#[test]
fn every_mutation_writes_its_event_in_order() {
    let s = governed_with_source("");
    let keys = Keys(std::cell::Cell::new(0));
    let t0 = time::OffsetDateTime::now_utc();
    s.set_clock(t0);
    let c = s.ok(
        DAVE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:m/a.rs",
               "mode": "write", "ttl_seconds": 60, "idempotency_key": keys.next()}),
    )["claim"]
        .clone();
    let id = c["claim_id"].clone();
    let step = |token: &str, method: &str, extra: Value| {
        let mut b = json!({"workspace_id": "ws1", "claim_id": id, "idempotency_key": keys.next()});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s.ok(token, method, b)
    };
    step(DAVE, "claim.extend", json!({"ttl_seconds": 600}));
    step(ALICE, "claim.suspend", json!({"reason": "look"}));
    step(ALICE, "claim.revoke", json!({"reason": "gone"}));
    let ev = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": id}),
    );
    let got: Vec<(String, Value, Value)> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["prior"].clone(),
                e["new"].clone(),
            )
        })
        .collect();
    let want = [
        ("claim.granted", Value::Null, json!("active")),
        ("claim.extend", json!("active"), json!("active")),
        ("claim.suspend", json!("active"), json!("suspended")),
        ("claim.revoke", json!("suspended"), json!("revoked")),
    ];
    assert_eq!(
        got,
        want.iter()
            .map(|(k, p, n)| (k.to_string(), p.clone(), n.clone()))
            .collect::<Vec<_>>()
    );
    // A refused transition writes nothing.
    let (st, _) = s.call(
        ALICE,
        "claim.suspend",
        json!({"workspace_id": "ws1", "claim_id": id, "idempotency_key": keys.next()}),
    );
    assert_eq!(st, 412);
    let again = s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": id}),
    );
    assert_eq!(again["events"].as_array().unwrap().len(), want.len());
}

#[test]
fn every_unsafe_path_is_refused_naming_the_field() {
    let s = governed_with_source("");
    let unsafe_ids = [
        "file:/etc/passwd",
        "file:../x",
        "file:m/../../x",
        "file:m/./a.rs",
        "file:m//a.rs",
        "file:m/",
        "file:",
        "file:a\u{0}b",
        "file:.git/config",
        "file:m/.git/HEAD",
        "file:.GIT/config",
        "file:.Git",
        "file:.git./x",
        "file:.git /x",
        "file:git~1/config",
        "file:.git::$INDEX_ALLOCATION/x",
        "file:.g\u{200c}it/config",
        "directory:.git",
        "directory:/",
        "directory:m/",
        "symbol:../a.rs#f",
        "symbol:m/a.rs#",
        "symbol:.git/a.rs#f",
        "Db:users",
        "nocolon",
    ];
    for (i, id) in unsafe_ids.iter().enumerate() {
        let (st, v) = s.acquire(ALICE, id, "read", &format!("u{i}"));
        assert_eq!(st, 400, "{id:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("resource_id"),
            "{id:?}: {v}"
        );
        let (st, v) = s.call(
            ALICE,
            "resource.show",
            json!({"workspace_id": "ws1", "resource_id": id}),
        );
        assert_eq!(st, 400, "resource.show {id:?}: {v}");
    }
    assert!(
        resource_rows(&s).is_empty(),
        "no refused id left a resource row"
    );
    // A backslash is an ordinary filename character.
    let (st, v) = s.acquire(ALICE, "file:m\\a.rs", "read", "ok");
    assert_eq!(st, 200, "{v}");
}

#[test]
fn ended_claims_are_removed_after_the_retention_with_their_events_and_tokens_keep_growing() {
    let s = governed_with_source("maintenance_interval_seconds = 1\nclaim_retention_days = 30");
    let keys = Keys(std::cell::Cell::new(0));
    let t0 = time::OffsetDateTime::now_utc();
    s.set_clock(t0);
    let day = time::Duration::days(1);
    let body = |resource: &str, ttl: u64, key: String| {
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": resource, "mode": "write",
               "ttl_seconds": ttl, "idempotency_key": key})
    };
    let a = s.ok(ALICE, "claim.acquire", body("file:m/a.rs", 60, keys.next()))["claim"].clone();
    s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": a["claim_id"], "idempotency_key": keys.next()}),
    );
    let b = s.ok(
        ALICE,
        "claim.acquire",
        body("file:m/ab.rs", 86_400, keys.next()),
    )["claim"]
        .clone();
    let (st, _) = s.call(DAVE, "claim.acquire", body("file:m/ab.rs", 60, keys.next()));
    assert_eq!(st, 409, "a contention on b");
    s.set_clock(t0 + day * 10);
    let c = s.ok(
        ALICE,
        "claim.acquire",
        body("file:m/sub/c.txt", 86_400, keys.next()),
    )["claim"]
        .clone();
    let show = |c: &Value| {
        s.call(
            ALICE,
            "claim.show",
            json!({"workspace_id": "ws1", "claim_id": c["claim_id"]}),
        )
        .0
    };
    assert_eq!((show(&a), show(&b)), (200, 200), "within the retention");
    // 32 days on: a (expired at t0 + 60 s) and b (t0 + 1 day) are past 30 days; c is not.
    s.set_clock(t0 + day * 32);
    crate::support::daemon::wait_for(|| show(&a) == 404 && show(&b) == 404, "a and b purged");
    assert_eq!(show(&c), 200);
    for gone in [&a, &b] {
        let ev = s.ok(
            ALICE,
            "event.list",
            json!({"workspace_id": "ws1", "subject": gone["claim_id"]}),
        );
        assert_eq!(ev["events"], json!([]), "{ev}");
    }
    let open = s.ok(ALICE, "claim.contentions", json!({"workspace_id": "ws1"}));
    assert_eq!(
        open["contentions"],
        json!([]),
        "b's contention went with it"
    );
    // The resource rows stay: the next grant on a's file continues its counter.
    let again = s.ok(ALICE, "claim.acquire", body("file:m/a.rs", 60, keys.next()));
    assert!(
        again["claim"]["fencing_token"].as_i64() > a["fencing_token"].as_i64(),
        "{again}"
    );
}
