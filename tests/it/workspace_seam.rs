//! The workspace seam: a job's checkout reaches its container and comes back only through the
//! context's [`Workspaces`] backend. A recording backend wrapped around the host one sees every
//! step of every job, in order, and a backend that refuses to stage ends the job as `error`
//! with nothing run.

use crate::support::git;
use crate::support::repo::Fixture;
use airlock::config::Config;
use airlock::engine::runner::pipeline::RunRequest;
use airlock::engine::runner::pool::Pool;
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
    let ctx = Context::for_run(
        Arc::new(config),
        data.clone(),
        Arc::new(FakeRuntime::new()),
        airlock::sandbox::seccomp::load().unwrap(),
    )
    .unwrap();
    let recording = Arc::new(Recording {
        inner: HostBind::new(&data.root),
        log: log.clone(),
        refuse_staging,
    });
    let runtime = ctx.pool.first().runtime.clone();
    let ctx = ctx.with_pool(Arc::new(Pool::single("local", runtime, recording, 1, [])));
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

// ---- An engine that holds its jobs' workspaces: the uploading backend ----

use airlock::engine::runner::Runner;
use airlock::engine::runner::pipeline::{Harvest, HarvestSlot};
use airlock::sandbox::runtime::{EngineVolumes, VolumeFile, VolumeFiles};
use airlock::staging::{CheckoutFs, Repo};
use airlock::workspace::uploads::Uploads;

/// A fixture whose tree has a nested file, an executable and a symlink.
fn tree_fixture() -> Fixture {
    let f = Fixture::new(&[
        ("README", "base\n", false),
        ("bin/run.sh", "#!/bin/sh\necho hi\n", true),
        ("src/deep/lib.rs", "pub fn f() {}\n", false),
    ]);
    std::os::unix::fs::symlink("README", f.repo.join("link")).unwrap();
    git(&f.repo, &["add", "link"]);
    git(&f.repo, &["commit", "-q", "-m", "link"]);
    f
}

fn stage_request(f: &Fixture, key: &str, fs: CheckoutFs) -> StageRequest {
    StageRequest {
        repo: Repo::open(&f.repo).unwrap(),
        commit: git(&f.repo, &["rev-parse", "HEAD"]),
        key: key.into(),
        fs,
        uid: 65534,
        gid: 65534,
    }
}

/// A quota no fixture tree comes near.
const ROOMY: CheckoutFs = CheckoutFs::Loop {
    disk_bytes: 1 << 30,
    inodes: 1 << 20,
};

