//! `[[workspaces.<id>.webhooks]]`: where a workspace's events are pushed, signed. Each
//! subscription is named by the digest of its workspace, URL and event kinds, so editing any
//! of them makes a new subscription (which starts at the log's end; the old one's undelivered
//! events are not sent to the new URL).

use super::ConfigError;
use crate::limits;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    url: String,
    events: Vec<String>,
    secret: Option<String>,
    secret_file: Option<PathBuf>,
    max_attempts: Option<u32>,
    timeout_seconds: Option<u64>,
    /// Extra PEM roots an `https://` receiver's certificate may chain to (beside the host's).
    ca_file: Option<PathBuf>,
}

/// A webhook's HMAC key: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Where a receiver is: scheme, host, port and the request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub target: String,
}

/// One subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// `wh_` and 16 hex digits of sha256(workspace, url, events).
    pub id: String,
    pub url: String,
    pub endpoint: Endpoint,
    /// Event kinds, as on the event stream, sorted.
    pub events: Vec<String>,
    pub secret: Secret,
    pub max_attempts: u32,
    pub timeout: std::time::Duration,
    /// PEM roots from `ca_file`, read at start-up.
    pub extra_roots: Option<Vec<u8>>,
}

/// `url` as an endpoint: `http://` or `https://`, a host, an optional port, no user info, no
/// fragment.
pub fn endpoint(url: &str) -> Result<Endpoint, String> {
    if url.len() > limits::MAX_WEBHOOK_URL_BYTES {
        return Err(format!(
            "is {} bytes; the limit is {}",
            url.len(),
            limits::MAX_WEBHOOK_URL_BYTES
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{url:?} holds whitespace or a control character"));
    }
    let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(r), _) => (true, r),
        (_, Some(r)) => (false, r),
        _ => return Err(format!("{url:?} must start with http:// or https://")),
    };
    if url.contains('#') {
        return Err(format!("{url:?} has a fragment; a receiver never sees one"));
    }
    let (authority, target) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return Err(format!(
            "{url:?} carries user information; webhooks are signed with their secret instead"
        ));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            let port = p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{url:?} has port {p:?}; a port is 1..=65535"))?;
            (h, port)
        }
        _ => (authority, if tls { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{url:?} names no host"));
    }
    Ok(Endpoint {
        tls,
        host: host.to_string(),
        port,
        target,
    })
}

fn read_bounded(field: &str, path: &PathBuf, max: usize) -> Result<Vec<u8>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        field: field.into(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    if !meta.is_file() || meta.len() > max as u64 {
        return Err(invalid(format!(
            "{} must be a file of at most {max} bytes",
            path.display()
        )));
    }
    std::fs::read(path).map_err(|e| invalid(format!("{}: {e}", path.display())))
}

/// The subscriptions of workspace `ws`, checked.
pub(super) fn parse(ws: &str, raw: Vec<RawWebhook>) -> Result<Vec<Webhook>, ConfigError> {
    if raw.len() > limits::MAX_WEBHOOKS_PER_WORKSPACE {
        return Err(ConfigError::Invalid {
            field: format!("workspaces.{ws}.webhooks"),
            message: format!(
                "{} subscriptions; a workspace may have at most {}",
                raw.len(),
                limits::MAX_WEBHOOKS_PER_WORKSPACE
            ),
        });
    }
    let mut out: Vec<Webhook> = Vec::new();
    for (i, w) in raw.into_iter().enumerate() {
        let field = |k: &str| format!("workspaces.{ws}.webhooks[{i}].{k}");
        let invalid = |k: &str, message: String| ConfigError::Invalid {
            field: field(k),
            message,
        };
        let endpoint = endpoint(&w.url).map_err(|m| invalid("url", m))?;
        if w.events.is_empty() {
            return Err(invalid(
                "events",
                "names no event kind; list the kinds to push, e.g. [\"job.settled\"]".into(),
            ));
        }
        let mut events = Vec::new();
        for (j, k) in w.events.iter().enumerate() {
            crate::domain::event_kind::check_filter(&format!("events[{j}]"), k)
                .map_err(|m| invalid("events", m))?;
            if !events.contains(k) {
                events.push(k.clone());
            }
        }
        events.sort();
        let secret = match (w.secret, &w.secret_file) {
            (Some(s), None) => s.into_bytes(),
            (None, Some(p)) => {
                let mut b =
                    read_bounded(&field("secret_file"), p, limits::MAX_WEBHOOK_SECRET_BYTES)?;
                while b.last().is_some_and(|c| c.is_ascii_whitespace()) {
                    b.pop();
                }
                b
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "secret",
                    "give secret or secret_file, not both".into(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "secret",
                    "is missing: every delivery is signed; give secret or secret_file".into(),
                ));
            }
        };
        if !(limits::MIN_WEBHOOK_SECRET_BYTES..=limits::MAX_WEBHOOK_SECRET_BYTES)
            .contains(&secret.len())
        {
            return Err(invalid(
                "secret",
                format!(
                    "is {} bytes; a secret is {}..={} bytes",
                    secret.len(),
                    limits::MIN_WEBHOOK_SECRET_BYTES,
                    limits::MAX_WEBHOOK_SECRET_BYTES
                ),
            ));
        }
        let max_attempts = w.max_attempts.unwrap_or(limits::DEFAULT_WEBHOOK_ATTEMPTS);
        if !limits::WEBHOOK_ATTEMPTS.contains(&max_attempts) {
            return Err(super::bound(
                &field("max_attempts"),
                max_attempts,
                &limits::WEBHOOK_ATTEMPTS,
            ));
        }
        let timeout = w
            .timeout_seconds
            .unwrap_or(limits::DEFAULT_WEBHOOK_TIMEOUT_SECONDS);
        if !limits::WEBHOOK_TIMEOUT_SECONDS.contains(&timeout) {
            return Err(super::bound(
                &field("timeout_seconds"),
                timeout,
                &limits::WEBHOOK_TIMEOUT_SECONDS,
            ));
        }
        let extra_roots = w
            .ca_file
            .as_ref()
            .map(|p| read_bounded(&field("ca_file"), p, limits::MAX_CA_BUNDLE_BYTES as usize))
            .transpose()?;
        let mut h = Sha256::new();
        for part in [ws, w.url.as_str()]
            .into_iter()
            .chain(events.iter().map(String::as_str))
        {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let id = format!("wh_{}", &hex::encode(h.finalize())[..16]);
        if out.iter().any(|o| o.id == id) {
            return Err(invalid(
                "url",
                format!("repeats webhook {id}: the same url and events twice"),
            ));
        }
        out.push(Webhook {
            id,
            url: w.url,
            endpoint,
            events,
            secret: Secret(secret),
            max_attempts,
            timeout: std::time::Duration::from_secs(timeout),
            extra_roots,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_endpoints_or_clear_errors() {
        let e = endpoint("https://ci.example/hooks/airlock?x=1").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.target.as_str()),
            (true, "ci.example", 443, "/hooks/airlock?x=1")
        );
        let e = endpoint("http://127.0.0.1:8080").unwrap();
        assert_eq!((e.tls, e.port, e.target.as_str()), (false, 8080, "/"));
        let e = endpoint("http://[::1]:9/h").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9));
        for (bad, says) in [
            ("ftp://x/", "must start with http"),
            ("http://u:p@x/", "user information"),
            ("http://x:0/", "port"),
            ("http://x:99999/", "port"),
            ("http:///h", "names no host"),
            ("http://x/#f", "fragment"),
            ("http://x/ y", "whitespace"),
        ] {
            let e = endpoint(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
