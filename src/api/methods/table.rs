//! The registry's table: every routed method, its body limit, request and reply types,
//! permission and MCP audience, with the reply shapes they share.

use super::*;
use crate::wire as w;
use crate::wire::{Approval, Decision, SecurityReview, Vote};
use Field as F;

use crate::config::Permission as P;
const HUMAN: Audience = Audience::Human;
const fn tool(members: &'static [P], runs: Runs) -> Audience {
    Audience::Tool { members, runs }
}
/// Readers: every member with view, every run (a run reads its workspace).
const READERS: Audience = tool(&[P::View], Runs::Always);
/// Proposers, and the holders and authors of what proposing made (claims, proposals): members
/// with propose, and runs (the run is the agent).
const PROPOSERS: Audience = tool(&[P::Propose], Runs::Always);
/// Holders of a claim, or an admin forcing it.
const HOLDERS_OR_ADMINS: Audience = tool(&[P::Propose, P::Admin], Runs::Always);
/// Evidence: a run records its own; a member needs integrate.
const RECORDERS: Audience = tool(&[P::Integrate], Runs::Always);
/// Submitted jobs: members with verify, and runs in their own workspace.
const VERIFIERS: Audience = tool(&[P::Verify], Runs::Always);
/// Votes and reviews: members with review, and runs holding a review role.
const REVIEWERS: Audience = tool(&[P::Review], Runs::RoleHolders);
const REVIEWERS_OR_ADMINS: Audience = tool(&[P::Review, P::Admin], Runs::RoleHolders);
const DECIDERS: Audience = tool(&[P::Review, P::Approve, P::Admin], Runs::RoleHolders);
/// Asking for a human's approval: the author, or a member with review, approve or admin.
const APPROVAL_ASKERS: Audience =
    tool(&[P::Propose, P::Review, P::Approve, P::Admin], Runs::Always);
/// Validation: a member with apply, or the author.
const VALIDATORS: Audience = tool(&[P::Apply, P::Propose], Runs::Always);
const ADMINS: Audience = tool(&[P::Admin], Runs::Never);
const APPLIERS: Audience = tool(&[P::Apply], Runs::Never);

#[allow(clippy::too_many_arguments)]
const fn m(
    name: &'static str,
    body: Body,
    params: SchemaFn,
    permission: &'static str,
    reply: Reply,
    audience: Audience,
    summary: &'static str,
) -> Method {
    Method {
        name,
        body,
        permission,
        summary,
        params,
        reply,
        audience,
        alias_of: None,
    }
}

/// `m` under another name older clients send, documented as an alias.
const fn alias(name: &'static str, of: Method) -> Method {
    Method {
        name,
        alias_of: Some(of.name),
        ..of
    }
}

const CANDIDATE: Reply = Reply::Fields(&[(
    "candidate",
    F::Typed(schema_of::<crate::candidate::Candidate>),
)]);
const EVIDENCE: Reply = Reply::Fields(&[(
    "evidence",
    F::Typed(schema_of::<crate::candidate::EvidencePacket>),
)]);
const CLAIM: Reply = Reply::Fields(&[("claim", F::Typed(schema_of::<w::ClaimView>))]);
const PROPOSAL: Reply = Reply::Fields(&[("proposal", F::Typed(schema_of::<w::ProposalView>))]);
const VALIDATION: Reply = Reply::Fields(&[(
    "validation",
    F::Typed(schema_of::<crate::engine::governed::validation::ValidationView>),
)]);
const JOB: Reply = Reply::Fields(&[("job", F::Typed(schema_of::<w::jobs::JobView>))]);
const APPROVAL: Reply = Reply::Fields(&[("approval", F::Typed(schema_of::<Approval>))]);

fn empty(out: &mut Schemas) -> String {
    out.entry("Empty".into())
        .or_insert_with(|| serde_json::json!({"type": "object", "additionalProperties": false}));
    "Empty".into()
}

