//! The dispatcher: each registered method, parsed, handed to the workflow it names, and its
//! typed answer serialized. Shared by the HTTP methods, the MCP tools and the web pages.

use super::*;

pub(super) async fn dispatch(
    svc: &Service,
    bodies: &ShowBodies,
    actor: &Actor,
    method: &str,
    body: &[u8],
) -> Result<Reply, ServiceError> {
    Ok(match method {
        "evidence.record" => Reply::Value(
            json!({"evidence": to(&svc.evidence.record(actor, parse(method, body)?).await?)}),
        ),
        "evidence.show" => Reply::Value(
            json!({"evidence": to(&svc.evidence.show(actor, parse(method, body)?).await?)}),
        ),
        "integration.prepare" => {
            candidate(
                svc,
                svc.assembler.prepare(actor, parse(method, body)?).await?,
            )
            .await?
        }
        "integration.show" => show(svc, bodies, actor, parse(method, body)?).await?,
        "integration.list" => Reply::Value(to(&svc
            .candidates
            .list(actor, parse(method, body)?)
            .await?)),
        "integration.patch" => Reply::Value(to(&svc
            .candidates
            .patch(actor, parse(method, body)?)
            .await?)),
        "integration.conflict" => Reply::Value(to(&svc
            .candidates
            .conflict(actor, parse(method, body)?)
            .await?)),
        "integration.resolve" => {
            candidate(
                svc,
                svc.assembler.resolve(actor, parse(method, body)?).await?,
            )
            .await?
        }
        "integration.verify" => {
            candidate(
                svc,
                svc.candidate_verifications
                    .verify(actor, parse(method, body)?)
                    .await?,
            )
            .await?
        }
        "integration.cancel_verification" => {
            candidate(
                svc,
                svc.candidate_verifications
                    .cancel_verification(actor, parse(method, body)?)
                    .await?,
            )
            .await?
        }
        "integration.request_delivery" => {
            candidate(
                svc,
                svc.deliveries
                    .request_delivery(actor, parse(method, body)?)
                    .await?,
            )
            .await?
        }
        "integration.decide" => {
            candidate(
                svc,
                svc.deliveries.decide(actor, parse(method, body)?).await?,
            )
            .await?
        }
        "integration.deliver" => {
            candidate(
                svc,
                svc.deliveries.deliver(actor, parse(method, body)?).await?,
            )
            .await?
        }
        "job.submit" => Reply::Value(to(&crate::wire::jobs::JobReply {
            job: svc.jobs.submit(actor, parse(method, body)?).await?,
        })),
        "job.show" => Reply::Value(to(&crate::wire::jobs::JobReply {
            job: svc.jobs.show(actor, parse(method, body)?).await?,
        })),
        "job.cancel" => Reply::Value(to(&crate::wire::jobs::JobReply {
            job: svc.jobs.cancel(actor, parse(method, body)?).await?,
        })),
        "job.list" => Reply::Value(to(&svc.jobs.list(actor, parse(method, body)?).await?)),
        "job.log" => Reply::Value(to(&svc.jobs.log(actor, parse(method, body)?).await?)),
        "webhook.list" => Reply::Value(to(&svc.webhooks.list(actor, parse(method, body)?).await?)),
        "integration.delete" => {
            svc.lifecycle.delete(actor, parse(method, body)?).await?;
            Reply::Value(json!({}))
        }
        "claim.acquire" => Reply::Value(to(&svc
            .claims
            .claim_acquire(actor, parse(method, body)?)
            .await?)),
        "claim.extend" => Reply::Value(to(&svc
            .claims
            .claim_extend(actor, parse(method, body)?)
            .await?)),
        "claim.release" => Reply::Value(to(&svc
            .claims
            .claim_release(
                actor,
                parse::<crate::wire::ClaimReleaseParams>(method, body)?.into(),
            )
            .await?)),
        "claim.show" => Reply::Value(to(&svc
            .claims
            .claim_show(actor, parse(method, body)?)
            .await?)),
        "claim.list" => Reply::Value(to(&svc
            .claims
            .claim_list(actor, parse(method, body)?)
            .await?)),
        "claim.heartbeat" => Reply::Value(to(&svc
            .claims
            .claim_heartbeat(actor, parse(method, body)?)
            .await?)),
        "claim.suspend" => Reply::Value(to(&svc
            .claims
            .claim_admin(actor, ClaimEvent::Suspend, parse(method, body)?)
            .await?)),
        "claim.revoke" => Reply::Value(to(&svc
            .claims
            .claim_admin(actor, ClaimEvent::Revoke, parse(method, body)?)
            .await?)),
        "claim.force_release" => Reply::Value(to(&svc
            .claims
            .claim_admin(
                actor,
                ClaimEvent::Release,
                parse::<crate::wire::ClaimForceReleaseParams>(method, body)?.into(),
            )
            .await?)),
        "event.list" => Reply::Value(to(&svc
            .claims
            .event_list(actor, parse(method, body)?)
            .await?)),
        "claim.contentions" => Reply::Value(to(&svc
            .claims
            .claim_contentions(actor, parse(method, body)?)
            .await?)),
        "claim.resolve_contention" => Reply::Value(to(&svc
            .claims
            .claim_resolve_contention(actor, parse(method, body)?)
            .await?)),
        "claim.reconcile" => Reply::Value(to(&svc
            .claims
            .claim_reconcile(actor, parse(method, body)?)
            .await?)),
        "claim.end_session" => Reply::Value(to(&svc
            .claims
            .claim_end_session(actor, parse(method, body)?)
            .await?)),
        "resource.show" => Reply::Value(to(&svc
            .claims
            .resource_show(actor, parse(method, body)?)
            .await?)),
        "proposal.create" => Reply::Value(to(&svc
            .proposals
            .proposal_create(actor, parse(method, body)?)
            .await?)),
        "proposal.attach_patch" => Reply::Value(to(&svc
            .proposals
            .proposal_attach(actor, parse(method, body)?)
            .await?)),
        "proposal.get" => Reply::Value(to(&svc
            .proposals
            .proposal_get(actor, parse(method, body)?)
            .await?)),
        "proposal.list" => Reply::Value(to(&svc
            .proposals
            .proposal_list(actor, parse(method, body)?)
            .await?)),
        "proposal.request_review" => Reply::Value(to(&svc
            .proposals
            .proposal_transition(actor, ProposalEvent::RequestReview, parse(method, body)?)
            .await?)),
        // `patch.reject` is the older clients' name for the same call (one idempotency space).
        "proposal.reject" | "patch.reject" => Reply::Value(to(&svc
            .proposals
            .proposal_transition(
                actor,
                ProposalEvent::Reject,
                parse::<crate::wire::ProposalRejectParams>(method, body)?.into(),
            )
            .await?)),
        "claim.resume" => Reply::Value(to(&svc
            .claims
            .claim_resume(actor, parse(method, body)?)
            .await?)),
        "vote.cast" => Reply::Value(to(&svc
            .reviews
            .vote_cast(actor, parse(method, body)?)
            .await?)),
        "vote.list" => Reply::Value(to(&svc
            .reviews
            .vote_list(actor, parse(method, body)?)
            .await?)),
        "security.review" => Reply::Value(to(&svc
            .reviews
            .security_review(actor, parse(method, body)?)
            .await?)),
        "human.request_approval" => Reply::Value(to(&svc
            .reviews
            .human_request_approval(actor, parse(method, body)?)
            .await?)),
        "human.decide" => Reply::Value(to(&svc
            .reviews
            .human_decide(actor, parse(method, body)?)
            .await?)),
        "decision.record" => Reply::Value(to(&svc
            .reviews
            .decision_record(actor, parse(method, body)?)
            .await?)),
        "decision.list" => Reply::Value(to(&svc
            .reviews
            .decision_list(actor, parse(method, body)?)
            .await?)),
        "policy.evaluate" => Reply::Value(to(&svc
            .reviews
            .policy_evaluate(actor, parse(method, body)?)
            .await?)),
        "patch.validate" => Reply::Value(to(&svc
            .validations
            .patch_validate(actor, parse(method, body)?)
            .await?)),
        "patch.validation_list" => Reply::Value(to(&svc
            .validations
            .validation_page(actor, parse(method, body)?)
            .await?)),
        "human.approval_list" => Reply::Value(to(&svc
            .reviews
            .approval_page(actor, parse(method, body)?)
            .await?)),
        "patch.validation_show" => Reply::Value(to(&svc
            .validations
            .validation_show(actor, parse(method, body)?)
            .await?)),
        "patch.apply" => Reply::Value(to(&svc
            .applies
            .patch_apply(actor, parse(method, body)?)
            .await?)),
        "transaction.show" => Reply::Value(to(&svc
            .applies
            .transaction_show(actor, parse(method, body)?)
            .await?)),
        "transaction.list" => Reply::Value(to(&svc
            .applies
            .transaction_list(actor, parse(method, body)?)
            .await?)),
        "transaction.phases" => Reply::Value(to(&svc
            .applies
            .transaction_phases(actor, parse(method, body)?)
            .await?)),
        "transaction.control" => Reply::Value(to(&svc
            .applies
            .transaction_control(actor, parse(method, body)?)
            .await?)),
        "transaction.recovery" => Reply::Value(to(&svc
            .applies
            .transaction_recovery(actor, parse(method, body)?)
            .await?)),
        "proposal.preview" => Reply::Value(to(&svc
            .proposals
            .proposal_preview(actor, parse(method, body)?)
            .await?)),
        "proposal.withdraw" => Reply::Value(to(&svc
            .proposals
            .proposal_transition(actor, ProposalEvent::Withdraw, parse(method, body)?)
            .await?)),
        other => return Err(ServiceError::NotFound(format!("unknown method {other:?}"))),
    })
}

