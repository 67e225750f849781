//! A verification's status, its one transition (`running` to a terminal status, by a
//! [`Settlement`]) and how a finished job is classified.

use super::IllegalTransition;
use serde::{Deserialize, Serialize};

/// Status of a verification. `Running` is the only non-terminal state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Passed,
    Failed,
    TimedOut,
    Cancelled,
    Error,
    SourceChanged,
}

impl Status {
    /// Every status, for parsing, SQL state lists and tests.
    pub const ALL: [Status; 7] = [
        Status::Running,
        Status::Passed,
        Status::Failed,
        Status::TimedOut,
        Status::Cancelled,
        Status::Error,
        Status::SourceChanged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Cancelled => "cancelled",
            Status::Error => "error",
            Status::SourceChanged => "source_changed",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// True for every state a verification can end in.
    pub fn is_terminal(self) -> bool {
        match self {
            Status::Running => false,
            Status::Passed
            | Status::Failed
            | Status::TimedOut
            | Status::Cancelled
            | Status::Error
            | Status::SourceChanged => true,
        }
    }
}

/// How the job ended, as the container runtime observed it. Outcomes, not errors.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEnd {
    Exited { code: i64, oom_killed: bool },
    TimedOut,
    Cancelled,
}

impl JobEnd {
    /// True when the trusted source check decides the status: only an exit that was not killed
    /// for memory can still pass (or fail on its own terms).
    pub fn needs_source_check(&self) -> bool {
        match self {
            JobEnd::Exited {
                oom_killed: false, ..
            } => true,
            JobEnd::Exited {
                oom_killed: true, ..
            }
            | JobEnd::TimedOut
            | JobEnd::Cancelled => false,
        }
    }
}

/// What the trusted source check, run on the host after the container was destroyed, found.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceCheck {
    /// Not run, because the job end decides the status on its own.
    NotRun,
    /// Every tracked path is exactly as staged, and every extra check agreed.
    Unchanged,
    /// Tracked paths differ: the first ones (sorted) and how many in all.
    Changed { listed: Vec<String>, total: usize },
    /// An extra check (such as candidate-owned evidence) says the sources changed.
    ExtraChanged(String),
    /// The check itself could not be done.
    Failed(String),
}

/// Why a verification ended without a classified job: the command never ran to an end that
/// Airlock could judge.
#[derive(Debug, Clone, PartialEq)]
pub enum Unfinished {
    /// Cancelled while queued, before the command started.
    CancelledBeforeStart,
    /// The checkout could not be staged (or its tree was replaced before the run).
    Staging(String),
    /// The container runtime failed.
    Sandbox(String),
    /// No engine could take the job within its timeout (the last reason).
    NotPlaced(String),
    /// Recovery found the run interrupted before its result was durable.
    Interrupted,
    /// Recovery found the run interrupted, and the engine it may have run on has not answered
    /// for longer than `engine_lost_after_seconds`: what happened there is unknowable.
    EngineLost { engine: String, away_seconds: u64 },
    /// Recovery found an artifact it cannot trust (corrupt, truncated, mismatched).
    ArtifactRejected(String),
    /// The job's engine stopped answering: at its deadline it did not confirm the kill, or it
    /// did not finish the job within its timeout plus the engine's grace. Never `timed_out`,
    /// which means Airlock saw the command overrun and killed it.
    EngineUnresponsive { engine: String, what: String },
    /// The job's dependency set could not be had (its fetch failed, was refused egress, hit a
    /// bound, or the set could not be mounted there): why.
    Dependencies(String),
    /// A recorded job that never started could not be taken up again after a restart: why.
    NotResumed(String),
}

/// The error recorded when a run was interrupted before its result was durable.
pub const INTERRUPTED: &str = "interrupted before a result was recorded";

impl Unfinished {
    /// The status and reason it settles with.
    pub fn settle(&self) -> (Status, String) {
        match self {
            Unfinished::CancelledBeforeStart => (
                Status::Cancelled,
                "cancelled before the command started".into(),
            ),
            Unfinished::Staging(e) => (Status::Error, format!("staging failed: {e}")),
            Unfinished::Sandbox(e) => (Status::Error, format!("sandbox failure: {e}")),
            Unfinished::NotPlaced(e) => (Status::Error, format!("not placed on an engine: {e}")),
            Unfinished::Interrupted => (Status::Error, INTERRUPTED.into()),
            Unfinished::EngineLost {
                engine,
                away_seconds,
            } => (
                Status::Error,
                format!(
                    "engine lost: {engine} has not answered for {away_seconds} s; the job's result is unknown and it is not rerun"
                ),
            ),
            Unfinished::ArtifactRejected(e) => {
                (Status::Error, format!("recovery artifact rejected: {e}"))
            }
            Unfinished::Dependencies(why) => (Status::Error, format!("dependencies: {why}")),
            Unfinished::NotResumed(why) => (
                Status::Error,
                format!("the job could not be resumed after a restart: {why}"),
            ),
            Unfinished::EngineUnresponsive { engine, what } => (
                Status::Error,
                format!(
                    "engine {engine} stopped answering: {what}; the job's result is unknown and it is not rerun (its container is removed once the engine answers again)"
                ),
            ),
        }
    }
}

