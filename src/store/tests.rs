use super::*;
use crate::verification::Status;

/// A `running` verification with every field filled (for other modules' tests too).
pub(crate) fn sample(id: &str, key: &str, created: &str) -> Verification {
    Verification {
        verification_id: id.into(),
        candidate_revision: "a".repeat(40),
        argv: vec!["true".into()],
        image: "i".into(),
        observed_image: None,
        user: "65532:65532".into(),
        working_dir: "/workspace".into(),
        timeout_seconds: 300,
        cpu_limit: 1.0,
        memory_limit_bytes: 1 << 30,
        environment_sha256: String::new(),
        setup_script_sha256: String::new(),
        status: Status::Running,
        exit_code: None,
        output: String::new(),
        output_truncated: false,
        output_bytes_total: 0,
        oom_killed: false,
        duration_ms: None,
        error: None,
        created_at: created.into(),
        finished_at: None,
        expires_at: created.into(),
        creation_key: key.into(),
        container_id: None,
        engine: None,
        runtime: None,
        queued: None,
        queued_reason: None,
        phases: None,
        candidate_tree: None,
        repository: None,
        dependencies: None,
        attestation: None,
    }
}

#[tokio::test]
async fn migrations_from_empty_are_recorded_in_order() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("airlock.db");
    let _store = Store::open(&path).unwrap();
    let c = Connection::open(&path).unwrap();
    let rows: Vec<(i64, String)> = c
        .prepare("SELECT version, name FROM schema_migrations ORDER BY version")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: Vec<(i64, String)> = MIGRATIONS.iter().map(|m| (m.0, m.1.to_string())).collect();
    assert_eq!(rows, expected);
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // Re-opening applies nothing new.
    drop(_store);
    Store::open(&path).unwrap();
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("airlock.db");
    drop(Store::open(&path).unwrap());
    let c = Connection::open(&path).unwrap();
    c.execute(
        "INSERT INTO schema_migrations VALUES (999, 'from the future', 'x')",
        [],
    )
    .unwrap();
    let e = Store::open(&path).err().expect("refused").to_string();
    assert!(
        e.contains("schema version 999") && e.contains("newer"),
        "{e}"
    );
}

#[tokio::test]
async fn compare_and_set_conflicts_are_detected() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(&d.path().join("airlock.db")).unwrap();
    let mut v = sample("ver_1", "k1", "2026-01-01T00:00:00Z");
    store.insert_running(&v, "{}".into()).await.unwrap();
    // Same id again: conflict, not a second row.
    assert!(matches!(
        store.insert_running(&v, "{}".into()).await,
        Err(StoreError::Conflict(_))
    ));
    v.status = Status::Passed;
    store.settle(&v).await.unwrap();
    // A second settle (e.g. recovery racing the worker) loses and says so.
    v.status = Status::Error;
    assert!(matches!(
        store.settle(&v).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.get("ver_1").await.unwrap().unwrap().status,
        Status::Passed
    );
    // Unknown id.
    let ghost = {
        let mut g = sample("ver_x", "kx", "2026-01-01T00:00:00Z");
        g.status = Status::Failed;
        g
    };
    assert!(matches!(
        store.settle(&ghost).await,
        Err(StoreError::Conflict(_))
    ));
    // Non-terminal settle is refused.
    let mut r = sample("ver_2", "k2", "2026-01-01T00:00:01Z");
    store.insert_running(&r, "{}".into()).await.unwrap();
    r.status = Status::Running;
    assert!(store.settle(&r).await.is_err());
}

#[tokio::test]
async fn concurrent_settles_exactly_one_wins() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("airlock.db");
    let store = Store::open(&path).unwrap();
    let other = Store::open(&path).unwrap(); // a second connection, as another process would have
    let v = sample("ver_1", "k1", "2026-01-01T00:00:00Z");
    store.insert_running(&v, "{}".into()).await.unwrap();
    let mut a = v.clone();
    a.status = Status::Passed;
    let mut b = v.clone();
    b.status = Status::Error;
    let (ra, rb) = tokio::join!(store.settle(&a), other.settle(&b));
    assert_eq!(ra.is_ok() as u8 + rb.is_ok() as u8, 1, "{ra:?} {rb:?}");
}

#[tokio::test]
async fn list_is_newest_first_filtered_and_bounded() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(&d.path().join("airlock.db")).unwrap();
    for i in 0..5 {
        let v = sample(
            &format!("ver_{i}"),
            &format!("k{i}"),
            &format!("2026-01-01T00:00:0{i}Z"),
        );
        store.insert_running(&v, "{}".into()).await.unwrap();
    }
    let mut done = store.get("ver_2").await.unwrap().unwrap();
    done.status = Status::Failed;
    store.settle(&done).await.unwrap();
    let all = store.list(None, 10).await.unwrap();
    let ids: Vec<_> = all.iter().map(|v| v.verification_id.as_str()).collect();
    assert_eq!(ids, ["ver_4", "ver_3", "ver_2", "ver_1", "ver_0"]);
    assert_eq!(store.list(None, 2).await.unwrap().len(), 2);
    let failed = store.list(Some(Status::Failed), 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(store.running().await.unwrap().len(), 4);
    assert_eq!(
        store.status_by_creation_key("k2").await.unwrap(),
        Some(Status::Failed)
    );
    assert_eq!(store.status_by_creation_key("nope").await.unwrap(), None);
}

