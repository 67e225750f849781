//! The shared context every workflow runs on: configuration, the data dir (store, artifacts and
//! the layout of every path), the container runtime, the seccomp profile, the clock and the
//! workspaces' repositories. Built once at start-up; cheap to clone.

use super::DataDir;
pub use super::clock::Clock;
use crate::config::Config;
use crate::sandbox::Runtime;
use crate::sandbox::seccomp::SeccompProfile;
use crate::staging::Repo;
use std::collections::HashMap;
use std::sync::Arc;

/// What a workflow holds: the configuration, the data dir, the clock, the workspaces'
/// repositories, the attestor and the idempotency keys, with authorization and the one
/// prologue on top. Nothing here runs a container: a workflow that runs one hands it to the
/// [`super::background::Background`], which holds the whole [`Context`].
#[derive(Clone)]
pub struct Handles {
    pub config: Arc<Config>,
    /// The data dir: its store, its artifacts and its [`super::layout::DataLayout`].
    pub data: DataDir,
    pub clock: Clock,
    /// Every configured workspace's repository, by workspace id.
    repos: Arc<HashMap<String, Repo>>,
    /// The signing key and the public keys of attestations.
    pub attest: Arc<crate::engine::attesting::Attestor>,
    /// Idempotency keys: checked, stamped, one call per key at a time, replays found (see
    /// [`crate::engine::idempotency`]).
    pub keys: Arc<crate::engine::idempotency::Keys>,
}

/// The workflows' [`Handles`] and what running a job needs besides: the engines, the seccomp
/// profile, the metrics, the dependency sets and the stop signal. Held by the runner, the
/// background, recovery and the composition roots (daemon, CLI); it reads as its handles.
#[derive(Clone)]
pub struct Context {
    /// What every workflow holds.
    pub handles: Handles,
    /// The engines jobs run on (Docker in production, a scripted fake in workflow tests),
    /// each with how its jobs get their workspaces.
    pub pool: Arc<crate::engine::runner::pool::Pool>,
    pub seccomp: SeccompProfile,
    /// The daemon's metrics (its own registry; see [`crate::metrics`]).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The dependency sets jobs get.
    pub deps: Arc<crate::engine::runner::deps::DependencySets>,
    /// Set to true when the process stops (what a shared dependency fetch is cancelled by).
    pub stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::ops::Deref for Context {
    type Target = Handles;
    fn deref(&self) -> &Handles {
        &self.handles
    }
}

impl Context {
    /// Opens every workspace repository; a missing one is an error naming it.
    pub fn new(
        config: Arc<Config>,
        data: DataDir,
        runtime: Runtime,
        seccomp: SeccompProfile,
        clock: Clock,
    ) -> Result<Context, String> {
        let mut repos = HashMap::new();
        for (id, ws) in &config.workspaces {
            if let Some(tree) = &ws.worktree {
                Repo::check_work_tree(tree)
                    .map_err(|e| format!("workspaces.{id}.worktree: {e}"))?;
                let canonical = std::fs::canonicalize(tree)
                    .map_err(|e| format!("workspaces.{id}.worktree: {e}"))?;
                if canonical.starts_with(&data.root) || data.root.starts_with(&canonical) {
                    return Err(format!(
                        "workspaces.{id}.worktree: {} and Airlock's data dir {} must not contain each other",
                        tree.display(),
                        data.root.display()
                    ));
                }
            }
            let repo = Repo::open(&ws.repo).map_err(|e| format!("workspaces.{id}.repo: {e}"))?;
            repos.insert(id.clone(), repo);
        }
        let attest = Arc::new(crate::engine::attesting::Attestor::load(&config)?);
        let deps = Arc::new(crate::engine::runner::deps::DependencySets::new(
            &config, &data.root,
        ));
        let keys = Arc::new(crate::engine::idempotency::Keys::new(
            data.store.clone(),
            clock.clone(),
        ));
        Ok(Context {
            pool: Arc::new(local_pool(&config, runtime, &data, &seccomp)),
            seccomp,
            metrics: Arc::default(),
            deps,
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
            handles: Handles {
                attest,
                config,
                data,
                clock,
                repos: Arc::new(repos),
                keys,
            },
        })
    }

    /// A context for one `airlock run`: the runner needs no workspace repository (the caller
    /// names its own), so none is opened.
    pub fn for_run(
        config: Arc<Config>,
        data: DataDir,
        runtime: Runtime,
        seccomp: SeccompProfile,
    ) -> Result<Context, String> {
        let deps = Arc::new(crate::engine::runner::deps::DependencySets::new(
            &config, &data.root,
        ));
        let keys = Arc::new(crate::engine::idempotency::Keys::new(
            data.store.clone(),
            Clock::System,
        ));
        Ok(Context {
            pool: Arc::new(local_pool(&config, runtime, &data, &seccomp)),
            seccomp,
            metrics: Arc::default(),
            deps,
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
            handles: Handles {
                attest: Arc::new(crate::engine::attesting::Attestor::load(&config)?),
                config,
                data,
                clock: Clock::System,
                repos: Arc::default(),
                keys,
            },
        })
    }

