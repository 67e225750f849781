//! `integration.prepare`: validate every submission against its durable packet, persist the
//! `preparing` aggregate, retain inputs as candidate-owned refs and transcript copies, assemble.

use super::*;

/// Candidate assembly: `integration.prepare` (validate, persist, retain), the merge loop, and
/// `integration.resolve`. Holds the candidates and the evidence packets prepare reads.
#[derive(Clone)]
pub struct Assembler {
    pub(super) ctx: crate::engine::context::Handles,
    pub(super) candidates: Candidates,
    pub(super) evidence: super::evidence::Evidence,
}

impl Assembler {
    pub fn new(candidates: Candidates, evidence: super::evidence::Evidence) -> Assembler {
        Assembler {
            ctx: candidates.ctx.clone(),
            candidates,
            evidence,
        }
    }
}

impl Assembler {
    /// `integration.prepare`.
    pub async fn prepare(
        &self,
        actor: &Actor,
        p: PrepareParams,
    ) -> Result<Candidate, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Integrate)?;
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        let required_sources = p
            .required_sources
            .clone()
            .unwrap_or_else(|| vec![EvidenceSource::Git]);
        let key_params = PrepareParams {
            idempotency_key: String::new(),
            required_sources: Some(required_sources.clone()),
            ..p.clone()
        };
        let digest = candidate::digest(&key_params);
        let actor_key = actor.key();
        // The key's gate is held until this prepare ends (assembly included): a duplicate
        // waits, then continues or returns the candidate this one made.
        let k = match self
            .ctx
            .keys
            .begin_digest(
                &p.workspace_id,
                actor,
                "integration.prepare",
                &p.idempotency_key,
                digest.clone(),
            )
            .await?
        {
            Prologue::Replay(cid) => {
                return self.replay_prepare(actor, &p.workspace_id, &cid).await;
            }
            Prologue::Fresh(k) => k,
        };
        if p.submissions.is_empty() || p.submissions.len() > MAX_SUBMISSIONS {
            return Err(ServiceError::invalid_field(
                "submissions",
                format!(
                    "submissions has {} entries; it needs 1..={MAX_SUBMISSIONS}",
                    p.submissions.len()
                ),
            ));
        }
        candidate::check_target_ref(&p.target_ref)
            .map_err(|m| ServiceError::invalid_field("target_ref", m))?;
        if let Some(m) = p.mission_id.as_deref().filter(|m| !m.is_empty())
            && !crate::config::is_identifier(m)
        {
            return Err(ServiceError::invalid_field(
                "mission_id",
                "mission_id must be 1..=128 letters, digits, '_', '-' or '.' (not starting with '.' or '-')",
            ));
        }
        if required_sources.is_empty() {
            return Err(ServiceError::invalid_field(
                "required_sources",
                "required_sources must not be empty",
            ));
        }
        if !candidate::is_full_oid(&p.expected_target_revision) {
            return Err(ServiceError::invalid_field(
                "expected_target_revision",
                "expected_target_revision must be a full lowercase commit id",
            ));
        }
        let repo = self.ctx.repo(&p.workspace_id);
        // The inputs' summaries (for the frozen commit's message) are read in the same git
        // process as the target's check (none when all were read before); the evidence refs
        // of every submission from the ref files, beside it (or one `for-each-ref` when they
        // are not plain files).
        let claimed: Vec<&str> = p
            .submissions
            .iter()
            .map(|s| s.retained_revision.as_str())
            .collect();
        let mut packets = self
            .evidence
            .load_packets(
                p.submissions
                    .iter()
                    .map(|s| s.evidence_ref.clone())
                    .collect(),
            )
            .await?;
        let evidence_names: Vec<String> = packets
            .iter()
            .flatten()
            .map(|packet| evidence_ref_name(&packet.evidence_ref))
            .collect();
        let (target_is_commit, evidence_refs) = blocking(|| {
            std::thread::scope(|scope| {
                let refs = scope.spawn(|| repo.refs_named_from_files(&evidence_names));
                let target = repo.is_commit_reading(&p.expected_target_revision, &claimed);
                (target, refs.join().expect("reading refs does not panic"))
            })
        });
        if !target_is_commit {
            return Err(ServiceError::precondition_field(
                "expected_target_revision",
                format!(
                    "expected_target_revision {} is not a commit in workspace {:?}",
                    p.expected_target_revision, p.workspace_id
                ),
            ));
        }
        let evidence_refs = evidence_refs?;
        let mut inputs = Vec::with_capacity(p.submissions.len());
        let mut snapshot_bytes = 0;
        let mut transcript_bytes = 0usize;
        for (i, s) in p.submissions.iter().enumerate() {
            let field = format!("submissions[{i}]");
            if s.workspace_id != p.workspace_id {
                return Err(ServiceError::precondition_field(
                    field.clone(),
                    format!(
                        "{field} is from workspace {:?}, not {:?}",
                        s.workspace_id, p.workspace_id
                    ),
                ));
            }
            // Another workspace's packet gets the same answer as a missing one, so a caller
            // cannot probe which evidence refs exist elsewhere.
            let missing = || {
                ServiceError::precondition_field(
                    field.clone(),
                    format!("{field}.evidence_ref {:?} does not exist", s.evidence_ref),
                )
            };
            let packet = packets[i]
                .take()
                .filter(|packet| packet.workspace_id == s.workspace_id)
                .ok_or_else(missing)?;
            if packet.run_id != s.run_id {
                return Err(ServiceError::precondition_field(
                    field.clone(),
                    format!(
                        "{field}: the packet belongs to run {:?}, not {:?}",
                        packet.run_id, s.run_id
                    ),
                ));
            }
            if packet.retained_revision != s.retained_revision {
                return Err(ServiceError::precondition_field(
                    field.clone(),
                    format!(
                        "{field}.retained_revision {} is not the packet's retained revision",
                        s.retained_revision
                    ),
                ));
            }
            if self.evidence.packet_expired(&packet) {
                return Err(ServiceError::precondition_field(
                    field.clone(),
                    format!("{field}: evidence {} has expired", packet.evidence_ref),
                ));
            }
            for src in &required_sources {
                let available = match src {
                    EvidenceSource::Git => {
                        evidence_refs.get(&evidence_ref_name(&packet.evidence_ref))
                            == Some(&packet.retained_revision)
                    }
                    EvidenceSource::Transcript => {
                        packet.transcript_sha256.as_deref().is_some_and(|sum| {
                            std::fs::read(self.evidence.transcript_path(&packet.evidence_ref))
                                .is_ok_and(|b| hex::encode(Sha256::digest(&b)) == sum)
                        })
                    }
                };
                if !available {
                    return Err(ServiceError::precondition_field(
                        field.clone(),
                        format!(
                            "{field}: required source {:?} of evidence {} is missing or unavailable",
                            src.as_str(),
                            packet.evidence_ref
                        ),
                    ));
                }
            }
            snapshot_bytes += serde_json::to_string(&packet).map(|s| s.len()).unwrap_or(0);
            if snapshot_bytes > MAX_SNAPSHOT_BYTES {
                return Err(ServiceError::exhausted(format!(
                    "evidence snapshots exceed {MAX_SNAPSHOT_BYTES} bytes"
                )));
            }
            let has_transcript = packet.transcript_sha256.is_some();
            if has_transcript {
                transcript_bytes +=
                    std::fs::metadata(self.evidence.transcript_path(&packet.evidence_ref))
                        .map(|m| m.len() as usize)
                        .unwrap_or(0);
                if transcript_bytes > MAX_TRANSCRIPT_BYTES {
                    return Err(ServiceError::exhausted_field(
                        field.clone(),
                        format!(
                            "{field}: the candidate's owned transcripts would total {transcript_bytes} bytes; the limit is {MAX_TRANSCRIPT_BYTES}"
                        ),
                    ));
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
        let now = self.ctx.clock.now();
        let c = Candidate {
            candidate_id: cid.clone(),
            workspace_id: p.workspace_id.clone(),
            mission_id: p.mission_id.clone().filter(|m| !m.is_empty()),
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
            resolutions: vec![],
            mutations: vec![Mutation {
                actor_key: actor_key.clone(),
                operation: MutationOperation::Prepare,
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
        // Admission sees the new candidate before its first durable write (a refusal leaves
        // nothing behind), and what it returns is held until the candidate is assembled.
        let admitted = self.candidates.admit(Admission {
            operation: Operation::Prepare,
            mutation: true,
            actor,
            workspace_id: &p.workspace_id,
            mission_id: p.mission_id.as_deref(),
            candidate: &c,
            new_candidate: true,
            submissions: &p.submissions,
        })?;
        // The policy may freeze the mission's accepted-set version here, once.
        let mut c = c;
        c.mission_accepted_set_version = admitted.accepted_set_version();
        let created = super::events::created(&c, &actor_key);
        let store = self.ctx.data.store.clone();
        let binding = k.binding_for(&p.workspace_id, &actor_key, &cid);
        let record = serde_json::to_string(&c).expect("a candidate serializes");
        let journal = serde_json::to_string(&a).expect("a journal serializes");
        let expires_at = c.expires_at.clone();
        let insert = move || {
            store.insert_candidate(
                binding,
                expires_at,
                CandidateState::Preparing.as_str(),
                record,
                journal,
                created,
            )
        };
        let loaded = Loaded {
            before: super::events::Before::of(&c),
            c,
            a,
            stored_version: 1,
        };
        match self.prepare_new(loaded, evidence_refs, insert).await? {
            New::Made(c) => Ok(*c),
            New::Existing {
                digest: d,
                result_id,
            } => {
                let cid = k.judge(&d, result_id)?;
                self.replay_prepare(actor, &p.workspace_id, &cid).await
            }
        }
    }

    /// Makes the candidate this prepare created: its `insert` (the record at version 1, with
    /// its binding and event) runs while its assembly is planned, since merges and commits
    /// only write objects no ref names; the transcripts are copied and the ref transaction
    /// made only once the insert is durable. A binding found there instead (`Existing`) leaves
    /// the planned objects unreferenced and changes nothing else.
    async fn prepare_new(
        &self,
        mut l: Loaded,
        evidence: std::collections::HashMap<String, String>,
        insert: impl FnOnce() -> Result<crate::store::Pending<Inserted>, crate::store::StoreError>,
    ) -> Result<New, ServiceError> {
        let cid = l.c.candidate_id.clone();
        // Held from before the record exists, so nothing that finds it waits on a half-made
        // candidate.
        let lock = self.candidates.candidate_lock(&cid);
        let _guard = lock.lock().await;
        // Handed to the database thread now, answered while the assembly is planned.
        let insert = insert()?;
        let repo = self.ctx.repo(&l.c.workspace_id).clone();
        let started = std::time::Instant::now();
        let step = blocking(|| -> Result<NewStep, ServiceError> {
            // A new candidate owns no refs yet, and its evidence refs were just read.
            let retained = self.retained_refs(&repo, &l.c, KnownRefs::Fresh { evidence });
            let planned = match retained {
                Ok(r) => Ok(self.plan_assembly(&repo, &mut l, Some(r))),
                Err(reason) => Err(reason),
            };
            let inserted = insert.blocking_answer()?;
            if let Inserted::Existing { digest, result_id } = inserted {
                return Ok(NewStep::Existing { digest, result_id });
            }
            crate::crash::point(crate::crash::CrashPoint::PrepareAfterInsert);
            let planned = match planned {
                Ok(planned) => planned?,
                Err(reason) => return Ok(NewStep::Lost(reason)),
            };
            if let Err(reason) = self.copy_transcripts(&l.c) {
                return Ok(NewStep::Lost(reason));
            }
            crate::crash::point(crate::crash::CrashPoint::PrepareAfterRetain);
            planned.publish(&repo, &mut l)?;
            Ok(NewStep::Published)
        })?;
        match step {
            NewStep::Existing { digest, result_id } => {
                return Ok(New::Existing { digest, result_id });
            }
            NewStep::Lost(reason) => {
                l.c.state = l.c.state.on(CandidateEvent::LoseEvidence)?;
                l.c.error = Some(reason);
            }
            NewStep::Published => {}
        }
        let assembled = started.elapsed();
        self.candidates.save(&mut l, None, None).await?;
        tracing::info!(
            candidate_id = %cid,
            inputs = l.c.inputs.len(),
            state = l.c.state.as_str(),
            insert_and_assemble_ms = assembled.as_millis() as u64,
            save_ms = (started.elapsed() - assembled).as_millis() as u64,
            "candidate assembled"
        );
        Ok(New::Made(Box::new(l.c)))
    }

    /// A prepare whose binding exists with the same parameters: continues (or returns) the
    /// bound candidate, admitted again with `new_candidate = false`.
    pub(super) async fn replay_prepare(
        &self,
        actor: &Actor,
        ws: &str,
        cid: &str,
    ) -> Result<Candidate, ServiceError> {
        let existing = self.candidates.load_candidate(ws, cid).await?;
        let _admitted = self.candidates.admit(Admission {
            operation: Operation::Prepare,
            mutation: true,
            actor,
            workspace_id: ws,
            mission_id: existing.mission_id.as_deref(),
            candidate: &existing,
            new_candidate: false,
            submissions: &existing.submissions,
        })?;
        self.continue_preparing(ws, cid, KnownRefs::Unknown).await
    }

    /// Resumes a `preparing` candidate from its durable inputs; returns any other as it is.
    pub(super) async fn continue_preparing(
        &self,
        ws: &str,
        cid: &str,
        known: KnownRefs,
    ) -> Result<Candidate, ServiceError> {
        let lock = self.candidates.candidate_lock(cid);
        let _guard = lock.lock().await;
        let mut l = self.candidates.load(ws, cid).await?;
        if l.c.state != CandidateState::Preparing {
            return Ok(l.c);
        }
        let repo = self.ctx.repo(ws).clone();
        let started = std::time::Instant::now();
        let owned = match blocking(|| self.retain_inputs(&repo, &l.c, known)) {
            Ok(owned) => owned,
            Err(reason) => {
                l.c.state = l.c.state.on(CandidateEvent::LoseEvidence)?;
                l.c.error = Some(reason);
                self.candidates.save(&mut l, None, None).await?;
                return Ok(l.c);
            }
        };
        crate::crash::point(crate::crash::CrashPoint::PrepareAfterRetain);
        let retained = started.elapsed();
        blocking(|| self.assemble(&repo, &mut l, Some(owned)))?;
        let assembled = started.elapsed() - retained;
        self.candidates.save(&mut l, None, None).await?;
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

    /// Copies every input's transcript into the candidate (idempotent) and checks that each
    /// input's revision is still there; returns the value every owned ref
    /// ([`owned_ref_names`]) will have, with the creations of the input refs that do not exist
    /// yet, for assembly to make in the ref transaction of its outcome.
    pub(super) fn retain_inputs(
        &self,
        repo: &Repo,
        c: &Candidate,
        known: KnownRefs,
    ) -> Result<Retained, String> {
        let retained = self.retained_refs(repo, c, known)?;
        self.copy_transcripts(c)?;
        Ok(retained)
    }

    /// The ref half of [`Assembler::retain_inputs`]: reads (or takes from `known`) the owned
    /// and evidence refs, checks each input's revision is still there, and returns the owned
    /// refs' values with the input refs to create. Writes nothing.
    pub(super) fn retained_refs(
        &self,
        repo: &Repo,
        c: &Candidate,
        known: KnownRefs,
    ) -> Result<Retained, String> {
        let (mut owned, evidence) = match known {
            KnownRefs::Fresh { evidence } => (std::collections::HashMap::new(), evidence),
            KnownRefs::Unknown => {
                let mut names = owned_ref_names(c);
                names.extend(
                    c.inputs
                        .iter()
                        .map(|i| evidence_ref_name(&i.evidence.evidence_ref)),
                );
                let mut all = repo
                    .refs_named_from_files(&names)
                    .map_err(|e| e.to_string())?;
                let evidence = c
                    .inputs
                    .iter()
                    .filter_map(|i| {
                        let name = evidence_ref_name(&i.evidence.evidence_ref);
                        all.remove(&name).map(|v| (name, v))
                    })
                    .collect();
                (all, evidence)
            }
        };
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
        // The input refs are created in assembly's own ref transaction (one git process fewer):
        // until then the inputs are held by their evidence refs, and a crash before it leaves a
        // `preparing` candidate whose retry retains them again.
        for op in &creates {
            if let RefOp::Create { name, new } = op {
                owned.insert(name.clone(), new.clone());
            }
        }
        Ok(Retained {
            refs: owned,
            creates,
        })
    }

    /// The file half of [`Assembler::retain_inputs`]: copies every input's transcript into
    /// the candidate (idempotent), checked against its recorded checksum.
    pub(super) fn copy_transcripts(&self, c: &Candidate) -> Result<(), String> {
        let dir = self.ctx.data.layout.candidate_transcripts(&c.candidate_id);
        for input in &c.inputs {
            let (Some(tid), Some(sum)) = (&input.transcript_id, &input.transcript_checksum) else {
                continue;
            };
            let dest = dir.join(tid);
            if std::fs::read(&dest).is_ok_and(|b| hex::encode(Sha256::digest(&b)) == *sum) {
                continue;
            }
            let bytes = std::fs::read(self.evidence.transcript_path(&input.evidence.evidence_ref))
                .map_err(|e| format!("input {tid}: transcript unavailable: {e}"))?;
            if hex::encode(Sha256::digest(&bytes)) != *sum {
                return Err(format!("input {tid}: transcript checksum mismatch"));
            }
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            write_atomic(&dir, tid, &bytes).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// How [`Assembler::prepare_new`] ended.
enum New {
    /// The candidate, assembled (frozen or conflicted) or lost, and saved.
    Made(Box<Candidate>),
    /// The key's binding already existed: the insert made nothing.
    Existing { digest: String, result_id: String },
}

/// What the blocking part of [`Assembler::prepare_new`] did.
enum NewStep {
    Existing {
        digest: String,
        result_id: String,
    },
    /// An input's evidence is gone: the candidate is saved as lost.
    Lost(String),
    /// The ref transaction is made; the candidate is saved at its planned end.
    Published,
}

/// What [`Integration::retain_inputs`] found and what it leaves to assembly.
pub(super) struct Retained {
    /// Every owned ref's value once `creates` are made.
    pub(super) refs: std::collections::HashMap<String, String>,
    /// The input refs to create, in the same transaction as assembly's outcome.
    pub(super) creates: Vec<RefOp>,
}

/// What `continue_preparing` already knows about the refs it will use.
pub(super) enum KnownRefs {
    /// Nothing: read every owned and evidence ref (a resumed candidate).
    Unknown,
    /// A candidate created by this call: it owns no refs, and these are its evidence refs.
    Fresh {
        evidence: std::collections::HashMap<String, String>,
    },
}
