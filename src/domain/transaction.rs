//! The apply transaction's state machine: every control action is checked against the state
//! (a transaction that "succeeds" at any action whatever its state tells an operator nothing). Each phase is committed before its side effect:
//! `prepared` (staged files and the rollback artifact being written), `installing` (renames
//! into the worktree), `applied`. Recovery decides from the files: a transaction that reached
//! `installing` is rolled forward, one still `prepared` is undone (`cancelled`), and one whose
//! paths are neither pre- nor post-image is `needs_attention`.

use super::IllegalTransition;
use serde::{Deserialize, Serialize};

/// Where an apply transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxState {
    Prepared,
    Installing,
    Applied,
    RolledBack,
    Cancelled,
    Failed,
    NeedsAttention,
}

/// What moves a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxEvent {
    /// Staging and the rollback artifact are durable; renames begin.
    BeginInstall,
    /// Every path holds its post-image.
    Complete,
    /// A preparation was undone (by `cancel` or by recovery before `installing`).
    Cancel,
    /// A step failed before anything visible changed.
    Fail,
    /// Recovery found paths that are neither pre- nor post-image.
    Flag,
    /// A compensation restored every pre-image.
    RollBack,
    /// An operator's `resolve` of a flagged transaction whose every path holds its post-image.
    ResolveApplied,
    /// An operator's `resolve` of a flagged transaction whose every path holds its pre-image.
    ResolveRolledBack,
}

/// What `transaction.control` may ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    /// A new transaction from a fresh validation of the same revision.
    Retry,
    /// Undo a transaction interrupted in `prepared`.
    Cancel,
    /// File a reverse patch as a new proposal.
    Compensate,
    /// Settle a flagged transaction as the files stand (an admin, with a reason): `applied`
    /// when every touched path holds its post-image, `rolled_back` when every one holds its
    /// pre-image.
    Resolve,
    /// A fresh validation of the transaction's revision, linked to it: the first step of a
    /// retry.
    Validate,
    /// "stage" (a transaction prepared and parked before install), a name older clients send.
    /// Never offered:
    /// a parked transaction would hold its proposal's fence (votes, reviews, withdrawal and
    /// claim changes refused) for as long as it waited; `patch.apply` stages and installs in
    /// one call. Asking for it is refused with [`STAGE_REFUSAL`].
    Stage,
}

impl ControlAction {
    /// Every value, for the API document and tests.
    pub const ALL: [ControlAction; 6] = [
        ControlAction::Retry,
        ControlAction::Cancel,
        ControlAction::Compensate,
        ControlAction::Resolve,
        ControlAction::Validate,
        ControlAction::Stage,
    ];
}

/// Why `stage` is refused (named in the error and the README).
pub const STAGE_REFUSAL: &str = "stage is not offered: a transaction staged and parked before install would hold its proposal's fence (votes, reviews, withdrawal and changes to its claims refused) for as long as it waited. patch.apply stages and installs in one call; patch.validate (or transaction.control validate) shows the post-images first";

