//! The method registry: every `POST /api/v1/<method>` the daemon routes, with its body limit.
//! The router's body limits, the metrics' method labels and `airlock call`'s name check read
//! it; a test proves every entry is dispatched and documented in the README, so a method
//! cannot be routed without being listed (or listed without being routed).

/// How large a method's request body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// [`super::SMALL_BODY_LIMIT`].
    Small,
    /// A patch: `max_patch_bytes` JSON-escaped at worst plus an envelope
    /// ([`crate::limits::patch_body_limit`]).
    Patch,
    /// [`super::EVIDENCE_BODY_LIMIT`].
    Evidence,
    /// [`super::RESOLVE_BODY_LIMIT`].
    Resolve,
    /// [`super::PREPARE_BODY_LIMIT`].
    Prepare,
    /// [`super::VERIFY_BODY_LIMIT`].
    Verify,
}

impl Body {
    pub fn bytes(self, config: &crate::config::Config) -> usize {
        match self {
            Body::Small => super::SMALL_BODY_LIMIT,
            Body::Patch => crate::limits::patch_body_limit(config.max_patch_bytes),
            Body::Evidence => super::EVIDENCE_BODY_LIMIT,
            Body::Resolve => super::RESOLVE_BODY_LIMIT,
            Body::Prepare => super::PREPARE_BODY_LIMIT,
            Body::Verify => super::VERIFY_BODY_LIMIT,
        }
    }
}

/// One routed method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    pub name: &'static str,
    pub body: Body,
}

const fn m(name: &'static str, body: Body) -> Method {
    Method { name, body }
}

/// Every method, in the README's order of flows.
pub const METHODS: &[Method] = &[
    m("evidence.record", Body::Evidence),
    m("integration.prepare", Body::Prepare),
    m("integration.resolve", Body::Resolve),
    m("integration.verify", Body::Verify),
    m("proposal.create", Body::Patch),
    m("proposal.attach_patch", Body::Patch),
    m("evidence.show", Body::Small),
    m("integration.show", Body::Small),
    m("integration.list", Body::Small),
    m("integration.patch", Body::Small),
    m("integration.delete", Body::Small),
    m("integration.cancel_verification", Body::Small),
    m("integration.request_delivery", Body::Small),
    m("integration.decide", Body::Small),
    m("integration.deliver", Body::Small),
    m("claim.acquire", Body::Small),
    m("claim.extend", Body::Small),
    m("claim.release", Body::Small),
    m("claim.show", Body::Small),
    m("claim.list", Body::Small),
    m("claim.heartbeat", Body::Small),
    m("claim.suspend", Body::Small),
    m("claim.revoke", Body::Small),
    m("claim.force_release", Body::Small),
    m("event.list", Body::Small),
    m("claim.contentions", Body::Small),
    m("claim.resolve_contention", Body::Small),
    m("claim.reconcile", Body::Small),
    m("claim.end_session", Body::Small),
    m("resource.show", Body::Small),
    m("proposal.get", Body::Small),
    m("proposal.list", Body::Small),
    m("proposal.request_review", Body::Small),
    m("proposal.reject", Body::Small),
    m("proposal.withdraw", Body::Small),
    m("vote.cast", Body::Small),
    m("vote.list", Body::Small),
    m("security.review", Body::Small),
    m("human.request_approval", Body::Small),
    m("human.decide", Body::Small),
    m("decision.record", Body::Small),
    m("decision.list", Body::Small),
    m("policy.evaluate", Body::Small),
    m("proposal.preview", Body::Small),
    m("patch.validate", Body::Small),
    m("patch.validation_show", Body::Small),
    m("patch.apply", Body::Small),
    m("transaction.show", Body::Small),
    m("transaction.list", Body::Small),
    m("transaction.phases", Body::Small),
    m("transaction.recovery", Body::Small),
    m("transaction.control", Body::Small),
];

/// The registry entry of `name`.
pub fn spec(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_shaped_like_methods() {
        for (i, a) in METHODS.iter().enumerate() {
            assert!(crate::client::check_method(a.name).is_ok(), "{}", a.name);
            assert!(
                METHODS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }
}
