//! The container runtime: the only module that names bollard.
//!
//! One job = one container, created with the hardening baseline, attached before start, drained
//! with a bounded capture, killed at the deadline or on cancellation, and always destroyed
//! (explicit removal confirmed by listing by label, plus a guard for panics and dropped futures).

pub mod capture;
pub mod fake;
pub mod images;
pub mod runtime;
pub mod seccomp;

pub use runtime::{ContainerRuntime, Runtime};

use crate::limits;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, EventsOptionsBuilder,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use capture::{CapturedOutput, OutputCapture};
use futures_util::StreamExt;
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Label present on every container Airlock creates.
pub const LABEL_MANAGED: &str = "airlock.managed";
/// Label carrying the creation key.
pub const LABEL_CREATION_KEY: &str = "airlock.creation_key";
/// Label carrying the verification id.
pub const LABEL_VERIFICATION_ID: &str = "airlock.verification_id";
/// Label carrying the data directory's instance id, so one data dir's recovery never touches
/// another's containers on a shared engine.
pub const LABEL_INSTANCE: &str = "airlock.instance";

/// Default Docker socket when `DOCKER_HOST` is unset.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// Errors of the container runtime. Expected outcomes (non-zero exit, timeout, OOM) are not
/// errors: they are [`JobEnd`] values.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot reach the Docker engine at {endpoint}: {message}")]
    Unreachable { endpoint: String, message: String },
    #[error(
        "image {image} is not in the Docker engine: run `airlock images build` (images are built locally from images/; nothing is pulled)"
    )]
    ImageMissing { image: String },
    #[error("docker {op} failed: {source}")]
    Docker {
        op: &'static str,
        #[source]
        source: DockerError,
    },
    #[error("container {name} is still present after {attempts} removal attempts: {message}")]
    NotRemoved {
        name: String,
        attempts: u32,
        message: String,
    },
    #[error("image build failed: {0}")]
    Build(String),
    /// A runtime other than Docker (the scripted fake) failed.
    #[error("container runtime failed: {0}")]
    Runtime(String),
}

fn docker_err(op: &'static str) -> impl FnOnce(DockerError) -> SandboxError {
    move |source| SandboxError::Docker { op, source }
}

fn is_status(e: &DockerError, codes: &[u16]) -> bool {
    matches!(e, DockerError::DockerResponseServerError { status_code, .. } if codes.contains(status_code))
}

/// What the environment decides about a job container: image, user, environment, limits and
/// the seccomp profile. Built by the environment builder from server-side configuration only;
/// [`render`] turns it (with a [`RunIdentity`]) into the create body, and [`hashed_form`] is the
/// same rendering without the per-run fields, which `environment_sha256` hashes. So the hash
/// describes exactly what is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSpec {
    /// The resolved image id (not the tag), so the image that was hashed is the one that runs.
    pub image_id: String,
    pub user: String,
    pub working_dir: String,
    pub env: BTreeMap<String, String>,
    pub memory_bytes: i64,
    pub nano_cpus: i64,
    pub pids: i64,
    pub tmp_bytes: i64,
    pub seccomp_json: String,
}

/// What differs between two runs of the same environment: never part of the hash.
#[derive(Debug, Clone)]
pub struct RunIdentity {
    pub creation_key: String,
    pub verification_id: String,
    pub instance_id: String,
    /// The command (the setup script wrapper plus the verification's argv).
    pub argv: Vec<String>,
    /// The job's disposable checkout, mounted read-write at `working_dir`.
    pub workspace: WorkspaceSource,
}

/// How a job's checkout reaches its container. Today the engine shares this host's filesystem,
/// so the checkout is bind-mounted; a remote engine or a Kubernetes backend would upload it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceSource {
    /// A host directory bind-mounted into the container.
    HostBind(PathBuf),
}

/// Everything needed to create one hardened job container.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub runtime: RuntimeSpec,
    pub run: RunIdentity,
}

impl ContainerSpec {
    /// Deterministic container name for a creation key.
    pub fn name(&self) -> String {
        container_name(&self.run.creation_key)
    }
}

