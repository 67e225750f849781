//! Verification jobs on a revision of a workspace's repository, submitted over the API
//! (`job.submit/show/list/cancel/log`): the revision is resolved once to a commit, the job is
//! recorded (`queued`, with its row and idempotency binding, before the call answers) and runs
//! on the fair worker pool through the same pipeline as `airlock run`. A restart resumes the
//! jobs that never started; recovery judges the ones that did.

use super::background::Background;
use super::runner::pipeline::{Link, RunError};
use crate::config::Permission;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::idempotency::Prologue;
use crate::limits;
use crate::store::jobs::{JobFilter, JobRow, JobWithRun};
use crate::verification::Status;
use crate::wire::jobs::{
    JobListParams, JobLog, JobLogParams, JobPage, JobRef, JobState, JobSubmitParams, JobView,
};
use std::sync::Arc;
use std::time::Duration;

/// The idempotency operation of `job.submit`.
const SUBMIT: &str = "job.submit";
/// The cursor prefix of `job.list`.
const CURSOR: &str = "job:";
/// How long `job.cancel` waits for the job to settle before answering with what it sees.
const CANCEL_WAIT: Duration = Duration::from_secs(60);
/// The note a settled job's log ends with when the daemon stopped while it ran.
pub const INTERRUPTED_NOTE: &str =
    "[airlock: the daemon stopped while this job ran; its output was not kept]\n";

/// The `job.*` workflow.
#[derive(Clone)]
pub struct Jobs {
    ctx: crate::engine::context::Handles,
    background: Arc<Background>,
}

/// A label: 1..=64 of `[A-Za-z0-9_.:/=-]`.
fn check_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= limits::MAX_JOB_LABEL_BYTES
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:/=-".contains(&b))
}

/// Labels checked, sorted and without repeats.
fn check_labels(labels: &[String]) -> Result<Vec<String>, ServiceError> {
    if labels.len() > limits::MAX_JOB_LABELS {
        return Err(ServiceError::invalid_field(
            "labels",
            format!(
                "labels has {} entries; the limit is {}",
                labels.len(),
                limits::MAX_JOB_LABELS
            ),
        ));
    }
    if let Some((i, l)) = labels.iter().enumerate().find(|(_, l)| !check_label(l)) {
        return Err(ServiceError::invalid_field(
            format!("labels[{i}]"),
            format!(
                "label {l:?} must be 1..={} of letters, digits and _.:/=-",
                limits::MAX_JOB_LABEL_BYTES
            ),
        ));
    }
    let mut out = labels.to_vec();
    out.sort();
    out.dedup();
    Ok(out)
}

impl Jobs {
    pub fn new(ctx: crate::engine::context::Handles, background: Arc<Background>) -> Jobs {
        Jobs { ctx, background }
    }

