//! Crash points for tests: `AIRLOCK_CRASH_AT=<point>` makes the process SIGKILL itself at that
//! point, with no cleanup at all, exactly as if it had been killed from outside.

/// Every crash point: the verification pipeline's, in order, then the daemon's.
pub const CRASH_POINTS: [&str; 10] = [
    "after_insert",
    "after_create",
    "after_start",
    "after_destroy",
    "after_artifact",
    "after_settle",
    "prepare_after_insert",
    "prepare_after_retain",
    "resolve_after_intent",
    "deliver_after_refs",
];

/// Environment variable naming the crash point.
pub const CRASH_ENV: &str = "AIRLOCK_CRASH_AT";

/// Refuses an unknown crash point name, so a typo cannot silently disable a crash test.
pub fn validate_env() -> Result<(), String> {
    match std::env::var(CRASH_ENV) {
        Ok(v) if !v.is_empty() && !CRASH_POINTS.contains(&v.as_str()) => Err(format!(
            "{CRASH_ENV}={v:?} is not a crash point; known: {}",
            CRASH_POINTS.join(", ")
        )),
        _ => Ok(()),
    }
}

/// Kills this process with SIGKILL when `AIRLOCK_CRASH_AT` names `point`.
pub fn point(point: &str) {
    if std::env::var(CRASH_ENV).as_deref() == Ok(point) {
        tracing::warn!(point, "crash point reached; killing this process");
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; this is never reached.
        std::process::abort();
    }
}