/// Fields of the rendered create body that belong to one run, not to the environment (JSON
/// paths of the body as the Docker API names them; `[]` means every element of an array).
pub const PER_RUN_FIELDS: [&str; 3] = ["Labels", "Entrypoint", "HostConfig.Mounts[].Source"];

/// The create body for `spec` with per-run fields removed: what `environment_sha256` hashes.
pub fn hashed_form(spec: &RuntimeSpec) -> serde_json::Value {
    let placeholder = RunIdentity {
        creation_key: String::new(),
        verification_id: String::new(),
        instance_id: String::new(),
        argv: Vec::new(),
        workspace: WorkspaceSource::HostBind(PathBuf::new()),
    };
    let mut v = serde_json::to_value(render(spec, &placeholder)).expect("a create body serializes");
    for field in PER_RUN_FIELDS {
        remove_path(&mut v, field);
    }
    // The seccomp profile is applied inline (tens of KiB); its digest stands for it here, so the
    // recorded spec stays small while any change to the profile still changes the hash.
    if let Some(opts) = v
        .pointer_mut("/HostConfig/SecurityOpt")
        .and_then(|o| o.as_array_mut())
    {
        for o in opts {
            if let Some(json) = o.as_str().and_then(|s| s.strip_prefix("seccomp=")) {
                let digest = hex::encode(sha2::Sha256::digest(json.as_bytes()));
                *o = serde_json::Value::String(format!("seccomp=sha256:{digest}"));
            }
        }
    }
    v
}

/// Removes `path` (dot-separated keys, `name[]` for every element of an array) from `v`.
fn remove_path(v: &mut serde_json::Value, path: &str) {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    match (head.strip_suffix("[]"), rest) {
        (Some(key), Some(rest)) => {
            if let Some(items) = obj.get_mut(key).and_then(|a| a.as_array_mut()) {
                for item in items {
                    remove_path(item, rest);
                }
            }
        }
        (None, Some(rest)) => {
            if let Some(child) = obj.get_mut(head) {
                remove_path(child, rest);
            }
        }
        (_, None) => {
            obj.remove(head.trim_end_matches("[]"));
        }
    }
}

/// Deterministic container name for a creation key.
pub fn container_name(creation_key: &str) -> String {
    format!("airlock-{creation_key}")
}

/// Points in a job's life, reported to the caller as they happen (crash-point hooks use them).
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    Created { container_id: String },
    Started,
    Destroyed,
}

pub use crate::domain::verification::JobEnd;

/// The result of one job.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub end: JobEnd,
    pub output: CapturedOutput,
    pub container_id: String,
    pub observed_image: String,
    pub duration: Duration,
}

/// A managed container found by listing labels.
#[derive(Debug, Clone)]
pub struct ManagedContainer {
    pub id: String,
    pub creation_key: Option<String>,
}

/// The Docker-backed runtime.
#[derive(Clone)]
pub struct Sandbox {
    docker: Docker,
}

impl Sandbox {
    /// Connects to `DOCKER_HOST` when set, else the default socket, and negotiates the API
    /// version down to the engine's. Fails with the endpoint it tried.
    pub async fn connect() -> Result<Sandbox, SandboxError> {
        let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        let endpoint = match &host {
            Some(h) => format!("{h} (from DOCKER_HOST)"),
            None => format!("unix://{DEFAULT_DOCKER_SOCKET} (DOCKER_HOST is unset)"),
        };
        let unreachable = |message: String| SandboxError::Unreachable {
            endpoint: endpoint.clone(),
            message,
        };
        let docker = match &host {
            Some(_) => Docker::connect_with_defaults(),
            None => Docker::connect_with_socket(
                DEFAULT_DOCKER_SOCKET,
                limits::DOCKER_REQUEST_TIMEOUT_SECS,
                bollard::API_DEFAULT_VERSION,
            ),
        }
        .map_err(|e| unreachable(e.to_string()))?;
        let docker =
            tokio::time::timeout(limits::DOCKER_NEGOTIATE_TIMEOUT, docker.negotiate_version())
                .await
                .map_err(|_| {
                    unreachable(format!(
                        "no answer within {} s",
                        limits::DOCKER_NEGOTIATE_TIMEOUT.as_secs()
                    ))
                })?
                .map_err(|e| unreachable(e.to_string()))?;
        Ok(Sandbox { docker })
    }

