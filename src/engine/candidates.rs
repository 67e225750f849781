//! Candidate assembly: prepare, show, list, patch, resolve, delete and expiry (seed 001).
//!
//! Durable order: the `preparing` aggregate (with its ordered inputs) is saved before any Git
//! change; candidate-owned refs and transcript copies are made next, and every later step uses
//! only those; assembly steps are deterministic (fixed commit identity and time), so a step
//! repeated after a crash produces the same objects. A resolution's intent is saved before Git
//! changes. Deletion and expiry persist their fence before removing anything.

use super::evidence::evidence_ref_name;
use super::service::{Actor, Admission, Service, ServiceError, blocking, parse_time};
use crate::artifacts::write_atomic;
use crate::candidate::MAX_TRANSCRIPT_BYTES;
use crate::candidate::{
    self, Assembly, CANDIDATE_LIFETIME, Candidate, CandidateEvent, CandidateInput, CandidateState,
    CandidateSummary, MAX_AGGREGATE_BYTES, MAX_PATCH_BYTES, MAX_RESOLVE_FILES, MAX_SNAPSHOT_BYTES,
    MAX_SUBMISSIONS, Mutation, PendingResolution, ResolveFile, SOURCE_GIT, SOURCE_TRANSCRIPT,
    SubmissionRef, TOMBSTONE_RETENTION,
};
use crate::config::Permission;
use crate::staging::Repo;
use crate::staging::plumbing::{CommitStamp, RefOp};
use crate::store::{Binding, Inserted};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// `integration.prepare` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrepareParams {
    pub workspace_id: String,
    pub submissions: Vec<SubmissionRef>,
    pub target_ref: String,
    pub expected_target_revision: String,
    #[serde(default)]
    pub required_sources: Option<Vec<String>>,
    #[serde(default)]
    pub mission_id: Option<String>,
    pub idempotency_key: String,
}

/// `integration.show`, `integration.patch` and `integration.delete` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateParams {
    pub workspace_id: String,
    pub candidate_id: String,
}

/// `integration.list` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub workspace_id: String,
    #[serde(default)]
    pub limit: Option<u32>,
}

/// `integration.resolve` parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveParams {
    pub workspace_id: String,
    pub candidate_id: String,
    #[serde(default)]
    pub expected_version: Option<i64>,
    pub files: Vec<ResolveFile>,
    pub idempotency_key: String,
}

/// `integration.patch` result.
#[derive(Debug, Clone, Serialize)]
pub struct PatchResult {
    pub patch: String,
    pub truncated: bool,
}

fn input_ref(cid: &str, i: usize) -> String {
    format!("refs/airlock/candidates/{cid}/inputs/{i}")
}
fn revision_ref(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/revision")
}
fn work_ref(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/work")
}
fn conflict_ref(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/conflict")
}
fn candidate_refs_prefix(cid: &str) -> String {
    format!("refs/airlock/candidates/{cid}/")
}

/// A loaded candidate with its private journal and stored version.
pub(crate) struct Loaded {
    pub(crate) c: Candidate,
    pub(crate) a: Assembly,
    stored_version: u64,
}

impl Service {
    fn candidate_dir(&self, cid: &str) -> PathBuf {
        self.data.layout.candidate_dir(cid)
    }

