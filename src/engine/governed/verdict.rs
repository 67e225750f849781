//! The policy's verdict on a proposal's current revision: the paths a revision touches (parsed
//! once per revision), the review plan `proposal.request_review` persists, and the review
//! picture (votes, security reviews, approvals, verdict) a proposal's answers carry. The
//! evidence it reads is recorded by [`super::reviews::Reviews`].

use super::reviews::evidence_of;
use crate::config::{Permission, Workspace};
use crate::domain::policy::{Verdict, evaluate};
use crate::domain::proposal::Risk;
use crate::engine::error::ServiceError;
use crate::engine::governed::Proposals;
use crate::store::proposals::ProposalRow;

impl Proposals {
    /// Every path the revision touches (both sides of renames and copies), read and parsed
    /// once per revision (see `touched_cache`).
    pub(super) async fn touched_paths(&self, revision: &str) -> Result<Vec<String>, ServiceError> {
        if let Some(p) = self.touched.lock().expect("never poisoned").get(revision) {
            return Ok(p.as_ref().clone());
        }
        let bytes = self.read_patch(revision).await?;
        let patch = crate::patch::parse(&bytes).map_err(|e| {
            ServiceError::internal(format!("stored revision {revision} no longer parses: {e}"))
        })?;
        let paths: Vec<String> = patch
            .files
            .iter()
            .flat_map(|f| f.paths().map(str::to_string))
            .collect();
        let mut cache = self.touched.lock().expect("never poisoned");
        if cache.len() >= crate::limits::TOUCHED_PATHS_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(revision.to_string(), std::sync::Arc::new(paths.clone()));
        Ok(paths)
    }

    /// The review plan of a revision: the roles the policy requires and, for each, the
    /// members (with `review`) and runs holding it, never the author.
    pub(super) fn plan(
        &self,
        ws: &Workspace,
        author: &str,
        revision: &str,
        risk: Risk,
        paths: &[String],
    ) -> crate::wire::ReviewPlan {
        let policy = &ws.policy;
        let high_risk = policy.is_high_risk(risk, paths);
        let holders = |role: &str| -> Vec<String> {
            ws.roles
                .iter()
                .filter(|(_, roles)| roles.iter().any(|r| r == role))
                .filter_map(|(holder, _)| match holder.strip_prefix("run:") {
                    Some(run) => Some(format!("run:{}/{run}", ws.id)),
                    None => ws
                        .members
                        .get(holder)
                        .filter(|p| p.contains(&Permission::Review))
                        .map(|_| format!("member:{holder}")),
                })
                .filter(|k| k != author)
                .collect()
        };
        let required_roles = policy
            .routing_roles(risk, paths)
            .iter()
            .map(|r| crate::wire::PlannedRole {
                role: r.to_string(),
                candidates: holders(r),
            })
            .collect();
        crate::wire::ReviewPlan {
            revision: revision.to_string(),
            required_roles,
            high_risk,
            security_review_required: policy.security_review.applies(high_risk),
            human_approval_required: policy.human_approval.applies(high_risk),
        }
    }

    /// The review plan persisted for `revision`, if review was requested for it.
    pub(in crate::engine::governed) async fn stored_plan(
        &self,
        proposal_id: &str,
        revision: &str,
    ) -> Result<Option<crate::wire::ReviewPlan>, ServiceError> {
        self.ctx
            .data
            .store
            .review_plan(proposal_id, revision)
            .await?
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| ServiceError::record("a review plan", e))
    }

    /// The verdict of `p`'s current revision under its workspace's policy, with the test
    /// results of the newest complete validation of that revision.
    pub(super) async fn verdict(
        &self,
        ws: &Workspace,
        p: &ProposalRow,
        risk: Risk,
    ) -> Result<Verdict, ServiceError> {
        let mut tests = None;
        for row in self
            .ctx
            .data
            .store
            .validations_of(&p.proposal_id)
            .await?
            .into_iter()
            .rev()
            .filter(|v| v.revision == p.current_revision)
        {
            let rec: super::validation::Record = serde_json::from_str(&row.record)
                .map_err(|e| ServiceError::record("a validation", e))?;
            if let Some(t) = super::validation::test_evidence(&self.ctx, &rec).await? {
                tests = Some(t);
                break;
            }
        }
        self.verdict_with(ws, p, risk, tests).await
    }

    /// [`Proposals::verdict`] with the given test evidence.
    pub(super) async fn verdict_with(
        &self,
        ws: &Workspace,
        p: &ProposalRow,
        risk: Risk,
        tests: Option<crate::domain::policy::TestEvidence>,
    ) -> Result<Verdict, ServiceError> {
        let rev = &p.current_revision;
        let review = self
            .ctx
            .data
            .store
            .review_evidence(&p.proposal_id, rev)
            .await?;
        let paths = self.touched_paths(rev).await?;
        Ok(evaluate(
            &ws.policy,
            &evidence_of(&review, risk, paths, tests),
        ))
    }

    /// The review side of `proposal.get`: the current revision's plan, votes (history
    /// included), security reviews, approvals, and the verdict.
    pub(in crate::engine::governed) async fn review_picture(
        &self,
        p: &ProposalRow,
        risk: Risk,
    ) -> Result<crate::wire::ReviewPicture, ServiceError> {
        let ws = self
            .ctx
            .config
            .workspaces
            .get(&p.workspace_id)
            .ok_or_else(|| ServiceError::internal("the proposal's workspace is gone"))?;
        let store = &self.ctx.data.store;
        let rev = &p.current_revision;
        let plan = self.stored_plan(&p.proposal_id, rev).await?;
        let votes = store.votes(&p.proposal_id, Some(rev.clone())).await?;
        let reviews: Vec<_> = store
            .security_reviews(&p.proposal_id)
            .await?
            .into_iter()
            .filter(|r| &r.revision == rev)
            .collect();
        let approvals: Vec<_> = store
            .approvals(&p.proposal_id)
            .await?
            .into_iter()
            .filter(|a| &a.revision == rev)
            .collect();
        Ok(crate::wire::ReviewPicture {
            review_plan: plan,
            votes: votes.into_iter().map(Into::into).collect(),
            security_reviews: reviews.into_iter().map(Into::into).collect(),
            approvals: approvals.into_iter().map(Into::into).collect(),
            verdict: self.verdict(ws, p, risk).await?,
        })
    }
}