impl TxState {
    pub const ALL: [TxState; 7] = [
        TxState::Prepared,
        TxState::Installing,
        TxState::Applied,
        TxState::RolledBack,
        TxState::Cancelled,
        TxState::Failed,
        TxState::NeedsAttention,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TxState::Prepared => "prepared",
            TxState::Installing => "installing",
            TxState::Applied => "applied",
            TxState::RolledBack => "rolled_back",
            TxState::Cancelled => "cancelled",
            TxState::Failed => "failed",
            TxState::NeedsAttention => "needs_attention",
        }
    }

    /// The state named `s` (its `as_str`), if any.
    pub fn parse(s: &str) -> Option<TxState> {
        TxState::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The open states as a SQL list (`'prepared', 'installing'`).
    pub fn open_sql_list() -> String {
        super::candidate::sql_list(
            TxState::ALL
                .into_iter()
                .filter(|s| s.is_open())
                .map(TxState::as_str),
        )
    }

    /// Work may still be in flight (recovery looks at these after a crash).
    pub fn is_open(self) -> bool {
        match self {
            TxState::Prepared | TxState::Installing => true,
            TxState::Applied
            | TxState::RolledBack
            | TxState::Cancelled
            | TxState::Failed
            | TxState::NeedsAttention => false,
        }
    }

    pub fn on(self, event: TxEvent) -> Result<TxState, IllegalTransition> {
        use TxEvent as E;
        use TxState as S;
        let next = match (self, event) {
            (S::Prepared, E::BeginInstall) => Some(S::Installing),
            (S::Installing, E::Complete) => Some(S::Applied),
            (S::Prepared, E::Cancel) => Some(S::Cancelled),
            (S::Prepared, E::Fail) => Some(S::Failed),
            (S::Prepared, E::Flag) | (S::Installing, E::Flag) => Some(S::NeedsAttention),
            (S::Applied, E::RollBack) => Some(S::RolledBack),
            (S::NeedsAttention, E::ResolveApplied) => Some(S::Applied),
            (S::NeedsAttention, E::ResolveRolledBack) => Some(S::RolledBack),
            (S::Prepared, E::Complete)
            | (S::Prepared, E::RollBack)
            | (S::Installing, E::BeginInstall)
            | (S::Installing, E::Cancel)
            | (S::Installing, E::Fail)
            | (S::Installing, E::RollBack)
            | (S::Applied, E::BeginInstall)
            | (S::Applied, E::Complete)
            | (S::Applied, E::Cancel)
            | (S::Applied, E::Fail)
            | (S::Applied, E::Flag)
            | (S::Prepared | S::Installing | S::Applied, E::ResolveApplied)
            | (S::Prepared | S::Installing | S::Applied, E::ResolveRolledBack)
            // Terminal: every event named, so a new one must be classified here.
            | (
                S::RolledBack | S::Cancelled | S::Failed,
                E::BeginInstall
                | E::Complete
                | E::Cancel
                | E::Fail
                | E::Flag
                | E::RollBack
                | E::ResolveApplied
                | E::ResolveRolledBack,
            )
            | (
                S::NeedsAttention,
                E::BeginInstall | E::Complete | E::Cancel | E::Fail | E::Flag | E::RollBack,
            ) => None,
        };
        next.ok_or(IllegalTransition {
            machine: "transaction",
            from: self.as_str(),
            event: event.as_str(),
        })
    }

    /// The control actions this state accepts (what `transaction.recovery` offers).
    pub fn actions(self) -> &'static [ControlAction] {
        match self {
            TxState::Prepared => &[ControlAction::Cancel],
            TxState::Applied => &[ControlAction::Compensate],
            TxState::Failed | TxState::Cancelled => {
                &[ControlAction::Validate, ControlAction::Retry]
            }
            TxState::NeedsAttention => &[ControlAction::Resolve],
            TxState::Installing | TxState::RolledBack => &[],
        }
    }
}

