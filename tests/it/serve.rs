//! `airlock serve` through real HTTP on loopback, with real git repositories and a real SQLite
//! file: evidence, candidate assembly, resolution, idempotency across crashes, authorization,
//! admission, bounds, deletion and expiry.

use crate::http::{call, call_raw, request};
use crate::support::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const ALICE: &str = "alice-token";
pub const BOB: &str = "bob-token-view-only";
const CAROL: &str = "carol-token-other-workspace";
pub const RUN_A: &str = "run-a-token";
/// A second decider in ws1: deliveries alice requests are decided by dave (distinct_approver).
pub const DAVE: &str = "dave-token-decider";

fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Two workspaces with their repositories, a config, and a running daemon.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub config: PathBuf,
    pub clock: PathBuf,
    pub addr: String,
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
        Self::launch(extra, false)
    }

    /// A daemon whose jobs run on the scripted fake runtime (`airlock::sandbox::fake`): for
    /// tests of workflow logic only, never of sandbox limits, lifecycle or recovery.
    pub fn fake() -> Server {
        Self::launch("", true)
    }

    pub fn fake_with(extra: &str) -> Server {
        Self::launch(extra, true)
    }

    fn launch(extra: &str, fake: bool) -> Server {
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
                "listen = \"127.0.0.1:0\"\ndata_dir = \"{data}\"\n{extra}\n\
                 [workspaces.ws1]\nrepo = \"{repo}\"\n\
                 members = {{ alice = [\"view\", \"integrate\", \"verify\", \"decide\", \"push\"], bob = [\"view\"], dave = [\"view\", \"decide\"] }}\n\
                 [workspaces.ws2]\nrepo = \"{repo2}\"\nmembers = {{ carol = [\"view\", \"integrate\"] }}\n\
                 [[tokens]]\nsha256 = \"{a}\"\nmember_id = \"alice\"\n\
                 [[tokens]]\nsha256 = \"{b}\"\nmember_id = \"bob\"\n\
                 [[tokens]]\nsha256 = \"{c}\"\nmember_id = \"carol\"\n\
                 [[tokens]]\nsha256 = \"{d}\"\nmember_id = \"dave\"\n\
                 [[tokens]]\nsha256 = \"{r}\"\nrun_id = \"run_a\"\nworkspace_id = \"ws1\"\n",
                data = dir.path().join("data").display(),
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
            .stderr(Stdio::null());
        if let Some(c) = crash_at {
            cmd.env("AIRLOCK_CRASH_AT", c);
        }
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
    }
}

