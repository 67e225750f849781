//! The candidate state machine: `preparing` assembles inputs, `conflicted` waits for a
//! resolution, `frozen` is final for content, `unavailable` lost owned evidence, and the fences
//! `deleting` / `expired` allow nothing but cleanup.

use super::IllegalTransition;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateState {
    Preparing,
    Conflicted,
    Frozen,
    Unavailable,
    Deleting,
    Expired,
}

/// A kind of evidence a packet can carry and a candidate can require of every input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceSource {
    /// The retained revision under `refs/airlock/evidence/<ref>`.
    Git,
    /// The transcript artifact with its SHA-256.
    Transcript,
}

impl EvidenceSource {
    /// Every value, for the API document and tests.
    pub const ALL: [EvidenceSource; 2] = [EvidenceSource::Git, EvidenceSource::Transcript];
}

impl EvidenceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceSource::Git => "git",
            EvidenceSource::Transcript => "transcript",
        }
    }
}

/// The operations a candidate's mutation history records, by their API method names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MutationOperation {
    #[serde(rename = "integration.prepare")]
    Prepare,
    #[serde(rename = "integration.resolve")]
    Resolve,
    #[serde(rename = "integration.delete")]
    Delete,
    #[serde(rename = "integration.request_delivery")]
    RequestDelivery,
    #[serde(rename = "integration.decide")]
    Decide,
    #[serde(rename = "integration.deliver")]
    Deliver,
}

impl MutationOperation {
    /// Every value, for the API document and tests.
    pub const ALL: [MutationOperation; 6] = [
        MutationOperation::Prepare,
        MutationOperation::Resolve,
        MutationOperation::Delete,
        MutationOperation::RequestDelivery,
        MutationOperation::Decide,
        MutationOperation::Deliver,
    ];
}

/// What moves a candidate from one state to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateEvent {
    /// Assembly met conflicts.
    Conflict,
    /// Every input applied: the revision is frozen.
    Freeze,
    /// The last conflict was resolved: assembly continues.
    Resolve,
    /// Owned refs or transcript copies are gone or altered.
    LoseEvidence,
    /// `integration.delete` fenced it.
    Delete,
    /// Its lifetime ended.
    Expire,
}

impl CandidateEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateEvent::Conflict => "conflict",
            CandidateEvent::Freeze => "freeze",
            CandidateEvent::Resolve => "resolve",
            CandidateEvent::LoseEvidence => "lose evidence",
            CandidateEvent::Delete => "delete",
            CandidateEvent::Expire => "expire",
        }
    }
}

impl CandidateState {
    /// Every state, for SQL state lists and tests.
    pub const ALL: [CandidateState; 6] = [
        CandidateState::Preparing,
        CandidateState::Conflicted,
        CandidateState::Frozen,
        CandidateState::Unavailable,
        CandidateState::Deleting,
        CandidateState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CandidateState::Preparing => "preparing",
            CandidateState::Conflicted => "conflicted",
            CandidateState::Frozen => "frozen",
            CandidateState::Unavailable => "unavailable",
            CandidateState::Deleting => "deleting",
            CandidateState::Expired => "expired",
        }
    }

    /// True once the candidate is fenced: no further action except reads and deletion cleanup.
    pub fn is_fenced(self) -> bool {
        match self {
            CandidateState::Deleting | CandidateState::Expired => true,
            CandidateState::Preparing
            | CandidateState::Conflicted
            | CandidateState::Frozen
            | CandidateState::Unavailable => false,
        }
    }

    /// The state after `event`, or why it cannot happen now.
    pub fn on(self, event: CandidateEvent) -> Result<CandidateState, IllegalTransition> {
        use CandidateState as S;
        let next = match event {
            CandidateEvent::Conflict | CandidateEvent::Freeze => match self {
                S::Preparing => Some(if event == CandidateEvent::Conflict {
                    S::Conflicted
                } else {
                    S::Frozen
                }),
                S::Conflicted | S::Frozen | S::Unavailable | S::Deleting | S::Expired => None,
            },
            CandidateEvent::Resolve => match self {
                S::Conflicted => Some(S::Preparing),
                S::Preparing | S::Frozen | S::Unavailable | S::Deleting | S::Expired => None,
            },
            CandidateEvent::LoseEvidence => match self {
                S::Preparing | S::Conflicted | S::Frozen | S::Unavailable => Some(S::Unavailable),
                S::Deleting | S::Expired => None,
            },
            CandidateEvent::Delete | CandidateEvent::Expire => match self {
                S::Preparing | S::Conflicted | S::Frozen | S::Unavailable => {
                    Some(if event == CandidateEvent::Delete {
                        S::Deleting
                    } else {
                        S::Expired
                    })
                }
                S::Deleting | S::Expired => None,
            },
        };
        next.ok_or(IllegalTransition {
            machine: "candidate",
            from: self.as_str(),
            event: event.as_str(),
        })
    }

    /// The states [`CandidateState::is_fenced`] holds for, as a SQL list (`'a', 'b'`).
    pub fn fenced_sql_list() -> String {
        sql_list(
            CandidateState::ALL
                .into_iter()
                .filter(|s| s.is_fenced())
                .map(CandidateState::as_str),
        )
    }
}

