//! The `dependencies` check: the set store opens (its loop-mounted filesystems work here) and,
//! for `airlock doctor`, the egress path a fetch takes answers. A container hardened like a
//! fetch is started with no network; the proxy listens inside its network namespace as for a
//! fetch; from inside that namespace, every `[egress] allow` destination is asked for through
//! the proxy (`CONNECT`), and one destination that is not listed must be refused.

use super::{Check, fail, pass};
use crate::config::Config;
use crate::sandbox::{Phase, Runtime};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Arc;

const NAME: &str = "dependencies";
/// How long the whole egress probe may take (the container lives at most this long).
const EGRESS_PROBE_SECONDS: u64 = 60;
/// How long one destination may take to answer through the proxy.
const DESTINATION_ANSWER: std::time::Duration = std::time::Duration::from_secs(20);

/// Whether dependency sets can be kept here, and (`egress`) whether each allowed destination
/// answers through the egress path.
pub(super) async fn check(
    s: Option<&Runtime>,
    config: &Config,
    data_dir: &Path,
    seccomp: Option<&crate::sandbox::seccomp::SeccompProfile>,
    egress: bool,
) -> Check {
    let profiles: Vec<&str> = config
        .profiles
        .iter()
        .filter(|(_, p)| !p.dependencies.is_empty())
        .map(|(n, _)| n.as_str())
        .collect();
    if profiles.is_empty() {
        return pass(NAME, "no profile has dependencies");
    }
    let store = {
        let root = data_dir.to_path_buf();
        let bound = config.dependencies.cache_bytes;
        match tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&root)?;
            crate::deps::store::SetStore::open(&root, bound)
                .map(|s| {
                    let st = s.status();
                    s.close();
                    st
                })
                .map_err(std::io::Error::other)
        })
        .await
        .expect("opening the set store does not panic")
        {
            Ok(st) => format!(
                "{} set{}, {} of {} bytes (dependencies.cache_bytes)",
                st.sets,
                if st.sets == 1 { "" } else { "s" },
                st.bytes,
                st.bound
            ),
            Err(e) => {
                return fail(
                    NAME,
                    format!("the dependency set store: {e}"),
                    "dependency sets need root, loop devices and mkfs.ext4, like per-job checkouts",
                );
            }
        }
    };
    let head = format!("profiles {}: {store}", profiles.join(", "));
    if !egress {
        return pass(NAME, head);
    }
    let (Some(s), Some(seccomp)) = (s, seccomp) else {
        return fail(
            NAME,
            format!("{head}; the egress path was not tried: no engine"),
            "start dockerd",
        );
    };
    match probe(s, config, data_dir, seccomp).await {
        Ok(answers) => {
            let down: Vec<&String> = answers
                .iter()
                .filter(|(_, a)| a.is_err())
                .map(|(d, _)| d)
                .collect();
            let said: Vec<String> = answers
                .iter()
                .map(|(d, a)| match a {
                    Ok(()) => format!("{d} answers"),
                    Err(why) => format!("{d} does not: {why}"),
                })
                .collect();
            let detail = format!(
                "{head}; through the egress path: {}; a destination not listed is refused",
                said.join("; ")
            );
            if down.is_empty() {
                pass(NAME, detail)
            } else {
                fail(
                    NAME,
                    detail,
                    "check [egress] allow (HOST:PORT of each registry) and this host's DNS and route to them",
                )
            }
        }
        Err(why) => fail(
            NAME,
            format!("{head}; the egress path: {why}"),
            "the daemon must run on the engine's host as root (it enters a fetch container's network namespace)",
        ),
    }
}

