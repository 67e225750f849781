//! Candidate integration, one workflow per module over the shared [`Service`]:
//! `evidence` (packets), `prepare` (validate, persist, retain), `assembly` (the merge loop),
//! `read` (show, list, patch), `resolve`, `lifecycle` (delete, expiry, tombstones),
//! `verification` (candidate verifications and their workers) and `delivery` (request, decide,
//! deliver, receipts). This module holds what they share: candidate-owned ref names, loading and compare-and-set saving of the aggregate, and the owned-evidence check.
//!
//! Durable order: the `preparing` aggregate (with its ordered inputs) is saved before any Git
//! change; candidate-owned refs and transcript copies are made next, and every later step uses
//! only those; assembly steps are deterministic (fixed commit identity and time), so a step
//! repeated after a crash produces the same objects. A resolution's intent is saved before Git
//! changes. Deletion and expiry persist their fence before removing anything.

pub mod assembly;
pub mod delivery;
pub mod events;
pub mod evidence;
pub mod history;
pub mod lifecycle;
pub mod prepare;
pub mod read;
pub mod resolve;
pub mod verify;

use crate::artifacts::write_atomic;
use crate::candidate::{
    self, Assembly, CANDIDATE_LIFETIME, Candidate, CandidateEvent, CandidateInput, CandidateState,
    DeliveryAction, DeliveryReceipt, DeliveryRequest, EvidenceSource, MAX_AGGREGATE_BYTES,
    MAX_PATCH_BYTES, MAX_PATCH_OFFSET, MAX_REQUEST_VERIFICATIONS, MAX_RESOLVE_FILES,
    MAX_SNAPSHOT_BYTES, MAX_SUBMISSIONS, MAX_TRANSCRIPT_BYTES, MAX_VERIFICATIONS_PER_CANDIDATE,
    MIN_PATCH_PAGE_BYTES, Mutation, MutationOperation, PendingResolution, ReceiptResult,
    RequestEvent, RequestState, ResolveFile, TOMBSTONE_RETENTION,
};
use crate::config::Permission;
use crate::domain::git::{FileMode, ObjectKind};
use crate::engine::actor::{Actor, SystemTask};
use crate::engine::admission::{Admission, Admitted, Operation};
use crate::engine::blocking::blocking;
use crate::engine::error::ServiceError;
use crate::engine::idempotency::{Keyed, Prologue};
use crate::engine::runner::pipeline::{CandidateLink, Link, RunError, Step};
use crate::engine::service::{Candidates, parse_time};
use crate::limits;
use crate::staging::Repo;
use crate::staging::plumbing::{CommitStamp, RefOp};
use crate::store::{Binding, Inserted};
use crate::verification::{Status, Verification};
use crate::wire::{
    CancelParams, CandidateParams, DecideParams, DeliverParams, ListParams, PatchParams,
    PatchResult, PrepareParams, RequestParams, ResolveParams, VerifyParams,
};
use evidence::evidence_ref_name;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Duration;

/// A loaded candidate with its private journal and stored version.
pub(crate) struct Loaded {
    pub(crate) c: Candidate,
    pub(crate) a: Assembly,
    pub(super) stored_version: u64,
    /// The candidate as stored, for the events a save records.
    pub(super) before: events::Before,
}

/// The start of an idempotent candidate mutation: the candidate locked (the guard is held for
/// as long as this value lives), loaded and admitted, and the key the mutation will be
/// recorded and bound under, or none when this exact request (same actor, key and parameters)
/// already completed, in which case the caller answers with the current candidate. The same
/// key with other parameters is `conflict` before anything is changed.
/// [`Candidates::save_mutation`] is the end of every such mutation.
pub(crate) struct Begun {
    pub(crate) l: Loaded,
    pub(crate) actor_key: String,
    /// What the mutation will be recorded and bound under; none for a replay.
    pub(crate) key: Option<MutationKey>,
    pub(crate) guard: tokio::sync::OwnedMutexGuard<()>,
    /// The admission of this mutation, held until the caller is done.
    pub(crate) admitted: Admitted,
}

/// Who did what with which idempotency key and parameters: the identity of one mutation, from
/// which both its history entry and its durable binding are made (the same [`Keyed`] every
/// workflow binds its calls with).
#[derive(Debug, Clone)]
pub(crate) struct MutationKey {
    pub(crate) workspace_id: String,
    pub(crate) actor_key: String,
    /// Bound under `<method>/<candidate_id>`.
    pub(crate) keyed: Keyed,
}

