//! `airlock run` on a second real Docker engine reached over mutual TLS, sharing no filesystem
//! with Airlock: the tree is uploaded into a quota'd volume, judged from what is read back,
//! the hardening is unchanged, and no host path ever reaches that engine.

use crate::support::engine2::SecondEngine;
use crate::support::*;
use serde_json::Value;

const IMAGE: &str = "airlock/minimal:latest";

/// `top` goes before the `[[engines]]` table (top-level keys), `extra` after it.
fn fixture_with(engine: &SecondEngine, top: &str, extra: &str) -> Fixture {
    let f = Fixture::new(&[
        ("README", "hello\n", false),
        ("run.sh", "#!/bin/sh\necho script ran\n", true),
        ("src/lib.txt", "library\n", false),
    ])
    .with_config(&format!("{top}{}{extra}", engine.config("remote-1", 2)));
    std::os::unix::fs::symlink("README", f.repo.join("link")).unwrap();
    f.commit(&[], "a symlink");
    f
}

fn fixture(engine: &SecondEngine, extra: &str) -> Fixture {
    fixture_with(engine, "", extra)
}

/// Every mount of every container on the engine, as `type source`, sampled until `done`.
fn mounts_while(engine: &SecondEngine, done: &std::sync::atomic::AtomicBool) -> Vec<String> {
    let mut seen = Vec::new();
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        let ids = engine.out(&["ps", "-q"]);
        for id in ids.lines().filter(|l| !l.is_empty()) {
            let out = engine
                .docker(&[
                    "inspect",
                    "--format",
                    "{{range .Mounts}}{{.Type}} {{.Source}}|{{end}}",
                    id,
                ])
                .output()
                .unwrap();
            for m in String::from_utf8_lossy(&out.stdout).trim().split('|') {
                if !m.is_empty() && !seen.iter().any(|s: &String| s == m) {
                    seen.push(m.to_string());
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    seen
}

fn assert_nothing_left(engine: &SecondEngine, v: &Value) {
    assert_eq!(
        engine.leftovers(),
        (vec![], vec![]),
        "containers or volumes left on the remote engine"
    );
    let key = v["creation_key"].as_str().unwrap();
    assert_eq!(
        containers_with_key(key),
        Vec::<String>::new(),
        "the machine's own engine ran the job"
    );
}

#[test]
fn a_job_on_a_tls_engine_gets_the_uploaded_tree_and_no_host_path() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let f = fixture(&engine, "");
    // The job sees the exact tree (modes and the symlink included), owned by the sandbox
    // user, and writes to it; it runs long enough for its mounts to be inspected.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (r, mounts) = std::thread::scope(|s| {
        let watcher = s.spawn(|| mounts_while(&engine, &done));
        let r = f.run(
            &[],
            &[
                "sh",
                "-c",
                "./run.sh && cat README && ls -ln | tail -n +2 | awk '{print $1, $3, $9, $10, $11}' \
                 && mkdir build && echo o > build/x && id -u && cat /proc/self/status | grep NoNewPrivs \
                 && sleep 1",
            ],
        );
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (r, watcher.join().unwrap())
    });
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.starts_with("script ran\nhello\n"), "{out}");
    assert!(out.contains("-rwxr-xr-x 65532 run.sh"), "{out}");
    assert!(out.contains("-rw-r--r-- 65532 README"), "{out}");
    assert!(out.contains("lrwxrwxrwx 65532 link -> README"), "{out}");
    assert!(out.contains("\n65532\n"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert_eq!(v["image"], IMAGE);
    // The volume the job mounted, and nothing bound from a host path.
    assert!(
        !mounts.is_empty(),
        "no container was seen on the remote engine"
    );
    for m in &mounts {
        assert!(
            m.starts_with("volume "),
            "a non-volume mount reached the engine: {mounts:?}"
        );
    }
    assert_nothing_left(&engine, &v);

    // The same profile on a bind-mount engine hashes differently (the workspace kind is part
    // of the environment), and the engine's name is not: a second name hashes the same.
    let local = Fixture::new(&[("a", "a\n", false)]).sh("true");
    assert_ne!(local["environment_sha256"], v["environment_sha256"]);
    let renamed = Fixture::new(&[("a", "a\n", false)])
        .with_config(&engine.config("another-name", 1))
        .sh("true");
    assert_eq!(renamed["environment_sha256"], v["environment_sha256"]);
    assert_eq!(engine.leftovers(), (vec![], vec![]));
}

/// A remote job silent for longer than every timer on the way to its engine (a call's 30 s bound
/// until response headers, a read-back's 30 s without a byte, an unused connection's 60 s):
/// its output, its exit and its tree are all read back, and it passes.
#[test]
fn a_remote_job_silent_past_every_engine_timer_is_followed_to_its_end() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let f = fixture(&engine, "");
    let silent = airlock::limits::ENGINE_IDLE_CONNECTION_TIMEOUT
        .max(airlock::limits::ENGINE_STREAM_IDLE_TIMEOUT)
        .max(airlock::limits::ENGINE_CALL_TIMEOUT)
        + std::time::Duration::from_secs(5);
    let script = format!(
        "echo start && sleep {} && echo end && mkdir build && echo o > build/x",
        silent.as_secs()
    );
    let started = std::time::Instant::now();
    let r = f.run(&["--timeout", "240"], &["sh", "-c", &script]);
    assert!(started.elapsed() >= silent);
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    assert_eq!(v["status"], "passed", "{v}");
    assert_eq!(v["output"], "start\nend\n", "{v}");
    assert_nothing_left(&engine, &v);
}

