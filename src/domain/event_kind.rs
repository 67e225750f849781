//! Every kind of entry the durable event log holds: the one list `event.list`, the event
//! stream and webhook subscriptions check a `kind` against (an unknown kind is refused, never
//! silently matched against nothing), and the log's writer asserts every row's kind is in.

/// The kinds, grouped by subject.
pub const EVENT_KINDS: &[&str] = &[
    // The governed path: resources, claims, contentions.
    "resource.created",
    "resource.token_issued",
    "claim.granted",
    "claim.extend",
    "claim.release",
    "claim.suspend",
    "claim.revoke",
    "claim.expire",
    "claim.transfer",
    "claim.resume",
    "claim.rebased",
    "contention.opened",
    "contention.resolve",
    // Proposals, their reviews and their transactions.
    "proposal.created",
    "proposal.revision_attached",
    "proposal.request_review",
    "proposal.accept",
    "proposal.reject",
    "proposal.withdraw",
    "vote.cast",
    "security.review",
    "approval.requested",
    "approval.approved",
    "approval.denied",
    "decision.recorded",
    "patch.validated",
    "transaction.prepared",
    "transaction.installing",
    "transaction.applied",
    "transaction.cancelled",
    "transaction.failed",
    "transaction.needs_attention",
    "transaction.rolled_back",
    // The candidate flow.
    "candidate.created",
    "candidate.resolved",
    "candidate.delivery_requested",
    "candidate.decided",
    "candidate.delivered",
    "candidate.deleted",
    "candidate.state_changed",
    "candidate.delivery_changed",
    "candidate.verification_requested",
    "candidate.verification_settled",
    // Jobs.
    JOB_QUEUED,
    JOB_STARTED,
    JOB_SETTLED,
    JOB_CANCELLED,
];

/// A job was recorded (`queued`), in `job.submit`'s transaction.
pub const JOB_QUEUED: &str = "job.queued";
/// A worker took the job, in the transaction that marks it started.
pub const JOB_STARTED: &str = "job.started";
/// The job settled with a terminal status (every job's last event), in the settle's
/// transaction; the status is the event's `new` and the payload's `state`.
pub const JOB_SETTLED: &str = "job.settled";
/// The job settled `cancelled` (written beside its `job.settled`).
pub const JOB_CANCELLED: &str = "job.cancelled";

/// Whether `kind` is a kind the log holds.
pub fn is_known(kind: &str) -> bool {
    EVENT_KINDS.contains(&kind)
}

/// `kind` as a filter named `field`: a known kind, else why not (naming the families).
pub fn check_filter(field: &str, kind: &str) -> Result<(), String> {
    if is_known(kind) {
        return Ok(());
    }
    let mut families: Vec<&str> = Vec::new();
    for f in EVENT_KINDS
        .iter()
        .filter_map(|k| k.split_once('.').map(|(f, _)| f))
    {
        if !families.contains(&f) {
            families.push(f);
        }
    }
    let near: Vec<&str> = kind
        .split_once('.')
        .map(|(f, _)| {
            EVENT_KINDS
                .iter()
                .copied()
                .filter(|k| k.starts_with(&format!("{f}.")))
                .collect()
        })
        .unwrap_or_default();
    Err(if near.is_empty() {
        format!(
            "{field} {kind:?} is not an event kind; kinds are <family>.<event> of the families {}",
            families.join(", ")
        )
    } else {
        format!(
            "{field} {kind:?} is not an event kind; {} has {}",
            kind.split('.').next().unwrap_or_default(),
            near.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_unique_and_named_family_dot_event() {
        let mut seen = std::collections::BTreeSet::new();
        for k in EVENT_KINDS {
            assert!(seen.insert(*k), "{k} listed twice");
            let (f, e) = k.split_once('.').expect("family.event");
            assert!(!f.is_empty() && !e.is_empty() && !e.contains('.'), "{k}");
        }
    }

    #[test]
    fn an_unknown_kind_is_refused_naming_its_familys_kinds() {
        assert!(check_filter("kind", "job.settled").is_ok());
        let e = check_filter("kind", "job.finished").unwrap_err();
        assert!(e.contains("\"job.finished\" is not an event kind"), "{e}");
        assert!(
            e.contains("job.queued, job.started, job.settled, job.cancelled"),
            "{e}"
        );
        let e = check_filter("events[0]", "build.done").unwrap_err();
        assert!(e.starts_with("events[0] \"build.done\""), "{e}");
        assert!(e.contains("claim, contention"), "{e}");
    }
}