impl MutationKey {
    /// The durable binding of this mutation to its result.
    pub(crate) fn binding(&self, result_id: String) -> Binding {
        self.keyed
            .binding_for(&self.workspace_id, &self.actor_key, &result_id)
    }

    /// This mutation as an entry of the candidate's history.
    fn history(&self, operation: MutationOperation, result_id: String) -> Mutation {
        Mutation {
            actor_key: self.actor_key.clone(),
            operation,
            idempotency_key: self.keyed.key.clone(),
            digest: self.keyed.digest.clone(),
            result_id,
        }
    }
}

impl Candidates {
    pub(super) fn candidate_dir(&self, cid: &str) -> PathBuf {
        self.ctx.data.layout.candidate_dir(cid)
    }

    /// Locks and loads a candidate for an idempotent mutation, admits the operation on it, and
    /// goes through the one prologue ([`crate::engine::idempotency::Keys::begin`]), under
    /// `<operation>/<candidate_id>`.
    pub(super) async fn begin_mutation(
        &self,
        actor: &Actor,
        op: Operation,
        workspace_id: &str,
        candidate_id: &str,
        idempotency_key: &str,
        digest: &str,
    ) -> Result<Begun, ServiceError> {
        let actor_key = actor.key();
        let guard = self.candidate_lock(candidate_id).lock_owned().await;
        let l = self.load(workspace_id, candidate_id).await?;
        let admitted = self.admit_on(actor, op, true, &l.c)?;
        let key = match self
            .ctx
            .keys
            .begin_digest(
                workspace_id,
                actor,
                format!("{}/{candidate_id}", op.as_str()),
                idempotency_key,
                digest.to_string(),
            )
            .await?
        {
            Prologue::Fresh(keyed) => Some(MutationKey {
                workspace_id: workspace_id.to_string(),
                actor_key: actor_key.clone(),
                keyed,
            }),
            // The same call again: answered with the candidate as it is now.
            Prologue::Replay(_) => None,
        };
        Ok(Begun {
            l,
            actor_key,
            key,
            guard,
            admitted,
        })
    }

    /// The end of an idempotent mutation begun with [`Candidates::begin_mutation`]: records it in
    /// the candidate's history and saves the candidate together with the idempotency binding,
    /// in one compare-and-set on the version loaded at the beginning.
    pub(crate) async fn save_mutation(
        &self,
        l: &mut Loaded,
        key: &MutationKey,
        operation: MutationOperation,
        result_id: String,
    ) -> Result<(), ServiceError> {
        l.c.record_mutation(key.history(operation, result_id.clone()));
        self.save(l, Some(key.binding(result_id)), None).await
    }

    pub async fn load_candidate(
        &self,
        workspace_id: &str,
        cid: &str,
    ) -> Result<Candidate, ServiceError> {
        Ok(self.load(workspace_id, cid).await?.c)
    }