fn file_at(repo: &Path, rev: &str, path: &str) -> String {
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

#[test]
fn clean_multi_input_assembly_freezes_on_the_target() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "from a\n")]);
    let b = s.agent_commit("b", &base, &[("b.txt", "from b\n")]);
    let c = s.agent_commit("c", &base, &[("dir/c.txt", "from c\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some("transcript a")),
        s.evidence("run_b", &base, &b, None),
        s.evidence("run_c", &base, &c, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &base, "p1"),
    );
    let cd = cand(&v);
    assert_eq!(cd["state"], "frozen", "{v}");
    assert_eq!(cd["applied_inputs"], 3);
    let rev = cd["candidate_revision"].as_str().unwrap();
    assert_eq!(
        git(&s.repo, &["rev-parse", &format!("{rev}^")]),
        base,
        "parent is the target"
    );
    assert_eq!(
        git(&s.repo, &["rev-list", "--count", rev]),
        "2",
        "one commit on top of the target"
    );
    assert_eq!(file_at(&s.repo, rev, "a.txt"), "from a");
    assert_eq!(file_at(&s.repo, rev, "dir/c.txt"), "from c");
    let cid = cd["candidate_id"].as_str().unwrap();
    assert_eq!(
        git(
            &s.repo,
            &[
                "rev-parse",
                &format!("refs/airlock/candidates/{cid}/revision")
            ]
        ),
        rev
    );
    assert_eq!(cd["inputs"][0]["transcript_id"], "0");
    assert!(cd["inputs"][0]["transcript_checksum"].as_str().is_some());
    let patch = s.ok(
        BOB,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(patch["truncated"], false);
    let text = patch["patch"].as_str().unwrap();
    for f in ["a/a.txt", "a/b.txt", "a/dir/c.txt"] {
        assert!(text.contains(&format!("diff --git {f}")), "{text}");
    }
    // The target itself never moved.
    assert_eq!(s.head(), base);
    let shown = s.ok(
        BOB,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(shown, v);
}

#[test]
fn conflict_then_resolution_in_two_batches() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("x.txt", "A\n"), ("y.txt", "A\n")]);
    let b = s.agent_commit(
        "b",
        &base,
        &[("x.txt", "B\n"), ("y.txt", "B\n"), ("z.txt", "B only\n")],
    );
    let subs = vec![
        s.evidence("run_a", &base, &a, None),
        s.evidence("run_b", &base, &b, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &base, "p1"),
    );
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted");
    assert_eq!(c["conflicts"], json!(["x.txt", "y.txt"]));
    assert_eq!(c["applied_inputs"], 1);
    let cid = c["candidate_id"].as_str().unwrap().to_string();
    let v1 = c["version"].as_u64().unwrap();
    // Patch needs a frozen candidate.
    s.err(
        ALICE,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
        "failed_precondition",
    );

    // Batch 1: x.txt only.
    let r1 = json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": v1,
                    "files": [{"path": "x.txt", "content": "A and B\n"}], "idempotency_key": "r1"});
    let v = s.ok(ALICE, "integration.resolve", r1.clone());
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted");
    assert_eq!(c["conflicts"], json!(["y.txt"]));
    let v2 = c["version"].as_u64().unwrap();
    assert!(v2 > v1);
    // An exact retry of the completed batch returns the current candidate, changing nothing.
    let again = s.ok(ALICE, "integration.resolve", r1);
    assert_eq!(cand(&again)["version"], v2);
    // A stale version with a new key is refused before anything is recorded.
    let stale = json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": v1,
                       "files": [{"path": "y.txt", "content": "stale\n"}], "idempotency_key": "r-stale"});
    let m = s.err(ALICE, "integration.resolve", stale, "conflict");
    assert!(m.contains("stale"), "{m}");
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&now)["version"], v2, "nothing recorded");

    // Batch 2: delete y.txt.
    let v = s.ok(ALICE, "integration.resolve", json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": v2, "files": [{"path": "y.txt", "delete": true}], "idempotency_key": "r2"}));
    let c = cand(&v);
    assert_eq!(c["state"], "frozen", "{v}");
    assert_eq!(c["applied_inputs"], 2);
    let rev = c["candidate_revision"].as_str().unwrap();
    assert_eq!(file_at(&s.repo, rev, "x.txt"), "A and B");
    assert_eq!(file_at(&s.repo, rev, "z.txt"), "B only");
    let tree = git(&s.repo, &["ls-tree", "--name-only", rev]);
    assert!(!tree.contains("y.txt"));
    let ops: Vec<&str> = c["mutations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["operation"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            "integration.prepare",
            "integration.resolve",
            "integration.resolve"
        ]
    );
    // Frozen is never edited again.
    let m = s.err(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": c["version"], "files": [{"path": "x.txt", "content": "later\n"}],
        "idempotency_key": "r3"}),
        "failed_precondition",
    );
    assert!(m.contains("frozen"), "{m}");
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
    let subs = vec![
        s.evidence("run_a", &setup, &a, None),
        s.evidence("run_b", &setup, &b, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &setup, "p-conflict"),
    );
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted");
    (
        c["candidate_id"].as_str().unwrap().into(),
        c["version"].as_u64().unwrap(),
        setup,
    )
}

