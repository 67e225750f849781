//! The uploading workspace backend: for an engine that does not share this host's filesystem,
//! each job's tree is read from git here (trusted code), uploaded into a volume the engine holds
//! and mounts, and read back after the container is destroyed: the job's output files, then the
//! source check against the tree as it was uploaded. No host path reaches the container.
//!
//! An engine whose volumes die with the job ([`VolumeLifetime::DiesWithJob`]) gets nothing
//! ahead: the tree travels in the job's spec ([`WorkspaceSource::Scratch`]), and what the job
//! left comes back with its outcome; the harvest and the source check read those files.

use super::{
    ChangedPaths, HarvestLimits, Harvested, JobWorkspace, StageRequest, Transfers, Workspaces,
};
use crate::domain::git::FileMode;
use crate::install::Image;
use crate::sandbox::WorkspaceSource;
use crate::sandbox::runtime::{
    BoxFuture, EngineVolumes, VolumeFile, VolumeFiles, VolumeLifetime, VolumeSpec,
};
use crate::sandbox::spec::ScratchFiles;
use crate::staging::{CheckoutFs, StagingError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Bytes of file contents (and symlink targets) in `files`.
fn content_bytes(files: &VolumeFiles) -> u64 {
    files
        .values()
        .map(|f| match f {
            VolumeFile::File { bytes, .. } => bytes.len() as u64,
            VolumeFile::Symlink { target } => target.len() as u64,
        })
        .sum()
}

/// Jobs' workspaces as volumes of one engine.
#[derive(Clone)]
pub struct Uploads {
    volumes: Arc<dyn EngineVolumes>,
}

impl Uploads {
    pub fn new(volumes: Arc<dyn EngineVolumes>) -> Uploads {
        Uploads { volumes }
    }
}

fn engine(e: crate::sandbox::SandboxError) -> StagingError {
    if e.is_unresponsive() {
        StagingError::EngineUnresponsive(e.to_string())
    } else {
        StagingError::Volume(e.to_string())
    }
}

/// The volume a request's tree goes into: the quota a loop-mounted checkout would have. A
/// plain directory has none, and an engine's volume is never made without one.
fn volume_spec(req: &StageRequest) -> Result<VolumeSpec, StagingError> {
    match req.fs {
        CheckoutFs::Loop { disk_bytes, inodes } => Ok(VolumeSpec {
            disk_bytes,
            inodes,
            uid: req.uid,
            gid: req.gid,
        }),
        CheckoutFs::Directory => Err(StagingError::Volume(
            "an uploaded workspace needs a quota: set checkout_filesystem = \"loop\" (the profile's disk_bytes and inodes bound the volume)".into(),
        )),
    }
}

/// The commit's tree as volume files, refused when it exceeds the workspace's quota (the same
/// disk and inode bounds a loop-mounted checkout has). Submodule entries are left out, as a
/// checkout leaves them unpopulated.
fn read_tree(req: &StageRequest, spec: &VolumeSpec) -> Result<VolumeFiles, StagingError> {
    let (max_bytes, max_files) = (spec.disk_bytes, spec.inodes);
    let entries: Vec<_> = req
        .repo
        .tree_files(&req.commit)?
        .into_iter()
        .filter(|(_, e)| {
            matches!(
                e.mode,
                FileMode::Regular | FileMode::Executable | FileMode::Symlink
            )
        })
        .collect();
    if entries.len() as u64 > max_files {
        return Err(StagingError::Space(format!(
            "the tree does not fit the workspace's quota ({max_bytes} bytes, {max_files} files)"
        )));
    }
    let oids: Vec<String> = entries.iter().map(|(_, e)| e.oid.clone()).collect();
    let mut files = VolumeFiles::new();
    let mut bytes = 0u64;
    req.repo.for_each_blob(&oids, |i, content| {
        let (path, entry) = &entries[i];
        bytes += content.len() as u64;
        if bytes > max_bytes {
            return Err(StagingError::Space(format!(
                "the tree does not fit the workspace's quota ({max_bytes} bytes, {max_files} files)"
            )));
        }
        let file = match entry.mode {
            FileMode::Symlink => VolumeFile::Symlink {
                target: String::from_utf8(content).map_err(|_| {
                    StagingError::Volume(format!("{path}: a symlink target that is not UTF-8"))
                })?,
            },
            mode => VolumeFile::File {
                executable: mode == FileMode::Executable,
                bytes: content,
            },
        };
        files.insert(path.clone(), file);
        Ok(())
    })?;
    Ok(files)
}

impl Workspaces for Uploads {
    fn stage<'a>(
        &'a self,
        req: StageRequest,
    ) -> BoxFuture<'a, Result<Box<dyn JobWorkspace>, StagingError>> {
        Box::pin(async move {
            let key = req.key.clone();
            let spec = volume_spec(&req)?;
            let started = Instant::now();
            // The tree is read while the engine makes its volume: what was read (or why it
            // could not be) is kept here, and the upload is given the files.
            let read: Mutex<Option<Result<Arc<VolumeFiles>, StagingError>>> = Mutex::new(None);
            let reading = async {
                let files = tokio::task::spawn_blocking(move || read_tree(&req, &spec))
                    .await
                    .expect("reading a tree does not panic")
                    .map(Arc::new);
                let given = files.as_ref().ok().cloned();
                *read.lock().expect("the read tree is not poisoned") = Some(files);
                given
            };
            let lifetime = self.volumes.lifetime();
            if lifetime == VolumeLifetime::OutlivesContainer {
                self.volumes
                    .upload(&key, &spec, Box::pin(reading))
                    .await
                    .map_err(engine)?;
            } else {
                reading.await;
            }
            let files = read
                .into_inner()
                .expect("the read tree is not poisoned")
                .expect("an upload that answered read its tree")?;
            // A scratch workspace's tree goes with the job's spec: counted as uploaded then.
            let moved = Transfers {
                uploads: 1,
                upload_bytes: content_bytes(&files),
                upload: started.elapsed(),
                ..Transfers::default()
            };
            Ok(Box::new(Uploaded {
                volumes: self.volumes.clone(),
                lifetime,
                name: key,
                staged: ScratchFiles(files),
                handed_back: Mutex::new(None),
                moved: Mutex::new(moved),
            }) as Box<dyn JobWorkspace>)
        })
    }

    fn remove<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, StagingError>> {
        Box::pin(async move { self.volumes.delete(key).await.map_err(engine) })
    }

    fn leftovers<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, StagingError>> {
        Box::pin(async move { self.volumes.names().await.map_err(engine) })
    }

    fn describe(&self, key: &str) -> String {
        format!("volume {key}")
    }
}

