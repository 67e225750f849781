//! A real `airlock serve` for the tests: two workspaces with their repositories, a config with
//! members and tokens, the daemon as a child process (real HTTP on loopback, real SQLite), on
//! real Docker or on the scripted fake runtime, with a watchdog.

use super::BIN;
use super::http::call;
use super::repo::git;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const ALICE: &str = "alice-token";
pub const BOB: &str = "bob-token-view-only";
pub const CAROL: &str = "carol-token-other-workspace";
pub const RUN_A: &str = "run-a-token";
/// A second decider in ws1: deliveries alice requests are decided by dave (distinct_approver).
pub const DAVE: &str = "dave-token-decider";
/// On governed servers: a member of ws1 with `view`, `review` and `approve`.
pub const ERIN: &str = "erin-token-reviewer-approver";
/// On governed servers: a member of ws1 with `view` and `review`.
pub const SAM: &str = "sam-token-reviewer";

pub fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Two workspaces with their repositories, a config, and a running daemon.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub config: PathBuf,
    pub clock: PathBuf,
    pub addr: String,
    /// Environment variables every (re)start passes to the daemon.
    pub env: Vec<(String, String)>,
    /// Where the daemon's stderr (its log) goes; discarded when `None`.
    pub log: Option<PathBuf>,
    /// The `metrics_listen` address, when the config names one.
    pub metrics_addr: Option<String>,
    child: Option<Child>,
    /// Jobs run on the scripted fake runtime (workflow tests need no Docker engine).
    fake: bool,
}

impl Server {
    /// A daemon on real Docker.
    pub fn start() -> Server {
        Self::start_with("")
    }

    pub fn start_with(extra: &str) -> Server {
        Self::launch(extra, false, false)
    }

    /// A daemon whose jobs run on the scripted fake runtime (`airlock::sandbox::fake`): for
    /// tests of workflow logic only, never of sandbox limits, lifecycle or recovery.
    pub fn fake() -> Server {
        Self::launch("", true, false)
    }

    pub fn fake_with(extra: &str) -> Server {
        Self::launch(extra, true, false)
    }

    /// On the fake runtime, with `ws1` governed (its repository is the worktree): alice also
    /// holds `propose` and `admin`, dave `propose`; bob views and reviews; erin reviews and
    /// approves; sam reviews (roles come from the test's extra config).
    pub fn fake_governed() -> Server {
        Self::launch("", true, true)
    }

    /// A governed daemon on real Docker (validation's dry run and tests need containers).
    pub fn governed_with(extra: &str) -> Server {
        Self::launch(extra, false, true)
    }

    /// [`Server::fake_governed`] with extra top-level config.
    pub fn fake_governed_with(extra: &str) -> Server {
        Self::launch(extra, true, true)
    }

