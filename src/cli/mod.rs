//! Command-line interface. One exit-code table ([`EXIT_CODES`]) covers every command.

mod attestation;
mod call;
mod images;
mod job;
mod run;

use crate::config::{Config, DEFAULT_PROFILE};
use crate::crash;
use crate::engine::runner::pipeline::{RunError, RunRequest};
use crate::engine::runner::recovery;
use crate::engine::{Context, DataDir};
use crate::limits;
use crate::verification::Status;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit code for a refused request.
pub const EXIT_REFUSED: u8 = 2;

/// Every command's exit codes, shown by `airlock --help` (`call`'s 2-7 come from the error
/// envelope's code, [`crate::client::exit_code`]).
pub const EXIT_CODES: &str = "\
Exit codes (every command):
  0  success; run, job submit --follow, job follow: the job passed; doctor: every check passed
  1  any other terminal status (failed, timed_out, source_changed, cancelled, error) or a failure
  2  refused before anything ran (arguments, configuration, input); call, job: invalid_argument
  3  call, job: unauthenticated or permission_denied
  4  call, job: not_found
  5  call, job: conflict or failed_precondition
  6  call, job: resource_exhausted
  7  call, job: unavailable or deadline_exceeded, or the daemon unreachable or silent (retry)";

/// The `--help` heading of the options every command takes, listed after its own.
const GLOBAL: &str = "Global options";

