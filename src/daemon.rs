//! `airlock serve`: the start-up order, the listener and the shutdown.
//!
//! Start-up: validate the config, the seccomp profile and the host's checkout filesystem
//! support; connect to Docker; open (and audit) the data dir; open every workspace repository;
//! raise the open-file limit; clear stale git lock files; run one maintenance pass (recovery
//! first); only then bind the listener. [`Daemon::run`] serves until `shutdown` resolves, then
//! stops accepting, cancels and settles in-flight verifications, and reports the first
//! asynchronous persistence failure, if any.

use crate::config::Config;
use crate::engine::service::{Service, default_admission};
use crate::engine::{Clock, Context, DataDir, maintenance};
use crate::limits;
use crate::sandbox::Runtime;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration or this host cannot run Airlock as configured; nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// Something Airlock needs failed (Docker, the data dir, a repository, the listener).
    #[error("{0}")]
    Failed(String),
}

/// A started daemon: recovery has run, the listener is not open yet.
pub struct Daemon {
    service: Arc<Service>,
    /// Held while the daemon lives: one daemon per data dir.
    _serve_lock: ServeLock,
    config: Arc<Config>,
}

/// Environment variable that, in builds with the `test-hooks` feature only, runs the daemon on
/// the scripted fake runtime instead of Docker (workflow tests without an engine).
pub const TEST_FAKE_RUNTIME_ENV: &str = "AIRLOCK_TEST_FAKE_RUNTIME";

impl Daemon {
    /// Runs the start-up order up to (not including) the listener, on Docker.
    pub async fn start(config: Config, data_dir: &Path) -> Result<Daemon, StartError> {
        let fake = cfg!(feature = "test-hooks")
            && std::env::var(TEST_FAKE_RUNTIME_ENV).as_deref() == Ok("1");
        let runtime: Runtime = if fake {
            tracing::warn!("{TEST_FAKE_RUNTIME_ENV}=1: jobs run on the scripted fake runtime");
            Arc::new(crate::sandbox::fake::FakeRuntime::new())
        } else {
            // With `[[engines]]`, the pool is built from every entry once the data dir is
            // open; this (the first) resolves nothing by itself.
            crate::sandbox::connect_configured(&config)
                .await
                .map_err(|e| StartError::Failed(e.to_string()))?
        };
        // `airlock doctor`'s checks (the listener is bound later, by the caller).
        let report = crate::engine::doctor::run(
            &config,
            data_dir,
            &crate::engine::doctor::Options {
                images_dir: None,
                check_listen: false,
                docker: !fake,
                egress: false,
            },
        )
        .await;
        // Short space only refuses new work (resource_exhausted, per job): the daemon still
        // starts, so reads, recovery and deliveries go on while space is freed.
        if let Some(c) = report
            .checks
            .iter()
            .find(|c| c.name == "free_space" && !c.ok)
        {
            tracing::warn!(detail = %c.detail, "free space is short; new work will be refused");
        }
        // An engine of the pool that is away or lacks an image only stays out of placement.
        if let Some(c) = report.checks.iter().find(|c| c.name == "engines" && !c.ok) {
            tracing::warn!(detail = %c.detail, "an engine of the pool cannot take jobs yet");
        }
        if let Some(why) = report.first_failure_except(&["free_space", "engines"]) {
            return Err(StartError::Refused(format!(
                "{why}; `airlock doctor` shows every check"
            )));
        }
        Self::start_on(config, data_dir, runtime, default_admission(), !fake).await
    }

    /// Runs the start-up order on the given container runtime (in-process tests pass the fake).
    pub async fn start_with(
        config: Config,
        data_dir: &Path,
        runtime: Runtime,
    ) -> Result<Daemon, StartError> {
        Self::start_with_admission(config, data_dir, runtime, default_admission()).await
    }

    /// [`Daemon::start_with`] under an embedding server's admission policy (the hook an
    /// orchestrator uses to bound its own agents' work) instead of the standalone default.
    pub async fn start_with_admission(
        config: Config,
        data_dir: &Path,
        runtime: Runtime,
        admission: crate::engine::service::AdmissionFn,
    ) -> Result<Daemon, StartError> {
        Self::start_on(config, data_dir, runtime, admission, false).await
    }

