//! Server-side configuration: the data directory and the named profiles from which the
//! environment builder derives every container's image, user, environment and limits.
//!
//! Architecture invariant: a caller can only *name* a profile. Nothing a client sends reaches
//! these values.

mod builtin;
pub mod dependencies;
mod profile;
pub mod webhooks;
pub use profile::Profile;
use profile::{RawProfile, resolve_profile};
pub mod engines;
pub mod governance;
mod names;
pub(crate) use names::check_name;

use crate::limits;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Name of the profile used when the caller names none.
pub const DEFAULT_PROFILE: &str = "default";
/// Image of the built-in default profile.
pub const DEFAULT_IMAGE: &str = "airlock/minimal:latest";
/// Name of the built-in profile for real toolchains (C, Python, Rust).
pub const TOOLCHAIN_PROFILE: &str = "toolchain";
/// Image of the built-in toolchain profile (`airlock images build toolchain`).
pub const TOOLCHAIN_IMAGE: &str = "airlock/toolchain:latest";
/// Name of the built-in profile the governed path's dry run uses (`git apply` in the sandbox).
pub const GIT_PROFILE: &str = "git";
/// Image of the built-in git profile (`airlock images build git`): Debian with git, nothing more.
pub const GIT_IMAGE: &str = "airlock/git:latest";
/// Data directory (beneath the state home) used when neither the config nor the command line
/// names one: `$XDG_STATE_HOME/airlock`, or `~/.local/state/airlock`, never inside the
/// repository the user happens to be in.
pub const DEFAULT_DATA_DIR_NAME: &str = "airlock";

/// The default data directory: `$XDG_STATE_HOME/airlock` when that is an absolute path, else
/// `$HOME/.local/state/airlock`; `./.airlock` only when neither variable is usable.
pub fn default_data_dir() -> PathBuf {
    data_dir_from(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

fn data_dir_from(
    state_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> PathBuf {
    let abs = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(state) = abs(state_home) {
        return state.join(DEFAULT_DATA_DIR_NAME);
    }
    if let Some(home) = abs(home) {
        return home.join(".local/state").join(DEFAULT_DATA_DIR_NAME);
    }
    PathBuf::from(".airlock")
}

/// Errors from loading or validating the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("unknown profile {name:?}; configured profiles: {known}")]
    UnknownProfile { name: String, known: String },
}

/// Address `airlock serve` listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";
/// Lifetime of an evidence packet when the config names none.
pub const DEFAULT_EVIDENCE_TTL_DAYS: u64 = 7;
/// Days one-shot `airlock run` results are kept when the config names none.
pub const DEFAULT_RUN_RETENTION_DAYS: u64 = 30;
pub use governance::DEFAULT_CLAIM_RETENTION_DAYS;
/// Concurrent HTTP connections `airlock serve` keeps when the config names none.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// The verifier id attestations name when the config names none.
pub const DEFAULT_VERIFIER_ID: &str = "urn:airlock:verifier";

/// Seconds between periodic recovery and expiry passes of the daemon.
pub const DEFAULT_MAINTENANCE_INTERVAL_SECONDS: u64 = 60;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    data_dir: Option<PathBuf>,
    listen: Option<String>,
    metrics_listen: Option<String>,
    public_url: Option<String>,
    evidence_ttl_days: Option<u64>,
    maintenance_interval_seconds: Option<u64>,
    engine_lost_after_seconds: Option<u64>,
    max_concurrent_verifications: Option<usize>,
    checkout_filesystem: Option<CheckoutFilesystem>,
    min_free_bytes: Option<u64>,
    tree_cache_bytes: Option<u64>,
    /// The isolation level of every profile that names none.
    runtime: Option<String>,
    run_retention_days: Option<u64>,
    claim_retention_days: Option<u64>,
    validation_ttl_seconds: Option<u64>,
    expected_test_timeout_seconds: Option<u64>,
    max_connections: Option<usize>,
    header_read_timeout_seconds: Option<u64>,
    body_read_timeout_seconds: Option<u64>,
    keep_alive_idle_seconds: Option<u64>,
    mcp_session_idle_seconds: Option<u64>,
    max_patch_bytes: Option<usize>,
    signing_key: Option<PathBuf>,
    #[serde(default)]
    verification_keys: Vec<PathBuf>,
    verifier_id: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
    #[serde(default)]
    workspaces: BTreeMap<String, RawWorkspace>,
    #[serde(default)]
    tokens: Vec<RawToken>,
    #[serde(default)]
    engines: Vec<engines::RawEngine>,
    #[serde(default)]
    egress: dependencies::RawEgress,
    #[serde(default)]
    dependencies: dependencies::RawBounds,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkspace {
    repo: Option<PathBuf>,
    worktree: Option<PathBuf>,
    profile: Option<String>,
    #[serde(default)]
    members: BTreeMap<String, Vec<Permission>>,
    distinct_approver: Option<bool>,
    #[serde(default)]
    roles: BTreeMap<String, Vec<String>>,
    policy: Option<governance::RawPolicy>,
    profiles: Option<Vec<String>>,
    max_running_jobs: Option<usize>,
    max_queued_jobs: Option<usize>,
    history: Option<History>,
    #[serde(default)]
    webhooks: Vec<webhooks::RawWebhook>,
}

/// How a candidate's history lands on its target (`history`, per workspace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// The default: the candidate commit merges the inputs' own commits (authors, messages and
    /// all), and the landed commit merges the candidate into the target, its message telling
    /// the story (inputs, verifications, approver) in trailers.
    #[default]
    Merge,
    /// One commit on the target with the candidate's tree; the inputs' commits are named in
    /// its message but are not in the target's history.
    Squash,
}

/// Where job checkouts live (`checkout_filesystem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CheckoutFilesystem {
    /// A loop-mounted ext4 image per job, sized by the profile's `disk_bytes` and `inodes`.
    #[default]
    Loop,
    /// A plain directory on the data dir's filesystem: no per-job disk or inode quota. For
    /// hosts without loop devices or without root.
    Directory,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    sha256: String,
    member_id: Option<String>,
    run_id: Option<String>,
    workspace_id: Option<String>,
}

