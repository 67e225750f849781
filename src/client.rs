//! `airlock call`: a client for every API method, for scripts and humans. It posts one JSON
//! object to `<url>/api/v1/<method>` with the bearer token from `AIRLOCK_TOKEN`, prints the
//! JSON answer, and maps the error envelope's code to an exit code, so a script can tell a
//! refusal from an outage without parsing text.

use serde_json::Value;
use std::time::Duration;

/// Address used when neither `--url` nor `AIRLOCK_URL` names one (the daemon's default).
pub const DEFAULT_URL: &str = "http://127.0.0.1:7700";
/// Longest a call waits for its answer: the daemon's header, body and call budgets, with room.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer read.
pub const MAX_RESPONSE_BYTES: u64 = 256 * 1024 * 1024;

/// Exit code of `airlock call` when the daemon could not be reached or did not answer in time:
/// the same as `unavailable`, so a script retries either.
pub const EXIT_RETRY: u8 = 7;

/// Why a call got no answer to print.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Connection refused or reset, host not found, or no answer within [`CALL_TIMEOUT`]:
    /// retrying may succeed.
    #[error("{0}")]
    Unreachable(String),
    /// A usage or protocol error: retrying the same call will not help.
    #[error("{0}")]
    Failed(String),
    /// The daemon answered with its error envelope.
    #[error("{code} (HTTP {status}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
}

impl CallError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CallError::Unreachable(_) => EXIT_RETRY,
            CallError::Failed(_) => 1,
            CallError::Api { code, .. } => exit_code(code),
        }
    }
}

/// Whether a transport error means the daemon was not there (or too slow), not that the call
/// was wrong.
fn unreachable(e: &ureq::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        ureq::Error::Timeout(_) | ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::NotConnected
                | K::TimedOut
                | K::UnexpectedEof
                | K::BrokenPipe
                | K::AddrNotAvailable
        ),
        _ => false,
    }
}

/// Exit codes of `airlock call`, by the error envelope's code.
pub fn exit_code(code: &str) -> u8 {
    match code {
        "invalid_argument" => 2,
        "unauthenticated" | "permission_denied" => 3,
        "not_found" | "method_not_allowed" => 4,
        "conflict" | "failed_precondition" => 5,
        "resource_exhausted" => 6,
        "unavailable" | "deadline_exceeded" => 7,
        _ => 1,
    }
}

/// A method name as the router knows them (`claim.acquire`): nothing else reaches the path.
pub fn check_method(m: &str) -> Result<(), String> {
    let ok = m.split_once('.').is_some_and(|(a, b)| {
        let word = |w: &str| {
            w.starts_with(|c: char| c.is_ascii_lowercase())
                && w.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        };
        word(a) && word(b)
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "METHOD {m:?} is not a method name like claim.acquire (lowercase words joined by one dot)"
        ))
    }
}

/// The request body from the command line: JSON text, `@FILE`, `-` (stdin), or `{}` when absent.
pub fn read_body(arg: Option<&str>) -> Result<Value, String> {
    let text = match arg {
        None => "{}".to_string(),
        Some("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| format!("BODY from stdin: {e}"))?;
            s
        }
        Some(a) if a.starts_with('@') => std::fs::read_to_string(&a[1..])
            .map_err(|e| format!("BODY {a}: cannot read {}: {e}", &a[1..]))?,
        Some(a) => a.to_string(),
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("BODY is not JSON: {e}"))?;
    if !v.is_object() {
        return Err("BODY must be one JSON object, e.g. '{\"workspace_id\": \"ws1\"}'".into());
    }
    Ok(v)
}

/// The daemon's address without a trailing `/`; only plain `http://` is spoken.
fn base_of(url: &str) -> Result<&str, CallError> {
    let base = url.trim_end_matches('/');
    if base.starts_with("http://") {
        Ok(base)
    } else {
        Err(CallError::Failed(format!(
            "url {url}: only http:// is supported (put a TLS proxy in front of airlock serve)"
        )))
    }
}

/// A transport error: a retry when the daemon was not there (or too slow), else a failure.
fn transport_error(base: &str, what: &str, e: ureq::Error) -> CallError {
    let msg = format!("{base}: {what}{e}");
    if unreachable(&e) {
        CallError::Unreachable(format!("{msg} (is airlock serve running there?)"))
    } else {
        CallError::Failed(msg)
    }
}

/// An agent that hands every status back (the envelope is read, not thrown), with the whole
/// exchange bounded by `timeout` when given (a followed log is not).
fn agent(timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_global(timeout)
        .build()
        .into()
}

