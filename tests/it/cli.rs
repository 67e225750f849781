//! The CLI a newcomer meets: `serve` refuses a config nobody could call, one daemon per data
//! dir (the second names the first's pid), read-only commands refuse a data dir that is not
//! there instead of creating one, and logs carry no colour codes when stderr is not a terminal.

use crate::support::daemon::{ALICE, sha};
use crate::support::repo::git;
use crate::support::*;
use std::process::{Command, Stdio};

fn airlock(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env_remove("AIRLOCK_CRASH_AT")
        .output()
        .unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A config with one workspace and alice's token, listening on an ephemeral port.
fn config(dir: &std::path::Path) -> std::path::PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("f"), "x\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "x"]);
    let path = dir.join("airlock.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\ncheckout_filesystem = \"directory\"\n\
             [workspaces.ws1]\nrepo = \"{}\"\nmembers = {{ alice = [\"view\"] }}\n\
             [[tokens]]\nsha256 = \"{}\"\nmember_id = \"alice\"\n",
            dir.join("data").display(),
            repo.display(),
            sha(ALICE)
        ),
    )
    .unwrap();
    path
}

/// Starts `airlock serve`, waits for its `listening` line; stderr goes to `log`.
fn serve(config: &std::path::Path, log: &std::path::Path) -> std::process::Child {
    let mut child = Command::new(BIN)
        .args(["--log-level", "info", "serve", "--config"])
        .arg(config)
        .env("AIRLOCK_TEST_FAKE_RUNTIME", "1")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening"), "serve printed {line:?}");
    child
}

/// Sends SIGTERM and returns how the daemon exited.
fn stop(mut child: std::process::Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap()
}

