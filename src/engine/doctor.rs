//! `airlock doctor`: whether this machine can run Airlock, check by check, each with what it
//! saw and, when it fails, what to do. `airlock serve` runs the same checks (all but the
//! listen address, which it binds itself) before it opens anything and refuses with the first
//! failing one.

mod dependencies;
mod engines;

use crate::config::Config;
use crate::sandbox::{ContainerSpec, JobEnd, Phase, RunIdentity, Runtime, WorkspaceSource};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Oldest git Airlock's plumbing is written against.
pub const MIN_GIT: (u32, u32) = (2, 40);
/// How long the probe container may take.
pub const PROBE_TIMEOUT_SECONDS: u64 = 60;

/// One check's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    /// What was seen.
    pub detail: String,
    /// What to do, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Every check, in order.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ok: bool,
    pub checks: Vec<Check>,
}

impl Report {
    /// The first failing check, as one message.
    pub fn first_failure(&self) -> Option<String> {
        self.first_failure_except(&[])
    }

    /// The first failing check not named in `except`, as one message.
    pub fn first_failure_except(&self, except: &[&str]) -> Option<String> {
        self.checks
            .iter()
            .find(|c| !c.ok && !except.contains(&c.name))
            .map(|c| {
                format!(
                    "{}: {}{}",
                    c.name,
                    c.detail,
                    c.fix
                        .as_ref()
                        .map(|f| format!(" ({f})"))
                        .unwrap_or_default()
                )
            })
    }

    /// The report as a table for a terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!(
                "{:<4}  {:<12}  {}\n",
                if c.ok { "ok" } else { "FAIL" },
                c.name,
                c.detail
            ));
            if let Some(f) = &c.fix {
                out.push_str(&format!("{:<4}  {:<12}  fix: {f}\n", "", ""));
            }
        }
        out.push_str(if self.ok {
            "Airlock can run here.\n"
        } else {
            "Airlock cannot run here until the checks marked FAIL pass.\n"
        });
        out
    }
}

/// What to check besides the always-on checks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where `images/` is, to say whether each image is up to date with it.
    pub images_dir: Option<PathBuf>,
    /// Bind the listen addresses (doctor does; serve binds them itself).
    pub check_listen: bool,
    /// Check the engine (docker, cgroups, images, the probe container): off only for the
    /// test builds' scripted fake runtime.
    pub docker: bool,
    /// Try the egress path to every `[egress] allow` destination (doctor does; serve does
    /// not: a registry that is down must not keep the daemon from starting).
    pub egress: bool,
}

/// Every check doctor runs, by name: the operations manual's troubleshooting table has a row
/// for each (a test holds it to that), and a check outside this list is a bug caught in test
/// builds.
pub const CHECKS: &[&str] = &[
    "docker",
    "cgroups",
    "seccomp",
    "images",
    "engines",
    "isolation",
    "probe",
    "checkouts",
    "dependencies",
    "data_dir",
    "attestations",
    "free_space",
    "git",
    "listen",
];

fn pass(name: &'static str, detail: impl Into<String>) -> Check {
    debug_assert!(
        CHECKS.contains(&name),
        "doctor check {name} is not in CHECKS"
    );
    Check {
        name,
        ok: true,
        detail: detail.into(),
        fix: None,
    }
}

fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    debug_assert!(
        CHECKS.contains(&name),
        "doctor check {name} is not in CHECKS"
    );
    Check {
        name,
        ok: false,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

/// Without `[[engines]]` (jobs run on this engine): every profile's isolation level is one the
/// engine offers, or a failed check naming the profile and how to register the runtime.
fn isolation(config: &Config, offered: &[crate::domain::isolation::Isolation]) -> Option<Check> {
    let lacking: Vec<String> = config
        .profiles
        .values()
        .filter(|p| !offered.contains(&p.runtime))
        .map(|p| format!("profile {} runs under {}", p.name, p.runtime))
        .collect();
    let uses_runsc = config
        .profiles
        .values()
        .any(|p| p.runtime == crate::domain::isolation::Isolation::Runsc);
    if lacking.is_empty() {
        return uses_runsc.then(|| {
            pass(
                "isolation",
                format!(
                    "every profile's runtime is offered here ({})",
                    engines::runtimes(offered)
                ),
            )
        });
    }
    Some(fail(
        "isolation",
        format!(
            "{}, which this engine does not offer (it offers {}); those jobs are refused",
            lacking.join("; "),
            engines::runtimes(offered)
        ),
        "register the runtime in the engine's daemon.json, e.g. {\"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--network=none\"]}}}, and restart dockerd (see docs/security.md, isolation levels)",
    ))
}

/// Runs every check against `config` and `data_dir`.
pub async fn run(config: &Config, data_dir: &Path, opts: &Options) -> Report {
    let mut checks = vec![];
    let connected = if opts.docker {
        Some(crate::sandbox::connect_local().await)
    } else {
        None
    };
    let sandbox = match connected {
        None => None,
        Some(connected) => match connected {
            Ok(s) => match s.facts().await {
                Ok(f) => {
                    checks.push(pass(
                        "docker",
                        format!(
                            "Docker {} (engine API {}, negotiated {}; runtimes {})",
                            f.version,
                            f.api_version,
                            f.client_api_version,
                            engines::runtimes(&f.runtimes)
                        ),
                    ));
                    checks.push(cgroups(&f.cgroup_version, &f.cgroup_driver));
                    if config.engines.is_empty() {
                        checks.extend(isolation(config, &f.runtimes));
                    }
                    Some(s)
                }
                Err(e) => {
                    checks.push(fail("docker", e.to_string(), "check that dockerd runs"));
                    None
                }
            },
            Err(e) => {
                checks.push(fail(
                    "docker",
                    e.to_string(),
                    "start dockerd, or point DOCKER_HOST at a running engine",
                ));
                None
            }
        },
    };
    let seccomp = crate::sandbox::seccomp::load();
    checks.push(match &seccomp {
        Ok(p) => pass(
            "seccomp",
            format!("seccomp/airlock.json is valid (sha256 {})", &p.sha256[..12]),
        ),
        Err(e) => fail(
            "seccomp",
            e.to_string(),
            "restore seccomp/airlock.json from the repository",
        ),
    });
    if let Some(s) = &sandbox
        && !config.engines.is_empty()
    {
        checks.push(engines::check(s, config, seccomp.as_ref().ok()).await);
    }
    if let Some(s) = &sandbox {
        checks.push(images(s, config, opts.images_dir.as_deref()).await);
        if let Ok(p) = &seccomp {
            checks.push(probe(s, config, data_dir, p).await);
        }
    }
    checks.push(
        match crate::engine::runner::check_checkout_support(config) {
            Ok(()) => pass(
                "checkouts",
                match config.checkout_filesystem {
                    crate::config::CheckoutFilesystem::Loop => format!(
                        "loop devices and mkfs.ext4 for per-job filesystems; {}",
                        warm_checkouts(config, data_dir)
                    ),
                    crate::config::CheckoutFilesystem::Directory => {
                        "checkout_filesystem = \"directory\" (no per-job disk quota, no warm checkouts: every job stages its whole tree)".to_string()
                    }
                },
            ),
            Err(e) => fail(
                "checkouts",
                e,
                "load the loop module, run as root, or set checkout_filesystem = \"directory\"",
            ),
        },
    );
    checks.push(
        dependencies::check(
            sandbox.as_ref(),
            config,
            data_dir,
            seccomp.as_ref().ok(),
            opts.egress,
        )
        .await,
    );
    checks.push(attestation_keys(config));
    checks.push(data_dir_check(data_dir));
    checks.push(free_space(data_dir, config.min_free_bytes));
    checks.push(git());
    if opts.check_listen {
        checks.push(listen(config, data_dir).await);
    }
    Report {
        ok: checks.iter().all(|c| c.ok),
        checks,
    }
}

/// The signing key and the public keys attestations verify with, each by id and its public
/// key (the base64 of its SubjectPublicKeyInfo, the body of its PEM).
fn attestation_keys(config: &Config) -> Check {
    match crate::engine::attesting::Attestor::load(config) {
        Ok(a) if !a.signs() && a.keys().is_empty() => pass(
            "attestations",
            "not signed (no signing_key configured; see `airlock keys generate`)",
        ),
        Ok(a) => {
            let keys: Vec<String> = a
                .keys()
                .iter()
                .map(|k| {
                    let body: String = k.pem.lines().filter(|l| !l.starts_with("-----")).collect();
                    let role = if Some(k.key_id.as_str()) == a.signing_key_id() {
                        "signing"
                    } else {
                        "verifies"
                    };
                    format!("{role} key {} ({body})", k.key_id)
                })
                .collect();
            let signing = if a.signs() {
                "signed"
            } else {
                "not signed (no signing_key)"
            };
            pass(
                "attestations",
                format!("{signing} as {}; {}", a.verifier.id, keys.join("; ")),
            )
        }
        // An old public key kept for verifying is restored or dropped, never generated anew
        // (a new key could not verify what the old one signed).
        Err(e) if e.starts_with("verification_keys") => fail(
            "attestations",
            e,
            "put back the public key file (the PEM of an earlier signing key, kept so what it signed still verifies), or remove its entry from verification_keys",
        ),
        Err(e) => fail(
            "attestations",
            e,
            "generate a key with `airlock keys generate PATH` (mode 0600) and name it as signing_key",
        ),
    }
}

/// Whether jobs get warm overlay checkouts here, and if not why not (a fallback, not a
/// failure: jobs then stage their whole tree, as before warm checkouts).
fn warm_checkouts(config: &crate::config::Config, data_dir: &Path) -> String {
    let cache = data_dir.join(crate::staging::cache::CACHE_DIR);
    if config.tree_cache_bytes == 0 {
        "warm checkouts off (tree_cache_bytes = 0): every job stages its whole tree".into()
    } else if let Some(why) = crate::staging::cache::overlay_support_problem() {
        format!("no warm checkouts: {why}")
    } else if crate::sandbox::pool_workspace_kind(config)
        == crate::sandbox::spec::WorkspaceKind::Volume
    {
        "no warm checkouts: the engines share no filesystem with this host (trees are uploaded)"
            .into()
    } else {
        format!(
            "warm overlay checkouts over a tree cache of up to {} bytes in {}",
            config.tree_cache_bytes,
            cache.display()
        )
    }
}

fn cgroups(version: &str, driver: &str) -> Check {
    // Memory (with swap equal to it), pids and cpu limits need these controllers, on cgroup v2
    // (the unified hierarchy's cgroup.controllers) or v1 (/proc/cgroups, enabled).
    let have: Vec<String> = if version == "2" {
        std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    } else {
        std::fs::read_to_string("/proc/cgroups")
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 4 && f[3] == "1").then(|| f[0].to_string())
            })
            .collect()
    };
    let missing: Vec<&str> = ["memory", "pids", "cpu"]
        .into_iter()
        .filter(|c| !have.iter().any(|h| h == c))
        .collect();
    if missing.is_empty() {
        pass(
            "cgroups",
            format!(
                "cgroup v{version} ({driver}) with the memory, pids and cpu controllers{}",
                if version == "2" {
                    ""
                } else {
                    " (v2 is recommended)"
                }
            ),
        )
    } else {
        fail(
            "cgroups",
            format!(
                "cgroup v{version} without the {} controller(s); limits cannot be enforced",
                missing.join(", ")
            ),
            "enable them (cgroup v2: the root cgroup's cgroup.subtree_control)",
        )
    }
}

