//! The container runtime seam: the surface the engine uses to run jobs and recover from
//! crashes. [`super::docker::DockerRuntime`] implements it on real Docker;
//! [`super::fake::FakeRuntime`] is a
//! scripted stand-in for workflow tests (assembly, authorization, idempotency, expiry,
//! delivery), never for sandbox limits, container lifecycle or recovery, which are proven on
//! Docker.

pub use super::volumes::{
    DEPS_VOLUME_PREFIX, VolumeFile, VolumeFiles, VolumeSpec, deps_volume_name, files_of,
};
use super::{
    ContainerSpec, EngineFacts, JobOutcome, ManagedContainer, PhaseHook, RuntimeSpec, SandboxError,
    spec::WorkspaceKind,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A boxed future, so the trait can be used as `dyn ContainerRuntime`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tree still being read for an upload: `None` when its reader failed (the reader keeps
/// the reason).
pub type FilesSource<'a> = BoxFuture<'a, Option<Arc<VolumeFiles>>>;

/// A tree already read, as an upload's source.
pub fn ready<'a>(files: VolumeFiles) -> FilesSource<'a> {
    Box::pin(std::future::ready(Some(Arc::new(files))))
}

/// What a job's start waits for once its container is created: `Ok` when it may start (its
/// workspace staged and checked just now), `Err(reason)` when it must not (the job then ends
/// with [`SandboxError::Refused`] for the container's start, and the container is destroyed).
pub type StartWhen<'a> = BoxFuture<'a, Result<(), String>>;

/// A start that waits for nothing: the workspace was ready before the container was created.
pub fn start_now<'a>() -> StartWhen<'a> {
    Box::pin(std::future::ready(Ok(())))
}

/// Runs hardened jobs and finds what is left of them after a crash.
pub trait ContainerRuntime: Send + Sync {
    /// The resolved environment as this engine renders it, minus everything that belongs to
    /// one run: what `environment_sha256` hashes, so two runs agree on the hash exactly when
    /// this engine would run them alike. [`RuntimeSpec`] is the engine-neutral description;
    /// the hardening each engine adds to it is part of its rendering.
    fn environment_form(&self, spec: &RuntimeSpec) -> serde_json::Value;

    /// The volumes this engine holds jobs' workspaces in, when it shares no filesystem with
    /// Airlock (owned by the data dir's `instance_id`; holders confined by `seccomp_json`);
    /// `None` when its jobs take bind-mounted host checkouts.
    fn volumes(&self, instance_id: &str, seccomp_json: &str) -> Option<Arc<dyn EngineVolumes>>;

    /// What this engine's jobs mount: a host checkout (it shares this host's filesystem) or
    /// a volume it holds.
    fn workspace_kind(&self) -> WorkspaceKind;

    /// What the engine says about itself (version, API version, cgroups), for `airlock doctor`.
    fn facts(&self) -> BoxFuture<'_, Result<EngineFacts, SandboxError>>;

    /// The id of an image reference, or [`SandboxError::ImageMissing`].
    fn image_id<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<String, SandboxError>>;

    /// The `airlock.content_sha256` label of an image (the digest of the build context it was
    /// built from): `None` when there is no such image, `Some(None)` when it has no label.
    fn image_content_sha<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Option<Option<String>>>;

    /// Runs one job to its end and destroys its container, in two steps: the container is
    /// created, then started once `start_when` allows it (so a caller can create it while the
    /// workspace it mounts is still being staged). `phase` is called as the job moves on and
    /// may refuse creation or start; `cancel` flipping to `true` ends it as cancelled (before
    /// the start: refused, as the start is).
    fn run<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        timeout: Duration,
        phase: &'a mut PhaseHook<'a>,
        cancel: watch::Receiver<bool>,
        start_when: StartWhen<'a>,
    ) -> BoxFuture<'a, Result<JobOutcome, SandboxError>>;

    /// Removes every container of a creation key that belongs to data dir instance
    /// `instance_id` (its labels say so: another instance's container with the same key, the
    /// original of a restored copy's, is never touched) and confirms none remains; returns how
    /// many.
    fn destroy<'a>(
        &'a self,
        creation_key: &'a str,
        instance_id: &'a str,
    ) -> BoxFuture<'a, Result<usize, SandboxError>>;

    /// The host pid of a running container's first process (its namespaces are that
    /// process's); engines that share no host with Airlock have none to give.
    fn container_pid<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<u32, SandboxError>>;

    /// The containers of one data dir's instance.
    fn list_managed<'a>(
        &'a self,
        instance_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ManagedContainer>, SandboxError>>;
}