fn file(bytes: &str, executable: bool) -> VolumeFile {
    VolumeFile::File {
        executable,
        bytes: bytes.as_bytes().to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_put_the_exact_tree_into_the_engines_volume_within_the_quota() {
    let f = tree_fixture();
    let fake = FakeRuntime::new();
    let volumes = fake.volumes();
    let uploads = Uploads::new(Arc::new(volumes.clone()));
    let job = uploads.stage(stage_request(&f, "k1", ROOMY)).await.unwrap();
    assert_eq!(job.attach().unwrap(), WorkspaceSource::Volume("k1".into()));
    let held = volumes.download("k1").await.unwrap().unwrap();
    let want: VolumeFiles = [
        ("README".to_string(), file("base\n", false)),
        ("bin/run.sh".to_string(), file("#!/bin/sh\necho hi\n", true)),
        (
            "link".to_string(),
            VolumeFile::Symlink {
                target: "README".into(),
            },
        ),
        (
            "src/deep/lib.rs".to_string(),
            file("pub fn f() {}\n", false),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(held, want);
    assert_eq!(job.check_sources(10).await.unwrap(), (vec![], 0));
    // A second stage under the same key is refused by the engine, naming the volume.
    let again = uploads
        .stage(stage_request(&f, "k1", ROOMY))
        .await
        .err()
        .expect("a volume is never staged twice");
    assert!(again.to_string().contains("\"k1\" exists"), "{again}");
    assert_eq!(uploads.leftovers().await.unwrap(), ["k1"]);
    assert!(uploads.remove("k1").await.unwrap());
    assert!(!uploads.remove("k1").await.unwrap());

    // The quota of a loop-mounted checkout bounds an uploaded tree too: bytes, then files.
    for fs in [
        CheckoutFs::Loop {
            disk_bytes: 10,
            inodes: 1000,
        },
        CheckoutFs::Loop {
            disk_bytes: 1 << 20,
            inodes: 2,
        },
    ] {
        let e = uploads
            .stage(stage_request(&f, "k2", fs))
            .await
            .err()
            .expect("over quota");
        assert!(matches!(e, StagingError::Space(_)), "{e}");
        assert!(e.to_string().contains("quota"), "{e}");
    }
    assert!(
        volumes.names().await.unwrap().is_empty(),
        "nothing uploaded"
    );
}

/// Runs `argv` through the runner on the fake engine with uploaded workspaces.
async fn run_uploaded(
    f: &Fixture,
    fake: Arc<FakeRuntime>,
    argv: &[&str],
    harvest: Option<HarvestSlot>,
) -> airlock::verification::Verification {
    let data = DataDir::open(&f.data).await.unwrap();
    // Uploaded workspaces are bounded by the profile's quota (checkout_filesystem = "loop").
    let config = Config::parse("").unwrap();
    let ctx = Context::for_run(
        Arc::new(config),
        data,
        fake.clone(),
        airlock::sandbox::seccomp::load().unwrap(),
    )
    .unwrap();
    let ctx = ctx.with_pool(Arc::new(Pool::single(
        "remote",
        fake.clone(),
        Arc::new(Uploads::new(Arc::new(fake.volumes()))),
        1,
        [],
    )));
    let runner = Runner::new(&ctx);
    let mut prepared = runner
        .prepare(RunRequest {
            repo: f.repo.clone(),
            rev: "main".into(),
            profile: "default".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            timeout_seconds: 30,
        })
        .await
        .unwrap();
    if let Some(into) = harvest {
        prepared = prepared.harvesting(Harvest {
            limits: HarvestLimits {
                dir: "out".into(),
                max_files: 4,
                max_bytes: 1024,
            },
            into,
        });
    }
    let (_tx, cancel) = tokio::sync::watch::channel(false);
    runner.execute(prepared, cancel).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_uploaded_workspaces_is_judged_from_the_volume_and_never_touches_a_host_checkout()
{
    let fake = Arc::new(FakeRuntime::new());
    judged_from_the_engines_files(fake.clone()).await;
    assert_eq!(fake.volumes().uploads(), 4, "one volume per run");
    assert_eq!(fake.volumes().scratch_fills(), 0);
}

/// An engine whose scratch dies with the job (a Kubernetes `emptyDir`): nothing is uploaded
/// ahead, the tree travels in the spec, and the same judgements come from the files the
/// runtime hands back when the job ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_scratch_that_dies_with_the_job_is_judged_from_what_the_engine_handed_back() {
    let fake = Arc::new(FakeRuntime::with_scratch_volumes());
    judged_from_the_engines_files(fake.clone()).await;
    assert_eq!(fake.volumes().uploads(), 0, "nothing goes ahead of the job");
    assert_eq!(fake.volumes().scratch_fills(), 4, "each job filled its own");

    // An engine that hands nothing back leaves nothing to judge: error, never a pass.
    let f = tree_fixture();
    let v = run_uploaded(&f, fake.clone(), &["fake-lose-scratch"], None).await;
    assert_eq!(v.status.as_str(), "error", "{v:?}");
    let why = v.error.unwrap_or_default();
    assert!(why.contains("handed back no files"), "{why}");
}

/// A passing run, a changed tracked file, an added file and a harvest, each judged from the
/// engine's files (never a host checkout), on `fake`'s kind of volume.
async fn judged_from_the_engines_files(fake: Arc<FakeRuntime>) {
    let f = tree_fixture();
    let checkouts = f.data.join("checkouts");
    let nothing_left = |what: &str| {
        let left = std::fs::read_dir(&checkouts)
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(left, 0, "{what}: no host checkout");
    };
    let v = run_uploaded(&f, fake.clone(), &["true"], None).await;
    assert_eq!(v.status.as_str(), "passed", "{:?}", v.error);
    nothing_left("a passing run");
    assert!(
        fake.volumes().names().await.unwrap().is_empty(),
        "volume removed"
    );

    // A changed tracked file is caught by the check against what was uploaded.
    let v = run_uploaded(
        &f,
        fake.clone(),
        &["fake-write", "src/deep/lib.rs", "x"],
        None,
    )
    .await;
    assert_eq!(v.status.as_str(), "source_changed");
    let detail = format!("{:?}", v.error);
    assert!(detail.contains("src/deep/lib.rs"), "{detail}");
    nothing_left("a mutating run");
    assert!(
        fake.volumes().names().await.unwrap().is_empty(),
        "volume removed"
    );

    // A new file is not the tree's: the run passes, as on a checkout.
    let v = run_uploaded(&f, fake.clone(), &["fake-write", "new.txt", "x"], None).await;
    assert_eq!(v.status.as_str(), "passed", "{:?}", v.error);

    // Output files come back from the volume, and out/ is gone before the source check.
    let slot: HarvestSlot = Arc::default();
    let v = run_uploaded(
        &f,
        fake.clone(),
        &["fake-write", "out/result.txt", "ok"],
        Some(slot.clone()),
    )
    .await;
    assert_eq!(v.status.as_str(), "passed", "{:?}", v.error);
    let got = slot.lock().unwrap().take().expect("harvested").unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "result.txt");
    assert!(
        matches!(&got[0].1, airlock::install::Image::File { bytes, .. } if bytes == b"ok"),
        "{got:?}"
    );
    nothing_left("a harvesting run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_sweeps_a_volume_no_live_worker_owns() {
    let f = tree_fixture();
    let data = DataDir::open(&f.data).await.unwrap();
    let fake = Arc::new(FakeRuntime::new());
    let volumes = fake.volumes();
    volumes
        .upload(
            "orphan-key",
            &airlock::sandbox::runtime::VolumeSpec {
                disk_bytes: 1 << 20,
                inodes: 100,
                uid: 65534,
                gid: 65534,
            },
            airlock::sandbox::runtime::ready(VolumeFiles::new()),
        )
        .await
        .unwrap();
    let engine = airlock::workspace::JobEngine {
        name: "local".into(),
        runtime: fake.clone(),
        workspaces: Arc::new(Uploads::new(Arc::new(volumes.clone()))),
    };
    let report = airlock::engine::runner::recovery::recover(
        &data,
        &[engine],
        &airlock::engine::attesting::Attestor::disabled(),
        airlock::engine::runner::recovery::Bounds {
            keep: std::time::Duration::from_secs(3600),
            engine_lost_after: std::time::Duration::from_secs(3600),
            now: airlock::ids::now(),
        },
    )
    .await;
    assert_eq!(
        report.checkouts_removed,
        ["volume orphan-key"],
        "{report:?}"
    );
    assert!(volumes.names().await.unwrap().is_empty());
}

// ---- A host checkout's container is created while its tree is staged (real Docker) ----

/// What the held backend does once the engine has created the job's container.
#[derive(Clone)]
enum WhileStaging {
    /// Stages the tree.
    Stage,
    /// Fails to stage it.
    Fail,
    /// Cancels the job, then stages the tree.
    Cancel(Arc<tokio::sync::watch::Sender<bool>>),
}

/// The host backend whose staging first waits until the engine holds the job's container
/// (asked through the docker CLI), logging its state: a pipeline that created the container
/// only after staging would leave it waiting (and the test failing).
struct Held {
    /// The host backend with its log (never refusing): what is not staging goes to it.
    rec: Recording,
    then: WhileStaging,
}

/// The state of job `key`'s container as the engine tells it (`None` while there is none).
fn container_state(key: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-a", "--format", "{{.State}}", "--filter"])
        .arg(format!("label=airlock.creation_key={key}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let state = String::from_utf8(out.stdout).unwrap().trim().to_string();
    (!state.is_empty()).then_some(state)
}

impl Workspaces for Held {
    fn reserve<'a>(
        &'a self,
        req: &'a StageRequest,
    ) -> BoxFuture<'a, Result<Option<WorkspaceSource>, StagingError>> {
        self.rec.log.lock().unwrap().push("reserve".into());
        self.rec.inner.reserve(req)
    }

    fn stage<'a>(
        &'a self,
        req: StageRequest,
    ) -> BoxFuture<'a, Result<Box<dyn JobWorkspace>, StagingError>> {
        Box::pin(async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let state = loop {
                let key = req.key.clone();
                let state = tokio::task::spawn_blocking(move || container_state(&key))
                    .await
                    .unwrap();
                match state {
                    Some(s) => break s,
                    None if std::time::Instant::now() > deadline => break "absent".into(),
                    None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                }
            };
            self.rec
                .log
                .lock()
                .unwrap()
                .push(format!("container {state} while staging"));
            match &self.then {
                WhileStaging::Stage => {}
                WhileStaging::Fail => return Err(StagingError::Space("no room left".into())),
                WhileStaging::Cancel(tx) => {
                    tx.send(true).unwrap();
                }
            }
            self.rec.stage(req).await
        })
    }

    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>> {
        self.rec.remove(key)
    }

    fn leftovers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, StagingError>> {
        self.rec.leftovers()
    }

    fn describe(&self, key: &str) -> String {
        self.rec.describe(key)
    }
}

/// Runs `cat README` on this machine's engine through a [`Held`] backend; the steps logged,
/// the verification, and the state of its container afterwards.
async fn run_held(
    then: impl FnOnce(Arc<tokio::sync::watch::Sender<bool>>) -> WhileStaging,
) -> (
    Vec<String>,
    airlock::verification::Verification,
    Option<String>,
) {
    let f = Fixture::new(&[("README", "staged while created\n", false)]);
    let head = git(&f.repo, &["rev-parse", "HEAD"]);
    let data = DataDir::open(&f.data).await.unwrap();
    let config = Arc::new(Config::parse("").unwrap());
    let runtime = airlock::sandbox::connect_local().await.unwrap();
    let seccomp = airlock::sandbox::seccomp::load().unwrap();
    let ctx = Context::for_run(config, data.clone(), runtime.clone(), seccomp).unwrap();
    // Kept until the run ends: a dropped sender would read as a cancellation.
    let (tx, cancel) = tokio::sync::watch::channel(false);
    let tx = Arc::new(tx);
    let log: Log = Arc::default();
    let held = Arc::new(Held {
        rec: Recording {
            inner: HostBind::new(&data.root),
            log: log.clone(),
            refuse_staging: false,
        },
        then: then(tx.clone()),
    });
    let image = ctx.config.profile("default").unwrap().image.clone();
    let ctx = ctx.with_pool(Arc::new(Pool::single(
        "local",
        runtime,
        held,
        1,
        [image.as_str()],
    )));
    let runner = Runner::new(&ctx);
    let prepared = runner
        .prepare(RunRequest {
            repo: f.repo.clone(),
            rev: "main".into(),
            profile: "default".into(),
            argv: vec!["cat".into(), "README".into()],
            timeout_seconds: 60,
        })
        .await
        .unwrap();
    let v = runner.execute(prepared, cancel).await.unwrap();
    drop(tx);
    ctx.pool.close();
    let left = container_state(&v.creation_key);
    let steps = log
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.replace(&head, "HEAD"))
        .collect();
    (steps, v, left)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_checkouts_container_is_created_while_its_tree_is_staged_and_started_after() {
    let (steps, v, left) = run_held(|_| WhileStaging::Stage).await;
    assert_eq!(v.status.as_str(), "passed", "{:?}", v.error);
    assert_eq!(v.output, "staged while created\n");
    // The engine held the container, created and not started, while the tree was staged;
    // the staged tree was checked (attach) before the start, and judged after the run.
    assert_eq!(
        steps,
        [
            "reserve",
            "container created while staging",
            "stage HEAD",
            "attach",
            "check",
            "remove true"
        ]
    );
    assert_eq!(left, None, "the container is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_that_cannot_be_staged_never_starts_the_container_made_for_it() {
    let (steps, v, left) = run_held(|_| WhileStaging::Fail).await;
    assert_eq!(v.status.as_str(), "error");
    let error = v.error.unwrap_or_default();
    assert!(
        error.contains("staging failed: ") && error.contains("no room left"),
        "{error}"
    );
    assert_eq!(v.exit_code, None, "nothing ran");
    assert_eq!(
        steps,
        ["reserve", "container created while staging", "remove true"]
    );
    assert_eq!(left, None, "the container made for it is removed");

    // Cancelled while its tree is staged: the container is never started either.
    let (steps, v, left) = run_held(WhileStaging::Cancel).await;
    assert_eq!(v.status.as_str(), "cancelled", "{:?}", v.error);
    assert_eq!(
        v.error.as_deref(),
        Some("cancelled before the command started")
    );
    assert_eq!(v.exit_code, None, "nothing ran");
    assert_eq!(steps[..2], ["reserve", "container created while staging"]);
    assert_eq!(steps.last().map(String::as_str), Some("remove true"));
    assert_eq!(left, None, "the container made for it is removed");
}
