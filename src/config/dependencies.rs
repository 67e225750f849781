//! `[egress]`, `[dependencies]` and a profile's `dependencies`: the only destinations a
//! dependency fetch may reach, the bounds of fetches and sets, and which ecosystems a profile's
//! jobs get a dependency set for. Every value is checked here; a caller only names a profile.

use super::ConfigError;
use crate::deps::egress::{Allowlist, Destination};
use crate::deps::spec::Dependency;
use crate::limits;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEgress {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBounds {
    fetch_timeout_seconds: Option<u64>,
    max_set_bytes: Option<u64>,
    max_set_inodes: Option<u64>,
    max_concurrent_fetches: Option<usize>,
    cache_bytes: Option<u64>,
    ca_bundle: Option<std::path::PathBuf>,
}

/// A profile's `dependencies` entry: an ecosystem's name, or a table with its options.
#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum RawDependency {
    Name(String),
    Table(RawDependencyTable),
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDependencyTable {
    ecosystem: String,
    /// pip: the requirements file (default `requirements.txt`).
    requirements: Option<String>,
    /// pip: wheels only (default true); false lets pip build an sdist in the fetch sandbox.
    binary_only: Option<bool>,
    /// pip: every requirement needs a `--hash`.
    require_hashes: Option<bool>,
    /// npm: the lockfile (default `package-lock.json`).
    lockfile: Option<String>,
    /// generic: the set's name, files, command and environment.
    name: Option<String>,
    #[serde(default)]
    files: Vec<String>,
    #[serde(default)]
    fetch: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// The bounds of the dependency phase (`[dependencies]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DependencyBounds {
    pub fetch_timeout: std::time::Duration,
    pub max_set_bytes: u64,
    pub max_set_inodes: u64,
    pub max_concurrent_fetches: usize,
    pub cache_bytes: u64,
}

/// What a fetch trusts for TLS besides its image's own certificates: a PEM bundle of this
/// host (an organisation's CA, a TLS-inspecting egress), given to the fetch's tools only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTrust {
    pub ca_bundle: Option<std::path::PathBuf>,
}

