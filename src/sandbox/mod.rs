//! The container runtime seam, engine-neutral: the [`ContainerRuntime`] and [`EngineVolumes`]
//! traits (runtime.rs), the job's spec (spec.rs), bounded output capture, the seccomp profile,
//! the errors and outcomes every backend reports, and the factory from a configuration to a
//! runtime ([`connect`], [`connect_local`], [`reach`]). Backends are modules of their own:
//! [`docker`] (the only module that names bollard) and [`fake`] (scripted, for workflow
//! tests).

pub mod capture;
pub mod docker;
pub mod fake;
pub mod runtime;
pub mod seccomp;
pub mod spec;
pub mod steps;
pub mod volumes;

pub use runtime::{ContainerRuntime, EngineVolumes, Runtime};

/// The image of the container that keeps an engine's workspace volumes mounted (for engines
/// sharing no filesystem with Airlock): built with the profiles' images and checked like them.
pub const HOLDER_IMAGE: &str = "airlock/minimal:latest";
pub use spec::{ContainerSpec, OutputTap, RunIdentity, RuntimeSpec, WorkspaceSource};

use capture::CapturedOutput;
use std::time::Duration;

/// Label present on every container Airlock creates.
pub const LABEL_MANAGED: &str = "airlock.managed";
/// Label carrying the creation key.
pub const LABEL_CREATION_KEY: &str = "airlock.creation_key";
/// Label carrying the verification id.
pub const LABEL_VERIFICATION_ID: &str = "airlock.verification_id";
/// Label carrying the data directory's instance id, so one data dir's recovery never touches
/// another's containers on a shared engine.
pub const LABEL_INSTANCE: &str = "airlock.instance";

/// Errors of the container runtime. Expected outcomes (non-zero exit, timeout, OOM) are not
/// errors: they are [`JobEnd`] values.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot reach the container engine at {endpoint}: {message}")]
    Unreachable { endpoint: String, message: String },
    #[error(
        "image {image} is not in the engine: run `airlock images build` (images are built locally from images/; nothing is pulled)"
    )]
    ImageMissing { image: String },
    /// The engine answered a call with an error: which engine kind, which call, and what it
    /// said.
    #[error("{engine} {op} failed: {message}")]
    Engine {
        engine: &'static str,
        op: &'static str,
        message: String,
    },
    /// The engine did not answer a call within its bound: it hangs (stopped, overloaded, cut
    /// off). Nothing more is asked of it for this job.
    #[error("the engine did not answer {op} within {seconds} s")]
    Unresponsive { op: &'static str, seconds: u64 },
    #[error("container {name} is still present after {attempts} removal attempts: {message}")]
    NotRemoved {
        name: String,
        attempts: u32,
        message: String,
    },
    #[error("image build failed: {0}")]
    Build(String),
    /// The caller's phase hook refused a step (admission): nothing more ran.
    #[error("{step} refused: {reason}")]
    Refused { step: &'static str, reason: String },
    /// The runtime failed in a way no engine call names (the scripted fake, a refused kind of
    /// workspace, a process the engine cannot give).
    #[error("container runtime failed: {0}")]
    Runtime(String),
}

impl SandboxError {
    /// Whether the engine stopped answering (as opposed to answering with an error).
    pub fn is_unresponsive(&self) -> bool {
        matches!(self, SandboxError::Unresponsive { .. })
    }
}

/// What every engine of a configuration's pool mounts: uploaded volumes as soon as one engine
/// shares no filesystem with Airlock (so a job hashes and behaves the same wherever it is
/// placed), else bind-mounted host checkouts.
pub fn pool_workspace_kind(config: &crate::config::Config) -> spec::WorkspaceKind {
    if config.engines.iter().any(|e| e.holds_workspaces()) {
        spec::WorkspaceKind::Volume
    } else {
        spec::WorkspaceKind::HostBind
    }
}

/// A job gets the kind of workspace its engine takes. A local engine's volume was never
/// uploaded into (it would be created empty on first mount, and the job would run on nothing);
/// a remote engine never gets a bind mount (the path is this host's, not the engine's).
pub(crate) fn matching_workspace(
    engine: spec::WorkspaceKind,
    w: &WorkspaceSource,
) -> Result<(), SandboxError> {
    match (engine, w) {
        (spec::WorkspaceKind::HostBind, WorkspaceSource::HostBind(_))
        | (spec::WorkspaceKind::Volume, WorkspaceSource::Volume(_)) => Ok(()),
        (spec::WorkspaceKind::Volume, WorkspaceSource::Scratch { .. }) => Ok(()),
        (spec::WorkspaceKind::HostBind, WorkspaceSource::Volume(v))
        | (spec::WorkspaceKind::HostBind, WorkspaceSource::Scratch { name: v, .. }) => {
            Err(SandboxError::Runtime(format!(
                "workspace volume {v:?}: this engine's jobs take bind-mounted checkouts"
            )))
        }
        (spec::WorkspaceKind::Volume, WorkspaceSource::HostBind(p)) => {
            Err(SandboxError::Runtime(format!(
                "workspace {}: this engine shares no filesystem with Airlock; its jobs take uploaded volumes",
                p.display()
            )))
        }
    }
}

/// The engine's own account of itself (see [`ContainerRuntime::facts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineFacts {
    pub version: String,
    pub api_version: String,
    /// The API version this client negotiated.
    pub client_api_version: String,
    pub cgroup_version: String,
    pub cgroup_driver: String,
    /// The isolation levels the engine offers: the OCI runtimes it registered that Airlock
    /// knows (`runc`, `runsc`), sorted; the names it registered besides are left out.
    pub runtimes: Vec<crate::domain::isolation::Isolation>,
}

