//! `[[engines]]`: the Docker engines jobs run on. Without any entry the local socket is the one
//! engine, exactly as before engines were configurable. A `tcp://` engine is another machine's
//! (or another daemon's): it shares no filesystem with Airlock, so its jobs' workspaces are
//! uploaded into volumes it holds, never bind-mounted.

use super::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;

/// Most `[[engines]]` entries.
pub const MAX_ENGINES: usize = 32;
pub use crate::limits::MAX_ENGINE_NAME_BYTES;
/// Most concurrent jobs one engine may be given.
pub const MAX_ENGINE_JOBS: usize = 256;
/// Seconds an engine may stay unreachable before its jobs are settled as lost, by default.
pub const DEFAULT_ENGINE_LOST_AFTER_SECONDS: u64 = 3600;
/// Allowed `engine_lost_after_seconds`: a minute to a week.
pub const ENGINE_LOST_AFTER_SECONDS: std::ops::RangeInclusive<u64> = 60..=604_800;
pub use crate::limits::MAX_ENGINE_LABELS;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngine {
    name: Option<String>,
    host: Option<String>,
    tls: Option<RawTls>,
    #[serde(default)]
    insecure_plaintext: bool,
    max_jobs: Option<usize>,
    #[serde(default)]
    labels: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// Where an engine listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineHost {
    /// A local socket: the engine shares this host's filesystem.
    Unix(PathBuf),
    /// `host:port` over TCP: the engine shares nothing with this host.
    Tcp { host: String, port: u16 },
}

impl EngineHost {
    /// Whether the engine is reached on this host's loopback (or its socket).
    pub fn is_loopback(&self) -> bool {
        match self {
            EngineHost::Unix(_) => true,
            EngineHost::Tcp { host, .. } => host
                .parse::<std::net::IpAddr>()
                .map(|ip| ip.is_loopback())
                .unwrap_or(host == "localhost"),
        }
    }
}

impl std::fmt::Display for EngineHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineHost::Unix(p) => write!(f, "unix://{}", p.display()),
            EngineHost::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
        }
    }
}

/// Mutual TLS: the CA the engine's certificate must chain to, and Airlock's client identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// One configured engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    pub name: String,
    pub host: EngineHost,
    /// Present for every `tcp://` engine but a loopback one with `insecure_plaintext`.
    pub tls: Option<EngineTls>,
    pub max_jobs: usize,
    pub labels: Vec<String>,
}

impl EngineConfig {
    /// Whether the engine's jobs get uploaded workspaces (it shares no filesystem with us).
    pub fn holds_workspaces(&self) -> bool {
        matches!(self.host, EngineHost::Tcp { .. })
    }
}

fn invalid(field: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

fn parse_host(field: String, host: &str) -> Result<EngineHost, ConfigError> {
    if let Some(path) = host.strip_prefix("unix://") {
        if !path.starts_with('/') {
            return Err(invalid(
                field,
                format!("{host:?}: a socket path is absolute"),
            ));
        }
        return Ok(EngineHost::Unix(PathBuf::from(path)));
    }
    let Some(addr) = host.strip_prefix("tcp://") else {
        return Err(invalid(
            field,
            format!("{host:?} is neither unix:///PATH nor tcp://HOST:PORT"),
        ));
    };
    let Some((h, port)) = addr.rsplit_once(':') else {
        return Err(invalid(field, format!("{host:?} names no port")));
    };
    let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
        invalid(
            field.clone(),
            format!("{host:?}: port {port:?} is not 1-65535"),
        )
    })?;
    let h = h.trim_start_matches('[').trim_end_matches(']');
    if h.is_empty() || h.contains('/') {
        return Err(invalid(field, format!("{host:?} names no host")));
    }
    Ok(EngineHost::Tcp {
        host: h.to_string(),
        port,
    })
}

