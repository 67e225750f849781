//! `integration.delete`, expiry and tombstones: the fence first, then every owned thing.

use super::*;

/// How a candidate ends: `integration.delete` by a caller, or expiry by the maintenance pass
/// (both fence the candidate durably first, then remove what it owns). Holds the candidates.
#[derive(Clone)]
pub struct Lifecycle {
    ctx: crate::engine::context::Handles,
    candidates: Candidates,
}

impl Lifecycle {
    pub fn new(candidates: Candidates) -> Lifecycle {
        Lifecycle {
            ctx: candidates.ctx.clone(),
            candidates,
        }
    }
}

impl Lifecycle {
    /// `integration.delete`: persists the `deleting` fence, then removes owned refs and files.
    pub async fn delete(&self, actor: &Actor, p: CandidateParams) -> Result<(), ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Integrate)?;
        let lock = self.candidates.candidate_lock(&p.candidate_id);
        let _guard = lock.lock().await;
        let mut l = self
            .candidates
            .load(&p.workspace_id, &p.candidate_id)
            .await?;
        let _admitted = self
            .candidates
            .admit_on(actor, Operation::Delete, true, &l.c)?;
        if !l.c.state.is_fenced() {
            l.c.state = l.c.state.on(CandidateEvent::Delete)?;
            l.c.record_mutation(Mutation {
                actor_key: actor.key(),
                operation: MutationOperation::Delete,
                idempotency_key: String::new(),
                digest: String::new(),
                result_id: l.c.candidate_id.clone(),
            });
            self.candidates.save(&mut l, None, None).await?;
        }
        // Running verifications are cancelled (container destroyed, settled) before cleanup.
        // Workers never take the candidate lock, so holding it here cannot deadlock.
        self.candidates
            .cancel_candidate_verifications(&p.candidate_id)
            .await?;
        self.clean_up_fenced(&mut l).await
    }

    /// Removes everything a fenced candidate owns, then starts its tombstone retention.
    pub(super) async fn clean_up_fenced(&self, l: &mut Loaded) -> Result<(), ServiceError> {
        let repo = self.ctx.repo(&l.c.workspace_id);
        blocking(|| {
            let refs = repo.refs_under(&candidate_refs_prefix(&l.c.candidate_id))?;
            let deletes: Vec<RefOp> = refs
                .into_iter()
                .map(|(name, old)| RefOp::Delete { name, old })
                .collect();
            repo.update_refs(&deletes)
        })?;
        match blocking(|| std::fs::remove_dir_all(self.candidates.candidate_dir(&l.c.candidate_id)))
        {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ServiceError::internal(format!(
                    "remove candidate files: {e}"
                )));
            }
        }
        // Verification artifacts share the candidate's retention and deletion boundary (a
        // verification outliving its candidate would describe a revision no one can fetch): artifacts first, then rows. A pass interrupted in between runs again (no purge
        // time is saved until this finished) and removes what is left.
        let verifications = self
            .ctx
            .data
            .store
            .verifications_of_candidate(&l.c.candidate_id)
            .await?;
        if !verifications.is_empty() {
            let artifacts = self.ctx.data.artifacts.clone();
            let ids = verifications.clone();
            tokio::task::spawn_blocking(move || artifacts.remove(&ids))
                .await
                .expect("artifact removal does not panic")
                .map_err(|e| {
                    ServiceError::internal(format!("remove verification artifacts: {e}"))
                })?;
            self.ctx.data.store.delete_settled(verifications).await?;
        }
        let purge_after = crate::ids::rfc3339(self.ctx.clock.now() + TOMBSTONE_RETENTION);
        l.a = Assembly::default();
        self.candidates.save(l, None, Some(purge_after)).await
    }

    /// One expiry pass: fences and cleans expired candidates, finishes interrupted cleanups, and
    /// purges tombstones past their retention. Returns (expired, purged).
    pub async fn expire_candidates(&self) -> Result<(usize, usize), ServiceError> {
        let now = self.ctx.clock.now();
        let due = self
            .ctx
            .data
            .store
            .candidates_due(crate::ids::rfc3339(now))
            .await?;
        let (mut expired, mut purged) = (0, 0);
        for (cid, ws, purge_after) in due {
            if !self.ctx.config.workspaces.contains_key(&ws) {
                continue;
            }
            let lock = self.candidates.candidate_lock(&cid);
            let _guard = lock.lock().await;
            let mut l = match self.candidates.load(&ws, &cid).await {
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
                    self.ctx.data.store.purge_candidate(&cid).await?;
                    purged += 1;
                } else {
                    self.clean_up_fenced(&mut l).await?;
                }
                continue;
            }
            l.c.state = l.c.state.on(CandidateEvent::Expire)?;
            self.candidates.save(&mut l, None, None).await?;
            self.candidates.cancel_candidate_verifications(&cid).await?;
            self.clean_up_fenced(&mut l).await?;
            expired += 1;
        }
        Ok((expired, purged))
    }
}
