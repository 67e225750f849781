//! Ordered, named schema migrations, each applied in its own transaction and recorded in
//! `schema_migrations`. Shipped migrations never change; new ones are appended.

use super::StoreError;
use rusqlite::{Connection, TransactionBehavior, params};
use std::path::Path;

/// (version, name, SQL). Versions are consecutive from 1.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "verifications",
        "CREATE TABLE verifications (
            verification_id TEXT PRIMARY KEY,
            creation_key TEXT NOT NULL UNIQUE,
            status TEXT NOT NULL CHECK (status IN
                ('running','passed','failed','timed_out','cancelled','error','source_changed')),
            created_at TEXT NOT NULL,
            record TEXT NOT NULL,
            spec TEXT NOT NULL
        );
        CREATE INDEX verifications_by_status ON verifications (status, created_at);
        CREATE INDEX verifications_by_created ON verifications (created_at);",
    ),
    (
        2,
        "meta",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    ),
    (
        3,
        "evidence_and_candidates",
        "CREATE TABLE evidence (
            evidence_ref TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            record TEXT NOT NULL
        );
        CREATE INDEX evidence_by_expiry ON evidence (expires_at);
        CREATE TABLE candidates (
            candidate_id TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN
                ('preparing','conflicted','frozen','unavailable','deleting','expired')),
            version INTEGER NOT NULL CHECK (version >= 1),
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            purge_after TEXT,
            record TEXT NOT NULL,
            assembly TEXT NOT NULL
        );
        CREATE INDEX candidates_by_workspace ON candidates (workspace_id, created_at);
        CREATE INDEX candidates_by_expiry ON candidates (expires_at);
        CREATE TABLE idempotency (
            workspace_id TEXT NOT NULL,
            actor_key TEXT NOT NULL,
            operation TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            digest TEXT NOT NULL,
            result_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (workspace_id, actor_key, operation, idempotency_key)
        );",
    ),
    (
        4,
        "candidate_verifications",
        "ALTER TABLE verifications ADD COLUMN candidate_id TEXT;
        ALTER TABLE verifications ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX verifications_by_candidate ON verifications (candidate_id, created_at);",
    ),
    (
        5,
        "candidate_request_state",
        "ALTER TABLE candidates ADD COLUMN request_state TEXT;
        UPDATE candidates SET request_state = json_extract(record, '$.delivery_request.state');
        CREATE INDEX candidates_by_request_state ON candidates (request_state);",
    ),
    (
        6,
        "claims",
        "CREATE TABLE resources (
            workspace_id TEXT NOT NULL,
            resource_id TEXT NOT NULL,
            next_token INTEGER NOT NULL CHECK (next_token >= 1),
            created_at TEXT NOT NULL,
            PRIMARY KEY (workspace_id, resource_id)
        );
        CREATE TABLE claims (
            claim_id TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            resource_id TEXT NOT NULL,
            holder TEXT NOT NULL,
            task_id TEXT NOT NULL,
            session_id TEXT,
            mode TEXT NOT NULL CHECK (mode IN ('read','write','review','exclusive')),
            status TEXT NOT NULL CHECK (status IN
                ('active','suspended','released','revoked','expired')),
            fencing_token INTEGER NOT NULL CHECK (fencing_token >= 1),
            expires_at INTEGER NOT NULL,
            span_start INTEGER,
            span_end INTEGER,
            version INTEGER NOT NULL CHECK (version >= 1),
            record TEXT NOT NULL,
            UNIQUE (workspace_id, resource_id, fencing_token),
            FOREIGN KEY (workspace_id, resource_id) REFERENCES resources (workspace_id, resource_id)
        );
        CREATE INDEX claims_by_status ON claims (workspace_id, status, expires_at);
        CREATE TABLE contentions (
            contention_id TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            requester TEXT NOT NULL,
            challenged_claim TEXT NOT NULL REFERENCES claims (claim_id),
            state TEXT NOT NULL CHECK (state IN ('open','resolved')),
            created_at TEXT NOT NULL,
            record TEXT NOT NULL
        );
        CREATE UNIQUE INDEX contentions_one_open
            ON contentions (workspace_id, requester, challenged_claim) WHERE state = 'open';
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            workspace_id TEXT NOT NULL,
            subject TEXT NOT NULL,
            kind TEXT NOT NULL,
            actor TEXT NOT NULL,
            prior TEXT,
            new TEXT,
            payload TEXT NOT NULL,
            at TEXT NOT NULL
        );
        CREATE INDEX events_by_subject ON events (workspace_id, subject, seq);",
    ),
    (
        7,
        "proposals with immutable revisions and decisions",
        "CREATE TABLE proposals (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            proposal_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            author TEXT NOT NULL,
            task_id TEXT NOT NULL,
            status TEXT NOT NULL
                CHECK (status IN ('pending','in_review','accepted','rejected','withdrawn')),
            version INTEGER NOT NULL CHECK (version >= 1),
            current_revision TEXT NOT NULL,
            record TEXT NOT NULL
        );
        CREATE INDEX proposals_by_workspace ON proposals (workspace_id, seq);
        CREATE TABLE proposal_revisions (
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            number INTEGER NOT NULL CHECK (number >= 1),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            bytes INTEGER NOT NULL CHECK (bytes >= 0),
            created_at TEXT NOT NULL,
            affected_resources TEXT NOT NULL,
            PRIMARY KEY (proposal_id, number),
            UNIQUE (proposal_id, revision)
        );
        CREATE TABLE decisions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            decision_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            proposal_id TEXT REFERENCES proposals (proposal_id),
            revision TEXT,
            task_id TEXT,
            decision TEXT NOT NULL,
            actor TEXT NOT NULL,
            rationale_md TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX decisions_by_workspace ON decisions (workspace_id, seq);",
    ),
    (
        8,
        "review plans, votes, security reviews and human approvals bound to revisions",
        "CREATE TABLE review_plans (
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            plan TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (proposal_id, revision)
        );
        CREATE TABLE votes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            vote_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            voter TEXT NOT NULL,
            roles TEXT NOT NULL,
            vote TEXT NOT NULL CHECK (vote IN
                ('approve','approve_with_notes','revise','reject','veto','abstain')),
            confidence REAL NOT NULL CHECK (confidence >= 0.0 AND confidence <= 1.0),
            reason_md TEXT NOT NULL,
            current INTEGER NOT NULL CHECK (current IN (0, 1)),
            created_at TEXT NOT NULL
        );
        CREATE UNIQUE INDEX votes_one_current
            ON votes (proposal_id, revision, voter) WHERE current = 1;
        CREATE INDEX votes_by_proposal ON votes (proposal_id, seq);
        CREATE TABLE security_reviews (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            review_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            reviewer TEXT NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('pass','fail','needs_changes')),
            notes_md TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX security_reviews_by_proposal ON security_reviews (proposal_id, seq);
        CREATE TABLE approvals (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            approval_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            requested_by TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending','approved','denied')),
            decided_by TEXT,
            override INTEGER NOT NULL DEFAULT 0 CHECK (override IN (0, 1)),
            reason_md TEXT,
            created_at TEXT NOT NULL,
            decided_at TEXT
        );
        CREATE UNIQUE INDEX approvals_one_pending
            ON approvals (proposal_id, revision) WHERE state = 'pending';
        CREATE INDEX approvals_by_proposal ON approvals (proposal_id, seq);",
    ),
    (
        9,
        "validations and apply transactions with their phases",
        "CREATE TABLE validations (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            validation_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            expires_at INTEGER NOT NULL,
            record TEXT NOT NULL
        );
        CREATE INDEX validations_by_proposal ON validations (proposal_id, seq);
        CREATE TABLE transactions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            transaction_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            proposal_id TEXT NOT NULL REFERENCES proposals (proposal_id),
            revision TEXT NOT NULL CHECK (length(revision) = 64),
            validation_id TEXT NOT NULL REFERENCES validations (validation_id),
            status TEXT NOT NULL CHECK (status IN
                ('prepared','installing','applied','rolled_back','cancelled','failed','needs_attention')),
            version INTEGER NOT NULL CHECK (version >= 1),
            record TEXT NOT NULL
        );
        CREATE INDEX transactions_by_workspace ON transactions (workspace_id, seq);
        CREATE TABLE transaction_phases (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            transaction_id TEXT NOT NULL REFERENCES transactions (transaction_id),
            phase TEXT NOT NULL,
            actor TEXT NOT NULL,
            detail TEXT NOT NULL,
            at TEXT NOT NULL
        );
        CREATE INDEX transaction_phases_by_tx ON transaction_phases (transaction_id, seq);",
    ),
    (
        10,
        "apply fences: the claims and paths an open transaction holds",
        "CREATE TABLE transaction_claims (
            transaction_id TEXT NOT NULL REFERENCES transactions (transaction_id),
            claim_id TEXT NOT NULL,
            PRIMARY KEY (transaction_id, claim_id)
        );
        CREATE INDEX transaction_claims_by_claim ON transaction_claims (claim_id);
        CREATE TABLE transaction_paths (
            transaction_id TEXT NOT NULL REFERENCES transactions (transaction_id),
            path TEXT NOT NULL,
            PRIMARY KEY (transaction_id, path)
        );
        CREATE INDEX transactions_by_status ON transactions (status, workspace_id);
        CREATE INDEX transactions_by_proposal ON transactions (proposal_id, status);",
    ),
    (
        11,
        "claims that end with their holder's proposal",
        "ALTER TABLE claims ADD COLUMN release_on TEXT NOT NULL DEFAULT 'manual'
            CHECK (release_on IN ('manual','proposal_end'));
        CREATE INDEX claims_by_holder ON claims (workspace_id, holder, release_on);",
    ),
    (
        12,
        "where a running verification waits or runs",
        "ALTER TABLE verifications ADD COLUMN queued_reason TEXT;
        ALTER TABLE verifications ADD COLUMN engine TEXT;",
    ),
    (
        13,
        "jobs submitted over the API",
        "CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id TEXT NOT NULL UNIQUE,
            workspace_id TEXT NOT NULL,
            verification_id TEXT NOT NULL UNIQUE,
            revision TEXT NOT NULL,
            profile TEXT NOT NULL,
            labels TEXT NOT NULL,
            queued_at TEXT NOT NULL,
            started_at TEXT
        );
        CREATE INDEX jobs_by_workspace ON jobs (workspace_id, seq);
        CREATE INDEX jobs_unstarted ON jobs (started_at) WHERE started_at IS NULL;
        ALTER TABLE verifications ADD COLUMN phases TEXT;",
    ),
    (
        14,
        "the first answer of every keyed call, replayed byte for byte",
        "CREATE TABLE sealed_replies (
            workspace_id TEXT NOT NULL,
            actor_key TEXT NOT NULL,
            method TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            digest TEXT NOT NULL,
            reply BLOB NOT NULL,
            sealed_at TEXT NOT NULL,
            PRIMARY KEY (workspace_id, actor_key, method, idempotency_key)
        );
        CREATE INDEX sealed_replies_by_age ON sealed_replies (sealed_at);",
    ),
    (
        15,
        "webhook subscriptions' cursors over the event log and their deliveries (the outbox)",
        "CREATE TABLE webhook_cursors (
            subscription_id TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            after_seq INTEGER NOT NULL
        );
        CREATE TABLE webhook_deliveries (
            delivery_id TEXT PRIMARY KEY,
            subscription_id TEXT NOT NULL,
            event_seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            event TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending','delivered','failed')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_ms INTEGER NOT NULL,
            last_status INTEGER,
            last_error TEXT,
            created_at TEXT NOT NULL,
            settled_at TEXT,
            UNIQUE (subscription_id, event_seq)
        );
        CREATE INDEX webhook_deliveries_pending
            ON webhook_deliveries (subscription_id, state, event_seq);",
    ),
];

/// The newest schema version this binary knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

/// Applies every missing migration; refuses a database newer than this binary.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL
        );",
    )?;
    let current: i64 = conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )?;
    if current > latest() {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: current,
            known: latest(),
        });
    }
    for &(version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        let err = |source| StoreError::Migration {
            version,
            name,
            source,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err)?;
        // Another process may have applied it while we waited for the write lock.
        let done: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM schema_migrations WHERE version = ?1",
                params![version],
                |r| r.get(0),
            )
            .map_err(err)?;
        if done == 0 {
            tx.execute_batch(sql).map_err(err)?;
            // The host's wall clock on purpose: `applied_at` records when this binary changed
            // the file's schema, an operator's fact that no workflow reads or expires by.
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
                params![version, name, crate::ids::rfc3339(crate::ids::now())],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)?;
    }
    Ok(())
}
