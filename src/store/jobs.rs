//! Jobs submitted over the API: a row beside each job's verification, committed with it (and
//! its idempotency binding) in one transaction before the call answers. `started_at` is set
//! when a worker admits the job, before anything is placed or created, so a restart resumes
//! exactly the jobs that never started.

use super::{Binding, Store, StoreError, decode};
use crate::verification::{Status, Verification};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

/// A job's own fields (its verification holds the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub seq: i64,
    pub job_id: String,
    pub workspace_id: String,
    pub verification_id: String,
    /// The revision as the caller named it (the verification holds the commit it resolved to).
    pub revision: String,
    pub profile: String,
    pub labels: Vec<String>,
    pub queued_at: String,
    pub started_at: Option<String>,
    /// Where a settled run's time went (read only; written when it settles).
    pub phases: Option<crate::verification::JobPhases>,
}

/// What `job.list` filters on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobFilter {
    /// Waiting for a slot or an engine.
    Queued,
    /// Started and not settled.
    Running,
    /// Settled with this status.
    Settled(Status),
}

/// A job and its verification (with `queued` and `queued_reason` from the row).
pub type JobWithRun = (JobRow, Verification);

const SELECT: &str = "SELECT j.seq, j.job_id, j.workspace_id, j.verification_id, j.revision,
        j.profile, j.labels, j.queued_at, j.started_at, v.record, v.queued, v.queued_reason, v.engine,
        v.phases
    FROM jobs j JOIN verifications v ON v.verification_id = j.verification_id";

fn read(r: &rusqlite::Row<'_>) -> Result<JobWithRun, StoreError> {
    let labels: String = r.get(6)?;
    let vid: String = r.get(3)?;
    let row = JobRow {
        seq: r.get(0)?,
        job_id: r.get(1)?,
        workspace_id: r.get(2)?,
        verification_id: vid.clone(),
        revision: r.get(4)?,
        profile: r.get(5)?,
        labels: serde_json::from_str(&labels).map_err(|e| StoreError::Corrupt {
            id: vid.clone(),
            message: format!("job labels: {e}"),
        })?,
        queued_at: r.get(7)?,
        started_at: r.get(8)?,
        phases: r
            .get::<_, Option<String>>(13)?
            .and_then(|p| serde_json::from_str(&p).ok()),
    };
    let mut v = decode(&vid, &r.get::<_, String>(9)?)?;
    if v.status == Status::Running {
        let queued = r.get::<_, i64>(10)? != 0;
        v.queued = Some(queued);
        v.queued_reason = r.get::<_, Option<String>>(11)?.filter(|_| queued);
        v.engine = v.engine.or(r.get(12)?);
    }
    Ok((row, v))
}

