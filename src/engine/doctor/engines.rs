//! The `engines` check: every `[[engines]]` entry reached, its images compared with this
//! machine's, and a hardened probe job run on it.

use super::{Check, PROBE_TIMEOUT_SECONDS, fail, pass};
use crate::config::Config;
use crate::limits;
use crate::sandbox::runtime::{VolumeFile, VolumeFiles, VolumeSpec};
use crate::sandbox::seccomp::SeccompProfile;
use crate::sandbox::spec::WorkspaceKind;
use crate::sandbox::{ContainerSpec, JobEnd, Phase, RunIdentity, Runtime, WorkspaceSource};

/// The images an engine's jobs use: those of the profiles whose `engine_labels` it carries,
/// and the workspace holder's on a pool of uploaded workspaces.
fn images_for(config: &Config, e: &crate::config::engines::EngineConfig) -> Vec<String> {
    let mut images: Vec<String> = config
        .profiles
        .values()
        .filter(|p| p.engine_labels.iter().all(|l| e.labels.contains(l)))
        .map(|p| p.image.clone())
        .collect();
    if crate::sandbox::pool_workspace_kind(config) == crate::sandbox::spec::WorkspaceKind::Volume {
        images.push(crate::sandbox::HOLDER_IMAGE.to_string());
    }
    images.sort();
    images.dedup();
    images
}

/// Every configured engine: reachable (over TLS where configured), its API version, every
/// image its jobs use (the profiles it carries the labels of) present with the id this
/// machine's engine built, and a probe job run there the way its jobs run (an uploaded
/// workspace on an engine that holds them).
pub(super) async fn check(
    local: &Runtime,
    config: &Config,
    seccomp: Option<&SeccompProfile>,
) -> Check {
    let mut ok_lines = vec![];
    let mut problems = vec![];
    let kind = crate::sandbox::pool_workspace_kind(config);
    for e in &config.engines {
        let s = match crate::sandbox::connect(e, kind).await {
            Ok(s) => s,
            Err(err) => {
                problems.push(format!("{}: {err}", e.name));
                continue;
            }
        };
        let facts = match s.facts().await {
            Ok(f) => f,
            Err(err) => {
                problems.push(format!("{}: {err}", e.name));
                continue;
            }
        };
        let mut differ = vec![];
        let mut probe = None;
        let images = images_for(config, e);
        for image in &images {
            let want = local.image_id(image).await.ok();
            match (s.image_id(image).await, want) {
                (Ok(id), Some(want)) if id == want => {}
                (Ok(id), Some(want)) => differ.push(format!(
                    "{image} is {id}, built as {want} (it takes no job needing it)"
                )),
                (Ok(_), None) => {}
                (Err(crate::sandbox::SandboxError::ImageMissing { .. }), _) => {
                    differ.push(format!("{image} is missing"))
                }
                (Err(err), _) => differ.push(format!("{image}: {err}")),
            }
        }
        // The probe runs as a profile this engine's jobs use (the default one when it may);
        // without that profile's image the image is the problem, not the probe.
        let runs_here =
            |p: &&crate::config::Profile| p.engine_labels.iter().all(|l| e.labels.contains(l));
        let probe_profile = config
            .profile(crate::config::DEFAULT_PROFILE)
            .ok()
            .filter(runs_here)
            .or_else(|| config.profiles.values().find(runs_here));
        match probe_profile {
            Some(profile) if !differ.iter().any(|d| d.starts_with(&profile.image)) => match seccomp
            {
                Some(seccomp) => match probe_job(&s, profile, seccomp).await {
                    Ok(ms) => probe = Some(ms),
                    Err(why) => differ.push(format!("probe job: {why}")),
                },
                None => differ.push("probe job: no seccomp profile to run it with".into()),
            },
            Some(_) => {}
            None => {}
        }
        let probed = match (probe, probe_profile) {
            (Some(ms), _) => format!(", probe job {ms} ms"),
            (None, None) => ", no profile's jobs run here".to_string(),
            (None, Some(_)) => String::new(),
        };
        // A profile whose jobs may run here but whose isolation level the engine lacks: its
        // jobs go elsewhere (or are refused when no engine offers it).
        for p in config.profiles.values() {
            if p.engine_labels.iter().all(|l| e.labels.contains(l))
                && !facts.runtimes.contains(&p.runtime)
            {
                differ.push(format!(
                    "profile {} runs under {}, which this engine does not offer (it takes none of its jobs)",
                    p.name, p.runtime
                ));
            }
        }
        if differ.is_empty() {
            ok_lines.push(format!(
                "{} ({}, Docker {}, API {}{}, runtimes {}{probed})",
                e.name,
                e.host,
                facts.version,
                facts.api_version,
                if e.tls.is_some() { ", mutual TLS" } else { "" },
                runtimes(&facts.runtimes)
            ));
        } else {
            problems.push(format!("{}: {}", e.name, differ.join("; ")));
        }
    }
    if problems.is_empty() {
        pass("engines", ok_lines.join("; "))
    } else {
        fail(
            "engines",
            problems.join("; "),
            "start the engine or fix its [[engines]] entry; `airlock images push` copies missing images",
        )
    }
}