/// The images Airlock needs present: the default profile's, every workspace's profile's, and
/// the git profile's when a workspace is governed (its dry run). Other profiles' images are
/// reported when missing but do not fail the check.
async fn images(s: &Runtime, config: &Config, images_dir: Option<&Path>) -> Check {
    let mut needed = vec![crate::config::DEFAULT_PROFILE.to_string()];
    for ws in config.workspaces.values() {
        needed.push(ws.profile.clone());
        if ws.worktree.is_some() {
            needed.push(crate::config::GIT_PROFILE.to_string());
        }
    }
    let mut seen = vec![];
    let mut problems = vec![];
    let mut notes = vec![];
    for p in config.profiles.values() {
        if seen.contains(&p.image) {
            continue;
        }
        seen.push(p.image.clone());
        let required = needed.contains(&p.name);
        let Some(label) = s.image_content_sha(&p.image).await else {
            let m = format!("{} (profile {}) is missing", p.image, p.name);
            if required {
                problems.push(m);
            } else {
                notes.push(m);
            }
            continue;
        };
        let local = p
            .image
            .strip_prefix(crate::sandbox::docker::images::IMAGE_REPOSITORY_PREFIX)
            .and_then(|r| r.strip_suffix(":latest"));
        if let (Some(name), Some(dir)) = (local, images_dir)
            && dir.join(name).is_dir()
        {
            let want =
                crate::sandbox::docker::images::content_sha(dir, name, Default::default()).ok();
            if want.is_some() && label != want {
                problems.push(format!(
                    "{} is older than {}",
                    p.image,
                    dir.join(name).display()
                ));
            }
        }
    }
    let unused = if notes.is_empty() {
        String::new()
    } else {
        format!("; not needed by any workspace: {}", notes.join(", "))
    };
    if problems.is_empty() {
        pass("images", format!("needed images present{unused}"))
    } else {
        fail(
            "images",
            format!("{}{unused}", problems.join("; ")),
            "run `airlock images build` (or `airlock images build NAME`)",
        )
    }
}

