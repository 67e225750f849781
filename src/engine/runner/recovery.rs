//! Recovery: destroy, then decide. For every `running` verification with no live worker, its
//! containers are destroyed first; then the exact durable result is restored from a valid
//! artifact, or the verification becomes `error`. Nothing is rerun and nothing is invented.
//! Recovery never creates a container.

use super::WorkerLock;
use crate::engine::DataDir;
use crate::engine::attesting::Attestor;
use crate::ids;
use crate::sandbox::container_name;
use crate::verification::{Status, Verification};
use crate::workspace::JobEngine;
use serde::Serialize;

pub use crate::domain::verification::INTERRUPTED;
use crate::domain::verification::Unfinished;
use crate::engine::blocking::blocking;

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
    /// Running verifications left running because an engine they may be on does not answer
    /// (with how long it has been away and when they will be settled as lost).
    pub waiting_for_engine: Vec<String>,
    /// What killed dependency fetches left (half-made sets, mounts), removed.
    pub dependency_leftovers_removed: Vec<String>,
    /// Containers labelled with an instance id this data dir had before it was copied: they
    /// belong to the data dir it was copied from and are left alone (`<engine>: <id>
    /// (instance <id>)`); remove them by hand once that data dir's daemon is gone for good.
    pub previous_instance_containers: Vec<String>,
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
            && self.dependency_leftovers_removed.is_empty()
            && self.results_expired.is_empty()
            && self.waiting_for_engine.is_empty()
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

/// A pass's time bounds: how long one-shot results are kept, how long an engine may stay
/// away before its jobs are settled as lost, and the time both are measured to.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub keep: std::time::Duration,
    pub engine_lost_after: std::time::Duration,
    pub now: time::OffsetDateTime,
}

/// Whether recovery reached an engine in this pass.
#[derive(Debug, Clone)]
enum Reach {
    Up,
    /// Not answering; since when (the last pass that reached it), if ever known.
    Away {
        why: String,
        since: Option<time::OffsetDateTime>,
    },
}

/// Each engine's reach this pass; a reached engine's time is recorded for later passes.
async fn reach(data: &DataDir, engines: &[JobEngine], now: time::OffsetDateTime) -> Vec<Reach> {
    // Every engine at once, each call bounded: one that hangs costs the pass one bound, not
    // one per engine.
    let asked = futures_util::future::join_all(
        engines
            .iter()
            .map(|e| e.runtime.list_managed(&data.instance_id)),
    )
    .await;
    let mut out = Vec::new();
    for (e, listed) in engines.iter().zip(asked) {
        match listed {
            Ok(_) => {
                if let Err(err) = data.store.set_engine_seen(&e.name, ids::rfc3339(now)).await {
                    tracing::warn!(engine = %e.name, error = %err, "could not record the engine as seen");
                }
                out.push(Reach::Up);
            }
            Err(err) => {
                let since = data
                    .store
                    .engine_seen(&e.name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|t| ids::parse_rfc3339(&t));
                out.push(Reach::Away {
                    why: err.to_string(),
                    since,
                });
            }
        }
    }
    out
}

/// Runs one recovery pass over `data` and every engine in `engines` (a job's container and
/// workspace may be on any of them), then removes one-shot results older than the retention.
/// What it settles, it signs with `attest` (when a signing key is configured).
pub async fn recover(
    data: &DataDir,
    engines: &[JobEngine],
    attest: &Attestor,
    bounds: Bounds,
) -> Report {
    let mut report = Report::default();
    let reach = reach(data, engines, bounds.now).await;
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
        recover_one(data, engines, attest, &reach, v, bounds, &mut report).await;
        drop(lock);
    }
    for (engine, reach) in engines.iter().zip(&reach) {
        match reach {
            Reach::Up => sweep(data, engine, &mut report).await,
            // Its orphans are swept once it answers again.
            Reach::Away { .. } => {}
        }
    }
    sweep_files(data, &mut report);
    match crate::deps::store::sweep_dead_at(&data.root) {
        Ok(removed) => report.dependency_leftovers_removed = removed,
        Err(e) => report.failures.push(format!("dependency sets: {e}")),
    }
    expire_results(data, bounds, &mut report).await;
    report
}

