//! Dependency sets without a registry (the `generic` ecosystem, a script writing the set): what
//! the fetch may reach and write, a tampered or half-made set, a failed fetch, jobs racing on
//! one key, a validation's tests and doctor's egress check, on real Docker through the egress
//! proxy.

use crate::deps::{TOOLCHAIN, run};
use crate::support::*;
use serde_json::Value;
use std::process::Command;

/// A tiny HTTP server on loopback answering every request `200 hello`: (port, its thread).
fn hello_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        }
    });
    port
}

/// Every way out a fetch might try, tried from inside the fetch container by a generic
/// dependency's command: only the listed destination answers; other hosts and ports, IP
/// literals, the host's loopback services, the metadata address, a listed name that resolves
/// to loopback, a direct connection and a write into the checkout are all refused. The job
/// then reads what the fetch recorded from its set.
#[test]
fn a_fetch_reaches_only_the_allowlist_and_cannot_write_its_checkout() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let allowed = hello_server();
    let other = hello_server();
    let probe = format!(
        r#"import os, socket, urllib.request
out = []
def tunnel(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT {{target}} HTTP/1.1\r\nHost: {{target}}\r\n\r\n".encode())
    return s.recv(200).split(b"\r\n")[0].decode()
def plain(url):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"GET {{url}} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
    return data.split(b"\r\n")[0].decode() + (" hello" if data.endswith(b"hello") else "")
out.append("allowed " + plain("http://127.0.0.1:{allowed}/x"))
for t in ["other.example:443", "1.1.1.1:443", "127.0.0.1:{other}", "127.0.0.1:{allowed_next}",
          "169.254.169.254:80", "localhost:{allowed}"]:
    out.append(t + " " + tunnel(t))
out.append("plain-other " + plain("http://127.0.0.1:{other}/x"))
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3)
    out.append("direct reached")
except OSError as e:
    out.append("direct refused")
try:
    open("/workspace/planted", "w").write("x")
    out.append("checkout written")
except OSError as e:
    out.append("checkout refused " + str(e.errno))
open(os.environ["AIRLOCK_DEPS"] + "/results.txt", "w").write("\n".join(out) + "\n")
"#,
        allowed_next = allowed.wrapping_add(1),
    );
    let f = Fixture::new(&[("probe.py", &probe, false), ("README", "hi\n", false)]).with_config(
        &format!(
            "[egress]\nallow = [\"127.0.0.1:{allowed}\", \"localhost:{allowed}\"]\n\
             [profiles.probe]\nimage = \"{TOOLCHAIN}\"\n\
             [[profiles.probe.dependencies]]\necosystem = \"generic\"\nname = \"probe\"\n\
             files = [\"probe.py\"]\nfetch = [\"python3\", \"probe.py\"]\n"
        ),
    );
    let r = f.run(&["--profile", "probe"], &["cat", "/deps/probe/results.txt"]);
    let v = r.json.unwrap_or_else(|| panic!("{}", r.stderr));
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    let line = |prefix: &str| -> &str {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {out}"))
    };
    assert!(
        line("allowed ").contains("200") && line("allowed ").ends_with("hello"),
        "{out}"
    );
    for refused in [
        "other.example:443",
        "1.1.1.1:443",
        &format!("127.0.0.1:{other}"),
        &format!("127.0.0.1:{}", allowed.wrapping_add(1)),
        "169.254.169.254:80",
        &format!("localhost:{allowed}"),
        "plain-other",
    ] {
        assert!(line(refused).contains("403"), "{refused}: {out}");
    }
    assert_eq!(line("direct"), "direct refused", "{out}");
    assert_eq!(line("checkout"), "checkout refused 30", "{out}");
    // Each refusal is logged with why.
    assert!(r.stderr.contains("egress refused"), "{}", r.stderr);
    assert!(
        r.stderr.contains("resolves to 127.0.0.1"),
        "the listed name resolving to loopback: {}",
        r.stderr
    );
}

/// A fixture whose `g` profile has a generic dependency fetched by `script` (no network: the
/// allowlist names a port nothing listens on).
fn generic(script: &str, extra: &str) -> Fixture {
    Fixture::new(&[("fetch.sh", script, true), ("README", "hi\n", false)]).with_config(&format!(
        "[egress]\nallow = [\"127.0.0.1:9\"]\n{extra}{}",
        generic_profile()
    ))
}