/// Deterministic container name for a creation key.
pub fn container_name(creation_key: &str) -> String {
    format!("airlock-{creation_key}")
}

/// Points in a job's life, reported to the caller as they happen (crash-point hooks and the
/// admission seam use them). The hook may refuse `Creating` and `Starting`: the job then ends
/// with [`SandboxError::Refused`] before that step (a created container is still destroyed).
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    Creating,
    Created { container_id: String },
    Starting,
    Started,
    Destroyed,
}

/// The caller's phase hook: `Err(reason)` refuses the step a `Creating` or `Starting` phase
/// announces (the return value of other phases is ignored).
pub type PhaseHook<'a> = dyn FnMut(Phase) -> Result<(), String> + Send + 'a;

pub use crate::domain::verification::JobEnd;

/// The result of one job.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub end: JobEnd,
    pub output: CapturedOutput,
    pub container_id: String,
    pub observed_image: String,
    pub duration: Duration,
    /// A scratch workspace's files as the job left them, read back by the runtime before the
    /// job's resources were removed ([`WorkspaceSource::Scratch`]); `None` for any other.
    pub scratch: Option<volumes::VolumeFiles>,
}

/// A managed container found by listing labels.
#[derive(Debug, Clone)]
pub struct ManagedContainer {
    pub id: String,
    pub creation_key: Option<String>,
}

/// The runtime of this machine's engine: `DOCKER_HOST` when set, else the default socket.
pub async fn connect_local() -> Result<Runtime, SandboxError> {
    Ok(std::sync::Arc::new(docker::DockerRuntime::connect().await?))
}

/// The runtime of one `[[engines]]` entry, answering now; its jobs take workspaces of `kind`.
pub async fn connect(
    e: &crate::config::engines::EngineConfig,
    kind: spec::WorkspaceKind,
) -> Result<Runtime, SandboxError> {
    Ok(std::sync::Arc::new(
        docker::DockerRuntime::connect_engine(e, kind).await?,
    ))
}

/// The runtime of one `[[engines]]` entry even when it does not answer yet (with the reason),
/// so a pool can take it out of placement and probe it later. Only a configuration the client
/// cannot use (a certificate file that does not load) is an error.
pub async fn reach(
    e: &crate::config::engines::EngineConfig,
    kind: spec::WorkspaceKind,
) -> Result<(Runtime, Option<String>), SandboxError> {
    let (r, down) = docker::DockerRuntime::reach_engine(e, kind).await?;
    Ok((std::sync::Arc::new(r), down))
}

/// The configuration's first engine (reached, it may not answer yet), or this machine's when
/// none is configured: what one-shot commands run on.
pub async fn connect_configured(config: &crate::config::Config) -> Result<Runtime, SandboxError> {
    match config.engines.first() {
        None => connect_local().await,
        Some(e) => Ok(reach(e, pool_workspace_kind(config)).await?.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_takes_only_its_own_kind_of_workspace() {
        use spec::WorkspaceKind::{HostBind, Volume};
        let bind = WorkspaceSource::HostBind("/data/checkouts/k".into());
        let vol = WorkspaceSource::Volume("never-uploaded".into());
        assert!(matching_workspace(HostBind, &bind).is_ok());
        assert!(matching_workspace(Volume, &vol).is_ok());
        let e = matching_workspace(HostBind, &vol).unwrap_err();
        assert!(e.to_string().contains("\"never-uploaded\""), "{e}");
        let e = matching_workspace(Volume, &bind).unwrap_err();
        assert!(e.to_string().contains("shares no filesystem"), "{e}");
        let scratch = WorkspaceSource::Scratch {
            name: "job".into(),
            files: spec::ScratchFiles(Default::default()),
        };
        assert!(matching_workspace(Volume, &scratch).is_ok());
        let e = matching_workspace(HostBind, &scratch).unwrap_err();
        assert!(e.to_string().contains("\"job\""), "{e}");
    }
}
