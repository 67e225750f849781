//! `integration.show`, `integration.list` and `integration.patch`.

use super::*;

impl Candidates {
    /// `integration.show`. A candidate whose owned evidence is gone becomes `unavailable`.
    pub async fn show(&self, actor: &Actor, p: CandidateParams) -> Result<Candidate, ServiceError> {
        let (_, c) = self.show_shared(actor, p).await?;
        Ok(std::sync::Arc::unwrap_or_clone(c))
    }

    /// [`Candidates::show`] as a shared value with its stored version. The common path takes no
    /// lock, parses the record once per version, and asks about the owned refs with remembered
    /// answers (no git process while nothing changed); only a state change takes the lock.
    pub async fn show_shared(
        &self,
        actor: &Actor,
        p: CandidateParams,
    ) -> Result<(u64, std::sync::Arc<Candidate>), ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let (version, c) = self.load_shared(&p.workspace_id, &p.candidate_id).await?;
        if self.owned_evidence_problem_off_runtime(&c).await?.is_none() {
            return Ok((version, c));
        }
        let lock = self.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self.load(&p.workspace_id, &p.candidate_id).await?;
        if let Some(reason) = blocking(|| self.owned_evidence_problem(&l.c, false))? {
            l.c.state = l.c.state.on(CandidateEvent::LoseEvidence)?;
            l.c.error = Some(reason);
            self.save(&mut l, None, None).await?;
        }
        Ok((l.stored_version, std::sync::Arc::new(l.c)))
    }

    /// `integration.list`: bounded summaries, newest first.
    pub async fn list(
        &self,
        actor: &Actor,
        p: ListParams,
    ) -> Result<crate::wire::CandidatePage, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let limit = p.limit.unwrap_or(crate::limits::DEFAULT_LIST_LIMIT);
        if !(1..=crate::limits::MAX_CANDIDATE_LIST_LIMIT).contains(&limit) {
            return Err(ServiceError::invalid_field(
                "limit",
                format!(
                    "limit is {limit}; it must be between 1 and {}",
                    crate::limits::MAX_CANDIDATE_LIST_LIMIT
                ),
            ));
        }
        let before = crate::engine::governed::requests::parse_cursor("cnd:", p.cursor.as_deref())?;
        if let Some(t) = &p.target_ref
            && (t.is_empty() || t.len() > 256)
        {
            return Err(ServiceError::invalid_field(
                "target_ref",
                "target_ref must be 1..=256 bytes",
            ));
        }
        let filter = crate::store::lists::CandidateFilter {
            state: p.state.map(|s| s.as_str()),
            target_ref: p.target_ref,
            request_state: p.request_state.map(|s| s.as_str()),
        };
        let rows = self
            .ctx
            .data
            .store
            .candidates_page(&p.workspace_id, filter, before, limit)
            .await?;
        let last = rows.last().map(|(rowid, _)| *rowid);
        let candidates = rows
            .iter()
            .map(|(_, r)| {
                serde_json::from_str::<Candidate>(r)
                    .map(|c| c.summary())
                    .map_err(|e| ServiceError::record("candidate record", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::wire::CandidatePage {
            next_cursor: (candidates.len() == limit as usize)
                .then(|| last.map(|n| format!("cnd:{n}")))
                .flatten(),
            candidates,
        })
    }

    /// `integration.patch`: one page of the exact diff from the target to the frozen revision.
    pub async fn patch(&self, actor: &Actor, p: PatchParams) -> Result<PatchResult, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        if p.offset > MAX_PATCH_OFFSET {
            return Err(ServiceError::invalid_field(
                "offset",
                format!(
                    "offset is {}; it may be at most {MAX_PATCH_OFFSET}",
                    p.offset
                ),
            ));
        }
        let limit = match p.limit {
            None => MAX_PATCH_BYTES,
            Some(n) if (MIN_PATCH_PAGE_BYTES as u64..=MAX_PATCH_BYTES as u64).contains(&n) => {
                n as usize
            }
            Some(n) => {
                return Err(ServiceError::invalid_field(
                    "limit",
                    format!("limit is {n}; it needs {MIN_PATCH_PAGE_BYTES}..={MAX_PATCH_BYTES}"),
                ));
            }
        };
        let l = self.load(&p.workspace_id, &p.candidate_id).await?;
        let _admitted = self.admit_on(actor, Operation::Patch, false, &l.c)?;
        let (CandidateState::Frozen, Some(rev)) = (l.c.state, &l.c.candidate_revision) else {
            return Err(ServiceError::precondition(format!(
                "candidate is {}; a patch needs a frozen candidate",
                l.c.state.as_str()
            )));
        };
        let (patch, next_offset) = blocking(|| {
            self.require_owned_evidence(&l.c)?;
            self.ctx
                .repo(&p.workspace_id)
                .diff_page(&l.c.expected_target_revision, rev, p.offset, limit)
                .map_err(ServiceError::from)
        })?;
        Ok(PatchResult {
            patch,
            truncated: next_offset.is_some(),
            offset: p.offset,
            next_offset,
        })
    }

    /// `integration.conflict`: one of a conflicted candidate's paths as the merge left it in
    /// the conflict tree (conflict markers included), for a resolver to edit. Binary files and
    /// files over [`candidate::MAX_CONFLICT_CONTENT_BYTES`] are described without content.
    pub async fn conflict(
        &self,
        actor: &Actor,
        p: crate::wire::ConflictParams,
    ) -> Result<crate::wire::ConflictView, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let l = self.load(&p.workspace_id, &p.candidate_id).await?;
        let _admitted = self.admit_on(actor, Operation::Conflict, false, &l.c)?;
        let (CandidateState::Conflicted, Some(tree)) = (l.c.state, &l.a.conflict_tree) else {
            return Err(ServiceError::precondition(format!(
                "candidate is {}; only a conflicted candidate has conflicts to show",
                l.c.state.as_str()
            )));
        };
        let conflicts = l.c.conflicts.as_deref().unwrap_or_default();
        if !conflicts.contains(&p.path) {
            let shown: String = p.path.chars().take(200).collect();
            return Err(ServiceError::invalid_field(
                "path",
                format!(
                    "path {shown:?} is not one of the candidate's {} conflicted paths",
                    conflicts.len()
                ),
            ));
        }
        let repo = self.ctx.repo(&p.workspace_id);
        // (the tree entry, its size, its text, binary, why there is no text)
        let (entry, bytes, content, binary, note) = blocking(|| {
            let blob = match repo.tree_entry(tree, &p.path)? {
                Some(e) if e.kind == ObjectKind::Blob => e,
                Some(e) => {
                    let note = "the merge left a directory or submodule here, not a file";
                    return Ok((Some(e), 0, None, false, Some(note.to_string())));
                }
                None => {
                    let note = "the merge left no file at this path";
                    return Ok((None, 0, None, false, Some(note.to_string())));
                }
            };
            let bytes = repo.object_size(&blob.oid)?;
            if bytes > candidate::MAX_CONFLICT_CONTENT_BYTES {
                let note = format!(
                    "the file is {bytes} bytes; content is shown up to {} bytes",
                    candidate::MAX_CONFLICT_CONTENT_BYTES
                );
                return Ok((Some(blob), bytes, None, false, Some(note)));
            }
            let data = repo.read_blob(&blob.oid)?;
            let text = (!data.contains(&0))
                .then(|| String::from_utf8(data).ok())
                .flatten();
            let note = text
                .is_none()
                .then(|| "the file is binary (a NUL byte, or not UTF-8)".to_string());
            let binary = text.is_none();
            Ok::<_, crate::staging::StagingError>((Some(blob), bytes, text, binary, note))
        })?;
        Ok(crate::wire::ConflictView {
            path: p.path,
            present: entry.is_some(),
            mode: entry.map(|e| e.mode.as_str().to_string()),
            bytes,
            binary,
            content,
            note,
        })
    }
}