/// One job's uploaded workspace and the tree it was given.
struct Uploaded {
    volumes: Arc<dyn EngineVolumes>,
    lifetime: VolumeLifetime,
    name: String,
    staged: ScratchFiles,
    /// A scratch workspace's files as the runtime handed them back when the job ended.
    handed_back: Mutex<Option<VolumeFiles>>,
    moved: Mutex<Transfers>,
}

impl Uploaded {
    /// The workspace's files now: read back from the engine's volume, or (scratch) what the
    /// runtime handed back when the job ended.
    async fn files(&self) -> Result<VolumeFiles, StagingError> {
        let started = Instant::now();
        let files = match self.lifetime {
            VolumeLifetime::OutlivesContainer => self
                .volumes
                .download(&self.name)
                .await
                .map_err(engine)?
                .ok_or_else(|| StagingError::Volume(format!("volume {} is gone", self.name)))?,
            VolumeLifetime::DiesWithJob => self
                .handed_back
                .lock()
                .expect("the handed-back files are not poisoned")
                .clone()
                .ok_or_else(|| {
                    StagingError::Volume(format!(
                        "scratch workspace {}: the engine handed back no files when the job ended",
                        self.name
                    ))
                })?,
        };
        let mut moved = self
            .moved
            .lock()
            .expect("the transfer count is not poisoned");
        moved.readbacks += 1;
        moved.readback_bytes += content_bytes(&files);
        moved.readback += started.elapsed();
        Ok(files)
    }
}