    /// Every engine jobs run on, for recovery.
    pub fn engines(&self) -> Vec<crate::workspace::JobEngine> {
        self.pool.job_engines()
    }

    /// The same context on another set of engines (the configured `[[engines]]`).
    pub fn with_pool(self, pool: Arc<crate::engine::runner::pool::Pool>) -> Context {
        Context { pool, ..self }
    }
}

impl Handles {
    /// A configured workspace's repository.
    pub fn repo(&self, workspace_id: &str) -> &Repo {
        self.repos
            .get(workspace_id)
            .expect("workspaces are checked before their repository is used")
    }

    pub fn now_rfc3339(&self) -> String {
        crate::ids::rfc3339(self.clock.now())
    }
}

/// Jobs' workspaces as `runtime`'s engine takes them: trees uploaded into volumes it holds
/// when it shares no filesystem with Airlock, else host checkouts, bind-mounted.
pub fn workspaces_of(
    runtime: &dyn crate::sandbox::ContainerRuntime,
    data: &DataDir,
    seccomp: &SeccompProfile,
    tree_cache_bytes: u64,
) -> Arc<dyn crate::workspace::Workspaces> {
    match runtime.volumes(&data.instance_id, &seccomp.compact_json) {
        Some(volumes) => Arc::new(crate::workspace::uploads::Uploads::new(volumes)),
        None => Arc::new(crate::workspace::HostBind::with_tree_cache(
            &data.root,
            tree_cache_bytes,
        )),
    }
}

/// The configured `[[engines]]` as a pool (`None` without any: the caller's one runtime is the
/// pool). An engine that does not answer yet joins the pool out of placement, to be probed.
pub async fn configured_pool(
    config: &Config,
    data: &DataDir,
    seccomp: &SeccompProfile,
) -> Result<Option<crate::engine::runner::pool::Pool>, crate::sandbox::SandboxError> {
    use crate::engine::runner::pool::{Pool, PoolEngine};
    if config.engines.is_empty() {
        return Ok(None);
    }
    let kind = crate::sandbox::pool_workspace_kind(config);
    let mut engines = Vec::new();
    for e in &config.engines {
        let (runtime, down) = crate::sandbox::reach(e, kind).await?;
        let workspaces = workspaces_of(runtime.as_ref(), data, seccomp, config.tree_cache_bytes);
        let engine = PoolEngine::new(&e.name, runtime, workspaces, e.max_jobs, e.labels.clone());
        if let Some(why) = down {
            engine.mark_down(&why);
        }
        engines.push(engine);
    }
    // The ids jobs are resolved with are those of the images Airlock built, on this machine's
    // engine (where `airlock images build` makes them and `airlock images push` copies them
    // from), never whatever a configured engine says its tags are.
    let reference = crate::engine::runner::pool::images::Reference::new(
        "this machine's engine, where `airlock images build` makes the images",
        crate::sandbox::connect_local()
            .await
            .map_err(|e| e.to_string()),
    );
    Ok(Some(Pool::new(
        engines,
        reference,
        images_of(config).iter().map(String::as_str),
    )))
}

/// Every image the configuration's jobs use: each profile's, and the workspace holder's on a
/// pool whose engines hold uploaded workspaces.
pub fn images_of(config: &Config) -> Vec<String> {
    let mut images: Vec<String> = config.profiles.values().map(|p| p.image.clone()).collect();
    if crate::sandbox::pool_workspace_kind(config) == crate::sandbox::spec::WorkspaceKind::Volume {
        images.push(crate::sandbox::HOLDER_IMAGE.to_string());
    }
    images.sort();
    images.dedup();
    images
}

/// The one engine of a configuration without `[[engines]]`: `runtime`, named
/// [`DEFAULT_ENGINE_NAME`], as many slots as `max_concurrent_verifications`.
fn local_pool(
    config: &Config,
    runtime: Runtime,
    data: &DataDir,
    seccomp: &SeccompProfile,
) -> crate::engine::runner::pool::Pool {
    let workspaces = workspaces_of(runtime.as_ref(), data, seccomp, config.tree_cache_bytes);
    crate::engine::runner::pool::Pool::single(
        DEFAULT_ENGINE_NAME,
        runtime,
        workspaces,
        config.max_concurrent_verifications,
        images_of(config).iter().map(String::as_str),
    )
}

/// The name results carry for the engine of a configuration without `[[engines]]`.
pub const DEFAULT_ENGINE_NAME: &str = "local";
