//! The Docker Engine backend of the runtime seam: the only module that names bollard.
//!
//! One job = one container, created with the hardening baseline, attached before start, drained
//! with a bounded capture, killed at the deadline or on cancellation, and always destroyed
//! (explicit removal confirmed by listing by label, plus a guard for panics and dropped futures).
//! volumes.rs: an engine's own workspace volumes (for engines sharing no filesystem with
//! Airlock); images.rs: image builds and transfers; render.rs: the hardening spec as Docker's
//! create body; ping.rs: the API version of a local socket.

pub mod images;
mod ping;
pub mod render;
pub mod tarball;
pub mod transport;
pub mod volumes;

use super::capture::OutputCapture;
use super::runtime::BoxFuture;
use super::{
    ContainerRuntime, ContainerSpec, EngineFacts, EngineVolumes, JobEnd, JobOutcome,
    LABEL_CREATION_KEY, LABEL_INSTANCE, LABEL_MANAGED, ManagedContainer, Phase, PhaseHook,
    RuntimeSpec, SandboxError, container_name, matching_workspace, spec,
};
use crate::limits;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, EventsOptionsBuilder,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Default Docker socket when `DOCKER_HOST` is unset.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// A Docker error as the seam's: a timed-out call is the engine not answering.
pub(crate) fn docker_err(op: &'static str) -> impl FnOnce(DockerError) -> SandboxError {
    move |source| match source {
        DockerError::RequestTimeoutError => SandboxError::Unresponsive {
            op,
            seconds: limits::ENGINE_CALL_TIMEOUT_SECS,
        },
        source => SandboxError::Engine {
            engine: "docker",
            op,
            message: source.to_string(),
        },
    }
}

fn is_status(e: &DockerError, codes: &[u16]) -> bool {
    matches!(e, DockerError::DockerResponseServerError { status_code, .. } if codes.contains(status_code))
}

/// The Docker-backed runtime (a local socket, or a `[[engines]]` entry over TCP with mutual TLS).
#[derive(Clone)]
pub struct DockerRuntime {
    docker: Docker,
    /// What the engine's jobs mount: a host checkout (it shares this host's filesystem) or a
    /// volume it holds (a `tcp://` engine).
    workspace_kind: spec::WorkspaceKind,
}

impl DockerRuntime {
    /// Connects to `DOCKER_HOST` when set, else the default socket, and negotiates the API
    /// version down to the engine's. Fails with the endpoint it tried.
    pub async fn connect() -> Result<DockerRuntime, SandboxError> {
        let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        let endpoint = match &host {
            Some(h) => format!("{h} (from DOCKER_HOST)"),
            None => format!("unix://{DEFAULT_DOCKER_SOCKET} (DOCKER_HOST is unset)"),
        };
        let unreachable = |message: String| SandboxError::Unreachable {
            endpoint: endpoint.clone(),
            message,
        };
        let socket = match &host {
            None => Some(DEFAULT_DOCKER_SOCKET),
            Some(h) => h.strip_prefix("unix://"),
        };
        if let Some(socket) = socket {
            // A local socket: the API version from `/_ping`'s header (under a millisecond),
            // where bollard's negotiation asks `/version` (10-16 ms here: the engine asks
            // containerd and runc for theirs), which every one-shot `airlock run` paid.
            let version = negotiation(&endpoint, ping::api_version(socket)).await?;
            let docker =
                Docker::connect_with_socket(socket, limits::ENGINE_CALL_TIMEOUT_SECS, &version)
                    .map_err(|e| unreachable(e.to_string()))?;
            return Ok(DockerRuntime {
                docker,
                workspace_kind: spec::WorkspaceKind::HostBind,
            });
        }
        let docker = Docker::connect_with_defaults()
            .map_err(|e| unreachable(e.to_string()))?
            .with_timeout(limits::ENGINE_CALL_TIMEOUT);
        Self::negotiated(docker, spec::WorkspaceKind::HostBind, &endpoint).await
    }

    /// Connects to one `[[engines]]` entry: its socket, or TCP with mutual TLS (plaintext only
    /// where the configuration allowed it, on loopback); its jobs take workspaces of `kind`.
    pub async fn connect_engine(
        e: &crate::config::engines::EngineConfig,
        kind: spec::WorkspaceKind,
    ) -> Result<DockerRuntime, SandboxError> {
        let (sandbox, down) = Self::reach_engine(e, kind).await?;
        match down {
            None => Ok(sandbox),
            Some(message) => Err(SandboxError::Unreachable {
                endpoint: format!("{} (engine {:?})", e.host, e.name),
                message,
            }),
        }
    }