/// A real job container, hardened like every job (the default profile, the seccomp profile,
/// no network), reads back a token from a bind-mounted directory beside the data dir: proof
/// that the engine accepts the profile and sees this host's files.
async fn probe(
    s: &Runtime,
    config: &Config,
    data_dir: &Path,
    seccomp: &crate::sandbox::seccomp::SeccompProfile,
) -> Check {
    const NAME: &str = "probe";
    let profile = match config.profile(crate::config::DEFAULT_PROFILE) {
        Ok(p) => p,
        Err(e) => return fail(NAME, e.to_string(), "configure a default profile"),
    };
    let image_id = match s.image_id(&profile.image).await {
        Ok(i) => i,
        Err(e) => return fail(NAME, e.to_string(), "run `airlock images build minimal`"),
    };
    // Beside the data dir when it exists (where checkouts live), else the temp dir.
    let base = if data_dir.is_dir() {
        data_dir.join("checkouts")
    } else {
        std::env::temp_dir()
    };
    let dir = match tempfile::Builder::new()
        .prefix(".airlock-doctor-")
        .tempdir_in(&base)
    {
        Ok(d) => d,
        Err(e) => {
            return fail(
                NAME,
                format!("{}: {e}", base.display()),
                "check the data dir",
            );
        }
    };
    let token = crate::ids::new_creation_key();
    let prepared = (|| -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(dir.path().join("token"), &token)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(
            dir.path().join("token"),
            std::fs::Permissions::from_mode(0o644),
        )
    })();
    if let Err(e) = prepared {
        return fail(
            NAME,
            format!("{}: {e}", dir.path().display()),
            "check the data dir",
        );
    }
    let spec = probe_spec(
        s,
        profile,
        &image_id,
        seccomp,
        dir.path(),
        vec!["cat".into(), format!("{}/token", profile.working_dir)],
    );
    let (_tx, cancel) = tokio::sync::watch::channel(false);
    let mut phases = |_: Phase| Ok(());
    let ran = s
        .run(
            &spec,
            std::time::Duration::from_secs(PROBE_TIMEOUT_SECONDS),
            &mut phases,
            cancel,
            crate::sandbox::runtime::start_now(),
        )
        .await;
    match ran {
        Ok(o)
            if matches!(o.end, JobEnd::Exited { code: 0, .. }) && o.output.text.trim() == token =>
        {
            pass(
                NAME,
                format!(
                    "a hardened {} container read a file bind-mounted from {} ({} ms)",
                    profile.image,
                    base.display(),
                    o.duration.as_millis()
                ),
            )
        }
        Ok(o) => fail(
            NAME,
            format!(
                "the probe container ended {:?} with output {:?}, not the token",
                o.end,
                o.output.text.trim()
            ),
            "the engine must share this host's filesystem (a remote or rootless engine cannot bind-mount the data dir)",
        ),
        Err(e) => fail(
            NAME,
            e.to_string(),
            "the engine must accept the seccomp profile and bind mounts from this host",
        ),
    }
}

/// A container of `profile` hardened like every job (its environment resolved as a job's),
/// running `argv` over `workspace` bind-mounted: doctor's probes.
fn probe_spec(
    s: &Runtime,
    profile: &crate::config::Profile,
    image_id: &str,
    seccomp: &crate::sandbox::seccomp::SeccompProfile,
    workspace: &Path,
    argv: Vec<String>,
) -> ContainerSpec {
    let env = crate::engine::runner::environment::EnvironmentSpec::resolve(
        s.as_ref(),
        profile,
        image_id,
        seccomp,
        crate::config::CheckoutFilesystem::Directory,
    );
    let key = crate::ids::new_creation_key();
    ContainerSpec {
        runtime: env.runtime.clone(),
        run: RunIdentity {
            creation_key: key.clone(),
            verification_id: format!("doctor_{key}"),
            instance_id: "doctor".into(),
            argv,
            workspace: WorkspaceSource::HostBind(workspace.to_path_buf()),
            deps: None,
            output: None,
        },
    }
}