/// The instance id follows its directory: kept when the data dir is reopened, moved (same
/// inode) or restored in place (same path); new for a copy elsewhere or a copy `airlock
/// backup` marked, which remembers the ids it had.
#[tokio::test]
async fn an_instance_id_stays_with_its_data_dir_and_a_copy_takes_a_new_one() {
    use crate::store::{COPIED_FROM_KEY, Home};
    let d = tempfile::tempdir().unwrap();
    let store = Store::open(&d.path().join("airlock.db")).unwrap();
    let home = |dev: u64, ino: u64, path: &str| Home {
        dev,
        ino,
        path: path.into(),
    };
    let first = store.instance(home(1, 10, "/srv/data")).await.unwrap();
    assert!(!first.new_copy && first.previous.is_empty());
    for (h, why) in [
        (home(1, 10, "/srv/data"), "reopened"),
        (home(1, 10, "/srv/moved"), "moved: same inode"),
        (home(1, 99, "/srv/moved"), "restored in place: same path"),
    ] {
        let again = store.instance(h).await.unwrap();
        assert_eq!(again.id, first.id, "{why}");
        assert!(!again.new_copy, "{why}");
    }
    let copy = store.instance(home(1, 11, "/srv/copy")).await.unwrap();
    assert!(copy.new_copy);
    assert_ne!(copy.id, first.id);
    assert_eq!(copy.previous, std::slice::from_ref(&first.id));
    // Opened again where it now lives, the copy keeps its own id.
    let reopened = store.instance(home(1, 11, "/srv/copy")).await.unwrap();
    assert_eq!(
        (reopened.id.as_str(), reopened.new_copy),
        (copy.id.as_str(), false)
    );
    // A backup's mark gives a new id even where the path and inode say nothing.
    let key = COPIED_FROM_KEY.to_string();
    store
        .call(move |c| {
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?1, 'x')",
                rusqlite::params![key],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let restored = store.instance(home(1, 11, "/srv/copy")).await.unwrap();
    assert!(restored.new_copy);
    assert_eq!(restored.previous, [first.id, copy.id]);
    let after = store.instance(home(1, 11, "/srv/copy")).await.unwrap();
    assert!(!after.new_copy, "the mark is used once");
}

/// A database written before the request_state column existed: the migration fills the column
/// from each record's delivery request, so reconciliation finds a delivering one.
#[tokio::test]
async fn the_request_state_column_is_backfilled_from_existing_records() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("airlock.db");
    {
        let mut c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);",
        )
        .unwrap();
        let tx = c.transaction().unwrap();
        for &(version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 <= 4) {
            tx.execute_batch(sql).unwrap();
            tx.execute(
                "INSERT INTO schema_migrations VALUES (?1, ?2, 'then')",
                rusqlite::params![version, name],
            )
            .unwrap();
        }
        for (id, state) in [
            ("c1", Some("delivering")),
            ("c2", Some("approved")),
            ("c3", None),
        ] {
            let record = match state {
                Some(s) => format!(r#"{{"delivery_request":{{"state":"{s}"}}}}"#),
                None => r#"{"delivery_request":null}"#.to_string(),
            };
            tx.execute(
                "INSERT INTO candidates (candidate_id, workspace_id, state, version, created_at, expires_at, record, assembly)
                 VALUES (?1, 'ws', 'frozen', 1, 't', 'z', ?2, '{}')",
                rusqlite::params![id, record],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.candidates_delivering().await.unwrap(),
        vec![("c1".to_string(), "ws".to_string())]
    );
}

/// Every state that reaches SQL is spelled once, by its enum: no store query names one as a
/// literal (the migrations' CHECK constraints are the schema's own record and are left out).
#[test]
fn no_state_is_a_literal_in_the_stores_sql() {
    use crate::domain::candidate::CandidateState;
    use crate::domain::claim::{ClaimMode, ClaimState, ContentionState, ReleaseOn};
    use crate::domain::delivery::RequestState;
    use crate::domain::policy::{ApprovalState, SecurityVerdict, VoteKind};
    use crate::domain::proposal::ProposalState;
    use crate::domain::transaction::TxState;
    use crate::verification::Status;
    let mut names: Vec<&str> = vec![];
    names.extend(CandidateState::ALL.map(CandidateState::as_str));
    names.extend(ClaimMode::ALL.map(ClaimMode::as_str));
    names.extend(ClaimState::ALL.map(ClaimState::as_str));
    names.extend(ContentionState::ALL.map(ContentionState::as_str));
    names.extend(ReleaseOn::ALL.map(ReleaseOn::as_str));
    names.extend(RequestState::ALL.map(RequestState::as_str));
    names.extend(ApprovalState::ALL.map(ApprovalState::as_str));
    names.extend(SecurityVerdict::ALL.map(SecurityVerdict::as_str));
    names.extend(VoteKind::ALL.map(VoteKind::as_str));
    names.extend(ProposalState::ALL.map(ProposalState::as_str));
    names.extend(TxState::ALL.map(TxState::as_str));
    names.extend(Status::ALL.map(Status::as_str));
    names.extend(super::webhooks::DeliveryState::ALL.map(super::webhooks::DeliveryState::as_str));
    names.push("queued");
    let sources = [
        ("webhooks.rs", include_str!("webhooks.rs")),
        ("jobs.rs", include_str!("jobs.rs")),
        ("mod.rs", include_str!("mod.rs")),
        ("applies.rs", include_str!("applies.rs")),
        ("candidates.rs", include_str!("candidates.rs")),
        ("claims.rs", include_str!("claims.rs")),
        ("claim_ends.rs", include_str!("claim_ends.rs")),
        ("contentions.rs", include_str!("contentions.rs")),
        ("gauges.rs", include_str!("gauges.rs")),
        ("proposals.rs", include_str!("proposals.rs")),
        ("reviews.rs", include_str!("reviews.rs")),
    ];
    let mut found = vec![];
    for (file, text) in sources {
        for (n, line) in text.lines().enumerate() {
            for name in &names {
                if line.contains(&format!("'{name}'")) {
                    found.push(format!("{file}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "state literals in SQL:\n{}",
        found.join("\n")
    );
}

/// Every `CHECK (column IN (...))` list of the schema, as the migrations leave it, holds exactly
/// the names of the state machine's or enum's values that column stores: a state added to a
/// machine without a migration (or the reverse) fails here, not on the first row that uses it.
#[test]
fn every_check_list_in_the_schema_is_its_enums_values() {
    use crate::domain::{candidate, claim, policy, proposal, transaction};
    let d = tempfile::tempdir().unwrap();
    let c = open_connection(&d.path().join("db")).unwrap();
    let mut lists: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut st = c
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL")
        .unwrap();
    let tables: Vec<(String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    for (table, sql) in tables {
        let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut rest = flat.as_str();
        while let Some(at) = rest.find("CHECK (") {
            rest = &rest[at + "CHECK (".len()..];
            let Some((column, after)) = rest.split_once(" IN (") else {
                continue;
            };
            if column.contains(' ') {
                continue;
            }
            let values = after.split(')').next().unwrap();
            if !values.starts_with('\'') {
                continue;
            }
            let names: Vec<String> = values
                .split(',')
                .map(|v| v.trim().trim_matches('\'').to_string())
                .collect();
            lists.insert(format!("{table}.{column}"), names);
        }
    }
    fn names<T: Copy>(all: &[T], name: fn(T) -> &'static str) -> Vec<String> {
        all.iter().map(|v| name(*v).to_string()).collect()
    }
    let expected: Vec<(&str, Vec<String>)> = vec![
        ("verifications.status", names(&Status::ALL, Status::as_str)),
        (
            "candidates.state",
            names(
                &candidate::CandidateState::ALL,
                candidate::CandidateState::as_str,
            ),
        ),
        (
            "claims.mode",
            names(&claim::ClaimMode::ALL, claim::ClaimMode::as_str),
        ),
        (
            "claims.status",
            names(&claim::ClaimState::ALL, claim::ClaimState::as_str),
        ),
        (
            "claims.release_on",
            names(&claim::ReleaseOn::ALL, claim::ReleaseOn::as_str),
        ),
        (
            "contentions.state",
            names(&claim::ContentionState::ALL, claim::ContentionState::as_str),
        ),
        (
            "proposals.status",
            names(
                &proposal::ProposalState::ALL,
                proposal::ProposalState::as_str,
            ),
        ),
        (
            "votes.vote",
            names(&policy::VoteKind::ALL, policy::VoteKind::as_str),
        ),
        (
            "security_reviews.verdict",
            names(
                &policy::SecurityVerdict::ALL,
                policy::SecurityVerdict::as_str,
            ),
        ),
        (
            "approvals.state",
            names(&policy::ApprovalState::ALL, policy::ApprovalState::as_str),
        ),
        (
            "transactions.status",
            names(&transaction::TxState::ALL, transaction::TxState::as_str),
        ),
        (
            "webhook_deliveries.state",
            names(
                &super::webhooks::DeliveryState::ALL,
                super::webhooks::DeliveryState::as_str,
            ),
        ),
    ];
    for (column, want) in &expected {
        let mut got = lists
            .remove(*column)
            .unwrap_or_else(|| panic!("no CHECK list for {column}"));
        let mut want = want.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{column}");
    }
    assert!(
        lists.is_empty(),
        "CHECK lists no enum is compared with: {lists:?}"
    );
}