    /// The candidate, if it belongs to `workspace_id` (otherwise `not_found`).
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
            .data
            .store
            .candidate(cid)
            .await?
            .ok_or_else(not_found)?;
        let c: Candidate = serde_json::from_str(&stored.record)
            .map_err(|e| ServiceError::Internal(format!("candidate {cid} record: {e}")))?;
        if c.workspace_id != workspace_id {
            return Err(not_found());
        }
        let a: Assembly = serde_json::from_str(&stored.assembly)
            .map_err(|e| ServiceError::Internal(format!("candidate {cid} journal: {e}")))?;
        Ok(Loaded {
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
            return Err(ServiceError::ResourceExhausted(format!(
                "candidate aggregate would be {} bytes; the limit is {MAX_AGGREGATE_BYTES}",
                record.len()
            )));
        }
        let assembly = serde_json::to_string(&l.a).expect("a journal serializes");
        self.data
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
            )
            .await?;
        l.stored_version = new_version;
        Ok(())
    }

    fn stamp_time(&self, c: &Candidate) -> i64 {
        parse_time(&c.created_at)
            .map(|t| t.unix_timestamp())
            .unwrap_or(0)
    }

    /// `integration.prepare`.
    pub async fn prepare(
        &self,
        actor: &Actor,
        p: PrepareParams,
    ) -> Result<Candidate, ServiceError> {
        self.authorize(actor, &p.workspace_id, Permission::Integrate)?;
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(ServiceError::InvalidArgument)?;
        let required_sources = p
            .required_sources
            .clone()
            .unwrap_or_else(|| vec![SOURCE_GIT.to_string()]);
        let key_params = PrepareParams {
            idempotency_key: String::new(),
            required_sources: Some(required_sources.clone()),
            ..p.clone()
        };
        let digest = candidate::digest(&key_params);
        let actor_key = actor.key();
        if let Some((d, cid)) = self
            .data
            .store
            .binding(
                &p.workspace_id,
                &actor_key,
                "integration.prepare",
                &p.idempotency_key,
            )
            .await?
        {
            return self
                .replay_prepare(actor, &p.workspace_id, &d, &digest, &cid)
                .await;
        }
        self.admit(Admission {
            operation: "integration.prepare",
            mutation: true,
            actor,
            workspace_id: &p.workspace_id,
            mission_id: p.mission_id.as_deref(),
            new_candidate: true,
        })?;
        if p.submissions.is_empty() || p.submissions.len() > MAX_SUBMISSIONS {
            return Err(ServiceError::InvalidArgument(format!(
                "submissions has {} entries; it needs 1..={MAX_SUBMISSIONS}",
                p.submissions.len()
            )));
        }
        candidate::check_target_ref(&p.target_ref).map_err(ServiceError::InvalidArgument)?;
        if required_sources.is_empty() {
            return Err(ServiceError::InvalidArgument(
                "required_sources must not be empty".into(),
            ));
        }
        for (i, s) in required_sources.iter().enumerate() {
            if s != SOURCE_GIT && s != SOURCE_TRANSCRIPT {
                return Err(ServiceError::InvalidArgument(format!(
                    "required_sources[{i}] {s:?} is not one of \"git\", \"transcript\""
                )));
            }
        }
        if !candidate::is_full_oid(&p.expected_target_revision) {
            return Err(ServiceError::InvalidArgument(
                "expected_target_revision must be a full lowercase commit id".into(),
            ));
        }
        let repo = self.repo(&p.workspace_id);
        if !blocking(|| repo.is_commit(&p.expected_target_revision)) {
            return Err(ServiceError::FailedPrecondition(format!(
                "expected_target_revision {} is not a commit in workspace {:?}",
                p.expected_target_revision, p.workspace_id
            )));
        }
        // Validate every submission, in order, against the durable packets.
        let evidence_refs: std::collections::HashMap<String, String> = repo
            .refs_under("refs/airlock/evidence/")?
            .into_iter()
            .collect();
        let mut inputs = Vec::with_capacity(p.submissions.len());
        let mut snapshot_bytes = 0;
        let mut transcript_bytes = 0usize;
        for (i, s) in p.submissions.iter().enumerate() {
            let field = format!("submissions[{i}]");
            if s.workspace_id != p.workspace_id {
                return Err(ServiceError::FailedPrecondition(format!(
                    "{field} is from workspace {:?}, not {:?}",
                    s.workspace_id, p.workspace_id
                )));
            }
            // Another workspace's packet gets the same answer as a missing one, so a caller
            // cannot probe which evidence refs exist elsewhere.
            let missing = || {
                ServiceError::FailedPrecondition(format!(
                    "{field}.evidence_ref {:?} does not exist",
                    s.evidence_ref
                ))
            };
            let packet = self
                .load_packet(&s.evidence_ref)
                .await?
                .filter(|packet| packet.workspace_id == s.workspace_id)
                .ok_or_else(missing)?;
            if packet.run_id != s.run_id {
                return Err(ServiceError::FailedPrecondition(format!(
                    "{field}: the packet belongs to run {:?}, not {:?}",
                    packet.run_id, s.run_id
                )));
            }
            if packet.retained_revision != s.retained_revision {
                return Err(ServiceError::FailedPrecondition(format!(
                    "{field}.retained_revision {} is not the packet's retained revision",
                    s.retained_revision
                )));
            }
            if self.packet_expired(&packet) {
                return Err(ServiceError::FailedPrecondition(format!(
                    "{field}: evidence {} has expired",
                    packet.evidence_ref
                )));
            }
            for src in &required_sources {
                let available = match src.as_str() {
                    SOURCE_GIT => {
                        evidence_refs.get(&evidence_ref_name(&packet.evidence_ref))
                            == Some(&packet.retained_revision)
                    }
                    _ => packet.transcript_sha256.as_deref().is_some_and(|sum| {
                        std::fs::read(self.transcript_path(&packet.evidence_ref))
                            .is_ok_and(|b| hex::encode(Sha256::digest(&b)) == sum)
                    }),
                };
                if !available {
                    return Err(ServiceError::FailedPrecondition(format!(
                        "{field}: required source {src:?} of evidence {} is missing or unavailable",
                        packet.evidence_ref
                    )));
                }
            }
            snapshot_bytes += serde_json::to_string(&packet).map(|s| s.len()).unwrap_or(0);
            if snapshot_bytes > MAX_SNAPSHOT_BYTES {
                return Err(ServiceError::ResourceExhausted(format!(
                    "evidence snapshots exceed {MAX_SNAPSHOT_BYTES} bytes"
                )));
            }
            let has_transcript = packet.transcript_sha256.is_some();
            if has_transcript {
                transcript_bytes += std::fs::metadata(self.transcript_path(&packet.evidence_ref))
                    .map(|m| m.len() as usize)
                    .unwrap_or(0);
                if transcript_bytes > MAX_TRANSCRIPT_BYTES {
                    return Err(ServiceError::ResourceExhausted(format!(
                        "{field}: the candidate's owned transcripts would total {transcript_bytes} bytes; the limit is {MAX_TRANSCRIPT_BYTES}"
                    )));
                }
            }
            inputs.push(CandidateInput {
                submission: s.clone(),
                base_revision: packet.base_revision.clone(),
                transcript_id: has_transcript.then(|| i.to_string()),
                transcript_checksum: if has_transcript {
                    packet.transcript_sha256.clone()
                } else {
                    None
                },
                evidence: packet,
            });
        }
        let cid = format!("cand_{}", crate::ids::new_creation_key());
        let now = self.clock.now();
        let c = Candidate {
            candidate_id: cid.clone(),
            workspace_id: p.workspace_id.clone(),
            mission_id: None,
            mission_accepted_set_version: None,
            submissions: p.submissions.clone(),
            required_sources,
            inputs,
            target_ref: p.target_ref.clone(),
            expected_target_revision: p.expected_target_revision.clone(),
            candidate_revision: None,
            state: CandidateState::Preparing,
            conflicts: None,
            applied_inputs: 0,
            verifications: vec![],
            delivery_request: None,
            delivery_receipt: None,
            created_at: crate::ids::rfc3339(now),
            expires_at: crate::ids::rfc3339(now + CANDIDATE_LIFETIME),
            error: None,
            version: 1,
            mutations: vec![Mutation {
                actor_key: actor_key.clone(),
                operation: "integration.prepare".into(),
                idempotency_key: p.idempotency_key.clone(),
                digest: digest.clone(),
                result_id: cid.clone(),
            }],
        };
        let a = Assembly {
            acc_commit: p.expected_target_revision.clone(),
            next_input: 0,
            prepare_actor_key: actor_key.clone(),
            prepare_key: p.idempotency_key.clone(),
            prepare_digest: digest.clone(),
            ..Default::default()
        };
        let inserted = self
            .data
            .store
            .insert_candidate(
                Binding {
                    workspace_id: p.workspace_id.clone(),
                    actor_key,
                    operation: "integration.prepare".into(),
                    idempotency_key: p.idempotency_key.clone(),
                    digest: digest.clone(),
                    result_id: cid.clone(),
                },
                c.created_at.clone(),
                c.expires_at.clone(),
                CandidateState::Preparing.as_str(),
                serde_json::to_string(&c).expect("a candidate serializes"),
                serde_json::to_string(&a).expect("a journal serializes"),
            )
            .await?;
        match inserted {
            Inserted::New => {
                super::crash::point(super::crash::CrashPoint::PrepareAfterInsert);
                self.continue_preparing(&p.workspace_id, &cid).await
            }
            Inserted::Existing {
                digest: d,
                result_id,
            } => {
                self.replay_prepare(actor, &p.workspace_id, &d, &digest, &result_id)
                    .await
            }
        }
    }

    async fn replay_prepare(
        &self,
        _actor: &Actor,
        ws: &str,
        bound: &str,
        digest: &str,
        cid: &str,
    ) -> Result<Candidate, ServiceError> {
        if bound != digest {
            return Err(ServiceError::Conflict(
                "idempotency_key was already used with different parameters".into(),
            ));
        }
        self.continue_preparing(ws, cid).await
    }

    /// Resumes a `preparing` candidate from its durable inputs; returns any other as it is.
    async fn continue_preparing(&self, ws: &str, cid: &str) -> Result<Candidate, ServiceError> {
        let lock = self.candidate_lock(cid);
        let _guard = lock.lock().await;
        let mut l = self.load(ws, cid).await?;
        if l.c.state != CandidateState::Preparing {
            return Ok(l.c);
        }
        let repo = self.repo(ws).clone();
        let started = std::time::Instant::now();
        if let Err(reason) = blocking(|| self.retain_inputs(&repo, &l.c)) {
            l.c.state = l.c.state.on(CandidateEvent::LoseEvidence)?;
            l.c.error = Some(reason);
            self.save(&mut l, None, None).await?;
            return Ok(l.c);
        }
        super::crash::point(super::crash::CrashPoint::PrepareAfterRetain);
        let retained = started.elapsed();
        blocking(|| self.assemble(&repo, &mut l))?;
        let assembled = started.elapsed() - retained;
        self.save(&mut l, None, None).await?;
        tracing::info!(
            candidate_id = %cid,
            inputs = l.c.inputs.len(),
            state = l.c.state.as_str(),
            retain_ms = retained.as_millis() as u64,
            assemble_ms = assembled.as_millis() as u64,
            save_ms = (started.elapsed() - retained - assembled).as_millis() as u64,
            "candidate assembled"
        );
        Ok(l.c)
    }

    /// Copies every input into candidate-owned refs and transcript files (idempotent).
    fn retain_inputs(&self, repo: &Repo, c: &Candidate) -> Result<(), String> {
        let owned: std::collections::HashMap<String, String> = repo
            .refs_under(&candidate_refs_prefix(&c.candidate_id))
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        let evidence: std::collections::HashMap<String, String> = repo
            .refs_under("refs/airlock/evidence/")
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        let mut creates = Vec::new();
        for (i, input) in c.inputs.iter().enumerate() {
            let name = input_ref(&c.candidate_id, i);
            match owned.get(&name) {
                Some(v) if *v == input.submission.retained_revision => {}
                Some(v) => {
                    return Err(format!(
                        "owned input ref {name} is at {v}, not the retained revision"
                    ));
                }
                None => {
                    let source = evidence.get(&evidence_ref_name(&input.evidence.evidence_ref));
                    if source != Some(&input.submission.retained_revision)
                        && !repo.is_commit(&input.submission.retained_revision)
                    {
                        return Err(format!(
                            "input {i}: the retained revision is no longer available"
                        ));
                    }
                    creates.push(RefOp::Create {
                        name,
                        new: input.submission.retained_revision.clone(),
                    });
                }
            }
        }
        repo.update_refs(&creates).map_err(|e| e.to_string())?;
        let dir = self.data.layout.candidate_transcripts(&c.candidate_id);
        for input in &c.inputs {
            let (Some(tid), Some(sum)) = (&input.transcript_id, &input.transcript_checksum) else {
                continue;
            };
            let dest = dir.join(tid);
            if std::fs::read(&dest).is_ok_and(|b| hex::encode(Sha256::digest(&b)) == *sum) {
                continue;
            }
            let bytes = std::fs::read(self.transcript_path(&input.evidence.evidence_ref))
                .map_err(|e| format!("input {tid}: transcript unavailable: {e}"))?;
            if hex::encode(Sha256::digest(&bytes)) != *sum {
                return Err(format!("input {tid}: transcript checksum mismatch"));
            }
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            write_atomic(&dir, tid, &bytes).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Applies inputs from `next_input` until a conflict or the end (then freezes).
    fn assemble(&self, repo: &Repo, l: &mut Loaded) -> Result<(), ServiceError> {
        let cid = l.c.candidate_id.clone();
        let time = self.stamp_time(&l.c);
        let owned: std::collections::HashMap<String, String> = repo
            .refs_under(&candidate_refs_prefix(&cid))?
            .into_iter()
            .collect();
        let start_commit = l.a.acc_commit.clone();
        while l.a.next_input < l.c.inputs.len() {
            let i = l.a.next_input;
            let input = &l.c.inputs[i];
            let theirs = owned
                .get(&input_ref(&cid, i))
                .ok_or_else(|| ServiceError::Internal(format!("owned input ref {i} vanished")))?;
            // When the input's base is already part of the accumulated history, git picks the
            // merge bases itself, exactly as `git merge` would: in a criss-cross history an
            // explicit base that is only one of several merge bases reports conflicts git's
            // own merge does not. Otherwise the input's declared base is the only one we have.
            let base = if repo.is_ancestor(&input.base_revision, &l.a.acc_commit)? {
                None
            } else {
                Some(input.base_revision.as_str())
            };
            let merged = repo.merge_tree(base, &l.a.acc_commit, theirs)?;
            if merged.conflicts.is_empty() {
                let stamp = CommitStamp {
                    message: &format!("airlock: apply input {i} of {cid}"),
                    time,
                };
                let next = repo.commit_tree(&merged.tree, &[&l.a.acc_commit], &stamp)?;
                l.a.acc_commit = next;
                l.a.next_input += 1;
                l.c.applied_inputs = l.a.next_input;
            } else {
                let stamp = CommitStamp {
                    message: &format!("airlock: conflicted merge of input {i} of {cid}"),
                    time,
                };
                let held = repo.commit_tree(&merged.tree, &[&l.a.acc_commit], &stamp)?;
                // Intermediate commits stay reachable (safe from gc) through the work ref.
                if l.a.acc_commit != start_commit {
                    self.set_ref(repo, &work_ref(&cid), &l.a.acc_commit)?;
                }
                self.set_ref(repo, &conflict_ref(&cid), &held)?;
                l.a.conflict_tree = Some(merged.tree);
                l.c.conflicts = Some(merged.conflicts);
                l.c.state = l.c.state.on(CandidateEvent::Conflict)?;
                return Ok(());
            }
        }
        if l.a.acc_commit != start_commit {
            self.set_ref(repo, &work_ref(&cid), &l.a.acc_commit)?;
        }
        let tree = repo.commit_tree_of(&l.a.acc_commit)?;
        let stamp = CommitStamp {
            message: &format!(
                "airlock candidate {cid}\n\n{} input(s) onto {}",
                l.c.inputs.len(),
                l.c.expected_target_revision
            ),
            time,
        };
        let frozen = repo.commit_tree(&tree, &[&l.c.expected_target_revision], &stamp)?;
        match repo.ref_value(&revision_ref(&cid))? {
            Some(v) if v == frozen => {}
            Some(v) => {
                return Err(ServiceError::Internal(format!(
                    "candidate revision ref already at {v}"
                )));
            }
            None => repo.update_refs(&[RefOp::Create {
                name: revision_ref(&cid),
                new: frozen.clone(),
            }])?,
        }
        if let Some(old) = repo.ref_value(&conflict_ref(&cid))? {
            repo.update_refs(&[RefOp::Delete {
                name: conflict_ref(&cid),
                old,
            }])?;
        }
        l.c.candidate_revision = Some(frozen);
        l.c.state = l.c.state.on(CandidateEvent::Freeze)?;
        l.c.conflicts = None;
        l.a.conflict_tree = None;
        Ok(())
    }

    fn set_ref(&self, repo: &Repo, name: &str, new: &str) -> Result<(), ServiceError> {
        let op = match repo.ref_value(name)? {
            Some(old) if old == new => return Ok(()),
            Some(old) => RefOp::Update {
                name: name.into(),
                new: new.into(),
                old,
            },
            None => RefOp::Create {
                name: name.into(),
                new: new.into(),
            },
        };
        Ok(repo.update_refs(&[op])?)
    }

    /// `integration.show`. A candidate whose owned evidence is gone becomes `unavailable`. The
    /// common path takes no lock and one `for-each-ref`; only a state change takes the lock.
    pub async fn show(&self, actor: &Actor, p: CandidateParams) -> Result<Candidate, ServiceError> {
        self.authorize(actor, &p.workspace_id, Permission::View)?;
        let l = self.load(&p.workspace_id, &p.candidate_id).await?;
        if blocking(|| self.owned_evidence_problem(&l.c, false))?.is_none() {
            return Ok(l.c);
        }
        let lock = self.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self.load(&p.workspace_id, &p.candidate_id).await?;
        if let Some(reason) = blocking(|| self.owned_evidence_problem(&l.c, false))? {
            l.c.state = l.c.state.on(CandidateEvent::LoseEvidence)?;
            l.c.error = Some(reason);
            self.save(&mut l, None, None).await?;
        }
        Ok(l.c)
    }

    /// Why a conflicted or frozen candidate's owned evidence cannot be validated, if it cannot.
    /// `verify_checksums` re-hashes owned transcripts; otherwise only their presence is checked
    /// (cheap enough for every read).
    fn owned_evidence_problem(
        &self,
        c: &Candidate,
        verify_checksums: bool,
    ) -> Result<Option<String>, ServiceError> {
        owned_problem_of(
            self.repo(&c.workspace_id),
            &self.candidate_dir(&c.candidate_id),
            c,
            verify_checksums,
        )
    }

    /// `failed_precondition` unless every owned ref and transcript copy (checksummed) is intact.
    pub(crate) fn require_owned_evidence(&self, c: &Candidate) -> Result<(), ServiceError> {
        match self.owned_evidence_problem(c, true)? {
            None => Ok(()),
            Some(reason) => Err(ServiceError::FailedPrecondition(format!(
                "candidate is unavailable: {reason}"
            ))),
        }
    }

    /// The host-side check run after a candidate verification's container is destroyed: the
    /// candidate-owned refs and transcript copies must be exactly as before.
    pub(crate) fn owned_evidence_check(&self, c: &Candidate) -> super::verify::ExtraSourceCheck {
        let repo = self.repo(&c.workspace_id).clone();
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

    /// `integration.list`: bounded summaries, newest first.
    pub async fn list(
        &self,
        actor: &Actor,
        p: ListParams,
    ) -> Result<Vec<CandidateSummary>, ServiceError> {
        self.authorize(actor, &p.workspace_id, Permission::View)?;
        let limit = p.limit.unwrap_or(crate::limits::DEFAULT_LIST_LIMIT);
        if !(1..=crate::limits::MAX_CANDIDATE_LIST_LIMIT).contains(&limit) {
            return Err(ServiceError::InvalidArgument(format!(
                "limit is {limit}; it must be between 1 and {}",
                crate::limits::MAX_CANDIDATE_LIST_LIMIT
            )));
        }
        let rows = self
            .data
            .store
            .list_candidates(&p.workspace_id, limit)
            .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str::<Candidate>(r)
                    .map(|c| c.summary())
                    .map_err(|e| ServiceError::Internal(format!("candidate record: {e}")))
            })
            .collect()
    }

    /// `integration.patch`: the exact diff from the target to the frozen revision, capped.
    pub async fn patch(
        &self,
        actor: &Actor,
        p: CandidateParams,
    ) -> Result<PatchResult, ServiceError> {
        self.gate(
            actor,
            &p.workspace_id,
            Permission::View,
            "integration.patch",
            false,
        )?;
        let l = self.load(&p.workspace_id, &p.candidate_id).await?;
        let (CandidateState::Frozen, Some(rev)) = (l.c.state, &l.c.candidate_revision) else {
            return Err(ServiceError::FailedPrecondition(format!(
                "candidate is {}; a patch needs a frozen candidate",
                l.c.state.as_str()
            )));
        };
        let (patch, truncated) = blocking(|| {
            self.require_owned_evidence(&l.c)?;
            self.repo(&p.workspace_id)
                .diff_bounded(&l.c.expected_target_revision, rev, MAX_PATCH_BYTES)
                .map_err(ServiceError::from)
        })?;
        Ok(PatchResult { patch, truncated })
    }

    /// `integration.resolve`.
    pub async fn resolve(
        &self,
        actor: &Actor,
        p: ResolveParams,
    ) -> Result<Candidate, ServiceError> {
        self.gate(
            actor,
            &p.workspace_id,
            Permission::Integrate,
            "integration.resolve",
            true,
        )?;
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(ServiceError::InvalidArgument)?;
        let expected_version = match p.expected_version {
            Some(v) if v > 0 => v as u64,
            Some(v) => {
                return Err(ServiceError::InvalidArgument(format!(
                    "expected_version is {v}; it must be positive"
                )));
            }
            None => {
                return Err(ServiceError::InvalidArgument(
                    "expected_version is required".into(),
                ));
            }
        };
        if p.files.is_empty() || p.files.len() > MAX_RESOLVE_FILES {
            return Err(ServiceError::InvalidArgument(format!(
                "files has {} entries; it needs 1..={MAX_RESOLVE_FILES}",
                p.files.len()
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, f) in p.files.iter().enumerate() {
            candidate::check_relative_path(&f.path).map_err(|e| {
                ServiceError::InvalidArgument(format!("files[{i}].path {:?} {e}", f.path))
            })?;
            if f.path.starts_with(':') {
                return Err(ServiceError::InvalidArgument(format!(
                    "files[{i}].path {:?} starts with ':', which git reads as pathspec magic",
                    f.path
                )));
            }
            if !seen.insert(f.path.as_str()) {
                return Err(ServiceError::InvalidArgument(format!(
                    "files[{i}].path {:?} is listed twice",
                    f.path
                )));
            }
            match (&f.content, f.delete) {
                (Some(_), true) | (None, false) => {
                    return Err(ServiceError::InvalidArgument(format!(
                        "files[{i}] needs exactly one of content or delete: true"
                    )));
                }
                (Some(c), false) if candidate::has_conflict_markers(c) => {
                    return Err(ServiceError::InvalidArgument(format!(
                        "files[{i}].content for {:?} still has conflict markers",
                        f.path
                    )));
                }
                _ => {}
            }
        }
        // One path may not be a file while another lies beneath it: the tree cannot hold both.
        for (i, f) in p.files.iter().enumerate() {
            if let Some(parent) = candidate::parents(&f.path)
                .into_iter()
                .find(|d| seen.contains(d))
            {
                return Err(ServiceError::InvalidArgument(format!(
                    "files[{i}].path {:?} lies beneath {parent:?}, which the same batch writes or deletes as a file",
                    f.path
                )));
            }
        }
        #[derive(Serialize)]
        struct ResolveDigest<'a> {
            candidate_id: &'a str,
            expected_version: u64,
            files: &'a [ResolveFile],
        }
        let digest = candidate::digest(&ResolveDigest {
            candidate_id: &p.candidate_id,
            expected_version,
            files: &p.files,
        });
        let actor_key = actor.key();
        let operation = format!("integration.resolve/{}", p.candidate_id);
        let lock = self.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self.load(&p.workspace_id, &p.candidate_id).await?;
        if self
            .replayed(
                &p.workspace_id,
                &actor_key,
                &operation,
                &p.idempotency_key,
                &digest,
            )
            .await?
        {
            return Ok(l.c); // completed earlier: the original binding stands
        }
        if l.c.state.is_fenced() {
            return Err(ServiceError::FailedPrecondition(format!(
                "candidate is {}",
                l.c.state.as_str()
            )));
        }
        match &l.a.pending_resolution {
            Some(pending) => {
                let exact = pending.actor_key == actor_key
                    && pending.idempotency_key == p.idempotency_key
                    && pending.digest == digest;
                if !exact {
                    return Err(ServiceError::Conflict(
                        "another resolution is pending on this candidate; retry it exactly first"
                            .into(),
                    ));
                }
            }
            None => {
                if l.c.version != expected_version {
                    return Err(ServiceError::Conflict(format!(
                        "expected_version {expected_version} is stale; the candidate is at version {}",
                        l.c.version
                    )));
                }
                if l.c.state != CandidateState::Conflicted {
                    return Err(ServiceError::FailedPrecondition(format!(
                        "candidate is {}; only a conflicted candidate can be resolved",
                        l.c.state.as_str()
                    )));
                }
                let tree =
                    l.a.conflict_tree.clone().ok_or_else(|| {
                        ServiceError::Internal("conflicted without a tree".into())
                    })?;
                blocking(|| self.check_resolution_paths(&p.workspace_id, &tree, &p.files))?;
                // Durable intent before any Git change.
                l.a.pending_resolution = Some(PendingResolution {
                    actor_key: actor_key.clone(),
                    idempotency_key: p.idempotency_key.clone(),
                    digest: digest.clone(),
                    expected_version,
                    files: p.files.clone(),
                });
                self.save(&mut l, None, None).await?;
                super::crash::point(super::crash::CrashPoint::ResolveAfterIntent);
            }
        }
        if let Err(e) = blocking(|| self.apply_pending_resolution(&mut l)) {
            if matches!(e, ServiceError::InvalidArgument(_)) {
                // The resolution itself cannot be applied: withdraw the intent so the
                // candidate is exactly as it was, and say why.
                l.a.pending_resolution = None;
                self.save(&mut l, None, None).await?;
            }
            return Err(e);
        }
        l.c.record_mutation(Mutation {
            actor_key: actor_key.clone(),
            operation: "integration.resolve".into(),
            idempotency_key: p.idempotency_key.clone(),
            digest: digest.clone(),
            result_id: format!("v{}", l.stored_version + 1),
        });
        let binding = Binding {
            workspace_id: p.workspace_id.clone(),
            actor_key,
            operation,
            idempotency_key: p.idempotency_key.clone(),
            digest,
            result_id: format!("v{}", l.stored_version + 1),
        };
        self.save(&mut l, Some(binding), None).await?;
        Ok(l.c)
    }

    /// Refuses paths that traverse a symlink, or name a directory, in the candidate tree.
    fn check_resolution_paths(
        &self,
        ws: &str,
        tree: &str,
        files: &[ResolveFile],
    ) -> Result<(), ServiceError> {
        let repo = self.repo(ws);
        for (i, f) in files.iter().enumerate() {
            for parent in candidate::parents(&f.path) {
                if let Some(e) = repo.tree_entry(tree, parent)? {
                    if e.mode == "120000" {
                        return Err(ServiceError::InvalidArgument(format!(
                            "files[{i}].path {:?} traverses the symlink {parent:?}",
                            f.path
                        )));
                    }
                    if e.kind != "tree" {
                        return Err(ServiceError::InvalidArgument(format!(
                            "files[{i}].path {:?}: {parent:?} is a file, not a directory",
                            f.path
                        )));
                    }
                }
            }
            if let Some(e) = repo.tree_entry(tree, &f.path)? {
                if e.kind == "tree" || e.mode == "160000" {
                    return Err(ServiceError::InvalidArgument(format!(
                        "files[{i}].path {:?} is a directory or submodule",
                        f.path
                    )));
                }
            } else if f.delete {
                return Err(ServiceError::InvalidArgument(format!(
                    "files[{i}].path {:?} does not exist, so it cannot be deleted",
                    f.path
                )));
            }
        }
        Ok(())
    }

    /// Applies the recorded resolution intent (deterministic, so safe to repeat after a crash),
    /// then continues assembly when no conflict remains.
    fn apply_pending_resolution(&self, l: &mut Loaded) -> Result<(), ServiceError> {
        let pending =
            l.a.pending_resolution
                .clone()
                .ok_or_else(|| ServiceError::Internal("no pending resolution".into()))?;
        let repo = self.repo(&l.c.workspace_id).clone();
        let cid = l.c.candidate_id.clone();
        let tree =
            l.a.conflict_tree
                .clone()
                .ok_or_else(|| ServiceError::Internal("conflicted without a tree".into()))?;
        let mut edits = Vec::new();
        for f in &pending.files {
            match &f.content {
                Some(content) => {
                    let blob = repo.write_blob(content.as_bytes())?;
                    let mode = match repo.tree_entry(&tree, &f.path)? {
                        Some(e) if e.mode == "100755" => "100755",
                        _ => "100644",
                    };
                    edits.push((f.path.clone(), Some((blob, mode.to_string()))));
                }
                None => edits.push((f.path.clone(), None)),
            }
        }
        let new_tree = repo.edit_tree(&tree, &edits).map_err(|e| {
            ServiceError::InvalidArgument(format!(
                "the resolution does not fit the candidate tree: {e}"
            ))
        })?;
        // Postcondition: the new tree holds exactly what was asked for, so a path git dropped
        // or rewrote silently can never be reported as resolved.
        for (path, edit) in &edits {
            let found = repo.tree_entry(&new_tree, path)?;
            let exact = match (edit, &found) {
                (Some((blob, mode)), Some(e)) => {
                    e.kind == "blob" && &e.oid == blob && &e.mode == mode
                }
                (None, None) => true,
                _ => false,
            };
            if !exact {
                return Err(ServiceError::InvalidArgument(format!(
                    "the resolution of {path:?} did not produce that file in the candidate tree (found {found:?}); nothing was saved"
                )));
            }
        }
        let resolved: std::collections::BTreeSet<&str> =
            pending.files.iter().map(|f| f.path.as_str()).collect();
        let remaining: Vec<String> =
            l.c.conflicts
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|c| !resolved.contains(c.as_str()))
                .collect();
        let time = self.stamp_time(&l.c);
        l.a.pending_resolution = None;
        if !remaining.is_empty() {
            let held = repo.commit_tree(
                &new_tree,
                &[&l.a.acc_commit],
                &CommitStamp {
                    message: &format!("airlock: partial resolution of {cid}"),
                    time,
                },
            )?;
            self.set_ref(&repo, &conflict_ref(&cid), &held)?;
            l.a.conflict_tree = Some(new_tree);
            l.c.conflicts = Some(remaining);
            return Ok(());
        }
        let i = l.a.next_input;
        let next = repo.commit_tree(
            &new_tree,
            &[&l.a.acc_commit],
            &CommitStamp {
                message: &format!("airlock: apply resolved input {i} of {cid}"),
                time,
            },
        )?;
        self.set_ref(&repo, &work_ref(&cid), &next)?;
        l.a.acc_commit = next;
        l.a.next_input += 1;
        l.c.applied_inputs = l.a.next_input;
        l.a.conflict_tree = None;
        l.c.conflicts = None;
        l.c.state = l.c.state.on(CandidateEvent::Resolve)?;
        self.assemble(&repo, l)
    }

    /// `integration.delete`: persists the `deleting` fence, then removes owned refs and files.
    pub async fn delete(&self, actor: &Actor, p: CandidateParams) -> Result<(), ServiceError> {
        self.gate(
            actor,
            &p.workspace_id,
            Permission::Integrate,
            "integration.delete",
            true,
        )?;
        let lock = self.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self.load(&p.workspace_id, &p.candidate_id).await?;
        if !l.c.state.is_fenced() {
            l.c.state = l.c.state.on(CandidateEvent::Delete)?;
            l.c.record_mutation(Mutation {
                actor_key: actor.key(),
                operation: "integration.delete".into(),
                idempotency_key: String::new(),
                digest: String::new(),
                result_id: l.c.candidate_id.clone(),
            });
            self.save(&mut l, None, None).await?;
        }
        // Running verifications are cancelled (container destroyed, settled) before cleanup.
        // Workers never take the candidate lock, so holding it here cannot deadlock.
        self.cancel_candidate_verifications(&p.candidate_id).await?;
        self.clean_up_fenced(&mut l).await
    }

    /// Removes everything a fenced candidate owns, then starts its tombstone retention.
    async fn clean_up_fenced(&self, l: &mut Loaded) -> Result<(), ServiceError> {
        let repo = self.repo(&l.c.workspace_id);
        blocking(|| {
            let refs = repo.refs_under(&candidate_refs_prefix(&l.c.candidate_id))?;
            let deletes: Vec<RefOp> = refs
                .into_iter()
                .map(|(name, old)| RefOp::Delete { name, old })
                .collect();
            repo.update_refs(&deletes)
        })?;
        match blocking(|| std::fs::remove_dir_all(self.candidate_dir(&l.c.candidate_id))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ServiceError::Internal(format!(
                    "remove candidate files: {e}"
                )));
            }
        }
        // Verification artifacts share the candidate's retention and deletion boundary (seed
        // 001): artifacts first, then rows. A pass interrupted in between runs again (no purge
        // time is saved until this finished) and removes what is left.
        let verifications = self
            .data
            .store
            .verifications_of_candidate(&l.c.candidate_id)
            .await?;
        if !verifications.is_empty() {
            let artifacts = self.data.artifacts.clone();
            let ids = verifications.clone();
            tokio::task::spawn_blocking(move || artifacts.remove(&ids))
                .await
                .expect("artifact removal does not panic")
                .map_err(|e| {
                    ServiceError::Internal(format!("remove verification artifacts: {e}"))
                })?;
            self.data.store.delete_settled(verifications).await?;
        }
        let purge_after = crate::ids::rfc3339(self.clock.now() + TOMBSTONE_RETENTION);
        l.a = Assembly::default();
        self.save(l, None, Some(purge_after)).await
    }

    /// One expiry pass: fences and cleans expired candidates, finishes interrupted cleanups, and
    /// purges tombstones past their retention. Returns (expired, purged).
    pub async fn expire_candidates(&self) -> Result<(usize, usize), ServiceError> {
        let now = self.clock.now();
        let due = self
            .data
            .store
            .candidates_due(crate::ids::rfc3339(now))
            .await?;
        let (mut expired, mut purged) = (0, 0);
        for (cid, ws, purge_after) in due {
            if !self.config.workspaces.contains_key(&ws) {
                continue;
            }
            let lock = self.candidate_lock(&cid);
            let _guard = lock.lock().await;
            let mut l = match self.load(&ws, &cid).await {
                Ok(l) => l,
                Err(ServiceError::NotFound(_)) => continue, // purged meanwhile
                Err(e) => return Err(e),
            };
            if l.c.state.is_fenced() {
                // Fenced: either awaiting cleanup (no purge time yet) or a tombstone.
                if purge_after
                    .as_deref()
                    .and_then(parse_time)
                    .is_some_and(|t| t <= now)
                {
                    self.data.store.purge_candidate(&cid).await?;
                    purged += 1;
                } else {
                    self.clean_up_fenced(&mut l).await?;
                }
                continue;
            }
            l.c.state = l.c.state.on(CandidateEvent::Expire)?;
            self.save(&mut l, None, None).await?;
            self.cancel_candidate_verifications(&cid).await?;
            self.clean_up_fenced(&mut l).await?;
            expired += 1;
        }
        Ok((expired, purged))
    }
}

/// Why `c`'s owned refs or transcript copies cannot be validated, if they cannot.
fn owned_problem_of(
    repo: &Repo,
    candidate_dir: &std::path::Path,
    c: &Candidate,
    verify_checksums: bool,
) -> Result<Option<String>, ServiceError> {
    if !matches!(c.state, CandidateState::Frozen | CandidateState::Conflicted) {
        return Ok(None);
    }
    let owned: std::collections::HashMap<String, String> = repo
        .refs_under(&candidate_refs_prefix(&c.candidate_id))?
        .into_iter()
        .collect();
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