/// `proposal.preview`'s reply: one closed object per part, each the header's fields and the
/// part's own (what `PreviewReply` serializes), with `part` fixed to its name.
fn preview_reply(out: &mut Schemas) -> String {
    use crate::wire::PreviewPart;
    let header = schema_of::<w::PreviewHeader>(out);
    let parts: [(PreviewPart, SchemaFn); 5] = [
        (PreviewPart::Metadata, schema_of::<w::PreviewMetadata>),
        (PreviewPart::Files, schema_of::<w::PreviewFiles>),
        (PreviewPart::Diff, schema_of::<w::PreviewDiff>),
        (PreviewPart::Raw, schema_of::<w::PreviewRaw>),
        (PreviewPart::Symbols, schema_of::<w::PreviewSymbols>),
    ];
    let mut alternatives = vec![];
    for (part, body) in parts {
        let body = body(out);
        let b = out[&body].clone();
        let mut merged = out[&header].clone();
        if let (Some(m), Some(f)) = (
            merged["properties"].as_object_mut(),
            b["properties"].as_object(),
        ) {
            m.extend(f.clone());
        }
        if let (Some(m), Some(f)) = (merged["required"].as_array_mut(), b["required"].as_array()) {
            m.extend(f.iter().cloned());
        }
        let name = serde_json::to_value(part).expect("a part serializes");
        merged["properties"]["part"] = serde_json::json!({"const": name});
        merged["additionalProperties"] = serde_json::json!(false);
        merged["description"] = b["description"].clone();
        let key = format!("Preview{}Reply", body.trim_start_matches("Preview"));
        out.insert(key.clone(), merged);
        alternatives.push(component_ref(&key));
    }
    out.insert(
        "PreviewReply".into(),
        serde_json::json!({"oneOf": alternatives, "description": "One part of a revision, by the request's part"}),
    );
    "PreviewReply".into()
}

/// Every method, in the order of the flows (docs/api.md follows it).
const PROPOSAL_REJECT: Method = m(
    "proposal.reject",
    Body::Small,
    schema_of::<w::ProposalRejectParams>,
    "review or admin, never the author",
    PROPOSAL,
    REVIEWERS_OR_ADMINS,
    "Reject a proposal",
);

