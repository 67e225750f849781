//! `airlock run`: one verification in this process, from the revision to the printed record.

use super::*;

/// A one-shot run, refused or done, leaves no mount behind: once the prefetch is over, the
/// tree cache is closed (and sealed) and the dependency sets let go.
async fn close_run(ctx: &Context, prefetch: Option<tokio::task::JoinHandle<()>>) {
    if let Some(p) = prefetch {
        let _ = p.await;
    }
    ctx.pool.close();
    ctx.deps.close();
}

pub(super) async fn run(common: &Common, follow: bool, req: RunRequest) -> ExitCode {
    let (config, dir) = match load(common) {
        Ok(x) => x,
        Err(e) => return refuse(e),
    };
    // Cheap checks first, so a malformed request is refused without touching Docker. The
    // messages name the flags the user typed.
    if req.argv.is_empty() {
        return refuse(
            "no command to run: put it after `--`, e.g. airlock run --repo . --rev HEAD -- make test",
        );
    }
    if let Err(e) = crate::verification::validate_argv(&req.argv) {
        return refuse(format!("the command after `--`: {e}"));
    }
    if crate::verification::validate_timeout(req.timeout_seconds).is_err() {
        return refuse(format!(
            "--timeout {} must be between {} and {} seconds",
            req.timeout_seconds,
            limits::MIN_TIMEOUT_SECONDS,
            limits::MAX_TIMEOUT_SECONDS
        ));
    }
    // What the request names is checked before anything is created: a refused run leaves
    // no data dir behind.
    if let Err(e) = config.profile(&req.profile) {
        return refuse(e);
    }
    // The revision is resolved once, here, while the engine is reached (reading it changes
    // nothing); a bad one is refused before the data dir is opened.
    let (repo_path, rev) = (req.repo.clone(), req.rev.clone());
    let resolving = tokio::task::spawn_blocking(move || {
        let repo = crate::staging::Repo::open(&repo_path)?;
        let commit = repo.resolve_commit(&rev)?;
        Ok::<_, crate::staging::StagingError>((repo, commit))
    });
    let seccomp = crate::sandbox::seccomp::load();
    let checkouts = crate::engine::runner::check_checkout_support(&config);
    let sandbox = crate::sandbox::connect_configured(&config).await;
    let (repo, commit) = match resolving
        .await
        .expect("resolving a revision does not panic")
    {
        Ok(resolved) => resolved,
        Err(e) => {
            return match RunError::from_git(e) {
                e if !e.is_malfunction() => refuse(e.to_string()),
                e => fail(e.to_string()),
            };
        }
    };
    let seccomp = match seccomp {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    if let Err(e) = checkouts {
        return refuse(e);
    }
    let sandbox = match sandbox {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let data = match open_data(&dir).await {
        Ok(d) => d,
        Err(e) => return refuse(e),
    };
    let ctx = match Context::for_run(std::sync::Arc::new(config), data, sandbox, seccomp) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let ctx =
        match crate::engine::context::configured_pool(&ctx.config, &ctx.data, &ctx.seccomp).await {
            Ok(Some(pool)) => ctx.with_pool(std::sync::Arc::new(pool)),
            Ok(None) => ctx,
            Err(e) => return refuse(e),
        };
    // The tree cache is opened and the revision's entry read while the engines are asked
    // about their images and the run is prepared and recorded.
    let owner = ctx.config.profile(&req.profile).map(|p| (p.uid, p.gid));
    let workspaces = &ctx.pool.first().workspaces;
    let prefetch = owner
        .ok()
        .and_then(|o| workspaces.prefetch(&repo, &commit, o));
    // Each engine's images checked once, so a job no engine can take is refused at once.
    ctx.pool.checked(crate::limits::ENGINE_CALL_TIMEOUT).await;
    let engine = crate::engine::runner::Runner::new(&ctx);
    let prepared = match engine
        .prepare_commit(
            repo,
            commit,
            &req.profile,
            req.argv,
            req.timeout_seconds,
            None,
        )
        .await
    {
        Ok(p) if follow => p.streaming(crate::sandbox::OutputTap(std::sync::Arc::new(|chunk| {
            use std::io::Write;
            // The user asked to watch: a slow terminal may slow the drain, never the result.
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(chunk);
            let _ = err.flush();
        }))),
        Ok(p) => p,
        Err(e) => {
            close_run(&ctx, prefetch).await;
            return refuse(e);
        }
    };
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    // Installed here, before anything is staged: a signal from now on cancels the run.
    let signalled = termination_signal();
    tokio::spawn(async move {
        signalled.await;
        tracing::warn!("signal received; cancelling the verification");
        let _ = cancel_tx.send(true);
    });
    let executed = engine.execute(prepared, cancel_rx).await;
    close_run(&ctx, prefetch).await;
    match executed {
        Ok(v) => {
            print_json(&v);
            if v.status == Status::Passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) if !e.is_malfunction() => refuse(e.to_string()),
        Err(e @ RunError::Settle { .. }) => {
            fail(format!("{e}; run `airlock recover` to settle it"))
        }
        Err(e) => fail(e.to_string()),
    }
}