/// Symlinks whose relative target leads out of the tree (git keeps them; a local checkout has
/// them) reach a remote engine's job exactly as on the local engine, though the engine's archive
/// extraction refuses them; the source check reads them back as they were, and a job that
/// changes one is `source_changed`.
#[test]
fn outward_symlinks_reach_a_remote_job_as_they_reach_a_local_one() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let f = fixture(&engine, "");
    std::os::unix::fs::symlink("../outside", f.repo.join("up")).unwrap();
    std::fs::create_dir_all(f.repo.join("deep/er")).unwrap();
    std::os::unix::fs::symlink("../../../x", f.repo.join("deep/er/up3")).unwrap();
    std::os::unix::fs::symlink("../README", f.repo.join("deep/in")).unwrap();
    f.commit(&[], "outward links");
    let show = "readlink up; readlink deep/er/up3; readlink deep/in; cat deep/in";
    let remote = f.sh(show);
    assert_eq!(remote["status"], "passed", "{remote}");
    let local = Fixture::new(&[("README", "hello\n", false)]);
    std::os::unix::fs::symlink("../outside", local.repo.join("up")).unwrap();
    std::fs::create_dir_all(local.repo.join("deep/er")).unwrap();
    std::os::unix::fs::symlink("../../../x", local.repo.join("deep/er/up3")).unwrap();
    std::os::unix::fs::symlink("../README", local.repo.join("deep/in")).unwrap();
    local.commit(&[], "outward links");
    let here = local.sh(show);
    assert_eq!(here["status"], "passed", "{here}");
    assert_eq!(remote["output"], here["output"]);
    assert_eq!(
        remote["output"],
        "../outside\n../../../x\n../README\nhello\n"
    );
    // Changed by the job: the read-back shows it.
    let changed = f.sh("rm up && ln -s ../elsewhere up");
    assert_eq!(changed["status"], "source_changed", "{changed}");
    assert!(
        changed["error"].as_str().unwrap().contains("up"),
        "{changed}"
    );
    assert_eq!(engine.leftovers(), (vec![], vec![]));
}

fn assert_source_changed(engine: &SecondEngine, f: &Fixture, script: &str, path: &str) {
    let v = f.sh(script);
    assert_eq!(v["status"], "source_changed", "{script}: {v}");
    assert!(
        v["error"].as_str().unwrap().contains(path),
        "{script}: error names {path}: {}",
        v["error"]
    );
    assert_nothing_left(engine, &v);
}

