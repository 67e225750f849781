//! `integration.verify` and `integration.cancel_verification`: candidate verifications run by
//! bounded workers through the same pipeline as `airlock run`.

use super::*;

/// Candidate verification: `integration.verify` queues a run on the background (the same
/// pipeline as `airlock run`), `integration.cancel_verification` stops one. Holds the
/// candidates and the background its runs are spawned on.
#[derive(Clone)]
pub struct CandidateVerifications {
    ctx: crate::engine::context::Handles,
    candidates: Candidates,
    background: std::sync::Arc<crate::engine::background::Background>,
}

impl CandidateVerifications {
    pub fn new(
        candidates: Candidates,
        background: std::sync::Arc<crate::engine::background::Background>,
    ) -> CandidateVerifications {
        CandidateVerifications {
            ctx: candidates.ctx.clone(),
            candidates,
            background,
        }
    }
}

impl Candidates {
    /// Fills `verifications` from the store (the source of truth), with `queued` flags.
    pub async fn hydrate(&self, mut c: Candidate) -> Result<Candidate, ServiceError> {
        c.verifications = self.verification_views(&c.candidate_id).await?;
        Ok(c)
    }

    /// The candidate's verifications as the API shows them (with `queued`), oldest first.
    pub async fn verification_views(
        &self,
        candidate_id: &str,
    ) -> Result<Vec<crate::verification::Verification>, ServiceError> {
        let rows = self.ctx.data.store.verifications_of(candidate_id).await?;
        Ok(rows
            .into_iter()
            .map(|(mut v, queued)| {
                v.queued = Some(queued && v.status == Status::Running);
                v
            })
            .collect())
    }

    /// Cancels one worker of this process and waits (bounded) until it has settled.
    pub(super) async fn cancel_worker(&self, verification_id: &str) -> bool {
        self.background
            .cancel(verification_id, limits::SETTLE_WAIT)
            .await
    }

    /// Cancels every running verification of a candidate (before deletion or expiry).
    pub async fn cancel_candidate_verifications(
        &self,
        candidate_id: &str,
    ) -> Result<(), ServiceError> {
        for (v, _) in self.ctx.data.store.verifications_of(candidate_id).await? {
            if v.status == Status::Running && !self.cancel_worker(&v.verification_id).await {
                return Err(ServiceError::Unavailable(format!(
                    "verification {} did not settle within {} s; retry",
                    v.verification_id,
                    limits::SETTLE_WAIT.as_secs()
                )));
            }
        }
        Ok(())
    }
}

