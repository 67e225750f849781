//! `airlock job`: jobs of a running daemon, for CI farms and people. Every subcommand talks
//! to the daemon at `--url` / `AIRLOCK_URL` with the token from `--token-file`,
//! `AIRLOCK_TOKEN` or the client settings file (never a token on the command line).

use super::{print_json, refuse};
use crate::client::{CallError, FollowEnd, Settings};
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How long `follow` keeps trying to learn a job's end after its stream was cut (the daemon
/// restarting, the follower dropped for falling behind).
const RECONNECT_WINDOW: Duration = Duration::from_secs(600);
/// The wait between two tries.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The daemon and the caller's credentials.
#[derive(clap::Args, Debug, Clone)]
pub struct Client {
    /// The daemon's address (default: AIRLOCK_URL, the client settings file, then
    /// http://127.0.0.1:7700).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A file holding the bearer token (default: AIRLOCK_TOKEN, then the client settings
    /// file's token_file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Client settings (TOML: url, token_file). Default: $XDG_CONFIG_HOME/airlock/client.toml
    /// or ~/.config/airlock/client.toml, when it exists.
    #[arg(long, value_name = "FILE")]
    pub client_config: Option<PathBuf>,
}

/// What `--follow` and `follow` exit with, by the job's settled state (the table every
/// command shares).
pub const FOLLOW_EXIT_CODES: &str = "\
Exit codes of submit --follow and follow (the job's settled state):
  0  passed
  1  failed, timed_out, cancelled, error or source_changed
  2-6  the daemon refused the request (as for `airlock call`)
  7  the daemon unreachable, or the job's end not learned within 10 minutes (retry)";

/// A job of a workspace (`job.show` and `job.cancel` name both).
#[derive(clap::Args, Debug)]
pub struct JobAt {
    job_id: String,
    /// The workspace.
    #[arg(long, value_name = "WS", env = "AIRLOCK_WORKSPACE")]
    workspace: String,
    #[command(flatten)]
    client: Client,
}

impl JobAt {
    async fn call(self, method: &'static str) -> ExitCode {
        let body = json!({"workspace_id": self.workspace, "job_id": self.job_id});
        print_call(&self.client, method, body).await
    }
}

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Submit ARGV to run on revision REV of a workspace; prints the job as JSON (with
    /// --follow: streams its log to stdout and exits by its settled state).
    #[command(after_help = FOLLOW_EXIT_CODES)]
    Submit {
        /// The workspace.
        #[arg(long, value_name = "WS", env = "AIRLOCK_WORKSPACE")]
        workspace: String,
        /// Branch, tag or commit of the workspace's repository (resolved once by the daemon).
        #[arg(long, value_name = "REV")]
        rev: String,
        /// One of the workspace's profiles (default: its profile).
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// A label to find the job by (repeatable).
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// Timeout in seconds (1..=1800; default the daemon's).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// Makes a retried submit answer the same job instead of a second one (default: a
        /// fresh key, so each run of the command is a new job).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Stream the job's log to stdout until it settles; exit by its state.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        client: Client,
        /// The command to run, after `--`.
        #[arg(last = true, value_name = "ARGV", required = true)]
        argv: Vec<String>,
    },
    /// Stream a job's log to stdout until it settles; exit by its state.
    #[command(after_help = FOLLOW_EXIT_CODES)]
    Follow {
        job_id: String,
        #[command(flatten)]
        client: Client,
    },
    /// Print a job as JSON.
    Show(JobAt),
    /// List a workspace's jobs, newest first, as JSON (`next_cursor` pages on).
    List {
        /// The workspace.
        #[arg(long, value_name = "WS", env = "AIRLOCK_WORKSPACE")]
        workspace: String,
        /// queued, running, passed, failed, timed_out, cancelled, error or source_changed.
        #[arg(long, value_name = "STATE")]
        state: Option<String>,
        /// Only jobs carrying this label (repeatable: all of them).
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// 1..=500 (default 50).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// The previous page's next_cursor.
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
        #[command(flatten)]
        client: Client,
    },
    /// Cancel a job (its container is destroyed; it settles cancelled); prints it as JSON.
    Cancel(JobAt),
    /// Print a job's log as it is now (its retained head and tail once settled).
    Log {
        job_id: String,
        #[command(flatten)]
        client: Client,
    },
}

fn settings(c: &Client) -> Result<Settings, ExitCode> {
    Settings::resolve(
        c.url.as_deref(),
        c.token_file.as_deref(),
        c.client_config.as_deref(),
    )
    .map_err(refuse)
}

/// One call; the answer or the exit code of its failure (its message printed).
async fn call(s: &Settings, method: &'static str, body: Value) -> Result<Value, ExitCode> {
    let s = s.clone();
    let answer =
        tokio::task::spawn_blocking(move || crate::client::call(&s.url, &s.token, method, &body))
            .await
            .expect("the call does not panic");
    match answer {
        Ok((200, v)) => Ok(v),
        Ok((status, v)) => {
            let code = v["error"]["code"].as_str().unwrap_or("internal");
            eprintln!(
                "airlock: {code} (HTTP {status}): {}",
                v["error"]["message"].as_str().unwrap_or("")
            );
            Err(ExitCode::from(crate::client::exit_code(code)))
        }
        Err(e) => Err(failed(e)),
    }
}

