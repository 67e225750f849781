//! The candidate flow's entries in the durable event log (the `events` table the governed path
//! writes too): each is derived from what a save changes and written in the save's own
//! transaction, so the log never says more or less than the candidate rows.
//!
//! | kind | when |
//! |---|---|
//! | `candidate.created` | `prepare` recorded the candidate (`preparing`; its actor) |
//! | `candidate.resolved`, `.delivery_requested`, `.decided`, `.delivered`, `.deleted` | that request completed (its actor, its result id) |
//! | `candidate.state_changed` | assembly (`preparing` -> `frozen` or `conflicted`), expiry or lost evidence moved the state without a request |
//! | `candidate.delivery_changed` | the delivery request's state moved without a request (a receipt reconciled) |
//! | `candidate.verification_requested`, `candidate.verification_settled` | a verification of it was recorded, and settled (written by the store with the verification row) |

use crate::candidate::{Candidate, Mutation, MutationOperation};
use crate::domain::candidate::CandidateState;
use crate::domain::delivery::RequestState;
use crate::store::NewEvent;
use serde_json::json;

/// The actor of a change no request made (assembly, expiry, reconciliation).
pub const SYSTEM: &str = "system:airlock";

/// What a loaded candidate looked like in the database, to tell what a save changes.
#[derive(Debug, Clone)]
pub struct Before {
    state: CandidateState,
    request_state: Option<RequestState>,
    last_mutation: Option<Mutation>,
}

impl Before {
    pub fn of(c: &Candidate) -> Before {
        Before {
            state: c.state,
            request_state: c.delivery_request.as_ref().map(|r| r.state),
            last_mutation: c.mutations.last().cloned(),
        }
    }
}

/// The event name of a completed mutation.
pub fn mutation_kind(op: MutationOperation) -> &'static str {
    match op {
        // Recorded with the insert (`created`); no later save appends it.
        MutationOperation::Prepare => "candidate.created",
        MutationOperation::Resolve => "candidate.resolved",
        MutationOperation::Delete => "candidate.deleted",
        MutationOperation::RequestDelivery => "candidate.delivery_requested",
        MutationOperation::Decide => "candidate.decided",
        MutationOperation::Deliver => "candidate.delivered",
    }
}

fn row(
    c: &Candidate,
    kind: &str,
    actor: &str,
    prior: Option<&str>,
    new: Option<&str>,
    extra: serde_json::Value,
    at: &str,
) -> NewEvent {
    let mut payload = json!({
        "candidate_id": c.candidate_id,
        "version": c.version,
        "state": c.state.as_str(),
        "request_state": c.delivery_request.as_ref().map(|r| r.state.as_str()),
        "candidate_revision": c.candidate_revision,
    });
    if let (Some(p), serde_json::Value::Object(more)) = (payload.as_object_mut(), extra) {
        p.extend(more);
    }
    NewEvent {
        workspace_id: c.workspace_id.clone(),
        subject: c.candidate_id.clone(),
        kind: kind.to_string(),
        actor: actor.to_string(),
        prior: prior.map(str::to_string),
        new: new.map(str::to_string),
        payload: payload.to_string(),
        at: at.to_string(),
    }
}

/// `candidate.created`, for the insert of a new candidate.
pub fn created(c: &Candidate, actor: &str) -> NewEvent {
    row(
        c,
        "candidate.created",
        actor,
        None,
        Some(c.state.as_str()),
        json!({"target_ref": c.target_ref, "inputs": c.submissions.len()}),
        &c.created_at,
    )
}

/// What saving `after` over `before` records: the completed mutation, else a state change by
/// the system, else a delivery-request change by the system (at most one each).
pub fn of_save(before: &Before, after: &Candidate, at: &str) -> Vec<NewEvent> {
    let mut out = Vec::new();
    let (state, request) = (
        after.state,
        after.delivery_request.as_ref().map(|r| r.state),
    );
    let new_mutation = after
        .mutations
        .last()
        .filter(|m| Some(*m) != before.last_mutation.as_ref());
    if let Some(m) = new_mutation {
        out.push(row(
            after,
            mutation_kind(m.operation),
            &m.actor_key,
            Some(before.state.as_str()),
            Some(state.as_str()),
            json!({"result_id": m.result_id, "idempotency_key": m.idempotency_key}),
            at,
        ));
        return out;
    }
    if state != before.state {
        out.push(row(
            after,
            "candidate.state_changed",
            SYSTEM,
            Some(before.state.as_str()),
            Some(state.as_str()),
            json!({"error": after.error}),
            at,
        ));
    }
    if request != before.request_state {
        out.push(row(
            after,
            "candidate.delivery_changed",
            SYSTEM,
            before.request_state.map(RequestState::as_str),
            request.map(RequestState::as_str),
            json!({}),
            at,
        ));
    }
    out
}