fn data_dir_check(data_dir: &Path) -> Check {
    if !data_dir.exists() {
        let parent = data_dir
            .ancestors()
            .skip(1)
            .find(|a| a.exists())
            .unwrap_or(Path::new("/"));
        let writable = nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK).is_ok();
        return if writable {
            pass(
                "data_dir",
                format!(
                    "{} does not exist yet; Airlock creates it (mode 0700) under {}",
                    data_dir.display(),
                    parent.display()
                ),
            )
        } else {
            fail(
                "data_dir",
                format!(
                    "{} does not exist and {} is not writable",
                    data_dir.display(),
                    parent.display()
                ),
                "choose another --data-dir or data_dir",
            )
        };
    }
    let root = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    match crate::engine::audit(&root) {
        Ok(()) => pass(
            "data_dir",
            format!(
                "{} is owned by this uid and not writable by others",
                root.display()
            ),
        ),
        Err(e) => fail("data_dir", e.to_string(), "see the message"),
    }
}

fn free_space(data_dir: &Path, min_free: u64) -> Check {
    let at = data_dir
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    match nix::sys::statvfs::statvfs(at) {
        Ok(st) => {
            let free = st.blocks_available() * st.fragment_size();
            if free >= min_free {
                pass(
                    "free_space",
                    format!(
                        "{} MiB free at {} (min_free_bytes {} MiB)",
                        free >> 20,
                        at.display(),
                        min_free >> 20
                    ),
                )
            } else {
                fail(
                    "free_space",
                    format!(
                        "{} MiB free at {}, below min_free_bytes {} MiB",
                        free >> 20,
                        at.display(),
                        min_free >> 20
                    ),
                    "free space there, or lower min_free_bytes",
                )
            }
        }
        Err(e) => fail(
            "free_space",
            format!("statvfs {}: {e}", at.display()),
            "check the path",
        ),
    }
}

use crate::staging::parse_git_version;

fn git() -> Check {
    let text = match crate::staging::git_version() {
        Ok(t) => t,
        Err(e) => {
            return fail(
                "git",
                format!("git --version: {e}"),
                "install git (>= 2.40)",
            );
        }
    };
    match parse_git_version(&text) {
        Some(v) if v >= MIN_GIT => pass("git", text),
        _ => fail(
            "git",
            format!("{text}: Airlock needs git >= {}.{}", MIN_GIT.0, MIN_GIT.1),
            "install a newer git",
        ),
    }
}

/// The pid of the `airlock serve` holding `data_dir`'s serve lock, when one does (probed with
/// a shared lock taken and dropped at once).
fn serving_pid(data_dir: &Path) -> Option<String> {
    let path = crate::engine::layout::DataLayout::new(data_dir).serve_lock();
    let file = std::fs::File::open(&path).ok()?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(_) => None,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Some(
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        Err(_) => None,
    }
}

/// Whether `addr` answers `GET /healthz` as an Airlock daemon does.
async fn answers_as_airlock(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut c = tokio::net::TcpStream::connect(addr).await.ok()?;
        c.write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .ok()?;
        let mut answer = Vec::new();
        c.take(4096).read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8_lossy(&answer);
        Some(text.starts_with("HTTP/1.1 200") && text.contains("{\"status\":\"ok\"}"))
    };
    tokio::time::timeout(std::time::Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

async fn listen(config: &Config, data_dir: &Path) -> Check {
    let mut addrs = vec![("listen", config.listen.clone())];
    if let Some(m) = &config.metrics_listen {
        addrs.push(("metrics_listen", m.clone()));
    }
    let mut seen = vec![];
    let serving = serving_pid(data_dir);
    for (key, addr) in addrs {
        match tokio::net::TcpListener::bind(&addr).await {
            Ok(_) => seen.push(format!("{key} {addr} is free")),
            // Taken by this data dir's own running daemon: nothing to fix.
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && serving.is_some()
                    && answers_as_airlock(&addr).await =>
            {
                seen.push(format!(
                    "{key} {addr} is served by the airlock serve running on this data dir (pid {})",
                    serving.as_deref().unwrap_or("?")
                ))
            }
            Err(e) => {
                return fail(
                    "listen",
                    format!("{key} {addr}: {e}"),
                    "stop what listens there, or change the address",
                );
            }
        }
    }
    pass("listen", seen.join(", "))
}

#[cfg(test)]
mod tests;