#[derive(Parser, Debug)]
#[command(
    name = "airlock",
    version,
    about = "Runs untrusted verification work in hardened containers and lands code through reviewed, journaled changes",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Log format on stderr (text is coloured only on a terminal, and never with NO_COLOR set).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        help_heading = GLOBAL
    )]
    pub log_format: LogFormat,
    /// Log filter (tracing EnvFilter syntax), e.g. info or airlock=debug.
    #[arg(
        long,
        global = true,
        default_value = "warn",
        env = "AIRLOCK_LOG",
        help_heading = GLOBAL
    )]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Server configuration file (TOML; see docs/configuration.md). Without it, built-in
    /// defaults, which serve refuses: it needs workspaces and tokens.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (database, artifacts, checkouts). Default: the config's data_dir, else
    /// $XDG_STATE_HOME/airlock or ~/.local/state/airlock.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Verify an exact revision: run ARGV in a hardened container and print the result as JSON.
    Run {
        /// Git repository (bare or non-bare) on this host.
        #[arg(long, value_name = "PATH")]
        repo: PathBuf,
        /// Revision: branch, tag, short or full commit id. Resolved once to a full id.
        #[arg(long, value_name = "REV")]
        rev: String,
        /// Server-side profile that chooses image, environment and limits (default, toolchain,
        /// git, or one from --config).
        #[arg(long, value_name = "NAME", default_value = DEFAULT_PROFILE)]
        profile: String,
        /// Timeout in seconds (1..=1800).
        #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_TIMEOUT_SECONDS)]
        timeout: u64,
        /// Print the job's output to stderr as it arrives; the JSON result still goes to
        /// stdout at the end (its `output` is the bounded head and tail, as without it).
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        common: Common,
        /// The command to run in the container, after `--` (e.g. `-- make test`).
        #[arg(last = true, value_name = "ARGV")]
        argv: Vec<String>,
    },
    /// Run the HTTP daemon: recovery first, then `POST /api/v1/<method>` on the configured listen
    /// address. Prints {"listening": "<addr>"} on stdout once ready.
    Serve {
        #[command(flatten)]
        common: Common,
    },
    /// Build sandbox images from images/ (no registry is used).
    Images {
        #[command(subcommand)]
        command: ImagesCommand,
    },
    /// Reconcile interrupted verifications: destroy their containers, restore exact results
    /// from valid artifacts, mark the rest as error, remove leftovers. Prints a JSON report.
    Recover {
        #[command(flatten)]
        common: Common,
    },
    /// Copy the data dir to DEST, a new directory, consistently while the daemon runs: the
    /// database by SQLite's online backup API, then the patches, artifacts, transcripts and
    /// rollback artifacts. Restore by starting `airlock serve` with data_dir = DEST. Prints
    /// what was copied as JSON.
    Backup {
        /// The new directory to write (refused if it exists).
        dest: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Read verification records.
    Verification {
        #[command(subcommand)]
        command: VerificationCommand,
    },
    /// Call one API method of a running daemon and print its JSON answer. The token comes
    /// from AIRLOCK_TOKEN. Exit codes 2-7 name the refusal (see `airlock --help`); 7 also when
    /// the daemon is unreachable or silent: retry.
    Call {
        /// The method, e.g. claim.acquire.
        method: String,
        /// The request: JSON text, @FILE, or - for stdin (default {}).
        body: Option<String>,
        /// The daemon's address.
        #[arg(long, value_name = "URL", env = "AIRLOCK_URL", default_value = crate::client::DEFAULT_URL)]
        url: String,
    },
    /// Jobs of a running daemon: submit (and follow), follow, show, list, cancel, log. The
    /// daemon's address from --url or AIRLOCK_URL, the token from --token-file or
    /// AIRLOCK_TOKEN (or the client settings file).
    Job {
        #[command(subcommand)]
        command: job::JobCommand,
    },
    /// Attestation signing keys (Ed25519).
    Keys {
        #[command(subcommand)]
        command: attestation::KeysCommand,
    },
    /// Check signed attestations (in-toto statements in DSSE envelopes).
    Attestation {
        #[command(subcommand)]
        command: attestation::AttestationCommand,
    },
    /// Check whether this machine can run Airlock: Docker and its API version, cgroup v2
    /// controllers, the seccomp profile, a probe container reading a bind-mounted file, loop
    /// devices, images present and up to date, the data dir, free space, git, the listen
    /// address. Exit 0 only when every check passes.
    Doctor {
        #[command(flatten)]
        common: Common,
        /// Directory holding the image directories, to say whether each image is up to date
        /// (default: AIRLOCK_IMAGES_DIR, ./images, or the images/ of the checkout this binary
        /// was built in).
        #[arg(long, value_name = "DIR", env = "AIRLOCK_IMAGES_DIR")]
        images_dir: Option<PathBuf>,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ImagesCommand {
    /// Build every image directory under --images-dir, or only NAME.
    Build {
        /// One image directory's name (minimal, toolchain, git, ...); default: every one.
        name: Option<String>,
        /// Directory holding one subdirectory per image (default: AIRLOCK_IMAGES_DIR,
        /// ./images, or the images/ of the checkout this binary was built in).
        #[arg(long, value_name = "DIR", env = "AIRLOCK_IMAGES_DIR")]
        images_dir: Option<PathBuf>,
        /// Copy the host's Rust toolchain into rootfs images (default: when rustc is installed).
        #[arg(long, conflicts_with = "without_rust")]
        with_rust: bool,
        /// Never copy the host's Rust toolchain.
        #[arg(long)]
        without_rust: bool,
    },
    /// Copy every image the configuration uses (each profile's, and the workspace holder's)
    /// from this machine's engine to every configured `[[engines]]` entry that lacks it with
    /// the same id. Prints what was sent where, as JSON.
    Push {
        /// Only this image reference (repeatable); it must be one the configuration uses.
        #[arg(long = "image", value_name = "REF")]
        only: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Subcommand, Debug)]
pub enum VerificationCommand {
    /// Print one verification as JSON.
    Show {
        /// The verification id (ver_...).
        id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Print verifications as a JSON array, newest first.
    List {
        /// Only this status (running, passed, failed, timed_out, source_changed, error, ...).
        #[arg(long)]
        status: Option<String>,
        /// At most this many (1..=1000).
        #[arg(long, default_value_t = limits::DEFAULT_LIST_LIMIT)]
        limit: u32,
        #[command(flatten)]
        common: Common,
    },
}

/// Installs the stderr logger, or says why `--log-level` (or `AIRLOCK_LOG`) is not a filter.
fn init_logging(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| {
        format!("--log-level {level:?} (or AIRLOCK_LOG) is not a log filter: {e}; e.g. info or airlock=debug")
    })?;
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

/// Prints `msg` and returns the refusal exit code.
fn refuse(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("airlock: refused: {msg}");
    ExitCode::from(EXIT_REFUSED)
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("airlock: error: {msg}");
    ExitCode::from(1)
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("output values serialize")
    );
}

/// Entry point of the `airlock` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_logging(cli.log_format, &cli.log_level) {
        return refuse(e);
    }
    if let Err(e) = crash::validate_env() {
        return refuse(e);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime can be built");
    rt.block_on(dispatch(cli.command))
}

fn load(common: &Common) -> Result<(Config, PathBuf), String> {
    let config = Config::load(common.config.as_deref()).map_err(|e| e.to_string())?;
    let data_dir = common
        .data_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.clone());
    Ok((config, data_dir))
}

/// The config and data dir of a command that reads an existing data dir; the refusal's exit
/// otherwise.
fn load_existing(common: &Common) -> Result<(Config, PathBuf), ExitCode> {
    let (config, dir) = load(common).map_err(refuse)?;
    existing_data_dir(&dir).map_err(refuse)?;
    Ok((config, dir))
}

/// Commands that only read a data dir refuse one that is not there instead of creating it.
fn existing_data_dir(dir: &Path) -> Result<(), String> {
    if dir.join("airlock.db").is_file() {
        return Ok(());
    }
    Err(format!(
        "no Airlock data dir at {} ({}): name one with --data-dir DIR or data_dir in --config FILE",
        dir.display(),
        if dir.exists() {
            "it has no airlock.db"
        } else {
            "it does not exist"
        }
    ))
}