/// A job as the engine's jobs run (the default profile, hardened, no network) that reads back a
/// token from its workspace: uploaded into a quota'd volume on an engine that holds its jobs'
/// workspaces, bind-mounted from a temporary directory otherwise. Its milliseconds, or why not.
async fn probe_job(
    s: &Runtime,
    profile: &crate::config::Profile,
    seccomp: &SeccompProfile,
) -> Result<u128, String> {
    let image_id = s
        .image_id(&profile.image)
        .await
        .map_err(|e| e.to_string())?;
    let token = crate::ids::new_creation_key();
    let key = crate::ids::new_creation_key();
    let volumes = s.volumes(PROBE_INSTANCE, &seccomp.compact_json);
    let dir;
    let (source, fs) = match (s.workspace_kind(), &volumes) {
        (WorkspaceKind::Volume, Some(volumes)) => {
            let files = VolumeFiles::from([(
                "token".to_string(),
                VolumeFile::File {
                    executable: false,
                    bytes: token.clone().into_bytes(),
                },
            )]);
            let spec = VolumeSpec {
                disk_bytes: limits::MIN_DISK_BYTES,
                inodes: limits::MIN_INODES,
                uid: profile.uid,
                gid: profile.gid,
            };
            if let Err(e) = volumes
                .upload(&key, &spec, crate::sandbox::runtime::ready(files))
                .await
            {
                let _ = volumes.delete(&key).await;
                return Err(format!("upload: {e}"));
            }
            (
                WorkspaceSource::Volume(key.clone()),
                crate::config::CheckoutFilesystem::Loop,
            )
        }
        _ => {
            use std::os::unix::fs::PermissionsExt;
            dir = tempfile::Builder::new()
                .prefix(".airlock-doctor-")
                .tempdir()
                .map_err(|e| e.to_string())?;
            let path = dir.path().join("token");
            std::fs::write(&path, &token)
                .and_then(|()| {
                    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                })
                .and_then(|()| {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                })
                .map_err(|e| e.to_string())?;
            (
                WorkspaceSource::HostBind(dir.path().to_path_buf()),
                crate::config::CheckoutFilesystem::Directory,
            )
        }
    };
    let env = crate::engine::runner::environment::EnvironmentSpec::resolve(
        s.as_ref(),
        profile,
        &image_id,
        seccomp,
        fs,
    );
    let spec = ContainerSpec {
        runtime: env.runtime.clone(),
        run: RunIdentity {
            creation_key: key.clone(),
            verification_id: format!("doctor_{key}"),
            instance_id: PROBE_INSTANCE.into(),
            argv: vec!["cat".into(), format!("{}/token", profile.working_dir)],
            workspace: source,
            deps: None,
            output: None,
        },
    };
    let (_tx, cancel) = tokio::sync::watch::channel(false);
    let mut phases = |_: Phase| Ok(());
    let ran = s
        .run(
            &spec,
            std::time::Duration::from_secs(PROBE_TIMEOUT_SECONDS),
            &mut phases,
            cancel,
            crate::sandbox::runtime::start_now(),
        )
        .await;
    if let Some(volumes) = &volumes
        && let Err(e) = volumes.delete(&key).await
    {
        tracing::warn!(error = %e, volume = %key, "the probe's volume was left");
    }
    match ran {
        Ok(o)
            if matches!(o.end, JobEnd::Exited { code: 0, .. }) && o.output.text.trim() == token =>
        {
            Ok(o.duration.as_millis())
        }
        Ok(o) => Err(format!(
            "ended {:?} with output {:?}, not the token it was given",
            o.end,
            o.output.text.trim()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The instance label of the probe's container and volume (never a data dir's instance, so no
/// recovery pass of a data dir takes them for its own).
const PROBE_INSTANCE: &str = "doctor";

/// The isolation levels an engine offers, as doctor names them.
pub(super) fn runtimes(levels: &[crate::domain::isolation::Isolation]) -> String {
    if levels.is_empty() {
        return "none Airlock knows".to_string();
    }
    levels
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
