//! Review evidence and the policy verdict: `vote.cast`, `vote.list`,
//! `security.review`, `human.request_approval`, `human.decide`, `decision.record`,
//! `decision.list` and `policy.evaluate`, plus the review plan `proposal.request_review`
//! persists.
//!
//! Who acts is always the token's actor. Evidence names the revision it is about and is
//! refused for any revision but the current one; the verdict only ever reads evidence of the
//! current revision, so nothing bound to older bytes counts.

use super::requests::{check_text, page_limit};
use crate::config::{Permission, Workspace};
use crate::domain::policy::{
    ApprovalEvent, ApprovalEvidence, ApprovalState, Evidence, ReviewEvidence, SECURITY,
    VoteEvidence,
};
use crate::domain::proposal::{ProposalState, Risk, is_revision};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Proposals;
use crate::engine::idempotency::Prologue;
use crate::limits;
use crate::store::reviews::{DecisionRow, NewVote, ReviewEvidence as StoredReview};
use crate::wire as w;
use crate::wire::{
    DecisionListParams, DecisionRecordParams, HumanDecideParams, PolicyEvaluateParams,
    RequestApprovalParams, SecurityReviewParams, VoteCastParams, VoteListParams,
};

/// The review roles `actor` holds in `ws` (`run:<run_id>` for runs).
pub(super) fn roles_of(ws: &Workspace, actor: &Actor) -> Vec<String> {
    let key = match actor {
        Actor::Member { member_id } => member_id.clone(),
        Actor::Run { run_id, .. } => format!("run:{run_id}"),
        Actor::System { .. } => return vec![],
    };
    ws.roles.get(&key).cloned().unwrap_or_default()
}

/// The verdict's evidence from the stored rows about one revision (the same mapping for
/// `policy.evaluate` and for apply's gate inside its transaction).
pub(super) fn evidence_of(
    review: &StoredReview,
    risk: Risk,
    paths: Vec<String>,
    tests: Option<crate::domain::policy::TestEvidence>,
) -> Evidence {
    Evidence {
        risk,
        paths,
        votes: review
            .votes
            .iter()
            .map(|v| VoteEvidence {
                vote_id: v.vote_id.clone(),
                voter: v.voter.clone(),
                roles: v.roles.clone(),
                vote: v.vote,
            })
            .collect(),
        security: review.security.as_ref().map(|r| ReviewEvidence {
            review_id: r.review_id.clone(),
            reviewer: r.reviewer.clone(),
            verdict: r.verdict,
        }),
        approval: review.approval.as_ref().map(|a| ApprovalEvidence {
            approval_id: a.approval_id.clone(),
            state: a.state,
            decided_by: a.decided_by.clone(),
            override_votes: a.override_votes,
            reason_md: a.reason_md.clone(),
        }),
        tests,
    }
}

fn check_revision(revision: &str) -> Result<(), ServiceError> {
    if is_revision(revision) {
        return Ok(());
    }
    Err(ServiceError::invalid_field(
        "revision",
        format!("revision {revision:?} is not a revision digest (64 lowercase hex digits)"),
    ))
}

fn check_md(field: &str, v: &str, required: bool) -> Result<(), ServiceError> {
    super::check_text_field(field, v, required, limits::MAX_PROPOSAL_TEXT_BYTES)
}

/// A store refusal about the revision or the state, as the precondition it is.
fn evidence_refused(e: crate::store::StoreError) -> ServiceError {
    match e {
        crate::store::StoreError::Conflict(m)
            if m.contains("is not current") || m.contains("not in_review") =>
        {
            ServiceError::precondition_field("revision", m)
        }
        other => other.into(),
    }
}

/// Review evidence and decisions on proposals: votes, security reviews, human approvals,
/// decisions and `policy.evaluate`. Holds the proposals, whose verdict it reads and feeds.
#[derive(Clone)]
pub struct Reviews {
    pub(super) ctx: crate::engine::context::Handles,
    pub(super) proposals: Proposals,
}

impl Reviews {
    pub fn new(proposals: Proposals) -> Reviews {
        Reviews {
            ctx: proposals.ctx.clone(),
            proposals,
        }
    }