/// An answer's body as text, at most [`MAX_RESPONSE_BYTES`].
fn read_answer(
    base: &str,
    resp: &mut ureq::http::Response<ureq::Body>,
) -> Result<String, CallError> {
    resp.body_mut()
        .with_config()
        .limit(MAX_RESPONSE_BYTES)
        .read_to_string()
        .map_err(|e| transport_error(base, "reading the answer: ", e))
}

/// A non-200 answer's error envelope as an error.
fn api_error(status: u16, text: &str) -> CallError {
    let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    CallError::Api {
        status,
        code: v["error"]["code"]
            .as_str()
            .unwrap_or("internal")
            .to_string(),
        message: v["error"]["message"].as_str().unwrap_or(text).to_string(),
    }
}

/// `GET <url><path>` with the bearer token.
fn get<'a>(
    settings: &'a Settings,
    path: &str,
    timeout: Option<Duration>,
) -> Result<(&'a str, ureq::http::Response<ureq::Body>), CallError> {
    let base = base_of(&settings.url)?;
    let resp = agent(timeout)
        .get(&format!("{base}{path}"))
        .header("Authorization", &format!("Bearer {}", settings.token))
        .call()
        .map_err(|e| transport_error(base, "", e))?;
    Ok((base, resp))
}

/// Posts `body` to `method`; returns the HTTP status and the JSON answer.
pub fn call(url: &str, token: &str, method: &str, body: &Value) -> Result<(u16, Value), CallError> {
    let base = base_of(url)?;
    let mut resp = agent(Some(CALL_TIMEOUT))
        .post(&format!("{base}/api/v1/{method}"))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .map_err(|e| transport_error(base, "", e))?;
    let status = resp.status().as_u16();
    let text = read_answer(base, &mut resp)?;
    let v = serde_json::from_str(&text).map_err(|e| {
        CallError::Failed(format!("{base}: the answer is not JSON ({e}): {text:.200}"))
    })?;
    Ok((status, v))
}

/// Where the client's settings file is when `--client-config` names none:
/// `$XDG_CONFIG_HOME/airlock/client.toml`, else `~/.config/airlock/client.toml`.
pub fn default_client_config() -> Option<std::path::PathBuf> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute());
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    xdg.or_else(|| home.map(|h| h.join(".config")))
        .map(|d| d.join("airlock").join("client.toml"))
}

/// The client settings file: `url` and `token_file` (a file holding the bearer token).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    url: Option<String>,
    token_file: Option<std::path::PathBuf>,
}

/// Where the daemon is and the token to show it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub url: String,
    pub token: String,
}

/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

fn read_token(path: &std::path::Path, named_by: &str) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{named_by} {}: {e}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(format!(
            "{named_by} {} must be a file of at most {MAX_TOKEN_FILE_BYTES} bytes",
            path.display()
        ));
    }
    let t =
        std::fs::read_to_string(path).map_err(|e| format!("{named_by} {}: {e}", path.display()))?;
    let t = t.trim().to_string();
    if t.is_empty() {
        return Err(format!("{named_by} {} is empty", path.display()));
    }
    Ok(t)
}

impl Settings {
    /// The settings, each from the first that gives it: the flag, the environment
    /// (`AIRLOCK_URL`, `AIRLOCK_TOKEN`), the client settings file, then the default URL (a
    /// token has no default).
    pub fn resolve(
        url_flag: Option<&str>,
        token_file_flag: Option<&std::path::Path>,
        config_flag: Option<&std::path::Path>,
    ) -> Result<Settings, String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let file = match config_flag {
            Some(p) => Some((p.to_path_buf(), true)),
            None => default_client_config().map(|p| (p, false)),
        };
        let file: ClientFile = match file {
            Some((p, named)) if named || p.exists() => {
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| format!("--client-config {}: {e}", p.display()))?;
                toml::from_str(&text)
                    .map_err(|e| format!("--client-config {}: {}", p.display(), e.message()))?
            }
            _ => ClientFile::default(),
        };
        let url = url_flag
            .map(str::to_string)
            .or_else(|| env("AIRLOCK_URL"))
            .or(file.url)
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        let token = match (token_file_flag, env("AIRLOCK_TOKEN"), &file.token_file) {
            (Some(p), _, _) => read_token(p, "--token-file")?,
            (None, Some(t), _) => t,
            (None, None, Some(p)) => read_token(p, "token_file")?,
            (None, None, None) => {
                return Err(
                    "no token: set AIRLOCK_TOKEN, pass --token-file FILE, or name token_file in the client settings file"
                        .into(),
                );
            }
        };
        Ok(Settings { url, token })
    }
}