/// Largest piece of an input's transcript the candidate page quotes.
pub const TRANSCRIPT_EXCERPT_BYTES: usize = 2048;

impl Candidates {
    /// The start of each input's transcript (the candidate-owned copy, checked against its
    /// checksum), at most [`TRANSCRIPT_EXCERPT_BYTES`] each; `None` for an input without one
    /// or whose copy does not match (the page says so rather than show other bytes).
    pub async fn transcript_excerpts(
        &self,
        actor: &Actor,
        workspace_id: &str,
        candidate_id: &str,
    ) -> Result<Vec<Option<(String, bool)>>, ServiceError> {
        self.ctx.authorize(actor, workspace_id, Permission::View)?;
        let c = self.load_candidate(workspace_id, candidate_id).await?;
        let dir = self.ctx.data.layout.candidate_transcripts(candidate_id);
        Ok(c.inputs
            .iter()
            .map(|input| {
                let (tid, sum) = (
                    input.transcript_id.as_ref()?,
                    input.transcript_checksum.as_ref()?,
                );
                let bytes = std::fs::read(dir.join(tid)).ok()?;
                if hex::encode(Sha256::digest(&bytes)) != *sum {
                    return None;
                }
                let cut = bytes.len() > TRANSCRIPT_EXCERPT_BYTES;
                let head = &bytes[..bytes.len().min(TRANSCRIPT_EXCERPT_BYTES)];
                Some((String::from_utf8_lossy(head).into_owned(), cut))
            })
            .collect())
    }