/// What a member may do in a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    View,
    Integrate,
    Verify,
    Decide,
    Push,
    /// Claims and proposals on the governed path.
    Propose,
    /// Votes and reviews.
    Review,
    /// Human gates.
    Approve,
    /// Applying an approved patch.
    Apply,
    /// Revoke, suspend and force-release claims; resolve contentions.
    Admin,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::View => "view",
            Permission::Integrate => "integrate",
            Permission::Verify => "verify",
            Permission::Decide => "decide",
            Permission::Push => "push",
            Permission::Propose => "propose",
            Permission::Review => "review",
            Permission::Approve => "approve",
            Permission::Apply => "apply",
            Permission::Admin => "admin",
        }
    }
}

/// A workspace: one repository on this host, its profile and its members.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: String,
    pub repo: PathBuf,
    /// The operator's non-bare working tree, for workspaces on the governed patch path (its
    /// own `.git` is then `repo`). `None`: the governed methods refuse this workspace.
    pub worktree: Option<PathBuf>,
    pub profile: String,
    pub members: BTreeMap<String, Vec<Permission>>,
    /// The member who requested a delivery may not decide it (default `true`); the member who
    /// requested a human approval may not decide it either.
    pub distinct_approver: bool,
    /// Review roles by holder: a member id, or `run:<run_id>`.
    pub roles: BTreeMap<String, Vec<String>>,
    /// The policy that gates apply on the governed path.
    pub policy: crate::domain::policy::Policy,
    /// The profiles a submitted job may name (`profiles`; always including `profile`, the
    /// one a job that names none runs with).
    pub profiles: Vec<String>,
    /// Most of this workspace's jobs running at once (submitted jobs, candidate
    /// verifications and validation tests together; default `max_concurrent_verifications`).
    pub max_running_jobs: usize,
    /// Most of them waiting for a slot; one more is refused `resource_exhausted`.
    pub max_queued_jobs: usize,
    /// How delivered candidates land ([`History`]).
    pub history: History,
    /// Where this workspace's events are pushed, signed (`[[workspaces.<id>.webhooks]]`).
    pub webhooks: Vec<webhooks::Webhook>,
}