    /// Who may review in `workspace_id`: a member with `review`, or a run holding a role.
    /// Never the proposal's author. Returns the workspace and the actor's roles.
    fn reviewer<'a>(
        &'a self,
        actor: &Actor,
        workspace_id: &str,
        author: &str,
        what: &str,
    ) -> Result<(&'a Workspace, Vec<String>), ServiceError> {
        let ws = match actor {
            Actor::Run { .. } => self.ctx.authorize(actor, workspace_id, Permission::View)?,
            Actor::Member { .. } | Actor::System { .. } => {
                self.ctx
                    .authorize(actor, workspace_id, Permission::Review)?
            }
        };
        let roles = roles_of(ws, actor);
        if matches!(actor, Actor::Run { .. }) && roles.is_empty() {
            return Err(ServiceError::PermissionDenied(format!(
                "a run may {what} only when it holds a review role in workspace {workspace_id:?}"
            )));
        }
        if actor.key() == author {
            return Err(ServiceError::PermissionDenied(format!(
                "the author cannot {what} their own proposal"
            )));
        }
        Ok((ws, roles))
    }

    /// `vote.cast`.
    pub async fn vote_cast(
        &self,
        actor: &Actor,
        p: VoteCastParams,
    ) -> Result<w::VoteReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        check_revision(&p.revision)?;
        check_md("reason_md", &p.reason_md, true)?;
        let confidence = p.confidence.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&confidence) {
            return Err(ServiceError::invalid_field(
                "confidence",
                format!("confidence is {confidence}; it must be between 0.0 and 1.0"),
            ));
        }
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "vote.cast",
                &p.idempotency_key,
                &VoteCastParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let v = self
                    .ctx
                    .data
                    .store
                    .vote(&id)
                    .await?
                    .ok_or_else(|| ServiceError::internal("a bound vote is gone"))?;
                return Ok(w::VoteReply { vote: v.into() });
            }
            Prologue::Fresh(k) => k,
        };
        let row = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let (_, roles) = self.reviewer(actor, &p.workspace_id, &row.author, "vote on")?;
        let vote_id = format!("vot_{}", crate::ids::new_creation_key());
        let v = self
            .ctx
            .data
            .store
            .cast_vote(NewVote {
                vote_id: vote_id.clone(),
                proposal_id: row.proposal_id.clone(),
                revision: p.revision.clone(),
                voter: actor.key(),
                roles,
                vote: p.vote,
                confidence,
                reason_md: p.reason_md.clone(),
                at: self.ctx.now_rfc3339(),
                binding: k.binding(&p.workspace_id, actor, &vote_id),
            })
            .await
            .map_err(evidence_refused)?;
        Ok(w::VoteReply { vote: v.into() })
    }

    /// `vote.list`: oldest first, history included (`current` marks each voter's newest).
    pub async fn vote_list(
        &self,
        actor: &Actor,
        p: VoteListParams,
    ) -> Result<w::VoteListReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        if let Some(r) = &p.revision {
            check_revision(r)?;
        }
        let row = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let votes = self
            .ctx
            .data
            .store
            .votes(&row.proposal_id, p.revision)
            .await?;
        Ok(w::VoteListReply {
            votes: votes.into_iter().map(Into::into).collect(),
        })
    }

    /// `security.review`: by a reviewer holding the `security` role.
    pub async fn security_review(
        &self,
        actor: &Actor,
        p: SecurityReviewParams,
    ) -> Result<w::SecurityReviewReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        check_revision(&p.revision)?;
        check_md("notes_md", &p.notes_md, false)?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "security.review",
                &p.idempotency_key,
                &SecurityReviewParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let r = self
                    .ctx
                    .data
                    .store
                    .security_reviews(&p.proposal_id)
                    .await?
                    .into_iter()
                    .find(|r| r.review_id == id)
                    .ok_or_else(|| ServiceError::internal("a bound security review is gone"))?;
                return Ok(w::SecurityReviewReply {
                    security_review: r.into(),
                });
            }
            Prologue::Fresh(k) => k,
        };
        let row = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let (_, roles) = self.reviewer(actor, &p.workspace_id, &row.author, "review")?;
        if !roles.iter().any(|r| r == SECURITY) {
            return Err(ServiceError::PermissionDenied(format!(
                "a security review needs the {SECURITY:?} role"
            )));
        }
        let review_id = format!("sec_{}", crate::ids::new_creation_key());
        let r = self
            .ctx
            .data
            .store
            .record_security_review(
                &review_id,
                &row.proposal_id,
                &p.revision,
                &actor.key(),
                p.verdict,
                &p.notes_md,
                &self.ctx.now_rfc3339(),
                k.binding(&p.workspace_id, actor, &review_id),
            )
            .await
            .map_err(evidence_refused)?;
        Ok(w::SecurityReviewReply {
            security_review: r.into(),
        })
    }

    /// `human.request_approval`: by the author or a member with `review`, `approve` or
    /// `admin`; one pending approval per revision.
    pub async fn human_request_approval(
        &self,
        actor: &Actor,
        p: RequestApprovalParams,
    ) -> Result<w::ApprovalReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        check_revision(&p.revision)?;
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "human.request_approval",
                &p.idempotency_key,
                &RequestApprovalParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                return self.approval_reply(&id).await;
            }
            Prologue::Fresh(k) => k,
        };
        let row = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let may = actor.key() == row.author
            || [Permission::Review, Permission::Approve, Permission::Admin]
                .into_iter()
                .any(|perm| self.ctx.authorize(actor, &p.workspace_id, perm).is_ok());
        if !may {
            return Err(ServiceError::PermissionDenied(
                "a human approval is requested by the author or a member with review, approve or admin"
                    .into(),
            ));
        }
        let approval_id = format!("apr_{}", crate::ids::new_creation_key());
        let a = self
            .ctx
            .data
            .store
            .request_approval(
                &approval_id,
                &row.proposal_id,
                &p.revision,
                &actor.key(),
                &self.ctx.now_rfc3339(),
                k.binding(&p.workspace_id, actor, &approval_id),
            )
            .await
            .map_err(|e| match e {
                crate::store::StoreError::Conflict(m) if m.contains("already pending") => {
                    ServiceError::precondition(m)
                }
                other => evidence_refused(other),
            })?;
        Ok(w::ApprovalReply { approval: a.into() })
    }

    /// The human approvals of a proposal, oldest first (the web page's approve/deny list).
    pub async fn approval_list(
        &self,
        actor: &Actor,
        workspace_id: &str,
        proposal_id: &str,
    ) -> Result<Vec<w::Approval>, ServiceError> {
        self.ctx.governed(actor, workspace_id, Permission::View)?;
        let rows = self.ctx.data.store.approvals(proposal_id).await?;
        Ok(rows
            .into_iter()
            .filter(|a| a.workspace_id == workspace_id)
            .map(Into::into)
            .collect())
    }

    /// The security reviews of a proposal, every revision, oldest first (the web page marks
    /// those of older revisions "not current").
    pub async fn security_review_list(
        &self,
        actor: &Actor,
        workspace_id: &str,
        proposal_id: &str,
    ) -> Result<Vec<w::SecurityReview>, ServiceError> {
        self.ctx.governed(actor, workspace_id, Permission::View)?;
        let row = self
            .proposals
            .proposal_in(workspace_id, proposal_id)
            .await?;
        Ok(self
            .ctx
            .data
            .store
            .security_reviews(&row.proposal_id)
            .await?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// Whether `actor` holds review `role` in the workspace (the web page offers the security
    /// review form only to holders of `security`; the server checks again).
    pub fn holds_role(&self, actor: &Actor, workspace_id: &str, role: &str) -> bool {
        self.ctx
            .config
            .workspaces
            .get(workspace_id)
            .is_some_and(|ws| roles_of(ws, actor).iter().any(|r| r == role))
    }

    async fn approval_reply(&self, approval_id: &str) -> Result<w::ApprovalReply, ServiceError> {
        let a = self
            .ctx
            .data
            .store
            .approval(approval_id)
            .await?
            .ok_or_else(|| ServiceError::internal("a bound approval is gone"))?;
        Ok(w::ApprovalReply { approval: a.into() })
    }

    /// `human.decide`: a member with `approve` (never a run token, never the author, never
    /// the requester while `distinct_approver` holds). `override: true` (with approve) lets
    /// the verdict pass requirements only votes block; never a security review.
    pub async fn human_decide(
        &self,
        actor: &Actor,
        p: HumanDecideParams,
    ) -> Result<w::ApprovalReply, ServiceError> {
        if matches!(actor, Actor::Run { .. }) {
            return Err(ServiceError::PermissionDenied(
                "a run token can never give human approval".into(),
            ));
        }
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::Approve)?;
        self.ctx
            .governed(actor, &p.workspace_id, Permission::Approve)?;
        check_md("reason_md", &p.reason_md, true)?;
        let override_votes = p.override_votes.unwrap_or(false);
        if override_votes && !p.approve {
            return Err(ServiceError::invalid_field(
                "override",
                "override needs approve: true (a denial overrides nothing)",
            ));
        }
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "human.decide",
                &p.idempotency_key,
                &HumanDecideParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                return self.approval_reply(&id).await;
            }
            Prologue::Fresh(k) => k,
        };
        let not_found = || {
            ServiceError::NotFound(format!(
                "approval {:?} not found in workspace {:?}",
                p.approval_id, p.workspace_id
            ))
        };
        let a = self
            .ctx
            .data
            .store
            .approval(&p.approval_id)
            .await?
            .ok_or_else(not_found)?;
        if a.workspace_id != p.workspace_id {
            return Err(not_found());
        }
        let row = self
            .proposals
            .proposal_in(&p.workspace_id, &a.proposal_id)
            .await?;
        if actor.key() == row.author {
            return Err(ServiceError::PermissionDenied(
                "the author cannot approve their own proposal".into(),
            ));
        }
        if ws.distinct_approver && actor.key() == a.requested_by {
            return Err(ServiceError::PermissionDenied(
                "distinct_approver: the member who requested this approval cannot decide it; another member with approve must"
                    .into(),
            ));
        }
        if a.state != ApprovalState::Pending {
            return Err(ServiceError::precondition(format!(
                "approval {} is already {}",
                a.approval_id,
                a.state.as_str()
            )));
        }
        let decided = self
            .ctx
            .data
            .store
            .decide_approval(
                &a.approval_id,
                if p.approve {
                    ApprovalEvent::Approve
                } else {
                    ApprovalEvent::Deny
                },
                &actor.key(),
                override_votes,
                &p.reason_md,
                &self.ctx.now_rfc3339(),
                k.binding(&p.workspace_id, actor, &a.approval_id),
            )
            .await
            .map_err(evidence_refused)?;
        Ok(w::ApprovalReply {
            approval: decided.into(),
        })
    }

    /// `decision.record`: an immutable decision, alone, about a task, or about a proposal
    /// revision (the current one when only `proposal_id` is given).
    pub async fn decision_record(
        &self,
        actor: &Actor,
        p: DecisionRecordParams,
    ) -> Result<w::DecisionReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let may = match actor {
            Actor::Run { .. } => !roles_of(ws, actor).is_empty(),
            Actor::Member { .. } | Actor::System { .. } => {
                [Permission::Review, Permission::Approve, Permission::Admin]
                    .into_iter()
                    .any(|perm| self.ctx.authorize(actor, &p.workspace_id, perm).is_ok())
            }
        };
        if !may {
            return Err(ServiceError::PermissionDenied(
                "decisions are recorded by members with review, approve or admin, or runs holding a review role"
                    .into(),
            ));
        }
        if !(1..=64).contains(&p.decision.len())
            || !p
                .decision
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(ServiceError::invalid_field(
                "decision",
                "decision is a label of 1..=64 of a-z, 0-9, '_' and '-' (approved, rejected, deferred, ...)",
            ));
        }
        check_md("rationale_md", &p.rationale_md, true)?;
        if let Some(t) = &p.task_id {
            check_text("task_id", t, true)?;
        }
        if let Some(r) = &p.revision {
            check_revision(r)?;
        }
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "decision.record",
                &p.idempotency_key,
                &DecisionRecordParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let d = self
                    .ctx
                    .data
                    .store
                    .decision(&id)
                    .await?
                    .ok_or_else(|| ServiceError::internal("a bound decision is gone"))?;
                return Ok(w::DecisionReply { decision: d.into() });
            }
            Prologue::Fresh(k) => k,
        };
        let revision = match (&p.proposal_id, &p.revision) {
            (None, Some(_)) => {
                return Err(ServiceError::invalid_field(
                    "revision",
                    "a revision needs its proposal_id",
                ));
            }
            (None, None) => None,
            (Some(pid), r) => {
                let row = self.proposals.proposal_in(&p.workspace_id, pid).await?;
                Some(r.clone().unwrap_or(row.current_revision))
            }
        };
        let decision_id = format!("dec_{}", crate::ids::new_creation_key());
        let d = self
            .ctx
            .data
            .store
            .record_decision(
                DecisionRow {
                    decision_id: decision_id.clone(),
                    workspace_id: p.workspace_id.clone(),
                    proposal_id: p.proposal_id.clone(),
                    revision,
                    task_id: p.task_id.clone(),
                    decision: p.decision.clone(),
                    decided_by: actor.key(),
                    rationale_md: p.rationale_md.clone(),
                    created_at: self.ctx.now_rfc3339(),
                },
                k.binding(&p.workspace_id, actor, &decision_id),
            )
            .await
            .map_err(|e| match e {
                crate::store::StoreError::Conflict(m) if m.contains("has no revision") => {
                    ServiceError::precondition_field("revision", m)
                }
                other => other.into(),
            })?;
        Ok(w::DecisionReply { decision: d.into() })
    }

    /// `decision.list`: oldest first.
    pub async fn decision_list(
        &self,
        actor: &Actor,
        p: DecisionListParams,
    ) -> Result<w::DecisionListReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let limit = page_limit(p.limit)?;
        let rows = self
            .ctx
            .data
            .store
            .decisions(&p.workspace_id, p.proposal_id, p.task_id, limit)
            .await?;
        Ok(w::DecisionListReply {
            decisions: rows.into_iter().map(Into::into).collect(),
        })
    }

    /// `policy.evaluate`: the verdict for the current revision only.
    pub async fn policy_evaluate(
        &self,
        actor: &Actor,
        p: PolicyEvaluateParams,
    ) -> Result<w::PolicyEvaluateReply, ServiceError> {
        self.ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::View)?;
        let row = self
            .proposals
            .proposal_in(&p.workspace_id, &p.proposal_id)
            .await?;
        let risk = Proposals::record_of(&row)?.risk;
        let verdict = self.proposals.verdict(ws, &row, risk).await?;
        Ok(w::PolicyEvaluateReply {
            note: (row.status != ProposalState::InReview)
                .then_some("the proposal is not in review; the verdict is informational"),
            proposal_id: row.proposal_id,
            revision: row.current_revision,
            status: row.status,
            verdict,
        })
    }
}