impl TxEvent {
    pub const ALL: [TxEvent; 8] = [
        TxEvent::BeginInstall,
        TxEvent::Complete,
        TxEvent::Cancel,
        TxEvent::Fail,
        TxEvent::Flag,
        TxEvent::RollBack,
        TxEvent::ResolveApplied,
        TxEvent::ResolveRolledBack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TxEvent::BeginInstall => "begin_install",
            TxEvent::Complete => "complete",
            TxEvent::Cancel => "cancel",
            TxEvent::Fail => "fail",
            TxEvent::Flag => "flag",
            TxEvent::RollBack => "roll_back",
            TxEvent::ResolveApplied => "resolve_applied",
            TxEvent::ResolveRolledBack => "resolve_rolled_back",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_open_states_move_and_the_happy_path_is_three_phases() {
        for s in TxState::ALL {
            let moves = TxEvent::ALL
                .into_iter()
                .filter(|e| s.on(*e).is_ok())
                .count();
            match s {
                TxState::Prepared
                | TxState::Installing
                | TxState::Applied
                | TxState::NeedsAttention => {
                    assert!(moves > 0, "{s:?}")
                }
                TxState::RolledBack | TxState::Cancelled | TxState::Failed => {
                    assert_eq!(moves, 0, "{s:?}")
                }
            }
        }
        let s = TxState::Prepared.on(TxEvent::BeginInstall).unwrap();
        assert_eq!(s.on(TxEvent::Complete), Ok(TxState::Applied));
    }

    #[test]
    fn an_install_that_began_is_never_cancelled_or_failed() {
        // Once renames may have happened, only finishing forward or a human can end it.
        for e in [TxEvent::Cancel, TxEvent::Fail] {
            assert!(TxState::Installing.on(e).is_err());
        }
        assert_eq!(
            TxState::Installing.on(TxEvent::Flag),
            Ok(TxState::NeedsAttention)
        );
    }

    #[test]
    fn control_actions_follow_the_state() {
        assert_eq!(TxState::Prepared.actions(), [ControlAction::Cancel]);
        assert_eq!(TxState::Applied.actions(), [ControlAction::Compensate]);
        assert_eq!(
            TxState::Failed.actions(),
            [ControlAction::Validate, ControlAction::Retry]
        );
        assert!(TxState::Installing.actions().is_empty());
        // Stage is never offered (it is refused, naming why).
        assert!(
            TxState::ALL
                .iter()
                .all(|s| !s.actions().contains(&ControlAction::Stage))
        );
        assert_eq!(TxState::NeedsAttention.actions(), [ControlAction::Resolve]);
        // Only a flagged transaction is resolved, to either outcome the files can show.
        for s in TxState::ALL {
            let resolvable = s.on(TxEvent::ResolveApplied).is_ok();
            assert_eq!(resolvable, s == TxState::NeedsAttention, "{s:?}");
            assert_eq!(
                s.on(TxEvent::ResolveRolledBack).is_ok(),
                resolvable,
                "{s:?}"
            );
        }
        assert_eq!(TxState::open_sql_list(), "'prepared', 'installing'");
        // Every action a state offers is one its transitions (or a new transaction) can do.
        for s in TxState::ALL {
            for a in s.actions() {
                let ok = match a {
                    ControlAction::Cancel => s.on(TxEvent::Cancel).is_ok(),
                    ControlAction::Compensate => s == TxState::Applied,
                    ControlAction::Retry | ControlAction::Validate => {
                        !s.is_open() && s != TxState::Applied
                    }
                    ControlAction::Stage => false,
                    ControlAction::Resolve => s.on(TxEvent::ResolveApplied).is_ok(),
                };
                assert!(ok, "{s:?} offers {a:?}");
            }
        }
    }
}

/// Why a transaction failed or needs attention: the `failure_code` of its phase's detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// A recheck or the preparation refused; nothing visible changed.
    RefusedBeforeInstall,
    /// A rename or unlink of the install failed part way.
    InstallStopped,
    /// Recovery could not undo a preparation (a path already changed).
    UndoRefused,
    /// Recovery could not remove staged files named by a missing artifact.
    CleanupFailed,
    /// The rollback artifact is missing or corrupt where an install needs it.
    ArtifactUnusable,
    /// Every path holds its post-image but the proposal could not be accepted (it left
    /// review meanwhile): `resolve` settles the transaction.
    ProposalUnsettled,
}

impl FailureCode {
    /// Every value, for the API document and tests.
    pub const ALL: [FailureCode; 6] = [
        FailureCode::RefusedBeforeInstall,
        FailureCode::InstallStopped,
        FailureCode::UndoRefused,
        FailureCode::CleanupFailed,
        FailureCode::ArtifactUnusable,
        FailureCode::ProposalUnsettled,
    ];
}
