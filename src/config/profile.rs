//! `[profiles.NAME]`: what a job's container is made of (image, user, limits, environment,
//! setup script) and which engines may run it. Every value is checked here; a caller only
//! names a profile.

use super::ConfigError;
use crate::domain::isolation::Isolation;
use crate::limits;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub(super) image: String,
    pub(super) user: Option<String>,
    pub(super) working_dir: Option<String>,
    pub(super) memory_bytes: Option<i64>,
    pub(super) cpus: Option<f64>,
    pub(super) pids: Option<i64>,
    pub(super) tmp_bytes: Option<i64>,
    pub(super) disk_bytes: Option<u64>,
    pub(super) inodes: Option<u64>,
    pub(super) env: Option<BTreeMap<String, String>>,
    pub(super) setup_script: Option<String>,
    /// Labels an engine must carry to run this profile's jobs.
    #[serde(default)]
    pub(super) engine_labels: Vec<String>,
    /// The ecosystems whose dependency set the profile's jobs get.
    #[serde(default)]
    pub(super) dependencies: Vec<super::dependencies::RawDependency>,
    /// The isolation level: the OCI runtime the jobs' containers run under.
    pub(super) runtime: Option<String>,
}

/// A fully resolved, validated profile. Every field has a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub image: String,
    pub uid: u32,
    pub gid: u32,
    pub working_dir: String,
    pub memory_bytes: i64,
    pub cpus: f64,
    pub pids: i64,
    pub tmp_bytes: i64,
    /// Size of the job's own checkout filesystem.
    pub disk_bytes: u64,
    /// Inodes of the job's own checkout filesystem (at least this many).
    pub inodes: u64,
    pub env: BTreeMap<String, String>,
    pub setup_script: String,
    /// Labels an engine must carry to run this profile's jobs (`engine_labels`). They choose
    /// where a job runs, never what it runs, so the environment hash does not include them.
    pub engine_labels: Vec<String>,
    /// The ecosystems whose dependency set each job gets, fetched before it runs
    /// (`dependencies`; see [`crate::deps`]).
    pub dependencies: Vec<crate::deps::spec::Dependency>,
    /// The isolation level its jobs run under (`runtime`: `runc`, the default, or `runsc`).
    /// Part of the container's create body, so of `environment_sha256`; a job runs only on an
    /// engine that offers it.
    pub runtime: Isolation,
}

impl Profile {
    /// The `uid:gid` string handed to Docker.
    pub fn user(&self) -> String {
        format!("{}:{}", self.uid, self.gid)
    }
}

fn invalid(profile: &str, key: &str, message: String) -> ConfigError {
    ConfigError::Invalid {
        field: format!("profiles.{profile}.{key}"),
        message,
    }
}

fn parse_user(profile: &str, user: &str) -> Result<(u32, u32), ConfigError> {
    let bad = || {
        invalid(
            profile,
            "user",
            format!("{user:?} must be numeric \"uid:gid\" with a non-zero uid"),
        )
    };
    let (u, g) = user.split_once(':').ok_or_else(bad)?;
    let uid: u32 = u.parse().map_err(|_| bad())?;
    let gid: u32 = g.parse().map_err(|_| bad())?;
    if uid == 0 {
        return Err(bad());
    }
    Ok((uid, gid))
}

/// An isolation level named at `field` (`runc` when none is).
pub(super) fn parse_runtime(field: &str, name: Option<&str>) -> Result<Isolation, ConfigError> {
    match name {
        None => Ok(Isolation::default()),
        Some(r) => Isolation::parse(r).ok_or_else(|| ConfigError::Invalid {
            field: field.to_string(),
            message: format!(
                "{r:?} is not an isolation level Airlock knows: use {}",
                Isolation::ALL
                    .map(|i| format!("{:?}", i.as_str()))
                    .join(" or ")
            ),
        }),
    }
}

