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
}

impl CallError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CallError::Unreachable(_) => EXIT_RETRY,
            CallError::Failed(_) => 1,
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

/// Posts `body` to `method`; returns the HTTP status and the JSON answer.
pub fn call(url: &str, token: &str, method: &str, body: &Value) -> Result<(u16, Value), CallError> {
    let base = url.trim_end_matches('/');
    if !base.starts_with("http://") {
        return Err(CallError::Failed(format!(
            "--url {url}: only http:// is supported (put a TLS proxy in front of airlock serve)"
        )));
    }
    let transport = |what: &str, e: ureq::Error| {
        let msg = format!("{base}: {what}{e}");
        if unreachable(&e) {
            CallError::Unreachable(format!("{msg} (is airlock serve running there?)"))
        } else {
            CallError::Failed(msg)
        }
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(CALL_TIMEOUT))
        .build()
        .into();
    let mut resp = agent
        .post(&format!("{base}/api/v1/{method}"))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .map_err(|e| transport("", e))?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE_BYTES)
        .read_to_string()
        .map_err(|e| transport("reading the answer: ", e))?;
    let v = serde_json::from_str(&text).map_err(|e| {
        CallError::Failed(format!("{base}: the answer is not JSON ({e}): {text:.200}"))
    })?;
    Ok((status, v))
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