/// A successful answer: a JSON value, or a body already serialized from a typed result (no
/// intermediate `Value` tree for the large candidate aggregate).
pub(super) enum Reply {
    Value(Value),
    Json(Vec<u8>),
    Shared(axum::body::Bytes),
}

impl Reply {
    /// The answer's JSON bytes.
    pub(super) fn into_bytes(self) -> Vec<u8> {
        match self {
            Reply::Value(v) => serde_json::to_vec(&v).expect("a JSON value serializes"),
            Reply::Json(bytes) => bytes,
            Reply::Shared(bytes) => bytes.to_vec(),
        }
    }

    /// The answer as a JSON value (the MCP tools answer structured content).
    pub(super) fn into_value(self) -> Value {
        match self {
            Reply::Value(v) => v,
            Reply::Json(bytes) => serde_json::from_slice(&bytes).expect("a reply is JSON"),
            Reply::Shared(bytes) => serde_json::from_slice(&bytes).expect("a reply is JSON"),
        }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        match self {
            Reply::Value(v) => axum::Json(v).into_response(),
            Reply::Json(bytes) => json_body(axum::body::Bytes::from(bytes)),
            Reply::Shared(bytes) => json_body(bytes),
        }
    }
}

/// `integration.show`: `{"candidate": ...}`, reusing the serialized answer while the record and
/// its verifications are unchanged.
async fn show(
    svc: &Service,
    bodies: &ShowBodies,
    actor: &Actor,
    p: crate::wire::CandidateParams,
) -> Result<Reply, ServiceError> {
    #[derive(serde::Serialize)]
    struct Wrapped<'a> {
        candidate: &'a crate::candidate::Candidate,
    }
    let (version, c) = svc.candidates.show_shared(actor, p).await?;
    let views = svc.candidates.verification_views(&c.candidate_id).await?;
    let verifications = serde_json::to_vec(&views).expect("verifications serialize");
    if let Some(body) = bodies.get(&c.candidate_id, version, &verifications) {
        return Ok(Reply::Shared(body));
    }
    let mut full = (*c).clone();
    full.verifications = views;
    let body = axum::body::Bytes::from(
        serde_json::to_vec(&Wrapped { candidate: &full }).expect("a candidate serializes"),
    );
    bodies.put(
        &c.candidate_id,
        ShowBody {
            version,
            verifications,
            body: body.clone(),
        },
    );
    Ok(Reply::Shared(body))
}

pub(super) fn json_body(bytes: axum::body::Bytes) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// `{"candidate": ...}` with its verifications read from the store.
async fn candidate(svc: &Service, c: crate::candidate::Candidate) -> Result<Reply, ServiceError> {
    #[derive(serde::Serialize)]
    struct Wrapped<'a> {
        candidate: &'a crate::candidate::Candidate,
    }
    let c = svc.candidates.hydrate(c).await?;
    Ok(Reply::Json(
        serde_json::to_vec(&Wrapped { candidate: &c }).expect("a candidate serializes"),
    ))
}

/// A result value as JSON.
fn to<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("API results serialize")
}
