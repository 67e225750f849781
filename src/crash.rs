//! Crash points for tests: `AIRLOCK_CRASH_AT=<point>` makes the process SIGKILL itself at that
//! point, with no cleanup at all, exactly as if it had been killed from outside.
//!
//! Only builds with the `test-hooks` feature (which the test suite enables) act on it; any other
//! build ignores `AIRLOCK_CRASH_AT` entirely.

/// Every crash point. A new one must be classified in [`CrashPoint::as_str`] and
/// [`CrashPoint::is_pipeline`], and the recovery tests name the test that covers each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The verification pipeline: after the `running` row is committed.
    AfterInsert,
    /// After the container exists.
    AfterCreate,
    /// After the container started.
    AfterStart,
    /// After the container was destroyed, before the source check.
    AfterDestroy,
    /// After the result is complete, before it is signed (and before its artifact).
    BeforeSign,
    /// After the artifact is durable, before the row is settled.
    AfterArtifact,
    /// After the row is settled, before cleanup.
    AfterSettle,
    /// The daemon: after a new candidate's `preparing` row.
    PrepareAfterInsert,
    /// After the candidate-owned input refs exist.
    PrepareAfterRetain,
    /// After a resolution's intent is durable, before the tree edit.
    ResolveAfterIntent,
    /// After delivery's ref transaction, before the aggregate is saved.
    DeliverAfterRefs,
    /// After an apply's `prepared` row, before anything is staged.
    ApplyAfterPrepared,
    /// After the post-images are staged and the rollback artifact is durable, before
    /// `installing` is committed.
    ApplyAfterStaged,
    /// After `installing` is committed, before the first rename.
    ApplyAfterInstalling,
    /// After a base tree is staged into the tree cache, before it is published there.
    TreeCacheFilled,
}

impl CrashPoint {
    /// Every crash point: the verification pipeline's in order, then the daemon's.
    pub const ALL: [CrashPoint; 15] = [
        CrashPoint::AfterInsert,
        CrashPoint::AfterCreate,
        CrashPoint::AfterStart,
        CrashPoint::AfterDestroy,
        CrashPoint::BeforeSign,
        CrashPoint::AfterArtifact,
        CrashPoint::AfterSettle,
        CrashPoint::PrepareAfterInsert,
        CrashPoint::PrepareAfterRetain,
        CrashPoint::ResolveAfterIntent,
        CrashPoint::DeliverAfterRefs,
        CrashPoint::ApplyAfterPrepared,
        CrashPoint::ApplyAfterStaged,
        CrashPoint::ApplyAfterInstalling,
        CrashPoint::TreeCacheFilled,
    ];

    /// The name `AIRLOCK_CRASH_AT` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashPoint::AfterInsert => "after_insert",
            CrashPoint::AfterCreate => "after_create",
            CrashPoint::AfterStart => "after_start",
            CrashPoint::AfterDestroy => "after_destroy",
            CrashPoint::BeforeSign => "before_sign",
            CrashPoint::AfterArtifact => "after_artifact",
            CrashPoint::AfterSettle => "after_settle",
            CrashPoint::PrepareAfterInsert => "prepare_after_insert",
            CrashPoint::PrepareAfterRetain => "prepare_after_retain",
            CrashPoint::ResolveAfterIntent => "resolve_after_intent",
            CrashPoint::DeliverAfterRefs => "deliver_after_refs",
            CrashPoint::ApplyAfterPrepared => "apply_after_prepared",
            CrashPoint::ApplyAfterStaged => "apply_after_staged",
            CrashPoint::ApplyAfterInstalling => "apply_after_installing",
            CrashPoint::TreeCacheFilled => "tree_cache_filled",
        }
    }

    /// True for the points of the verification pipeline (reached by `airlock run`).
    pub fn is_pipeline(self) -> bool {
        match self {
            CrashPoint::AfterInsert
            | CrashPoint::AfterCreate
            | CrashPoint::AfterStart
            | CrashPoint::AfterDestroy
            | CrashPoint::BeforeSign
            | CrashPoint::AfterArtifact
            | CrashPoint::AfterSettle => true,
            CrashPoint::PrepareAfterInsert
            | CrashPoint::PrepareAfterRetain
            | CrashPoint::ResolveAfterIntent
            | CrashPoint::DeliverAfterRefs
            | CrashPoint::ApplyAfterPrepared
            | CrashPoint::ApplyAfterStaged
            | CrashPoint::ApplyAfterInstalling
            | CrashPoint::TreeCacheFilled => false,
        }
    }

    /// The point named `name`, if any.
    pub fn parse(name: &str) -> Option<CrashPoint> {
        CrashPoint::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// Environment variable naming the crash point.
pub const CRASH_ENV: &str = "AIRLOCK_CRASH_AT";

/// Refuses an unknown crash point name, so a typo cannot silently disable a crash test. A build
/// without the test hooks accepts anything, since it ignores the variable.
pub fn validate_env() -> Result<(), String> {
    if !cfg!(feature = "test-hooks") {
        return Ok(());
    }
    match std::env::var(CRASH_ENV) {
        Ok(v) if !v.is_empty() && CrashPoint::parse(&v).is_none() => Err(format!(
            "{CRASH_ENV}={v:?} is not a crash point; known: {}",
            CrashPoint::ALL.map(CrashPoint::as_str).join(", ")
        )),
        _ => Ok(()),
    }
}

/// Kills this process with SIGKILL when `AIRLOCK_CRASH_AT` names `point` (test-hooks builds
/// only).
pub fn point(point: CrashPoint) {
    if cfg!(feature = "test-hooks") && std::env::var(CRASH_ENV).as_deref() == Ok(point.as_str()) {
        tracing::warn!(
            point = point.as_str(),
            "crash point reached; killing this process"
        );
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; this is never reached.
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        let mut names: Vec<&str> = CrashPoint::ALL.iter().map(|p| p.as_str()).collect();
        for p in CrashPoint::ALL {
            assert_eq!(CrashPoint::parse(p.as_str()), Some(p));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CrashPoint::ALL.len());
        assert_eq!(CrashPoint::parse("after_lunch"), None);
    }
}