    /// `job.submit`.
    pub async fn submit(&self, actor: &Actor, p: JobSubmitParams) -> Result<JobView, ServiceError> {
        let ws = self
            .ctx
            .authorize_job(actor, &p.workspace_id, Permission::Verify)?
            .clone();
        let timeout = p.timeout_seconds.unwrap_or(limits::DEFAULT_TIMEOUT_SECONDS);
        let labels = check_labels(&p.labels)?;
        let profile = p.profile.clone().unwrap_or_else(|| ws.profile.clone());
        let keyed = match self
            .ctx
            .keys
            .begin(
                &ws.id,
                actor,
                SUBMIT,
                &p.idempotency_key,
                &JobSubmitParams {
                    idempotency_key: String::new(),
                    timeout_seconds: Some(timeout),
                    profile: Some(profile.clone()),
                    labels: labels.clone(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(job_id) => {
                return self.view(&ws.id, &job_id).await;
            }
            Prologue::Fresh(k) => k,
        };
        crate::verification::validate_argv(&p.argv)
            .map_err(|e| ServiceError::invalid_field("argv", e.to_string()))?;
        crate::verification::validate_timeout(timeout)
            .map_err(|e| ServiceError::invalid_field("timeout_seconds", e.to_string()))?;
        if !ws.profiles.contains(&profile) {
            return Err(ServiceError::invalid_field(
                "profile",
                format!(
                    "workspace {:?} allows the profiles {}; not {profile:?}",
                    ws.id,
                    ws.profiles.join(", ")
                ),
            ));
        }
        let repo = self.ctx.repo(&ws.id).clone();
        let commit = {
            let (repo, rev) = (repo.clone(), p.revision.clone());
            super::blocking::blocking(move || repo.resolve_commit(&rev))
        }
        .map_err(|e| match e {
            // Named by the workspace, never by the repository's path on this host.
            crate::staging::StagingError::UnknownRevision { rev, .. } => {
                ServiceError::precondition_field(
                    "revision",
                    format!(
                        "revision {rev:?} does not resolve to a commit in workspace {:?}'s repository",
                        ws.id
                    ),
                )
            }
            crate::staging::StagingError::InvalidRevision(_) => {
                ServiceError::precondition_field("revision", format!("revision {e}"))
            }
            e => ServiceError::from(RunError::Git(e)),
        })?;
        // Room in the workspace's queue before anything is recorded.
        let room = self.background.reserve(&ws.id)?;
        let prepared = self
            .background
            .runner
            .prepare_commit(repo, commit, &profile, p.argv.clone(), timeout, None)
            .await?;
        let job_id = crate::ids::new_job_id();
        let row = JobRow {
            seq: 0,
            job_id: job_id.clone(),
            workspace_id: ws.id.clone(),
            verification_id: String::new(),
            revision: p.revision.clone(),
            profile: profile.clone(),
            labels,
            queued_at: keyed.at.clone(),
            started_at: None,
            phases: None,
        };
        let started = self
            .background
            .runner
            .begin(
                prepared,
                Some(Link::Job {
                    row: Box::new(row),
                    binding: keyed.binding(&ws.id, actor, &job_id),
                }),
            )
            .await
            .map_err(|e| match e {
                RunError::Refused(r) => ServiceError::internal(r.message),
                e => ServiceError::from(e),
            })?;
        self.background.spawn_job(room, started, profile);
        self.view(&ws.id, &job_id).await
    }

    async fn load(&self, workspace_id: &str, job_id: &str) -> Result<JobWithRun, ServiceError> {
        if !crate::ids::is_job_id(job_id) {
            return Err(ServiceError::invalid_field(
                "job_id",
                format!("job_id {job_id:?} is not a job id (job_ and 32 hex digits)"),
            ));
        }
        self.ctx
            .data
            .store
            .job(workspace_id, job_id)
            .await?
            .ok_or_else(|| {
                ServiceError::NotFound(format!("no job {job_id} in workspace {workspace_id:?}"))
            })
    }

    fn render(&self, (row, v): JobWithRun) -> JobView {
        let queued = v.queued.unwrap_or(false);
        JobView {
            state: JobState::of(v.status, queued),
            position: match v.status {
                Status::Running if row.started_at.is_none() => {
                    self.background.position(&v.verification_id)
                }
                _ => None,
            },
            phases: row.phases.filter(|_| v.status != Status::Running),
            job_id: row.job_id,
            workspace_id: row.workspace_id,
            revision: row.revision,
            profile: row.profile,
            labels: row.labels,
            queued_at: row.queued_at,
            started_at: row.started_at,
            verification: v,
        }
    }

    async fn view(&self, workspace_id: &str, job_id: &str) -> Result<JobView, ServiceError> {
        Ok(self.render(self.load(workspace_id, job_id).await?))
    }

    /// `job.show`.
    pub async fn show(&self, actor: &Actor, p: JobRef) -> Result<JobView, ServiceError> {
        self.ctx
            .authorize_job(actor, &p.workspace_id, Permission::View)?;
        self.view(&p.workspace_id, &p.job_id).await
    }

    /// `job.list`: newest first.
    pub async fn list(&self, actor: &Actor, p: JobListParams) -> Result<JobPage, ServiceError> {
        self.ctx
            .authorize_job(actor, &p.workspace_id, Permission::View)?;
        let labels = check_labels(&p.labels)?;
        let limit = p.limit.unwrap_or(limits::DEFAULT_JOB_PAGE);
        if !(1..=limits::MAX_JOB_PAGE).contains(&limit) {
            return Err(ServiceError::invalid_field(
                "limit",
                format!(
                    "limit {limit} must be between 1 and {}",
                    limits::MAX_JOB_PAGE
                ),
            ));
        }
        let before = super::governed::requests::parse_cursor(CURSOR, p.cursor.as_deref())?;
        let filter = p.state.map(|s| match s {
            JobState::Queued => JobFilter::Queued,
            JobState::Running => JobFilter::Running,
            JobState::Passed => JobFilter::Settled(Status::Passed),
            JobState::Failed => JobFilter::Settled(Status::Failed),
            JobState::TimedOut => JobFilter::Settled(Status::TimedOut),
            JobState::Cancelled => JobFilter::Settled(Status::Cancelled),
            JobState::Error => JobFilter::Settled(Status::Error),
            JobState::SourceChanged => JobFilter::Settled(Status::SourceChanged),
        });
        let rows = self
            .ctx
            .data
            .store
            .jobs(&p.workspace_id, filter, labels, before, limit)
            .await?;
        let next_cursor = match rows.last() {
            Some((last, _)) if rows.len() == limit as usize => {
                Some(format!("{CURSOR}{}", last.seq))
            }
            _ => None,
        };
        Ok(JobPage {
            jobs: rows.into_iter().map(|r| self.render(r)).collect(),
            next_cursor,
        })
    }

    /// `job.cancel`: destroys the job's container and settles it `cancelled` (a job that has
    /// settled already is answered as it is).
    pub async fn cancel(&self, actor: &Actor, p: JobRef) -> Result<JobView, ServiceError> {
        self.ctx
            .authorize_job(actor, &p.workspace_id, Permission::Verify)?;
        let (_, v) = self.load(&p.workspace_id, &p.job_id).await?;
        if v.status == Status::Running {
            self.background
                .cancel(&v.verification_id, CANCEL_WAIT)
                .await;
        }
        self.view(&p.workspace_id, &p.job_id).await
    }

    /// `job.log`: the output so far (running) or the retained output (settled).
    pub async fn log(&self, actor: &Actor, p: JobLogParams) -> Result<JobLog, ServiceError> {
        self.ctx
            .authorize_job(actor, &p.workspace_id, Permission::View)?;
        if p.follow {
            return Err(ServiceError::invalid_field(
                "follow",
                format!(
                    "a followed log streams: GET /api/v1/jobs/{}/log?follow=1",
                    p.job_id
                ),
            ));
        }
        let (row, v) = self.load(&p.workspace_id, &p.job_id).await?;
        let state = JobState::of(v.status, v.queued.unwrap_or(false));
        if v.status == Status::Running
            && let Some(live) = self.background.logs.get(&v.verification_id)
        {
            let (head, total) = live.snapshot();
            return Ok(JobLog {
                job_id: row.job_id,
                state,
                truncated: total > head.len() as u64,
                log: String::from_utf8_lossy(&head).into_owned(),
                complete: false,
                output_bytes_total: total,
            });
        }
        Ok(settled_log(row.job_id, &v))
    }

    /// The workspace of a job, for the streaming route that names only the job.
    pub async fn workspace_of(&self, job_id: &str) -> Result<String, ServiceError> {
        let missing = || ServiceError::NotFound(format!("no job {job_id}"));
        if !crate::ids::is_job_id(job_id) {
            return Err(missing());
        }
        self.ctx
            .data
            .store
            .job_workspace(job_id)
            .await?
            .ok_or_else(missing)
    }

    /// The workspace of job `job_id` when `actor` may view its jobs; otherwise the same
    /// `not_found` as for an id that names no job, so a caller learns nothing of a job (that
    /// it exists, or which workspace holds it) it may not see.
    pub async fn workspace_visible_to(
        &self,
        actor: &Actor,
        job_id: &str,
    ) -> Result<String, ServiceError> {
        let workspace = self.workspace_of(job_id).await?;
        match self.ctx.authorize_job(actor, &workspace, Permission::View) {
            Ok(_) => Ok(workspace),
            Err(ServiceError::PermissionDenied(_)) => {
                Err(ServiceError::NotFound(format!("no job {job_id}")))
            }
            Err(e) => Err(e),
        }
    }

    /// The live log of a running job of this process, to follow; `None` once it settled (or
    /// when it is not this process's: then its log is `job.log`'s).
    pub async fn follow(
        &self,
        actor: &Actor,
        workspace_id: &str,
        job_id: &str,
    ) -> Result<Following, ServiceError> {
        self.ctx
            .authorize_job(actor, workspace_id, Permission::View)?;
        let (row, v) = self.load(workspace_id, job_id).await?;
        if v.status == Status::Running {
            match self.background.logs.follow(&v.verification_id) {
                Ok(Some(f)) => return Ok(Following::Live(f)),
                Ok(None) => {}
                Err(e) => return Err(ServiceError::exhausted_field("follow", e.to_string())),
            }
        }
        // Settled (or settling): the retained log, read again now.
        let (row, v) = match v.status {
            Status::Running => self.load(workspace_id, job_id).await?,
            _ => (row, v),
        };
        Ok(Following::Done(settled_log(row.job_id, &v)))
    }

    /// Starts again every job that was recorded and never started (after a restart): each
    /// exactly once, in the order submitted, on the same creation key; one whose profile or
    /// image changed meanwhile is settled `error` saying so (artifact first: one whose artifact
    /// cannot be written stays as it is, for the next start). Returns how many were resumed.
    pub async fn resume_unstarted(&self) -> Result<usize, ServiceError> {
        let mut resumed = 0;
        for (row, mut v) in self.ctx.data.store.unstarted_jobs().await? {
            v.queued = None;
            v.queued_reason = None;
            let vid = v.verification_id.clone();
            let prepared = self
                .background
                .runner
                .prepare_commit(
                    self.ctx.repo(&row.workspace_id).clone(),
                    v.candidate_revision.clone(),
                    &row.profile,
                    v.argv.clone(),
                    v.timeout_seconds,
                    None,
                )
                .await;
            let started = prepared.and_then(|p| self.background.runner.resume(p, v.clone()));
            match started {
                Ok(Some(started)) => {
                    let room = self.background.reserve_resumed(&row.workspace_id);
                    self.background
                        .spawn_job(room, started, row.profile.clone());
                    resumed += 1;
                    tracing::info!(job_id = %row.job_id, verification_id = %vid, "queued job resumed");
                }
                Ok(None) => {
                    tracing::warn!(job_id = %row.job_id, "queued job held by another process");
                }
                Err(e) => {
                    tracing::warn!(job_id = %row.job_id, error = %e, "queued job could not be resumed; settled error");
                    // Not settled without its artifact: it stays recorded, unstarted, and is
                    // taken up again at the next start (the other jobs go on).
                    if let Err(e) = self.background.runner.settle_unrun(v, e.to_string()).await {
                        tracing::error!(job_id = %row.job_id, error = %e, "queued job not settled; retried at the next start");
                    }
                }
            }
        }
        Ok(resumed)
    }
}

/// What following a job's log gives.
pub enum Following {
    Live(super::live_log::Follow),
    Done(JobLog),
}

/// A settled job's log: its retained output, and a note when the daemon stopped under it.
fn settled_log(job_id: String, v: &crate::verification::Verification) -> JobLog {
    let mut log = v.output.clone();
    if v.status == Status::Error
        && v.error.as_deref() == Some(crate::domain::verification::INTERRUPTED)
    {
        if !log.is_empty() && !log.ends_with('\n') {
            log.push('\n');
        }
        log.push_str(INTERRUPTED_NOTE);
    }
    JobLog {
        job_id,
        state: JobState::of(v.status, v.queued.unwrap_or(false)),
        log,
        complete: v.status != Status::Running,
        output_bytes_total: v.output_bytes_total,
        truncated: v.output_truncated,
    }
}