impl JobWorkspace for Uploaded {
    fn transfers(&self) -> Transfers {
        *self
            .moved
            .lock()
            .expect("the transfer count is not poisoned")
    }

    /// The volume is named by the job's creation key and only this backend writes it before the
    /// run; there is no host path to swap, so the engine mounts it by name. Scratch space is
    /// filled by the runtime from the tree the spec carries.
    fn attach(&self) -> Result<WorkspaceSource, StagingError> {
        Ok(match self.lifetime {
            VolumeLifetime::OutlivesContainer => WorkspaceSource::Volume(self.name.clone()),
            VolumeLifetime::DiesWithJob => WorkspaceSource::Scratch {
                name: self.name.clone(),
                files: self.staged.clone(),
            },
        })
    }

    fn ended(&self, scratch: Option<VolumeFiles>) {
        if self.lifetime == VolumeLifetime::DiesWithJob {
            *self
                .handed_back
                .lock()
                .expect("the handed-back files are not poisoned") = scratch;
        }
    }

    fn harvest<'a>(&'a self, limits: &'a HarvestLimits) -> BoxFuture<'a, Harvested> {
        Box::pin(async move {
            let files = self.files().await.map_err(|e| e.to_string())?;
            let prefix = format!("{}/", limits.dir);
            let mut out = Vec::new();
            let mut bytes = 0u64;
            for (path, file) in files.range(prefix.clone()..) {
                let Some(rel) = path.strip_prefix(&prefix) else {
                    break;
                };
                if out.len() == limits.max_files {
                    return Err(format!(
                        "the job wrote more than {} files",
                        limits.max_files
                    ));
                }
                let image = match file {
                    VolumeFile::File { executable, bytes } => Image::File {
                        executable: *executable,
                        bytes: bytes.clone(),
                    },
                    VolumeFile::Symlink { target } => Image::Symlink {
                        target: target.clone(),
                    },
                };
                bytes += match &image {
                    Image::File { bytes, .. } => bytes.len() as u64,
                    Image::Symlink { target } => target.len() as u64,
                    Image::Absent => 0,
                };
                if bytes > limits.max_bytes {
                    return Err(format!(
                        "the job wrote more than {} bytes",
                        limits.max_bytes
                    ));
                }
                out.push((rel.to_string(), image));
            }
            match self.lifetime {
                VolumeLifetime::OutlivesContainer => self
                    .volumes
                    .remove_dir(&self.name, &limits.dir)
                    .await
                    .map_err(|e| format!("remove the job's {}: {e}", limits.dir))?,
                VolumeLifetime::DiesWithJob => {
                    if let Some(files) = self
                        .handed_back
                        .lock()
                        .expect("the handed-back files are not poisoned")
                        .as_mut()
                    {
                        files.retain(|path, _| !path.starts_with(&prefix));
                    }
                }
            }
            Ok(out)
        })
    }

    /// Every uploaded path whose type, mode or content differs now (or that is gone); files the
    /// job added are not the tree's, as with a checkout.
    fn check_sources(&self, listed: usize) -> BoxFuture<'_, Result<ChangedPaths, StagingError>> {
        Box::pin(async move {
            let now = self.files().await?;
            let changed: Vec<&String> = self
                .staged
                .0
                .iter()
                .filter(|(path, file)| now.get(*path) != Some(*file))
                .map(|(path, _)| path)
                .collect();
            Ok((
                changed.iter().take(listed).map(|p| p.to_string()).collect(),
                changed.len(),
            ))
        })
    }
}