    fn launch(extra: &str, fake: bool, governed: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let repo2 = dir.path().join("repo2");
        for r in [&repo, &repo2] {
            std::fs::create_dir(r).unwrap();
            git(r, &["init", "-q", "-b", "main"]);
            std::fs::write(r.join("README"), "base\n").unwrap();
            git(r, &["add", "-A"]);
            git(r, &["commit", "-q", "-m", "base"]);
        }
        let config = dir.path().join("airlock.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:0\"\ndata_dir = \"{data}\"\n{cache}{extra}\n\
                 [workspaces.ws1]\n{repo_key} = \"{repo}\"\n\
                 members = {{ alice = [\"view\", \"integrate\", \"verify\", \"decide\", \"push\"{alice_extra}], bob = [\"view\"{bob_extra}], dave = [\"view\", \"decide\"{dave_extra}]{more_members} }}\n\
                 [workspaces.ws2]\nrepo = \"{repo2}\"\nmembers = {{ carol = [\"view\", \"integrate\"] }}\n\
                 [[tokens]]\nsha256 = \"{a}\"\nmember_id = \"alice\"\n\
                 [[tokens]]\nsha256 = \"{b}\"\nmember_id = \"bob\"\n\
                 [[tokens]]\nsha256 = \"{c}\"\nmember_id = \"carol\"\n\
                 [[tokens]]\nsha256 = \"{d}\"\nmember_id = \"dave\"\n\
                 [[tokens]]\nsha256 = \"{r}\"\nrun_id = \"run_a\"\nworkspace_id = \"ws1\"\n\
                 [[tokens]]\nsha256 = \"{e}\"\nmember_id = \"erin\"\n\
                 [[tokens]]\nsha256 = \"{f}\"\nmember_id = \"sam\"\n",
                data = dir.path().join("data").display(),
                cache = super::config_overrides(),
                repo_key = if governed { "worktree" } else { "repo" },
                alice_extra = if governed { ", \"propose\", \"admin\", \"apply\"" } else { "" },
                bob_extra = if governed { ", \"review\"" } else { "" },
                dave_extra = if governed { ", \"propose\"" } else { "" },
                more_members = if governed {
                    ", erin = [\"view\", \"review\", \"approve\"], sam = [\"view\", \"review\"]"
                } else {
                    ""
                },
                e = sha(ERIN),
                f = sha(SAM),
                repo = repo.display(),
                repo2 = repo2.display(),
                a = sha(ALICE),
                b = sha(BOB),
                c = sha(CAROL),
                r = sha(RUN_A),
                d = sha(DAVE),
            ),
        )
        .unwrap();
        let clock = dir.path().join("clock");
        let mut s = Server {
            dir,
            repo,
            config,
            clock,
            addr: String::new(),
            env: vec![],
            log: None,
            metrics_addr: None,
            child: None,
            fake,
        };
        s.restart(None);
        s
    }

    /// (Re)starts the daemon, optionally with a crash point.
    pub fn restart(&mut self, crash_at: Option<&str>) {
        self.stop();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(&self.config)
            .env("AIRLOCK_TEST_CLOCK_FILE", &self.clock)
            .env_remove("AIRLOCK_CRASH_AT")
            .stdout(Stdio::piped())
            .stderr(match &self.log {
                Some(p) => Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)
                        .unwrap(),
                ),
                None => Stdio::null(),
            });
        if let Some(c) = crash_at {
            cmd.env("AIRLOCK_CRASH_AT", c);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if self.fake {
            cmd.env("AIRLOCK_TEST_FAKE_RUNTIME", "1");
        } else {
            cmd.env_remove("AIRLOCK_TEST_FAKE_RUNTIME");
        }
        // The daemon dies with the test's thread, and a watchdog kills it if the test hangs.
        airlock::process::dies_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("airlock serve starts");
        watchdog(child.id(), &self.config);
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("serve printed {line:?}: {e}"));
        self.addr = v["listening"].as_str().unwrap().to_string();
        self.metrics_addr = v["metrics_listening"].as_str().map(str::to_string);
        self.child = Some(child);
    }

    /// Stops the daemon with SIGTERM and returns its exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let status = child.wait().ok()?;
        status.code()
    }

    /// A second daemon beside this one, on the same repositories and tokens but with its own
    /// config file whose `data_dir` is `data` (a restored backup, say), on its own port.
    pub fn beside(&self, data: &Path) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let live = self.dir.path().join("data");
        let text = std::fs::read_to_string(&self.config).unwrap().replace(
            &format!("data_dir = \"{}\"", live.display()),
            &format!("data_dir = \"{}\"", data.display()),
        );
        assert!(text.contains(&data.display().to_string()), "{text}");
        let config = dir.path().join("airlock.toml");
        std::fs::write(&config, text).unwrap();
        let mut s = Server {
            clock: dir.path().join("clock"),
            dir,
            repo: self.repo.clone(),
            config,
            addr: String::new(),
            env: self.env.clone(),
            log: None,
            metrics_addr: None,
            child: None,
            fake: self.fake,
        };
        s.log = Some(s.dir.path().join("daemon.log"));
        s.restart(None);
        s
    }

    /// Kills the daemon with SIGKILL (no cleanup at all).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon is running").id()
    }

    /// Waits for a daemon that is expected to die (a crash point).
    pub fn wait_dead(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    pub fn call(&self, token: &str, method: &str, body: Value) -> (u16, Value) {
        call(&self.addr, Some(token), method, &body)
    }

    /// Calls and expects success.
    pub fn ok(&self, token: &str, method: &str, body: Value) -> Value {
        let (status, v) = self.call(token, method, body);
        assert_eq!(status, 200, "{method}: {v}");
        v
    }

    /// Calls and expects an error with this code; returns the message.
    pub fn err(&self, token: &str, method: &str, body: Value, code: &str) -> String {
        let (status, v) = self.call(token, method, body);
        assert_ne!(status, 200, "{method} should fail with {code}: {v}");
        assert_eq!(v["error"]["code"], code, "{method}: {v}");
        v["error"]["message"].as_str().unwrap().to_string()
    }

    /// `claim.acquire` of `resource` in ws1 for task `t1`.
    pub fn acquire(&self, token: &str, resource: &str, mode: &str, key: &str) -> (u16, Value) {
        self.call(
            token,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": resource, "mode": mode,
                   "idempotency_key": key}),
        )
    }

    pub fn head(&self) -> String {
        git(&self.repo, &["rev-parse", "main"])
    }

    /// Commits `files` on a new branch from `base`; returns the commit id.
    pub fn agent_commit(&self, branch: &str, base: &str, files: &[(&str, &str)]) -> String {
        git(&self.repo, &["checkout", "-q", "-B", branch, base]);
        for (p, c) in files {
            let path = self.repo.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        }
        git(&self.repo, &["add", "-A"]);
        git(&self.repo, &["commit", "-q", "-m", branch]);
        let c = git(&self.repo, &["rev-parse", "HEAD"]);
        git(&self.repo, &["checkout", "-q", "main"]);
        c
    }

    /// Records evidence for `revision` built on `base`; returns the submission tuple.
    pub fn evidence(
        &self,
        run: &str,
        base: &str,
        revision: &str,
        transcript: Option<&str>,
    ) -> Value {
        let mut body = json!({"workspace_id": "ws1", "run_id": run, "base_revision": base,
            "revision": revision, "idempotency_key": format!("ev-{run}-{revision}")});
        if let Some(t) = transcript {
            body["transcript"] = json!(t);
        }
        let v = self.ok(ALICE, "evidence.record", body);
        let e = &v["evidence"];
        json!({"workspace_id": "ws1", "run_id": run, "evidence_ref": e["evidence_ref"], "retained_revision": revision})
    }

    pub fn prepare_body(&self, submissions: Vec<Value>, base: &str, key: &str) -> Value {
        json!({"workspace_id": "ws1", "submissions": submissions, "target_ref": "refs/heads/main",
               "expected_target_revision": base, "idempotency_key": key})
    }

    /// Alice prepares a candidate of run_a's revision `a` then run_b's `b`, both built on
    /// `base` (the target); returns the answer.
    pub fn prepare_pair(&self, base: &str, a: &str, b: &str, key: &str) -> Value {
        let subs = vec![
            self.evidence("run_a", base, a, None),
            self.evidence("run_b", base, b, None),
        ];
        self.ok(
            ALICE,
            "integration.prepare",
            self.prepare_body(subs, base, key),
        )
    }

    pub fn set_clock(&self, t: time::OffsetDateTime) {
        std::fs::write(&self.clock, airlock::ids::rfc3339(t)).unwrap();
    }

    pub fn git_refs(&self, prefix: &str) -> Vec<String> {
        let out = git(&self.repo, &["for-each-ref", "--format=%(refname)", prefix]);
        out.lines().map(str::to_string).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        super::unmount_under(self.dir.path());
    }
}