#[test]
fn unsafe_resolutions_are_refused_and_change_nothing() {
    let s = Server::fake();
    let (cid, version, _) = conflicted(&s);
    let bad_files = [
        json!({"path": "/etc/passwd", "content": "x"}),
        json!({"path": "../outside.txt", "content": "x"}),
        json!({"path": "a/../f.txt", "content": "x"}),
        json!({"path": ".git/hooks/post-commit", "content": "x"}),
        json!({"path": "sub/.GIT/config", "content": "x"}),
        json!({"path": "f\u{0}.txt", "content": "x"}),
        json!({"path": "", "content": "x"}),
        json!({"path": "link/evil.txt", "content": "x"}),
        json!({"path": "real", "content": "x"}),
        json!({"path": "f.txt", "content": "<<<<<<< ours\nA\n=======\nB\n>>>>>>> theirs\n"}),
        json!({"path": "f.txt"}),
        json!({"path": "f.txt", "content": "x", "delete": true}),
        json!({"path": "missing.txt", "delete": true}),
    ];
    for (i, f) in bad_files.iter().enumerate() {
        let m = s.err(
            ALICE,
            "integration.resolve",
            json!({"workspace_id": "ws1", "candidate_id": cid,
            "expected_version": version, "files": [f], "idempotency_key": format!("bad-{i}")}),
            "invalid_argument",
        );
        assert!(m.contains("files[0]"), "{f}: {m}");
    }
    let too_many: Vec<Value> = (0..33)
        .map(|i| json!({"path": format!("f{i}.txt"), "content": "x"}))
        .collect();
    s.err(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": version, "files": too_many, "idempotency_key": "many"}),
        "invalid_argument",
    );
    for v in [json!(0), json!(-1), Value::Null] {
        let mut body = json!({"workspace_id": "ws1", "candidate_id": cid,
            "files": [{"path": "f.txt", "content": "ok\n"}], "idempotency_key": "nov"});
        if !v.is_null() {
            body["expected_version"] = v;
        }
        let m = s.err(ALICE, "integration.resolve", body, "invalid_argument");
        assert!(m.contains("expected_version"), "{m}");
    }
    let c = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&c)["version"],
        version,
        "no refused request recorded anything"
    );
    assert!(s.repo.join("real/keep.txt").exists());
    // The safe resolution still works afterwards.
    let v = s.ok(ALICE, "integration.resolve", json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": version, "files": [{"path": "f.txt", "content": "A+B\n"}], "idempotency_key": "good"}));
    assert_eq!(cand(&v)["state"], "frozen");
}

#[test]
fn exact_retries_after_crashes_mid_prepare_and_mid_resolve() {
    let mut s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("f.txt", "A\n")]);
    let b = s.agent_commit("b", &base, &[("f.txt", "B\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some("t")),
        s.evidence("run_b", &base, &b, None),
    ];
    let body = s.prepare_body(subs, &base, "crashy");
    for point in ["prepare_after_insert", "prepare_after_retain"] {
        s.restart(Some(point));
        let resp = request(
            &s.addr,
            "POST",
            "/api/v1/integration.prepare",
            Some(ALICE),
            body.to_string().as_bytes(),
        );
        assert!(
            resp.is_none() || resp.unwrap().0 != 200,
            "{point}: the daemon died mid-request"
        );
        s.wait_dead();
    }
    s.restart(None);
    let v = s.ok(ALICE, "integration.prepare", body.clone());
    let c = cand(&v).clone();
    assert_eq!(c["state"], "conflicted", "{v}");
    let cid = c["candidate_id"].as_str().unwrap().to_string();
    let listed = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        listed["candidates"].as_array().unwrap().len(),
        1,
        "one candidate, however many retries"
    );
    // A retry never extends expiry; the same key with other parameters is a conflict.
    let again = s.ok(ALICE, "integration.prepare", body.clone());
    assert_eq!(cand(&again)["expires_at"], c["expires_at"]);
    let mut other = body.clone();
    other["target_ref"] = json!("refs/heads/other");
    s.err(ALICE, "integration.prepare", other, "conflict");

    // Crash after the resolution intent is durable, before Git changes.
    let version = c["version"].as_u64().unwrap();
    let resolve = json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": version,
                         "files": [{"path": "f.txt", "content": "AB\n"}], "idempotency_key": "res"});
    s.restart(Some("resolve_after_intent"));
    let resp = request(
        &s.addr,
        "POST",
        "/api/v1/integration.resolve",
        Some(ALICE),
        resolve.to_string().as_bytes(),
    );
    assert!(resp.is_none() || resp.unwrap().0 != 200);
    s.wait_dead();
    s.restart(None);
    // While it is pending, a different new key is refused.
    let mut different = resolve.clone();
    different["idempotency_key"] = json!("res-2");
    let m = s.err(ALICE, "integration.resolve", different, "conflict");
    assert!(m.contains("pending"), "{m}");
    // The exact retry reuses the original binding although the version advanced.
    let v = s.ok(ALICE, "integration.resolve", resolve);
    assert_eq!(cand(&v)["state"], "frozen", "{v}");
    let rev = cand(&v)["candidate_revision"].as_str().unwrap();
    assert_eq!(file_at(&s.repo, rev, "f.txt"), "AB");
}

