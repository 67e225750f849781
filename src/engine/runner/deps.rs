//! The dependency phase: a job on a profile with `dependencies` gets its dependency set before
//! its container is created, and runs offline with it mounted read-only at `/deps`.
//!
//! At prepare, the set's inputs are read from the revision (each ecosystem's lockfile and
//! manifest, their SHA-256) and its key computed ([`Runner::dependency_plan`]); a missing
//! lockfile or an unpinned requirement is refused there, before anything is recorded. Before
//! placement, the set is looked up by key ([`Runner::dependency_set`]): a published set is
//! mounted and verified (once per process) and used as it is; a missing one is fetched once
//! (jobs on the same key wait for the one fetch) in a container hardened like every job, on this
//! machine's engine, that sees the checkout read-only, writes only the set's own quota
//! filesystem, and reaches the outside only through the egress proxy (see
//! [`crate::deps::egress`]). What the fetch leaves is sealed by a manifest and published by one
//! rename ([`crate::deps::store`]). A failed fetch settles the job `error`, naming the phase and
//! what failed (the package, the destination refused, the bound), never `failed`.

use super::Runner;
use crate::config::Profile;
use crate::deps::egress::{Allowlist, EgressLog};
use crate::deps::spec::{self, Dependency, SetInputs};
use crate::deps::store::{Lease, SetStore};
use crate::sandbox::{ContainerSpec, JobEnd, Phase, RunIdentity, RuntimeSpec};
use crate::staging::Repo;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The dependency sets of this process: the store, one fill per key, the bound on fetches.
pub struct DependencySets {
    store: Result<Arc<SetStore>, String>,
    fills: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    slots: Arc<tokio::sync::Semaphore>,
    allow: Arc<Allowlist>,
    bounds: crate::config::dependencies::DependencyBounds,
    trust: crate::config::dependencies::FetchTrust,
}

impl DependencySets {
    /// The sets of the data dir at `data_root` as `config` bounds them. The store is opened
    /// only when a profile has dependencies (why it could not be, otherwise, for the jobs that
    /// need it).
    pub fn new(config: &crate::config::Config, data_root: &std::path::Path) -> DependencySets {
        let needed = config.profiles.values().any(|p| !p.dependencies.is_empty());
        let store = if needed {
            SetStore::open(data_root, config.dependencies.cache_bytes)
                .map(Arc::new)
                .map_err(|e| format!("the dependency set store: {e}"))
        } else {
            Err("no profile has dependencies".into())
        };
        DependencySets {
            store,
            fills: Mutex::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(
                config.dependencies.max_concurrent_fetches,
            )),
            allow: Arc::new(config.egress.clone()),
            bounds: config.dependencies,
            trust: config.fetch_trust.clone(),
        }
    }

    /// The store, when it is open.
    pub fn store(&self) -> Option<&Arc<SetStore>> {
        self.store.as_ref().ok()
    }

    /// Unmounts the sets no job holds (a clean exit).
    pub fn close(&self) {
        if let Ok(s) = &self.store {
            s.close();
        }
    }

    fn fill_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.fills
            .lock()
            .expect("the fills are never poisoned")
            .entry(key.to_string())
            .or_default()
            .clone()
    }
}

/// A job's dependency set as decided at prepare: what it is made from and its key.
#[derive(Debug, Clone)]
pub struct DepsPlan {
    pub inputs: SetInputs,
    pub key: String,
    /// The revision's files it is made from that exist, with their SHA-256.
    pub lockfiles: BTreeMap<String, String>,
    /// The contents of the lockfiles the resolved list is read from (`Cargo.lock`, npm's).
    lock_texts: BTreeMap<String, String>,
    /// Where the fetch stages the revision from.
    repo: Repo,
    commit: String,
}

impl DepsPlan {
    /// What `environment_sha256` names of the set.
    pub fn environment_inputs(&self) -> super::environment::DependencyInputs {
        super::environment::DependencyInputs {
            key: self.key.clone(),
            lockfiles: self.lockfiles.clone(),
        }
    }

