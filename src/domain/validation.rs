//! A validation's stages, pure: which stages there are, in the order they run, each stage's
//! state machine, and what "complete" and "valid" mean over them. A stage is recorded with its
//! outcome; only the tests stage is left `running` (its verifications settle later), and only
//! `running` moves again.

use super::IllegalTransition;
use serde::{Deserialize, Serialize};

/// A validation stage, in the order stages run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageName {
    /// The author's claims: active, unexpired, not stale.
    Claims,
    /// The stored patch artifact matches its digest.
    Artifact,
    /// The patch parses.
    Parse,
    /// The claims cover everything the patch touches.
    Coverage,
    /// git applies the patch in the sandbox.
    DryRun,
    /// The expected tests and required checks, on the post-image commit.
    Tests,
    /// The policy verdict (informational: it is judged again at apply).
    Policy,
}

impl StageName {
    pub const ALL: [StageName; 7] = [
        StageName::Claims,
        StageName::Artifact,
        StageName::Parse,
        StageName::Coverage,
        StageName::DryRun,
        StageName::Tests,
        StageName::Policy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StageName::Claims => "claims",
            StageName::Artifact => "artifact",
            StageName::Parse => "parse",
            StageName::Coverage => "coverage",
            StageName::DryRun => "dry_run",
            StageName::Tests => "tests",
            StageName::Policy => "policy",
        }
    }

    /// Whether the stage's outcome decides `valid` (the policy is judged again at apply, from
    /// the evidence as it is then).
    pub fn decides_validity(self) -> bool {
        match self {
            StageName::Policy => false,
            StageName::Claims
            | StageName::Artifact
            | StageName::Parse
            | StageName::Coverage
            | StageName::DryRun
            | StageName::Tests => true,
        }
    }
}

/// A stage's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageState {
    Executed,
    Skipped,
    Failed,
    Running,
}

/// What happens to a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageEvent {
    /// Work began that settles later (the tests).
    Start,
    /// It ran and passed.
    Pass,
    /// It did not need to run (an earlier stage left nothing to check, or nothing to run).
    Skip,
    /// It ran and did not pass, or could not run.
    Fail,
}

impl StageState {
    pub const ALL: [StageState; 4] = [
        StageState::Executed,
        StageState::Skipped,
        StageState::Failed,
        StageState::Running,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StageState::Executed => "executed",
            StageState::Skipped => "skipped",
            StageState::Failed => "failed",
            StageState::Running => "running",
        }
    }

    /// The state a stage is recorded with.
    pub fn begin(event: StageEvent) -> StageState {
        match event {
            StageEvent::Start => StageState::Running,
            StageEvent::Pass => StageState::Executed,
            StageEvent::Skip => StageState::Skipped,
            StageEvent::Fail => StageState::Failed,
        }
    }

    /// The state after `event`: only a running stage moves (a settled outcome is final).
    pub fn on(self, event: StageEvent) -> Result<StageState, IllegalTransition> {
        use StageEvent as E;
        use StageState as S;
        match (self, event) {
            (S::Running, E::Start) => Ok(S::Running),
            (S::Running, E::Pass) => Ok(S::Executed),
            (S::Running, E::Fail) => Ok(S::Failed),
            (S::Running, E::Skip)
            | (S::Executed | S::Skipped | S::Failed, E::Start | E::Pass | E::Skip | E::Fail) => {
                Err(IllegalTransition {
                    machine: "validation stage",
                    from: self.as_str(),
                    event: event.as_str(),
                })
            }
        }
    }

    /// The stage has its final outcome.
    pub fn is_settled(self) -> bool {
        match self {
            StageState::Running => false,
            StageState::Executed | StageState::Skipped | StageState::Failed => true,
        }
    }

    /// The outcome lets the validation be valid.
    pub fn passes(self) -> bool {
        match self {
            StageState::Executed | StageState::Skipped => true,
            StageState::Failed | StageState::Running => false,
        }
    }
}

impl StageEvent {
    pub const ALL: [StageEvent; 4] = [
        StageEvent::Start,
        StageEvent::Pass,
        StageEvent::Skip,
        StageEvent::Fail,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StageEvent::Start => "start",
            StageEvent::Pass => "pass",
            StageEvent::Skip => "skip",
            StageEvent::Fail => "fail",
        }
    }
}

/// (complete, valid) over a validation's stages: complete once no stage is running; valid once
/// complete and every stage that decides validity passed or was skipped.
pub fn judge(stages: &[(StageName, StageState)]) -> (bool, bool) {
    let complete = stages.iter().all(|(_, s)| s.is_settled());
    let valid = complete
        && stages
            .iter()
            .filter(|(n, _)| n.decides_validity())
            .all(|(_, s)| s.passes());
    (complete, valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_stage_moves_and_policy_never_decides_validity() {
        for s in StageState::ALL {
            for e in StageEvent::ALL {
                assert_eq!(
                    s.on(e).is_ok(),
                    s == StageState::Running && e != StageEvent::Skip,
                    "{s:?} {e:?}"
                );
            }
        }
        for e in StageEvent::ALL {
            let s = StageState::begin(e);
            assert_eq!(s.is_settled(), e != StageEvent::Start, "{e:?}");
        }
        use StageName as N;
        use StageState as S;
        assert_eq!(
            judge(&[(N::Claims, S::Executed), (N::Tests, S::Running)]),
            (false, false)
        );
        assert_eq!(
            judge(&[(N::Claims, S::Executed), (N::Tests, S::Skipped)]),
            (true, true)
        );
        assert_eq!(
            judge(&[(N::Claims, S::Executed), (N::Policy, S::Failed)]),
            (true, true)
        );
        assert_eq!(
            judge(&[(N::DryRun, S::Failed), (N::Policy, S::Executed)]),
            (true, false)
        );
        let names: Vec<&str> = StageName::ALL.iter().map(|n| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "claims", "artifact", "parse", "coverage", "dry_run", "tests", "policy"
            ]
        );
    }
}
