//! Recovery: destroy, then decide. For every `running` verification with no live worker, its
//! containers are destroyed first; then the exact durable result is restored from a valid
//! artifact, or the verification becomes `error`. Nothing is rerun and nothing is invented.
//! Recovery never creates a container.

use super::WorkerLock;
use crate::engine::DataDir;
use crate::ids;
use crate::sandbox::{ContainerRuntime, container_name};
use crate::staging;
use crate::verification::{Status, Verification};
use serde::Serialize;

pub use crate::domain::verification::INTERRUPTED;
use crate::domain::verification::Unfinished;
use crate::engine::service::blocking;

/// What one recovery pass found and did. Printed as JSON by `airlock recover`.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Running verifications examined (with no live worker).
    pub interrupted: Vec<String>,
    /// Running verifications skipped because a live worker holds their lock.
    pub live: Vec<String>,
    pub restored_from_artifact: Vec<Settled>,
    pub marked_error: Vec<Settled>,
    pub quarantined: Vec<String>,
    pub containers_destroyed: Vec<String>,
    pub checkouts_removed: Vec<String>,
    pub temp_files_removed: Vec<String>,
    pub lock_files_removed: Vec<String>,
    /// One-shot results removed because their retention (`run_retention_days`) ended.
    pub results_expired: Vec<String>,
    /// Steps that failed; they stay for the next pass.
    pub failures: Vec<String>,
}

impl Report {
    /// True when the pass found nothing to do.
    pub fn is_empty(&self) -> bool {
        self.interrupted.is_empty()
            && self.restored_from_artifact.is_empty()
            && self.marked_error.is_empty()
            && self.quarantined.is_empty()
            && self.containers_destroyed.is_empty()
            && self.checkouts_removed.is_empty()
            && self.temp_files_removed.is_empty()
            && self.lock_files_removed.is_empty()
            && self.results_expired.is_empty()
            && self.failures.is_empty()
    }
}

/// One verification settled by recovery.
#[derive(Debug, Serialize)]
pub struct Settled {
    pub verification_id: String,
    pub status: &'static str,
    pub error: Option<String>,
}

/// Most expired one-shot results one pass removes (the next pass takes the rest).
pub const RETENTION_BATCH: u32 = 1000;

/// How long one-shot results are kept, and the time to measure it from.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub keep: std::time::Duration,
    pub now: time::OffsetDateTime,
}

/// Runs one recovery pass over `data`, then removes one-shot results older than the retention.
pub async fn recover(
    data: &DataDir,
    runtime: &dyn ContainerRuntime,
    retention: Retention,
) -> Report {
    let mut report = Report::default();
    let running = match data.store.running().await {
        Ok(r) => r,
        Err(e) => {
            report
                .failures
                .push(format!("list running verifications: {e}"));
            return report;
        }
    };
    for v in running {
        let lock_path = data.lock_path(&v.creation_key);
        let lock = match WorkerLock::try_acquire(&lock_path) {
            Ok(Some(l)) => l,
            Ok(None) => {
                report.live.push(v.verification_id.clone());
                continue;
            }
            Err(e) => {
                report.failures.push(format!(
                    "{}: worker lock {}: {e}",
                    v.verification_id,
                    lock_path.display()
                ));
                continue;
            }
        };
        report.interrupted.push(v.verification_id.clone());
        recover_one(data, runtime, v, retention.now, &mut report).await;
        drop(lock);
    }
    sweep(data, runtime, &mut report).await;
    expire_results(data, retention, &mut report).await;
    report
}

/// Removes settled one-shot verifications (artifact first, then row) created before
/// now - retention. Candidate verifications follow their candidate instead.
async fn expire_results(data: &DataDir, retention: Retention, report: &mut Report) {
    let cutoff = ids::rfc3339(retention.now - retention.keep);
    let expired = match data
        .store
        .runs_created_before(cutoff, RETENTION_BATCH)
        .await
    {
        Ok(ids) if ids.is_empty() => return,
        Ok(ids) => ids,
        Err(e) => {
            report.failures.push(format!("list expired results: {e}"));
            return;
        }
    };
    let artifacts = data.artifacts.clone();
    let to_remove = expired.clone();
    let removed = tokio::task::spawn_blocking(move || artifacts.remove(&to_remove))
        .await
        .expect("artifact removal does not panic");
    if let Err(e) = removed {
        report
            .failures
            .push(format!("remove expired artifacts: {e}"));
        return;
    }
    match data.store.delete_settled(expired.clone()).await {
        Ok(_) => report.results_expired.extend(expired),
        Err(e) => report.failures.push(format!("delete expired results: {e}")),
    }
}