/// What ends a `running` verification: the only ways to a terminal status.
#[derive(Debug, Clone)]
pub enum Settlement<'a> {
    /// The job ran to an end Airlock observed, judged with its source check ([`classify`]).
    Judged {
        end: &'a JobEnd,
        check: &'a SourceCheck,
        cx: Context<'a>,
    },
    /// The command never reached an end Airlock could judge ([`Unfinished::settle`]).
    Unfinished(&'a Unfinished),
    /// Recovery found the result durable in its artifact: exactly that status and reason.
    Restored {
        status: Status,
        error: Option<String>,
    },
    /// The settled result's artifact could not be written (why), so that result is not durable
    /// and is never what is stored: the one move out of a terminal status, to `error`, taken
    /// before the row is written.
    Undurable(&'a str),
}

impl Settlement<'_> {
    pub fn as_str(&self) -> &'static str {
        match self {
            Settlement::Judged { .. } => "judge",
            Settlement::Unfinished(_) => "settle unfinished",
            Settlement::Restored { .. } => "restore",
            Settlement::Undurable(_) => "artifact write failed",
        }
    }
}

impl Status {
    /// The status and reason (the verification's `error`) `settlement` ends this one with. Only
    /// `running` ends, once; a restored status must be terminal; a settled result whose
    /// artifact could not be written becomes `error`.
    pub fn on(
        self,
        settlement: Settlement<'_>,
    ) -> Result<(Status, Option<String>), IllegalTransition> {
        let illegal = IllegalTransition {
            machine: "verification",
            from: self.as_str(),
            event: settlement.as_str(),
        };
        let running = match self {
            Status::Running => true,
            Status::Passed
            | Status::Failed
            | Status::TimedOut
            | Status::Cancelled
            | Status::Error
            | Status::SourceChanged => false,
        };
        match (running, settlement) {
            (false, Settlement::Undurable(why)) => Ok((
                Status::Error,
                Some(format!("recovery artifact could not be written: {why}")),
            )),
            (true, Settlement::Undurable(_)) | (false, _) => Err(illegal),
            (true, Settlement::Judged { end, check, cx }) => Ok(classify(end, check, cx)),
            (true, Settlement::Unfinished(why)) => {
                let (status, reason) = why.settle();
                Ok((status, Some(reason)))
            }
            (true, Settlement::Restored { status, error }) => {
                if status.is_terminal() {
                    Ok((status, error))
                } else {
                    Err(illegal)
                }
            }
        }
    }
}

/// What the classification needs to word its reasons.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub commit: &'a str,
    pub memory_bytes: i64,
    pub timeout_seconds: u64,
}

