//! Evidence packets, candidate aggregates and idempotency bindings.
//!
//! Aggregates are stored as JSON with their version in a column; every change is a
//! compare-and-set on that version inside one transaction.

use super::{Store, StoreError};
use crate::domain::candidate::CandidateState;
use crate::domain::delivery::RequestState;
use crate::store::NewEvent;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// An idempotency binding: who asked what, under which key, with which request digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub workspace_id: String,
    pub actor_key: String,
    pub operation: String,
    pub idempotency_key: String,
    pub digest: String,
    pub result_id: String,
    /// When the call arrived (RFC 3339, by the engine's clock).
    pub created_at: String,
}

/// A stored candidate: its wire record and private assembly journal, both JSON.
#[derive(Debug, Clone)]
pub struct StoredCandidate {
    pub version: u64,
    pub record: String,
    pub assembly: String,
}

/// Outcome of an insert guarded by an idempotency binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The binding already existed: (its digest, its result id).
    Existing {
        digest: String,
        result_id: String,
    },
}

impl Store {
    /// Looks up an idempotency binding.
    pub async fn idempotency_binding(
        &self,
        workspace_id: &str,
        actor_key: &str,
        operation: &str,
        key: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        let (w, a, o, k) = (
            workspace_id.to_string(),
            actor_key.to_string(),
            operation.to_string(),
            key.to_string(),
        );
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT digest, result_id FROM idempotency
                 WHERE workspace_id = ?1 AND actor_key = ?2 AND operation = ?3 AND idempotency_key = ?4",
                params![w, a, o, k],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
        })
        .await
    }

    /// Records a binding on its own (for calls whose changes are several transactions and
    /// whose answer is the binding's result), unless it exists: then the existing one.
    pub async fn bind(&self, b: Binding) -> Result<Inserted, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(existing) = existing_binding(&tx, &b)? {
                return Ok(existing);
            }
            insert_binding(&tx, &b)?;
            tx.commit()?;
            Ok(Inserted::New)
        })
        .await
    }

    /// Inserts an evidence packet and its binding in one transaction, unless the binding exists.
    pub async fn insert_evidence(
        &self,
        b: Binding,
        workspace_id: String,
        run_id: String,
        expires_at: String,
        record: String,
    ) -> Result<Inserted, StoreError> {
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(existing) = existing_binding(&tx, &b)? {
                return Ok(existing);
            }
            insert_binding(&tx, &b)?;
            tx.execute(
                "INSERT INTO evidence (evidence_ref, workspace_id, run_id, expires_at, record)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![b.result_id, workspace_id, run_id, expires_at, record],
            )?;
            tx.commit()?;
            Ok(Inserted::New)
        })
        .await
    }

    /// One evidence packet's record.
    pub async fn evidence(&self, evidence_ref: &str) -> Result<Option<String>, StoreError> {
        let r = evidence_ref.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT record FROM evidence WHERE evidence_ref = ?1",
                params![r],
                |r| r.get(0),
            )
            .optional()?)
        })
        .await
    }

    /// The records of these evidence refs, in the order given (`None` for one not stored),
    /// in one call to the store.
    pub async fn evidence_many(
        &self,
        evidence_refs: Vec<String>,
    ) -> Result<Vec<Option<String>>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare_cached("SELECT record FROM evidence WHERE evidence_ref = ?1")?;
            let mut records = Vec::with_capacity(evidence_refs.len());
            for r in &evidence_refs {
                records.push(st.query_row(params![r], |r| r.get(0)).optional()?);
            }
            Ok(records)
        })
        .await
    }

    /// Evidence refs whose expiry is at or before `now` (RFC 3339, compared as text in UTC).
    pub async fn expired_evidence(&self, now: String) -> Result<Vec<(String, String)>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT evidence_ref, workspace_id FROM evidence WHERE expires_at <= ?1",
            )?;
            let rows = st.query_map(params![now], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Removes an evidence packet row (after its ref and transcript are gone).
    pub async fn delete_evidence(&self, evidence_ref: &str) -> Result<(), StoreError> {
        let r = evidence_ref.to_string();
        self.call(move |c| {
            c.execute("DELETE FROM evidence WHERE evidence_ref = ?1", params![r])?;
            Ok(())
        })
        .await
    }

    /// Inserts a new candidate (created when its binding was), its prepare binding and `event`
    /// atomically, unless the binding exists.
    pub fn insert_candidate(
        &self,
        b: Binding,
        expires_at: String,
        state: &'static str,
        record: String,
        assembly: String,
        event: NewEvent,
    ) -> Result<super::Pending<Inserted>, StoreError> {
        self.submit(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(existing) = existing_binding(&tx, &b)? {
                return Ok(existing);
            }
            insert_binding(&tx, &b)?;
            event.insert(&tx)?;
            tx.execute(
                "INSERT INTO candidates (candidate_id, workspace_id, state, version, created_at, expires_at, record, assembly)
                 VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7)",
                params![b.result_id, b.workspace_id, state, b.created_at, expires_at, record, assembly],
            )?;
            tx.commit()?;
            Ok(Inserted::New)
        })
    }

    /// One candidate.
    pub async fn candidate(
        &self,
        candidate_id: &str,
    ) -> Result<Option<StoredCandidate>, StoreError> {
        let id = candidate_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT version, record, assembly FROM candidates WHERE candidate_id = ?1",
                params![id],
                |r| {
                    Ok(StoredCandidate {
                        version: r.get::<_, i64>(0)? as u64,
                        record: r.get(1)?,
                        assembly: r.get(2)?,
                    })
                },
            )
            .optional()?)
        })
        .await
    }

    /// The candidate's stored version, and its record unless the version is `known` (the
    /// caller holds that version parsed already). `None` when there is no such candidate.
    pub async fn candidate_record_since(
        &self,
        candidate_id: &str,
        known: Option<u64>,
    ) -> Result<Option<(u64, Option<String>)>, StoreError> {
        let id = candidate_id.to_string();
        let known = known.map(|v| v as i64).unwrap_or(-1);
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT version, CASE WHEN version = ?2 THEN NULL ELSE record END
                 FROM candidates WHERE candidate_id = ?1",
                params![id, known],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Option<String>>(1)?)),
            )
            .optional()?)
        })
        .await
    }

    /// Compare-and-set of a candidate from `old_version`, with its `events`; optionally records a
    /// binding in the same transaction. A lost race (version moved, or the binding appeared) is
    /// a conflict.
    #[allow(clippy::too_many_arguments)]
    pub async fn save_candidate(
        &self,
        candidate_id: &str,
        old_version: u64,
        new_version: u64,
        state: CandidateState,
        request_state: Option<RequestState>,
        record: String,
        assembly: String,
        purge_after: Option<String>,
        binding: Option<Binding>,
        events: Vec<NewEvent>,
    ) -> Result<(), StoreError> {
        let id = candidate_id.to_string();
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "UPDATE candidates SET version = ?1, state = ?2, request_state = ?3, record = ?4,
                        assembly = ?5, purge_after = ?6
                 WHERE candidate_id = ?7 AND version = ?8",
                params![
                    new_version as i64,
                    state.as_str(),
                    request_state.map(RequestState::as_str),
                    record,
                    assembly,
                    purge_after,
                    id,
                    old_version as i64
                ],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!(
                    "candidate {id} is no longer at version {old_version}"
                )));
            }
            if let Some(b) = binding {
                if existing_binding(&tx, &b)?.is_some() {
                    return Err(StoreError::Conflict(format!(
                        "idempotency key {:?} was bound concurrently",
                        b.idempotency_key
                    )));
                }
                insert_binding(&tx, &b)?;
            }
            for e in &events {
                e.insert(&tx)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Newest-first candidates of a workspace, at most `limit`.
    pub async fn list_candidates(
        &self,
        workspace_id: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        let w = workspace_id.to_string();
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT record FROM candidates WHERE workspace_id = ?1
                 ORDER BY created_at DESC, rowid DESC LIMIT ?2",
            )?;
            let rows = st.query_map(params![w, limit], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Candidates needing maintenance at `now`, as (id, workspace id, purge_after): those past
    /// expiry that are not yet fenced, fenced ones whose cleanup is unfinished (no purge time),
    /// and tombstones past their purge time.
    pub async fn candidates_due(
        &self,
        now: String,
    ) -> Result<Vec<(String, String, Option<String>)>, StoreError> {
        // The fenced states come from the state machine, so this query cannot drift from it.
        let fenced = CandidateState::fenced_sql_list();
        self.call(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT candidate_id, workspace_id, purge_after FROM candidates
                 WHERE (expires_at <= ?1 AND state NOT IN ({fenced}))
                    OR (state IN ({fenced}) AND (purge_after IS NULL OR purge_after <= ?1))"
            ))?;
            let rows = st.query_map(params![now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// (candidate id, workspace id) of candidates whose delivery request is `delivering`.
    pub async fn candidates_delivering(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.call(|c| {
            let mut st = c.prepare(
                "SELECT candidate_id, workspace_id FROM candidates WHERE request_state = ?1",
            )?;
            let rows = st.query_map(params![RequestState::Delivering.as_str()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Removes a tombstone whose retention has ended.
    pub async fn purge_candidate(&self, candidate_id: &str) -> Result<(), StoreError> {
        let id = candidate_id.to_string();
        self.call(move |c| {
            c.execute(
                "DELETE FROM candidates WHERE candidate_id = ?1",
                params![id],
            )?;
            Ok(())
        })
        .await
    }
}

pub(super) fn existing_binding(
    tx: &rusqlite::Transaction,
    b: &Binding,
) -> Result<Option<Inserted>, StoreError> {
    Ok(tx
        .query_row(
            "SELECT digest, result_id FROM idempotency
             WHERE workspace_id = ?1 AND actor_key = ?2 AND operation = ?3 AND idempotency_key = ?4",
            params![b.workspace_id, b.actor_key, b.operation, b.idempotency_key],
            |r| Ok(Inserted::Existing { digest: r.get(0)?, result_id: r.get(1)? }),
        )
        .optional()?)
}

/// Inserts a binding, failing with a conflict when it already exists.
pub(super) fn insert_binding_checked(
    tx: &rusqlite::Transaction,
    b: &Binding,
) -> Result<(), StoreError> {
    if existing_binding(tx, b)?.is_some() {
        return Err(StoreError::Conflict(format!(
            "idempotency key {:?} was bound concurrently",
            b.idempotency_key
        )));
    }
    insert_binding(tx, b)
}

pub(super) fn insert_binding(tx: &rusqlite::Transaction, b: &Binding) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO idempotency (workspace_id, actor_key, operation, idempotency_key, digest, result_id, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            b.workspace_id,
            b.actor_key,
            b.operation,
            b.idempotency_key,
            b.digest,
            b.result_id,
            b.created_at
        ],
    )?;
    Ok(())
}