#[test]
fn every_kind_of_tracked_change_is_source_changed_on_the_remote_engine() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let f = fixture(&engine, "");
    assert_source_changed(&engine, &f, "echo x >> README", "README");
    assert_source_changed(&engine, &f, "chmod +x README", "README");
    assert_source_changed(&engine, &f, "chmod -x run.sh", "run.sh");
    assert_source_changed(&engine, &f, "rm README", "README");
    assert_source_changed(&engine, &f, "rm README && ln -s run.sh README", "README");
    assert_source_changed(&engine, &f, "rm link && ln -s run.sh link", "link");
    assert_source_changed(&engine, &f, "rm link && echo README > link", "link");
    assert_source_changed(
        &engine,
        &f,
        "rm -r src && mkdir src && echo library > src/lib.txt.new",
        "src/lib.txt",
    );
    assert_source_changed(&engine, &f, "rm -r src && ln -s /tmp src", "src/lib.txt");
    assert_source_changed(&engine, &f, "rm README && mkfifo README", "README");
    assert_source_changed(
        &engine,
        &f,
        "touch -r README /tmp/ref && printf 'HELLO\\n' > README && touch -r /tmp/ref README",
        "README",
    );
    assert_source_changed(&engine, &f, "echo x > README; exit 1", "README");
    // A hard link to a tracked file leaves it as it was; files the job adds are its own.
    let v = f.sh("ln README README.hard && echo new > new.txt && mkdir -p a/b && mkfifo a/b/p");
    assert_eq!(v["status"], "passed", "{v}");
    assert_nothing_left(&engine, &v);
}

#[test]
fn the_volume_quota_gives_the_job_enospc_and_a_tree_over_it_never_runs() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let small = "[profiles.small]\nimage = \"airlock/minimal:latest\"\n\
                 disk_bytes = 16777216\ninodes = 1024\n";
    let f = fixture(&engine, small);
    let r = f.run(
        &["--profile", "small"],
        &["sh", "-c", "dd if=/dev/zero of=fill bs=1M count=64 2>&1; echo dd_exit=$?; \
         i=0; while [ $i -lt 1100 ]; do touch f$i 2>/dev/null || break; i=$((i+1)); done; echo files=$i"],
    );
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("No space left on device"), "{out}");
    assert!(!out.contains("dd_exit=0"), "{out}");
    let files: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("files="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(files < 1024, "the inode quota held: {out}");
    assert_nothing_left(&engine, &v);

    // A tree larger than the quota is refused before any container exists.
    f.commit(&[("big.bin", &"x".repeat(17 << 20), false)], "big");
    let r = f.run(&["--profile", "small"], &["true"]);
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    assert_eq!(v["status"], "error", "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("quota"),
        "{}",
        v["error"]
    );
    assert_eq!(engine.leftovers(), (vec![], vec![]));
}

/// Kill -9 at every step of a run on the remote engine, then `airlock recover`: the same
/// judgement as on the local engine (never a rerun, never an invented pass), and nothing of
/// the job (container, holder, volume) left on either engine.
#[test]
fn every_crash_point_on_the_remote_engine_recovers_and_leaves_nothing() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    for point in airlock::crash::CrashPoint::ALL
        .into_iter()
        .filter(|p| p.is_pipeline())
    {
        let point = point.as_str();
        let f = fixture(&engine, "");
        let mut c = f.run_cmd(&[], &["sh", "-c", "cat README"]);
        c.env("AIRLOCK_CRASH_AT", point);
        let out = c.output().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "{point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = f.recover();
        assert_eq!(
            report["failures"],
            Value::Array(vec![]),
            "{point}: {report}"
        );
        let rows = f.list(&[]);
        assert_eq!(rows.len(), 1, "{point}");
        let after = &rows[0];
        match point {
            "after_artifact" | "after_settle" => {
                assert_eq!(after["status"], "passed", "{point}: {after}");
                assert_eq!(after["output"], "hello\n");
            }
            _ => {
                assert_eq!(after["status"], "error", "{point}: {after}");
                assert_eq!(after["error"], "interrupted before a result was recorded");
            }
        }
        assert_nothing_left(&engine, after);
        assert_eq!(
            std::fs::read_dir(f.data.join("checkouts")).unwrap().count(),
            0,
            "{point}: a host checkout was made for a remote job"
        );
    }
}

