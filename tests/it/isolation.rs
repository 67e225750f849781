//! Isolation levels on real engines: a profile with `runtime = "runsc"` runs under gVisor, only
//! on an engine that says it offers runsc (here a second dockerd with it registered, beside the
//! machine's engine, which does not), and is refused before anything is recorded when no
//! engine can ever offer it. The record, its hash and its attestation name the level; an
//! out-of-memory kill under gVisor (which the engine reports by its `oom` event only, never in
//! `State.OOMKilled`) is still `oom_killed`.

use crate::support::engine2::SecondEngine;
use crate::support::*;

const IMAGE: &str = "airlock/minimal:latest";

/// Profiles alike but for their isolation level; `gvisor_small` has 64 MiB of memory.
const PROFILES: &str = "[profiles.gvisor]\nimage = \"airlock/minimal:latest\"\nruntime = \"runsc\"\n\
     [profiles.plain]\nimage = \"airlock/minimal:latest\"\nruntime = \"runc\"\n\
     [profiles.gvisor_small]\nimage = \"airlock/minimal:latest\"\nruntime = \"runsc\"\nmemory_bytes = 67108864\n";

/// The machine's engine (no runsc) and `engine` (runsc registered), one slot each.
fn pool(engine: &SecondEngine) -> String {
    format!(
        "[[engines]]\nname = \"here\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = 2\n{}{PROFILES}",
        engine.config("gvisor-engine", 2)
    )
}

#[test]
fn a_runsc_profile_runs_under_gvisor_only_where_it_is_offered_and_says_so() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start_with_runsc(&[IMAGE]);
    let f = Fixture::new(&[("README", "hello\n", false)]).with_config(&pool(&engine));
    let host_kernel = String::from_utf8(
        std::process::Command::new("uname")
            .arg("-r")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    // Every run of the gvisor profile lands on the engine that offers runsc, under gVisor's
    // kernel (not the host's: the kernel log it reads is gVisor's own), with the job's own
    // hardening (user, read-only root).
    for _ in 0..3 {
        let v = f
            .run(
                &["--profile", "gvisor"],
                &[
                    "sh",
                    "-c",
                    "uname -r; id -u; dmesg 2>&1 | head -1; \
                     touch /x 2>/dev/null && echo writable || echo read-only; cat README",
                ],
            )
            .json
            .unwrap();
        assert_eq!(v["status"], "passed", "{v}");
        assert_eq!(v["runtime"], "runsc");
        assert_eq!(v["engine"], "gvisor-engine", "{v}");
        let out = v["output"].as_str().unwrap();
        assert!(!out.starts_with(&host_kernel), "the host's kernel: {out}");
        assert!(out.contains("\n65532\n"), "{out}");
        assert!(out.contains("Starting gVisor"), "{out}");
        assert!(out.ends_with("\nread-only\nhello\n"), "{out}");
        assert_eq!(engine.leftovers(), (vec![], vec![]));
        let key = v["creation_key"].as_str().unwrap();
        assert_eq!(containers_with_key(key), Vec::<String>::new());
    }
    // The same profile under runc hashes differently: the runtime is in the create body.
    let plain = f
        .run(
            &["--profile", "plain"],
            &["sh", "-c", "dmesg 2>&1 | head -1"],
        )
        .json
        .unwrap();
    assert_eq!(plain["status"], "passed", "{plain}");
    assert_eq!(plain["runtime"], "runc");
    assert!(
        !plain["output"].as_str().unwrap().contains("gVisor"),
        "{plain}"
    );
    let gvisor = f.run(&["--profile", "gvisor"], &["true"]).json.unwrap();
    assert_ne!(plain["environment_sha256"], gvisor["environment_sha256"]);
    // The signed statement names the runtime, and an edited record no longer verifies.
    let att = &gvisor["attestation"];
    if !att.is_null() {
        let payload = att["payload"].as_str().unwrap();
        use base64::Engine;
        let st: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(payload)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(st["predicate"]["airlock"]["runtime"], "runsc", "{st}");
    }
}

