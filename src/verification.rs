//! The verification record: the object `airlock run` prints, the store keeps and the recovery
//! artifact carries. Also the pure request validation (argv, timeout).

use crate::limits;
use serde::{Deserialize, Serialize};

pub use crate::domain::verification::Status;

/// One verification, with exactly the fields of the wire object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Verification {
    pub verification_id: String,
    pub candidate_revision: String,
    pub argv: Vec<String>,
    pub image: String,
    pub observed_image: Option<String>,
    pub user: String,
    pub working_dir: String,
    pub timeout_seconds: u64,
    pub cpu_limit: f64,
    pub memory_limit_bytes: i64,
    pub environment_sha256: String,
    pub setup_script_sha256: String,
    pub status: Status,
    pub exit_code: Option<i64>,
    pub output: String,
    pub output_truncated: bool,
    pub output_bytes_total: u64,
    pub oom_killed: bool,
    pub duration_ms: Option<u64>,
    pub error: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub expires_at: String,
    pub creation_key: String,
    pub container_id: Option<String>,
    /// The configured name of the engine the job ran on (`local` without `[[engines]]`);
    /// null when it never reached one, and in results recorded before engines had names.
    #[serde(default)]
    pub engine: Option<String>,
    /// The isolation level the job's container ran under (the profile's `runtime`: `runc` or
    /// `runsc`); absent in results recorded before isolation levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<crate::domain::isolation::Isolation>,
    /// Only in a candidate's verifications: still waiting for a worker permit (status
    /// `running`, nothing started yet). Absent from `airlock run` results and artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<bool>,
    /// Only while `queued` because no engine can take the job now: why (every engine's
    /// reason: capacity, health, labels, image id). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    /// Once settled after a run: where its time went (absent while it runs, for a run that
    /// never reached an engine, for a result settled by recovery, and in results recorded
    /// before phases were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<JobPhases>,
    /// The tree of `candidate_revision` (absent in records from before attestations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_tree: Option<String>,
    /// The git directory the revision was staged from (absent in records from before
    /// attestations); the attestation's `resourceUri` names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The job's dependency set, when its profile has one (see [`DependencyRecord`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<DependencyRecord>,
    /// Once settled, when a signing key is configured: the signed in-toto statement of this
    /// result (a DSSE envelope; see `airlock attestation verify`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::attest::Envelope>,
}

/// A job's dependency set: what it was made from, what it holds and what it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DependencyRecord {
    /// The set's key: the SHA-256 of its inputs (the files below, the profile's dependency
    /// definition, the image id); `environment_sha256` covers it.
    pub key: String,
    /// The revision's files the set is made from (lockfiles and manifests), by path, with
    /// the SHA-256 of their content.
    pub lockfiles: std::collections::BTreeMap<String, String>,
    /// The set's content digest (`dependencies_sha256`: every path and byte it holds), once
    /// the job had it; null when it could not be fetched.
    pub sha256: Option<String>,
    /// The packages it resolved to, as package URLs with their digests.
    pub resolved: Vec<Resolved>,
}

impl Verification {
    /// Ends this `running` verification as `settlement` says (its status and `error`): the
    /// only way a record's status changes.
    pub fn settle(
        &mut self,
        settlement: crate::domain::verification::Settlement<'_>,
    ) -> Result<(), crate::domain::IllegalTransition> {
        let (status, error) = self.status.on(settlement)?;
        self.status = status;
        self.error = error;
        Ok(())
    }
}

/// One package a dependency set resolved to, as the attestation lists it (SLSA's resource
/// descriptor: a package URL and the digest its registry and lockfile give).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Resolved {
    /// `pkg:cargo/<name>@<version>`, `pkg:pypi/<name>@<version>`, `pkg:npm/<name>@<version>`.
    pub uri: String,
    /// Algorithm -> hex (or, for npm, the lockfile's `integrity` as given).
    pub digest: std::collections::BTreeMap<String, String>,
}

/// Where a settled job's time went, in milliseconds. Writing the recovery artifact and
/// settling the row come after the record is complete: `/metrics` has them
/// (`airlock_verification_phase_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobPhases {
    /// Waiting for an engine that can take it (after its slot).
    pub wait_for_engine_ms: u64,
    /// Staging the revision into its workspace (and uploading it, on a remote engine).
    pub stage_ms: u64,
    /// Creating the container.
    #[serde(default)]
    pub create_ms: u64,
    /// From the container's creation to its start (attaching its output, starting it).
    #[serde(default)]
    pub start_ms: u64,
    /// The container, from start to exit (`duration_ms`).
    pub run_ms: u64,
    /// From the exit to the container's removal (killing it first on a timeout or cancel).
    #[serde(default)]
    pub destroy_ms: u64,
    /// Reading the tree back and checking the sources.
    pub check_ms: u64,
    /// How the job's tree was made (absent in records from before warm checkouts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkout: Option<CheckoutKind>,
    /// Getting the job's dependency set: mounting a published one, or fetching it (absent
    /// without dependencies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies_ms: Option<u64>,
    /// How the job's dependency set was had (absent without dependencies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<DependencySource>,
}