impl Default for DependencyBounds {
    fn default() -> Self {
        DependencyBounds {
            fetch_timeout: std::time::Duration::from_secs(limits::DEFAULT_FETCH_TIMEOUT_SECONDS),
            max_set_bytes: limits::DEFAULT_MAX_SET_BYTES,
            max_set_inodes: limits::DEFAULT_MAX_SET_INODES,
            max_concurrent_fetches: limits::DEFAULT_MAX_CONCURRENT_FETCHES,
            cache_bytes: limits::DEFAULT_DEPENDENCY_CACHE_BYTES,
        }
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    v: Option<T>,
    default: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError> {
    let v = v.unwrap_or(default);
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(invalid(
            field,
            format!("{v} must be between {} and {}", range.start(), range.end()),
        ))
    }
}

pub(super) fn egress(raw: RawEgress) -> Result<Allowlist, ConfigError> {
    if raw.allow.len() > limits::MAX_EGRESS_ALLOW {
        return Err(invalid(
            "egress.allow",
            format!(
                "{} entries; the limit is {}",
                raw.allow.len(),
                limits::MAX_EGRESS_ALLOW
            ),
        ));
    }
    let mut out: Vec<Destination> = Vec::new();
    for (i, a) in raw.allow.iter().enumerate() {
        let d = Destination::parse(a).map_err(|m| invalid(format!("egress.allow[{i}]"), m))?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(Allowlist(out))
}

pub(super) fn bounds(raw: RawBounds) -> Result<(DependencyBounds, FetchTrust), ConfigError> {
    let d = DependencyBounds::default();
    let trust = match &raw.ca_bundle {
        None => FetchTrust::default(),
        Some(p) => {
            let field = "dependencies.ca_bundle";
            if !p.is_absolute() {
                return Err(invalid(
                    field,
                    format!("{} must be an absolute path", p.display()),
                ));
            }
            match std::fs::metadata(p) {
                Ok(m) if m.is_file() && m.len() <= limits::MAX_CA_BUNDLE_BYTES => {}
                Ok(m) if m.is_file() => {
                    return Err(invalid(
                        field,
                        format!(
                            "{} has {} bytes; the limit is {}",
                            p.display(),
                            m.len(),
                            limits::MAX_CA_BUNDLE_BYTES
                        ),
                    ));
                }
                Ok(_) => return Err(invalid(field, format!("{} is not a file", p.display()))),
                Err(e) => return Err(invalid(field, format!("{}: {e}", p.display()))),
            }
            FetchTrust {
                ca_bundle: Some(p.clone()),
            }
        }
    };
    let bounds = DependencyBounds {
        fetch_timeout: std::time::Duration::from_secs(in_range(
            "dependencies.fetch_timeout_seconds",
            raw.fetch_timeout_seconds,
            d.fetch_timeout.as_secs(),
            limits::FETCH_TIMEOUT_SECONDS,
        )?),
        max_set_bytes: in_range(
            "dependencies.max_set_bytes",
            raw.max_set_bytes,
            d.max_set_bytes,
            limits::MAX_SET_BYTES,
        )?,
        max_set_inodes: in_range(
            "dependencies.max_set_inodes",
            raw.max_set_inodes,
            d.max_set_inodes,
            limits::MAX_SET_INODES,
        )?,
        max_concurrent_fetches: in_range(
            "dependencies.max_concurrent_fetches",
            raw.max_concurrent_fetches,
            d.max_concurrent_fetches,
            limits::MAX_CONCURRENT_FETCHES,
        )?,
        cache_bytes: in_range(
            "dependencies.cache_bytes",
            raw.cache_bytes,
            d.cache_bytes,
            limits::DEPENDENCY_CACHE_BYTES,
        )?,
    };
    Ok((bounds, trust))
}

/// A profile's `dependencies`, each checked, naming `profiles.<name>.dependencies[i]...`.
pub(super) fn profile_dependencies(
    profile: &str,
    raw: Vec<RawDependency>,
) -> Result<Vec<Dependency>, ConfigError> {
    let mut out: Vec<Dependency> = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        let at = |key: &str| {
            if key.is_empty() {
                format!("profiles.{profile}.dependencies[{i}]")
            } else {
                format!("profiles.{profile}.dependencies[{i}].{key}")
            }
        };
        let from_table = matches!(r, RawDependency::Table(_));
        let table = match r {
            RawDependency::Name(n) => RawDependencyTable {
                ecosystem: n,
                requirements: None,
                binary_only: None,
                require_hashes: None,
                lockfile: None,
                name: None,
                files: vec![],
                fetch: vec![],
                env: BTreeMap::new(),
            },
            RawDependency::Table(t) => t,
        };
        let path = |key: &str, v: Option<String>, default: &str| -> Result<String, ConfigError> {
            let v = v.unwrap_or_else(|| default.to_string());
            crate::domain::path::check_repo_path(&v).map_err(|m| invalid(at(key), m))?;
            Ok(v)
        };
        let unused = |keys: &[(&str, bool)]| -> Result<(), ConfigError> {
            match keys.iter().find(|(_, set)| *set) {
                Some((k, _)) => Err(invalid(
                    at(k),
                    format!("{k} is not an option of the {} ecosystem", table.ecosystem),
                )),
                None => Ok(()),
            }
        };
        let generic_keys = [
            ("name", table.name.is_some()),
            ("files", !table.files.is_empty()),
            ("fetch", !table.fetch.is_empty()),
            ("env", !table.env.is_empty()),
        ];
        let d = match table.ecosystem.as_str() {
            "cargo" => {
                unused(&generic_keys)?;
                unused(&[
                    ("requirements", table.requirements.is_some()),
                    ("binary_only", table.binary_only.is_some()),
                    ("require_hashes", table.require_hashes.is_some()),
                    ("lockfile", table.lockfile.is_some()),
                ])?;
                Dependency::Cargo
            }
            "pip" => {
                unused(&generic_keys)?;
                unused(&[("lockfile", table.lockfile.is_some())])?;
                Dependency::Pip {
                    requirements: path(
                        "requirements",
                        table.requirements.clone(),
                        "requirements.txt",
                    )?,
                    binary_only: table.binary_only.unwrap_or(true),
                    require_hashes: table.require_hashes.unwrap_or(false),
                }
            }
            "npm" => {
                unused(&generic_keys)?;
                unused(&[
                    ("requirements", table.requirements.is_some()),
                    ("binary_only", table.binary_only.is_some()),
                    ("require_hashes", table.require_hashes.is_some()),
                ])?;
                Dependency::Npm {
                    lockfile: path("lockfile", table.lockfile.clone(), "package-lock.json")?,
                }
            }
            "generic" => {
                unused(&[
                    ("requirements", table.requirements.is_some()),
                    ("binary_only", table.binary_only.is_some()),
                    ("require_hashes", table.require_hashes.is_some()),
                    ("lockfile", table.lockfile.is_some()),
                ])?;
                let name = table
                    .name
                    .clone()
                    .ok_or_else(|| invalid(at("name"), "a generic dependency needs a name"))?;
                crate::deps::spec::check_generic(&name, &table.files, &table.fetch, &table.env)
                    .map_err(|(k, m)| invalid(at(&k), m))?;
                Dependency::Generic {
                    name,
                    files: table.files.clone(),
                    fetch: table.fetch.clone(),
                    env: table.env.clone(),
                }
            }
            other => {
                return Err(invalid(
                    at(if from_table { "ecosystem" } else { "" }),
                    format!("{other:?} is not an ecosystem: cargo, pip, npm or generic"),
                ));
            }
        };
        if out.iter().any(|o| o.name() == d.name()) {
            return Err(invalid(at(""), format!("{} is listed twice", d.name())));
        }
        out.push(d);
    }
    Ok(out)
}