/// Removes settled one-shot verifications (artifact first, then row) created before
/// now - retention. Candidate verifications follow their candidate instead.
async fn expire_results(data: &DataDir, retention: Bounds, report: &mut Report) {
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
    engines: &[JobEngine],
    attest: &Attestor,
    reach: &[Reach],
    v: Verification,
    bounds: Bounds,
    report: &mut Report,
) {
    let id = v.verification_id.clone();
    let now = bounds.now;
    // Where its container may be: the engine it was placed on when that was recorded (a
    // pool of several engines records it), else anywhere.
    let placed_on = v
        .engine
        .as_ref()
        .filter(|name| engines.iter().any(|e| &e.name == *name));
    let mut lost = None;
    // Destroy first, on every engine it may be on: nothing is decided while a container of
    // this run may still exist anywhere that answers, or on an engine that is not yet lost.
    for (engine, reach) in engines.iter().zip(reach) {
        if placed_on.is_some_and(|name| name != &engine.name) {
            continue;
        }
        if let Reach::Away { why, since } = reach {
            let created = ids::parse_rfc3339(&v.created_at).unwrap_or(now);
            let away_from = since.map_or(created, |s| s.max(created));
            let away = (now - away_from).whole_seconds().max(0) as u64;
            let bound = bounds.engine_lost_after.as_secs();
            if away < bound {
                report.waiting_for_engine.push(format!(
                    "{id}: engine {} does not answer ({why}); away {away} s, settled as lost after {bound} s",
                    engine.name
                ));
                return;
            }
            lost = Some(Unfinished::EngineLost {
                engine: engine.name.clone(),
                away_seconds: away,
            });
            continue;
        }
        match engine
            .runtime
            .destroy(&v.creation_key, &data.instance_id)
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
    }
    let settled = match blocking(|| data.artifacts.read(&id, &v.creation_key)) {
        Ok(Some(body)) => {
            let mut result = body.result;
            // The artifact's result is the run's end: a terminal status for a running row.
            if let Err(illegal) = v
                .status
                .on(crate::domain::verification::Settlement::Restored {
                    status: result.status,
                    error: result.error.clone(),
                })
            {
                report.failures.push(format!("{id}: {illegal}"));
                return;
            }
            // Written unsigned (no key then): what recovery settles, it signs.
            if result.attestation.is_none() {
                attest.attest_verification(&mut result);
            }
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
        Ok(None) => {
            let why = lost.unwrap_or(Unfinished::Interrupted);
            mark_error(data, attest, &v, why, now, report).await
        }
        Err(rejected) => match blocking(|| data.artifacts.quarantine(&id)) {
            Ok(path) => {
                report.quarantined.push(path.display().to_string());
                mark_error(
                    data,
                    attest,
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
        for (engine, reach) in engines.iter().zip(reach) {
            if matches!(reach, Reach::Up) {
                remove_workspace(engine, &v.creation_key, report).await;
            }
        }
    }
}

async fn mark_error(
    data: &DataDir,
    attest: &Attestor,
    v: &Verification,
    why: Unfinished,
    now: time::OffsetDateTime,
    report: &mut Report,
) -> bool {
    let mut e = v.clone();
    if let Err(illegal) = e.settle(crate::domain::verification::Settlement::Unfinished(&why)) {
        report
            .failures
            .push(format!("{}: {illegal}", v.verification_id));
        return false;
    }
    let (status, error) = (e.status, e.error.clone().unwrap_or_default());
    e.finished_at = Some(ids::rfc3339(now));
    e.attestation = None;
    attest.attest_verification(&mut e);
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

async fn remove_workspace(engine: &JobEngine, key: &str, report: &mut Report) {
    match engine.workspaces.remove(key).await {
        Ok(true) => report
            .checkouts_removed
            .push(engine.workspaces.describe(key)),
        Ok(false) => {}
        Err(e) => report.failures.push(format!("remove checkout: {e}")),
    }
}

/// One engine's orphans: containers of this instance whose key is unknown or terminal, and
/// workspaces no live worker owns.
async fn sweep(data: &DataDir, engine: &JobEngine, report: &mut Report) {
    let runtime = &engine.runtime;
    // What the data dir this one was copied from left: named, never touched.
    for previous in &data.previous_instances {
        match runtime.list_managed(previous).await {
            Ok(left) => report.previous_instance_containers.extend(
                left.into_iter()
                    .map(|c| format!("{}: {} (instance {previous})", engine.name, c.id)),
            ),
            Err(e) => report
                .failures
                .push(format!("list containers of instance {previous}: {e}")),
        }
    }
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
                    // No row: a dependency fetch's container (it has none), live while its
                    // worker lock is held, or what a dead process left.
                    None => !matches!(WorkerLock::try_acquire(&data.lock_path(&key)), Ok(None)),
                    Some(s) => s.is_terminal(),
                };
                if !orphan {
                    continue;
                }
                match runtime.destroy(&key, &data.instance_id).await {
                    Ok(_) => report.containers_destroyed.push(c.id),
                    Err(e) => report
                        .failures
                        .push(format!("destroy container {}: {e}", c.id)),
                }
            }
        }
        Err(e) => report.failures.push(format!("list containers: {e}")),
    }
    // Workspaces: removable unless a live worker holds the key's lock.
    let keys = match engine.workspaces.leftovers().await {
        Ok(keys) => keys,
        Err(e) => {
            report.failures.push(format!("list checkouts: {e}"));
            vec![]
        }
    };
    for key in keys {
        match WorkerLock::try_acquire(&data.lock_path(&key)) {
            Ok(Some(lock)) => {
                // No live worker. A running row for it is recovered above before the sweep,
                // so whatever is left here is an orphan.
                if let Ok(Some(Status::Running)) = data.store.status_by_creation_key(&key).await {
                    drop(lock);
                    continue;
                }
                remove_workspace(engine, &key, report).await;
                drop(lock);
            }
            Ok(None) => {}
            Err(e) => report.failures.push(format!("lock {key}: {e}")),
        }
    }
}

/// The data dir's own orphans: lock files no live worker owns, and temp files of interrupted
/// artifact writes.
fn sweep_files(data: &DataDir, report: &mut Report) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::fake::FakeRuntime;
    use std::sync::Arc;
    use std::time::Duration;

    fn engine(name: &str, fake: &Arc<FakeRuntime>, root: &std::path::Path) -> JobEngine {
        JobEngine {
            name: name.into(),
            runtime: fake.clone(),
            workspaces: Arc::new(crate::workspace::HostBind::new(root)),
        }
    }

    /// An engine that does not answer holds up only the runs that may be on it, and only until
    /// the bound; a run placed on an engine that answers is judged at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_away_engine_holds_its_own_runs_until_the_bound_then_they_are_lost() {
        let d = tempfile::tempdir().unwrap();
        let data = DataDir::open(d.path()).await.unwrap();
        let (up, away) = (Arc::new(FakeRuntime::new()), Arc::new(FakeRuntime::new()));
        away.set_away(true);
        let engines = [engine("up", &up, d.path()), engine("away", &away, d.path())];
        let created = ids::now();
        let key = |c: char| c.to_string().repeat(32);
        for (id, k, on) in [
            ("ver_on_up", key('a'), Some("up")),
            ("ver_on_away", key('b'), Some("away")),
            ("ver_unplaced", key('c'), None),
        ] {
            let v = crate::store::tests::sample(id, &k, &ids::rfc3339(created));
            data.store.insert_running(&v, "{}".into()).await.unwrap();
            if let Some(on) = on {
                data.store.mark_placed(id, on).await.unwrap();
            }
        }
        let bounds = |after: Duration| Bounds {
            keep: Duration::from_secs(86_400),
            engine_lost_after: Duration::from_secs(600),
            now: created + after,
        };
        let report = recover(
            &data,
            &engines,
            &Attestor::disabled(),
            bounds(Duration::from_secs(5)),
        )
        .await;
        assert_eq!(report.failures, Vec::<String>::new(), "{report:?}");
        let settled: Vec<&str> = report
            .marked_error
            .iter()
            .map(|s| s.verification_id.as_str())
            .collect();
        assert_eq!(settled, ["ver_on_up"], "{report:?}");
        assert_eq!(report.marked_error[0].error.as_deref(), Some(INTERRUPTED));
        // The run on the away engine, and the one never placed (it could be anywhere), wait.
        assert_eq!(report.waiting_for_engine.len(), 2, "{report:?}");
        assert!(
            report
                .waiting_for_engine
                .iter()
                .all(|w| w.contains("engine away does not answer") && w.contains("away 5 s")),
            "{report:?}"
        );
        // Past the bound both are lost: error, never passed.
        let report = recover(
            &data,
            &engines,
            &Attestor::disabled(),
            bounds(Duration::from_secs(601)),
        )
        .await;
        let mut lost: Vec<(&str, &str)> = report
            .marked_error
            .iter()
            .map(|s| (s.verification_id.as_str(), s.error.as_deref().unwrap()))
            .collect();
        lost.sort();
        assert_eq!(lost.len(), 2, "{report:?}");
        for (_, why) in &lost {
            assert!(
                why.starts_with("engine lost: away has not answered for 601 s"),
                "{why}"
            );
        }
        assert!(data.store.running().await.unwrap().is_empty());
        // An engine seen by a pass is measured from then, not from the job's creation.
        away.set_away(false);
        let _ = recover(
            &data,
            &engines,
            &Attestor::disabled(),
            bounds(Duration::from_secs(700)),
        )
        .await;
        let seen = data.store.engine_seen("away").await.unwrap().unwrap();
        assert_eq!(seen, ids::rfc3339(created + Duration::from_secs(700)));
    }
}