    /// The record's part before the set exists (its content digest and packages come after).
    pub fn record(&self) -> crate::verification::DependencyRecord {
        crate::verification::DependencyRecord {
            key: self.key.clone(),
            lockfiles: self.lockfiles.clone(),
            sha256: None,
            resolved: vec![],
        }
    }
}

impl Runner {
    /// The dependency set `profile` gives a job on `commit` of `repo`: its inputs read from the
    /// revision and its key; `None` for a profile without dependencies. Refused (nothing is
    /// recorded) when the revision lacks a lockfile the profile needs or pins too little.
    pub(super) fn dependency_plan(
        &self,
        repo: &Repo,
        commit: &str,
        tree: &str,
        profile: &Profile,
        image_id: &str,
    ) -> Result<Option<DepsPlan>, super::error::RunError> {
        use super::error::RunError;
        if profile.dependencies.is_empty() {
            return Ok(None);
        }
        let mut files = BTreeMap::new();
        let mut texts = BTreeMap::new();
        for d in &profile.dependencies {
            for (path, _) in d.files() {
                if files.contains_key(&path) {
                    continue;
                }
                let entry = crate::engine::blocking::blocking(|| repo.tree_entry(tree, &path))
                    .map_err(RunError::from_git)?;
                let content = match entry {
                    Some(e)
                        if matches!(
                            e.mode,
                            crate::domain::git::FileMode::Regular
                                | crate::domain::git::FileMode::Executable
                        ) =>
                    {
                        Some(
                            crate::engine::blocking::blocking(|| repo.read_blob(&e.oid))
                                .map_err(RunError::from_git)?,
                        )
                    }
                    _ => None,
                };
                files.insert(
                    path.clone(),
                    content.as_ref().map(|c| super::environment::sha256_hex(c)),
                );
                if let Some(c) = content {
                    texts.insert(path, String::from_utf8_lossy(&c).into_owned());
                }
            }
        }
        let inputs = SetInputs {
            image_id: image_id.to_string(),
            dependencies: profile.dependencies.clone(),
            files,
        };
        if let Some((eco, path)) = inputs.missing() {
            return Err(RunError::refused(
                "revision",
                format!(
                    "dependencies ({eco}): the revision has no {path}; profile {} makes its dependency set from it, so it must be committed",
                    profile.name
                ),
            ));
        }
        for d in &profile.dependencies {
            if let Dependency::Pip {
                requirements,
                require_hashes,
                ..
            } = d
            {
                let text = texts.get(requirements).map(String::as_str).unwrap_or("");
                spec::check_pins(requirements, text, *require_hashes).map_err(|m| {
                    RunError::refused("revision", format!("dependencies (pip): {m}"))
                })?;
            }
        }
        let key = inputs.key();
        let lockfiles = inputs
            .files
            .iter()
            .filter_map(|(p, d)| d.clone().map(|d| (p.clone(), d)))
            .collect();
        let lock_texts = texts
            .into_iter()
            .filter(|(p, _)| p.ends_with("Cargo.lock") || p.ends_with(".json"))
            .collect();
        Ok(Some(DepsPlan {
            inputs,
            key,
            lockfiles,
            lock_texts,
            repo: repo.clone(),
            commit: commit.to_string(),
        }))
    }