/// `airlock images push` puts the machine's image on the engine with the same id, sends
/// nothing the second time, and refuses an image the configuration does not use.
#[test]
fn images_push_loads_the_built_image_with_its_id_once() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[]);
    let f = fixture(&engine, "");
    let push = |extra: &[&str]| {
        let mut c = std::process::Command::new(BIN);
        c.args(["images", "push", "--config"])
            .arg(f.config.as_ref().unwrap())
            .args(extra);
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let before = f.run(&[], &["true"]);
    assert_eq!(before.code, Some(2), "refused: no engine has the image yet");
    assert!(
        before.stderr.contains("airlock/minimal:latest"),
        "{}",
        before.stderr
    );
    let (code, out, err) = push(&["--image", IMAGE]);
    assert_eq!(code, Some(0), "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let local_id = String::from_utf8_lossy(
        &std::process::Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", IMAGE])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    assert_eq!(report[0]["engine"], "remote-1", "{report}");
    assert_eq!(
        report[0]["image"]["image_id"],
        local_id.as_str(),
        "{report}"
    );
    assert_eq!(report[0]["image"]["copied"], true, "{report}");
    assert_eq!(
        engine.out(&["image", "inspect", "--format", "{{.Id}}", IMAGE]),
        local_id
    );
    let (code, out, _) = push(&["--image", IMAGE]);
    assert_eq!(code, Some(0));
    let again: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(again[0]["image"]["copied"], false, "{again}");
    let (code, _, err) = push(&["--image", "nope:latest"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not an image the configuration uses"), "{err}");
    assert_eq!(f.sh("true")["status"], "passed");
}

/// `airlock doctor` checks every configured engine: reachable over mutual TLS, its version,
/// and each image with the id this machine built; a missing one is named with the fix.
#[test]
fn doctor_checks_the_remote_engine_and_its_images() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    // Every profile on the one image the engine holds, so every image check can pass.
    let f = fixture_with(
        &engine,
        "",
        &format!(
            "[profiles.toolchain]\nimage = \"{IMAGE}\"\n[profiles.git]\nimage = \"{IMAGE}\"\n"
        ),
    );
    let doctor = || -> Value {
        let out = std::process::Command::new(BIN)
            .args(["doctor", "--json", "--images-dir"])
            .arg(std::path::Path::new(ROOT).join("images"))
            .arg("--config")
            .arg(f.config.as_ref().unwrap())
            .arg("--data-dir")
            .arg(&f.data)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "engines")
            .cloned()
            .unwrap_or_else(|| panic!("no engines check: {v}"))
    };
    let c = doctor();
    assert_eq!(c["ok"], true, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.contains("remote-1 (tcp://127.0.0.1:"), "{c}");
    assert!(detail.contains("mutual TLS"), "{c}");
    // A hardened job read its token from an uploaded volume there, and left nothing.
    assert!(detail.contains("probe job "), "{c}");
    assert_eq!(
        engine.leftovers(),
        (vec![], vec![]),
        "the probe left its volume"
    );
    engine.out(&["rmi", "-f", IMAGE]);
    let c = doctor();
    assert_eq!(c["ok"], false, "{c}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("airlock/minimal:latest is missing"),
        "{c}"
    );
    assert!(
        c["fix"].as_str().unwrap().contains("airlock images push"),
        "{c}"
    );
    drop(engine);
    let c = doctor();
    assert_eq!(c["ok"], false, "{c}");
    assert!(c["detail"].as_str().unwrap().contains("remote-1:"), "{c}");
}

/// The remote engine dies mid-run (SIGKILL): the run never passes, and once the engine is back
/// `airlock recover` leaves nothing of the job on it.
#[test]
fn a_remote_engine_killed_mid_run_is_never_a_pass_and_recovery_cleans_up_after_it() {
    if !docker() {
        return;
    }
    let mut engine = SecondEngine::start(&[IMAGE]);
    let f = fixture(&engine, "");
    let child = f
        .run_cmd(&[], &["sleep", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        || {
            !engine
                .out(&["ps", "-q", "--filter", "label=airlock.managed=true"])
                .is_empty()
        },
        "the job's container running on the remote engine",
    );
    engine.kill();
    let out = child.wait_with_output().unwrap();
    let r = RunResult::from(out);
    let v = r.json.unwrap_or_else(|| panic!("no result: {}", r.stderr));
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["engine"], "remote-1", "{v}");
    engine.restart();
    let report = f.recover();
    assert_eq!(report["failures"], Value::Array(vec![]), "{report}");
    let rows = f.list(&[]);
    assert_eq!(
        rows[0]["status"], "error",
        "recovery invents nothing: {}",
        rows[0]
    );
    assert_nothing_left(&engine, &v);
}

/// The daemon and the engine both die during a run. While the engine stays away, recovery
/// leaves the run `running` and says how long it has been away; once it has been away past
/// `engine_lost_after_seconds` the run settles `error` ("engine lost"), never `passed`, and
/// nothing is rerun; when the engine answers again its container and volume are removed.
#[test]
fn a_job_on_an_engine_away_past_the_bound_is_settled_as_lost_and_cleaned_up_on_its_return() {
    if !docker() {
        return;
    }
    let mut engine = SecondEngine::start(&[IMAGE]);
    let f = fixture_with(&engine, "engine_lost_after_seconds = 60\n", "");
    let mut child = f
        .run_cmd(&[], &["sleep", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        || {
            !engine
                .out(&["ps", "-q", "--filter", "label=airlock.managed=true"])
                .is_empty()
        },
        "the job's container running on the remote engine",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    engine.kill();
    let clock = f.dir.path().join("clock");
    let recover_in = |seconds: u64| {
        let t = time::OffsetDateTime::now_utc() + std::time::Duration::from_secs(seconds);
        std::fs::write(&clock, airlock::ids::rfc3339(t)).unwrap();
        let out = f
            .base(&["recover"])
            .env("AIRLOCK_TEST_CLOCK_FILE", &clock)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        (out.status.success(), report)
    };
    let (ok, report) = recover_in(0);
    assert!(ok, "waiting is not a failure: {report}");
    let waiting = report["waiting_for_engine"].as_array().unwrap();
    assert_eq!(waiting.len(), 1, "{report}");
    let line = waiting[0].as_str().unwrap();
    assert!(
        line.contains("engine remote-1 does not answer") && line.contains("lost after 60 s"),
        "{line}"
    );
    assert_eq!(
        f.list(&[])[0]["status"],
        "running",
        "left running: {report}"
    );
    // Two minutes later by the clock, the engine is lost.
    let (ok, report) = recover_in(120);
    assert!(ok, "{report}");
    let settled = &report["marked_error"][0];
    assert!(
        settled["error"]
            .as_str()
            .unwrap()
            .starts_with("engine lost: remote-1 has not answered for"),
        "{report}"
    );
    let row = &f.list(&[])[0];
    assert_eq!(row["status"], "error", "{row}");
    assert_eq!(
        report["waiting_for_engine"],
        Value::Array(vec![]),
        "{report}"
    );
    // The engine answers again: its leftovers of the lost run go.
    engine.restart();
    let (ok, report) = recover_in(180);
    assert!(ok, "{report}");
    assert_eq!(
        f.list(&[])[0]["status"],
        "error",
        "recovery invents nothing"
    );
    assert_nothing_left(&engine, row);
}

/// `airlock doctor` asks an engine only for the images of the profiles it may run (whose
/// `engine_labels` it carries): an image a profile pinned to other engines uses may be absent.
#[test]
fn doctor_asks_an_engine_only_for_the_images_its_profiles_use() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let f = fixture_with(
        &engine,
        "",
        &format!(
            "[[engines]]\nname = \"here\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = 1\n\
             labels = [\"big\"]\n\
             [profiles.toolchain]\nimage = \"{IMAGE}\"\n[profiles.git]\nimage = \"{IMAGE}\"\n\
             [profiles.big]\nimage = \"airlock/toolchain:latest\"\nengine_labels = [\"big\"]\n"
        ),
    );
    let out = std::process::Command::new(BIN)
        .args(["doctor", "--json", "--config"])
        .arg(f.config.as_ref().unwrap())
        .arg("--data-dir")
        .arg(&f.data)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "engines")
        .cloned()
        .unwrap();
    assert_eq!(
        c["ok"], true,
        "remote-1 need not hold the big profile's image: {c}"
    );
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("remote-1 (") && detail.contains("here ("),
        "{c}"
    );
}