    pub(crate) async fn load(&self, workspace_id: &str, cid: &str) -> Result<Loaded, ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "candidate {cid:?} not found in workspace {workspace_id:?}"
            ))
        };
        if !cid.starts_with("cand_") || !crate::ids::is_creation_key(&cid[5..]) {
            return Err(not_found());
        }
        let stored = self
            .ctx
            .data
            .store
            .candidate(cid)
            .await?
            .ok_or_else(not_found)?;
        let c: Candidate = serde_json::from_str(&stored.record)
            .map_err(|e| ServiceError::record(format!("candidate {cid} record"), e))?;
        if c.workspace_id != workspace_id {
            return Err(not_found());
        }
        let a: Assembly = serde_json::from_str(&stored.assembly)
            .map_err(|e| ServiceError::record(format!("candidate {cid} journal"), e))?;
        Ok(Loaded {
            before: events::Before::of(&c),
            c,
            a,
            stored_version: stored.version,
        })
    }

    /// Saves `l` as the next version (compare-and-set on the stored one).
    pub(crate) async fn save(
        &self,
        l: &mut Loaded,
        binding: Option<Binding>,
        purge_after: Option<String>,
    ) -> Result<(), ServiceError> {
        let new_version = l.stored_version + 1;
        l.c.version = new_version;
        let record = serde_json::to_string(&l.c).expect("a candidate serializes");
        if record.len() > MAX_AGGREGATE_BYTES {
            return Err(ServiceError::exhausted(format!(
                "candidate aggregate would be {} bytes; the limit is {MAX_AGGREGATE_BYTES}",
                record.len()
            )));
        }
        let assembly = serde_json::to_string(&l.a).expect("a journal serializes");
        let events = events::of_save(&l.before, &l.c, &self.ctx.now_rfc3339());
        self.ctx
            .data
            .store
            .save_candidate(
                &l.c.candidate_id,
                l.stored_version,
                new_version,
                l.c.state,
                l.c.delivery_request.as_ref().map(|r| r.state),
                record,
                assembly,
                purge_after,
                binding,
                events,
            )
            .await?;
        l.stored_version = new_version;
        l.before = events::Before::of(&l.c);
        Ok(())
    }

    /// How the workspace's deliveries land (`history`; the default for an unknown one).
    pub(super) fn history_of(&self, workspace_id: &str) -> crate::config::History {
        self.ctx
            .config
            .workspaces
            .get(workspace_id)
            .map(|w| w.history)
            .unwrap_or_default()
    }

    pub(super) fn stamp_time(&self, c: &Candidate) -> i64 {
        parse_time(&c.created_at)
            .map(|t| t.unix_timestamp())
            .unwrap_or(0)
    }

    /// Why a conflicted or frozen candidate's owned evidence cannot be validated, if it cannot.
    /// `verify_checksums` re-hashes owned transcripts; otherwise only their presence is checked
    /// (cheap enough for every read).
    pub(super) fn owned_evidence_problem(
        &self,
        c: &Candidate,
        verify_checksums: bool,
    ) -> Result<Option<String>, ServiceError> {
        owned_problem_of(
            self.ctx.repo(&c.workspace_id),
            &self.candidate_dir(&c.candidate_id),
            c,
            verify_checksums,
        )
    }

    /// [`Candidates::owned_evidence_problem`] on the blocking pool, for hot read paths: the checks
    /// run on shared copies, so no async worker blocks and none hands its core off (as
    /// `block_in_place` would, on every call).
    pub(super) async fn owned_evidence_problem_off_runtime(
        &self,
        c: &std::sync::Arc<Candidate>,
    ) -> Result<Option<String>, ServiceError> {
        let repo = self.ctx.repo(&c.workspace_id).clone();
        let dir = self.candidate_dir(&c.candidate_id);
        let c = c.clone();
        tokio::task::spawn_blocking(move || owned_problem_of(&repo, &dir, &c, false))
            .await
            .expect("the owned-evidence check does not panic")
    }

    /// The candidate record alone (no journal), shared: parsed once per stored version and
    /// kept in [`Candidates::read_cache`]. For reads only; a change always goes through `load`.
    pub(crate) async fn load_shared(
        &self,
        workspace_id: &str,
        cid: &str,
    ) -> Result<(u64, std::sync::Arc<Candidate>), ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "candidate {cid:?} not found in workspace {workspace_id:?}"
            ))
        };
        if !cid.starts_with("cand_") || !crate::ids::is_creation_key(&cid[5..]) {
            return Err(not_found());
        }
        let cached = self.read_cache_get(cid);
        let (version, record) = self
            .ctx
            .data
            .store
            .candidate_record_since(cid, cached.as_ref().map(|(v, _)| *v))
            .await?
            .ok_or_else(not_found)?;
        let c = match (record, cached) {
            (None, Some((_, c))) => c,
            (Some(record), _) => {
                let c: Candidate = serde_json::from_str(&record)
                    .map_err(|e| ServiceError::record(format!("candidate {cid} record"), e))?;
                let c = std::sync::Arc::new(c);
                self.read_cache_put(cid, version, c.clone());
                c
            }
            (None, None) => {
                return Err(ServiceError::internal(format!(
                    "candidate {cid}: the store withheld a record nobody holds"
                )));
            }
        };
        if c.workspace_id != workspace_id {
            return Err(not_found());
        }
        Ok((version, c))
    }

    fn read_cache_get(&self, cid: &str) -> Option<(u64, std::sync::Arc<Candidate>)> {
        self.read_cache
            .lock()
            .expect("the read cache lock is never poisoned")
            .get(cid)
            .cloned()
    }

    fn read_cache_put(&self, cid: &str, version: u64, c: std::sync::Arc<Candidate>) {
        let mut cache = self
            .read_cache
            .lock()
            .expect("the read cache lock is never poisoned");
        if cache.len() >= limits::CANDIDATE_READ_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(cid.to_string(), (version, c));
    }

    /// `failed_precondition` unless every owned ref and transcript copy (checksummed) is intact.
    pub(crate) fn require_owned_evidence(&self, c: &Candidate) -> Result<(), ServiceError> {
        match self.owned_evidence_problem(c, true)? {
            None => Ok(()),
            Some(reason) => Err(ServiceError::precondition(format!(
                "candidate is unavailable: {reason}"
            ))),
        }
    }

    /// The host-side check run after a candidate verification's container is destroyed: the
    /// candidate-owned refs and transcript copies must be exactly as before.
    pub(crate) fn owned_evidence_check(
        &self,
        c: &Candidate,
    ) -> crate::engine::runner::pipeline::ExtraSourceCheck {
        let repo = self.ctx.repo(&c.workspace_id).clone();
        let dir = self.candidate_dir(&c.candidate_id);
        let c = c.clone();
        std::sync::Arc::new(move || match owned_problem_of(&repo, &dir, &c, true) {
            Ok(None) => None,
            Ok(Some(reason)) => Some(format!("candidate-owned evidence changed: {reason}")),
            Err(e) => Some(format!(
                "candidate-owned evidence could not be checked: {e}"
            )),
        })
    }
}
pub(super) fn input_ref(cid: &str, i: usize) -> String {
    format!("refs/airlock/candidates/{cid}/inputs/{i}")
}