/// Who a bearer token authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSubject {
    Member {
        member_id: String,
    },
    Run {
        run_id: String,
        workspace_id: String,
    },
}

/// A configured token: the SHA-256 of the bearer secret, never the secret itself.
#[derive(Debug, Clone)]
pub struct Token {
    pub sha256: [u8; 32],
    pub subject: TokenSubject,
}

/// The loaded configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub listen: String,
    /// When set, `/metrics` is served only on this address (not on `listen`).
    pub metrics_listen: Option<String>,
    /// Where browsers reach the daemon (a TLS proxy in front of `listen`, say). When it is
    /// `https://`, the web page's session cookie is `Secure`.
    pub public_url: Option<String>,
    pub evidence_ttl: std::time::Duration,
    pub maintenance_interval: std::time::Duration,
    /// How long an engine may stay unreachable before recovery settles its jobs as `error`
    /// ("engine lost") instead of waiting for it (`engine_lost_after_seconds`).
    pub engine_lost_after: std::time::Duration,
    pub max_concurrent_verifications: usize,
    pub checkout_filesystem: CheckoutFilesystem,
    /// New work is refused while the data dir's filesystem has less free space than this
    /// (plus the job's own `disk_bytes`).
    pub min_free_bytes: u64,
    /// Bound of the warm tree cache that overlay checkouts are made from; 0 turns it off
    /// (every job then stages its whole tree).
    pub tree_cache_bytes: u64,
    /// How long one-shot `airlock run` results are kept.
    pub run_retention: std::time::Duration,
    /// How long a claim that ended (released, revoked, expired) is kept past its expiry, with
    /// its events and contentions.
    pub claim_retention: std::time::Duration,
    /// How long a `patch.validate` result can be applied.
    pub validation_ttl: std::time::Duration,
    /// Timeout of each of a proposal's `expected_tests` in `patch.validate`.
    pub expected_test_timeout_seconds: u64,
    /// Most concurrent HTTP connections `airlock serve` keeps open.
    pub max_connections: usize,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: std::time::Duration,
    /// Time a client has to send a request's body once its headers arrived.
    pub body_read_timeout: std::time::Duration,
    /// A keep-alive connection with no request in progress for this long is closed.
    pub keep_alive_idle: std::time::Duration,
    /// An MCP session that sees no request for this long is closed (`mcp_session_idle_seconds`).
    pub mcp_session_idle: std::time::Duration,
    /// Largest patch `proposal.create` and `proposal.attach_patch` accept, in bytes (the
    /// request body limit of those two methods is derived from it: see
    /// [`crate::limits::patch_body_limit`]).
    pub max_patch_bytes: usize,
    pub profiles: BTreeMap<String, Profile>,
    pub workspaces: BTreeMap<String, Workspace>,
    pub tokens: Vec<Token>,
    /// `[[engines]]`; empty: the local socket (or `DOCKER_HOST`) is the one engine.
    pub engines: Vec<engines::EngineConfig>,
    /// The Ed25519 private key (PKCS#8 PEM, mode 0600) attestations are signed with; none:
    /// nothing is signed (see [`crate::attest`]).
    pub signing_key: Option<PathBuf>,
    /// Public keys (PEM) whose attestations still verify: the keys of earlier rotations.
    pub verification_keys: Vec<PathBuf>,
    /// The verifier id attestations name (`verifier_id`; default [`DEFAULT_VERIFIER_ID`]).
    pub verifier_id: String,
    /// The only destinations a dependency fetch may reach (`[egress] allow`).
    pub egress: crate::deps::egress::Allowlist,
    /// The bounds of dependency fetches and sets (`[dependencies]`).
    pub dependencies: dependencies::DependencyBounds,
    /// What fetches trust for TLS besides their image (`dependencies.ca_bundle`).
    pub fetch_trust: dependencies::FetchTrust,
}