// The review rows as the API shows them (the store's rows are not API objects).
impl From<crate::store::reviews::VoteRow> for w::Vote {
    fn from(r: crate::store::reviews::VoteRow) -> Self {
        w::Vote {
            vote_id: r.vote_id,
            proposal_id: r.proposal_id,
            revision: r.revision,
            voter: r.voter,
            roles: r.roles,
            vote: r.vote,
            confidence: r.confidence,
            reason_md: r.reason_md,
            current: r.current,
            created_at: r.created_at,
        }
    }
}

impl From<crate::store::reviews::SecurityReviewRow> for w::SecurityReview {
    fn from(r: crate::store::reviews::SecurityReviewRow) -> Self {
        w::SecurityReview {
            review_id: r.review_id,
            proposal_id: r.proposal_id,
            revision: r.revision,
            reviewer: r.reviewer,
            verdict: r.verdict,
            notes_md: r.notes_md,
            created_at: r.created_at,
        }
    }
}

impl From<crate::store::reviews::ApprovalRow> for w::Approval {
    fn from(r: crate::store::reviews::ApprovalRow) -> Self {
        w::Approval {
            approval_id: r.approval_id,
            workspace_id: r.workspace_id,
            proposal_id: r.proposal_id,
            revision: r.revision,
            requested_by: r.requested_by,
            state: r.state,
            decided_by: r.decided_by,
            override_votes: r.override_votes,
            reason_md: r.reason_md,
            created_at: r.created_at,
            decided_at: r.decided_at,
        }
    }
}

impl From<crate::store::reviews::DecisionRow> for w::Decision {
    fn from(r: crate::store::reviews::DecisionRow) -> Self {
        w::Decision {
            decision_id: r.decision_id,
            workspace_id: r.workspace_id,
            proposal_id: r.proposal_id,
            revision: r.revision,
            task_id: r.task_id,
            decision: r.decision,
            decided_by: r.decided_by,
            rationale_md: r.rationale_md,
            created_at: r.created_at,
        }
    }
}
