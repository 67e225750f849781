//! The delivery request state machine: `requested` -> (`approved` | `denied`) by a human;
//! `approved` -> `delivering` when a deliver call claims it; `delivering` -> `delivered` once the
//! receipt is in Git and the aggregate is saved.

use super::IllegalTransition;
use serde::{Deserialize, Serialize};

/// State of a delivery request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestState {
    Requested,
    Approved,
    Denied,
    /// A deliver call has claimed the request; its receipt decides the outcome.
    Delivering,
    Delivered,
}

/// What a delivery did, as its receipt records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptResult {
    /// The target ref moved to the candidate (`update_ref`).
    Landed,
    /// A public proposal ref was created; the target is untouched (`proposal`).
    Proposed,
}

impl ReceiptResult {
    /// Every value, for the API document and tests.
    pub const ALL: [ReceiptResult; 2] = [ReceiptResult::Landed, ReceiptResult::Proposed];
}

/// What moves a delivery request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestEvent {
    Approve,
    Deny,
    /// A deliver call claims the approved request (durably, before any ref changes).
    Claim,
    /// The receipt exists in Git.
    Complete,
}

impl RequestEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestEvent::Approve => "approve",
            RequestEvent::Deny => "deny",
            RequestEvent::Claim => "claim",
            RequestEvent::Complete => "complete",
        }
    }
}

impl RequestState {
    pub const ALL: [RequestState; 5] = [
        RequestState::Requested,
        RequestState::Approved,
        RequestState::Denied,
        RequestState::Delivering,
        RequestState::Delivered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Requested => "requested",
            RequestState::Approved => "approved",
            RequestState::Denied => "denied",
            RequestState::Delivering => "delivering",
            RequestState::Delivered => "delivered",
        }
    }

    /// The state after `event`, or why it cannot happen now.
    pub fn on(self, event: RequestEvent) -> Result<RequestState, IllegalTransition> {
        use RequestState as S;
        let next = match event {
            RequestEvent::Approve | RequestEvent::Deny => match self {
                S::Requested => Some(if event == RequestEvent::Approve {
                    S::Approved
                } else {
                    S::Denied
                }),
                S::Approved | S::Denied | S::Delivering | S::Delivered => None,
            },
            RequestEvent::Claim => match self {
                S::Approved => Some(S::Delivering),
                S::Requested | S::Denied | S::Delivering | S::Delivered => None,
            },
            RequestEvent::Complete => match self {
                S::Delivering => Some(S::Delivered),
                S::Requested | S::Approved | S::Denied | S::Delivered => None,
            },
        };
        next.ok_or(IllegalTransition {
            machine: "delivery request",
            from: self.as_str(),
            event: event.as_str(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_table_is_exactly_this() {
        use RequestEvent as E;
        use RequestState as S;
        let allowed = [
            (S::Requested, E::Approve, S::Approved),
            (S::Requested, E::Deny, S::Denied),
            (S::Approved, E::Claim, S::Delivering),
            (S::Delivering, E::Complete, S::Delivered),
        ];
        for from in S::ALL {
            for e in [E::Approve, E::Deny, E::Claim, E::Complete] {
                let want = allowed
                    .iter()
                    .find(|(f, ev, _)| *f == from && *ev == e)
                    .map(|(_, _, to)| *to);
                assert_eq!(from.on(e).ok(), want, "{from:?} + {e:?}");
            }
        }
        for s in S::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
    }
}