#[test]
fn authentication_membership_and_admission() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    let show = json!({"workspace_id": "ws1", "candidate_id": cid});

    // Missing and wrong tokens.
    let (st, e) = call(&s.addr, None, "integration.show", &show);
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let (st, e) = call(&s.addr, Some("not-a-token"), "integration.show", &show);
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let (st, _) = call(
        &s.addr,
        Some(&ALICE[..ALICE.len() - 1]),
        "integration.show",
        &show,
    );
    assert_eq!(st, 401);

    // A non-member learns nothing about ws1's candidates.
    let m = s.err(CAROL, "integration.show", show.clone(), "permission_denied");
    assert!(m.contains("not a member"));
    let ghost =
        json!({"workspace_id": "ws1", "candidate_id": "cand_00000000000000000000000000000000"});
    assert_eq!(
        s.err(CAROL, "integration.show", ghost, "permission_denied"),
        m,
        "same answer either way"
    );
    // Asking through a workspace it belongs to: the ws1 candidate is simply not found.
    let other_ws = json!({"workspace_id": "ws2", "candidate_id": cid});
    let nf = s.err(CAROL, "integration.show", other_ws, "not_found");
    let nf2 = s.err(
        CAROL,
        "integration.show",
        json!({"workspace_id": "ws2", "candidate_id": "cand_00000000000000000000000000000000"}),
        "not_found",
    );
    assert_eq!(
        nf.replace(&cid, "X"),
        nf2.replace("cand_00000000000000000000000000000000", "X")
    );
    s.err(
        CAROL,
        "integration.list",
        json!({"workspace_id": "ws1"}),
        "permission_denied",
    );
    s.err(
        "whatever",
        "integration.list",
        json!({"workspace_id": "nope"}),
        "unauthenticated",
    );

    // View-only members read but cannot integrate.
    s.ok(BOB, "integration.show", show.clone());
    s.err(
        BOB,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "bob"),
        "permission_denied",
    );
    s.err(BOB, "integration.delete", show.clone(), "permission_denied");

    // Run actors: evidence for their own run only; candidate mutations refused by admission.
    let a2 = s.agent_commit("a2", &base, &[("a2.txt", "a2\n")]);
    let own = s.ok(
        RUN_A,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_a",
        "base_revision": base, "revision": a2, "idempotency_key": "run-own"}),
    );
    assert_eq!(own["evidence"]["run_id"], "run_a");
    s.err(
        RUN_A,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_b",
        "base_revision": base, "revision": a2, "idempotency_key": "run-other"}),
        "permission_denied",
    );
    let m = s.err(
        RUN_A,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "by-run"),
        "permission_denied",
    );
    assert!(m.contains("run actors"), "{m}");
    s.err(
        RUN_A,
        "integration.delete",
        show.clone(),
        "permission_denied",
    );
    let mut with_mission = s.prepare_body(vec![sub.clone()], &base, "mission");
    with_mission["mission_id"] = json!("m-1");
    let m = s.err(
        ALICE,
        "integration.prepare",
        with_mission,
        "failed_precondition",
    );
    assert!(m.contains("mission_id"), "{m}");
}

