//! The workspace seam: a job's checkout reaches its container and comes back only through the
//! context's [`Workspaces`] backend. A recording backend wrapped around the host one sees every
//! step of every job, in order, and a backend that refuses to stage ends the job as `error`
//! with nothing run.

use crate::support::git;
use crate::support::repo::Fixture;
use airlock::config::Config;
use airlock::engine::runner::pipeline::RunRequest;
use airlock::engine::{Context, DataDir};
use airlock::sandbox::WorkspaceSource;
use airlock::sandbox::fake::FakeRuntime;
use airlock::sandbox::runtime::BoxFuture;
use airlock::staging::StagingError;
use airlock::workspace::{
    ChangedPaths, HarvestLimits, Harvested, HostBind, JobWorkspace, StageRequest, Workspaces,
};
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

/// The host backend, with every call written to a log; `refuse_staging` makes staging fail.
struct Recording {
    inner: HostBind,
    log: Log,
    refuse_staging: bool,
}

struct RecordingJob {
    inner: Box<dyn JobWorkspace>,
    log: Log,
}

impl Workspaces for Recording {
    fn stage<'a>(
        &'a self,
        req: StageRequest,
    ) -> BoxFuture<'a, Result<Box<dyn JobWorkspace>, StagingError>> {
        Box::pin(async move {
            self.log
                .lock()
                .unwrap()
                .push(format!("stage {}", req.commit));
            if self.refuse_staging {
                return Err(StagingError::Space("this backend is full".into()));
            }
            let inner = self.inner.stage(req).await?;
            Ok(Box::new(RecordingJob {
                inner,
                log: self.log.clone(),
            }) as Box<dyn JobWorkspace>)
        })
    }

    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>> {
        Box::pin(async move {
            let removed = self.inner.remove(key).await?;
            self.log.lock().unwrap().push(format!("remove {removed}"));
            Ok(removed)
        })
    }

    fn leftovers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, StagingError>> {
        self.inner.leftovers()
    }

    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }
}

impl JobWorkspace for RecordingJob {
    fn attach(&self) -> Result<WorkspaceSource, StagingError> {
        self.log.lock().unwrap().push("attach".into());
        self.inner.attach()
    }

    fn harvest<'a>(&'a self, limits: &'a HarvestLimits) -> BoxFuture<'a, Harvested> {
        self.log.lock().unwrap().push("harvest".into());
        self.inner.harvest(limits)
    }

    fn check_sources(&self, listed: usize) -> BoxFuture<'_, Result<ChangedPaths, StagingError>> {
        self.log.lock().unwrap().push("check".into());
        self.inner.check_sources(listed)
    }
}

async fn run_through(refuse_staging: bool, argv: &[&str]) -> (Vec<String>, String, String) {
    let f = Fixture::new(&[("README", "base\n", false)]);
    let head = git(&f.repo, &["rev-parse", "HEAD"]);
    let data = DataDir::open(&f.data).await.unwrap();
    let config = Config::parse("checkout_filesystem = \"directory\"\n").unwrap();
    let log: Log = Arc::default();
    let mut ctx = Context::for_run(
        Arc::new(config),
        data.clone(),
        Arc::new(FakeRuntime::new()),
        airlock::sandbox::seccomp::load().unwrap(),
    );
    ctx.workspaces = Arc::new(Recording {
        inner: HostBind::new(&data.root),
        log: log.clone(),
        refuse_staging,
    });
    let runner = airlock::engine::runner::Runner::new(&ctx);
    let prepared = runner
        .prepare(RunRequest {
            repo: f.repo.clone(),
            rev: "main".into(),
            profile: "default".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            timeout_seconds: 30,
        })
        .await
        .unwrap();
    let (_tx, cancel) = tokio::sync::watch::channel(false);
    let v = runner.execute(prepared, cancel).await.unwrap();
    let left = std::fs::read_dir(data.checkouts()).unwrap().count();
    assert_eq!(left, 0, "the workspace is removed once the run settles");
    let entries = log.lock().unwrap().clone();
    let steps = entries
        .into_iter()
        .map(|e| e.replace(&head, "HEAD"))
        .collect();
    (
        steps,
        v.status.as_str().to_string(),
        v.error.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_a_jobs_workspace_goes_through_the_backend() {
    let (steps, status, _) = run_through(false, &["true"]).await;
    assert_eq!(status, "passed");
    assert_eq!(steps, ["stage HEAD", "attach", "check", "remove true"]);

    // A job that changes a tracked file is caught by the backend's source check.
    let (steps, status, error) = run_through(false, &["fake-write", "README", "changed"]).await;
    assert_eq!(status, "source_changed", "{error}");
    assert_eq!(steps, ["stage HEAD", "attach", "check", "remove true"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_cannot_stage_ends_the_job_as_error_before_anything_runs() {
    let (steps, status, error) = run_through(true, &["fake-write", "README", "x"]).await;
    assert_eq!(status, "error");
    assert!(error.contains("this backend is full"), "{error}");
    // Nothing was attached, run or checked; there was nothing to remove.
    assert_eq!(steps, ["stage HEAD", "remove false"]);
}