#[test]
fn a_runsc_profile_with_no_engine_offering_it_is_refused_naming_the_runtime() {
    if !docker() {
        return;
    }
    // The machine's engine alone, which has no runsc registered.
    let f = Fixture::new(&[("README", "hello\n", false)]).with_config(&format!(
        "[[engines]]\nname = \"here\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = 2\n{PROFILES}"
    ));
    let r = f.run(&["--profile", "gvisor"], &["true"]);
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(
        r.stderr
            .contains("no engine offers the isolation level (runtime) runsc: here offers runc"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("daemon.json"), "{}", r.stderr);
    // Nothing was recorded: the refusal came before the job.
    let listed = std::fs::read_dir(f.data.join("artifacts").join("verifications"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(listed, 0, "a refused job left an artifact");
}

#[test]
fn an_out_of_memory_kill_under_gvisor_is_oom_killed_never_passed() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start_with_runsc(&[IMAGE]);
    let f = Fixture::new(&[("README", "hello\n", false)]).with_config(&pool(&engine));
    let v = f
        .run(
            &["--profile", "gvisor_small", "--timeout", "120"],
            &["sh", "-c", "head -c 400000000 /dev/zero | tail -c 300000000 > /dev/null; echo survived; exit 0"],
        )
        .json
        .unwrap();
    assert_eq!(v["runtime"], "runsc");
    assert_ne!(v["status"], "passed", "{v}");
    assert_eq!(v["oom_killed"], true, "{v}");
    assert_eq!(engine.leftovers(), (vec![], vec![]));
}

/// `scripts/runsc-engine.sh`'s engine (a unix socket on this host, so its jobs' trees are
/// bind-mounted and its processes are this host's), stopped when dropped.
struct LocalRunscEngine {
    dir: tempfile::TempDir,
    host: String,
}

impl LocalRunscEngine {
    /// Started with runsc's arguments `args` (a JSON list's items).
    fn start(args: &str) -> LocalRunscEngine {
        let dir = tempfile::Builder::new()
            .prefix("airlock-runsc-")
            .tempdir()
            .unwrap();
        let out = std::process::Command::new(format!("{ROOT}/scripts/runsc-engine.sh"))
            .arg("start")
            .arg(dir.path())
            .env("RUNSC_ARGS", args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let host = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .strip_prefix("DOCKER_HOST=")
            .expect("the script prints DOCKER_HOST")
            .to_string();
        LocalRunscEngine { dir, host }
    }

    /// This engine's gVisor sandboxes and gofers still running on this host.
    fn runsc_processes(&self) -> Vec<String> {
        let out = std::process::Command::new("pgrep")
            .args([
                "-a",
                "-f",
                &format!("^runsc-(sandbox|gofer) .*{}", self.dir.path().display()),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains("runsc-engine.sh"))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for LocalRunscEngine {
    fn drop(&mut self) {
        let _ = std::process::Command::new(format!("{ROOT}/scripts/runsc-engine.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_sandbox_runsc_refused_to_start_is_ended_by_its_container_id() {
    if !docker() {
        return;
    }
    // Registered without --network=none, runsc refuses every start and leaves its sandbox
    // and gofer running: what an operator's mistake looks like.
    let engine = LocalRunscEngine::start("");
    let f = Fixture::new(&[("README", "hello\n", false)]).with_config(PROFILES);
    for _ in 0..2 {
        let r = RunResult::from(
            f.run_cmd(&["--profile", "gvisor"], &["true"])
                .env("DOCKER_HOST", &engine.host)
                .output()
                .unwrap(),
        );
        let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
        assert_eq!(v["status"], "error", "{v}");
        assert!(
            v["error"].as_str().unwrap().contains("network"),
            "the engine's refusal is the error: {v}"
        );
        assert_eq!(
            engine.runsc_processes(),
            Vec::<String>::new(),
            "runsc processes outlived their container"
        );
    }
}