fn failed(e: CallError) -> ExitCode {
    eprintln!("airlock: error: {e}");
    ExitCode::from(e.exit_code())
}

/// The exit code of a job that settled in `state`.
pub fn state_exit_code(state: &str) -> u8 {
    match state {
        "passed" => 0,
        _ => 1,
    }
}

/// Follows a job's log to stdout until it settles: a stream cut short is followed again
/// (quietly: its output was printed) until the closing line says the state.
async fn follow(s: &Settings, job_id: &str) -> ExitCode {
    let deadline = std::time::Instant::now() + RECONNECT_WINDOW;
    let mut printing = true;
    loop {
        let (s2, id) = (s.clone(), job_id.to_string());
        let end = tokio::task::spawn_blocking(move || {
            let mut stdout = std::io::stdout();
            let out: Option<&mut dyn std::io::Write> =
                if printing { Some(&mut stdout) } else { None };
            crate::client::follow_log(&s2, &id, out)
        })
        .await
        .expect("following does not panic");
        match end {
            Ok(FollowEnd::Settled(state)) => {
                eprintln!("airlock: job {job_id} settled: {state}");
                return ExitCode::from(state_exit_code(&state));
            }
            Ok(FollowEnd::Cut) => {
                if printing {
                    eprintln!(
                        "airlock: the log stream of {job_id} ended before the job settled; waiting for its end"
                    );
                }
                printing = false;
            }
            Err(e @ CallError::Unreachable(_)) => {
                if std::time::Instant::now() >= deadline {
                    return failed(e);
                }
                printing = false;
            }
            Err(e) => return failed(e),
        }
        if std::time::Instant::now() >= deadline {
            eprintln!(
                "airlock: the end of job {job_id} was not learned within {} s; follow it again",
                RECONNECT_WINDOW.as_secs()
            );
            return ExitCode::from(crate::client::EXIT_RETRY);
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// A fresh idempotency key for a submit that names none.
fn fresh_key() -> String {
    format!("cli-{}", &crate::ids::new_job_id()[4..])
}

pub(super) async fn job(cmd: JobCommand) -> ExitCode {
    match cmd {
        JobCommand::Submit {
            workspace,
            rev,
            profile,
            labels,
            timeout,
            idempotency_key,
            follow: then_follow,
            client,
            argv,
        } => {
            let s = match settings(&client) {
                Ok(s) => s,
                Err(c) => return c,
            };
            let mut body = json!({
                "workspace_id": workspace,
                "revision": rev,
                "argv": argv,
                "labels": labels,
                "idempotency_key": idempotency_key.unwrap_or_else(fresh_key),
            });
            if let Some(p) = profile {
                body["profile"] = json!(p);
            }
            if let Some(t) = timeout {
                body["timeout_seconds"] = json!(t);
            }
            let v = match call(&s, "job.submit", body).await {
                Ok(v) => v,
                Err(c) => return c,
            };
            if !then_follow {
                print_json(&v);
                return ExitCode::SUCCESS;
            }
            let id = v["job"]["job_id"].as_str().unwrap_or_default().to_string();
            eprintln!("airlock: job {id} submitted; following its log");
            follow(&s, &id).await
        }
        JobCommand::Follow { job_id, client } => match settings(&client) {
            Ok(s) => follow(&s, &job_id).await,
            Err(c) => c,
        },
        JobCommand::Show(at) => at.call("job.show").await,
        JobCommand::Cancel(at) => at.call("job.cancel").await,
        JobCommand::List {
            workspace,
            state,
            labels,
            limit,
            cursor,
            client,
        } => {
            let mut body = json!({"workspace_id": workspace, "labels": labels});
            if let Some(st) = state {
                body["state"] = json!(st);
            }
            if let Some(l) = limit {
                body["limit"] = json!(l);
            }
            if let Some(c) = cursor {
                body["cursor"] = json!(c);
            }
            print_call(&client, "job.list", body).await
        }
        JobCommand::Log { job_id, client } => {
            let s = match settings(&client) {
                Ok(s) => s,
                Err(c) => return c,
            };
            let answer = tokio::task::spawn_blocking(move || {
                crate::client::get_text(&s, &format!("/api/v1/jobs/{job_id}/log"))
            })
            .await
            .expect("the call does not panic");
            match answer {
                Ok(text) => {
                    use std::io::Write;
                    let mut out = std::io::stdout();
                    let _ = out.write_all(text.as_bytes());
                    ExitCode::SUCCESS
                }
                Err(e) => failed(e),
            }
        }
    }
}

async fn print_call(client: &Client, method: &'static str, body: Value) -> ExitCode {
    let s = match settings(client) {
        Ok(s) => s,
        Err(c) => return c,
    };
    match call(&s, method, body).await {
        Ok(v) => {
            print_json(&v);
            ExitCode::SUCCESS
        }
        Err(c) => c,
    }
}