    /// The start-up order; with `engines`, jobs run on the configured `[[engines]]` pool
    /// rather than on `runtime` alone.
    async fn start_on(
        config: Config,
        data_dir: &Path,
        runtime: Runtime,
        admission: crate::engine::service::AdmissionFn,
        engines: bool,
    ) -> Result<Daemon, StartError> {
        let seccomp =
            crate::sandbox::seccomp::load().map_err(|e| StartError::Refused(e.to_string()))?;
        crate::engine::runner::check_checkout_support(&config).map_err(StartError::Refused)?;
        let data = DataDir::open(data_dir)
            .await
            .map_err(|e| StartError::Failed(e.to_string()))?;
        let serve_lock = ServeLock::acquire(&data.layout.serve_lock())?;
        let config = Arc::new(config);
        let ctx = Context::new(
            config.clone(),
            data,
            runtime.clone(),
            seccomp,
            Clock::from_env(),
        )
        .map_err(StartError::Refused)?;
        let ctx = match engines {
            false => ctx,
            true => match crate::engine::context::configured_pool(&config, &ctx.data, &ctx.seccomp)
                .await
                .map_err(|e| StartError::Refused(e.to_string()))?
            {
                Some(pool) => ctx.with_pool(Arc::new(pool)),
                None => ctx,
            },
        };
        // The built images' ids (and each engine's) are known before the first submission, so
        // no submission waits on an engine; one that does not answer costs start-up one bound.
        ctx.pool.checked(crate::limits::ENGINE_CALL_TIMEOUT).await;
        ctx.metrics.initialize(
            config.profiles.keys().map(String::as_str),
            ctx.pool.engines().iter().map(|e| e.name.as_str()),
        );
        let service = Arc::new(Service::new(ctx, admission));
        let open_files = crate::api::server::raise_fd_limit(config.max_connections)
            .map_err(StartError::Refused)?;
        tracing::info!(open_files, "RLIMIT_NOFILE raised to its hard limit");
        for ws in config.workspaces.keys() {
            match service.ctx.repo(ws).remove_stale_airlock_locks() {
                Ok(removed) if !removed.is_empty() => {
                    tracing::warn!(workspace = %ws, ?removed, "removed stale git lock files");
                }
                Ok(_) => {}
                Err(e) => return Err(StartError::Failed(format!("workspace {ws}: {e}"))),
            }
        }
        // Jobs recorded and never started run now (before recovery, which leaves them alone).
        let resumed = service
            .jobs
            .resume_unstarted()
            .await
            .map_err(|e| StartError::Failed(format!("resuming queued jobs: {e}")))?;
        if resumed > 0 {
            tracing::info!(resumed, "queued jobs resumed");
        }
        maintenance::pass(&service).await;
        Ok(Daemon {
            service,
            config,
            _serve_lock: serve_lock,
        })
    }

    /// Binds the configured listen address.
    pub async fn bind(&self) -> Result<TcpListener, StartError> {
        TcpListener::bind(&self.config.listen).await.map_err(|e| {
            StartError::Failed(format!("listen: cannot bind {}: {e}", self.config.listen))
        })
    }