    pub(crate) fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Resolves an image reference to its id, or says how to build it.
    pub async fn image_id(&self, image: &str) -> Result<String, SandboxError> {
        match self.docker.inspect_image(image).await {
            Ok(i) => i.id.ok_or_else(|| SandboxError::ImageMissing {
                image: image.to_string(),
            }),
            Err(e) if is_status(&e, &[404]) => Err(SandboxError::ImageMissing {
                image: image.to_string(),
            }),
            Err(e) => Err(SandboxError::Docker {
                op: "inspect image",
                source: e,
            }),
        }
    }

    /// Runs one job to its end and destroys its container. `phase` is called as the job moves
    /// on; `cancel` flipping to `true` kills the job (outcome `Cancelled`).
    pub async fn run(
        &self,
        spec: &ContainerSpec,
        timeout: Duration,
        phase: &mut (dyn FnMut(Phase) + Send),
        cancel: watch::Receiver<bool>,
    ) -> Result<JobOutcome, SandboxError> {
        let name = spec.name();
        let mut guard = RemovalGuard {
            sandbox: self.clone(),
            name: name.clone(),
            armed: true,
        };
        let result = self.run_inner(spec, timeout, phase, cancel).await;
        let removed = self.destroy(&name, &spec.run.creation_key).await;
        guard.armed = false;
        let outcome = result?;
        removed?;
        phase(Phase::Destroyed);
        Ok(outcome)
    }

    async fn run_inner(
        &self,
        spec: &ContainerSpec,
        timeout: Duration,
        phase: &mut (dyn FnMut(Phase) + Send),
        mut cancel: watch::Receiver<bool>,
    ) -> Result<JobOutcome, SandboxError> {
        let name = spec.name();
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                render(&spec.runtime, &spec.run),
            )
            .await
            .map_err(docker_err("create container"))?;
        let id = created.id;
        phase(Phase::Created {
            container_id: id.clone(),
        });
        let observed_image = self
            .docker
            .inspect_container(&id, None)
            .await
            .map_err(docker_err("inspect container"))?
            .image
            .unwrap_or_default();