/// `GET <url><path>` as text (a job's log): the body, or the error envelope as an error.
pub fn get_text(settings: &Settings, path: &str) -> Result<String, CallError> {
    let (base, mut resp) = get(settings, path, Some(CALL_TIMEOUT))?;
    let status = resp.status().as_u16();
    let text = read_answer(base, &mut resp)?;
    if status == 200 {
        Ok(text)
    } else {
        Err(api_error(status, &text))
    }
}

/// How a followed log ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEnd {
    /// The closing line named the job's settled state.
    Settled(String),
    /// The stream ended another way (the daemon stopping, the follower dropped, the
    /// connection cut): the job may still be running.
    Cut,
}

/// The closing line a followed log ends with.
const SETTLED_PREFIX: &str = "[airlock: job settled: ";

/// Follows `GET /api/v1/jobs/<job_id>/log?follow=1`, writing what arrives to `out` as it
/// arrives (nothing when `out` is `None`), until the stream ends.
pub fn follow_log(
    settings: &Settings,
    job_id: &str,
    mut out: Option<&mut dyn std::io::Write>,
) -> Result<FollowEnd, CallError> {
    if !job_id.starts_with("job_") || !job_id[4..].bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CallError::Failed(format!(
            "JOB_ID {job_id:?} is not a job id (job_ and 32 hex digits)"
        )));
    }
    let (base, mut resp) = get(
        settings,
        &format!("/api/v1/jobs/{job_id}/log?follow=1"),
        None,
    )?;
    let status = resp.status().as_u16();
    if status != 200 {
        let text = read_answer(base, &mut resp).unwrap_or_default();
        return Err(api_error(status, &text));
    }
    let mut reader = resp.body_mut().as_reader();
    // The last bytes seen, to find the closing line however the chunks fall.
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match std::io::Read::read(&mut reader, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => return Ok(FollowEnd::Cut),
        };
        if let Some(o) = out.as_deref_mut() {
            let _ = o.write_all(&buf[..n]);
            let _ = o.flush();
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 4096);
        }
    }
    let text = String::from_utf8_lossy(&tail);
    let last = text
        .trim_end_matches('\n')
        .rsplit('\n')
        .next()
        .unwrap_or("");
    Ok(
        match last
            .strip_prefix(SETTLED_PREFIX)
            .and_then(|r| r.strip_suffix(']'))
        {
            Some(state) => FollowEnd::Settled(state.to_string()),
            None => FollowEnd::Cut,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_bodies_and_exit_codes() {
        assert!(check_method("claim.acquire").is_ok());
        assert!(check_method("integration.cancel_verification").is_ok());
        for bad in [
            "",
            "claim",
            "claim.",
            ".x",
            "a.b.c",
            "../x",
            "Claim.acquire",
            "a/b.c",
            "a.b?x=1",
        ] {
            assert!(check_method(bad).is_err(), "{bad}");
        }
        assert_eq!(read_body(None).unwrap(), serde_json::json!({}));
        assert!(
            read_body(Some("[1]"))
                .unwrap_err()
                .contains("one JSON object")
        );
        assert!(read_body(Some("{")).unwrap_err().contains("not JSON"));
        assert!(
            read_body(Some("@/nonexistent/x.json"))
                .unwrap_err()
                .contains("cannot read")
        );
        assert_eq!(exit_code("invalid_argument"), 2);
        assert_eq!(exit_code("permission_denied"), 3);
        assert_eq!(exit_code("not_found"), 4);
        assert_eq!(exit_code("failed_precondition"), 5);
        assert_eq!(exit_code("unavailable"), 7);
        assert_eq!(exit_code("internal"), 1);
    }

    #[test]
    fn a_refused_connection_is_a_retry_and_a_bad_url_is_not() {
        // A port nothing listens on: bind one, then close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = call(
            &format!("http://127.0.0.1:{port}"),
            "t",
            "claim.list",
            &serde_json::json!({}),
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), EXIT_RETRY, "{e}");
        assert!(e.to_string().contains("is airlock serve running"), "{e}");
        let e = call("https://x", "t", "claim.list", &serde_json::json!({})).unwrap_err();
        assert_eq!(e.exit_code(), 1, "{e}");
    }
}