/// The runtime as the engine holds it.
pub type Runtime = Arc<dyn ContainerRuntime>;

/// How long an engine's workspace volume lives, which decides when its tree goes in and comes
/// back out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeLifetime {
    /// A named volume that outlives its container (Docker's): [`EngineVolumes::upload`] fills it
    /// before the run, the container mounts it by name ([`super::WorkspaceSource::Volume`]),
    /// and [`EngineVolumes::download`] reads it back after the container is destroyed.
    OutlivesContainer,
    /// Scratch space that dies with the job (a Kubernetes `emptyDir`): nothing is uploaded
    /// ahead. The job's spec carries the tree ([`super::WorkspaceSource::Scratch`]); the
    /// runtime fills the scratch as the job starts (an init step) and hands its files back in
    /// [`super::JobOutcome::scratch`] before the job's resources are removed. The workspace
    /// backend judges and harvests those files; there is nothing to delete afterwards.
    DiesWithJob,
}

/// Workspaces an engine holds itself, as named volumes its containers mount: what an uploading
/// workspace backend ([`crate::workspace::uploads`]) writes a job's tree into before the run
/// and reads back after it, for an engine that does not share this host's filesystem. The
/// scripted fake holds them in memory ([`super::fake::FakeVolumes`]); the local Docker engine
/// does not need them (its jobs' checkouts are bind-mounted).
pub trait EngineVolumes: Send + Sync {
    /// How long this engine's workspace volumes live; by default they outlive their
    /// container (filled before the run, read back after it).
    fn lifetime(&self) -> VolumeLifetime {
        VolumeLifetime::OutlivesContainer
    }

    /// Creates volume `name` as `spec` says, holding the tree `files` resolves to; refused
    /// when it already exists. The volume (and whatever keeps it) is made while `files` is
    /// still being read; when `files` resolves to `None` (its reader failed, and keeps the
    /// reason) whatever was made is removed and the answer is `Ok(false)`. It answers `Ok`
    /// only once `files` has resolved.
    fn upload<'a>(
        &'a self,
        name: &'a str,
        spec: &'a VolumeSpec,
        files: FilesSource<'a>,
    ) -> BoxFuture<'a, Result<bool, SandboxError>>;

    /// Every file of volume `name`, or `None` when there is no such volume.
    fn download<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<VolumeFiles>, SandboxError>>;

    /// Removes every file beneath `dir` of volume `name`.
    fn remove_dir<'a>(
        &'a self,
        name: &'a str,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<(), SandboxError>>;

    /// Deletes volume `name`; `false` when there was none.
    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, SandboxError>>;

    /// The names of every volume held.
    fn names<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, SandboxError>>;

    /// Makes volume `name` hold exactly the tree at host directory `dir` (a dependency set),
    /// for jobs to mount read-only: filled once per process, then reused; `true` when this
    /// call filled it. Such volumes are not workspaces: [`EngineVolumes::names`] never lists
    /// them.
    fn ensure_readonly<'a>(
        &'a self,
        name: &'a str,
        dir: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<bool, SandboxError>>;

    /// Removes this instance's dependency-set volumes not named in `keep` and not mounted by
    /// a container, and what an interrupted fill left; returns the volumes removed.
    fn prune_readonly<'a>(
        &'a self,
        keep: &'a std::collections::BTreeSet<String>,
    ) -> BoxFuture<'a, Result<Vec<String>, SandboxError>>;
}