        let attached = self
            .docker
            .attach_container(
                &id,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stdout(true)
                        .stderr(true)
                        .stream(true)
                        .logs(false)
                        .build(),
                ),
            )
            .await
            .map_err(docker_err("attach"))?;
        drop(attached.input);
        let mut output = attached.output;

        // A second OOM signal beside State.OOMKilled, which has been unreliable on some kernels
        // and cgroup versions: the engine's own "oom" event for this container.
        let oom_seen = Arc::new(AtomicBool::new(false));
        let oom_task = {
            let docker = self.docker.clone();
            let flag = oom_seen.clone();
            let filters = HashMap::from([
                ("container", vec![id.clone()]),
                ("event", vec!["oom".to_string()]),
            ]);
            let opts = EventsOptionsBuilder::default().filters(&filters).build();
            tokio::spawn(async move {
                let mut events = docker.events(Some(opts));
                while let Some(Ok(ev)) = events.next().await {
                    if ev.action.as_deref() == Some("oom") {
                        flag.store(true, Ordering::SeqCst);
                    }
                }
            })
        };
        let (wait_tx, mut wait_rx) = tokio::sync::oneshot::channel::<Option<i64>>();
        let wait_task = {
            let docker = self.docker.clone();
            let id = id.clone();
            tokio::spawn(async move {
                let opts = WaitContainerOptionsBuilder::default()
                    .condition("next-exit")
                    .build();
                let mut wait = Box::pin(docker.wait_container(&id, Some(opts)));
                let code = match wait.next().await {
                    Some(Ok(r)) => Some(r.status_code),
                    Some(Err(DockerError::DockerContainerWaitError { code, .. })) => Some(code),
                    _ => None,
                };
                let _ = wait_tx.send(code);
            })
        };

        self.docker
            .start_container(&id, None)
            .await
            .map_err(docker_err("start container"))?;
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        phase(Phase::Started);

        let mut capture = OutputCapture::new();
        let mut end: Option<JobEnd> = None;
        // Drain output until EOF, the deadline, or cancellation. The deadline is polled beside
        // the stream, so a flood cannot hold it off.
        loop {
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(log)) => capture.push(&log.into_bytes()),
                    Some(Err(e)) => {
                        tracing::warn!(container = %name, error = %e, "output stream ended with an error");
                        break;
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => { end = Some(JobEnd::TimedOut); break; }
                _ = cancelled(&mut cancel) => { end = Some(JobEnd::Cancelled); break; }
            }
        }
        drop(output);
        // Output closed: wait for the exit itself. The wait request may have reached the engine
        // after a very fast exit, so the state is also polled.
        let mut exit_code: Option<i64> = None;
        if end.is_none() {
            let mut tick = tokio::time::interval(limits::EXIT_POLL_INTERVAL);
            loop {
                tokio::select! {
                    code = &mut wait_rx => { exit_code = code.ok().flatten(); break; }
                    _ = tick.tick() => {
                        let st = self.docker.inspect_container(&id, None).await
                            .map_err(docker_err("inspect container"))?.state;
                        if let Some(st) = st.filter(has_exited) {
                            exit_code = st.exit_code;
                            break;
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => { end = Some(JobEnd::TimedOut); break; }
                    _ = cancelled(&mut cancel) => { end = Some(JobEnd::Cancelled); break; }
                }
            }
        }
        let duration = started.elapsed();
        wait_task.abort();
        let end = match end {
            Some(e) => {
                self.kill(&id).await?;
                e
            }
            None => {
                let st = self
                    .docker
                    .inspect_container(&id, None)
                    .await
                    .map_err(docker_err("inspect container"))?
                    .state
                    .unwrap_or_default();
                let code = exit_code.or(st.exit_code).unwrap_or(-1);
                // Give the event stream a moment: the engine emits "oom" around the exit.
                if !st.oom_killed.unwrap_or(false) && code != 0 {
                    tokio::time::sleep(limits::OOM_EVENT_GRACE).await;
                }
                let oom_killed = st.oom_killed.unwrap_or(false) || oom_seen.load(Ordering::SeqCst);
                JobEnd::Exited { code, oom_killed }
            }
        };
        oom_task.abort();
        Ok(JobOutcome {
            end,
            output: capture.finish(),
            container_id: id,
            observed_image,
            duration,
        })
    }

    async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        match self
            .docker
            .kill_container(
                id,
                Some(
                    KillContainerOptionsBuilder::default()
                        .signal("SIGKILL")
                        .build(),
                ),
            )
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, &[404, 409]) => Ok(()),
            Err(e) => Err(SandboxError::Docker {
                op: "kill container",
                source: e,
            }),
        }
    }

    /// Lists containers (any state) carrying `label` (`key` or `key=value`).
    async fn list_by_label(
        &self,
        labels: &[String],
    ) -> Result<Vec<ManagedContainer>, SandboxError> {
        let filters = HashMap::from([("label", labels.to_vec())]);
        let list = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(docker_err("list containers"))?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let creation_key = c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_CREATION_KEY).cloned());
                c.id.map(|id| ManagedContainer { id, creation_key })
            })
            .collect())
    }

    /// Containers of this data dir's instance.
    pub async fn list_managed(
        &self,
        instance_id: &str,
    ) -> Result<Vec<ManagedContainer>, SandboxError> {
        self.list_by_label(&[
            format!("{LABEL_MANAGED}=true"),
            format!("{LABEL_INSTANCE}={instance_id}"),
        ])
        .await
    }

    /// Containers labelled with a creation key.
    pub async fn list_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Vec<ManagedContainer>, SandboxError> {
        self.list_by_label(&[format!("{LABEL_CREATION_KEY}={key}")])
            .await
    }

    /// Force-removes every container labelled with `creation_key` (and the one named `name`),
    /// then confirms by listing that none remains. Returns how many were removed.
    pub async fn destroy(&self, name: &str, creation_key: &str) -> Result<usize, SandboxError> {
        let mut removed = 0;
        let mut last_error = String::new();
        for attempt in 1..=limits::CONTAINER_REMOVE_ATTEMPTS {
            let mut targets: Vec<String> = self
                .list_by_creation_key(creation_key)
                .await?
                .into_iter()
                .map(|c| c.id)
                .collect();
            if attempt == 1 {
                targets.push(name.to_string());
            }
            for t in &targets {
                match self
                    .docker
                    .remove_container(
                        t,
                        Some(
                            RemoveContainerOptionsBuilder::default()
                                .force(true)
                                .v(true)
                                .build(),
                        ),
                    )
                    .await
                {
                    Ok(()) => removed += 1,
                    Err(e) if is_status(&e, &[404]) => {}
                    // 409: removal already in progress; confirmed by the listing below.
                    Err(e) if is_status(&e, &[409]) => last_error = e.to_string(),
                    Err(e) => last_error = e.to_string(),
                }
            }
            if self.list_by_creation_key(creation_key).await?.is_empty() {
                return Ok(removed);
            }
            tokio::time::sleep(limits::CONTAINER_REMOVE_RETRY_DELAY * attempt).await;
        }
        Err(SandboxError::NotRemoved {
            name: name.to_string(),
            attempts: limits::CONTAINER_REMOVE_ATTEMPTS,
            message: last_error,
        })
    }
}