#[test]
fn submissions_are_validated_against_durable_packets() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let b = s.agent_commit("b", &base, &[("b.txt", "b\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let cases = [
        (
            json!({"workspace_id": "ws2", "run_id": "run_a", "evidence_ref": sub["evidence_ref"], "retained_revision": a}),
            "workspace",
        ),
        (
            json!({"workspace_id": "ws1", "run_id": "run_x", "evidence_ref": sub["evidence_ref"], "retained_revision": a}),
            "run",
        ),
        (
            json!({"workspace_id": "ws1", "run_id": "run_a", "evidence_ref": sub["evidence_ref"], "retained_revision": b}),
            "retained",
        ),
        (
            json!({"workspace_id": "ws1", "run_id": "run_a", "evidence_ref": "evi_missing", "retained_revision": a}),
            "does not exist",
        ),
    ];
    for (i, (bad, needle)) in cases.into_iter().enumerate() {
        let m = s.err(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub.clone(), bad], &base, &format!("bad-{i}")),
            "failed_precondition",
        );
        assert!(m.contains("submissions[1]") && m.contains(needle), "{m}");
    }
    let mut needs_transcript = s.prepare_body(vec![sub.clone()], &base, "tr");
    needs_transcript["required_sources"] = json!(["git", "transcript"]);
    let m = s.err(
        ALICE,
        "integration.prepare",
        needs_transcript,
        "failed_precondition",
    );
    assert!(m.contains("\"transcript\""), "{m}");
    let mut unknown = s.prepare_body(vec![sub.clone()], &base, "src");
    unknown["required_sources"] = json!(["smell"]);
    s.err(ALICE, "integration.prepare", unknown, "invalid_argument");
    for (field, value) in [
        ("target_ref", json!("main")),
        ("expected_target_revision", json!("abc")),
    ] {
        let mut body = s.prepare_body(vec![sub.clone()], &base, "f");
        body[field] = value;
        let m = s.err(ALICE, "integration.prepare", body, "invalid_argument");
        assert!(m.contains(field), "{m}");
    }
    s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![], &base, "empty"),
        "invalid_argument",
    );
    let listed = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        listed["candidates"],
        json!([]),
        "no refused prepare created a candidate"
    );
}

#[test]
fn bodies_fields_list_bounds_and_health() {
    let s = Server::fake();
    let base = s.head();
    // Unknown fields are refused, naming the field.
    let m = s.err(
        ALICE,
        "integration.list",
        json!({"workspace_id": "ws1", "owner": "alice"}),
        "invalid_argument",
    );
    assert!(m.contains("owner"), "{m}");
    let m = s.err(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "r", "base_revision": base,
        "revision": base, "idempotency_key": "k", "actor": "admin"}),
        "invalid_argument",
    );
    assert!(m.contains("actor"), "{m}");
    // Oversized bodies per method.
    let big = vec![b' '; 70 * 1024];
    let (st, v) = call_raw(&s.addr, Some(ALICE), "integration.show", &big);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (413, Some("resource_exhausted"))
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("65536"));
    let huge = format!(
        "{{\"workspace_id\":\"ws1\",\"candidate_id\":\"x\",\"files\":[],\"idempotency_key\":\"k\",\"pad\":\"{}\"}}",
        "x".repeat(17 * 1024 * 1024)
    );
    let (st, _) = call_raw(&s.addr, Some(ALICE), "integration.resolve", huge.as_bytes());
    assert_eq!(st, 413);
    let transcript = "t".repeat(16 * 1024 * 1024 + 1);
    let m = s.err(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "r", "base_revision": base,
        "revision": base, "transcript": transcript, "idempotency_key": "big"}),
        "resource_exhausted",
    );
    assert!(m.contains("16777216"), "{m}");
    s.err(ALICE, "integration.unknown", json!({}), "not_found");
    let (st, _) = call_raw(&s.addr, Some(ALICE), "integration.list", b"{not json");
    assert_eq!(st, 400);
    // List bounds.
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    for i in 0..3 {
        s.ok(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub.clone()], &base, &format!("p{i}")),
        );
    }
    let all = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    let list = all["candidates"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    let keys: Vec<&str> = list[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "candidate_id",
            "candidate_revision",
            "created_at",
            "delivery_receipt",
            "delivery_request",
            "expected_target_revision",
            "expires_at",
            "state",
            "target_ref",
            "workspace_id"
        ]
    );
    assert!(
        list[0]["created_at"].as_str() >= list[2]["created_at"].as_str(),
        "newest first"
    );
    assert_eq!(
        s.ok(
            ALICE,
            "integration.list",
            json!({"workspace_id": "ws1", "limit": 2})
        )["candidates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    s.ok(
        ALICE,
        "integration.list",
        json!({"workspace_id": "ws1", "limit": 100}),
    );
    for bad in [0, 101] {
        let m = s.err(
            ALICE,
            "integration.list",
            json!({"workspace_id": "ws1", "limit": bad}),
            "invalid_argument",
        );
        assert!(m.contains("100"), "{m}");
    }
    // Health.
    let (st, body) = request(&s.addr, "GET", "/healthz", None, b"").unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let (st, _) = request(&s.addr, "GET", "/readyz", None, b"").unwrap();
    assert_eq!(st, 200);
}

