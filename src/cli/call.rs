//! `airlock call`: one API method of a running daemon (see [`crate::client`]).

use super::{print_json, refuse};
use std::process::ExitCode;

/// `airlock call`: the answer on stdout (pretty JSON, the error envelope too), the error's
/// message on stderr, the exit code from its code.
pub(super) async fn call(method: &str, body: Option<&str>, url: &str) -> ExitCode {
    if let Err(e) = crate::client::check_method(method) {
        return refuse(e);
    }
    let body = match crate::client::read_body(body) {
        Ok(b) => b,
        Err(e) => return refuse(e),
    };
    let token = match std::env::var("AIRLOCK_TOKEN") {
        Ok(t) if !t.is_empty() => t,
        _ => return refuse("set AIRLOCK_TOKEN to your bearer token"),
    };
    let (method, url) = (method.to_string(), url.to_string());
    let answer =
        tokio::task::spawn_blocking(move || crate::client::call(&url, &token, &method, &body))
            .await
            .expect("the call does not panic");
    match answer {
        Ok((200, v)) => {
            print_json(&v);
            ExitCode::SUCCESS
        }
        Ok((status, v)) => {
            print_json(&v);
            let code = v["error"]["code"].as_str().unwrap_or("internal");
            eprintln!(
                "airlock: {code} (HTTP {status}): {}",
                v["error"]["message"].as_str().unwrap_or("")
            );
            ExitCode::from(crate::client::exit_code(code))
        }
        Err(e) => {
            eprintln!("airlock: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
