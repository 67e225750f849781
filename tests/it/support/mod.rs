//! Shared helpers: real Docker (`docker()`), real git repositories and `airlock run`
//! (`repo`), a real daemon over loopback (`daemon`) and a minimal HTTP client (`http`).

pub mod daemon;
pub mod egress;
pub mod engine2;
pub mod governed;
pub mod http;
pub mod jobs;
pub mod markdown;
pub mod receiver;
pub mod repo;
pub mod schema;

pub use daemon::*;
pub use http::*;
pub use repo::*;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

pub const BIN: &str = env!("CARGO_BIN_EXE_airlock");
pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Where skipped Docker tests are listed, one name a line, so `scripts/test.sh` can count them
/// as skipped rather than passed.
pub const SKIPPED_LIST: &str =
    concat!(env!("CARGO_TARGET_TMPDIR"), "/airlock-skipped-docker-tests");

/// The config line that turns the tree cache off when `AIRLOCK_TEST_TREE_CACHE=off`: the test
/// script runs the runner, hardening and recovery tests a second time so, every job staging its
/// whole tree (as on a host without overlay support). Empty otherwise.
pub fn tree_cache_override() -> &'static str {
    match std::env::var("AIRLOCK_TEST_TREE_CACHE").as_deref() {
        Ok("off") => "tree_cache_bytes = 0\n",
        Ok("on") | Err(_) => "",
        Ok(other) => panic!("AIRLOCK_TEST_TREE_CACHE={other}: expected on or off"),
    }
}

/// The config line that puts every profile under gVisor when `AIRLOCK_TEST_RUNTIME=runsc`: the
/// test script runs the runner, hardening and recovery tests a third time so, on an engine of
/// their own with runsc registered (`scripts/runsc-engine.sh`, reached through `DOCKER_HOST`).
/// Empty otherwise.
pub fn runtime_override() -> &'static str {
    match std::env::var("AIRLOCK_TEST_RUNTIME").as_deref() {
        Ok("runsc") => "runtime = \"runsc\"\n",
        Ok("runc") | Err(_) => "",
        Ok(other) => panic!("AIRLOCK_TEST_RUNTIME={other}: expected runc or runsc"),
    }
}

/// Every top-level config line the test passes set (tree cache, isolation level).
pub fn config_overrides() -> String {
    format!("{}{}", tree_cache_override(), runtime_override())
}

/// The isolation level every job of this pass runs under.
pub fn runtime_under_test() -> &'static str {
    if runtime_override().is_empty() {
        "runc"
    } else {
        "runsc"
    }
}

/// How the first job on a revision gets its tree: `filled` (into the cache), or `full` with
/// the cache off.
pub fn first_checkout() -> &'static str {
    if tree_cache_override().is_empty() {
        "filled"
    } else {
        "full"
    }
}

/// True when Docker tests should run. Fails loudly when the engine is unreachable, unless
/// AIRLOCK_SKIP_DOCKER=1 is set explicitly; a skipped test is listed in [`SKIPPED_LIST`].
pub fn docker() -> bool {
    if std::env::var("AIRLOCK_SKIP_DOCKER").as_deref() == Ok("1") {
        let name = std::thread::current()
            .name()
            .unwrap_or("unnamed test")
            .to_string();
        eprintln!("AIRLOCK_SKIP_DOCKER=1: skipping the Docker test {name}");
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(SKIPPED_LIST)
        {
            let _ = writeln!(f, "{name}");
        }
        return false;
    }
    static CHECK: OnceLock<Result<(), String>> = OnceLock::new();
    let r = CHECK.get_or_init(|| {
        let out = Command::new("docker")
            .args(["version", "--format", "{{.Server.Version}}"])
            .output()
            .map_err(|e| format!("cannot run the docker CLI: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "no Docker engine is reachable (DOCKER_HOST={:?}): {}",
                std::env::var("DOCKER_HOST").ok(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        build_image();
        Ok(())
    });
    if let Err(e) = r {
        panic!(
            "Docker tests need a running Docker engine: {e}. Set AIRLOCK_SKIP_DOCKER=1 to skip them explicitly."
        );
    }
    true
}

fn build_image() {
    let out = Command::new(BIN)
        .args(["images", "build", "minimal", "--images-dir"])
        .arg(Path::new(ROOT).join("images"))
        .output()
        .expect("airlock images build runs");
    assert!(
        out.status.success(),
        "airlock images build minimal failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stdout of a docker command on the machine's own engine, asserting it succeeded.
pub fn docker_out(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Ids of containers (any state) labelled with a creation key.
pub fn containers_with_key(key: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=airlock.creation_key={key}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The containers of a creation key the engine reports running (started, not yet exited).
pub fn running_containers_with_key(key: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=airlock.creation_key={key}"))
        .args(["--filter", "status=running"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// How many containers were created for a creation key since `since` (unix seconds).
pub fn create_events(key: &str, since: u64) -> usize {
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    let out = Command::new("docker")
        .args([
            "events",
            "--since",
            &since.to_string(),
            "--until",
            &until.to_string(),
        ])
        .args(["--filter", "event=create", "--filter"])
        .arg(format!("label=airlock.creation_key={key}"))
        .args(["--format", "{{.ID}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A loopback port free a moment ago (bound, then closed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The probe binary (tests/fixtures/probe.c), compiled statically once per test run.
pub fn probe_binary() -> Vec<u8> {
    static BIN: OnceLock<Vec<u8>> = OnceLock::new();
    BIN.get_or_init(|| {
        let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let out = out_dir.join("airlock-probe");
        let status = Command::new("cc")
            .args(["-static", "-O2", "-pthread", "-o"])
            .arg(&out)
            .arg(Path::new(ROOT).join("tests/fixtures/probe.c"))
            .status()
            .expect("a C compiler (cc) is installed; scripts/test.sh installs gcc and libc6-dev");
        assert!(status.success(), "compiling the probe failed");
        std::fs::read(&out).unwrap()
    })
    .clone()
}

/// Parses `key=value` lines.
pub fn kv(output: &str) -> std::collections::BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One of the tests' Python tools (scripts/install-prereqs.sh installs
/// scripts/requirements-tests.txt into target/py).
pub fn python_tool(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/py/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-prereqs.sh (it installs scripts/requirements-tests.txt into target/py)",
        path.display()
    );
    path
}

/// Runs a Python fixture (tests/fixtures/<script>) with the tests' Python, `job` as JSON on
/// stdin, in `cwd`; returns its JSON stdout, failing with its stderr when it fails.
pub fn python_json(
    script: &str,
    cwd: &std::path::Path,
    job: &serde_json::Value,
) -> serde_json::Value {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(script);
    let mut child = Command::new(python_tool("python"))
        .arg(&path)
        .current_dir(cwd)
        .env("HOME", cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(job.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Unmounts every mount at or beneath `dir`, deepest first (lazily, so a busy one still goes).
/// A daemon killed with SIGKILL leaves its tree cache and job filesystems mounted; a fixture
/// calls this before its directory is removed so no loop device outlives the test.
pub fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut points: Vec<std::path::PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| std::path::PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    for p in points {
        let _ = Command::new("umount").arg("-l").arg(&p).status();
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
