//! The `job.*` methods' parameters and replies: verification jobs on a revision of a
//! workspace's repository, submitted over the API.

use crate::verification::{Status, Verification};
use serde::{Deserialize, Serialize};

/// `job.submit` parameters.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSubmitParams {
    pub workspace_id: String,
    /// A branch, tag or commit id of the workspace's repository, resolved once to a full
    /// commit id when the job is submitted.
    #[schema(min_length = 1, max_length = 256)]
    pub revision: String,
    #[schema(min_items = 1, max_items = 64)]
    pub argv: Vec<String>,
    /// One of the workspace's `profiles` (default: its `profile`).
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1800)]
    pub timeout_seconds: Option<u64>,
    /// Free labels to find the job by (`job.list`): at most 16, each 1..=64 of
    /// `[A-Za-z0-9_.:/=-]`.
    #[serde(default)]
    #[schema(max_items = 16)]
    pub labels: Vec<String>,
    #[schema(pattern = r"^[\x20-\x7E]{1,128}$")]
    pub idempotency_key: String,
}

/// `job.show` and `job.cancel` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRef {
    pub workspace_id: String,
    #[schema(pattern = r"^job_[0-9a-f]{32}$")]
    pub job_id: String,
}

/// `job.log` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobLogParams {
    pub workspace_id: String,
    #[schema(pattern = r"^job_[0-9a-f]{32}$")]
    pub job_id: String,
    /// Streaming needs `GET /api/v1/jobs/{job_id}/log?follow=1`; here `true` is refused
    /// with that address.
    #[serde(default)]
    pub follow: bool,
}

/// `job.list` parameters.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListParams {
    pub workspace_id: String,
    /// Only jobs in this `state` (the job's own field): `queued`, `running`, or a settled
    /// one (`passed`, `failed`, `timed_out`, `cancelled`, `error`, `source_changed`).
    #[serde(default)]
    pub state: Option<JobState>,
    /// Only jobs carrying every one of these labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// Where a job is: waiting (for a slot in its workspace's turn, or for an engine), running,
/// or settled with its verification's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Passed,
    Failed,
    TimedOut,
    Cancelled,
    Error,
    SourceChanged,
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        JobState::Queued,
        JobState::Running,
        JobState::Passed,
        JobState::Failed,
        JobState::TimedOut,
        JobState::Cancelled,
        JobState::Error,
        JobState::SourceChanged,
    ];

    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Passed => "passed",
            JobState::Failed => "failed",
            JobState::TimedOut => "timed_out",
            JobState::Cancelled => "cancelled",
            JobState::Error => "error",
            JobState::SourceChanged => "source_changed",
        }
    }

    /// The state of a job whose verification has `status` (`queued` while it waits).
    pub fn of(status: Status, queued: bool) -> JobState {
        match status {
            Status::Running if queued => JobState::Queued,
            Status::Running => JobState::Running,
            Status::Passed => JobState::Passed,
            Status::Failed => JobState::Failed,
            Status::TimedOut => JobState::TimedOut,
            Status::Cancelled => JobState::Cancelled,
            Status::Error => JobState::Error,
            Status::SourceChanged => JobState::SourceChanged,
        }
    }
}

/// A job: its verification record (the same fields as `airlock run` prints) and the job's own.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobView {
    pub job_id: String,
    pub workspace_id: String,
    pub state: JobState,
    /// The revision as submitted; `verification.candidate_revision` is the commit it named.
    pub revision: String,
    pub profile: String,
    pub labels: Vec<String>,
    pub queued_at: String,
    /// When a worker took it (null while queued).
    pub started_at: Option<String>,
    /// While queued for a slot: its place in its workspace's queue (1 is next).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// Once settled: where its time went (absent while it runs, and for a job settled by
    /// recovery or never run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<JobPhases>,
    pub verification: Verification,
}

pub use crate::verification::JobPhases;

/// `job.submit`, `job.show` and `job.cancel`'s reply.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobReply {
    pub job: JobView,
}

/// `job.list`'s reply, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass as `cursor` for the next (older) page; null on the last.
    pub next_cursor: Option<String>,
}

/// `job.log`'s reply: the output so far while the job runs (as much as a live log keeps),
/// its retained head and tail once it settled.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobLog {
    pub job_id: String,
    pub state: JobState,
    pub log: String,
    /// True once the job settled: `log` is final.
    pub complete: bool,
    /// Bytes the job wrote so far (all of them once complete).
    pub output_bytes_total: u64,
    /// True when `log` is not the whole output.
    pub truncated: bool,
}