pub(super) fn revision_ref(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/revision")
}

pub(super) fn work_ref(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/work")
}

pub(super) fn conflict_ref(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/conflict")
}

/// The commit of resolution batch `n` (its parent holds the merge before it).
pub(super) fn resolution_ref(cid: &str, n: usize) -> String {
    format!("refs/airlock/candidates/{cid}/resolutions/{n}")
}

pub(super) fn candidate_refs_prefix(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/")
}

/// Every ref a candidate can own: its inputs, the work and conflict commits, the revision.
pub(super) fn owned_ref_names(c: &Candidate) -> Vec<String> {
    let cid = &c.candidate_id;
    let mut names: Vec<String> = (0..c.inputs.len()).map(|i| input_ref(cid, i)).collect();
    names.extend([work_ref(cid), conflict_ref(cid), revision_ref(cid)]);
    names
}

/// Why `c`'s owned refs or transcript copies cannot be validated, if they cannot.
pub(super) fn owned_problem_of(
    repo: &Repo,
    candidate_dir: &std::path::Path,
    c: &Candidate,
    verify_checksums: bool,
) -> Result<Option<String>, ServiceError> {
    if !matches!(c.state, CandidateState::Frozen | CandidateState::Conflicted) {
        return Ok(None);
    }
    let mut names: Vec<String> = (0..c.inputs.len())
        .map(|i| input_ref(&c.candidate_id, i))
        .collect();
    if c.state == CandidateState::Frozen {
        names.push(revision_ref(&c.candidate_id));
    }
    // The cheap check (every read) may use remembered ref answers; the checksummed one, run
    // before consequential actions, always asks git.
    let owned = if verify_checksums {
        repo.refs_named(&names)?
    } else {
        repo.refs_named_remembered(&names)?
    };
    for (i, input) in c.inputs.iter().enumerate() {
        if owned.get(&input_ref(&c.candidate_id, i)) != Some(&input.submission.retained_revision) {
            return Ok(Some(format!("owned input {i} is missing or changed")));
        }
        if let (Some(tid), Some(sum)) = (&input.transcript_id, &input.transcript_checksum) {
            let path = candidate_dir.join("transcripts").join(tid);
            let ok = if verify_checksums {
                std::fs::read(&path).is_ok_and(|b| hex::encode(Sha256::digest(&b)) == *sum)
            } else {
                std::fs::metadata(&path).is_ok_and(|m| m.is_file())
            };
            if !ok {
                return Ok(Some(format!(
                    "owned transcript {tid} is missing or fails its checksum"
                )));
            }
        }
    }
    if c.state == CandidateState::Frozen
        && owned.get(&revision_ref(&c.candidate_id)) != c.candidate_revision.as_ref()
    {
        return Ok(Some(
            "the candidate-owned revision ref is missing or changed".into(),
        ));
    }
    Ok(None)
}

pub(super) fn frozen_revision(c: &Candidate) -> Result<String, ServiceError> {
    match (c.state, &c.candidate_revision) {
        (CandidateState::Frozen, Some(rev)) => Ok(rev.clone()),
        (state, _) => Err(ServiceError::precondition(format!(
            "candidate is {}; this needs a frozen candidate",
            state.as_str()
        ))),
    }
}