    /// Like [`DockerRuntime::connect_engine`], but an engine that does not answer yet is still
    /// returned (on the client's own API version) with the reason, so a pool can take it out
    /// of placement and probe it later. Only a configuration the client cannot use (a
    /// certificate file that does not load) is an error.
    pub async fn reach_engine(
        e: &crate::config::engines::EngineConfig,
        kind: spec::WorkspaceKind,
    ) -> Result<(DockerRuntime, Option<String>), SandboxError> {
        let endpoint = format!("{} (engine {:?})", e.host, e.name);
        let unreachable = |message: String| SandboxError::Unreachable {
            endpoint: endpoint.clone(),
            message,
        };
        let mut steps = super::steps::Steps::start("reach engine");
        let docker = transport::client(e).map_err(unreachable)?;
        steps.mark("client");
        let negotiated = Self::negotiated(docker.clone(), kind, &endpoint).await;
        steps.mark("negotiate");
        steps.log(&e.name);
        match negotiated {
            Ok(s) => Ok((s, None)),
            Err(SandboxError::Unreachable { message, .. }) => Ok((
                DockerRuntime {
                    docker,
                    workspace_kind: kind,
                },
                Some(message),
            )),
            Err(other) => Err(other),
        }
    }

    async fn negotiated(
        docker: Docker,
        workspace_kind: spec::WorkspaceKind,
        endpoint: &str,
    ) -> Result<DockerRuntime, SandboxError> {
        let docker = negotiation(endpoint, docker.negotiate_version()).await?;
        Ok(DockerRuntime {
            docker,
            workspace_kind,
        })
    }

    pub(crate) fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The client for a transfer (an upload, an image build or load), whose body is sent
    /// before the engine answers: bounded by [`limits::DOCKER_TRANSFER_TIMEOUT_SECS`].
    pub(crate) fn transfers(&self) -> Docker {
        self.docker
            .clone()
            .with_timeout(Duration::from_secs(limits::DOCKER_TRANSFER_TIMEOUT_SECS))
    }