/// A job's entry in its workspace's event log (subject: the job id), written in the
/// transaction of the change it records: `job.queued` (by the submitter), `job.started`, and
/// `job.settled` (beside it `job.cancelled` for a cancelled job) with the settled record's
/// status, exit code and attestation digest.
pub(super) fn job_event(
    tx: &rusqlite::Transaction,
    job_id: &str,
    kind: &str,
    actor: &str,
    prior: Option<&str>,
    v: &Verification,
    at: &str,
) -> rusqlite::Result<()> {
    let (workspace_id, revision, profile, labels): (String, String, String, String) = tx
        .query_row(
            "SELECT workspace_id, revision, profile, labels FROM jobs WHERE job_id = ?1",
            params![job_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
    let state = match kind {
        crate::domain::event_kind::JOB_QUEUED => "queued",
        crate::domain::event_kind::JOB_STARTED => "running",
        _ => v.status.as_str(),
    };
    let settled = v.status.is_terminal();
    let payload = serde_json::json!({
        "job_id": job_id,
        "verification_id": v.verification_id,
        "state": state,
        "revision": revision,
        "commit": v.candidate_revision,
        "profile": profile,
        "labels": serde_json::from_str::<serde_json::Value>(&labels).unwrap_or_default(),
        "exit_code": if settled { v.exit_code } else { None },
        "duration_ms": if settled { v.duration_ms } else { None },
        "error": if settled { v.error.clone() } else { None },
    });
    super::events::event(
        tx,
        &workspace_id,
        job_id,
        kind,
        actor,
        prior,
        Some(state),
        &payload.to_string(),
        at,
    )
}

impl Store {
    /// Records a queued job: its `running` verification, the job row and the idempotency
    /// binding, in one transaction.
    pub async fn insert_job(
        &self,
        v: &Verification,
        spec_json: String,
        job: JobRow,
        binding: Binding,
    ) -> Result<(), StoreError> {
        if v.status != Status::Running {
            return Err(StoreError::Conflict(format!(
                "insert of job {} with status {}",
                job.job_id,
                v.status.as_str()
            )));
        }
        let v = v.clone();
        let record = serde_json::to_string(&v).expect("a verification serializes");
        let labels = serde_json::to_string(&job.labels).expect("labels serialize");
        self.call(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "INSERT INTO verifications (verification_id, creation_key, status, created_at, record, spec, queued)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1) ON CONFLICT DO NOTHING",
                params![v.verification_id, v.creation_key, Status::Running.as_str(), v.created_at, record, spec_json],
            )?;
            if n != 1 {
                return Err(StoreError::Conflict(format!(
                    "verification {} or creation key {} already exists",
                    v.verification_id, v.creation_key
                )));
            }
            tx.execute(
                "INSERT INTO jobs (job_id, workspace_id, verification_id, revision, profile, labels, queued_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![job.job_id, job.workspace_id, v.verification_id, job.revision, job.profile, labels, job.queued_at],
            )?;
            super::candidates::insert_binding_checked(&tx, &binding)?;
            job_event(
                &tx,
                &job.job_id,
                crate::domain::event_kind::JOB_QUEUED,
                &binding.actor_key,
                None,
                &v,
                &job.queued_at,
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// One job of a workspace.
    pub async fn job(
        &self,
        workspace_id: &str,
        job_id: &str,
    ) -> Result<Option<JobWithRun>, StoreError> {
        let (ws, id) = (workspace_id.to_string(), job_id.to_string());
        self.call(move |c| {
            let sql = format!("{SELECT} WHERE j.workspace_id = ?1 AND j.job_id = ?2");
            c.query_row(&sql, params![ws, id], |r| Ok(read(r)))
                .optional()?
                .transpose()
        })
        .await
    }

    /// The workspace a job belongs to (for a route that names only the job).
    pub async fn job_workspace(&self, job_id: &str) -> Result<Option<String>, StoreError> {
        let id = job_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT workspace_id FROM jobs WHERE job_id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?)
        })
        .await
    }

    /// A workspace's jobs, newest first, from before `before` (a `seq`), at most `limit`,
    /// carrying every label of `labels`.
    pub async fn jobs(
        &self,
        workspace_id: &str,
        filter: Option<JobFilter>,
        labels: Vec<String>,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobWithRun>, StoreError> {
        let ws = workspace_id.to_string();
        let labels = serde_json::to_string(&labels).expect("labels serialize");
        let (status, queued) = match filter {
            None => (None, None),
            Some(JobFilter::Queued) => (Some(Status::Running.as_str()), Some(1)),
            Some(JobFilter::Running) => (Some(Status::Running.as_str()), Some(0)),
            Some(JobFilter::Settled(s)) => (Some(s.as_str()), None),
        };
        self.call(move |c| {
            let sql = format!(
                "{SELECT} WHERE j.workspace_id = ?1
                   AND (?2 IS NULL OR v.status = ?2)
                   AND (?3 IS NULL OR v.queued = ?3)
                   AND (?4 IS NULL OR j.seq < ?4)
                   AND NOT EXISTS (SELECT 1 FROM json_each(?5) w
                        WHERE w.value NOT IN (SELECT value FROM json_each(j.labels)))
                 ORDER BY j.seq DESC LIMIT ?6"
            );
            let mut st = c.prepare(&sql)?;
            let rows = st.query_map(params![ws, status, queued, before, labels, limit], |r| {
                Ok(read(r))
            })?;
            let mut out = Vec::new();
            for r in rows {
                out.push(r??);
            }
            Ok(out)
        })
        .await
    }

    /// Jobs recorded and never started (oldest first): what a restart resumes.
    pub async fn unstarted_jobs(&self) -> Result<Vec<JobWithRun>, StoreError> {
        self.call(move |c| {
            let sql =
                format!("{SELECT} WHERE j.started_at IS NULL AND v.status = ?1 ORDER BY j.seq");
            let mut st = c.prepare(&sql)?;
            let rows = st.query_map(params![Status::Running.as_str()], |r| Ok(read(r)))?;
            let mut out = Vec::new();
            for r in rows {
                out.push(r??);
            }
            Ok(out)
        })
        .await
    }

    /// The stored environment spec of a verification (what its hash was computed from).
    pub async fn spec_json(&self, verification_id: &str) -> Result<Option<String>, StoreError> {
        let id = verification_id.to_string();
        self.call(move |c| {
            Ok(c.query_row(
                "SELECT spec FROM verifications WHERE verification_id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?)
        })
        .await
    }
}