async fn recover_one(
    data: &DataDir,
    runtime: &dyn ContainerRuntime,
    v: Verification,
    now: time::OffsetDateTime,
    report: &mut Report,
) {
    let id = v.verification_id.clone();
    // Destroy first: nothing is decided while a container of this run may still exist.
    match runtime
        .destroy(&container_name(&v.creation_key), &v.creation_key)
        .await
    {
        Ok(n) if n > 0 => report
            .containers_destroyed
            .push(container_name(&v.creation_key)),
        Ok(_) => {}
        Err(e) => {
            report.failures.push(format!(
                "{id}: destroy containers: {e} (left running for the next pass)"
            ));
            return;
        }
    }
    let settled = match blocking(|| data.artifacts.read(&id, &v.creation_key)) {
        Ok(Some(body)) => {
            let result = body.result;
            match data.store.settle(&result).await {
                Ok(()) => {
                    report.restored_from_artifact.push(Settled {
                        verification_id: id.clone(),
                        status: result.status.as_str(),
                        error: result.error.clone(),
                    });
                    true
                }
                Err(e) => {
                    report
                        .failures
                        .push(format!("{id}: settle from artifact: {e}"));
                    false
                }
            }
        }
        Ok(None) => mark_error(data, &v, Unfinished::Interrupted, now, report).await,
        Err(rejected) => match blocking(|| data.artifacts.quarantine(&id)) {
            Ok(path) => {
                report.quarantined.push(path.display().to_string());
                mark_error(
                    data,
                    &v,
                    Unfinished::ArtifactRejected(rejected.to_string()),
                    now,
                    report,
                )
                .await
            }
            Err(e) => {
                report
                    .failures
                    .push(format!("{id}: quarantine artifact: {e}"));
                false
            }
        },
    };
    if settled {
        remove_checkout(data, &v.creation_key, report);
    }
}

async fn mark_error(
    data: &DataDir,
    v: &Verification,
    why: Unfinished,
    now: time::OffsetDateTime,
    report: &mut Report,
) -> bool {
    let (status, error) = why.settle();
    let mut e = v.clone();
    e.status = status;
    e.error = Some(error.clone());
    e.finished_at = Some(ids::rfc3339(now));
    match data.store.settle(&e).await {
        Ok(()) => {
            report.marked_error.push(Settled {
                verification_id: v.verification_id.clone(),
                status: status.as_str(),
                error: Some(error),
            });
            true
        }
        Err(err) => {
            report
                .failures
                .push(format!("{}: settle as error: {err}", v.verification_id));
            false
        }
    }
}

fn remove_checkout(data: &DataDir, key: &str, report: &mut Report) {
    let dir = data.checkout_dir(key);
    if !dir.exists() {
        return;
    }
    match blocking(|| staging::remove_checkout(&dir)) {
        Ok(()) => report.checkouts_removed.push(dir.display().to_string()),
        Err(e) => report.failures.push(format!("remove checkout: {e}")),
    }
}

/// Orphans: containers of this instance whose key is unknown or terminal, checkouts and lock
/// files no live worker owns, and temp files of interrupted artifact writes.
async fn sweep(data: &DataDir, runtime: &dyn ContainerRuntime, report: &mut Report) {
    match runtime.list_managed(&data.instance_id).await {
        Ok(containers) => {
            for c in containers {
                let key = c.creation_key.clone().unwrap_or_default();
                let status = match data.store.status_by_creation_key(&key).await {
                    Ok(s) => s,
                    Err(e) => {
                        report
                            .failures
                            .push(format!("look up container {}: {e}", c.id));
                        continue;
                    }
                };
                let orphan = match status {
                    None => true,
                    Some(s) => s.is_terminal(),
                };
                if !orphan {
                    continue;
                }
                match runtime.destroy(&container_name(&key), &key).await {
                    Ok(_) => report.containers_destroyed.push(c.id),
                    Err(e) => report
                        .failures
                        .push(format!("destroy container {}: {e}", c.id)),
                }
            }
        }
        Err(e) => report.failures.push(format!("list containers: {e}")),
    }
    // Checkouts: removable unless a live worker holds the key's lock.
    if let Ok(rd) = std::fs::read_dir(data.checkouts()) {
        for entry in rd.flatten() {
            let key = entry.file_name().to_string_lossy().into_owned();
            match WorkerLock::try_acquire(&data.lock_path(&key)) {
                Ok(Some(lock)) => {
                    // No live worker. A running row for it is recovered above before the sweep,
                    // so whatever is left here is an orphan.
                    if let Ok(Some(Status::Running)) = data.store.status_by_creation_key(&key).await
                    {
                        drop(lock);
                        continue;
                    }
                    match blocking(|| staging::remove_checkout(&entry.path())) {
                        Ok(()) => report
                            .checkouts_removed
                            .push(entry.path().display().to_string()),
                        Err(e) => report.failures.push(format!("remove checkout: {e}")),
                    }
                    drop(lock);
                }
                Ok(None) => {}
                Err(e) => report.failures.push(format!("lock {key}: {e}")),
            }
        }
    }
    // Lock files whose worker died (the kernel released the flock; the file remained).
    if let Ok(rd) = std::fs::read_dir(data.layout.locks()) {
        for entry in rd.flatten() {
            let path = entry.path();
            if let Ok(Some(lock)) = WorkerLock::try_acquire(&path) {
                drop(lock); // unlinks the file
                report.lock_files_removed.push(path.display().to_string());
            }
        }
    }
    match blocking(|| data.artifacts.sweep_temp()) {
        Ok(removed) => report
            .temp_files_removed
            .extend(removed.into_iter().map(|p| p.display().to_string())),
        Err(e) => report.failures.push(format!("sweep temp files: {e}")),
    }
}
