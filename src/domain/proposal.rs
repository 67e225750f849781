//! Proposals: a patch-bearing request to change a governed worktree. Each patch is
//! an immutable, content-addressed revision; a new patch is a new revision, and everything
//! bound to an older revision (reviews, votes, approvals, validations) stops counting.

use super::IllegalTransition;
use serde::{Deserialize, Serialize};

/// Where a proposal is in its life. `accepted` is reached only by apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalState {
    Pending,
    InReview,
    Accepted,
    Rejected,
    Withdrawn,
}

/// What can happen to a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposalEvent {
    /// The author attaches a new patch revision (the state stays).
    AttachPatch,
    /// The author asks for review.
    RequestReview,
    /// A reviewer or admin rejects it.
    Reject,
    /// The author withdraws it.
    Withdraw,
    /// Apply installed it.
    Accept,
}

/// How risky the author says the change is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    #[default]
    Normal,
    High,
    Critical,
}

impl Risk {
    /// Every value, for the API document and tests.
    pub const ALL: [Risk; 4] = [Risk::Low, Risk::Normal, Risk::High, Risk::Critical];
}

impl ProposalState {
    pub const ALL: [ProposalState; 5] = [
        ProposalState::Pending,
        ProposalState::InReview,
        ProposalState::Accepted,
        ProposalState::Rejected,
        ProposalState::Withdrawn,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProposalState::Pending => "pending",
            ProposalState::InReview => "in_review",
            ProposalState::Accepted => "accepted",
            ProposalState::Rejected => "rejected",
            ProposalState::Withdrawn => "withdrawn",
        }
    }

    pub fn is_terminal(self) -> bool {
        match self {
            ProposalState::Accepted | ProposalState::Rejected | ProposalState::Withdrawn => true,
            ProposalState::Pending | ProposalState::InReview => false,
        }
    }

    /// The state after `event`, or why it is not allowed.
    pub fn on(self, event: ProposalEvent) -> Result<ProposalState, IllegalTransition> {
        use ProposalEvent as E;
        use ProposalState as S;
        let next = match (self, event) {
            (S::Pending, E::AttachPatch) => Some(S::Pending),
            (S::InReview, E::AttachPatch) => Some(S::InReview),
            (S::Pending, E::RequestReview) => Some(S::InReview),
            (S::Pending, E::Reject) | (S::InReview, E::Reject) => Some(S::Rejected),
            (S::Pending, E::Withdraw) | (S::InReview, E::Withdraw) => Some(S::Withdrawn),
            (S::InReview, E::Accept) => Some(S::Accepted),
            (S::Pending, E::Accept)
            | (S::InReview, E::RequestReview)
            // Terminal: every event named, so a new one must be classified here.
            | (
                S::Accepted | S::Rejected | S::Withdrawn,
                E::AttachPatch | E::RequestReview | E::Reject | E::Withdraw | E::Accept,
            ) => None,
        };
        next.ok_or(IllegalTransition {
            machine: "proposal",
            from: self.as_str(),
            event: event.as_str(),
        })
    }
}

impl ProposalEvent {
    pub const ALL: [ProposalEvent; 5] = [
        ProposalEvent::AttachPatch,
        ProposalEvent::RequestReview,
        ProposalEvent::Reject,
        ProposalEvent::Withdraw,
        ProposalEvent::Accept,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProposalEvent::AttachPatch => "attach_patch",
            ProposalEvent::RequestReview => "request_review",
            ProposalEvent::Reject => "reject",
            ProposalEvent::Withdraw => "withdraw",
            ProposalEvent::Accept => "accept",
        }
    }
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Normal => "normal",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

/// True when `s` is a revision digest: 64 lowercase hex digits (SHA-256 of the patch bytes).
pub fn is_revision(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_accept_nothing_and_live_ones_something() {
        for s in ProposalState::ALL {
            let allowed = ProposalEvent::ALL
                .into_iter()
                .filter(|e| s.on(*e).is_ok())
                .count();
            assert_eq!(allowed == 0, s.is_terminal(), "{s:?}");
        }
    }

    #[test]
    fn the_seed_transition_table() {
        use ProposalEvent as E;
        use ProposalState as S;
        assert_eq!(S::Pending.on(E::RequestReview), Ok(S::InReview));
        assert!(S::InReview.on(E::RequestReview).is_err());
        for from in [S::Pending, S::InReview] {
            assert_eq!(from.on(E::Reject), Ok(S::Rejected));
            assert_eq!(from.on(E::Withdraw), Ok(S::Withdrawn));
            assert_eq!(from.on(E::AttachPatch), Ok(from));
        }
        // Only apply accepts, and only a proposal in review.
        assert!(S::Pending.on(E::Accept).is_err());
        assert_eq!(S::InReview.on(E::Accept), Ok(S::Accepted));
    }

    #[test]
    fn revision_digests_are_lowercase_sha256_hex() {
        assert!(is_revision(&"a".repeat(64)));
        assert!(!is_revision(&"A".repeat(64)));
        assert!(!is_revision(&"a".repeat(40)));
        assert!(!is_revision(&"g".repeat(64)));
    }
}
