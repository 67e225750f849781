//! Workspaces held by a Docker engine that shares no filesystem with Airlock: each job's tree
//! lives in a local-driver `tmpfs` volume with a hard size and inode quota, owned by the
//! sandbox user.
//!
//! A `tmpfs` volume's content lives only while it is mounted (every mount is a fresh tmpfs),
//! so an archive written into a created, not yet started container would be gone when it
//! starts, and a job's tree would be gone once its container exits. A *holder* container
//! therefore keeps the volume mounted from upload to removal: the tree is written into it
//! through the archive API before the job starts, the job's container mounts the same
//! (already mounted) volume, and after the job's container is destroyed the tree is read back
//! from the holder as a tar stream. The holder is hardened like a job (no network, read-only
//! root, no capabilities, no-new-privileges, the same seccomp profile, non-root, tiny pids and
//! memory limits) and only sleeps; it carries its own labels, so it is never taken for a job.
//!
//! The trade-off: a tmpfs volume's bytes are the engine host's memory, counted against no
//! container. An engine host that can spare a block device can use a loop-mounted ext4 volume
//! instead (`type=ext4`, `device=<image>`), whose content survives unmounting; not built yet.

use super::{DockerRuntime, docker_err, is_status, tarball};
use crate::limits;
use crate::sandbox::SandboxError;
use crate::sandbox::runtime::{
    BoxFuture, EngineVolumes, FilesSource, VolumeFile, VolumeFiles, VolumeSpec,
};
use crate::sandbox::steps::Steps;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder, ListVolumesOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::io::Write;

pub use crate::sandbox::HOLDER_IMAGE;
/// Where the holder mounts the volume.
const HOLDER_MOUNT: &str = "/w";
/// Label naming the creation key a holder and its volume belong to.
pub const LABEL_HOLDER: &str = "airlock.holder";
/// Label naming the data dir's instance that owns a holder and its volume.
pub const LABEL_HOLDER_INSTANCE: &str = "airlock.holder_instance";
/// Bytes a read-back may carry beyond the volume's quota: tar headers (512 bytes per entry and
/// per long name) and padding.
const READBACK_OVERHEAD_PER_ENTRY: u64 = 2048;
/// Most processes in a holder (its sleep, and the `rm` that clears a harvested directory).
const HOLDER_PIDS: i64 = 8;
/// A holder's memory limit.
const HOLDER_MEMORY_BYTES: i64 = 32 << 20;

/// Label naming the instance whose dependency-set volume (or set filler container) this is
/// (never a workspace's).
pub const LABEL_DEPS_INSTANCE: &str = "airlock.deps_instance";

/// The volumes of one engine that one data dir's instance owns.
#[derive(Clone)]
pub struct DockerVolumes {
    sandbox: DockerRuntime,
    instance_id: String,
    seccomp_json: String,
    /// Dependency-set volumes this process filled (reused as they are).
    filled: std::sync::Arc<tokio::sync::Mutex<std::collections::BTreeSet<String>>>,
}

impl DockerVolumes {
    pub fn new(sandbox: DockerRuntime, instance_id: &str, seccomp_json: &str) -> DockerVolumes {
        DockerVolumes {
            sandbox,
            instance_id: instance_id.to_string(),
            seccomp_json: seccomp_json.to_string(),
            filled: Default::default(),
        }
    }

    fn holder(name: &str) -> String {
        format!("airlock-hold-{name}")
    }