/// How a job's dependency set was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DependencySource {
    /// Published already (by an earlier job's fetch): mounted, no fetch.
    Cached,
    /// Fetched for this job (or for another job on the same key it waited for).
    Fetched,
}

/// How a job's tree was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckoutKind {
    /// An overlay over a tree already in the cache: staging cost a mount.
    Warm,
    /// An overlay over a tree this job put into the cache (its first job).
    Filled,
    /// The whole tree staged for this job alone (no cache: turned off, unsupported here,
    /// or a remote engine).
    Full,
}

/// Why a request was refused before anything ran.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("argv is empty; it needs 1..={max} entries", max = limits::MAX_ARGV_ENTRIES)]
    ArgvEmpty,
    #[error("argv has {n} entries; the limit is {max}", max = limits::MAX_ARGV_ENTRIES)]
    ArgvTooMany { n: usize },
    #[error("argv[{index}] has {len} bytes; the limit is {max}", max = limits::MAX_ARGV_ENTRY_BYTES)]
    ArgvEntryTooLong { index: usize, len: usize },
    #[error("argv[{index}] contains a NUL byte")]
    ArgvEntryNul { index: usize },
    #[error(
        "timeout_seconds is {value}; it must be between {min} and {max}",
        min = limits::MIN_TIMEOUT_SECONDS,
        max = limits::MAX_TIMEOUT_SECONDS
    )]
    Timeout { value: u64 },
}

/// Checks argv bounds: 1..=64 entries, each at most 16 KiB, no NUL.
pub fn validate_argv(argv: &[String]) -> Result<(), RequestError> {
    if argv.is_empty() {
        return Err(RequestError::ArgvEmpty);
    }
    if argv.len() > limits::MAX_ARGV_ENTRIES {
        return Err(RequestError::ArgvTooMany { n: argv.len() });
    }
    for (index, a) in argv.iter().enumerate() {
        if a.len() > limits::MAX_ARGV_ENTRY_BYTES {
            return Err(RequestError::ArgvEntryTooLong {
                index,
                len: a.len(),
            });
        }
        if a.contains('\0') {
            return Err(RequestError::ArgvEntryNul { index });
        }
    }
    Ok(())
}

/// Checks the timeout: 1..=1800 seconds.
pub fn validate_timeout(seconds: u64) -> Result<(), RequestError> {
    if !(limits::MIN_TIMEOUT_SECONDS..=limits::MAX_TIMEOUT_SECONDS).contains(&seconds) {
        return Err(RequestError::Timeout { value: seconds });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(n: usize) -> Vec<String> {
        vec!["x".to_string(); n]
    }

    #[test]
    fn argv_bounds() {
        assert_eq!(validate_argv(&[]), Err(RequestError::ArgvEmpty));
        assert!(validate_argv(&argv(1)).is_ok());
        assert!(validate_argv(&argv(64)).is_ok());
        let e = validate_argv(&argv(65)).unwrap_err();
        assert_eq!(e.to_string(), "argv has 65 entries; the limit is 64");
        let mut a = argv(2);
        a[1] = "y".repeat(16 * 1024);
        assert!(validate_argv(&a).is_ok());
        a[1].push('y');
        assert_eq!(
            validate_argv(&a).unwrap_err().to_string(),
            "argv[1] has 16385 bytes; the limit is 16384"
        );
        let a = vec!["a\0b".to_string()];
        assert_eq!(
            validate_argv(&a).unwrap_err().to_string(),
            "argv[0] contains a NUL byte"
        );
    }

    #[test]
    fn timeout_bounds() {
        assert!(
            validate_timeout(0)
                .unwrap_err()
                .to_string()
                .contains("between 1 and 1800")
        );
        assert!(validate_timeout(1).is_ok());
        assert!(validate_timeout(1800).is_ok());
        assert!(validate_timeout(1801).is_err());
    }

    #[test]
    fn status_strings_round_trip_and_classify() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
            assert_eq!(s.is_terminal(), s != Status::Running);
        }
        assert_eq!(Status::parse("PASSED"), None);
    }
}
