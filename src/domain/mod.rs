//! Pure types and state machines: no I/O, no clock reads, no external crates beyond serde.
//! The API document's schemas of these types live with the wire types (`wire::schemas`).
//!
//! Every state machine here has exhaustive transition functions (no `_ =>` arm in a transition
//! or predicate), so a new state or event does not compile until it is classified; an illegal
//! transition is a typed [`IllegalTransition`] value, never a silent field assignment.

pub mod candidate;
pub mod claim;
pub mod delivery;
pub mod event_kind;
pub mod git;
pub mod isolation;
pub mod path;
pub mod policy;
pub mod proposal;
pub mod transaction;
pub mod validation;
pub mod verification;

/// A transition the state machine does not allow from the current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IllegalTransition {
    pub machine: &'static str,
    pub from: &'static str,
    pub event: &'static str,
}

impl std::fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: cannot {} from {}",
            self.machine, self.event, self.from
        )
    }
}

impl std::error::Error for IllegalTransition {}
