//! The README's quick starts, as written: the one-shot run, the daemon's configuration and
//! start, the candidate flow and the governed path, pasted into one bash session (in a
//! temporary directory instead of `/tmp/airlock-qs`, on a free port instead of 7700) against
//! real Docker and real git. What each prints is what the README says it prints.

use crate::support::markdown::{block, document};
use crate::support::*;
use std::process::Command;

/// Kills the session's process group (the daemon the quick start left running) on any exit.
struct Group(i32);
impl Drop for Group {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
fn the_readmes_quick_starts_run_as_written() {
    if !crate::toolchain::built("minimal") || !crate::toolchain::built("git") {
        return;
    }
    let readme = document("README.md");
    let one_shot = block(&readme, "sh", "mkdir -p /tmp/airlock-qs");
    let config = block(&readme, "toml", "listen = \"127.0.0.1:7700\"");
    let start = block(&readme, "sh", "cd /tmp/airlock-qs\n");
    let candidate = block(&readme, "sh", "base=$(git -C app rev-parse main)");
    let governed = block(&readme, "sh", "alice claim.acquire");
    assert!(
        readme.contains("Save it as `/tmp/airlock-qs/airlock.toml`"),
        "the README says where the configuration goes"
    );

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("qs");
    let port = free_port();
    let here = |text: &str| {
        text.replace("/tmp/airlock-qs", &root.display().to_string())
            .replace("127.0.0.1:7700", &format!("127.0.0.1:{port}"))
    };
    // The configuration goes where the README says, with this pass's overrides (tree cache,
    // isolation level) on top.
    let session = format!(
        "set -e\n{}\nprintf '%s' \"$QS_CONFIG\" > {}/airlock.toml\n{}\necho '== candidate'\n{}\necho '== governed'\n{}",
        here(&one_shot),
        root.display(),
        here(&start),
        here(&candidate),
        here(&governed),
    );
    let script = dir.path().join("session.sh");
    std::fs::write(&script, session).unwrap();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env(
            "QS_CONFIG",
            format!("{}{}", config_overrides(), here(&config)),
        )
        .env("HOME", dir.path())
        .env_remove("XDG_STATE_HOME")
        .env_remove("AIRLOCK_URL")
        .env_remove("AIRLOCK_TOKEN");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _group = Group(child.id() as i32);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let log = std::fs::read_to_string(root.join("serve.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nserve.log:\n{log}"
    );
    let (one, rest) = stdout.split_once("== candidate\n").expect(&stdout);
    let (candidate, governed) = rest.split_once("== governed\n").expect(&stdout);

    // The one-shot run passed, with the test's own line as its output.
    let v: serde_json::Value = serde_json::from_str(one).expect(one);
    assert_eq!(v["status"], "passed", "{one}");
    assert_eq!(v["output"], "test passed\n");

    // The candidate was verified in the sandbox, approved by bob and landed on main, with the
    // agent's commit in its history.
    assert!(candidate.contains("\"status\": \"passed\""), "{candidate}");
    assert!(candidate.contains("\"result\": \"landed\""), "{candidate}");
    assert!(candidate.contains("greet the world"), "{candidate}");
    let landed = Command::new("git")
        .args(["-C", &root.join("app.git").display().to_string()])
        .args(["show", "main:app.sh"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&landed.stdout),
        "echo hello, world\n"
    );
    let trailers = Command::new("git")
        .args(["-C", &root.join("app.git").display().to_string()])
        .args(["log", "-1", "--format=%B", "main"])
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&trailers.stdout);
    assert!(message.contains("Approved-by: member:bob"), "{message}");
    assert!(message.contains("Verified-by: ver_"), "{message}");

    // The governed patch was applied to the working tree.
    assert_eq!(
        governed, "\"applied\"\necho hello, reviewers\n",
        "{governed}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("docs/app.sh")).unwrap(),
        "echo hello, reviewers\n"
    );
}