    /// What a decider weighs beside the record: the target's value now, the inputs' commit
    /// subjects and authors, and each resolution's diff (bounded by
    /// [`RESOLUTION_DIFF_SHOWN`]; `None` where git could not give it).
    pub async fn decider_view(
        &self,
        actor: &Actor,
        workspace_id: &str,
        candidate_id: &str,
    ) -> Result<DeciderView, ServiceError> {
        self.ctx.authorize(actor, workspace_id, Permission::View)?;
        let c = self.load_candidate(workspace_id, candidate_id).await?;
        let repo = self.ctx.repo(workspace_id).clone();
        let revs: Vec<String> = c
            .inputs
            .iter()
            .map(|i| i.submission.retained_revision.clone())
            .collect();
        let resolutions: Vec<String> = c.resolutions.iter().map(|r| r.commit.clone()).collect();
        let target = c.target_ref.clone();
        let combined = c
            .candidate_revision
            .clone()
            .map(|rev| (c.expected_target_revision.clone(), rev));
        Ok(blocking(move || {
            let refs: Vec<&str> = revs.iter().map(String::as_str).collect();
            DeciderView {
                target_now: repo.ref_value(&target).ok().flatten(),
                summaries: repo.commit_summaries(&refs).unwrap_or_default(),
                resolution_diffs: resolutions
                    .iter()
                    .map(|r| {
                        repo.diff_bounded(&format!("{r}^"), r, RESOLUTION_DIFF_SHOWN)
                            .ok()
                            .map(|(b, cut)| (String::from_utf8_lossy(&b).into_owned(), cut))
                    })
                    .collect(),
                files: combined
                    .and_then(|(base, rev)| repo.numstat(&base, &rev).ok())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|f| (f.path, f.lines))
                    .collect(),
            }
        }))
    }
}

/// Most bytes of one resolution's diff a decider is shown.
pub const RESOLUTION_DIFF_SHOWN: usize = 64 * 1024;

/// What a decider weighs beside the candidate's record ([`Candidates::decider_view`]).
#[derive(Debug, Clone, Default)]
pub struct DeciderView {
    /// The target ref's value now (`None`: it does not exist).
    pub target_now: Option<String>,
    /// Each input's commit: its id, author and subject.
    pub summaries: Vec<crate::staging::plumbing::CommitSummary>,
    /// Each resolution's diff and whether it was cut short.
    pub resolution_diffs: Vec<Option<(String, bool)>>,
    /// The combined diff's files: each path with its added and removed lines (`None`: a
    /// binary file); empty when unknown.
    pub files: Vec<(String, Option<(u64, u64)>)>,
}