pub(super) fn parse(
    raw: Vec<RawEngine>,
    checkouts: super::CheckoutFilesystem,
) -> Result<Vec<EngineConfig>, ConfigError> {
    if raw.len() > MAX_ENGINES {
        return Err(invalid(
            "engines".into(),
            format!("{} entries; at most {MAX_ENGINES}", raw.len()),
        ));
    }
    let mut engines: Vec<EngineConfig> = Vec::new();
    for (i, e) in raw.into_iter().enumerate() {
        let at = |key: &str| format!("engines[{i}].{key}");
        let name = e.name.ok_or_else(|| invalid(at("name"), "is required"))?;
        super::check_name(at("name"), &name, "engine name")?;
        if engines.iter().any(|o| o.name == name) {
            return Err(invalid(
                at("name"),
                format!("engine {name:?} is configured twice"),
            ));
        }
        let host_text = e.host.ok_or_else(|| invalid(at("host"), "is required"))?;
        let host = parse_host(at("host"), &host_text)?;
        let tls = match e.tls {
            None => None,
            Some(t) => Some(EngineTls {
                ca: t.ca.ok_or_else(|| invalid(at("tls.ca"), "is required"))?,
                cert: t
                    .cert
                    .ok_or_else(|| invalid(at("tls.cert"), "is required"))?,
                key: t.key.ok_or_else(|| invalid(at("tls.key"), "is required"))?,
            }),
        };
        match (&host, &tls) {
            (EngineHost::Unix(_), Some(_)) => {
                return Err(invalid(at("tls"), "a unix socket takes no TLS"));
            }
            (EngineHost::Unix(_), None) if e.insecure_plaintext => {
                return Err(invalid(
                    at("insecure_plaintext"),
                    "only a tcp:// engine can be plaintext",
                ));
            }
            (EngineHost::Tcp { .. }, Some(_)) if e.insecure_plaintext => {
                return Err(invalid(
                    at("insecure_plaintext"),
                    "an engine is either TLS or plaintext",
                ));
            }
            (EngineHost::Tcp { .. }, None) if !e.insecure_plaintext => {
                return Err(invalid(
                    at("tls"),
                    format!(
                        "{host}: a tcp:// engine needs mutual TLS (tls = {{ ca, cert, key }}); plaintext only with insecure_plaintext = true on a loopback host"
                    ),
                ));
            }
            (EngineHost::Tcp { .. }, None) if !host.is_loopback() => {
                return Err(invalid(
                    at("insecure_plaintext"),
                    format!("{host} is not a loopback host: its engine needs TLS"),
                ));
            }
            _ => {}
        }
        let max_jobs = e
            .max_jobs
            .ok_or_else(|| invalid(at("max_jobs"), "is required"))?;
        if !(1..=MAX_ENGINE_JOBS).contains(&max_jobs) {
            return Err(invalid(
                at("max_jobs"),
                format!("{max_jobs} is not 1 to {MAX_ENGINE_JOBS}"),
            ));
        }
        if e.labels.len() > MAX_ENGINE_LABELS {
            return Err(invalid(
                at("labels"),
                format!("{} labels; at most {MAX_ENGINE_LABELS}", e.labels.len()),
            ));
        }
        for l in &e.labels {
            super::check_name(at("labels"), l, "label")?;
        }
        if matches!(host, EngineHost::Tcp { .. })
            && checkouts == super::CheckoutFilesystem::Directory
        {
            return Err(invalid(
                "checkout_filesystem".into(),
                format!(
                    "\"directory\" has no quota, and engine {name:?}'s uploaded workspaces need one (the profile's disk_bytes and inodes): use \"loop\""
                ),
            ));
        }
        engines.push(EngineConfig {
            name,
            host,
            tls,
            max_jobs,
            labels: e.labels,
        });
    }
    Ok(engines)
}

