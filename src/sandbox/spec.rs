//! The one hardening spec, engine-neutral: what a job container is made of ([`RuntimeSpec`],
//! decided by the environment; [`RunIdentity`], per run) and where its workspace comes from.
//! Each backend renders it (Docker: [`super::docker::render`]); the rendering without the
//! per-run fields is what `environment_sha256` hashes ([`super::ContainerRuntime::environment_form`]).

use super::container_name;
use super::volumes::VolumeFiles;
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    /// The checkout is mounted read-only (a dependency fetch reads it and writes only its set).
    pub workspace_read_only: bool,
    /// A dependency set mounted at [`crate::deps::spec::DEPS_DIR`]: read-only for a job,
    /// read-write for the fetch that fills it (its source is the run's [`RunIdentity::deps`]).
    pub deps: Option<DepsMount>,
    /// The OCI runtime the container runs under (the profile's isolation level).
    pub isolation: crate::domain::isolation::Isolation,
}

/// How a dependency set is mounted (see [`RuntimeSpec::deps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepsMount {
    pub read_only: bool,
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
    /// Where the dependency set comes from (a read-only host mount or an engine's volume), when
    /// the spec mounts one.
    pub deps: Option<WorkspaceSource>,
    /// Where the output goes as it arrives (a live log), besides the bounded capture.
    pub output: Option<OutputTap>,
}

/// A receiver of a job's output as it arrives: called with each chunk, in order, from the
/// task draining the container's output. It must never block (a live log hands chunks to
/// its followers without waiting for them).
#[derive(Clone)]
pub struct OutputTap(pub std::sync::Arc<TapFn>);

/// What an [`OutputTap`] calls.
pub type TapFn = dyn Fn(&[u8]) + Send + Sync;

impl std::fmt::Debug for OutputTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputTap")
    }
}

/// How a job's checkout reaches its container: bind-mounted from this host, a volume the engine
/// holds (uploaded before the run), or scratch space the runtime fills as the job starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceSource {
    /// A host directory bind-mounted into the container.
    HostBind(PathBuf),
    /// A volume the engine holds, already filled by an uploading workspace backend.
    Volume(String),
    /// Scratch space that dies with the job ([`super::runtime::VolumeLifetime::DiesWithJob`]):
    /// the runtime fills it with `files` as the job starts and hands its files back in
    /// [`super::JobOutcome::scratch`].
    Scratch { name: String, files: ScratchFiles },
}

/// The tree a scratch workspace starts with (shared, never copied per clone; its `Debug` says
/// how many files, not what they hold).
#[derive(Clone, PartialEq, Eq)]
pub struct ScratchFiles(pub std::sync::Arc<VolumeFiles>);

impl std::fmt::Debug for ScratchFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScratchFiles({} files)", self.0.len())
    }
}

/// Which kind of workspace an engine's jobs get (part of what `environment_sha256` names; the
/// engine's own name never is, so the same job on two engines of a kind hashes the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceKind {
    HostBind,
    Volume,
}

impl WorkspaceSource {
    pub fn kind(&self) -> WorkspaceKind {
        match self {
            WorkspaceSource::HostBind(_) => WorkspaceKind::HostBind,
            // The job sees the same quota'd volume however long it lives.
            WorkspaceSource::Volume(_) | WorkspaceSource::Scratch { .. } => WorkspaceKind::Volume,
        }
    }
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