async fn open_data(dir: &Path) -> Result<DataDir, String> {
    DataDir::open(dir).await.map_err(|e| e.to_string())
}

async fn dispatch(cmd: Command) -> ExitCode {
    match cmd {
        Command::Run {
            common,
            repo,
            rev,
            profile,
            timeout,
            follow,
            argv,
        } => {
            run::run(
                &common,
                follow,
                RunRequest {
                    repo,
                    rev,
                    profile,
                    argv,
                    timeout_seconds: timeout,
                },
            )
            .await
        }
        Command::Images {
            command: ImagesCommand::Push { only, common },
        } => images::push_images(&common, &only).await,
        Command::Images {
            command:
                ImagesCommand::Build {
                    name,
                    images_dir,
                    with_rust,
                    without_rust,
                },
        } => {
            let with_rust = match (with_rust, without_rust) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            let images_dir = match images::images_dir(images_dir) {
                Ok(d) => d,
                Err(e) => return refuse(e),
            };
            images::build_images(
                name,
                &images_dir,
                crate::sandbox::docker::images::BuildOptions { with_rust },
            )
            .await
        }
        Command::Recover { common } => {
            let (config, dir) = match load_existing(&common) {
                Ok(x) => x,
                Err(code) => return code,
            };
            let attest = match crate::engine::attesting::Attestor::load(&config) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            let data = match open_data(&dir).await {
                Ok(d) => d,
                Err(e) => return fail(e),
            };
            let sandbox = match crate::sandbox::connect_configured(&config).await {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            let seccomp = match crate::sandbox::seccomp::load() {
                Ok(s) => s,
                Err(e) => return refuse(e),
            };
            let retention = recovery::Bounds {
                keep: config.run_retention,
                engine_lost_after: config.engine_lost_after,
                now: crate::engine::Clock::from_env().now(),
            };
            let engines =
                match crate::engine::context::configured_pool(&config, &data, &seccomp).await {
                    Ok(Some(pool)) => pool.job_engines(),
                    Ok(None) => vec![crate::workspace::JobEngine {
                        name: crate::engine::context::DEFAULT_ENGINE_NAME.into(),
                        runtime: sandbox.clone(),
                        workspaces: crate::engine::context::workspaces_of(
                            sandbox.as_ref(),
                            &data,
                            &seccomp,
                            // Recovery only removes checkouts: it never opens the cache.
                            0,
                        ),
                    }],
                    Err(e) => return fail(e),
                };
            let mut report = recovery::recover(&data, &engines, &attest, retention).await;
            // The tree cache a killed process left mounted, once no checkout stands on it.
            match crate::staging::cache::release_orphan(&data.root) {
                Ok(true) => tracing::info!("unmounted the tree cache a killed process left"),
                Ok(false) => {}
                Err(e) => report.failures.push(format!("tree cache: {e}")),
            }
            let mut failures = report.failures.len();
            let mut out = serde_json::to_value(&report).expect("a report serializes");
            // Governed workspaces: interrupted applies, judged from the files, as at start-up.
            if config.workspaces.values().any(|w| w.worktree.is_some()) {
                match recover_transactions(config, data, sandbox).await {
                    Ok(t) => out["transactions"] = serde_json::json!(t),
                    Err(e) => {
                        failures += 1;
                        out["failures"]
                            .as_array_mut()
                            .expect("failures is a list")
                            .push(serde_json::json!(format!("transactions: {e}")));
                    }
                }
            }
            print_json(&out);
            if failures == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Verification { command } => verification(command).await,
        Command::Keys { command } => attestation::keys(command),
        Command::Job { command } => job::job(command).await,
        Command::Attestation { command } => attestation::attestation(command),
        Command::Backup { dest, common } => {
            let (_, dir) = match load_existing(&common) {
                Ok(x) => x,
                Err(code) => return code,
            };
            // Which data dir is copied is never a guess: the default must be named too.
            if common.data_dir.is_none() && dir == crate::config::default_data_dir() {
                return refuse(format!(
                    "backup copies the data dir you name: pass --data-dir DIR (or --config FILE with data_dir); without one it would be the default, {}",
                    dir.display()
                ));
            }
            let job = tokio::task::spawn_blocking(move || crate::backup::backup(&dir, &dest));
            match job.await.expect("a backup does not panic") {
                Ok(report) => {
                    print_json(&report);
                    ExitCode::SUCCESS
                }
                Err(
                    e @ (crate::backup::BackupError::DestExists(_)
                    | crate::backup::BackupError::DestInside { .. }),
                ) => refuse(e),
                Err(e) => fail(e),
            }
        }
        Command::Call { method, body, url } => call::call(&method, body.as_deref(), &url).await,
        Command::Doctor {
            common,
            images_dir,
            json,
        } => {
            let (config, dir) = match load(&common) {
                Ok(x) => x,
                Err(e) => return refuse(e),
            };
            let report = crate::engine::doctor::run(
                &config,
                &dir,
                &crate::engine::doctor::Options {
                    images_dir: images::images_dir(images_dir).ok(),
                    check_listen: true,
                    docker: true,
                    egress: true,
                },
            )
            .await;
            if json {
                print_json(&report);
            } else {
                print!("{}", report.table());
            }
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Serve { common } => serve(&common).await,
    }
}

/// `airlock recover`'s second half: the daemon's recovery of interrupted applies.
async fn recover_transactions(
    config: Config,
    data: DataDir,
    sandbox: crate::sandbox::Runtime,
) -> Result<crate::engine::governed::applying::recovery::TxRecovery, String> {
    let seccomp = crate::sandbox::seccomp::load().map_err(|e| e.to_string())?;
    let ctx = Context::new(
        std::sync::Arc::new(config),
        data,
        sandbox,
        seccomp,
        crate::engine::Clock::from_env(),
    )?;
    let service =
        crate::engine::service::Service::new(ctx, crate::engine::service::default_admission());
    service
        .applies
        .recover_transactions()
        .await
        .map_err(|e| e.to_string())
}

async fn verification(cmd: VerificationCommand) -> ExitCode {
    let common = match &cmd {
        VerificationCommand::Show { common, .. } | VerificationCommand::List { common, .. } => {
            common.clone()
        }
    };
    let (_, dir) = match load_existing(&common) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let data = match open_data(&dir).await {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    match cmd {
        VerificationCommand::Show { id, .. } => match data.store.get(&id).await {
            Ok(Some(v)) => {
                print_json(&v);
                ExitCode::SUCCESS
            }
            Ok(None) => fail(format!("verification {id} not found")),
            Err(e) => fail(e),
        },
        VerificationCommand::List { status, limit, .. } => {
            let status = match status.as_deref().map(|s| (s, Status::parse(s))) {
                None => None,
                Some((_, Some(st))) => Some(st),
                Some((s, None)) => {
                    return refuse(format!(
                        "status: {s:?} is not one of {}",
                        Status::ALL.map(Status::as_str).join(", ")
                    ));
                }
            };
            if limit == 0 || limit > limits::MAX_VERIFICATION_LIST_LIMIT {
                return refuse(format!(
                    "limit is {limit}; it must be between 1 and {}",
                    limits::MAX_VERIFICATION_LIST_LIMIT
                ));
            }
            match data.store.list(status, limit).await {
                Ok(list) => {
                    print_json(&list);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled: a signal that arrives in between is kept for it instead of
/// ending the process by the signal's default action.
fn termination_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

async fn serve(common: &Common) -> ExitCode {
    use crate::daemon::{Daemon, StartError};
    let (config, dir) = match load(common) {
        Ok(x) => x,
        Err(e) => return refuse(e),
    };
    // A daemon nobody can call is a mistake, not a configuration.
    if config.workspaces.is_empty() {
        return refuse(
            "the config has no [workspaces.<id>]: airlock serve needs at least one workspace and one [[tokens]] entry (see docs/configuration.md); pass it with --config FILE",
        );
    }
    if config.tokens.is_empty() {
        return refuse(
            "the config has no [[tokens]]: every call would be refused as an unknown bearer token; add one (sha256 = the hex SHA-256 of the token, member_id = ...) to --config FILE",
        );
    }
    let started = async {
        let daemon = Daemon::start(config, &dir).await?;
        let listener = daemon.bind().await?;
        let metrics = daemon.bind_metrics().await?;
        Ok::<_, StartError>((daemon, listener, metrics))
    };
    let (daemon, listener, metrics) = match started.await {
        Ok(x) => x,
        Err(StartError::Refused(e)) => return refuse(e),
        Err(StartError::Failed(e)) => return fail(e),
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut ready = serde_json::json!({ "listening": addr });
    if let Some(m) = metrics.as_ref().and_then(|l| l.local_addr().ok()) {
        ready["metrics_listening"] = serde_json::json!(m.to_string());
    }
    // Whoever reads the ready line may stop the daemon at once: the handlers are installed
    // and the log line written before it is printed, so that stop is a graceful one.
    let signalled = termination_signal();
    tracing::info!(%addr, "airlock serve is listening");
    println!("{ready}");
    let shutdown = async {
        signalled.await;
        tracing::info!("shutting down: no new connections; finishing in-flight calls");
    };
    match daemon.run_with_metrics(listener, metrics, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(format!(
            "an asynchronous result could not be made durable: {failure}"
        )),
    }
}