/// `'a', 'b'` for a SQL `IN (...)` list of state names (which never contain quotes).
pub fn sql_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: [CandidateEvent; 6] = [
        CandidateEvent::Conflict,
        CandidateEvent::Freeze,
        CandidateEvent::Resolve,
        CandidateEvent::LoseEvidence,
        CandidateEvent::Delete,
        CandidateEvent::Expire,
    ];

    #[test]
    fn the_transition_table_is_exactly_this() {
        use CandidateState as S;
        let allowed = [
            (S::Preparing, CandidateEvent::Conflict, S::Conflicted),
            (S::Preparing, CandidateEvent::Freeze, S::Frozen),
            (S::Conflicted, CandidateEvent::Resolve, S::Preparing),
            (S::Preparing, CandidateEvent::LoseEvidence, S::Unavailable),
            (S::Conflicted, CandidateEvent::LoseEvidence, S::Unavailable),
            (S::Frozen, CandidateEvent::LoseEvidence, S::Unavailable),
            (S::Unavailable, CandidateEvent::LoseEvidence, S::Unavailable),
        ];
        for from in S::ALL {
            for e in EVENTS {
                let want = allowed
                    .iter()
                    .find(|(f, ev, _)| *f == from && *ev == e)
                    .map(|(_, _, to)| *to)
                    .or_else(|| {
                        // Any unfenced state can be deleted or expire.
                        let fence = if e == CandidateEvent::Delete {
                            Some(S::Deleting)
                        } else if e == CandidateEvent::Expire {
                            Some(S::Expired)
                        } else {
                            None
                        };
                        fence.filter(|_| !from.is_fenced())
                    });
                assert_eq!(from.on(e).ok(), want, "{from:?} + {e:?}");
            }
        }
        let err = S::Frozen.on(CandidateEvent::Freeze).unwrap_err();
        assert_eq!(err.to_string(), "candidate: cannot freeze from frozen");
    }

    #[test]
    fn mutation_operations_are_named_by_their_methods() {
        for (op, name) in [
            (MutationOperation::Prepare, "integration.prepare"),
            (MutationOperation::Resolve, "integration.resolve"),
            (MutationOperation::Delete, "integration.delete"),
            (
                MutationOperation::RequestDelivery,
                "integration.request_delivery",
            ),
            (MutationOperation::Decide, "integration.decide"),
            (MutationOperation::Deliver, "integration.deliver"),
        ] {
            assert_eq!(serde_json::to_value(op).unwrap(), name);
        }
    }

    #[test]
    fn fenced_states_as_sql() {
        assert_eq!(CandidateState::fenced_sql_list(), "'deleting', 'expired'");
    }
}