/// Resolves once `rx` says "cancel" (or its sender is gone), holding no borrow across awaits.
async fn cancelled(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|c| *c).await;
}

/// True once a started container is no longer running.
fn has_exited(st: &bollard::models::ContainerState) -> bool {
    use bollard::models::ContainerStateStatusEnum as S;
    st.running != Some(true) && !matches!(st.status, Some(S::CREATED) | Some(S::RUNNING))
}

/// Removes the container if the run future is dropped or panics before explicit removal.
struct RemovalGuard {
    sandbox: Sandbox,
    name: String,
    armed: bool,
}

impl Drop for RemovalGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let sandbox = self.sandbox.clone();
        let name = self.name.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = sandbox
                    .docker
                    .remove_container(
                        &name,
                        Some(
                            RemoveContainerOptionsBuilder::default()
                                .force(true)
                                .v(true)
                                .build(),
                        ),
                    )
                    .await;
            });
        }
    }
}

/// The hardened container definition: the one place the hardening baseline is written. Every
/// value comes from the server-side spec or the run's identity.
pub fn render(spec: &RuntimeSpec, run: &RunIdentity) -> ContainerCreateBody {
    let labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_CREATION_KEY.to_string(), run.creation_key.clone()),
        (
            LABEL_VERIFICATION_ID.to_string(),
            run.verification_id.clone(),
        ),
        (LABEL_INSTANCE.to_string(), run.instance_id.clone()),
    ]);
    let ulimit = |name: &str, v: i64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(v),
        hard: Some(v),
    };
    let host = HostConfig {
        network_mode: Some("none".into()),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec![
            "no-new-privileges".into(),
            format!("seccomp={}", spec.seccomp_json),
        ]),
        privileged: Some(false),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            format!("rw,exec,nosuid,nodev,size={},mode=1777", spec.tmp_bytes),
        )])),
        mounts: Some(vec![Mount {
            target: Some(spec.working_dir.clone()),
            source: Some(match &run.workspace {
                WorkspaceSource::HostBind(dir) => dir.to_string_lossy().into_owned(),
            }),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        pids_limit: Some(spec.pids),
        memory: Some(spec.memory_bytes),
        memory_swap: Some(spec.memory_bytes),
        nano_cpus: Some(spec.nano_cpus),
        ulimits: Some(vec![
            ulimit("nofile", limits::SANDBOX_NOFILE),
            ulimit("core", 0),
            ulimit("fsize", limits::SANDBOX_MAX_FILE_BYTES),
        ]),
        init: Some(true),
        oom_score_adj: Some(limits::SANDBOX_OOM_SCORE_ADJ),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        ipc_mode: Some("private".into()),
        auto_remove: Some(false),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(spec.image_id.clone()),
        entrypoint: Some(run.argv.clone()),
        cmd: None,
        user: Some(spec.user.clone()),
        working_dir: Some(spec.working_dir.clone()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        hostname: Some("airlock".into()),
        tty: Some(false),
        open_stdin: Some(false),
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        // Not `network_disabled`: it would leave /etc/hosts empty, so `localhost` would not
        // resolve. `network_mode = none` is what isolates the job (loopback only).
        labels: Some(labels),
        host_config: Some(host),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (RuntimeSpec, RunIdentity) {
        (
            RuntimeSpec {
                image_id: "sha256:abc".into(),
                user: "65532:65532".into(),
                working_dir: "/workspace".into(),
                env: BTreeMap::from([("LANG".into(), "C.UTF-8".into())]),
                memory_bytes: 1 << 30,
                nano_cpus: 1_000_000_000,
                pids: 256,
                tmp_bytes: 1 << 28,
                seccomp_json: "{}".into(),
            },
            RunIdentity {
                creation_key: "k".into(),
                verification_id: "v".into(),
                instance_id: "i".into(),
                argv: vec!["true".into()],
                workspace: WorkspaceSource::HostBind(PathBuf::from("/data/checkouts/k/mnt/tree")),
            },
        )
    }

    /// Every leaf the renderer sets, as a JSON path (`a.b[].c`).
    fn leaves(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(x, &p, out);
                }
            }
            serde_json::Value::Array(a) if a.iter().any(|x| x.is_object()) => {
                for x in a {
                    leaves(x, &format!("{prefix}[]"), out);
                }
            }
            serde_json::Value::Null => {}
            _ => out.push(prefix.to_string()),
        }
    }

    #[test]
    fn every_field_the_renderer_sets_is_hashed_except_the_per_run_ones() {
        let (spec, run) = sample();
        let rendered = serde_json::to_value(render(&spec, &run)).unwrap();
        let mut set = Vec::new();
        leaves(&rendered, "", &mut set);
        let mut hashed = Vec::new();
        leaves(&hashed_form(&spec), "", &mut hashed);
        let per_run = |p: &str| {
            PER_RUN_FIELDS
                .iter()
                .any(|f| p == *f || p.starts_with(&format!("{f}.")))
        };
        for p in &set {
            assert_eq!(
                hashed.contains(p),
                !per_run(p),
                "{p}: hashed {} but per-run {}",
                hashed.contains(p),
                per_run(p)
            );
        }
        // The hardening flags that were once applied without being hashed are in it now.
        for p in [
            "HostConfig.IpcMode",
            "HostConfig.Privileged",
            "HostConfig.NetworkMode",
            "HostConfig.SecurityOpt",
            "HostConfig.CapDrop",
            "HostConfig.ReadonlyRootfs",
            "HostConfig.Mounts[].Target",
            "HostConfig.Ulimits[].Hard",
        ] {
            assert!(
                hashed.contains(&p.to_string()),
                "{p} missing from {hashed:?}"
            );
        }
    }

    #[test]
    fn the_hashed_form_ignores_the_run_and_follows_the_spec() {
        let (spec, _) = sample();
        let a = hashed_form(&spec);
        let mut other = spec.clone();
        other.pids += 1;
        assert_ne!(a, hashed_form(&other));
        let mut other = spec.clone();
        other.seccomp_json = "{\"x\":1}".into();
        assert_ne!(a, hashed_form(&other));
    }
}