/// A job on a remote engine gets its dependency set like its workspace: fetched here (on this
/// machine's engine, behind the egress proxy), then uploaded into a volume there (once per set
/// and process: a volume another process filled is not believed) and mounted read-only. The
/// engine holds no set this machine no longer uses: a fill removes the other sets' volumes no
/// job mounts and the fillers an interrupted upload left.
#[test]
fn a_remote_job_gets_its_dependency_set_uploaded_once_and_read_only() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE, "airlock/toolchain:latest"]);
    let f = fixture_with(
        &engine,
        "[egress]\nallow = [\"127.0.0.1:9\"]\n",
        "[profiles.g]\nimage = \"airlock/toolchain:latest\"\n\
         [[profiles.g.dependencies]]\necosystem = \"generic\"\nname = \"g\"\n\
         files = [\"fetch.sh\"]\nfetch = [\"sh\", \"fetch.sh\"]\n",
    );
    f.commit(
        &[(
            "fetch.sh",
            "echo from-the-set > \"$AIRLOCK_DEPS/data.txt\"\n",
            false,
        )],
        "fetch",
    );
    let show = "cat /deps/g/data.txt; touch /deps/g/x 2>/dev/null || echo read-only";
    let first = f
        .run(&["--profile", "g"], &["sh", "-c", show])
        .json
        .unwrap();
    assert_eq!(first["status"], "passed", "{first}");
    assert_eq!(first["engine"], "remote-1");
    assert_eq!(first["output"], "from-the-set\nread-only\n", "{first}");
    let second = f
        .run(&["--profile", "g"], &["sh", "-c", show])
        .json
        .unwrap();
    assert_eq!(second["output"], first["output"]);
    assert_eq!(second["phases"]["dependencies"], "cached", "{second}");
    let volumes: Vec<String> = engine
        .out(&["volume", "ls", "-q"])
        .lines()
        .filter(|v| v.starts_with("airlock-deps-"))
        .map(str::to_string)
        .collect();
    assert_eq!(volumes.len(), 1, "one volume per set: {volumes:?}");
    // A filler an interrupted upload left, then a new set (its fetch script edited).
    let instance = engine.out(&[
        "volume",
        "inspect",
        "-f",
        "{{index .Labels \"airlock.deps_instance\"}}",
        &volumes[0],
    ]);
    let instance = instance.trim();
    assert!(!instance.is_empty());
    engine.out(&[
        "create",
        "--name",
        "airlock-depsfill-leftover",
        "--label",
        &format!("airlock.deps_instance={instance}"),
        IMAGE,
        "true",
    ]);
    f.commit(
        &[(
            "fetch.sh",
            "echo from-the-new-set > \"$AIRLOCK_DEPS/data.txt\"\n",
            false,
        )],
        "fetch anew",
    );
    let third = f
        .run(&["--profile", "g"], &["sh", "-c", show])
        .json
        .unwrap();
    assert_eq!(third["output"], "from-the-new-set\nread-only\n", "{third}");
    let now: Vec<String> = engine
        .out(&["volume", "ls", "-q"])
        .lines()
        .filter(|v| v.starts_with("airlock-deps-"))
        .map(str::to_string)
        .collect();
    assert_eq!(now.len(), 1, "the old set's volume is gone: {now:?}");
    assert_ne!(now[0], volumes[0]);
    let left = engine.out(&["ps", "-a", "-q", "--filter", "name=airlock-depsfill"]);
    assert!(left.trim().is_empty(), "fillers left: {left}");
}