    /// Binds `metrics_listen`, when the config names one.
    pub async fn bind_metrics(&self) -> Result<Option<TcpListener>, StartError> {
        let Some(addr) = &self.config.metrics_listen else {
            return Ok(None);
        };
        TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|e| StartError::Failed(format!("metrics_listen: cannot bind {addr}: {e}")))
    }

    /// Serves on `listener` until `shutdown` resolves. Returns the first asynchronous
    /// persistence failure as an error, so the process can exit non-zero after logging it.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), String> {
        self.run_with_metrics(listener, None, shutdown).await
    }

    /// [`Daemon::run`], with `/metrics` on its own listener (from [`Daemon::bind_metrics`]).
    pub async fn run_with_metrics(
        self,
        listener: TcpListener,
        metrics: Option<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), String> {
        let ready = Arc::new(AtomicBool::new(true));
        let state = crate::api::AppState::new(self.service.clone(), ready.clone());
        let metrics_server = metrics.map(|l| {
            let app = crate::api::metrics_router(state.clone());
            let limits = crate::api::server::ConnLimits {
                max_connections: 16,
                header_read_timeout: self.config.header_read_timeout,
                keep_alive_idle: self.config.keep_alive_idle,
            };
            tokio::spawn(crate::api::server::serve(
                l,
                app,
                limits,
                std::future::pending::<()>(),
            ))
        });
        let app = crate::api::router(state);
        let ticker = {
            let service = self.service.clone();
            let interval = self.config.maintenance_interval;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    maintenance::pass(&service).await;
                }
            })
        };
        // Webhook senders: each subscription's outbox, until the daemon stops (what is pending
        // then is sent after the next start).
        let hooks = crate::engine::webhooks::spawn(&self.service.ctx)
            .await
            .map_err(|e| format!("webhook subscriptions: {e}"))?;
        let conn_limits = crate::api::server::ConnLimits {
            max_connections: self.config.max_connections,
            header_read_timeout: self.config.header_read_timeout,
            keep_alive_idle: self.config.keep_alive_idle,
        };
        // Followers of live logs end at once when shutdown begins, so they never hold the
        // connection drain open while their jobs wait to be cancelled.
        let logs = self.service.background.logs.clone();
        let service = self.service.clone();
        let shutdown = async move {
            shutdown.await;
            logs.stop_followers();
            // A call waiting for its own run (a validation's dry run) answers once that run is
            // cancelled, instead of holding the drain open until it ends.
            service.background.stop_inline();
            // Dependency fetches (shared by jobs) end too.
            service.ctx.stopping.send_replace(true);
        };
        crate::api::server::serve(listener, app, conn_limits, shutdown).await;
        if let Some(m) = metrics_server {
            m.abort();
        }
        ready.store(false, Ordering::SeqCst);
        ticker.abort();
        for h in hooks {
            h.abort();
        }
        // In-flight verifications: cancel them, and wait until each has destroyed its container
        // and settled with its artifact.
        let unsettled = self
            .service
            .candidate_verifications
            .cancel_all_workers(limits::SHUTDOWN_SETTLE_WAIT)
            .await;
        if unsettled > 0 {
            tracing::error!(
                unsettled,
                "verifications still running at exit; recovery will settle them"
            );
        }
        // Everything committed moves into airlock.db, so the file alone is the data.
        match self.service.ctx.data.store.checkpoint().await {
            Ok(true) => {}
            Ok(false) => tracing::warn!("the WAL checkpoint at shutdown was held off by a reader"),
            Err(e) => tracing::error!(error = %e, "the WAL checkpoint at shutdown failed"),
        }
        self.service.ctx.pool.close();
        self.service.ctx.deps.close();
        match self.service.persistence_failure() {
            Some(failure) => {
                tracing::error!(%failure, "an asynchronous result could not be made durable");
                Err(failure)
            }
            None => Ok(()),
        }
    }
}

/// One daemon per data dir: an exclusive `flock` on `<data_dir>/serve.lock`, which holds the
/// holder's pid for the refusal message. The kernel releases it however the process dies.
pub struct ServeLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl ServeLock {
    fn acquire(path: &Path) -> Result<ServeLock, StartError> {
        use std::io::{Read, Seek, Write};
        let failed = |e: std::io::Error| StartError::Failed(format!("{}: {e}", path.display()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(failed)?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                lock.set_len(0).map_err(failed)?;
                lock.rewind().map_err(failed)?;
                writeln!(lock, "{}", std::process::id()).map_err(failed)?;
                Ok(ServeLock { _lock: lock })
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                Err(StartError::Refused(format!(
                    "another airlock serve (pid {}) is using the data dir {}: one daemon per data dir; stop it, or give this one its own --data-dir",
                    pid.trim(),
                    path.parent().unwrap_or(path).display()
                )))
            }
            Err((_, e)) => Err(StartError::Failed(format!(
                "{}: flock: {e}",
                path.display()
            ))),
        }
    }
}