    fn labels(&self, name: &str) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_HOLDER.to_string(), name.to_string()),
            (LABEL_HOLDER_INSTANCE.to_string(), self.instance_id.clone()),
        ])
    }

    async fn exists(&self, name: &str) -> Result<bool, SandboxError> {
        match self.sandbox.docker().inspect_volume(name).await {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, &[404]) => Ok(false),
            Err(e) => Err(docker_err("inspect volume")(e)),
        }
    }

    /// A helper container of Airlock's own image mounting `volume` read-write at
    /// [`HOLDER_MOUNT`], hardened like a job (no network, no capabilities, no new privileges,
    /// the seccomp profile, read-only root, tiny pids and memory limits).
    fn helper_body(
        &self,
        volume: &str,
        cmd: Vec<String>,
        user: Option<String>,
        labels: HashMap<String, String>,
    ) -> ContainerCreateBody {
        ContainerCreateBody {
            image: Some(HOLDER_IMAGE.to_string()),
            cmd: Some(cmd),
            user,
            labels: Some(labels),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec![
                    "no-new-privileges".into(),
                    format!("seccomp={}", self.seccomp_json),
                ]),
                readonly_rootfs: Some(true),
                pids_limit: Some(HOLDER_PIDS),
                memory: Some(HOLDER_MEMORY_BYTES),
                memory_swap: Some(HOLDER_MEMORY_BYTES),
                mounts: Some(vec![Mount {
                    target: Some(HOLDER_MOUNT.into()),
                    source: Some(volume.to_string()),
                    typ: Some(MountType::VOLUME),
                    read_only: Some(false),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn start_holder(&self, name: &str, spec: &VolumeSpec) -> Result<(), SandboxError> {
        let docker = self.sandbox.docker();
        let body = self.helper_body(
            name,
            vec!["sleep".into(), "2147483647".into()],
            Some(format!("{}:{}", spec.uid, spec.gid)),
            self.labels(name),
        );
        let holder = Self::holder(name);
        docker
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::default()
                        .name(&holder)
                        .build(),
                ),
                body,
            )
            .await
            .map_err(docker_err("create workspace holder"))?;
        docker
            .start_container(&holder, None)
            .await
            .map_err(docker_err("start workspace holder"))
    }

    /// The volume and its holder (made while the caller reads the tree), then the tree,
    /// packed as it is sent: `false` when `files` resolved to nothing (what was made is left
    /// for the caller to delete).
    async fn upload_inner(
        &self,
        name: &str,
        spec: &VolumeSpec,
        files: FilesSource<'_>,
        steps: &mut Steps,
    ) -> Result<bool, SandboxError> {
        let (uid, gid) = (spec.uid, spec.gid);
        let (files, made) = tokio::join!(files, self.make(name, spec));
        steps.mark("volume+holder|read");
        made?;
        let Some(files) = files else {
            return Ok(false);
        };
        let (tx, rx) = tokio::sync::mpsc::channel(tarball::CHUNKS_IN_FLIGHT);
        let packer = tokio::task::spawn_blocking(move || {
            let mut w = tarball::ChunkSender::new(tx);
            match tarball::pack_into(&files, uid, gid, &mut w).and_then(|(w, outward)| {
                w.flush()?;
                Ok(outward)
            }) {
                Ok(outward) => Ok(outward),
                Err(e) => {
                    let kind = e.kind();
                    w.fail(std::io::Error::new(kind, e.to_string()));
                    Err(e)
                }
            }
        });
        let sent = self
            .sandbox
            .transfers()
            .upload_to_container(
                &Self::holder(name),
                Some(
                    UploadToContainerOptionsBuilder::default()
                        .path(HOLDER_MOUNT)
                        .build(),
                ),
                bollard::body_try_stream(tarball::chunk_stream(rx)),
            )
            .await;
        let packed = packer.await.expect("packing a tree does not panic");
        // A packer whose transfer went away failed because of it: the transfer's error says why.
        let outward = match (packed, sent) {
            (Err(e), Ok(())) => return Err(pack_failed(e)),
            (Err(e), Err(_)) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(pack_failed(e));
            }
            (_, Err(e)) => return Err(docker_err("upload workspace")(e)),
            (Ok(outward), Ok(())) => outward,
        };
        steps.mark("pack+upload");
        if !outward.is_empty() {
            self.outward_links(name, &outward).await?;
            steps.mark("outward links");
        }
        Ok(true)
    }

    /// The volume with its quota, and the holder keeping it mounted.
    async fn make(&self, name: &str, spec: &VolumeSpec) -> Result<(), SandboxError> {
        self.sandbox
            .docker()
            .create_volume(VolumeCreateRequest {
                name: Some(name.to_string()),
                driver: Some("local".into()),
                driver_opts: Some(HashMap::from([
                    ("type".to_string(), "tmpfs".to_string()),
                    ("device".to_string(), "tmpfs".to_string()),
                    (
                        "o".to_string(),
                        format!(
                            "size={},nr_inodes={},uid={},gid={},mode=0755",
                            spec.disk_bytes, spec.inodes, spec.uid, spec.gid
                        ),
                    ),
                ])),
                labels: Some(self.labels(name)),
                ..Default::default()
            })
            .await
            .map_err(docker_err("create volume"))?;
        self.start_holder(name, spec).await
    }

    async fn download_inner(&self, name: &str) -> Result<Option<VolumeFiles>, SandboxError> {
        let mut steps = Steps::start("read back workspace");
        let docker = self.sandbox.docker();
        let v = match docker.inspect_volume(name).await {
            Ok(v) => v,
            Err(e) if is_status(&e, &[404]) => return Ok(None),
            Err(e) => return Err(docker_err("inspect volume")(e)),
        };
        steps.mark("inspect");
        let (quota, inodes) = quota_of(&v.options);
        let max = quota.saturating_add(inodes.saturating_mul(READBACK_OVERHEAD_PER_ENTRY));
        let mut stream = docker.download_from_container(
            &Self::holder(name),
            Some(
                DownloadFromContainerOptionsBuilder::default()
                    .path(HOLDER_MOUNT)
                    .build(),
            ),
        );
        // Unpacked as it arrives, on a blocking thread.
        let (tx, rx) = tokio::sync::mpsc::channel(tarball::CHUNKS_IN_FLIGHT);
        let unpacker = tokio::task::spawn_blocking(move || {
            tarball::unpack_from(tarball::ChunkReceiver::new(rx), inodes)
        });
        let mut received = 0u64;
        loop {
            let next = tokio::time::timeout(limits::ENGINE_STREAM_IDLE_TIMEOUT, stream.next())
                .await
                .map_err(|_| SandboxError::Unresponsive {
                    op: "read back workspace",
                    seconds: limits::ENGINE_STREAM_IDLE_TIMEOUT.as_secs(),
                })?;
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(docker_err("read back workspace"))?;
            received += chunk.len() as u64;
            if received > max {
                return Err(SandboxError::Runtime(format!(
                    "volume {name}: the read-back exceeds {max} bytes"
                )));
            }
            if tx.send(chunk).await.is_err() {
                // The unpacker stopped early: its error says why.
                break;
            }
        }
        drop(tx);
        let files = unpacker.await.expect("unpacking a tree does not panic")?;
        steps.mark("download+unpack");
        steps.log(name);
        Ok(Some(files))
    }

    async fn remove_dir_inner(&self, name: &str, dir: &str) -> Result<(), SandboxError> {
        crate::domain::path::check_repo_path(dir)
            .map_err(|m| SandboxError::Runtime(format!("remove {dir:?}: {m}")))?;
        self.exec_in_holder(
            name,
            vec![
                "rm".into(),
                "-rf".into(),
                "--".into(),
                format!("{HOLDER_MOUNT}/{dir}"),
            ],
            &format!("removing {dir}"),
        )
        .await
    }

    /// Runs `cmd` in volume `name`'s holder (its user, its confinement) and waits for it to
    /// exit 0; `what` names it in errors.
    async fn exec_in_holder(
        &self,
        name: &str,
        cmd: Vec<String>,
        what: &str,
    ) -> Result<(), SandboxError> {
        let docker = self.sandbox.docker();
        let exec = docker
            .create_exec(
                &Self::holder(name),
                bollard::models::ExecConfig {
                    cmd: Some(cmd),
                    working_dir: Some(HOLDER_MOUNT.into()),
                    attach_stdout: Some(false),
                    attach_stderr: Some(false),
                    ..Default::default()
                },
            )
            .await
            .map_err(docker_err("create exec"))?;
        docker
            .start_exec(
                &exec.id,
                Some(bollard::exec::StartExecOptions {
                    detach: true,
                    ..Default::default()
                }),
            )
            .await
            .map_err(docker_err("start exec"))?;
        let deadline = tokio::time::Instant::now() + limits::DOCKER_NEGOTIATE_TIMEOUT;
        loop {
            let i = docker
                .inspect_exec(&exec.id)
                .await
                .map_err(docker_err("inspect exec"))?;
            if i.running != Some(true) {
                return match i.exit_code {
                    Some(0) => Ok(()),
                    code => Err(SandboxError::Runtime(format!(
                        "volume {name}: {what} exited with {code:?}"
                    ))),
                };
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Runtime(format!(
                    "volume {name}: {what} did not finish"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Makes the symlinks the engine's archive extraction refuses (a relative target that
    /// leads out of the volume, which git and a local checkout keep as they are), in the
    /// holder, after the upload: `[(path, target)]`.
    async fn outward_links(
        &self,
        name: &str,
        links: &[(String, String)],
    ) -> Result<(), SandboxError> {
        // Each: the link's directory, then the link (its directories may hold nothing else).
        const SCRIPT: &str = "while [ $# -gt 0 ]; do mkdir -p -- \"$(dirname -- \"$1\")\" && ln -s -- \"$2\" \"$1\" || exit 1; shift 2; done";
        for batch in links.chunks(OUTWARD_LINKS_PER_EXEC) {
            let mut cmd = vec!["sh".to_string(), "-c".into(), SCRIPT.into(), "sh".into()];
            for (path, target) in batch {
                cmd.push(path.clone());
                cmd.push(target.clone());
            }
            self.exec_in_holder(name, cmd, "making outward symlinks")
                .await?;
        }
        Ok(())
    }

    /// Fills dependency-set volume `name` with `dir`'s tree, once per process (one whose
    /// content this process did not put there, a crash's leftover, is made anew).
    async fn ensure_readonly_inner(
        &self,
        name: &str,
        dir: &std::path::Path,
    ) -> Result<bool, SandboxError> {
        let mut filled = self.filled.lock().await;
        if filled.contains(name) {
            return Ok(false);
        }
        let docker = self.sandbox.docker();
        match docker
            .remove_volume(
                name,
                Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if is_status(&e, &[404]) => {}
            Err(e) => return Err(docker_err("remove volume")(e)),
        }
        docker
            .create_volume(VolumeCreateRequest {
                name: Some(name.to_string()),
                driver: Some("local".into()),
                labels: Some(HashMap::from([(
                    LABEL_DEPS_INSTANCE.to_string(),
                    self.instance_id.clone(),
                )])),
                ..Default::default()
            })
            .await
            .map_err(docker_err("create volume"))?;
        let files = {
            let dir = dir.to_path_buf();
            tokio::task::spawn_blocking(move || crate::sandbox::runtime::files_of(&dir))
                .await
                .expect("reading a set does not panic")?
        };
        if let Some((path, target)) = files.iter().find_map(|(p, f)| match f {
            VolumeFile::Symlink { target } if tarball::leads_out(p, target) => Some((p, target)),
            _ => None,
        }) {
            return Err(SandboxError::Runtime(format!(
                "{path} -> {target} leads out of the set; it cannot be uploaded"
            )));
        }
        let (tar, _) = tokio::task::spawn_blocking(move || tarball::pack(&files, 0, 0))
            .await
            .expect("packing a set does not panic")?;
        // A container that never runs: the archive API fills the volume it mounts.
        let filler = format!("airlock-depsfill-{}", crate::ids::new_creation_key());
        docker
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::default()
                        .name(&filler)
                        .build(),
                ),
                self.helper_body(
                    name,
                    vec!["true".into()],
                    None,
                    HashMap::from([(LABEL_DEPS_INSTANCE.to_string(), self.instance_id.clone())]),
                ),
            )
            .await
            .map_err(docker_err("create set filler"))?;
        let uploaded = self
            .sandbox
            .transfers()
            .upload_to_container(
                &filler,
                Some(
                    UploadToContainerOptionsBuilder::default()
                        .path(HOLDER_MOUNT)
                        .build(),
                ),
                bollard::body_full(tar.into()),
            )
            .await
            .map_err(docker_err("upload dependency set"));
        let removed = docker
            .remove_container(
                &filler,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await;
        uploaded?;
        if let Err(e) = removed
            && !is_status(&e, &[404])
        {
            tracing::warn!(error = %e, "the set filler container is left behind");
        }
        filled.insert(name.to_string());
        Ok(true)
    }

    async fn prune_readonly_inner(
        &self,
        keep: &std::collections::BTreeSet<String>,
    ) -> Result<Vec<String>, SandboxError> {
        // Held across: no fill of this process runs meanwhile, so every filler found is a
        // leftover.
        let mut filled = self.filled.lock().await;
        let docker = self.sandbox.docker();
        let filters = HashMap::from([(
            "label",
            vec![format!("{LABEL_DEPS_INSTANCE}={}", self.instance_id)],
        )]);
        let fillers = docker
            .list_containers(Some(
                bollard::query_parameters::ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(docker_err("list set fillers"))?;
        for c in fillers {
            if let Some(id) = c.id {
                match docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptionsBuilder::default().force(true).build()),
                    )
                    .await
                {
                    Ok(()) => {}
                    Err(e) if is_status(&e, &[404, 409]) => {}
                    Err(e) => return Err(docker_err("remove set filler")(e)),
                }
            }
        }
        let volumes = docker
            .list_volumes(Some(
                ListVolumesOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(docker_err("list set volumes"))?;
        let mut removed = Vec::new();
        for v in volumes.volumes.unwrap_or_default() {
            if keep.contains(&v.name) {
                continue;
            }
            // Not forced: a volume a job still mounts stays (409) until a later prune.
            match docker
                .remove_volume(
                    &v.name,
                    None::<bollard::query_parameters::RemoveVolumeOptions>,
                )
                .await
            {
                Ok(()) => {
                    filled.remove(&v.name);
                    removed.push(v.name);
                }
                Err(e) if is_status(&e, &[404, 409]) => {}
                Err(e) => return Err(docker_err("remove set volume")(e)),
            }
        }
        Ok(removed)
    }

    async fn delete_inner(&self, name: &str) -> Result<bool, SandboxError> {
        let mut steps = Steps::start("remove workspace");
        let docker = self.sandbox.docker();
        match docker
            .remove_container(
                &Self::holder(name),
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if is_status(&e, &[404]) => {}
            Err(e) => return Err(docker_err("remove workspace holder")(e)),
        }
        steps.mark("holder");
        let removed = match docker
            .remove_volume(
                name,
                Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if is_status(&e, &[404]) => Ok(false),
            Err(e) => Err(docker_err("remove volume")(e)),
        };
        steps.mark("volume");
        steps.log(name);
        removed
    }
}

fn pack_failed(e: std::io::Error) -> SandboxError {
    SandboxError::Runtime(format!("pack workspace: {e}"))
}

/// (bytes, inodes) from a tmpfs volume's `o=` option.
fn quota_of(options: &HashMap<String, String>) -> (u64, u64) {
    let mut quota = (0, 0);
    for opt in options
        .get("o")
        .map(String::as_str)
        .unwrap_or("")
        .split(',')
    {
        if let Some(v) = opt.strip_prefix("size=") {
            quota.0 = v.parse().unwrap_or(0);
        } else if let Some(v) = opt.strip_prefix("nr_inodes=") {
            quota.1 = v.parse().unwrap_or(0);
        }
    }
    quota
}

/// Symlinks made in one exec at most (their paths and targets are its arguments).
const OUTWARD_LINKS_PER_EXEC: usize = 256;

impl EngineVolumes for DockerVolumes {
    fn upload<'a>(
        &'a self,
        name: &'a str,
        spec: &'a VolumeSpec,
        files: FilesSource<'a>,
    ) -> BoxFuture<'a, Result<bool, SandboxError>> {
        Box::pin(async move {
            let mut steps = Steps::start("upload workspace");
            if self.exists(name).await? {
                return Err(SandboxError::Runtime(format!(
                    "volume {name} already exists"
                )));
            }
            steps.mark("exists");
            let uploaded = self.upload_inner(name, spec, files, &mut steps).await;
            if !matches!(uploaded, Ok(true)) {
                let _ = self.delete_inner(name).await;
            }
            steps.log(name);
            uploaded
        })
    }

    fn download<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<VolumeFiles>, SandboxError>> {
        Box::pin(self.download_inner(name))
    }

    fn remove_dir<'a>(
        &'a self,
        name: &'a str,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(self.remove_dir_inner(name, dir))
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, SandboxError>> {
        Box::pin(self.delete_inner(name))
    }

    fn ensure_readonly<'a>(
        &'a self,
        name: &'a str,
        dir: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<bool, SandboxError>> {
        Box::pin(self.ensure_readonly_inner(name, dir))
    }

    fn prune_readonly<'a>(
        &'a self,
        keep: &'a std::collections::BTreeSet<String>,
    ) -> BoxFuture<'a, Result<Vec<String>, SandboxError>> {
        Box::pin(self.prune_readonly_inner(keep))
    }

    fn names<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, SandboxError>> {
        Box::pin(async move {
            let filters = HashMap::from([(
                "label",
                vec![format!("{LABEL_HOLDER_INSTANCE}={}", self.instance_id)],
            )]);
            let list = self
                .sandbox
                .docker()
                .list_volumes(Some(
                    ListVolumesOptionsBuilder::default()
                        .filters(&filters)
                        .build(),
                ))
                .await
                .map_err(docker_err("list volumes"))?;
            Ok(list
                .volumes
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.name)
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_is_read_from_the_volumes_options() {
        let o = HashMap::from([(
            "o".to_string(),
            "size=1048576,nr_inodes=100,uid=1,gid=1,mode=0755".to_string(),
        )]);
        assert_eq!(quota_of(&o), (1048576, 100));
    }
}
