//! Blocking work from async code (a leaf every workflow and the runner call).

/// Runs blocking work (git plumbing, hashing, fsynced file writes) from async code without
/// stalling the runtime: tokio hands this worker thread's other tasks to another worker first
/// (`block_in_place`). Borrowing is allowed, unlike `spawn_blocking`, so a handler can pass
/// the candidate it holds under its lock. The daemon runs on the multi-thread runtime.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}