#[test]
fn evidence_idempotency_and_show() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let body = json!({"workspace_id": "ws1", "run_id": "run_a", "base_revision": base, "revision": a,
                      "transcript": "log", "idempotency_key": "e1"});
    let first = s.ok(ALICE, "evidence.record", body.clone());
    assert_eq!(
        s.ok(ALICE, "evidence.record", body.clone()),
        first,
        "an exact retry returns the same packet"
    );
    let mut changed = body.clone();
    changed["transcript"] = json!("other log");
    s.err(ALICE, "evidence.record", changed, "conflict");
    let e = &first["evidence"];
    assert_eq!(e["sources"], json!(["git", "transcript"]));
    assert_eq!(e["transcript_sha256"], sha("log"));
    let r = e["evidence_ref"].as_str().unwrap();
    assert_eq!(
        git(
            &s.repo,
            &["rev-parse", &format!("refs/airlock/evidence/{r}")]
        ),
        a
    );
    // Branch deletion and gc cannot lose the retained revision.
    git(&s.repo, &["branch", "-D", "a"]);
    git(&s.repo, &["gc", "-q", "--prune=now"]);
    assert_eq!(git(&s.repo, &["cat-file", "-t", &a]), "commit");
    let shown = s.ok(
        BOB,
        "evidence.show",
        json!({"workspace_id": "ws1", "evidence_ref": r}),
    );
    assert_eq!(shown, first);
    s.err(
        CAROL,
        "evidence.show",
        json!({"workspace_id": "ws2", "evidence_ref": r}),
        "not_found",
    );
    let m = s.err(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_a",
        "base_revision": base, "revision": "f".repeat(40), "idempotency_key": "missing"}),
        "failed_precondition",
    );
    assert!(m.contains("revision"), "{m}");
}