impl Config {
    /// Built-in defaults: the [`default_data_dir`] and the built-in profiles.
    pub fn builtin() -> Config {
        Self::from_raw(RawConfig::default()).expect("built-in defaults are valid")
    }

    /// Loads `path`, or the built-in defaults when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            return Ok(Self::builtin());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })
    }

    /// Parses TOML text. Unknown keys are errors that name the key.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            message: e.to_string().trim().to_string(),
        })?;
        Self::from_raw(raw)
    }

    fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        let mut merged = builtin::profiles();
        merged.extend(raw.profiles);
        let runtime = profile::parse_runtime("runtime", raw.runtime.as_deref())?;
        let mut profiles = BTreeMap::new();
        for (name, p) in merged {
            let resolved = resolve_profile(&name, p, runtime)?;
            profiles.insert(name, resolved);
        }
        let mut workspaces = BTreeMap::new();
        for (id, w) in raw.workspaces {
            if !is_identifier(&id) {
                return Err(ConfigError::Invalid {
                    field: format!("workspaces.{id}"),
                    message: "workspace ids use 1..=128 letters, digits, '_', '-' or '.'".into(),
                });
            }
            let profile = w.profile.unwrap_or_else(|| DEFAULT_PROFILE.to_string());
            if !profiles.contains_key(&profile) {
                return Err(ConfigError::Invalid {
                    field: format!("workspaces.{id}.profile"),
                    message: format!("unknown profile {profile:?}"),
                });
            }
            for m in w.members.keys() {
                if !is_identifier(m) {
                    return Err(ConfigError::Invalid {
                        field: format!("workspaces.{id}.members.{m}"),
                        message: "member ids use 1..=128 letters, digits, '_', '-' or '.'".into(),
                    });
                }
            }
            let repo = match (w.repo, &w.worktree) {
                (_, Some(t)) if !t.is_absolute() => {
                    return Err(ConfigError::Invalid {
                        field: format!("workspaces.{id}.worktree"),
                        message: format!("{} must be an absolute path", t.display()),
                    });
                }
                (Some(r), Some(t)) if r != *t => {
                    return Err(ConfigError::Invalid {
                        field: format!("workspaces.{id}.repo"),
                        message: format!(
                            "a governed workspace's repository is its worktree {}; leave repo out or set it to the same path",
                            t.display()
                        ),
                    });
                }
                (Some(r), _) => r,
                (None, Some(t)) => t.clone(),
                (None, None) => {
                    return Err(ConfigError::Invalid {
                        field: format!("workspaces.{id}.repo"),
                        message: "a workspace needs repo (or worktree, for the governed path)"
                            .into(),
                    });
                }
            };
            let roles = governance::roles(&id, w.roles)?;
            let policy = governance::policy(&id, w.policy, |p| profiles.contains_key(p))?;
            let mut allowed = vec![profile.clone()];
            for (i, p) in w.profiles.unwrap_or_default().into_iter().enumerate() {
                if !profiles.contains_key(&p) {
                    return Err(ConfigError::Invalid {
                        field: format!("workspaces.{id}.profiles[{i}]"),
                        message: format!("unknown profile {p:?}"),
                    });
                }
                if !allowed.contains(&p) {
                    allowed.push(p);
                }
            }
            let max_running_jobs = w
                .max_running_jobs
                .unwrap_or(raw.max_concurrent_verifications.unwrap_or(2))
                .min(*limits::MAX_RUNNING_JOBS.end());
            if !limits::MAX_RUNNING_JOBS.contains(&max_running_jobs) {
                return Err(bound(
                    &format!("workspaces.{id}.max_running_jobs"),
                    max_running_jobs,
                    &limits::MAX_RUNNING_JOBS,
                ));
            }
            let max_queued_jobs = w.max_queued_jobs.unwrap_or(limits::DEFAULT_MAX_QUEUED_JOBS);
            if !limits::MAX_QUEUED_JOBS.contains(&max_queued_jobs) {
                return Err(bound(
                    &format!("workspaces.{id}.max_queued_jobs"),
                    max_queued_jobs,
                    &limits::MAX_QUEUED_JOBS,
                ));
            }
            let hooks = webhooks::parse(&id, w.webhooks)?;
            workspaces.insert(
                id.clone(),
                Workspace {
                    id,
                    repo,
                    worktree: w.worktree,
                    profile,
                    members: w.members,
                    distinct_approver: w.distinct_approver.unwrap_or(true),
                    roles,
                    policy,
                    profiles: allowed,
                    max_running_jobs,
                    max_queued_jobs,
                    history: w.history.unwrap_or_default(),
                    webhooks: hooks,
                },
            );
        }
        let mut tokens = Vec::new();
        for (i, t) in raw.tokens.into_iter().enumerate() {
            let field = |k: &str| format!("tokens[{i}].{k}");
            let bytes = hex::decode(&t.sha256)
                .ok()
                .filter(|b| b.len() == 32)
                .ok_or_else(|| ConfigError::Invalid {
                    field: field("sha256"),
                    message: "must be the 64-hex-digit SHA-256 of the bearer token".into(),
                })?;
            let subject = match (t.member_id, t.run_id, t.workspace_id) {
                (Some(member_id), None, None) => TokenSubject::Member { member_id },
                (None, Some(run_id), Some(workspace_id)) => {
                    if !workspaces.contains_key(&workspace_id) {
                        return Err(ConfigError::Invalid {
                            field: field("workspace_id"),
                            message: format!("unknown workspace {workspace_id:?}"),
                        });
                    }
                    TokenSubject::Run {
                        run_id,
                        workspace_id,
                    }
                }
                _ => {
                    return Err(ConfigError::Invalid {
                        field: format!("tokens[{i}]"),
                        message: "needs either member_id, or run_id together with workspace_id"
                            .into(),
                    });
                }
            };
            let mut sha256 = [0u8; 32];
            sha256.copy_from_slice(&bytes);
            if let Some(j) = tokens.iter().position(|t: &Token| t.sha256 == sha256) {
                return Err(ConfigError::Invalid {
                    field: field("sha256"),
                    message: format!(
                        "is the same hash as tokens[{j}].sha256; one bearer token must name exactly one subject"
                    ),
                });
            }
            tokens.push(Token { sha256, subject });
        }
        let days = raw.evidence_ttl_days.unwrap_or(DEFAULT_EVIDENCE_TTL_DAYS);
        if !limits::EVIDENCE_TTL_DAYS.contains(&days) {
            return Err(bound("evidence_ttl_days", days, &limits::EVIDENCE_TTL_DAYS));
        }
        let interval = raw
            .maintenance_interval_seconds
            .unwrap_or(DEFAULT_MAINTENANCE_INTERVAL_SECONDS);
        if !limits::MAINTENANCE_INTERVAL_SECONDS.contains(&interval) {
            return Err(bound(
                "maintenance_interval_seconds",
                interval,
                &limits::MAINTENANCE_INTERVAL_SECONDS,
            ));
        }
        let lost_after = raw
            .engine_lost_after_seconds
            .unwrap_or(engines::DEFAULT_ENGINE_LOST_AFTER_SECONDS);
        if !engines::ENGINE_LOST_AFTER_SECONDS.contains(&lost_after) {
            return Err(bound(
                "engine_lost_after_seconds",
                lost_after,
                &engines::ENGINE_LOST_AFTER_SECONDS,
            ));
        }
        let max_concurrent = raw.max_concurrent_verifications.unwrap_or(2);
        if !limits::MAX_CONCURRENT_VERIFICATIONS.contains(&max_concurrent) {
            return Err(bound(
                "max_concurrent_verifications",
                max_concurrent,
                &limits::MAX_CONCURRENT_VERIFICATIONS,
            ));
        }
        let retention_days = raw.run_retention_days.unwrap_or(DEFAULT_RUN_RETENTION_DAYS);
        if !limits::RUN_RETENTION_DAYS.contains(&retention_days) {
            return Err(bound(
                "run_retention_days",
                retention_days,
                &limits::RUN_RETENTION_DAYS,
            ));
        }
        let governed = governance::options(
            raw.max_patch_bytes,
            raw.claim_retention_days,
            raw.validation_ttl_seconds,
            raw.expected_test_timeout_seconds,
        )?;
        let tree_cache_bytes = raw
            .tree_cache_bytes
            .unwrap_or(limits::DEFAULT_TREE_CACHE_BYTES);
        if tree_cache_bytes != 0
            && !(limits::MIN_TREE_CACHE_BYTES..=limits::MAX_TREE_CACHE_BYTES)
                .contains(&tree_cache_bytes)
        {
            return Err(ConfigError::Invalid {
                field: "tree_cache_bytes".into(),
                message: format!(
                    "{tree_cache_bytes} must be 0 (no cache) or between {} and {}",
                    limits::MIN_TREE_CACHE_BYTES,
                    limits::MAX_TREE_CACHE_BYTES
                ),
            });
        }
        let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if !(1..=limits::MAX_CONNECTIONS_BOUND).contains(&max_connections) {
            return Err(ConfigError::Invalid {
                field: "max_connections".into(),
                message: format!(
                    "{max_connections} must be between 1 and {}",
                    limits::MAX_CONNECTIONS_BOUND
                ),
            });
        }
        let seconds = |field: &str, v: Option<u64>, default: u64| {
            let v = v.unwrap_or(default);
            if (1..=limits::MAX_HTTP_TIMEOUT_SECONDS).contains(&v) {
                Ok(std::time::Duration::from_secs(v))
            } else {
                Err(ConfigError::Invalid {
                    field: field.into(),
                    message: format!(
                        "{v} must be between 1 and {}",
                        limits::MAX_HTTP_TIMEOUT_SECONDS
                    ),
                })
            }
        };
        let header_read_timeout = seconds(
            "header_read_timeout_seconds",
            raw.header_read_timeout_seconds,
            limits::DEFAULT_HEADER_READ_TIMEOUT_SECONDS,
        )?;
        let body_read_timeout = seconds(
            "body_read_timeout_seconds",
            raw.body_read_timeout_seconds,
            limits::DEFAULT_BODY_READ_TIMEOUT_SECONDS,
        )?;
        let keep_alive_idle = seconds(
            "keep_alive_idle_seconds",
            raw.keep_alive_idle_seconds,
            limits::DEFAULT_KEEP_ALIVE_IDLE_SECONDS,
        )?;
        let mcp_session_idle = seconds(
            "mcp_session_idle_seconds",
            raw.mcp_session_idle_seconds,
            limits::DEFAULT_MCP_SESSION_IDLE_SECONDS,
        )?;
        let public_url = raw.public_url.map(check_public_url).transpose()?;
        let engines = engines::parse(raw.engines, raw.checkout_filesystem.unwrap_or_default())?;
        engines::check_profile_labels(&engines, &profiles)?;
        let absolute = |field: String, p: &Path| {
            if p.is_absolute() {
                Ok(())
            } else {
                Err(ConfigError::Invalid {
                    field,
                    message: format!("{} must be an absolute path", p.display()),
                })
            }
        };
        if let Some(k) = &raw.signing_key {
            absolute("signing_key".into(), k)?;
        }
        if raw.verification_keys.len() > limits::MAX_VERIFICATION_KEYS {
            return Err(ConfigError::Invalid {
                field: "verification_keys".into(),
                message: format!(
                    "{} keys; the limit is {}",
                    raw.verification_keys.len(),
                    limits::MAX_VERIFICATION_KEYS
                ),
            });
        }
        for (i, k) in raw.verification_keys.iter().enumerate() {
            absolute(format!("verification_keys[{i}]"), k)?;
        }
        let verifier_id = raw
            .verifier_id
            .unwrap_or_else(|| DEFAULT_VERIFIER_ID.to_string());
        if verifier_id.is_empty()
            || verifier_id.len() > limits::MAX_VERIFIER_ID_BYTES
            || !verifier_id.contains(':')
            || verifier_id
                .chars()
                .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(ConfigError::Invalid {
                field: "verifier_id".into(),
                message: format!(
                    "must be a URI (scheme:rest) of 1..={} bytes without spaces or control characters",
                    limits::MAX_VERIFIER_ID_BYTES
                ),
            });
        }
        let egress = dependencies::egress(raw.egress)?;
        let (dependency_bounds, fetch_trust) = dependencies::bounds(raw.dependencies)?;
        if egress.0.is_empty()
            && let Some((name, _)) = profiles.iter().find(|(_, p)| !p.dependencies.is_empty())
        {
            return Err(ConfigError::Invalid {
                field: format!("profiles.{name}.dependencies"),
                message: "a profile with dependencies needs [egress] allow: the registry hosts (HOST:PORT) its fetches may reach; nothing else is reachable".into(),
            });
        }
        Ok(Config {
            egress,
            dependencies: dependency_bounds,
            fetch_trust,
            engines,
            signing_key: raw.signing_key,
            verification_keys: raw.verification_keys,
            verifier_id,
            public_url,
            max_patch_bytes: governed.max_patch_bytes,
            header_read_timeout,
            body_read_timeout,
            keep_alive_idle,
            mcp_session_idle,
            checkout_filesystem: raw.checkout_filesystem.unwrap_or_default(),
            min_free_bytes: raw.min_free_bytes.unwrap_or(limits::DEFAULT_MIN_FREE_BYTES),
            tree_cache_bytes,
            run_retention: std::time::Duration::from_secs(retention_days * 86_400),
            claim_retention: governed.claim_retention,
            validation_ttl: governed.validation_ttl,
            expected_test_timeout_seconds: governed.expected_test_timeout_seconds,
            max_connections,
            max_concurrent_verifications: max_concurrent,
            data_dir: raw.data_dir.unwrap_or_else(default_data_dir),
            listen: raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_string()),
            metrics_listen: raw.metrics_listen,
            evidence_ttl: std::time::Duration::from_secs(days * 86_400),
            maintenance_interval: std::time::Duration::from_secs(interval),
            engine_lost_after: std::time::Duration::from_secs(lost_after),
            profiles,
            workspaces,
            tokens,
        })
    }

    /// Looks up a profile by name.
    pub fn profile(&self, name: &str) -> Result<&Profile, ConfigError> {
        self.profiles
            .get(name)
            .ok_or_else(|| ConfigError::UnknownProfile {
                name: name.to_string(),
                known: self.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
            })
    }
}

/// Ids used in refs, paths and config keys: 1..=128 of `[A-Za-z0-9_.-]`, not starting with '.'
/// or '-'.
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !s.contains("..")
}

/// `field: <v> must be between <lo> and <hi>`.
pub(crate) fn bound<T: std::fmt::Display>(
    field: &str,
    v: T,
    range: &std::ops::RangeInclusive<T>,
) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: format!("{v} must be between {} and {}", range.start(), range.end()),
    }
}

#[cfg(test)]
mod tests;

/// `public_url`: an absolute `http://` or `https://` URL of bounded length, no whitespace.
fn check_public_url(url: String) -> Result<String, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        field: "public_url".into(),
        message,
    };
    if url.len() > limits::MAX_PUBLIC_URL_BYTES {
        return Err(invalid(format!(
            "public_url is {} bytes; it may be at most {}",
            url.len(),
            limits::MAX_PUBLIC_URL_BYTES
        )));
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host)
            if !host.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Ok(url)
        }
        _ => Err(invalid(format!(
            "public_url {url:?} must be an http:// or https:// URL with a host"
        ))),
    }
}