    /// What the engine says about itself: (version, API version, cgroup version, cgroup
    /// driver), for `airlock doctor`.
    pub async fn engine_facts(&self) -> Result<EngineFacts, SandboxError> {
        // Two independent questions, asked at once (each takes the engine several ms).
        let (v, i) = tokio::join!(self.docker.version(), self.docker.info());
        let v = v.map_err(|source| docker_err("version")(source))?;
        let i = i.map_err(|source| docker_err("info")(source))?;
        Ok(EngineFacts {
            version: v.version.unwrap_or_default(),
            api_version: v.api_version.unwrap_or_default(),
            client_api_version: self.docker.client_version().to_string(),
            cgroup_version: i.cgroup_version.map(|c| c.to_string()).unwrap_or_default(),
            cgroup_driver: i.cgroup_driver.map(|c| c.to_string()).unwrap_or_default(),
            runtimes: {
                let mut r: Vec<_> = i
                    .runtimes
                    .unwrap_or_default()
                    .keys()
                    .filter_map(|name| crate::domain::isolation::Isolation::parse(name))
                    .collect();
                r.sort();
                r
            },
        })
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
            Err(e) => Err(docker_err("inspect image")(e)),
        }
    }

    /// Runs one job to its end and destroys its container. `phase` is called as the job moves
    /// on; `cancel` flipping to `true` kills the job (outcome `Cancelled`).
    pub async fn run(
        &self,
        spec: &ContainerSpec,
        timeout: Duration,
        phase: &mut PhaseHook<'_>,
        cancel: watch::Receiver<bool>,
        start_when: super::runtime::StartWhen<'_>,
    ) -> Result<JobOutcome, SandboxError> {
        matching_workspace(self.workspace_kind, &spec.run.workspace)?;
        if let super::WorkspaceSource::Scratch { name, .. } = &spec.run.workspace {
            return Err(SandboxError::Runtime(format!(
                "workspace {name:?}: a Docker engine's volumes outlive their container, so its jobs take uploaded volumes, never scratch space"
            )));
        }
        let name = spec.name();
        let mut guard = RemovalGuard {
            sandbox: self.clone(),
            name: name.clone(),
            armed: true,
        };
        let mut created = None;
        let result = self
            .run_inner(spec, timeout, phase, cancel, start_when, &mut created)
            .await;
        // An engine that stopped answering is asked nothing more for this job: the guard's
        // removal runs in the background, and recovery removes what it leaves once the engine
        // answers again.
        if let Err(e) = &result
            && e.is_unresponsive()
        {
            return result;
        }
        let removed = self
            .destroy(Some(&name), &spec.run.creation_key, None)
            .await;
        guard.armed = false;
        // runsc leaves its sandbox running when it refuses to start one: ended by the
        // container's id once the engine no longer has the container (on this host only).
        if let Some(id) = &created
            && removed.is_ok()
            && spec.runtime.isolation == crate::domain::isolation::Isolation::Runsc
        {
            self.end_leftovers(id);
        }
        let outcome = result?;
        removed?;
        let _ = phase(Phase::Destroyed);
        Ok(outcome)
    }

    async fn run_inner(
        &self,
        spec: &ContainerSpec,
        timeout: Duration,
        phase: &mut PhaseHook<'_>,
        mut cancel: watch::Receiver<bool>,
        start_when: super::runtime::StartWhen<'_>,
        created_id: &mut Option<String>,
    ) -> Result<JobOutcome, SandboxError> {
        let name = spec.name();
        phase(Phase::Creating).map_err(|reason| SandboxError::Refused {
            step: "container creation",
            reason,
        })?;
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                render::render(&spec.runtime, &spec.run),
            )
            .await
            .map_err(docker_err("create container"))?;
        let id = created.id;
        *created_id = Some(id.clone());
        let _ = phase(Phase::Created {
            container_id: id.clone(),
        });
        // Created; started only once the caller's workspace is ready (or never).
        let refused = |reason| SandboxError::Refused {
            step: "container start",
            reason,
        };
        tokio::select! {
            ready = start_when => ready.map_err(refused)?,
            _ = crate::cancel::requested(&mut cancel) => return Err(refused("cancelled before the start".into())),
        }
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

        phase(Phase::Starting).map_err(|reason| SandboxError::Refused {
            step: "container start",
            reason,
        })?;
        self.docker
            .start_container(&id, None)
            .await
            .map_err(docker_err("start container"))?;
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let _ = phase(Phase::Started);

        let mut capture = OutputCapture::tapped(spec.run.output.clone());
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
                _ = crate::cancel::requested(&mut cancel) => { end = Some(JobEnd::Cancelled); break; }
            }
        }
        drop(output);
        // Output closed: wait for the exit itself. The wait request may have reached the engine
        // after a very fast exit, so the state is also polled.
        let mut exit_code: Option<i64> = None;
        // An inspection that found the container exited is its final state: kept for below.
        let mut exited: Option<bollard::models::ContainerInspectResponse> = None;
        if end.is_none() {
            let mut tick = tokio::time::interval(limits::EXIT_POLL_INTERVAL);
            loop {
                tokio::select! {
                    code = &mut wait_rx => { exit_code = code.ok().flatten(); break; }
                    _ = tick.tick() => {
                        let info = self.docker.inspect_container(&id, None).await
                            .map_err(docker_err("inspect container"))?;
                        if let Some(st) = info.state.as_ref().filter(|st| has_exited(st)) {
                            exit_code = st.exit_code;
                            exited = Some(info);
                            break;
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => { end = Some(JobEnd::TimedOut); break; }
                    _ = crate::cancel::requested(&mut cancel) => { end = Some(JobEnd::Cancelled); break; }
                }
            }
        }
        let duration = started.elapsed();
        wait_task.abort();
        // The image the container used comes from the inspection after its end, which the exit
        // code needs anyway: one round trip fewer than asking at creation.
        let (end, observed_image) = match end {
            Some(e) => {
                // Airlock's clock: the engine has a short while to confirm the kill, however
                // long its calls may otherwise take.
                tokio::time::timeout(limits::ENGINE_KILL_TIMEOUT, self.kill(&id))
                    .await
                    .map_err(|_| SandboxError::Unresponsive {
                        op: "kill container",
                        seconds: limits::ENGINE_KILL_TIMEOUT.as_secs(),
                    })??;
                let image = self
                    .docker
                    .inspect_container(&id, None)
                    .await
                    .map_err(docker_err("inspect container"))?
                    .image
                    .unwrap_or_default();
                (e, image)
            }
            None => {
                let info = match exited {
                    Some(info) => info,
                    None => self
                        .docker
                        .inspect_container(&id, None)
                        .await
                        .map_err(docker_err("inspect container"))?,
                };
                let st = info.state.unwrap_or_default();
                let code = exit_code.or(st.exit_code).unwrap_or(-1);
                // Give the event stream a moment: the engine emits "oom" around the exit.
                if !st.oom_killed.unwrap_or(false) && code != 0 {
                    tokio::time::sleep(limits::OOM_EVENT_GRACE).await;
                }
                let oom_killed = st.oom_killed.unwrap_or(false) || oom_seen.load(Ordering::SeqCst);
                (
                    JobEnd::Exited { code, oom_killed },
                    info.image.unwrap_or_default(),
                )
            }
        };
        oom_task.abort();
        Ok(JobOutcome {
            end,
            output: capture.finish(),
            container_id: id,
            observed_image,
            duration,
            scratch: None,
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
            Err(e) => Err(docker_err("kill container")(e)),
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

    /// The host pid of a running container's first process. Only an engine on this host has
    /// pids Airlock can use; another's are refused.
    pub async fn container_pid(&self, id: &str) -> Result<u32, SandboxError> {
        if self.workspace_kind == spec::WorkspaceKind::Volume {
            return Err(SandboxError::Runtime(
                "a remote engine's processes are not on this host".into(),
            ));
        }
        let info = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(docker_err("inspect container"))?;
        match info.state.and_then(|s| s.pid) {
            Some(pid) if pid > 0 => Ok(pid as u32),
            _ => Err(SandboxError::Runtime(format!(
                "container {id} has no running process"
            ))),
        }
    }

    /// Containers labelled with a creation key.
    pub async fn list_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Vec<ManagedContainer>, SandboxError> {
        self.list_by_label(&[format!("{LABEL_CREATION_KEY}={key}")])
            .await
    }

    /// Ends the processes a runtime left on this host for the removed container `id` (see
    /// [`crate::process::leftovers`]): only on an engine that shares this host (its jobs' trees
    /// are bind-mounted from it), since another host's processes are not this one's to end.
    fn end_leftovers(&self, id: &str) {
        if self.workspace_kind == spec::WorkspaceKind::HostBind {
            let ended =
                crate::process::leftovers::end_runtime_leftovers(std::path::Path::new("/proc"), id);
            if !ended.is_empty() {
                tracing::warn!(container_id = id, pids = ?ended, "ended runtime processes left for a removed container");
            }
        }
    }

    /// Force-removes every container labelled with `creation_key` (and, given `owner`, also
    /// labelled with that data dir instance), then confirms by listing that none remains.
    /// Returns how many were removed.
    ///
    /// Given `name` (a job this process created), the named container is removed first and the
    /// listing then confirms and finds any other (two engine calls when there is just the
    /// one, the common case); containers the listing finds that were not tried yet are
    /// removed at once, ones already tried after a delay. Recovery gives `owner` and no name:
    /// a container is removed only when its labels say it is that instance's.
    pub async fn destroy(
        &self,
        name: Option<&str>,
        creation_key: &str,
        owner: Option<&str>,
    ) -> Result<usize, SandboxError> {
        let mut removed = 0;
        let mut last_error = String::new();
        let mut tried: std::collections::HashSet<String> = Default::default();
        let mut labels = vec![format!("{LABEL_CREATION_KEY}={creation_key}")];
        if let Some(owner) = owner {
            labels.push(format!("{LABEL_INSTANCE}={owner}"));
        }
        let mut targets: Vec<String> = match name {
            Some(name) => vec![name.to_string()],
            None => self
                .list_by_label(&labels)
                .await?
                .into_iter()
                .map(|c| c.id)
                .collect(),
        };
        let mut attempt = 0;
        while attempt < limits::CONTAINER_REMOVE_ATTEMPTS {
            for t in &targets {
                tried.insert(t.clone());
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
                    Ok(()) => {
                        removed += 1;
                        // A listed target is an id: what a runtime left for it goes too.
                        if name.is_none() {
                            self.end_leftovers(t);
                        }
                    }
                    Err(DockerError::RequestTimeoutError) => {
                        return Err(docker_err("remove container")(
                            DockerError::RequestTimeoutError,
                        ));
                    }
                    Err(e) if is_status(&e, &[404]) => {}
                    // 409: removal already in progress; confirmed by the listing below.
                    Err(e) if is_status(&e, &[409]) => last_error = e.to_string(),
                    Err(e) => last_error = e.to_string(),
                }
            }
            targets = self
                .list_by_label(&labels)
                .await?
                .into_iter()
                .map(|c| c.id)
                .collect();
            if targets.is_empty() {
                return Ok(removed);
            }
            if targets.iter().all(|t| tried.contains(t)) {
                attempt += 1;
                tokio::time::sleep(limits::CONTAINER_REMOVE_RETRY_DELAY * attempt).await;
            }
        }
        Err(SandboxError::NotRemoved {
            name: name.map_or_else(|| container_name(creation_key), str::to_string),
            attempts: limits::CONTAINER_REMOVE_ATTEMPTS,
            message: last_error,
        })
    }
}

/// The engine's API version as `asked` finds it, within [`limits::DOCKER_NEGOTIATE_TIMEOUT`];
/// either failure is [`SandboxError::Unreachable`] naming `endpoint`.
async fn negotiation<T, E: std::fmt::Display>(
    endpoint: &str,
    asked: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, SandboxError> {
    let unreachable = |message: String| SandboxError::Unreachable {
        endpoint: endpoint.to_string(),
        message,
    };
    tokio::time::timeout(limits::DOCKER_NEGOTIATE_TIMEOUT, asked)
        .await
        .map_err(|_| {
            unreachable(format!(
                "no answer within {} s",
                limits::DOCKER_NEGOTIATE_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| unreachable(e.to_string()))
}

/// True once a started container is no longer running.
fn has_exited(st: &bollard::models::ContainerState) -> bool {
    use bollard::models::ContainerStateStatusEnum as S;
    st.running != Some(true) && !matches!(st.status, Some(S::CREATED) | Some(S::RUNNING))
}

/// Removes the container if the run future is dropped or panics before explicit removal.
struct RemovalGuard {
    sandbox: DockerRuntime,
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

impl ContainerRuntime for DockerRuntime {
    fn environment_form(&self, spec: &RuntimeSpec) -> serde_json::Value {
        render::hashed_form_for(spec, self.workspace_kind)
    }

    fn volumes(&self, instance_id: &str, seccomp_json: &str) -> Option<Arc<dyn EngineVolumes>> {
        match self.workspace_kind() {
            spec::WorkspaceKind::HostBind => None,
            spec::WorkspaceKind::Volume => Some(Arc::new(volumes::DockerVolumes::new(
                self.clone(),
                instance_id,
                seccomp_json,
            ))),
        }
    }

    fn workspace_kind(&self) -> spec::WorkspaceKind {
        self.workspace_kind
    }

    fn facts(&self) -> BoxFuture<'_, Result<EngineFacts, SandboxError>> {
        Box::pin(DockerRuntime::engine_facts(self))
    }

    fn image_content_sha<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Option<Option<String>>> {
        Box::pin(DockerRuntime::image_content_sha(self, image))
    }

    fn image_id<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<String, SandboxError>> {
        Box::pin(DockerRuntime::image_id(self, image))
    }

    fn run<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        timeout: Duration,
        phase: &'a mut PhaseHook<'a>,
        cancel: watch::Receiver<bool>,
        start_when: super::runtime::StartWhen<'a>,
    ) -> BoxFuture<'a, Result<JobOutcome, SandboxError>> {
        Box::pin(DockerRuntime::run(
            self, spec, timeout, phase, cancel, start_when,
        ))
    }

    fn destroy<'a>(
        &'a self,
        creation_key: &'a str,
        instance_id: &'a str,
    ) -> BoxFuture<'a, Result<usize, SandboxError>> {
        Box::pin(DockerRuntime::destroy(
            self,
            None,
            creation_key,
            Some(instance_id),
        ))
    }

    fn list_managed<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ManagedContainer>, SandboxError>> {
        Box::pin(DockerRuntime::list_managed(self, instance_id))
    }

    fn container_pid<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<u32, SandboxError>> {
        Box::pin(DockerRuntime::container_pid(self, id))
    }
}