#[test]
fn serve_refuses_a_config_without_workspaces_or_tokens() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let none = d.path().join("none.toml");
    std::fs::write(&none, format!("data_dir = \"{}\"\n", data.display())).unwrap();
    let o = airlock(&["serve", "--config", none.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no [workspaces."), "{}", stderr(&o));
    let o = airlock(&["serve"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--config FILE"), "{}", stderr(&o));

    let cfg = config(d.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    let tokenless = d.path().join("tokenless.toml");
    std::fs::write(&tokenless, &text[..text.find("[[tokens]]").unwrap()]).unwrap();
    let o = airlock(&["serve", "--config", tokenless.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no [[tokens]]"), "{}", stderr(&o));
    assert!(!data.exists(), "a refused serve created its data dir");
}

#[test]
fn one_daemon_per_data_dir_and_the_second_names_the_first() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let first = serve(&cfg, &d.path().join("first.log"));
    let o = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("AIRLOCK_TEST_FAKE_RUNTIME", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let pid = first.id().to_string();
    assert!(
        stderr(&o).contains(&format!("another airlock serve (pid {pid})")),
        "{}",
        stderr(&o)
    );
    stop(first);
    // Once it is gone, the next one starts.
    let again = serve(&cfg, &d.path().join("again.log"));
    stop(again);
}

#[test]
fn logs_to_a_file_carry_no_colour_codes_and_a_stop_right_after_ready_is_graceful() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let log = d.path().join("serve.log");
    // SIGTERM the moment the ready line is read: the handlers are already installed, so the
    // daemon drains and exits 0 instead of dying by the signal's default action.
    let status = stop(serve(&cfg, &log));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}: {text}");
    assert!(text.contains("listening"), "{text}");
    assert!(text.contains("shutting down"), "{text}");
    assert!(!text.contains('\u{1b}'), "ANSI escapes in a file: {text:?}");
}

#[test]
fn read_only_commands_refuse_a_missing_data_dir_and_name_the_flag() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("typo");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["recover", "--data-dir", m],
        vec!["verification", "list", "--data-dir", m],
        vec!["verification", "show", "ver_x", "--data-dir", m],
    ] {
        let o = airlock(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("does not exist") && e.contains("--data-dir"),
            "{args:?}: {e}"
        );
        assert!(!missing.exists(), "{args:?} created the data dir");
    }
}

#[test]
fn help_describes_every_flag() {
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["serve", "--help"],
        vec!["recover", "--help"],
        vec!["images", "build", "--help"],
        vec!["verification", "list", "--help"],
        vec!["verification", "show", "--help"],
        vec!["call", "--help"],
        vec!["doctor", "--help"],
        vec!["backup", "--help"],
        vec!["keys", "generate", "--help"],
        vec!["attestation", "verify", "--help"],
    ] {
        let o = airlock(&args);
        assert!(o.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        // The options every command takes come last, under their own heading.
        let global = text
            .find("Global options:")
            .unwrap_or_else(|| panic!("{args:?}: no global options heading\n{text}"));
        assert!(
            text[global..].contains("--log-level") && !text[..global].contains("--log-level"),
            "{args:?}: the log options are mixed into the command's own\n{text}"
        );
        // clap prints an option with no doc comment as a bare name: every line that starts an
        // option or argument must carry text after it.
        for line in text.lines() {
            let t = line.trim_start();
            if (t.starts_with("--") || t.starts_with('-') || t.starts_with('['))
                && line.starts_with("  ")
            {
                // What is left once the option's own spelling and its default are taken out.
                let prose = t.split_whitespace().filter(|w| {
                    !(w.starts_with('-')
                        || w.starts_with('<')
                        || w.starts_with('[')
                        || w.ends_with(',')
                        || w.ends_with(']'))
                });
                assert!(prose.count() > 0, "{args:?}: no help for {t:?}\n{text}");
            }
        }
    }
}

#[test]
fn a_log_filter_that_does_not_parse_is_refused_naming_the_flag() {
    for (flag, env) in [(Some("airlock=loud"), None), (None, Some("airlock=loud"))] {
        let mut c = Command::new(BIN);
        if let Some(f) = flag {
            c.args(["--log-level", f]);
        }
        if let Some(e) = env {
            c.env("AIRLOCK_LOG", e);
        }
        let o = c.args(["verification", "list"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o)
                .contains("--log-level \"airlock=loud\" (or AIRLOCK_LOG) is not a log filter"),
            "{}",
            stderr(&o)
        );
    }
}

fn doctor(cfg: &std::path::Path, env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let o = Command::new(BIN)
        .args(["doctor", "--json", "--config"])
        .arg(cfg)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", String::from_utf8_lossy(&o.stdout), stderr(&o)));
    (o.status.code(), v)
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check: {report}"))
}

#[test]
fn doctor_passes_here_and_names_each_failing_check_with_its_fix() {
    if !docker() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let (code, report) = doctor(&cfg, &[]);
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "docker",
            "cgroups",
            "seccomp",
            "images",
            "probe",
            "checkouts",
            "dependencies",
            "attestations",
            "data_dir",
            "free_space",
            "git",
            "listen"
        ]
    );
    assert_eq!(code, Some(0), "{report}");
    assert!(
        check(&report, "probe")["detail"]
            .as_str()
            .unwrap()
            .contains("read a file bind-mounted")
    );
    // Which checkouts jobs get: a directory has no overlay; per-job filesystems get warm
    // overlay checkouts by default here (root, loop devices, overlayfs); with the cache off,
    // jobs stage in full. Each says so, and passes.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let detail_of = |name: &str, body: String| {
        let path = d.path().join(name);
        std::fs::write(&path, body).unwrap();
        let (code, report) = doctor(&path, &[]);
        assert_eq!(code, Some(0), "{report}");
        check(&report, "checkouts")["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let loop_fs = text.replace(
        "checkout_filesystem = \"directory\"",
        "checkout_filesystem = \"loop\"",
    );
    for (name, body, want) in [
        (
            "directory.toml",
            text.clone(),
            "no warm checkouts: every job stages its whole tree",
        ),
        (
            "warm.toml",
            loop_fs.clone(),
            "warm overlay checkouts over a tree cache of up to 8589934592 bytes",
        ),
        (
            "cold.toml",
            format!("tree_cache_bytes = 0\n{loop_fs}"),
            "warm checkouts off (tree_cache_bytes = 0): every job stages its whole tree",
        ),
    ] {
        let detail = detail_of(name, body);
        assert!(detail.contains(want), "{name}: {detail}");
    }

    // Attestations: not signed without a key; the key by id and public key with one; a key
    // others can read is a failing check that names the field, the file and the fix.
    assert!(
        check(&report, "attestations")["detail"]
            .as_str()
            .unwrap()
            .starts_with("not signed")
    );
    let key = d.path().join("signing.pem");
    let out = Command::new(BIN)
        .args(["keys", "generate"])
        .arg(&key)
        .output()
        .unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    let key_id = printed.split("key id: ").nth(1).unwrap().trim().to_string();
    let signed = d.path().join("signed.toml");
    std::fs::write(
        &signed,
        format!("signing_key = {:?}\n{text}", key.display().to_string()),
    )
    .unwrap();
    let (code, report) = doctor(&signed, &[]);
    assert_eq!(code, Some(0), "{report}");
    let detail = check(&report, "attestations")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        detail.contains(&format!("signing key {key_id}")),
        "{detail}"
    );
    let public_body = printed.lines().nth(1).unwrap();
    assert!(
        detail.contains(public_body),
        "the public key itself: {detail}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, report) = doctor(&signed, &[]);
    assert_eq!(code, Some(1), "{report}");
    let c = check(&report, "attestations");
    assert_eq!(c["ok"], false);
    assert!(
        c["detail"].as_str().unwrap().starts_with("signing_key: "),
        "{c}"
    );
    assert!(
        c["fix"].as_str().unwrap().contains("airlock keys generate"),
        "{c}"
    );

    // The listen address is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let busy = d.path().join("busy.toml");
    std::fs::write(
        &busy,
        text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let (code, report) = doctor(&busy, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(check(&report, "listen")["ok"], false, "{report}");
    assert!(check(&report, "listen")["fix"].is_string());

    // A workspace's profile names an image that is not built: doctor fails it, serve refuses.
    let missing = d.path().join("missing.toml");
    std::fs::write(
        &missing,
        text.replace(
            "[workspaces.ws1]\n",
            "[profiles.ghost]\nimage = \"airlock/ghost:latest\"\n[workspaces.ws1]\nprofile = \"ghost\"\n",
        ),
    )
    .unwrap();
    let (code, report) = doctor(&missing, &[]);
    assert_eq!(code, Some(1));
    let images = check(&report, "images");
    assert!(
        images["detail"]
            .as_str()
            .unwrap()
            .contains("airlock/ghost:latest (profile ghost) is missing"),
        "{report}"
    );
    let o = airlock(&["serve", "--config", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("images: airlock/ghost:latest")
            && stderr(&o).contains("airlock images build"),
        "{}",
        stderr(&o)
    );

    // A data dir others can write to.
    let data = d.path().join("data");
    std::fs::create_dir(&data).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, report) = doctor(&cfg, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(check(&report, "data_dir")["ok"], false, "{report}");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();

    // No engine at all.
    let (code, report) = doctor(&cfg, &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")]);
    assert_eq!(code, Some(1));
    assert_eq!(check(&report, "docker")["ok"], false, "{report}");
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "probe")
    );
}

#[test]
fn airlock_call_reaches_every_method_and_maps_error_codes_to_exit_codes() {
    let s = crate::support::daemon::Server::fake_governed();
    let url = format!("http://{}", s.addr);
    let call = |token: Option<&str>, args: &[&str]| {
        let mut c = Command::new(BIN);
        c.arg("call").args(args).args(["--url", &url]);
        match token {
            Some(t) => c.env("AIRLOCK_TOKEN", t),
            None => c.env_remove("AIRLOCK_TOKEN"),
        };
        let o = c.output().unwrap();
        let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        (o.status.code(), out, stderr(&o))
    };
    let body = r#"{"workspace_id": "ws1", "task_id": "t1", "resource_id": "file:README",
                   "mode": "write", "idempotency_key": "k1"}"#;
    let (code, out, err) = call(Some(ALICE), &["claim.acquire", body]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out["claim"]["status"], "active", "{out}");
    // The same body from a file replays the same claim.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("body.json");
    std::fs::write(&f, body).unwrap();
    let (code, again, _) = call(
        Some(ALICE),
        &["claim.acquire", &format!("@{}", f.display())],
    );
    assert_eq!(code, Some(0));
    assert_eq!(again["claim"]["claim_id"], out["claim"]["claim_id"]);
    // Error codes become exit codes; the envelope is printed, the message goes to stderr.
    let (code, out, err) = call(
        Some(ALICE),
        &["claim.acquire", r#"{"workspace_id": "ws1"}"#],
    );
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(out["error"]["code"], "invalid_argument");
    assert!(err.contains("invalid_argument"), "{err}");
    let (code, _, _) = call(
        Some("not-a-token"),
        &["claim.list", r#"{"workspace_id": "ws1"}"#],
    );
    assert_eq!(code, Some(3));
    let (code, _, _) = call(Some(ALICE), &["no.such_method"]);
    assert_eq!(code, Some(4));
    // A typo gets the nearest name; a wrong verb, the noun's methods.
    let (code, _, err) = call(Some(ALICE), &["claim.aquire", body]);
    assert_eq!(code, Some(4));
    assert!(err.contains("did you mean claim.acquire?"), "{err}");
    let (_, _, err) = call(Some(ALICE), &["proposal.show"]);
    assert!(err.contains("proposal.get"), "{err}");
    let (code, _, _) = call(
        Some(ALICE),
        &[
            "proposal.get",
            r#"{"workspace_id": "ws1", "proposal_id": "prop_nope"}"#,
        ],
    );
    assert_eq!(code, Some(4));
    // Refused before anything is sent.
    let (code, _, err) = call(None, &["claim.list"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("AIRLOCK_TOKEN"), "{err}");
    let (code, _, err) = call(Some(ALICE), &["../healthz"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("METHOD"), "{err}");
    let (code, _, err) = call(Some(ALICE), &["claim.list", "[1]"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("BODY"), "{err}");
    // Nobody listening: 7, retry (as for unavailable).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let o = Command::new(BIN)
        .args(["call", "claim.list", "--url", &dead])
        .env("AIRLOCK_TOKEN", ALICE)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is airlock serve running"),
        "{}",
        stderr(&o)
    );
}

/// One exit-code table, in `airlock --help`, covers every code any command returns.
#[test]
fn help_has_one_exit_code_table_for_every_command() {
    let o = airlock(&["--help"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let table = &text[text.find("Exit codes (every command):").expect("the table")..];
    for code in 0..=7 {
        assert!(
            table
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{code}  "))),
            "exit code {code} is not in the table:\n{table}"
        );
    }
    let call = airlock(&["call", "--help"]);
    let call = String::from_utf8_lossy(&call.stdout);
    assert!(call.contains("airlock --help"), "{call}");
}

/// Two `airlock images build` of one image at once: the second waits for the first (one build
/// at a time per machine) and then finds its image by the content hash, so both answer the
/// same id and the tags never move to a second image.
#[test]
fn two_image_builds_at_once_build_once_and_agree_on_the_id() {
    if !docker() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("locktest{}", std::process::id());
    let image_dir = dir.path().join(&name);
    std::fs::create_dir(&image_dir).unwrap();
    // Slow enough (a RUN step) that the two builds overlap, and each build's image would get
    // an id of its own (its layer's creation time) if both ran.
    std::fs::write(
        image_dir.join("Dockerfile"),
        format!(
            "FROM airlock/minimal:latest\nRUN sleep 2 && echo {} > /tmp/stamp\n",
            unix_now()
        ),
    )
    .unwrap();
    let build = || {
        Command::new(BIN)
            .args(["images", "build", &name, "--images-dir"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let cleanup = || {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker images -q airlock/{name} | sort -u | xargs -r docker rmi -f >/dev/null 2>&1"
            ))
            .status();
    };
    for o in [&a, &b] {
        if !o.status.success() {
            cleanup();
            panic!("{}", stderr(o));
        }
    }
    let ids: Vec<serde_json::Value> = [&a, &b]
        .iter()
        .map(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()[0].clone())
        .collect();
    let tagged = docker_out(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        &format!("airlock/{name}:latest"),
    ]);
    cleanup();
    assert_eq!(ids[0]["image_id"], ids[1]["image_id"], "{ids:?}");
    assert_eq!(ids[0]["image_id"], tagged.as_str(), "{ids:?}");
    let skipped: Vec<bool> = ids.iter().map(|v| v["skipped"] == true).collect();
    assert!(
        skipped.contains(&true) && skipped.contains(&false),
        "one built, the other found it: {ids:?}"
    );
    assert!(
        stderr(&a).contains("waiting for another airlock images build")
            || stderr(&b).contains("waiting for another airlock images build"),
        "{}\n{}",
        stderr(&a),
        stderr(&b)
    );
}

/// `images build` finds the images of the checkout the binary was built in wherever it is run
/// from, and a named directory that is not there is refused by name.
#[test]
fn images_build_does_not_depend_on_the_current_directory() {
    if !docker() {
        return;
    }
    let out = std::process::Command::new(BIN)
        .args(["images", "build", "minimal"])
        .current_dir("/")
        .env_remove("AIRLOCK_IMAGES_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(BIN)
        .args(["images", "build", "minimal"])
        .current_dir("/")
        .env("AIRLOCK_IMAGES_DIR", "/nonexistent/images")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--images-dir /nonexistent/images: not a directory"),
        "{err}"
    );
}

/// `doctor` beside the daemon it checks: the listen address that daemon holds is its own, not
/// a failure; an address someone else holds still fails, saying what to do.
#[test]
fn doctor_beside_its_running_daemon_does_not_fail_the_listen_check() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let listen_check = |config: &std::path::Path| {
        let out = Command::new(BIN)
            .args(["doctor", "--json", "--config"])
            .arg(config)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "listen")
            .unwrap()
            .clone()
    };
    // The daemon's own address, as the config that started it names it.
    let text = std::fs::read_to_string(&s.config).unwrap();
    let mine = s.dir.path().join("same.toml");
    std::fs::write(
        &mine,
        text.replacen(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{}\"", s.addr),
            1,
        ),
    )
    .unwrap();
    let c = listen_check(&mine);
    assert_eq!(c["ok"], true, "{c}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("is served by the airlock serve running on this data dir"),
        "{c}"
    );
    // Someone else's port.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let theirs = s.dir.path().join("theirs.toml");
    std::fs::write(
        &theirs,
        text.replacen(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{}\"", other.local_addr().unwrap()),
            1,
        ),
    )
    .unwrap();
    let c = listen_check(&theirs);
    assert_eq!(c["ok"], false, "{c}");
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("stop what listens there"),
        "{c}"
    );
}