/// The status and the reason (the verification's `error`) for a finished job.
pub fn classify(end: &JobEnd, check: &SourceCheck, cx: Context) -> (Status, Option<String>) {
    let from_exit = match end {
        JobEnd::Exited {
            oom_killed: true, ..
        } => {
            return (
                Status::Error,
                Some(format!(
                    "out of memory: a process was killed at memory_limit_bytes {}",
                    cx.memory_bytes
                )),
            );
        }
        JobEnd::TimedOut => {
            return (
                Status::TimedOut,
                Some(format!("timed out after {} s", cx.timeout_seconds)),
            );
        }
        JobEnd::Cancelled => {
            return (
                Status::Cancelled,
                Some("cancelled before the command finished".into()),
            );
        }
        JobEnd::Exited {
            code: 0,
            oom_killed: false,
        } => Status::Passed,
        JobEnd::Exited {
            oom_killed: false, ..
        } => Status::Failed,
    };
    match check {
        SourceCheck::Unchanged => (from_exit, None),
        SourceCheck::Changed { listed, total } => {
            let more = if *total > listed.len() {
                format!(" (and {} more)", total - listed.len())
            } else {
                String::new()
            };
            (
                Status::SourceChanged,
                Some(format!(
                    "{total} tracked path(s) differ from {}: {}{more}",
                    cx.commit,
                    listed.join(", ")
                )),
            )
        }
        SourceCheck::ExtraChanged(reason) => (Status::SourceChanged, Some(reason.clone())),
        SourceCheck::Failed(e) => (Status::Error, Some(format!("source check failed: {e}"))),
        // A job that may pass is never classified without its check: absent evidence is an
        // error, not a pass.
        SourceCheck::NotRun => (
            Status::Error,
            Some("the source check did not run".to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CX: Context = Context {
        commit: "abc",
        memory_bytes: 64,
        timeout_seconds: 5,
    };

    fn exited(code: i64) -> JobEnd {
        JobEnd::Exited {
            code,
            oom_killed: false,
        }
    }

    #[test]
    fn only_an_unchanged_zero_exit_passes() {
        let changed = SourceCheck::Changed {
            listed: vec!["a".into()],
            total: 3,
        };
        let cases = [
            (exited(0), SourceCheck::Unchanged, Status::Passed),
            (exited(1), SourceCheck::Unchanged, Status::Failed),
            (exited(0), changed.clone(), Status::SourceChanged),
            (exited(7), changed, Status::SourceChanged),
            (
                exited(0),
                SourceCheck::ExtraChanged("refs moved".into()),
                Status::SourceChanged,
            ),
            (exited(0), SourceCheck::Failed("io".into()), Status::Error),
            (exited(0), SourceCheck::NotRun, Status::Error),
            (
                JobEnd::Exited {
                    code: 0,
                    oom_killed: true,
                },
                SourceCheck::NotRun,
                Status::Error,
            ),
            (JobEnd::TimedOut, SourceCheck::NotRun, Status::TimedOut),
            (JobEnd::Cancelled, SourceCheck::NotRun, Status::Cancelled),
        ];
        for (end, check, want) in cases {
            assert_eq!(classify(&end, &check, CX).0, want, "{end:?} {check:?}");
        }
    }

    #[test]
    fn only_running_settles_once_and_a_restored_status_is_terminal() {
        let interrupted = Unfinished::Interrupted;
        let judged = Settlement::Judged {
            end: &JobEnd::TimedOut,
            check: &SourceCheck::NotRun,
            cx: CX,
        };
        for from in Status::ALL {
            for s in [
                judged.clone(),
                Settlement::Unfinished(&interrupted),
                Settlement::Restored {
                    status: Status::Passed,
                    error: None,
                },
            ] {
                let to = from.on(s.clone());
                if from == Status::Running {
                    assert!(to.as_ref().is_ok_and(|(t, _)| t.is_terminal()), "{s:?}");
                } else {
                    let e = to.expect_err("a terminal status never moves");
                    assert_eq!((e.machine, e.from), ("verification", from.as_str()));
                }
            }
        }
        assert_eq!(
            Status::Running.on(judged).unwrap(),
            (Status::TimedOut, Some("timed out after 5 s".into()))
        );
        assert_eq!(
            Status::Running
                .on(Settlement::Unfinished(&interrupted))
                .unwrap(),
            (Status::Error, Some(INTERRUPTED.into()))
        );
        assert!(
            Status::Running
                .on(Settlement::Restored {
                    status: Status::Running,
                    error: None
                })
                .is_err(),
            "an artifact cannot restore a run to running"
        );
    }

    #[test]
    fn a_settled_result_whose_artifact_failed_becomes_error_and_nothing_else_does() {
        for from in Status::ALL {
            let to = from.on(Settlement::Undurable("disk full"));
            if from == Status::Running {
                assert!(to.is_err(), "a run not yet settled has no artifact to lose");
            } else {
                assert_eq!(
                    to.unwrap(),
                    (
                        Status::Error,
                        Some("recovery artifact could not be written: disk full".into())
                    ),
                    "from {from:?}"
                );
            }
        }
    }

    #[test]
    fn reasons_name_the_bound_and_the_paths() {
        let (_, r) = classify(
            &exited(0),
            &SourceCheck::Changed {
                listed: vec!["a".into(), "b".into()],
                total: 5,
            },
            CX,
        );
        assert_eq!(
            r.unwrap(),
            "5 tracked path(s) differ from abc: a, b (and 3 more)"
        );
        let (_, r) = classify(
            &JobEnd::Exited {
                code: 137,
                oom_killed: true,
            },
            &SourceCheck::NotRun,
            CX,
        );
        assert!(r.unwrap().contains("memory_limit_bytes 64"));
        assert!(!JobEnd::TimedOut.needs_source_check());
        assert!(exited(3).needs_source_check());
    }
}