pub const METHODS: &[Method] = &[
    m(
        "evidence.record",
        Body::Evidence,
        schema_of::<w::RecordParams>,
        "the run actor of that run, or a member with integrate",
        EVIDENCE,
        RECORDERS,
        "Record a run's evidence packet",
    ),
    m(
        "integration.prepare",
        Body::Prepare,
        schema_of::<w::PrepareParams>,
        "integrate",
        CANDIDATE,
        HUMAN,
        "Merge ordered submissions into a candidate",
    ),
    m(
        "integration.resolve",
        Body::Resolve,
        schema_of::<w::ResolveParams>,
        "integrate",
        CANDIDATE,
        HUMAN,
        "Resolve a conflicted candidate's files",
    ),
    m(
        "integration.verify",
        Body::Verify,
        schema_of::<w::VerifyParams>,
        "verify",
        CANDIDATE,
        HUMAN,
        "Run a bounded argv against the frozen candidate",
    ),
    m(
        "proposal.create",
        Body::Patch,
        schema_of::<w::ProposalCreateParams>,
        "propose",
        PROPOSAL,
        PROPOSERS,
        "Propose a patch (revision 1)",
    ),
    m(
        "proposal.attach_patch",
        Body::Patch,
        schema_of::<w::ProposalAttachParams>,
        "the author, while pending or in_review",
        PROPOSAL,
        PROPOSERS,
        "Attach a new patch revision",
    ),
    m(
        "evidence.show",
        Body::Small,
        schema_of::<w::ShowParams>,
        "view",
        EVIDENCE,
        READERS,
        "Show an evidence packet",
    ),
    m(
        "integration.show",
        Body::Small,
        schema_of::<w::CandidateParams>,
        "view",
        CANDIDATE,
        HUMAN,
        "Show a candidate with its verifications",
    ),
    m(
        "integration.list",
        Body::Small,
        schema_of::<w::ListParams>,
        "view",
        Reply::Typed(schema_of::<w::CandidatePage>),
        HUMAN,
        "List candidates, newest first, by state, target and delivery-request state, a page at a time",
    ),
    m(
        "integration.patch",
        Body::Small,
        schema_of::<w::PatchParams>,
        "view",
        Reply::Typed(schema_of::<w::PatchResult>),
        HUMAN,
        "One page of the candidate's combined diff (follow next_offset)",
    ),
    m(
        "integration.conflict",
        Body::Small,
        schema_of::<w::ConflictParams>,
        "view",
        Reply::Typed(schema_of::<w::ConflictView>),
        HUMAN,
        "One conflicted path as the merge left it, conflict markers included",
    ),
    m(
        "integration.delete",
        Body::Small,
        schema_of::<w::CandidateParams>,
        "integrate",
        Reply::Typed(empty),
        HUMAN,
        "Delete a candidate",
    ),
    m(
        "job.submit",
        Body::Verify,
        schema_of::<w::jobs::JobSubmitParams>,
        "verify",
        JOB,
        VERIFIERS,
        "Queue a verification job on a revision of the workspace's repository (runs may call it)",
    ),
    m(
        "job.show",
        Body::Small,
        schema_of::<w::jobs::JobRef>,
        "view",
        JOB,
        READERS,
        "A job: its state, place in the queue and verification record",
    ),
    m(
        "job.list",
        Body::Small,
        schema_of::<w::jobs::JobListParams>,
        "view",
        Reply::Typed(schema_of::<w::jobs::JobPage>),
        READERS,
        "A workspace's jobs, newest first, by state and labels, a page at a time",
    ),
    m(
        "webhook.list",
        Body::Small,
        schema_of::<w::webhooks::WebhookListParams>,
        "view",
        Reply::Typed(schema_of::<w::webhooks::WebhookListReply>),
        READERS,
        "A workspace's webhook subscriptions and their deliveries: pending, delivered, failed, the last error",
    ),
    m(
        "job.cancel",
        Body::Small,
        schema_of::<w::jobs::JobRef>,
        "verify",
        JOB,
        VERIFIERS,
        "Cancel a job: its container is destroyed and it settles cancelled (runs may call it)",
    ),
    m(
        "job.log",
        Body::Small,
        schema_of::<w::jobs::JobLogParams>,
        "view",
        Reply::Typed(schema_of::<w::jobs::JobLog>),
        READERS,
        "A job's output so far, or its retained head and tail once settled; GET /api/v1/jobs/{job_id}/log?follow=1 streams it",
    ),
    m(
        "integration.cancel_verification",
        Body::Small,
        schema_of::<w::CancelParams>,
        "verify",
        CANDIDATE,
        HUMAN,
        "Cancel a running verification",
    ),
    m(
        "integration.request_delivery",
        Body::Small,
        schema_of::<w::RequestParams>,
        "integrate",
        CANDIDATE,
        HUMAN,
        "Ask a human to decide a delivery",
    ),
    m(
        "integration.decide",
        Body::Small,
        schema_of::<w::DecideParams>,
        "decide, members only",
        CANDIDATE,
        HUMAN,
        "Approve or deny a delivery request",
    ),
    m(
        "integration.deliver",
        Body::Small,
        schema_of::<w::DeliverParams>,
        "push",
        CANDIDATE,
        HUMAN,
        "Deliver an approved candidate",
    ),
    m(
        "claim.acquire",
        Body::Small,
        schema_of::<w::ClaimAcquireParams>,
        "propose",
        CLAIM,
        PROPOSERS,
        "Acquire a claim on a resource",
    ),
    m(
        "claim.extend",
        Body::Small,
        schema_of::<w::ClaimExtendParams>,
        "the holder",
        CLAIM,
        PROPOSERS,
        "Extend a claim's lease",
    ),
    m(
        "claim.release",
        Body::Small,
        schema_of::<w::ClaimReleaseParams>,
        "the holder, or admin (forced)",
        Reply::Fields(&[
            ("claim", F::Typed(schema_of::<w::ClaimView>)),
            ("changed", F::Bool),
        ]),
        HOLDERS_OR_ADMINS,
        "Release a claim",
    ),
    m(
        "claim.show",
        Body::Small,
        schema_of::<w::ClaimParams>,
        "view",
        CLAIM,
        READERS,
        "Show a claim",
    ),
    m(
        "claim.list",
        Body::Small,
        schema_of::<w::ClaimListParams>,
        "view",
        Reply::Fields(&[
            ("claims", F::ListOf(schema_of::<w::ClaimView>)),
            ("next_cursor", F::OptString),
        ]),
        READERS,
        "List claims, newest first",
    ),
    m(
        "claim.heartbeat",
        Body::Small,
        schema_of::<w::ClaimKeyedParams>,
        "the holder",
        CLAIM,
        PROPOSERS,
        "Heartbeat a claim",
    ),
    m(
        "claim.resume",
        Body::Small,
        schema_of::<w::ClaimResumeParams>,
        "the holder, or admin (forced)",
        CLAIM,
        HOLDERS_OR_ADMINS,
        "Resume a suspended claim whose resource is unchanged since its grant",
    ),
    m(
        "claim.suspend",
        Body::Small,
        schema_of::<w::ClaimAdminParams>,
        "admin",
        CLAIM,
        ADMINS,
        "Suspend a claim",
    ),
    m(
        "claim.revoke",
        Body::Small,
        schema_of::<w::ClaimAdminParams>,
        "admin",
        CLAIM,
        ADMINS,
        "Revoke a claim",
    ),
    m(
        "claim.force_release",
        Body::Small,
        schema_of::<w::ClaimForceReleaseParams>,
        "admin (with a reason)",
        CLAIM,
        ADMINS,
        "Release another holder's claim",
    ),
    m(
        "event.list",
        Body::Small,
        schema_of::<w::EventListParams>,
        "view",
        Reply::Fields(&[
            ("events", F::ListOf(schema_of::<w::EventView>)),
            ("next_since", F::OptInteger),
            ("next_cursor", F::OptString),
        ]),
        READERS,
        "List a workspace's events (governed path and candidate flow)",
    ),
    m(
        "claim.contentions",
        Body::Small,
        schema_of::<w::ContentionListParams>,
        "view",
        Reply::Fields(&[
            ("contentions", F::ListOf(schema_of::<w::ContentionView>)),
            ("next_cursor", F::OptString),
        ]),
        READERS,
        "List contentions, oldest first",
    ),
    m(
        "claim.resolve_contention",
        Body::Small,
        schema_of::<w::ResolveContentionParams>,
        "admin",
        Reply::Fields(&[
            ("contention_id", F::String),
            ("resolution", F::Typed(schema_of::<w::ResolutionKind>)),
            // The claim a transfer or extension changed; null otherwise.
            ("claim", F::OptTyped(schema_of::<w::ClaimView>)),
        ]),
        ADMINS,
        "Resolve a contention",
    ),
    m(
        "claim.reconcile",
        Body::Small,
        schema_of::<w::ReconcileParams>,
        "admin",
        Reply::Fields(&[
            ("suspended", F::Strings),
            ("unchanged", F::Strings),
            ("unreadable", F::ListOf(schema_of::<w::UnreadableClaim>)),
        ]),
        ADMINS,
        "Suspend claims whose resource changed",
    ),
    m(
        "claim.end_session",
        Body::Small,
        schema_of::<w::EndSessionParams>,
        "the caller's own claims",
        Reply::Fields(&[("released", F::Strings)]),
        PROPOSERS,
        "Release a session's claims",
    ),
    m(
        "resource.show",
        Body::Small,
        schema_of::<w::ResourceShowParams>,
        "view",
        Reply::Fields(&[("resource", F::Typed(schema_of::<w::ResourceView>))]),
        READERS,
        "Resolve a resource and its current hash",
    ),
    m(
        "proposal.get",
        Body::Small,
        schema_of::<w::ProposalParams>,
        "view",
        Reply::Fields(&[
            ("proposal", F::Typed(schema_of::<w::ProposalView>)),
            ("files", F::ListOf(schema_of::<w::FileView>)),
            ("decisions", F::ListOf(schema_of::<w::ProposalDecisionView>)),
            // Null until review is requested for the current revision.
            ("review_plan", F::OptTyped(schema_of::<w::ReviewPlan>)),
            ("votes", F::ListOf(schema_of::<Vote>)),
            ("security_reviews", F::ListOf(schema_of::<SecurityReview>)),
            ("approvals", F::ListOf(schema_of::<Approval>)),
            (
                "verdict",
                F::Typed(schema_of::<crate::domain::policy::Verdict>),
            ),
        ]),
        READERS,
        "Show a proposal with its files and decisions",
    ),
    m(
        "proposal.list",
        Body::Small,
        schema_of::<w::ProposalListParams>,
        "view",
        Reply::Fields(&[
            ("proposals", F::ListOf(schema_of::<w::ProposalView>)),
            ("next_cursor", F::OptString),
        ]),
        READERS,
        "List proposals",
    ),
    m(
        "proposal.request_review",
        Body::Small,
        schema_of::<w::ProposalTransitionParams>,
        "the author",
        Reply::Fields(&[
            ("proposal", F::Typed(schema_of::<w::ProposalView>)),
            ("review_plan", F::OptTyped(schema_of::<w::ReviewPlan>)),
        ]),
        PROPOSERS,
        "Move a proposal to in_review",
    ),
    PROPOSAL_REJECT,
    alias("patch.reject", PROPOSAL_REJECT),
    m(
        "proposal.withdraw",
        Body::Small,
        schema_of::<w::ProposalTransitionParams>,
        "the author",
        PROPOSAL,
        PROPOSERS,
        "Withdraw a proposal",
    ),
    m(
        "vote.cast",
        Body::Small,
        schema_of::<w::VoteCastParams>,
        "a member with review, or a run holding a role; never the author",
        Reply::Fields(&[("vote", F::Typed(schema_of::<Vote>))]),
        REVIEWERS,
        "Vote on a revision",
    ),
    m(
        "vote.list",
        Body::Small,
        schema_of::<w::VoteListParams>,
        "view",
        Reply::Fields(&[("votes", F::ListOf(schema_of::<Vote>))]),
        READERS,
        "List votes",
    ),
    m(
        "security.review",
        Body::Small,
        schema_of::<w::SecurityReviewParams>,
        "a reviewer holding security; never the author",
        Reply::Fields(&[("security_review", F::Typed(schema_of::<SecurityReview>))]),
        REVIEWERS,
        "Record a security review",
    ),
    m(
        "human.request_approval",
        Body::Small,
        schema_of::<w::RequestApprovalParams>,
        "the author, or a member with review, approve or admin",
        APPROVAL,
        APPROVAL_ASKERS,
        "Ask a human to approve a revision",
    ),
    m(
        "human.decide",
        Body::Small,
        schema_of::<w::HumanDecideParams>,
        "a member with approve; never a run, the author or (distinct_approver) the requester",
        APPROVAL,
        HUMAN,
        "Approve or deny a human approval",
    ),
    m(
        "decision.record",
        Body::Small,
        schema_of::<w::DecisionRecordParams>,
        "a member with review, approve or admin, or a run holding a role",
        Reply::Fields(&[("decision", F::Typed(schema_of::<Decision>))]),
        DECIDERS,
        "Record a decision",
    ),
    m(
        "decision.list",
        Body::Small,
        schema_of::<w::DecisionListParams>,
        "view",
        Reply::Fields(&[("decisions", F::ListOf(schema_of::<Decision>))]),
        READERS,
        "List decisions",
    ),
    m(
        "policy.evaluate",
        Body::Small,
        schema_of::<w::PolicyEvaluateParams>,
        "view",
        Reply::Fields(&[
            ("proposal_id", F::String),
            ("revision", F::String),
            (
                "status",
                F::Typed(schema_of::<crate::domain::proposal::ProposalState>),
            ),
            (
                "verdict",
                F::Typed(schema_of::<crate::domain::policy::Verdict>),
            ),
            // Set when the proposal is not in review: the verdict is informational.
            ("note", F::OptString),
        ]),
        READERS,
        "Evaluate the policy on the current revision",
    ),
    m(
        "proposal.preview",
        Body::Small,
        schema_of::<w::ProposalPreviewParams>,
        "view",
        Reply::Typed(preview_reply),
        READERS,
        "One part of a revision: metadata, files, diff, raw bytes or touched symbols",
    ),
    m(
        "patch.validate",
        Body::Small,
        schema_of::<w::ValidateParams>,
        "apply, or the author",
        VALIDATION,
        VALIDATORS,
        "Validate a revision in the sandbox",
    ),
    m(
        "patch.validation_list",
        Body::Small,
        schema_of::<w::ValidationListParams>,
        "view",
        Reply::Typed(schema_of::<crate::engine::governed::lists::ValidationPage>),
        READERS,
        "A proposal's validations, oldest first, a page at a time",
    ),
    m(
        "human.approval_list",
        Body::Small,
        schema_of::<w::ApprovalListParams>,
        "view",
        Reply::Typed(schema_of::<w::ApprovalPage>),
        HUMAN,
        "Human approvals, by default the pending ones the caller may decide",
    ),
    m(
        "patch.validation_show",
        Body::Small,
        schema_of::<w::ValidationShowParams>,
        "view",
        VALIDATION,
        READERS,
        "Show a validation",
    ),
    m(
        "patch.apply",
        Body::Small,
        schema_of::<w::ApplyParams>,
        "members with apply (never a run)",
        Reply::Typed(schema_of::<w::ApplyReply>),
        APPLIERS,
        "Apply a validated revision",
    ),
    m(
        "transaction.show",
        Body::Small,
        schema_of::<w::TransactionParams>,
        "view",
        Reply::Typed(schema_of::<w::TransactionReply>),
        READERS,
        "Show a transaction",
    ),
    m(
        "transaction.list",
        Body::Small,
        schema_of::<w::TransactionListParams>,
        "view",
        Reply::Typed(schema_of::<w::TransactionListReply>),
        READERS,
        "List transactions, newest first",
    ),
    m(
        "transaction.phases",
        Body::Small,
        schema_of::<w::TransactionParams>,
        "view",
        Reply::Typed(schema_of::<w::PhasesReply>),
        READERS,
        "A transaction's phases",
    ),
    m(
        "transaction.recovery",
        Body::Small,
        schema_of::<w::TransactionParams>,
        "view",
        Reply::Typed(schema_of::<w::RecoveryView>),
        READERS,
        "Judge each touched path and advise",
    ),
    m(
        "transaction.control",
        Body::Small,
        schema_of::<w::TransactionControlParams>,
        "members with apply (and propose, for compensate)",
        Reply::OneOf(&[
            schema_of::<w::TransactionReply>,
            schema_of::<w::ApplyReply>,
            schema_of::<w::CompensationReply>,
            schema_of::<crate::engine::governed::validation::ValidationReply>,
        ]),
        APPLIERS,
        "Validate, retry, cancel, compensate or resolve a transaction",
    ),
];
