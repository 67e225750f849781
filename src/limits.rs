//! Every limit Airlock enforces, as a named constant. Each one produces a specific error that
//! names the field and the bound when it is hit.

use std::time::Duration;

/// Most argv entries a verification may have.
pub const MAX_ARGV_ENTRIES: usize = 64;
/// Most bytes in one argv entry.
pub const MAX_ARGV_ENTRY_BYTES: usize = 16 * 1024;
/// Timeout used when the caller names none.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Smallest accepted timeout.
pub const MIN_TIMEOUT_SECONDS: u64 = 1;
/// Largest accepted timeout (30 minutes).
pub const MAX_TIMEOUT_SECONDS: u64 = 1800;

/// Most output bytes retained per verification (head + marker + tail).
pub const OUTPUT_CAP_BYTES: usize = 65_536;
/// Bytes reserved inside the cap for the "bytes omitted" marker line.
pub const OUTPUT_MARKER_RESERVE_BYTES: usize = 128;
/// Bytes of the beginning of the output kept when it is truncated (about 32 KiB).
pub const OUTPUT_HEAD_BYTES: usize = (OUTPUT_CAP_BYTES - OUTPUT_MARKER_RESERVE_BYTES) / 2;
/// Bytes of the end of the output kept when it is truncated (about 32 KiB).
pub const OUTPUT_TAIL_BYTES: usize = (OUTPUT_CAP_BYTES - OUTPUT_MARKER_RESERVE_BYTES) / 2;

/// How many changed paths the `source_changed` error lists.
pub const SOURCE_CHANGED_LISTED_PATHS: usize = 20;

/// How long a `passed` result stays valid.
pub const VERIFICATION_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// Open files per job process (soft and hard).
pub const SANDBOX_NOFILE: i64 = 4096;
/// Largest file a job process may write (RLIMIT_FSIZE), 4 GiB.
pub const SANDBOX_MAX_FILE_BYTES: i64 = 4 << 30;
/// OOM score adjustment for job containers: they die before anything else on the host.
pub const SANDBOX_OOM_SCORE_ADJ: i64 = 1000;
/// Smallest memory limit Docker accepts (6 MiB); profiles below it are refused.
pub const MIN_MEMORY_BYTES: i64 = 6 * 1024 * 1024;
/// Smallest tmpfs size for /tmp.
pub const MIN_TMP_BYTES: i64 = 1024 * 1024;
/// Largest pids limit a profile may set.
pub const MAX_PIDS: i64 = 65_536;
/// Largest CPU count a profile may set.
pub const MAX_CPUS: f64 = 256.0;
/// Most bytes of a profile's setup script.
pub const MAX_SETUP_SCRIPT_BYTES: usize = 64 * 1024;
/// Most environment variables a profile may set.
pub const MAX_PROFILE_ENV_VARS: usize = 256;

/// Timeout for Docker API requests (until response headers arrive; streams are not timed).
pub const DOCKER_REQUEST_TIMEOUT_SECS: u64 = 120;
/// How long removal of a container is retried before Airlock reports it as left behind.
pub const CONTAINER_REMOVE_ATTEMPTS: u32 = 5;

/// Largest recovery artifact Airlock will read back (the output cap keeps real ones far smaller).
pub const MAX_ARTIFACT_BYTES: u64 = 1024 * 1024;
/// Most rows `verification list` returns.
pub const MAX_LIST_LIMIT: u32 = 1000;
/// Rows `verification list` returns when no limit is given.
pub const DEFAULT_LIST_LIMIT: u32 = 50;

/// Most bytes of git output Airlock reads into memory for one plumbing call.
pub const MAX_GIT_OUTPUT_BYTES: usize = 64 * 1024 * 1024;