pub fn file_at(repo: &Path, rev: &str, path: &str) -> String {
    git(repo, &["show", &format!("{rev}:{path}")])
}

/// How long a test daemon may live before the watchdog kills it.
pub const DAEMON_WATCHDOG: Duration = Duration::from_secs(600);

/// Kills daemon `pid` after [`DAEMON_WATCHDOG`] if it is still the daemon started with
/// `config` (so a reused pid is never touched).
fn watchdog(pid: u32, config: &Path) {
    let config = config.to_string_lossy().into_owned();
    std::thread::spawn(move || {
        std::thread::sleep(DAEMON_WATCHDOG);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&config) {
            eprintln!("watchdog: daemon {pid} outlived {DAEMON_WATCHDOG:?}; killing it");
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
}

pub fn cand(v: &Value) -> &Value {
    &v["candidate"]
}

pub fn conflicted(s: &Server) -> (String, u64, String) {
    let base = s.head();
    std::fs::create_dir_all(s.repo.join("real")).unwrap();
    // A tree with a directory symlink, to prove resolution never writes through it.
    let setup = s.agent_commit(
        "setup",
        &base,
        &[("real/keep.txt", "keep\n"), ("f.txt", "base\n")],
    );
    git(&s.repo, &["checkout", "-q", "setup"]);
    std::os::unix::fs::symlink("real", s.repo.join("link")).unwrap();
    git(&s.repo, &["add", "link"]);
    git(&s.repo, &["commit", "-q", "-m", "link"]);
    let setup = {
        let _ = setup;
        git(&s.repo, &["rev-parse", "HEAD"])
    };
    git(&s.repo, &["checkout", "-q", "main"]);
    git(&s.repo, &["reset", "-q", "--hard", &setup]);
    let a = s.agent_commit("a", &setup, &[("f.txt", "A\n")]);
    let b = s.agent_commit("b", &setup, &[("f.txt", "B\n")]);
    let v = s.prepare_pair(&setup, &a, &b, "p-conflict");
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted");
    (
        c["candidate_id"].as_str().unwrap().into(),
        c["version"].as_u64().unwrap(),
        setup,
    )
}

pub fn wait_for(f: impl FnMut() -> bool, what: &str) {
    wait_for_secs(f, 30, what)
}

/// Polls `f` every 200 ms for up to `secs` seconds.
pub fn wait_for_secs(mut f: impl FnMut() -> bool, secs: u64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