#[test]
fn patch_is_truncated_at_one_mebibyte() {
    let s = Server::fake();
    let base = s.head();
    let big: String = (0..40_000)
        .map(|i| format!("line {i} of a large generated file\n"))
        .collect();
    assert!(big.len() > 1024 * 1024);
    let a = s.agent_commit("a", &base, &[("big.txt", &big)]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap();
    let p = s.ok(
        ALICE,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(p["truncated"], true);
    let text = p["patch"].as_str().unwrap();
    assert!(
        text.len() <= 1024 * 1024 && text.len() > 1024 * 1024 - 100,
        "{}",
        text.len()
    );
    assert!(text.starts_with("diff --git a/big.txt b/big.txt"));
}

#[test]
fn delete_fences_first_then_removes_owned_state() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let b = s.agent_commit("b", &base, &[("a.txt", "b\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some("ta")),
        s.evidence("run_b", &base, &b, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    let version = cand(&v)["version"].clone();
    assert!(
        !s.git_refs(&format!("refs/airlock/candidates/{cid}/"))
            .is_empty()
    );
    let transcripts = s.dir.path().join("data/candidates").join(&cid);
    assert!(transcripts.exists());
    let key = json!({"workspace_id": "ws1", "candidate_id": cid});
    assert_eq!(s.ok(ALICE, "integration.delete", key.clone()), json!({}));
    let shown = s.ok(ALICE, "integration.show", key.clone());
    assert_eq!(cand(&shown)["state"], "deleting");
    assert!(
        s.git_refs(&format!("refs/airlock/candidates/{cid}/"))
            .is_empty()
    );
    assert!(!transcripts.exists());
    assert_eq!(
        s.git_refs("refs/airlock/evidence/").len(),
        2,
        "packets are not the candidate's to delete"
    );
    s.err(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": version,
        "files": [{"path": "a.txt", "content": "x\n"}], "idempotency_key": "after"}),
        "failed_precondition",
    );
    assert_eq!(
        s.ok(ALICE, "integration.delete", key),
        json!({}),
        "deleting again is a no-op"
    );
}

#[test]
fn expiry_with_an_injectable_clock() {
    let s = Server::fake_with("maintenance_interval_seconds = 1");
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    let later = s.evidence("run_b", &base, &a, None);
    // Eight days on: packets have expired; a new candidate cannot use them.
    let now = time::OffsetDateTime::now_utc();
    s.set_clock(now + Duration::from_secs(8 * 86_400));
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![later.clone()], &base, "late"),
        "failed_precondition",
    );
    assert!(m.contains("expired") || m.contains("does not exist"), "{m}");
    wait_for(
        || s.git_refs("refs/airlock/evidence/").is_empty(),
        "evidence refs purged",
    );
    s.err(
        ALICE,
        "evidence.show",
        json!({"workspace_id": "ws1", "evidence_ref": later["evidence_ref"]}),
        "not_found",
    );
    // The frozen candidate does not depend on the purged packets.
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&shown)["state"], "frozen", "{shown}");
    // Thirty-one days on: the candidate has expired and its owned refs are gone.
    s.set_clock(now + Duration::from_secs(31 * 86_400));
    wait_for(
        || {
            let v = s.ok(
                ALICE,
                "integration.show",
                json!({"workspace_id": "ws1", "candidate_id": cid}),
            );
            cand(&v)["state"] == "expired"
        },
        "candidate expired",
    );
    assert!(
        s.git_refs(&format!("refs/airlock/candidates/{cid}/"))
            .is_empty()
    );
    // Sixty-two days on: the tombstone is purged.
    s.set_clock(now + Duration::from_secs(62 * 86_400));
    wait_for(
        || {
            s.call(
                ALICE,
                "integration.show",
                json!({"workspace_id": "ws1", "candidate_id": cid}),
            )
            .0 == 404
        },
        "tombstone purged",
    );
}

pub fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn graceful_shutdown_exits_cleanly_and_state_survives_a_restart() {
    let mut s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    assert_eq!(s.stop(), Some(0), "SIGTERM stops the daemon with exit 0");
    s.restart(None);
    let cid = cand(&v)["candidate_id"].clone();
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(shown, v);
}

#[test]
fn stale_git_locks_are_cleared_at_start_up_and_missing_owned_refs_make_a_candidate_unavailable() {
    let mut s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub.clone()], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    // A git process killed while holding a ref lock leaves <ref>.lock behind.
    let git_dir = s.repo.join(".git");
    let lock = git_dir.join(format!("refs/airlock/candidates/{cid}/revision.lock"));
    std::fs::write(&lock, b"").unwrap();
    assert_eq!(s.stop(), Some(0));
    s.restart(None);
    assert!(!lock.exists(), "start-up recovery removed the stale lock");
    // Another candidate can be prepared, so the repository is usable again.
    s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p2"),
    );

    // Someone deletes a candidate-owned ref behind Airlock's back.
    git(
        &s.repo,
        &[
            "update-ref",
            "-d",
            &format!("refs/airlock/candidates/{cid}/inputs/0"),
        ],
    );
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&shown)["state"], "unavailable", "{shown}");
    assert!(
        cand(&shown)["error"]
            .as_str()
            .unwrap()
            .contains("owned input 0")
    );
    s.err(
        ALICE,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
        "failed_precondition",
    );
}

#[test]
fn owned_transcripts_are_capped_per_candidate() {
    let s = Server::fake();
    let base = s.head();
    // Two transcripts of 9 MiB each: each is allowed, together they exceed the 16 MiB cap.
    let big = "t".repeat(9 * 1024 * 1024);
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let b = s.agent_commit("b", &base, &[("b.txt", "b\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some(&big)),
        s.evidence("run_b", &base, &b, Some(&big)),
    ];
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs.clone(), &base, "p"),
        "resource_exhausted",
    );
    assert!(
        m.contains("submissions[1]") && m.contains("16777216"),
        "{m}"
    );
    // One of them alone fits.
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![subs[0].clone()], &base, "p1"),
    );
    assert_eq!(cand(&v)["state"], "frozen");
}