/// The profile `name` checked and resolved; `default_runtime` is its isolation level when it
/// names none (the configuration's top-level `runtime`).
pub(super) fn resolve_profile(
    name: &str,
    p: RawProfile,
    default_runtime: Isolation,
) -> Result<Profile, ConfigError> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(ConfigError::Invalid {
            field: format!("profiles.{name}"),
            message: "profile names use only letters, digits, '_' and '-'".into(),
        });
    }
    if p.image.trim().is_empty() {
        return Err(invalid(name, "image", "must not be empty".into()));
    }
    let (uid, gid) = parse_user(name, p.user.as_deref().unwrap_or("65532:65532"))?;
    let working_dir = p.working_dir.unwrap_or_else(|| "/workspace".into());
    if !working_dir.starts_with('/')
        || working_dir == "/"
        || working_dir.split('/').any(|c| c == ".." || c == ".")
        || working_dir.contains('\0')
        || working_dir == "/tmp"
        || working_dir.starts_with("/tmp/")
    {
        return Err(invalid(
            name,
            "working_dir",
            format!(
                "{working_dir:?} must be an absolute path other than / and outside /tmp, without . or .."
            ),
        ));
    }
    let memory_bytes = p.memory_bytes.unwrap_or(1 << 30);
    if memory_bytes < limits::MIN_MEMORY_BYTES {
        return Err(invalid(
            name,
            "memory_bytes",
            format!(
                "{memory_bytes} is below the minimum of {}",
                limits::MIN_MEMORY_BYTES
            ),
        ));
    }
    let cpus = p.cpus.unwrap_or(1.0);
    if !(cpus.is_finite() && (0.01..=limits::MAX_CPUS).contains(&cpus)) {
        return Err(invalid(
            name,
            "cpus",
            format!("{cpus} must be between 0.01 and {}", limits::MAX_CPUS),
        ));
    }
    let pids = p.pids.unwrap_or(256);
    if !(1..=limits::MAX_PIDS).contains(&pids) {
        return Err(invalid(
            name,
            "pids",
            format!("{pids} must be between 1 and {}", limits::MAX_PIDS),
        ));
    }
    let tmp_bytes = p.tmp_bytes.unwrap_or(256 << 20);
    if tmp_bytes < limits::MIN_TMP_BYTES {
        return Err(invalid(
            name,
            "tmp_bytes",
            format!(
                "{tmp_bytes} is below the minimum of {}",
                limits::MIN_TMP_BYTES
            ),
        ));
    }
    let disk_bytes = p.disk_bytes.unwrap_or(limits::DEFAULT_DISK_BYTES);
    if !(limits::MIN_DISK_BYTES..=limits::MAX_DISK_BYTES).contains(&disk_bytes) {
        return Err(invalid(
            name,
            "disk_bytes",
            format!(
                "{disk_bytes} must be between {} and {}",
                limits::MIN_DISK_BYTES,
                limits::MAX_DISK_BYTES
            ),
        ));
    }
    let inodes = p.inodes.unwrap_or(limits::DEFAULT_INODES);
    let max_inodes = disk_bytes / limits::BYTES_PER_INODE_MIN;
    if !(limits::MIN_INODES..=max_inodes).contains(&inodes) {
        return Err(invalid(
            name,
            "inodes",
            format!(
                "{inodes} must be between {} and {max_inodes} (disk_bytes / {}: ext4 holds at most one inode per block)",
                limits::MIN_INODES,
                limits::BYTES_PER_INODE_MIN
            ),
        ));
    }
    let env = p
        .env
        .unwrap_or_else(|| BTreeMap::from([("LANG".to_string(), "C.UTF-8".to_string())]));
    if env.len() > limits::MAX_PROFILE_ENV_VARS {
        return Err(invalid(
            name,
            "env",
            format!(
                "has {} entries; the limit is {}",
                env.len(),
                limits::MAX_PROFILE_ENV_VARS
            ),
        ));
    }
    for (k, v) in &env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(invalid(
                name,
                "env",
                format!(
                    "{k:?} is not a valid variable name (non-empty, no '=' or NUL) or its value has NUL"
                ),
            ));
        }
    }
    let setup_script = p.setup_script.unwrap_or_default();
    if setup_script.len() > limits::MAX_SETUP_SCRIPT_BYTES || setup_script.contains('\0') {
        return Err(invalid(
            name,
            "setup_script",
            format!(
                "has {} bytes; the limit is {} and NUL is not allowed",
                setup_script.len(),
                limits::MAX_SETUP_SCRIPT_BYTES
            ),
        ));
    }
    let engine_labels = p.engine_labels;
    if engine_labels.len() > crate::limits::MAX_ENGINE_LABELS {
        return Err(invalid(
            name,
            "engine_labels",
            format!(
                "has {} labels; the limit is {}",
                engine_labels.len(),
                crate::limits::MAX_ENGINE_LABELS
            ),
        ));
    }
    for l in &engine_labels {
        super::check_name(format!("profiles.{name}.engine_labels"), l, "label")?;
    }
    let runtime = match p.runtime.as_deref() {
        None => default_runtime,
        Some(r) => parse_runtime(&format!("profiles.{name}.runtime"), Some(r))?,
    };
    Ok(Profile {
        name: name.to_string(),
        runtime,
        image: p.image,
        uid,
        gid,
        working_dir,
        memory_bytes,
        cpus,
        pids,
        tmp_bytes,
        disk_bytes,
        inodes,
        env,
        setup_script,
        engine_labels,
        dependencies: super::dependencies::profile_dependencies(name, p.dependencies)?,
    })
}
