//! Claims on a real SQLite file: the conflict check and the grant are one transaction, tokens
//! only grow (across restarts too), expiry needs no sweep, refusals leave one open contention
//! and no resource row, transitions compare-and-set.

use super::*;
use crate::domain::claim::{ClaimEvent, ClaimMode, ClaimState, ContentionState, ResourceId, Span};
use crate::store::contentions::{Resolution, Resolve};

fn acquire(holder: &str, id: &str, mode: ClaimMode, now: i64, ttl: i64) -> Acquire {
    Acquire {
        claim_id: format!("clm_{}", crate::ids::new_creation_key()),
        workspace_id: "ws".into(),
        resource: ResourceId::parse(id).unwrap(),
        span: None,
        holder: holder.into(),
        task_id: "t".into(),
        session_id: None,
        mode,
        release_on: crate::domain::claim::ReleaseOn::Manual,
        expires_at: now + ttl,
        now,
        now_rfc3339: format!("t{now}"),
        record: "{}".into(),
        binding: None,
    }
}

fn granted(a: Acquired) -> ClaimRow {
    match a {
        Acquired::Granted(c) => c,
        other => panic!("refused: {other:?}"),
    }
}

async fn count(store: &Store, sql: &str) -> i64 {
    let sql = sql.to_string();
    store
        .call(move |c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
        .await
        .unwrap()
}

#[tokio::test]
async fn overlapping_writes_conflict_once_and_leave_one_open_contention() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("db")).unwrap();
    let a = granted(
        s.acquire_claim(acquire(
            "alice",
            "directory:src",
            ClaimMode::Write,
            100,
            900,
        ))
        .await
        .unwrap(),
    );
    assert_eq!((a.fencing_token, a.status), (1, ClaimState::Active));
    for _ in 0..3 {
        let r = s
            .acquire_claim(acquire(
                "bob",
                "file:src/main.rs",
                ClaimMode::Write,
                110,
                900,
            ))
            .await
            .unwrap();
        let Acquired::Refused { challenged, .. } = r else {
            panic!("{r:?}");
        };
        assert_eq!(challenged.len(), 1);
        assert_eq!(challenged[0].claim_id, a.claim_id);
    }
    assert_eq!(
        count(
            &s,
            &format!(
                "SELECT COUNT(*) FROM contentions WHERE state = '{}'",
                ContentionState::Open.as_str()
            )
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM resources WHERE resource_id = 'file:src/main.rs'"
        )
        .await,
        0,
        "a refused claim creates no resource row"
    );
    // Reading and reviewing do not conflict with writing; an agent's own claims never do.
    granted(
        s.acquire_claim(acquire(
            "bob",
            "file:src/main.rs",
            ClaimMode::Read,
            120,
            900,
        ))
        .await
        .unwrap(),
    );
    granted(
        s.acquire_claim(acquire(
            "bob",
            "file:src/main.rs",
            ClaimMode::Review,
            120,
            900,
        ))
        .await
        .unwrap(),
    );
    // An agent's own claims never conflict with each other, but an exclusive claim conflicts
    // with another's read.
    granted(
        s.acquire_claim(acquire(
            "alice",
            "file:src/other.rs",
            ClaimMode::Exclusive,
            120,
            900,
        ))
        .await
        .unwrap(),
    );
    let r = s
        .acquire_claim(acquire(
            "alice",
            "file:src/main.rs",
            ClaimMode::Exclusive,
            120,
            900,
        ))
        .await
        .unwrap();
    assert!(matches!(r, Acquired::Refused { .. }), "bob reads it: {r:?}");
    // Unrelated paths and other categories are free.
    granted(
        s.acquire_claim(acquire(
            "bob",
            "file:srcx/main.rs",
            ClaimMode::Write,
            120,
            900,
        ))
        .await
        .unwrap(),
    );
    granted(
        s.acquire_claim(acquire(
            "bob",
            "endpoint:src",
            ClaimMode::Exclusive,
            120,
            900,
        ))
        .await
        .unwrap(),
    );
    let events = s.events_of("ws", &a.claim_id).await.unwrap();
    assert_eq!(events[0].0, "claim.granted");
}

#[tokio::test]
async fn an_expired_claim_blocks_nobody_even_before_a_sweep() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("db")).unwrap();
    let a = granted(
        s.acquire_claim(acquire("alice", "file:x", ClaimMode::Exclusive, 100, 60))
            .await
            .unwrap(),
    );
    // One second before expiry it blocks; at the expiry instant it does not.
    let r = s
        .acquire_claim(acquire("bob", "file:x", ClaimMode::Read, 159, 60))
        .await
        .unwrap();
    assert!(matches!(r, Acquired::Refused { .. }), "{r:?}");
    let b = granted(
        s.acquire_claim(acquire("bob", "file:x", ClaimMode::Write, 160, 60))
            .await
            .unwrap(),
    );
    assert_eq!(
        s.claim(&a.claim_id).await.unwrap().unwrap().status,
        ClaimState::Active,
        "not swept"
    );
    assert!(b.fencing_token > a.fencing_token);
}

#[tokio::test]
async fn fencing_tokens_only_grow_across_release_expiry_and_restart() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("db");
    let mut last = 0;
    let mut now = 100;
    for round in 0..4 {
        let s = Store::open(&path).unwrap();
        let c = granted(
            s.acquire_claim(acquire(
                &format!("agent{round}"),
                "file:x",
                ClaimMode::Write,
                now,
                60,
            ))
            .await
            .unwrap(),
        );
        assert!(
            c.fencing_token > last,
            "round {round}: {} after {last}",
            c.fencing_token
        );
        last = c.fencing_token;
        if round % 2 == 0 {
            s.transition_claim(&c.claim_id, 1, ClaimEvent::Release, "agent", false, "t")
                .await
                .unwrap();
        } else {
            now += 61; // the next grant comes after this one expired
        }
        drop(s);
    }
    assert_eq!(last, 4);
}