    /// The job's dependency set, fetched first when there is none (one fetch per key: a job
    /// whose set is being fetched waits for that fetch). `Err` is why the job cannot have it.
    pub(super) async fn dependency_set(
        &self,
        plan: &DepsPlan,
        profile: &Profile,
        mut cancel: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(Lease, crate::verification::DependencySource), String> {
        use crate::verification::DependencySource::{Cached, Fetched};
        let sets = &self.deps;
        let store = sets.store.as_ref().map_err(Clone::clone)?.clone();
        let lookup = |store: &Arc<SetStore>| {
            let (store, key) = (store.clone(), plan.key.clone());
            async move {
                tokio::task::spawn_blocking(move || store.get(&key))
                    .await
                    .expect("a set lookup does not panic")
                    .map_err(|e| e.to_string())
            }
        };
        if let Some(lease) = lookup(&store).await? {
            self.metrics.record_dependency_lookup("hit");
            return Ok((lease, Cached));
        }
        // One fill per key; the others wait for it and then find its set.
        let fill = sets.fill_lock(&plan.key);
        let _filling = tokio::select! {
            g = fill.lock_owned() => g,
            _ = crate::cancel::requested(&mut cancel) => return Err("cancelled while waiting for the dependency fetch".into()),
        };
        if let Some(lease) = lookup(&store).await? {
            // Fetched meanwhile, by the job this one waited for.
            self.metrics.record_dependency_lookup("hit");
            return Ok((lease, Fetched));
        }
        self.metrics.record_dependency_lookup("miss");
        let _slot = tokio::select! {
            s = sets.slots.clone().acquire_owned() => s.expect("the fetch slots are never closed"),
            _ = crate::cancel::requested(&mut cancel) => return Err("cancelled while waiting for a fetch slot".into()),
        };
        let started = std::time::Instant::now();
        let fetched = self.fetch(plan, profile, &store).await;
        self.metrics
            .record_dependency_fetch(fetched.is_ok(), started.elapsed());
        fetched.map(|lease| (lease, Fetched))
    }

    /// Fetches the set of `plan` in the sandbox and publishes it.
    async fn fetch(
        &self,
        plan: &DepsPlan,
        profile: &Profile,
        store: &Arc<SetStore>,
    ) -> Result<Lease, String> {
        let engine = self.pool.build_engine().ok_or_else(|| {
            "this machine's engine (where dependency fetches run) cannot be reached".to_string()
        })?;
        let key = crate::ids::new_creation_key();
        // The fetch's container and checkout are live while this lock is held: recovery and
        // its sweeps leave them alone, and remove them once the process is gone.
        let _lock = super::WorkerLock::try_acquire(&self.data.lock_path(&key))
            .map_err(|e| format!("the fetch's lock: {e}"))?
            .ok_or("a fresh fetch key is already locked")?;
        let workspaces = crate::workspace::HostBind::new(&self.data.root);
        use crate::workspace::Workspaces;
        let t = std::time::Instant::now();
        let staged = workspaces
            .stage(crate::workspace::StageRequest {
                repo: plan.repo.clone(),
                commit: plan.commit.clone(),
                key: key.clone(),
                fs: match self.config.checkout_filesystem {
                    crate::config::CheckoutFilesystem::Loop => crate::staging::CheckoutFs::Loop {
                        disk_bytes: profile.disk_bytes,
                        inodes: profile.inodes,
                    },
                    crate::config::CheckoutFilesystem::Directory => {
                        crate::staging::CheckoutFs::Directory
                    }
                },
                uid: profile.uid,
                gid: profile.gid,
            })
            .await
            .map_err(|e| format!("staging the revision for the fetch: {e}"))?;
        tracing::debug!(
            ms = t.elapsed().as_millis() as u64,
            "fetch: checkout staged"
        );
        let result = self
            .fetch_in(plan, profile, store, &engine, &key, staged.as_ref())
            .await;
        drop(staged);
        if let Err(e) = workspaces.remove(&key).await {
            tracing::warn!(error = %e, "the fetch's checkout is left for recovery");
        }
        result
    }

    async fn fetch_in(
        &self,
        plan: &DepsPlan,
        profile: &Profile,
        store: &Arc<SetStore>,
        engine: &crate::sandbox::Runtime,
        key: &str,
        staged: &dyn crate::workspace::JobWorkspace,
    ) -> Result<Lease, String> {
        let sets = &self.deps;
        let t = std::time::Instant::now();
        let incoming = {
            let (store, set_key) = (store.clone(), plan.key.clone());
            let (bytes, inodes) = (sets.bounds.max_set_bytes, sets.bounds.max_set_inodes);
            let owner = (profile.uid, profile.gid);
            tokio::task::spawn_blocking(move || store.begin(&set_key, bytes, inodes, owner))
                .await
                .expect("making a set's filesystem does not panic")
                .map_err(|e| format!("the set's filesystem: {e}"))?
        };
        tracing::debug!(
            ms = t.elapsed().as_millis() as u64,
            "fetch: set filesystem made"
        );
        let t = std::time::Instant::now();
        let workspace = staged
            .attach()
            .map_err(|e| format!("the fetch's checkout: {e}"))?;
        let proxy = format!("http://127.0.0.1:{}", spec::PROXY_PORT);
        let mut env: BTreeMap<String, String> = profile.env.clone();
        // The host's CA bundle, when configured, for the fetch's tools only: put beside the
        // set while it is fetched and removed before the set is sealed.
        let ca_in_set = incoming.mount_dir().join(crate::limits::FETCH_CA_FILE);
        if let Some(bundle) = &sets.trust.ca_bundle {
            std::fs::copy(bundle, &ca_in_set)
                .and_then(|_| {
                    std::fs::set_permissions(
                        &ca_in_set,
                        std::os::unix::fs::PermissionsExt::from_mode(0o444),
                    )
                })
                .map_err(|e| format!("dependencies.ca_bundle {}: {e}", bundle.display()))?;
            let ca = format!("{}/{}", spec::DEPS_DIR, crate::limits::FETCH_CA_FILE);
            for k in [
                "SSL_CERT_FILE",
                "CARGO_HTTP_CAINFO",
                "PIP_CERT",
                "REQUESTS_CA_BUNDLE",
                "NODE_EXTRA_CA_CERTS",
                "npm_config_cafile",
                "CURL_CA_BUNDLE",
                "GIT_SSL_CAINFO",
            ] {
                env.insert(k.to_string(), ca.clone());
            }
        }
        for (k, v) in [
            ("HOME", "/tmp".to_string()),
            ("HTTPS_PROXY", proxy.clone()),
            ("HTTP_PROXY", proxy.clone()),
            ("https_proxy", proxy.clone()),
            ("http_proxy", proxy),
            ("NO_PROXY", String::new()),
            ("AIRLOCK_DEPS", spec::DEPS_DIR.to_string()),
        ] {
            env.insert(k.to_string(), v);
        }
        let spec = ContainerSpec {
            runtime: RuntimeSpec {
                image_id: plan.inputs.image_id.clone(),
                user: profile.user(),
                working_dir: profile.working_dir.clone(),
                env,
                memory_bytes: profile.memory_bytes,
                nano_cpus: (profile.cpus * 1e9).round() as i64,
                pids: profile.pids,
                tmp_bytes: profile.tmp_bytes,
                seccomp_json: self.seccomp.compact_json.clone(),
                workspace_read_only: true,
                deps: Some(crate::sandbox::spec::DepsMount { read_only: false }),
                // The fetch reaches the egress proxy over the fetch network, which runsc
                // registered with `--network=none` cannot: it runs under runc on the engine
                // images are built on, running the package managers only (never the job).
                isolation: crate::domain::isolation::Isolation::Runc,
            },
            run: RunIdentity {
                creation_key: key.to_string(),
                verification_id: format!("fetch_{}", &plan.key[..16]),
                instance_id: self.data.instance_id.clone(),
                argv: fetch_command(&plan.inputs.dependencies),
                workspace,
                deps: Some(crate::sandbox::WorkspaceSource::HostBind(
                    incoming.mount_dir(),
                )),
                output: None,
            },
        };
        let log = Arc::new(EgressLog::default());
        // The proxy's socket is made in the container's own network namespace once it runs;
        // the fetch's first step waits for it.
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<String>();
        let proxy_task = {
            let (engine, allow, log) = (engine.clone(), sets.allow.clone(), log.clone());
            let fetch = plan.key.clone();
            tokio::spawn(async move {
                let Ok(id) = started_rx.await else { return };
                let pid = match engine.container_pid(&id).await {
                    Ok(pid) => pid,
                    Err(e) => {
                        tracing::error!(error = %e, "no egress for the fetch: its process is not found");
                        return;
                    }
                };
                let listener = tokio::task::spawn_blocking(move || {
                    crate::deps::egress::listen_in(pid, spec::PROXY_PORT)
                })
                .await
                .expect("entering a namespace does not panic")
                .and_then(tokio::net::TcpListener::from_std);
                match listener {
                    Ok(l) => crate::deps::egress::serve(l, allow, log, fetch).await,
                    Err(e) => tracing::error!(error = %e, "no egress for the fetch: its listener"),
                }
            })
        };
        let mut container_id = None;
        let mut started_tx = Some(started_tx);
        let mut on_phase = |ph: Phase| -> Result<(), String> {
            match ph {
                Phase::Created { container_id: id } => container_id = Some(id),
                Phase::Started => {
                    if let (Some(tx), Some(id)) = (started_tx.take(), container_id.clone()) {
                        let _ = tx.send(id);
                    }
                }
                Phase::Creating | Phase::Starting | Phase::Destroyed => {}
            }
            Ok(())
        };
        let cancel = self.deps_stop();
        let ran = engine
            .run(
                &spec,
                sets.bounds.fetch_timeout,
                &mut on_phase,
                cancel,
                crate::sandbox::runtime::start_now(),
            )
            .await;
        proxy_task.abort();
        tracing::debug!(ms = t.elapsed().as_millis() as u64, "fetch: container ran");
        let t = std::time::Instant::now();
        let outcome = ran.map_err(|e| format!("the fetch's container: {e}"))?;
        let output = outcome.output.text.trim().to_string();
        let refused = log.refusals();
        let quoted = |s: &str| tail(s, crate::limits::MAX_FETCH_OUTPUT_QUOTED);
        let names = plan
            .inputs
            .dependencies
            .iter()
            .map(Dependency::name)
            .collect::<Vec<_>>()
            .join(", ");
        match outcome.end {
            JobEnd::Exited { code: 0, .. } => {}
            JobEnd::Exited {
                oom_killed: true, ..
            } => {
                return Err(format!(
                    "the fetch ({names}) ran out of memory (memory_limit_bytes {})",
                    profile.memory_bytes
                ));
            }
            JobEnd::Exited { code, .. } => {
                let why = if !refused.is_empty() {
                    format!("egress refused: {}", refused.join("; "))
                } else if output.contains("No space left on device")
                    || output.contains("Disk quota exceeded")
                {
                    format!(
                        "the set exceeds dependencies.max_set_bytes ({}) or max_set_inodes ({})",
                        sets.bounds.max_set_bytes, sets.bounds.max_set_inodes
                    )
                } else {
                    format!("exit {code}")
                };
                return Err(format!(
                    "the fetch ({names}) failed: {why}; its output ends: {}",
                    quoted(&output)
                ));
            }
            JobEnd::TimedOut => {
                return Err(format!(
                    "the fetch ({names}) did not finish within dependencies.fetch_timeout_seconds ({} s){}",
                    sets.bounds.fetch_timeout.as_secs(),
                    if refused.is_empty() {
                        String::new()
                    } else {
                        format!("; egress refused: {}", refused.join("; "))
                    }
                ));
            }
            JobEnd::Cancelled => return Err("the fetch was cancelled (the daemon stops)".into()),
        }
        let _ = std::fs::remove_file(&ca_in_set);
        let resolved = resolved(plan, &incoming.mount_dir());
        let store = store.clone();
        let published = tokio::task::spawn_blocking(move || store.publish(incoming, resolved))
            .await
            .expect("publishing a set does not panic")
            .map_err(|e| format!("sealing the fetched set: {e}"));
        tracing::debug!(
            ms = t.elapsed().as_millis() as u64,
            "fetch: set sealed and published"
        );
        published
    }

    /// Where a job on `engine` mounts its set from: the read-only host mount on an engine of
    /// this host; on an engine that holds its own volumes, the set uploaded into one there
    /// (once per engine and set, then reused).
    pub(super) async fn deps_source(
        &self,
        engine: &super::pool::PoolEngine,
        lease: &Lease,
    ) -> Result<crate::sandbox::WorkspaceSource, String> {
        match engine
            .runtime
            .volumes(&self.data.instance_id, &self.seccomp.compact_json)
        {
            None => Ok(crate::sandbox::WorkspaceSource::HostBind(
                lease.dir().to_path_buf(),
            )),
            Some(volumes) => {
                let name = crate::sandbox::runtime::deps_volume_name(lease.digest());
                let filled = volumes
                    .ensure_readonly(&name, lease.dir())
                    .await
                    .map_err(|e| format!("the set on engine {}: {e}", engine.name))?;
                if filled {
                    // The engine holds no more sets than this machine's store: the volumes of
                    // sets evicted here (or left by an earlier process) go once no job mounts
                    // them.
                    let keep: std::collections::BTreeSet<String> = self
                        .deps
                        .store()
                        .map(|s| s.mounted_digests())
                        .unwrap_or_default()
                        .iter()
                        .map(|d| crate::sandbox::runtime::deps_volume_name(d))
                        .chain([name.clone()])
                        .collect();
                    match volumes.prune_readonly(&keep).await {
                        Ok(gone) if !gone.is_empty() => {
                            tracing::info!(engine = %engine.name, volumes = ?gone, "dependency-set volumes removed")
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(engine = %engine.name, error = %e, "pruning dependency-set volumes")
                        }
                    }
                }
                Ok(crate::sandbox::WorkspaceSource::Volume(name))
            }
        }
    }

    /// The cancel signal of fetches: shutdown (a fetch outlives the job that started it, so
    /// only the daemon's stop ends it).
    fn deps_stop(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.clone()
    }
}

/// The fetch's command: wait for the egress proxy (its socket appears in the container's own
/// namespace once it runs), then each ecosystem's fetch, in order, each with its environment.
fn fetch_command(deps: &[Dependency]) -> Vec<String> {
    let mut script = format!(
        "set -e\n\
         i=0\n\
         until (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null; do\n\
         i=$((i+1)); [ $i -gt 400 ] && {{ echo 'airlock: the egress proxy did not come up' >&2; exit 97; }}\n\
         sleep 0.05\n\
         done\n",
        port = spec::PROXY_PORT
    );
    for d in deps {
        let mut line = String::from("env");
        for (k, v) in d.job_env() {
            if matches!(d, Dependency::Generic { .. }) {
                line.push_str(&format!(" {}", spec::shell_quote(&format!("{k}={v}"))));
            }
        }
        line.push_str(&format!(" AIRLOCK_DEPS={}", spec::shell_quote(&d.dir())));
        for a in d.fetch_argv() {
            line.push(' ');
            line.push_str(&spec::shell_quote(&a));
        }
        script.push_str(&format!(
            "mkdir -p {}\n{line}\n",
            spec::shell_quote(&d.dir())
        ));
    }
    vec!["/bin/bash".into(), "-c".into(), script]
}

/// What the set resolved to: from the revision's lockfiles (cargo, npm) and pip's report.
fn resolved(plan: &DepsPlan, set: &std::path::Path) -> Vec<spec::Resolved> {
    let mut out = Vec::new();
    for d in &plan.inputs.dependencies {
        match d {
            Dependency::Cargo => {
                if let Some(t) = plan.lock_texts.get("Cargo.lock") {
                    out.extend(spec::cargo_resolved(t));
                }
            }
            Dependency::Pip { .. } => {
                if let Ok(t) = std::fs::read_to_string(set.join("pip/report.json")) {
                    out.extend(spec::pip_resolved(&t));
                }
            }
            Dependency::Npm { lockfile } => {
                if let Some(t) = plan.lock_texts.get(lockfile) {
                    out.extend(spec::npm_resolved(t));
                }
            }
            Dependency::Generic { .. } => {}
        }
    }
    out
}

/// The last `max` bytes of `s` (at a character boundary).
fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut at = s.len() - max;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    format!("...{}", &s[at..])
}
