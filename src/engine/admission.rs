//! The admission seam: what an embedding server's policy is asked before each candidate
//! operation and verification step, and the slot it returns, held through the action.

use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use std::sync::Arc;

/// What the admission seam is asked about. Admission runs after
/// authorization, for every candidate mutation and for reads that ask: prepare asks with the new
/// candidate before its first durable write (`new_candidate`), a replayed prepare with the
/// existing one; every other operation with the candidate it acts on, after loading it.
#[derive(Debug, Clone)]
pub struct Admission<'a> {
    pub operation: Operation,
    pub mutation: bool,
    pub actor: &'a Actor,
    pub workspace_id: &'a str,
    pub mission_id: Option<&'a str>,
    pub candidate: &'a crate::candidate::Candidate,
    pub new_candidate: bool,
    pub submissions: &'a [crate::candidate::SubmissionRef],
}

/// What is being admitted. Verification is admitted three times, separately: when it is
/// queued (the API call), before its container is created, and before it is started; no
/// admission is held while the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Prepare,
    Show,
    Patch,
    Conflict,
    Resolve,
    Delete,
    VerifyQueue,
    VerifyCreate,
    VerifyStart,
    CancelVerification,
    RequestDelivery,
    Decide,
    Deliver,
}

impl Operation {
    /// The API method (with the verification stage).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Prepare => "integration.prepare",
            Operation::Show => "integration.show",
            Operation::Patch => "integration.patch",
            Operation::Conflict => "integration.conflict",
            Operation::Resolve => "integration.resolve",
            Operation::Delete => "integration.delete",
            Operation::VerifyQueue => "integration.verify",
            Operation::VerifyCreate => "integration.verify/create",
            Operation::VerifyStart => "integration.verify/start",
            Operation::CancelVerification => "integration.cancel_verification",
            Operation::RequestDelivery => "integration.request_delivery",
            Operation::Decide => "integration.decide",
            Operation::Deliver => "integration.deliver",
        }
    }
}

/// Returned by a successful admission and held through the consequential action; dropping it
/// runs the policy's release, so a slot it granted is returned however the action ends.
#[must_use = "hold the admission through the action it admits"]
pub struct Admitted {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
    accepted_set_version: Option<u64>,
}

impl Admitted {
    /// An admission with nothing to release.
    pub fn unconditional() -> Admitted {
        Admitted {
            release: None,
            accepted_set_version: None,
        }
    }

    /// An admission that runs `release` when dropped.
    pub fn with_release(release: impl FnOnce() + Send + Sync + 'static) -> Admitted {
        Admitted {
            release: Some(Box::new(release)),
            accepted_set_version: None,
        }
    }

    /// Freezes the mission's accepted-set version into the candidate, so a later change of
    /// the mission cannot change what the candidate was admitted under. Read only when a new candidate is prepared (`new_candidate`); the value
    /// is stored with the candidate and never changes. Elsewhere it is ignored.
    pub fn freezing_accepted_set_version(mut self, version: u64) -> Admitted {
        self.accepted_set_version = Some(version);
        self
    }

    /// The accepted-set version the policy froze, if any.
    pub fn accepted_set_version(&self) -> Option<u64> {
        self.accepted_set_version
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("release", &self.release.is_some())
            .field("accepted_set_version", &self.accepted_set_version)
            .finish()
    }
}

/// Server-controlled admission policy.
pub type AdmissionFn = Arc<dyn Fn(&Admission) -> Result<Admitted, ServiceError> + Send + Sync>;

/// The standalone default: run actors and non-empty mission ids are refused for mutations.
pub fn default_admission() -> AdmissionFn {
    Arc::new(|a: &Admission| {
        if a.mission_id.is_some_and(|m| !m.is_empty()) {
            return Err(ServiceError::precondition(format!(
                "{}: mission_id is not supported by the standalone server",
                a.operation.as_str()
            )));
        }
        if a.mutation && matches!(a.actor, Actor::Run { .. }) {
            return Err(ServiceError::PermissionDenied(format!(
                "{}: run actors cannot change candidates on the standalone server",
                a.operation.as_str()
            )));
        }
        Ok(Admitted::unconditional())
    })
}