/// Refuses a profile whose `engine_labels` no engine carries all of: its jobs could never run.
/// Without `[[engines]]` the one local engine carries no labels.
pub(super) fn check_profile_labels(
    engines: &[EngineConfig],
    profiles: &std::collections::BTreeMap<String, super::Profile>,
) -> Result<(), ConfigError> {
    for (name, p) in profiles {
        if p.engine_labels.is_empty() {
            continue;
        }
        let carries = |e: &EngineConfig| p.engine_labels.iter().all(|l| e.labels.contains(l));
        if !engines.iter().any(carries) {
            return Err(invalid(
                format!("profiles.{name}.engine_labels"),
                format!(
                    "no engine carries all of {:?}{}",
                    p.engine_labels,
                    if engines.is_empty() {
                        " (without [[engines]] the local engine carries no labels)"
                    } else {
                        ""
                    }
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn refused(text: &str) -> (String, String) {
        match Config::parse(text) {
            Err(ConfigError::Invalid { field, message }) => (field, message),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn an_engine_entry_is_parsed_with_its_tls_identity() {
        let c = Config::parse(
            r#"
[[engines]]
name = "farm-1"
host = "tcp://10.0.0.7:2376"
max_jobs = 4
labels = ["toolchain"]
tls = { ca = "/etc/airlock/ca.pem", cert = "/etc/airlock/cert.pem", key = "/etc/airlock/key.pem" }
"#,
        )
        .unwrap();
        let e = &c.engines[0];
        assert_eq!(e.name, "farm-1");
        assert_eq!(e.host.to_string(), "tcp://10.0.0.7:2376");
        assert!(e.holds_workspaces());
        assert_eq!(e.max_jobs, 4);
        assert_eq!(
            e.tls.as_ref().unwrap().key.to_str(),
            Some("/etc/airlock/key.pem")
        );
        assert!(Config::parse("").unwrap().engines.is_empty());
        let local = Config::parse(
            "[[engines]]\nname = \"local\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = 2\n",
        )
        .unwrap();
        assert!(!local.engines[0].holds_workspaces());
    }

    #[test]
    fn bad_engine_entries_name_the_field_and_the_bound() {
        let base = |extra: &str| format!("[[engines]]\nname = \"e\"\nmax_jobs = 1\n{extra}\n");
        let cases = [
            (
                base("host = \"tcp://10.0.0.7:2376\""),
                "engines[0].tls",
                "mutual TLS",
            ),
            (
                base("host = \"tcp://10.0.0.7:2376\"\ninsecure_plaintext = true"),
                "engines[0].insecure_plaintext",
                "not a loopback host",
            ),
            (
                base("host = \"unix:///s\"\ninsecure_plaintext = true"),
                "engines[0].insecure_plaintext",
                "only a tcp://",
            ),
            (
                base("host = \"unix:///s\"\ntls = { ca = \"a\", cert = \"b\", key = \"c\" }"),
                "engines[0].tls",
                "no TLS",
            ),
            (
                base("host = \"tcp://10.0.0.7:2376\"\ntls = { ca = \"a\", cert = \"b\" }"),
                "engines[0].tls.key",
                "required",
            ),
            (base("host = \"http://x:1\""), "engines[0].host", "neither"),
            (base("host = \"tcp://x\""), "engines[0].host", "no port"),
            (base("host = \"tcp://x:0\""), "engines[0].host", "1-65535"),
            (
                base("host = \"tcp://x:70000\""),
                "engines[0].host",
                "1-65535",
            ),
            (base("host = \"unix://rel\""), "engines[0].host", "absolute"),
            (
                "[[engines]]\nname = \"e\"\nhost = \"unix:///s\"\nmax_jobs = 0\n".into(),
                "engines[0].max_jobs",
                "1 to 256",
            ),
            (
                "[[engines]]\nname = \"e\"\nhost = \"unix:///s\"\n".into(),
                "engines[0].max_jobs",
                "required",
            ),
            (
                "[[engines]]\nname = \"a b\"\nhost = \"unix:///s\"\nmax_jobs = 1\n".into(),
                "engines[0].name",
                "1 to 64 bytes",
            ),
            (
                base("host = \"unix:///s\"\nlabels = [\"\"]"),
                "engines[0].labels",
                "label",
            ),
            (
                format!(
                    "{}{}",
                    base("host = \"unix:///s\""),
                    base("host = \"unix:///t\"")
                ),
                "engines[1].name",
                "twice",
            ),
            (
                format!(
                    "checkout_filesystem = \"directory\"\n{}",
                    base("host = \"tcp://127.0.0.1:2375\"\ninsecure_plaintext = true")
                ),
                "checkout_filesystem",
                "no quota",
            ),
        ];
        for (text, field, says) in cases {
            let (f, m) = refused(&text);
            assert_eq!(f, field, "{text}: {m}");
            assert!(m.contains(says), "{text}: {m}");
        }
        let plain = Config::parse(&base(
            "host = \"tcp://127.0.0.1:2375\"\ninsecure_plaintext = true",
        ))
        .unwrap();
        assert!(plain.engines[0].tls.is_none());
    }

    #[test]
    fn engine_lost_after_seconds_is_bounded() {
        assert_eq!(
            Config::parse("").unwrap().engine_lost_after.as_secs(),
            super::DEFAULT_ENGINE_LOST_AFTER_SECONDS
        );
        assert_eq!(
            Config::parse("engine_lost_after_seconds = 60")
                .unwrap()
                .engine_lost_after
                .as_secs(),
            60
        );
        for bad in [59, 604_801] {
            let (f, m) = refused(&format!("engine_lost_after_seconds = {bad}"));
            assert_eq!(f, "engine_lost_after_seconds");
            assert!(m.contains("between 60 and 604800"), "{m}");
        }
    }

    #[test]
    fn a_profile_requires_labels_some_engine_carries() {
        let engines = "[[engines]]\nname = \"a\"\nhost = \"unix:///s\"\nmax_jobs = 1\nlabels = [\"gpu\", \"big\"]\n";
        let profile = |labels: &str| {
            format!("[profiles.p]\nimage = \"airlock/minimal:latest\"\nengine_labels = {labels}\n")
        };
        let c = Config::parse(&format!("{}{engines}", profile("[\"gpu\"]"))).unwrap();
        assert_eq!(c.profiles["p"].engine_labels, ["gpu"]);
        assert!(c.profiles["default"].engine_labels.is_empty());
        for (text, says) in [
            (
                format!("{}{engines}", profile("[\"gpu\", \"arm\"]")),
                "no engine carries all of [\"gpu\", \"arm\"]",
            ),
            (
                profile("[\"gpu\"]"),
                "without [[engines]] the local engine carries no labels",
            ),
            (
                format!("{}{engines}", profile("[\"a b\"]")),
                "label \"a b\" must be",
            ),
            (
                format!(
                    "{}{engines}",
                    profile(&format!("{:?}", vec!["x"; super::MAX_ENGINE_LABELS + 1]))
                ),
                "the limit is 16",
            ),
        ] {
            let (f, m) = refused(&text);
            assert_eq!(f, "profiles.p.engine_labels", "{text}: {m}");
            assert!(m.contains(says), "{text}: {m}");
        }
    }
}
