//! A scripted container runtime for workflow tests. A job's *argv* says what the fake does, so a
//! test drives it through the real API exactly as it would drive Docker:
//!
//! - `fake-exit <code> [output]`: exits with `code`, printing `output`;
//! - `fake-write <path> <content>`: writes `content` to `path` in the workspace (a bind-mounted
//!   checkout or one of the fake's own volumes), then exits 0 (so the source check sees a
//!   changed tracked file);
//! - `fake-oom`: killed for memory (exit 137, OOM);
//! - `fake-hang`: runs until the deadline (timed out) or a cancel (cancelled);
//! - `fake-fail <message>`: the runtime itself fails;
//! - `fake-lose-scratch`: exits 0, and the runtime hands back no scratch files;
//! - anything else: exits 0 with no output.
//!
//! Every image exists (its id is `sha256:fake:<reference>`, unless a test made the engine lie
//! with [`FakeRuntime::set_image`]). The fake never touches Docker, so a
//! test on it proves workflow logic, never a sandbox limit. Besides bind-mounted checkouts it
//! mounts volumes of its own ([`FakeVolumes`], in memory): the engine side of an uploading
//! workspace backend, as an engine on another machine would hold them.

use super::capture::OutputCapture;
use super::runtime::{BoxFuture, ContainerRuntime, EngineVolumes, VolumeFile, VolumeFiles};
use super::{
    ContainerSpec, JobEnd, JobOutcome, ManagedContainer, Phase, SandboxError, WorkspaceSource,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The scripted runtime.
pub struct FakeRuntime {
    /// Creation keys of jobs "running" now.
    live: Mutex<HashSet<String>>,
    volumes: FakeVolumes,
    /// While set, the engine does not answer: listing and destroying containers fail.
    away: std::sync::atomic::AtomicBool,
    /// While set, the engine hangs: asked for an image id, it never answers.
    hung: std::sync::atomic::AtomicBool,
    /// Image ids this engine reports instead of the usual `sha256:fake:<reference>`.
    images: Mutex<HashMap<String, String>>,
    /// The isolation levels it offers (runc alone unless a test says otherwise).
    runtimes: Mutex<Vec<crate::domain::isolation::Isolation>>,
}

impl Default for FakeRuntime {
    fn default() -> FakeRuntime {
        FakeRuntime {
            live: Mutex::default(),
            volumes: FakeVolumes::default(),
            away: Default::default(),
            hung: Default::default(),
            images: Mutex::default(),
            runtimes: Mutex::new(vec![crate::domain::isolation::Isolation::Runc]),
        }
    }
}

impl FakeRuntime {
    pub fn new() -> FakeRuntime {
        FakeRuntime::default()
    }

    /// A fake engine whose workspace volumes die with the job
    /// ([`super::runtime::VolumeLifetime::DiesWithJob`]): nothing is uploaded ahead, each job
    /// gets its tree in its spec and hands its files back in its outcome.
    pub fn with_scratch_volumes() -> FakeRuntime {
        FakeRuntime {
            volumes: FakeVolumes {
                scratch: true,
                ..FakeVolumes::default()
            },
            ..FakeRuntime::default()
        }
    }

    /// Makes the engine offer `runtimes` (as if its operator registered them).
    pub fn offer_runtimes(&self, runtimes: &[crate::domain::isolation::Isolation]) {
        *self.runtimes.lock().expect("never poisoned") = runtimes.to_vec();
    }

    /// Makes the engine stop (or start again) answering container listings and removals.
    pub fn set_away(&self, away: bool) {
        self.away.store(away, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes the engine hang (or answer again) when asked for an image id.
    pub fn set_hung(&self, hung: bool) {
        self.hung.store(hung, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes the engine report `id` for image `reference` (a tag that names another image).
    pub fn set_image(&self, reference: &str, id: &str) {
        self.images
            .lock()
            .expect("never poisoned")
            .insert(reference.to_string(), id.to_string());
    }

    fn answer(&self) -> Result<(), SandboxError> {
        if self.away.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(SandboxError::Runtime(
                "the fake engine does not answer".into(),
            ));
        }
        Ok(())
    }

    /// The volumes this fake engine mounts (a handle onto the same ones).
    pub fn volumes(&self) -> FakeVolumes {
        self.volumes.clone()
    }
}

/// The fake engine's volumes, in memory: cheap to clone, every clone the same volumes.
#[derive(Default, Clone)]
pub struct FakeVolumes {
    held: Arc<Mutex<HashMap<String, VolumeFiles>>>,
    /// Scratch that dies with the job (as a Kubernetes `emptyDir`) instead of named volumes.
    scratch: bool,
    /// Volumes uploaded so far.
    uploads: Arc<std::sync::atomic::AtomicUsize>,
    /// Scratch workspaces filled so far (one per job that got one).
    scratch_fills: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeVolumes {
    /// Volumes uploaded so far.
    pub fn uploads(&self) -> usize {
        self.uploads.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Scratch workspaces the runtime filled so far.
    pub fn scratch_fills(&self) -> usize {
        self.scratch_fills.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, VolumeFiles>) -> R) -> R {
        f(&mut self
            .held
            .lock()
            .expect("the fake's volumes are never poisoned"))
    }

    /// A job writing `content` to `path` of volume `name`.
    fn write(&self, name: &str, path: &str, content: &str) -> Result<(), String> {
        self.with(|held| match held.get_mut(name) {
            Some(files) => {
                files.insert(
                    path.to_string(),
                    VolumeFile::File {
                        executable: false,
                        bytes: content.as_bytes().to_vec(),
                    },
                );
                Ok(())
            }
            None => Err(format!("no volume {name:?}")),
        })
    }
}

impl EngineVolumes for FakeVolumes {
    fn lifetime(&self) -> super::runtime::VolumeLifetime {
        if self.scratch {
            super::runtime::VolumeLifetime::DiesWithJob
        } else {
            super::runtime::VolumeLifetime::OutlivesContainer
        }
    }

    fn upload<'a>(
        &'a self,
        name: &'a str,
        _spec: &'a super::runtime::VolumeSpec,
        files: super::runtime::FilesSource<'a>,
    ) -> BoxFuture<'a, Result<bool, SandboxError>> {
        Box::pin(async move {
            if self.with(|held| held.contains_key(name)) {
                return Err(SandboxError::Runtime(format!("volume {name:?} exists")));
            }
            let Some(files) = files.await else {
                return Ok(false);
            };
            self.with(|held| {
                if held.contains_key(name) {
                    return Err(SandboxError::Runtime(format!("volume {name:?} exists")));
                }
                held.insert(name.to_string(), Arc::unwrap_or_clone(files));
                self.uploads
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(true)
            })
        })
    }

    fn download<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<VolumeFiles>, SandboxError>> {
        Box::pin(async move { Ok(self.with(|held| held.get(name).cloned())) })
    }

    fn remove_dir<'a>(
        &'a self,
        name: &'a str,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<(), SandboxError>> {
        Box::pin(async move {
            let prefix = format!("{dir}/");
            self.with(|held| {
                if let Some(files) = held.get_mut(name) {
                    files.retain(|p, _| !p.starts_with(&prefix));
                }
            });
            Ok(())
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, SandboxError>> {
        Box::pin(async move { Ok(self.with(|held| held.remove(name).is_some())) })
    }

    fn names<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>, SandboxError>> {
        Box::pin(async move { Ok(self.with(|held| held.keys().cloned().collect())) })
    }

    fn ensure_readonly<'a>(
        &'a self,
        name: &'a str,
        dir: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<bool, SandboxError>> {
        Box::pin(async move {
            let files = super::runtime::files_of(dir)?;
            self.with(|held| {
                held.insert(name.to_string(), files);
            });
            Ok(true)
        })
    }

    fn prune_readonly<'a>(
        &'a self,
        keep: &'a std::collections::BTreeSet<String>,
    ) -> BoxFuture<'a, Result<Vec<String>, SandboxError>> {
        Box::pin(async move {
            Ok(self.with(|held| {
                let doomed: Vec<String> = held
                    .keys()
                    .filter(|n| {
                        n.starts_with(super::runtime::DEPS_VOLUME_PREFIX) && !keep.contains(*n)
                    })
                    .cloned()
                    .collect();
                for n in &doomed {
                    held.remove(n);
                }
                doomed
            }))
        })
    }
}

/// The verification argv inside the container command (after a setup-script wrapper, if any).
fn job_argv(spec: &ContainerSpec) -> &[String] {
    let argv = &spec.run.argv;
    match argv.iter().position(|a| a == "airlock-setup") {
        Some(i) => &argv[i + 1..],
        None => argv,
    }
}

impl ContainerRuntime for FakeRuntime {
    /// Docker's rendering: the fake stands in for the local engine, so its jobs record the
    /// hash a Docker run of the same environment would.
    fn environment_form(&self, spec: &super::RuntimeSpec) -> serde_json::Value {
        super::docker::render::hashed_form(spec)
    }

    fn workspace_kind(&self) -> super::spec::WorkspaceKind {
        super::spec::WorkspaceKind::HostBind
    }

    fn facts(&self) -> BoxFuture<'_, Result<super::EngineFacts, SandboxError>> {
        Box::pin(async move {
            self.answer()?;
            Ok(super::EngineFacts {
                version: "fake".into(),
                api_version: "fake".into(),
                client_api_version: "fake".into(),
                cgroup_version: "2".into(),
                cgroup_driver: "fake".into(),
                runtimes: self.runtimes.lock().expect("never poisoned").clone(),
            })
        })
    }

    fn image_content_sha<'a>(&'a self, _image: &'a str) -> BoxFuture<'a, Option<Option<String>>> {
        Box::pin(async { Some(None) })
    }

    /// Workflow tests run the fake on host checkouts; a test that wants uploaded workspaces
    /// builds them over [`FakeRuntime::volumes`] itself.
    fn volumes(
        &self,
        _instance_id: &str,
        _seccomp_json: &str,
    ) -> Option<Arc<dyn super::runtime::EngineVolumes>> {
        None
    }

    fn image_id<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<String, SandboxError>> {
        Box::pin(async move {
            if self.hung.load(std::sync::atomic::Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            self.answer()?;
            let told = self
                .images
                .lock()
                .expect("never poisoned")
                .get(image)
                .cloned();
            Ok(told.unwrap_or_else(|| format!("sha256:fake:{image}")))
        })
    }

    fn run<'a>(
        &'a self,
        spec: &'a ContainerSpec,
        timeout: Duration,
        phase: &'a mut super::PhaseHook<'a>,
        mut cancel: watch::Receiver<bool>,
        start_when: super::runtime::StartWhen<'a>,
    ) -> BoxFuture<'a, Result<JobOutcome, SandboxError>> {
        Box::pin(async move {
            let key = spec.run.creation_key.clone();
            phase(Phase::Creating).map_err(|reason| SandboxError::Refused {
                step: "container creation",
                reason,
            })?;
            self.live
                .lock()
                .expect("the fake's set is never poisoned")
                .insert(key.clone());
            let _ = phase(Phase::Created {
                container_id: format!("fake-{key}"),
            });
            let ready = tokio::select! {
                ready = start_when => ready,
                _ = crate::cancel::requested(&mut cancel) => Err("cancelled before the start".into()),
            };
            if let Err(reason) = ready.and_then(|()| phase(Phase::Starting)) {
                self.live
                    .lock()
                    .expect("the fake's set is never poisoned")
                    .remove(&key);
                return Err(SandboxError::Refused {
                    step: "container start",
                    reason,
                });
            }
            let _ = phase(Phase::Started);
            let started = Instant::now();
            let argv = job_argv(spec);
            let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
            let mut output = OutputCapture::tapped(spec.run.output.clone());
            // A scratch workspace lives as long as this job: filled now, handed back at the end.
            let mut scratch = match &spec.run.workspace {
                WorkspaceSource::Scratch { files, .. } => {
                    self.volumes
                        .scratch_fills
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Some(files.0.as_ref().clone())
                }
                WorkspaceSource::HostBind(_) | WorkspaceSource::Volume(_) => None,
            };
            let end = match argv.first().map(String::as_str) {
                Some("fake-exit") => {
                    output.push(arg(2).as_bytes());
                    Ok(JobEnd::Exited {
                        code: arg(1).parse().unwrap_or(1),
                        oom_killed: false,
                    })
                }
                Some("fake-write") => {
                    let written = match &spec.run.workspace {
                        WorkspaceSource::HostBind(dir) => {
                            std::fs::write(dir.join(arg(1)), arg(2)).map_err(|e| e.to_string())
                        }
                        WorkspaceSource::Volume(name) => self.volumes.write(name, &arg(1), &arg(2)),
                        WorkspaceSource::Scratch { .. } => {
                            if let Some(files) = scratch.as_mut() {
                                files.insert(
                                    arg(1),
                                    VolumeFile::File {
                                        executable: false,
                                        bytes: arg(2).into_bytes(),
                                    },
                                );
                            }
                            Ok(())
                        }
                    };
                    match written {
                        Ok(()) => Ok(JobEnd::Exited {
                            code: 0,
                            oom_killed: false,
                        }),
                        Err(e) => Err(SandboxError::Runtime(format!("fake-write: {e}"))),
                    }
                }
                Some("fake-oom") => Ok(JobEnd::Exited {
                    code: 137,
                    oom_killed: true,
                }),
                Some("fake-hang") => Ok(tokio::select! {
                    _ = tokio::time::sleep(timeout) => JobEnd::TimedOut,
                    _ = crate::cancel::requested(&mut cancel) => JobEnd::Cancelled,
                }),
                Some("fake-fail") => Err(SandboxError::Runtime(arg(1))),
                Some("fake-lose-scratch") => {
                    scratch = None;
                    Ok(JobEnd::Exited {
                        code: 0,
                        oom_killed: false,
                    })
                }
                _ => Ok(JobEnd::Exited {
                    code: 0,
                    oom_killed: false,
                }),
            };
            self.live
                .lock()
                .expect("the fake's set is never poisoned")
                .remove(&key);
            let end = end?;
            let _ = phase(Phase::Destroyed);
            Ok(JobOutcome {
                end,
                output: output.finish(),
                container_id: format!("fake-{key}"),
                observed_image: spec.runtime.image_id.clone(),
                duration: started.elapsed(),
                scratch,
            })
        })
    }

    /// The fake keeps no instances: every job it runs is taken as the caller's.
    fn destroy<'a>(
        &'a self,
        creation_key: &'a str,
        _instance_id: &'a str,
    ) -> BoxFuture<'a, Result<usize, SandboxError>> {
        Box::pin(async move {
            self.answer()?;
            let removed = self
                .live
                .lock()
                .expect("the fake's set is never poisoned")
                .remove(creation_key);
            Ok(usize::from(removed))
        })
    }

    fn container_pid<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<u32, SandboxError>> {
        Box::pin(async move {
            Err(SandboxError::Runtime(
                "the fake runtime runs no process to enter".into(),
            ))
        })
    }

    fn list_managed<'a>(
        &'a self,
        _instance_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ManagedContainer>, SandboxError>> {
        Box::pin(async move {
            self.answer()?;
            Ok(self
                .live
                .lock()
                .expect("the fake's set is never poisoned")
                .iter()
                .map(|k| ManagedContainer {
                    id: format!("fake-{k}"),
                    creation_key: Some(k.clone()),
                })
                .collect())
        })
    }
}
