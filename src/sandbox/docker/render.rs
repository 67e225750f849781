//! The hardening spec rendered as Docker's create body: the single function that does it
//! ([`render`]), and the form `environment_sha256` hashes ([`hashed_form`]).

use crate::limits;
use crate::sandbox::spec::{RunIdentity, RuntimeSpec, WorkspaceKind, WorkspaceSource};
use crate::sandbox::{LABEL_CREATION_KEY, LABEL_INSTANCE, LABEL_MANAGED, LABEL_VERIFICATION_ID};
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};
use sha2::Digest;
use std::collections::HashMap;
use std::path::PathBuf;

/// Fields of the rendered create body that belong to one run, not to the environment (JSON
/// paths of the body as the Docker API names them; `[]` means every element of an array).
pub const PER_RUN_FIELDS: [&str; 3] = ["Labels", "Entrypoint", "HostConfig.Mounts[].Source"];

/// The create body for `spec` on a bind-mount engine with per-run fields removed: what
/// `environment_sha256` hashes for the local engine.
pub fn hashed_form(spec: &RuntimeSpec) -> serde_json::Value {
    hashed_form_for(spec, WorkspaceKind::HostBind)
}

/// The create body for `spec` with a workspace of `kind` and per-run fields removed.
pub fn hashed_form_for(spec: &RuntimeSpec, kind: WorkspaceKind) -> serde_json::Value {
    let placeholder = RunIdentity {
        creation_key: String::new(),
        verification_id: String::new(),
        instance_id: String::new(),
        argv: Vec::new(),
        workspace: placeholder(kind),
        deps: spec.deps.map(|_| placeholder(kind)),
        output: None,
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

/// A source of `kind` with no place: what a hashed form mounts.
fn placeholder(kind: WorkspaceKind) -> WorkspaceSource {
    match kind {
        WorkspaceKind::HostBind => WorkspaceSource::HostBind(PathBuf::new()),
        WorkspaceKind::Volume => WorkspaceSource::Volume(String::new()),
    }
}

/// The mount of `source` at `target`.
fn mount(source: &WorkspaceSource, target: &str, read_only: bool) -> Mount {
    match source {
        WorkspaceSource::HostBind(dir) => Mount {
            target: Some(target.to_string()),
            source: Some(dir.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(read_only),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..Default::default()
            }),
            ..Default::default()
        },
        WorkspaceSource::Volume(name) => Mount {
            target: Some(target.to_string()),
            source: Some(name.clone()),
            typ: Some(MountType::VOLUME),
            read_only: Some(read_only),
            ..Default::default()
        },
        // Refused before rendering (a Docker volume outlives its container); rendered as
        // the scratch Docker would give, so the renderer stays total.
        WorkspaceSource::Scratch { .. } => Mount {
            target: Some(target.to_string()),
            typ: Some(MountType::TMPFS),
            read_only: Some(read_only),
            ..Default::default()
        },
    }
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
        // The isolation level, always named (an engine's default runtime may be another).
        runtime: Some(spec.isolation.as_str().into()),
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
        mounts: Some({
            let mut mounts = vec![mount(
                &run.workspace,
                &spec.working_dir,
                spec.workspace_read_only,
            )];
            if let (Some(m), Some(source)) = (spec.deps, &run.deps) {
                mounts.push(mount(source, crate::deps::spec::DEPS_DIR, m.read_only));
            }
            mounts
        }),
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
        // Docker's default lets any user bind ports below 1024; a job's unprivileged user
        // must not (tests that expect the host's rule then behave as on a host).
        sysctls: Some(HashMap::from([(
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            limits::SANDBOX_UNPRIVILEGED_PORT_START.to_string(),
        )])),
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
    use std::collections::BTreeMap;

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
                workspace_read_only: false,
                deps: None,
                isolation: crate::domain::isolation::Isolation::Runc,
            },
            RunIdentity {
                creation_key: "k".into(),
                verification_id: "v".into(),
                instance_id: "i".into(),
                argv: vec!["true".into()],
                workspace: WorkspaceSource::HostBind(PathBuf::from("/data/checkouts/k/mnt/tree")),
                deps: None,
                output: None,
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
            "HostConfig.Runtime",
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
        // The isolation level is named in the create body, so in the hash.
        let mut other = spec.clone();
        other.isolation = crate::domain::isolation::Isolation::Runsc;
        assert_ne!(a, hashed_form(&other));
        assert_eq!(hashed_form(&other)["HostConfig"]["Runtime"], "runsc");
        assert_eq!(a["HostConfig"]["Runtime"], "runc");
    }
}