/// Profile `g`: a generic set made by the revision's `fetch.sh`.
fn generic_profile() -> String {
    format!(
        "[profiles.g]\nimage = \"{TOOLCHAIN}\"\n\
         [[profiles.g.dependencies]]\necosystem = \"generic\"\nname = \"g\"\n\
         files = [\"fetch.sh\"]\nfetch = [\"sh\", \"fetch.sh\"]\n"
    )
}

/// A daemon (started with `start`) whose `ws1` runs on profile `g`, its repository holding
/// `fetch.sh` (`script`) and `files`.
fn daemon_with_generic_set(
    start: impl FnOnce(&str) -> Server,
    extra: &str,
    script: &str,
    files: &[(&str, &str)],
) -> Server {
    let mut s = start(&format!(
        "[egress]\nallow = [\"127.0.0.1:9\"]\n{}{extra}",
        generic_profile()
    ));
    std::fs::write(s.repo.join("fetch.sh"), script).unwrap();
    for (path, text) in files {
        std::fs::write(s.repo.join(path), text).unwrap();
    }
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "fetch.sh"]);
    let text = std::fs::read_to_string(&s.config).unwrap().replacen(
        "[workspaces.ws1]\n",
        "[workspaces.ws1]\nprofile = \"g\"\n",
        1,
    );
    std::fs::write(&s.config, text).unwrap();
    s.restart(None);
    s
}