/// Each allowed destination with whether it answered through the proxy in a fetch-like
/// container's namespace; `Err` when the path itself could not be made or let an unlisted
/// destination through.
async fn probe(
    s: &Runtime,
    config: &Config,
    data_dir: &Path,
    seccomp: &crate::sandbox::seccomp::SeccompProfile,
) -> Result<Vec<(String, Result<(), String>)>, String> {
    let profile = config
        .profile(crate::config::DEFAULT_PROFILE)
        .map_err(|e| e.to_string())?;
    let image_id = s
        .image_id(&profile.image)
        .await
        .map_err(|e| e.to_string())?;
    let base = if data_dir.join("checkouts").is_dir() {
        data_dir.join("checkouts")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix(".airlock-doctor-egress-")
        .tempdir_in(&base)
        .map_err(|e| format!("{}: {e}", base.display()))?;
    let mut spec = super::probe_spec(
        s,
        profile,
        &image_id,
        seccomp,
        dir.path(),
        vec!["sleep".into(), EGRESS_PROBE_SECONDS.to_string()],
    );
    spec.runtime.workspace_read_only = true;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<String>();
    let allow = Arc::new(config.egress.clone());
    let sandbox = s.clone();
    let asking = tokio::spawn(async move {
        let result = async {
            let id = started_rx
                .await
                .map_err(|_| "the probe container did not start".to_string())?;
            let pid = sandbox
                .container_pid(&id)
                .await
                .map_err(|e| e.to_string())?;
            let port = crate::deps::spec::PROXY_PORT;
            let listener =
                tokio::task::spawn_blocking(move || crate::deps::egress::listen_in(pid, port))
                    .await
                    .expect("entering a namespace does not panic")
                    .and_then(tokio::net::TcpListener::from_std)
                    .map_err(|e| format!("listening in the container's network namespace: {e}"))?;
            let log = Arc::new(crate::deps::egress::EgressLog::quiet());
            let proxy = tokio::spawn(crate::deps::egress::serve(
                listener,
                allow.clone(),
                log,
                "doctor".into(),
            ));
            let mut answers = vec![];
            for d in &allow.0 {
                let target = d.to_string();
                let asked = target.clone();
                let answer = tokio::task::spawn_blocking(move || ask(pid, port, &asked))
                    .await
                    .expect("asking does not panic");
                answers.push((target, answer));
            }
            // Not listed (this host's loopback, where Airlock's own API would be): refused.
            let unlisted = tokio::task::spawn_blocking(move || ask(pid, port, "127.0.0.1:9"))
                .await
                .expect("asking does not panic");
            proxy.abort();
            match unlisted {
                Err(why) if why.contains("403") => Ok(answers),
                Err(why) => Err(format!(
                    "an unlisted destination was not refused by the proxy: {why}"
                )),
                Ok(()) => Err("an unlisted destination was let through".to_string()),
            }
        }
        .await;
        let _ = stop_tx.send(true);
        result
    });
    let mut started = Some(started_tx);
    let mut created: Option<String> = None;
    let mut phases = |ph: Phase| -> Result<(), String> {
        match ph {
            Phase::Created { container_id } => created = Some(container_id),
            Phase::Started => {
                if let (Some(tx), Some(id)) = (started.take(), created.clone()) {
                    let _ = tx.send(id);
                }
            }
            Phase::Creating | Phase::Starting | Phase::Destroyed => {}
        }
        Ok(())
    };
    let ran = s
        .run(
            &spec,
            std::time::Duration::from_secs(EGRESS_PROBE_SECONDS),
            &mut phases,
            stop,
            crate::sandbox::runtime::start_now(),
        )
        .await;
    let answers = asking.await.expect("the egress probe does not panic");
    ran.map_err(|e| format!("the probe container: {e}"))?;
    answers
}

/// Asks the proxy listening in `pid`'s namespace for a tunnel to `target`: `Ok` on `200`,
/// else what it said.
fn ask(pid: u32, port: u16, target: &str) -> Result<(), String> {
    let stream = crate::deps::egress::connect_in(pid, port)
        .map_err(|e| format!("connecting to the proxy: {e}"))?;
    stream
        .set_read_timeout(Some(DESTINATION_ANSWER))
        .map_err(|e| e.to_string())?;
    let mut w = stream.try_clone().map_err(|e| e.to_string())?;
    write!(w, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut r = BufReader::new(stream);
    let mut status = String::new();
    r.read_line(&mut status)
        .map_err(|e| format!("no answer: {e}"))?;
    if status.split_whitespace().nth(1) == Some("200") {
        return Ok(());
    }
    // The refusal's body says why (after its head).
    let mut line = String::new();
    while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line.trim().is_empty() {
            break;
        }
        line.clear();
    }
    let mut body = String::new();
    let _ = r.read_line(&mut body);
    Err(format!("{} {}", status.trim(), body.trim()))
}
