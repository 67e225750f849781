//! Requests refused before anything runs: exit code 2, a message naming the field and the
//! bound, no verification recorded, no container and no checkout created.

use crate::support::*;

fn assert_refused(f: &Fixture, r: &RunResult, needle: &str) {
    assert_eq!(r.code, Some(2), "stderr: {}", r.stderr);
    assert!(r.json.is_none());
    assert!(
        r.stderr.contains(needle),
        "{needle:?} not in {:?}",
        r.stderr
    );
    // Nothing was recorded or staged.
    if f.data.join("airlock.db").exists() {
        assert!(f.list(&[]).is_empty(), "a refused request left a record");
    }
    let checkouts = f.data.join("checkouts");
    if checkouts.exists() {
        assert_eq!(std::fs::read_dir(&checkouts).unwrap().count(), 0);
    }
}

#[test]
fn argv_and_timeout_bounds() {
    let f = Fixture::new(&[("a", "a", false)]);
    assert_refused(&f, &f.run(&[], &[]), "put it after `--`");
    let many: Vec<String> = (0..65).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_refused(
        &f,
        &f.run(&[], &many),
        "argv has 65 entries; the limit is 64",
    );
    let long = "x".repeat(16 * 1024 + 1);
    assert_refused(
        &f,
        &f.run(&[], &["echo", &long]),
        "argv[1] has 16385 bytes; the limit is 16384",
    );
    assert_refused(
        &f,
        &f.run(&["--timeout", "0"], &["true"]),
        "--timeout 0 must be between 1 and 1800",
    );
    assert_refused(
        &f,
        &f.run(&["--timeout", "1801"], &["true"]),
        "between 1 and 1800",
    );
}

#[test]
fn bad_repository_revision_and_profile() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a", "a", false)]);
    assert_refused(
        &f,
        &f.run(&["--rev", "no-such-branch"], &["true"]),
        "does not resolve to a commit",
    );
    assert_refused(
        &f,
        &f.run(&["--rev=--output=/tmp/x"], &["true"]),
        "must not start with '-'",
    );
    let tree = git(&f.repo, &["rev-parse", "HEAD^{tree}"]);
    assert_refused(
        &f,
        &f.run(&["--rev", &tree], &["true"]),
        "does not resolve to a commit",
    );
    assert_refused(
        &f,
        &f.run(&["--profile", "nope"], &["true"]),
        "unknown profile \"nope\"",
    );
    let not_repo = tempfile::tempdir().unwrap();
    let mut c2 = std::process::Command::new(BIN);
    c2.args(["run", "--rev", "HEAD", "--data-dir"])
        .arg(&f.data)
        .arg("--repo")
        .arg(not_repo.path())
        .args(["--", "true"]);
    let refused = RunResult::from(c2.output().unwrap());
    assert_refused(&f, &refused, "is not a git repository");
    // Each field is named once.
    assert!(
        refused.stderr.contains(&format!(
            "repo: {} is not a git repository",
            not_repo.path().display()
        )) && !refused.stderr.contains("repo: repo:"),
        "{}",
        refused.stderr
    );
    let unknown = f.run(&["--rev", "no-such-branch"], &["true"]);
    assert!(
        unknown
            .stderr
            .contains("rev: \"no-such-branch\" does not resolve")
            && !unknown.stderr.contains("rev: rev:"),
        "{}",
        unknown.stderr
    );
}

/// A workspace whose repository is missing is named once, by its config key.
#[test]
fn a_missing_workspace_repository_is_named_once_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n[workspaces.ws_123]\nrepo = \"/nonexistent/repo\"\nmembers = {{ alice = [\"view\"] }}\n[[tokens]]\nsha256 = \"{}\"\nmember_id = \"alice\"\n",
            dir.path().join("data").display(),
            sha("alice-token"),
        ),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("workspaces.ws_123.repo: /nonexistent/repo is not a git repository"),
        "{err}"
    );
    assert!(!err.contains("repo: repo:"), "{err}");
}

#[test]
fn missing_image_says_how_to_build_it() {
    if !docker() {
        return;
    }
    let f = Fixture::new(&[("a", "a", false)])
        .with_config("[profiles.ghost]\nimage = \"airlock/does-not-exist:latest\"\n");
    assert_refused(
        &f,
        &f.run(&["--profile", "ghost"], &["true"]),
        "run `airlock images build`",
    );
}

#[test]
fn unreachable_docker_names_the_endpoint() {
    let f = Fixture::new(&[("a", "a", false)]);
    let mut c = f.run_cmd(&[], &["true"]);
    c.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let r = RunResult::from(c.output().unwrap());
    assert_refused(&f, &r, "unix:///nonexistent/docker.sock");
}

#[test]
fn bad_config_is_refused_with_the_key() {
    let f = Fixture::new(&[("a", "a", false)])
        .with_config("[profiles.default]\nimage = \"x\"\nprivileged = true\n");
    assert_refused(&f, &f.run(&[], &["true"]), "privileged");
    let f = Fixture::new(&[("a", "a", false)])
        .with_config("[profiles.default]\nimage = \"x\"\nmemory_bytes = 5\n");
    assert_refused(&f, &f.run(&[], &["true"]), "profiles.default.memory_bytes");
}

#[test]
fn unknown_crash_point_is_refused() {
    let f = Fixture::new(&[("a", "a", false)]);
    let mut c = f.run_cmd(&[], &["true"]);
    c.env("AIRLOCK_CRASH_AT", "after_lunch");
    let r = RunResult::from(c.output().unwrap());
    assert_refused(&f, &r, "after_lunch");
}

/// A refused `airlock run` creates nothing: no default data dir appears for a request that
/// names a missing revision, a directory that is no repository, an unknown profile or a bad
/// timeout.
#[test]
fn a_refused_run_leaves_no_data_dir_behind() {
    let f = Fixture::new(&[("a", "a", false)]);
    let home = tempfile::tempdir().unwrap();
    for args in [
        vec!["--rev", "no-such-branch"],
        vec!["--rev", "HEAD", "--profile", "nope"],
        vec!["--rev", "HEAD", "--timeout", "0"],
    ] {
        let out = std::process::Command::new(BIN)
            .arg("run")
            .arg("--repo")
            .arg(&f.repo)
            .args(&args)
            .args(["--", "true"])
            .env("HOME", home.path())
            .env_remove("XDG_STATE_HOME")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !home.path().join(".local").exists(),
            "{args:?} left {:?}",
            std::fs::read_dir(home.path()).unwrap().collect::<Vec<_>>()
        );
    }
}
