//! Real git repositories and the real `airlock run` on them.

use super::{BIN, containers_with_key};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs git in `dir`, panicking on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A throwaway repository plus a data directory, both removed on drop.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub data: PathBuf,
    pub config: Option<PathBuf>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        super::unmount_under(self.dir.path());
    }
}

impl Fixture {
    /// A repository with one commit holding `files` (path, content, executable).
    pub fn new(files: &[(&str, &str, bool)]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let mut f = Fixture {
            data: dir.path().join("data"),
            repo,
            dir,
            config: None,
        };
        f.commit(files, "initial");
        if !super::config_overrides().is_empty() {
            f = f.with_config("");
        }
        f
    }

    /// Writes files and commits them; returns the commit id.
    pub fn commit(&self, files: &[(&str, &str, bool)], msg: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        for (path, content, exec) in files {
            let p = self.repo.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
            let mode = if *exec { 0o755 } else { 0o644 };
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        git(&self.repo, &["add", "-A", "-f"]);
        git(&self.repo, &["commit", "-q", "--allow-empty", "-m", msg]);
        git(&self.repo, &["rev-parse", "HEAD"])
    }

    /// Uses a config file with this TOML.
    pub fn with_config(mut self, toml: &str) -> Fixture {
        let p = self.dir.path().join("airlock.toml");
        std::fs::write(&p, format!("{}{toml}", super::config_overrides())).unwrap();
        self.config = Some(p);
        self
    }

    pub fn base(&self, sub: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(sub).arg("--data-dir").arg(&self.data);
        if let Some(cfg) = &self.config {
            c.arg("--config").arg(cfg);
        }
        c.env_remove("AIRLOCK_CRASH_AT");
        c
    }

    /// `airlock run` command (not started) with extra options before `--`.
    pub fn run_cmd(&self, opts: &[&str], argv: &[&str]) -> Command {
        let mut c = self.base(&["run"]);
        c.arg("--repo").arg(&self.repo);
        if !opts.iter().any(|o| o.starts_with("--rev")) {
            c.args(["--rev", "HEAD"]);
        }
        c.args(opts).arg("--").args(argv);
        c.stdin(Stdio::null());
        c
    }

    /// Runs `airlock run` to completion.
    pub fn run(&self, opts: &[&str], argv: &[&str]) -> RunResult {
        RunResult::from(self.run_cmd(opts, argv).output().expect("airlock runs"))
    }

    /// `sh -c script` in the sandbox, expecting a JSON result.
    pub fn sh(&self, script: &str) -> Value {
        let r = self.run(&[], &["sh", "-c", script]);
        r.json
            .unwrap_or_else(|| panic!("no JSON result; stderr: {}", r.stderr))
    }

    /// `airlock recover`, returning the JSON report.
    pub fn recover(&self) -> Value {
        let out = self.base(&["recover"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "recover printed no JSON ({e}): {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// `airlock verification list` as JSON.
    pub fn list(&self, extra: &[&str]) -> Vec<Value> {
        let mut c = self.base(&["verification", "list"]);
        c.args(extra);
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Asserts nothing of a verification remains: no container, no checkout, no lock.
    pub fn assert_clean(&self, v: &Value) {
        let key = v["creation_key"].as_str().expect("creation_key");
        assert_eq!(
            containers_with_key(key),
            Vec::<String>::new(),
            "container left for {key}"
        );
        let checkout = self.data.join("checkouts").join(key);
        assert!(!checkout.exists(), "checkout left: {}", checkout.display());
        assert!(!self.data.join("locks").join(format!("{key}.lock")).exists());
    }
}

/// The result of one `airlock run`.
#[derive(Debug)]
pub struct RunResult {
    pub code: Option<i32>,
    pub json: Option<Value>,
    pub stderr: String,
}

impl From<Output> for RunResult {
    fn from(out: Output) -> Self {
        RunResult {
            code: out.status.code(),
            json: serde_json::from_slice(&out.stdout).ok(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Every entry beneath `dir` but `.git`, by relative path: `link <target>`, `dir` (so an empty
/// directory left behind shows), or a file's mode bits under `mode_mask` in octal and its exact
/// bytes in hex. For comparing a tree before and after, or against a reference.
pub fn tree_snapshot(dir: &Path, mode_mask: u32) -> std::collections::BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_name() == ".git" {
                continue;
            }
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let v = if md.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                format!("{:o} {hex}", md.permissions().mode() & mode_mask)
            };
            out.insert(rel, v);
        }
    }
    out
}