/// Raw bytes written over a published set's file in its image (root, while no process runs):
/// the set no longer matches its manifest, so it is discarded and fetched anew, and the job sees
/// the fetched bytes. A fetch killed by kill -9 publishes nothing, and recovery removes its
/// container and its half-made set.
#[test]
fn a_tampered_set_is_discarded_and_a_killed_fetch_publishes_nothing() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    const REAL: &str = "the fetched bytes, exactly\n";
    const FAKE: &str = "THE PLANTED BYTES, EXACTLY\n";
    let f = generic(
        &format!(
            "printf '{}' > \"$AIRLOCK_DEPS/data.txt\"\n",
            REAL.trim_end().to_string() + "\\n"
        ),
        "",
    );
    let v = run(&f, "g", &["cat", "/deps/g/data.txt"]);
    assert_eq!(
        (v["status"].as_str(), v["output"].as_str()),
        (Some("passed"), Some(REAL)),
        "{v}"
    );
    assert_eq!(v["phases"]["dependencies"], "fetched");
    let set = std::fs::read_dir(f.data.join("deps/sets"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let img = set.join("set.img");
    let block: u64 = String::from_utf8_lossy(
        &Command::new("debugfs")
            .args(["-R", "blocks /g/data.txt"])
            .arg(&img)
            .output()
            .unwrap()
            .stdout,
    )
    .split_whitespace()
    .next()
    .expect("the file has a block")
    .parse()
    .unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut image = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        image.seek(SeekFrom::Start(block * 4096)).unwrap();
        image.write_all(FAKE.as_bytes()).unwrap();
        image.sync_all().unwrap();
    }
    let v = run(&f, "g", &["cat", "/deps/g/data.txt"]);
    assert_eq!(
        v["output"], REAL,
        "the planted bytes never reach a job: {v}"
    );
    assert_eq!(
        v["phases"]["dependencies"], "fetched",
        "discarded and fetched anew: {v}"
    );

    // kill -9 while a fetch runs (a new key: the script changed).
    f.commit(&[("fetch.sh", "sleep 60\n", true)], "slow fetch");
    let mut child = f
        .run_cmd(&["--profile", "g"], &["true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let instance: String = rusqlite::Connection::open(f.data.join("airlock.db"))
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE key = 'instance_id'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let fetches = || -> Vec<String> {
        String::from_utf8_lossy(
            &Command::new("docker")
                .args(["ps", "-aq", "--filter"])
                .arg(format!("label=airlock.instance={instance}"))
                .output()
                .unwrap()
                .stdout,
        )
        .lines()
        .map(str::to_string)
        .filter(|id| {
            let out = Command::new("docker")
                .args([
                    "inspect",
                    "--format",
                    "{{index .Config.Labels \"airlock.verification_id\"}}",
                    id,
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).starts_with("fetch_")
        })
        .collect()
    };
    crate::support::daemon::wait_for_secs(
        || !fetches().is_empty(),
        60,
        "the fetch's container runs",
    );
    let incoming = || {
        std::fs::read_dir(f.data.join("deps/incoming"))
            .unwrap()
            .count()
    };
    assert_eq!(
        incoming(),
        1,
        "the half-made set: {:?}",
        std::fs::read_dir(f.data.join("deps"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect::<Vec<_>>()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        std::fs::read_dir(f.data.join("deps/sets")).unwrap().count(),
        1,
        "nothing was published"
    );
    let report = f.recover();
    assert!(
        !report["dependency_leftovers_removed"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{report}"
    );
    assert_eq!(incoming(), 0, "{report}");
    crate::support::daemon::wait_for_secs(
        || fetches().is_empty(),
        30,
        "the fetch's container removed",
    );
}

/// A fetch that fails settles the job `error` (never `failed`), saying why: the fetch's exit
/// and output, a set over its bound, a fetch past its timeout, a destination the allowlist
/// refused. No set is published for any of them.
#[test]
fn a_failed_fetch_is_an_error_that_says_why_never_a_failure() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let bounds = "[dependencies]\nmax_set_bytes = 16777216\nfetch_timeout_seconds = 10\n";
    for (script, want) in [
        (
            "echo 'no such package: left-pad-9' >&2; exit 3\n",
            "exit 3; its output ends: no such package: left-pad-9",
        ),
        (
            "dd if=/dev/zero of=\"$AIRLOCK_DEPS/big\" bs=1M count=40 2>&1; exit 1\n",
            "the set exceeds dependencies.max_set_bytes (16777216)",
        ),
        (
            "sleep 30\n",
            "did not finish within dependencies.fetch_timeout_seconds (10 s)",
        ),
        (
            "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',3128)); s.sendall(b'CONNECT elsewhere.example:443 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(100))\"; exit 6\n",
            "egress refused: elsewhere.example:443 is not in [egress] allow",
        ),
    ] {
        let f = generic(script, bounds);
        let v = run(&f, "g", &["true"]);
        assert_eq!(v["status"], "error", "{script}: {v}");
        let err = v["error"].as_str().unwrap();
        assert!(err.starts_with("dependencies: the fetch (g)"), "{err}");
        assert!(err.contains(want), "{script}: {err}");
        assert!(v["dependencies"]["sha256"].is_null(), "{v}");
        assert_eq!(
            std::fs::read_dir(f.data.join("deps/sets")).unwrap().count(),
            0
        );
    }
}

/// The daemon: two jobs on one key submitted at once fetch once (the second waits for the
/// first's fetch), and a candidate's verification gets the same set as a submitted job (every
/// kind of job runs through the same phase).
#[test]
fn concurrent_jobs_on_one_key_fetch_once_and_candidate_verifications_get_the_set() {
    use crate::delivery::{frozen, settled, verify};
    use serde_json::json;
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let s = daemon_with_generic_set(
        Server::start_with,
        "",
        "sleep 2; echo fetched-once > \"$AIRLOCK_DEPS/data.txt\"\n",
        &[],
    );
    let submit = |key: &str| {
        let addr = s.addr.clone();
        let key = key.to_string();
        std::thread::spawn(move || {
            crate::support::http::call(
                &addr,
                Some(ALICE),
                "job.submit",
                &json!({"workspace_id": "ws1", "revision": "main",
                        "argv": ["cat", "/deps/g/data.txt"], "idempotency_key": key}),
            )
        })
    };
    let (a, b) = (submit("a"), submit("b"));
    let ids: Vec<String> = [a, b]
        .into_iter()
        .map(|h| {
            let (status, v) = h.join().unwrap();
            assert_eq!(status, 200, "{v}");
            v["job"]["job_id"].as_str().unwrap().to_string()
        })
        .collect();
    let show = |id: &str| {
        s.ok(
            ALICE,
            "job.show",
            json!({"workspace_id": "ws1", "job_id": id}),
        )["job"]
            .clone()
    };
    let mut done = vec![];
    for id in &ids {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let j = loop {
            let j = show(id);
            if !matches!(j["state"].as_str(), Some("queued" | "running")) {
                break j;
            }
            assert!(std::time::Instant::now() < deadline, "{j}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        assert_eq!(j["state"], "passed", "{j}");
        assert_eq!(j["verification"]["output"], "fetched-once\n", "{j}");
        done.push(j);
    }
    assert_eq!(
        done[0]["verification"]["dependencies"],
        done[1]["verification"]["dependencies"]
    );
    let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    let metrics = String::from_utf8_lossy(&body).into_owned();
    for line in [
        "airlock_dependency_fetch_seconds_count{result=\"ok\"} 1",
        "airlock_dependency_lookups_total{result=\"miss\"} 1",
        "airlock_dependency_lookups_total{result=\"hit\"} 1",
        "airlock_dependency_sets 1\n",
        "airlock_dependency_discarded_total 0\n",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    // A candidate's verification runs through the same phase: the set, already there.
    let (cid, rev, _) = frozen(&s);
    let vid = verify(&s, &cid, &rev, &["cat", "/deps/g/data.txt"], 60, "cv");
    let r = settled(&s, &cid, &vid);
    assert_eq!(r["status"], "passed", "{r}");
    assert_eq!(r["output"], "fetched-once\n");
    assert_eq!(r["phases"]["dependencies"], "cached", "{r}");
}

/// A governed proposal's validation runs its expected tests through the same phase: the
/// workspace's profile brings its set, and a test reading it passes (it would fail without the
/// set: nothing else puts the file there).
#[test]
fn a_validation_runs_its_tests_with_the_profiles_dependency_set() {
    use crate::support::governed::{claimed, reviewed, validated};
    use serde_json::json;
    if !docker() || !crate::toolchain::toolchain() || !crate::toolchain::built("git") {
        return;
    }
    let s = daemon_with_generic_set(
        Server::governed_with,
        "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
         [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n",
        "echo validated-with-set > \"$AIRLOCK_DEPS/data.txt\"\n",
        &[("a.txt", "a\n")],
    );
    claimed(&s, "directory:", "c");
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n",
               "expected_tests": [["grep", "-qx", "validated-with-set", "/deps/g/data.txt"]],
               "idempotency_key": "p"}),
    );
    let (id, rev) = reviewed(&s, &p, "k");
    let v = validated(&s, &id, &rev, "k");
    assert_eq!(v["valid"], true, "{v}");
}

/// `airlock doctor` tries the egress path a fetch takes (a container with no network, the
/// proxy in its namespace) to every `[egress] allow` destination: one that accepts connections
/// answers, one whose name does not resolve fails the check naming it, and a destination not
/// listed is refused by the proxy.
#[test]
fn doctor_asks_every_allowed_destination_through_the_egress_path() {
    if !docker() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            drop(c);
        }
    });
    let d = tempfile::tempdir().unwrap();
    let doctor = |allow: &str| {
        let cfg = d.path().join("airlock.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n[egress]\nallow = [{allow}]\n\
                 [profiles.g]\nimage = \"airlock/minimal:latest\"\n\
                 [[profiles.g.dependencies]]\necosystem = \"generic\"\nname = \"g\"\n\
                 files = [\"f\"]\nfetch = [\"true\"]\n",
                d.path().join("data").display()
            ),
        )
        .unwrap();
        let o = Command::new(BIN)
            .args(["doctor", "--json", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "dependencies")
            .unwrap()
            .clone()
    };
    let good = format!("\"127.0.0.1:{port}\"");
    let c = doctor(&good);
    assert_eq!(c["ok"], true, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.contains("profiles g: 0 sets"), "{detail}");
    assert!(
        detail.contains(&format!("127.0.0.1:{port} answers")),
        "{detail}"
    );
    assert!(
        detail.contains("a destination not listed is refused"),
        "{detail}"
    );
    let c = doctor(&format!("{good}, \"no-such-host.invalid:443\""));
    assert_eq!(c["ok"], false, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("no-such-host.invalid:443 does not: HTTP/1.1 403"),
        "{detail}"
    );
    assert!(c["fix"].as_str().unwrap().contains("[egress] allow"), "{c}");
}