impl CandidateVerifications {
    /// `integration.verify`: records a running verification durably and returns at once.
    pub async fn verify(&self, actor: &Actor, p: VerifyParams) -> Result<Candidate, ServiceError> {
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::Verify)?
            .clone();
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        crate::verification::validate_argv(&p.argv)
            .map_err(|e| ServiceError::invalid_field("argv", e.to_string()))?;
        let timeout = p.timeout_seconds.unwrap_or(limits::DEFAULT_TIMEOUT_SECONDS);
        crate::verification::validate_timeout(timeout)
            .map_err(|e| ServiceError::invalid_field("timeout_seconds", e.to_string()))?;
        let digest = candidate::digest(&VerifyParams {
            idempotency_key: String::new(),
            timeout_seconds: Some(timeout),
            ..p.clone()
        });
        let Begun {
            l,
            key,
            guard: _guard,
            admitted: _admitted,
            ..
        } = self
            .candidates
            .begin_mutation(
                actor,
                Operation::VerifyQueue,
                &p.workspace_id,
                &p.candidate_id,
                &p.idempotency_key,
                &digest,
            )
            .await?;
        let c = l.c;
        let Some(key) = key else {
            return self.candidates.hydrate(c).await;
        };
        let rev = frozen_revision(&c)?;
        if p.candidate_revision != rev {
            return Err(ServiceError::precondition_field(
                "candidate_revision",
                format!(
                    "candidate_revision {} is not the candidate's frozen revision {rev}",
                    p.candidate_revision
                ),
            ));
        }
        blocking(|| self.candidates.require_owned_evidence(&c))?;
        let existing = self
            .ctx
            .data
            .store
            .verifications_of(&c.candidate_id)
            .await?;
        if existing.len() >= MAX_VERIFICATIONS_PER_CANDIDATE {
            return Err(ServiceError::exhausted(format!(
                "candidate has {} verifications; the limit is {MAX_VERIFICATIONS_PER_CANDIDATE}",
                existing.len()
            )));
        }
        let expires_cap = parse_time(&c.expires_at)
            .ok_or_else(|| ServiceError::internal("candidate expires_at is not RFC 3339"))?;
        let extra = self.candidates.owned_evidence_check(&c);
        let repo = self.ctx.repo(&p.workspace_id).clone();
        let prepared = self
            .background
            .runner
            .prepare_commit(
                repo,
                rev.clone(),
                &ws.profile,
                p.argv.clone(),
                timeout,
                Some(extra),
            )
            .await
            .map_err(ServiceError::from)?;
        // Admission is asked separately for queueing (above), container creation and start,
        // with the candidate as it was when queued: an embedding server can bound queue depth
        // and running containers independently.
        let prepared = prepared.admitting({
            let admission = self.candidates.admission.clone();
            let actor = actor.clone();
            let c = c.clone();
            std::sync::Arc::new(move |step: Step| {
                let operation = match step {
                    Step::CreateContainer => Operation::VerifyCreate,
                    Step::StartContainer => Operation::VerifyStart,
                };
                admission(&Admission {
                    operation,
                    mutation: true,
                    actor: &actor,
                    workspace_id: &c.workspace_id,
                    mission_id: c.mission_id.as_deref(),
                    candidate: &c,
                    new_candidate: false,
                    submissions: &c.submissions,
                })
                .map_err(|e| e.to_string())
            })
        });
        // Room in the workspace's queue before anything is recorded: the bound is shared with
        // submitted jobs and validation tests.
        let room = self.background.reserve(&p.workspace_id)?;
        let started = self
            .background
            .runner
            .begin(
                prepared,
                Some(Link::Candidate(CandidateLink {
                    candidate_id: c.candidate_id.clone(),
                    binding: key.binding(String::new()),
                    expires_cap,
                })),
            )
            .await
            .map_err(|e| match e {
                // The request was checked when it was prepared: a refusal now is a fault.
                RunError::Refused(r) => ServiceError::internal(r.message),
                e => ServiceError::from(e),
            })?;
        self.background.spawn(room, started);
        self.candidates.hydrate(c).await
    }

    /// Cancels every worker of this process (daemon shutdown). Returns how many did not settle
    /// within `wait`.
    pub async fn cancel_all_workers(&self, wait: Duration) -> usize {
        self.background.cancel_all(wait).await
    }

    /// `integration.cancel_verification`: destroys the container and settles `cancelled`.
    pub async fn cancel_verification(
        &self,
        actor: &Actor,
        p: CancelParams,
    ) -> Result<Candidate, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Verify)?;
        let c = self
            .candidates
            .load_candidate(&p.workspace_id, &p.candidate_id)
            .await?;
        let _admitted = self
            .candidates
            .admit_on(actor, Operation::CancelVerification, true, &c)?;
        let rows = self
            .ctx
            .data
            .store
            .verifications_of(&c.candidate_id)
            .await?;
        let Some((v, _)) = rows
            .iter()
            .find(|(v, _)| v.verification_id == p.verification_id)
        else {
            return Err(ServiceError::NotFound(format!(
                "verification {:?} not found on candidate {:?}",
                p.verification_id, p.candidate_id
            )));
        };
        if v.status == Status::Running && !self.candidates.cancel_worker(&v.verification_id).await {
            return Err(ServiceError::Unavailable(format!(
                "verification {} did not settle within {} s; retry",
                v.verification_id,
                limits::SETTLE_WAIT.as_secs()
            )));
        }
        self.candidates.hydrate(c).await
    }
}