#[tokio::test]
async fn symbols_conflict_only_where_their_spans_meet() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("db")).unwrap();
    let with_span = |holder: &str, name: &str, a: u64, b: u64| {
        let mut q = acquire(
            holder,
            &format!("symbol:lib.rs#{name}"),
            ClaimMode::Write,
            100,
            900,
        );
        q.span = Some(Span { start: a, end: b });
        q
    };
    granted(
        s.acquire_claim(with_span("alice", "f", 10, 20))
            .await
            .unwrap(),
    );
    granted(
        s.acquire_claim(with_span("bob", "g", 21, 30))
            .await
            .unwrap(),
    );
    let r = s
        .acquire_claim(with_span("carol", "h", 18, 25))
        .await
        .unwrap();
    let Acquired::Refused { challenged, .. } = r else {
        panic!("{r:?}");
    };
    assert_eq!(challenged.len(), 2, "both overlapping symbols are named");
    let r = s
        .acquire_claim(acquire("carol", "file:lib.rs", ClaimMode::Write, 100, 900))
        .await
        .unwrap();
    assert!(matches!(r, Acquired::Refused { .. }));
}

#[tokio::test]
async fn transitions_compare_and_set_the_prior_state_with_one_event_each() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("db")).unwrap();
    let c = granted(
        s.acquire_claim(acquire("alice", "file:x", ClaimMode::Write, 100, 900))
            .await
            .unwrap(),
    );
    let suspended = s
        .transition_claim(&c.claim_id, 1, ClaimEvent::Suspend, "admin", true, "t")
        .await
        .unwrap();
    assert_eq!(
        (suspended.status, suspended.version),
        (ClaimState::Suspended, 2)
    );
    // A stale version loses; a transition the state forbids is refused; neither writes.
    assert!(matches!(
        s.transition_claim(&c.claim_id, 1, ClaimEvent::Release, "alice", false, "t")
            .await,
        Err(StoreError::Conflict(_))
    ));
    let e = s
        .transition_claim(&c.claim_id, 2, ClaimEvent::Extend, "alice", false, "t")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot extend from suspended"),
        "{e}"
    );
    s.transition_claim(&c.claim_id, 2, ClaimEvent::Release, "alice", false, "t")
        .await
        .unwrap();
    let e = s
        .transition_claim(&c.claim_id, 3, ClaimEvent::Release, "alice", false, "t")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot release from released"),
        "{e}"
    );
    let kinds: Vec<String> = s
        .events_of("ws", &c.claim_id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(kinds, ["claim.granted", "claim.suspend", "claim.release"]);
}

/// Many writers on separate connections to one file (as separate processes would be): the
/// check and the insert are one immediate transaction, so exactly one wins every round.
#[test]
fn concurrent_overlapping_writes_have_exactly_one_winner() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("db");
    drop(super::super::open_connection(&path).unwrap());
    for round in 0..5 {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(20));
        let threads: Vec<_> = (0..20)
            .map(|i| {
                let path = path.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    let s = Store::open(&path).unwrap();
                    barrier.wait();
                    let id = if i % 2 == 0 {
                        format!("file:r{round}/a")
                    } else {
                        format!("directory:r{round}")
                    };
                    rt.block_on(s.acquire_claim(acquire(
                        &format!("agent{i}"),
                        &id,
                        ClaimMode::Write,
                        100,
                        900,
                    )))
                    .unwrap()
                })
            })
            .collect();
        let wins = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|a| matches!(a, Acquired::Granted(_)))
            .count();
        assert_eq!(wins, 1, "round {round}");
    }
}

#[test]
fn the_schema_knows_exactly_the_domains_states_and_modes() {
    let sql = super::super::migrations::MIGRATIONS
        .iter()
        .find(|m| m.1 == "claims")
        .unwrap()
        .2;
    let list = |items: Vec<&str>| {
        items
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert!(sql.contains(&list(ClaimMode::ALL.iter().map(|m| m.as_str()).collect())));
    assert!(sql.contains(&list(ClaimState::ALL.iter().map(|s| s.as_str()).collect())));
}

/// Concurrent resolvers of one contention, on separate connections: exactly one wins.
#[test]
fn concurrent_resolvers_have_exactly_one_winner() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let s = Store::open(&path).unwrap();
    rt.block_on(s.acquire_claim(acquire("alice", "file:x", ClaimMode::Write, 100, 900)))
        .unwrap();
    let Acquired::Refused { opened, .. } = rt
        .block_on(s.acquire_claim(acquire("bob", "file:x", ClaimMode::Write, 100, 900)))
        .unwrap()
    else {
        panic!("not refused");
    };
    let contention = opened[0].clone();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(10));
    let threads: Vec<_> = (0..10)
        .map(|i| {
            let (path, barrier, contention) = (path.clone(), barrier.clone(), contention.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let s = Store::open(&path).unwrap();
                barrier.wait();
                rt.block_on(s.resolve_contention(Resolve {
                    workspace_id: "ws".into(),
                    contention_id: contention,
                    resolution: if i % 2 == 0 {
                        Resolution::Transfer {
                            record: "{}".into(),
                            task_id: "t".into(),
                            session_id: None,
                        }
                    } else {
                        Resolution::KeepOwner
                    },
                    reason: "r".into(),
                    actor: format!("admin{i}"),
                    now: 110,
                    at: "t".into(),
                    binding: None,
                }))
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| e.to_string().contains("already resolved"))
    );
}
