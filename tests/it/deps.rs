//! The dependency phase on real registries, real tools and real Docker: a crate with a
//! dependency passes `cargo test --offline` and a Python project importing flask passes pytest,
//! each with its set fetched once in the sandbox through the egress proxy and mounted read-only;
//! the registries' hosts are learned from this machine's own tools at run time (a recording
//! proxy), never written down. Kept small: one crate, one pinned Python package tree.

use crate::support::egress::Recorder;
use crate::support::*;
use serde_json::Value;
use std::process::Command;

const TOOLCHAIN: &str = "airlock/toolchain:latest";

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// A crate depending on `itoa` (its `Cargo.lock` made by this machine's cargo from its own
/// registry), and the recorder that saw which registry hosts cargo reached for it.
fn crate_with_a_dependency() -> (Fixture, Recorder) {
    let f = Fixture::new(&[
        (
            "Cargo.toml",
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nitoa = \"1\"\n",
            false,
        ),
        (
            "src/lib.rs",
            "pub fn show(n: u32) -> String { itoa::Buffer::new().format(n).to_string() }\n\
             #[cfg(test)]\nmod tests { #[test] fn formats() { assert_eq!(super::show(42), \"42\"); } }\n",
            false,
        ),
    ]);
    let home = tempfile::tempdir().unwrap();
    let rec = Recorder::start();
    let cargo = |args: &[&str]| {
        let out = Command::new("cargo")
            .args(args)
            .current_dir(&f.repo)
            .env("CARGO_HOME", home.path())
            .env("CARGO_HTTP_PROXY", rec.url())
            .env("HTTPS_PROXY", rec.url())
            .env("CARGO_TARGET_DIR", home.path().join("target"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    cargo(&["generate-lockfile"]);
    cargo(&["fetch", "--locked"]);
    let lock = std::fs::read_to_string(f.repo.join("Cargo.lock")).unwrap();
    f.commit(&[("Cargo.lock", &lock, false)], "lock");
    (f, rec)
}

/// `[dependencies]` with this machine's CA bundle when it has one (read from the machine: a
/// TLS-inspecting egress, say, whose CA the host's tools trust and an image's do not).
fn trust_toml() -> String {
    let bundle = std::env::var("SSL_CERT_FILE")
        .ok()
        .filter(|p| std::path::Path::new(p).is_file())
        .or_else(|| {
            let d = "/etc/ssl/certs/ca-certificates.crt";
            std::path::Path::new(d).is_file().then(|| d.to_string())
        });
    match bundle {
        Some(b) => format!("[dependencies]\nca_bundle = {b:?}\n"),
        None => String::new(),
    }
}

fn rust_profile(rec: &Recorder) -> String {
    format!(
        "{}{}[profiles.rust]\nimage = \"{TOOLCHAIN}\"\ndependencies = [\"cargo\"]\n",
        rec.egress_toml(),
        trust_toml()
    )
}

fn run(f: &Fixture, profile: &str, argv: &[&str]) -> Value {
    let r = f.run(&["--profile", profile], argv);
    r.json
        .unwrap_or_else(|| panic!("exit {:?}: {}", r.code, r.stderr))
}

fn sets(f: &Fixture) -> usize {
    std::fs::read_dir(f.data.join("deps/sets"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_crate_with_a_dependency_passes_cargo_test_offline_and_its_set_is_fetched_once() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let (f, rec) = crate_with_a_dependency();
    let f = f.with_config(&rust_profile(&rec));
    let first = run(&f, "rust", &["cargo", "test", "--offline"]);
    assert_eq!(first["status"], "passed", "{first}");
    assert!(
        first["output"]
            .as_str()
            .unwrap()
            .contains("test tests::formats ... ok"),
        "{first}"
    );
    let deps = &first["dependencies"];
    let lock = std::fs::read(f.repo.join("Cargo.lock")).unwrap();
    assert_eq!(deps["lockfiles"]["Cargo.lock"], sha256_hex(&lock), "{deps}");
    assert_eq!(deps["sha256"].as_str().unwrap().len(), 64, "{deps}");
    let resolved = deps["resolved"].as_array().unwrap();
    assert!(
        resolved
            .iter()
            .any(|r| r["uri"].as_str().unwrap().starts_with("pkg:cargo/itoa@")),
        "{deps}"
    );
    assert_eq!(first["phases"]["dependencies"], "fetched", "{first}");
    // A second job on the same lockfiles fetches nothing: the set is mounted as it is.
    let second = run(&f, "rust", &["cargo", "test", "--offline"]);
    assert_eq!(second["status"], "passed", "{second}");
    assert_eq!(second["phases"]["dependencies"], "cached", "{second}");
    assert_eq!(second["dependencies"], first["dependencies"]);
    assert_eq!(second["environment_sha256"], first["environment_sha256"]);
    assert_eq!(sets(&f), 1);
    // The job runs offline: the set is read-only and nothing else is reachable.
    let probe = run(
        &f,
        "rust",
        &[
            "sh",
            "-c",
            "touch /deps/cargo/x 2>&1; ls /deps/cargo/vendor",
        ],
    );
    assert_eq!(probe["status"], "passed", "{probe}");
    let out = probe["output"].as_str().unwrap();
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains("itoa-"), "{out}");
    // The manifest edited between two jobs: a new key, a new set.
    let toml = std::fs::read_to_string(f.repo.join("Cargo.toml")).unwrap();
    f.commit(
        &[("Cargo.toml", &format!("{toml}# edited\n"), false)],
        "edit",
    );
    let third = run(&f, "rust", &["cargo", "test", "--offline"]);
    assert_eq!(third["status"], "passed", "{third}");
    assert_eq!(third["phases"]["dependencies"], "fetched", "{third}");
    assert_ne!(third["dependencies"]["key"], first["dependencies"]["key"]);
    assert_ne!(third["environment_sha256"], first["environment_sha256"]);
    assert_eq!(sets(&f), 2);
}

/// A Python project whose tests import flask (pinned in `requirements.txt`), and the recorder
/// that saw which hosts this machine's pip reached to download that tree.
fn python_project() -> (Fixture, Recorder) {
    let f = Fixture::new(&[
        ("requirements.txt", "flask==3.1.1\n", false),
        (
            "app.py",
            "from flask import Flask\napp = Flask(__name__)\n\n@app.route('/')\ndef hello():\n    return 'hello'\n",
            false,
        ),
        (
            "test_app.py",
            "from app import app\n\ndef test_hello():\n    assert app.test_client().get('/').data == b'hello'\n",
            false,
        ),
    ]);
    let rec = Recorder::start();
    let into = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-cache-dir",
            "--only-binary=:all:",
            "-q",
            "-d",
        ])
        .arg(into.path())
        .args(["-r", "requirements.txt", "--proxy"])
        .arg(rec.url())
        .current_dir(&f.repo)
        // Only the index: never a local wheel directory this machine may configure.
        .env_remove("PIP_FIND_LINKS")
        .env("PIP_NO_INDEX", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip download: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (f, rec)
}

#[test]
fn a_python_project_importing_flask_passes_pytest_with_no_install_step() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let (f, rec) = python_project();
    let f = f.with_config(&format!(
        "{}{}[profiles.py]\nimage = \"{TOOLCHAIN}\"\ndependencies = [\"pip\"]\n",
        rec.egress_toml(),
        trust_toml()
    ));
    let v = run(
        &f,
        "py",
        &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    assert_eq!(v["status"], "passed", "{v}");
    assert!(v["output"].as_str().unwrap().contains("1 passed"), "{v}");
    let uris: Vec<&str> = v["dependencies"]["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    for want in [
        "pkg:pypi/flask@3.1.1",
        "pkg:pypi/werkzeug@",
        "pkg:pypi/jinja2@",
    ] {
        assert!(uris.iter().any(|u| u.starts_with(want)), "{want}: {uris:?}");
    }
    let flask = v["dependencies"]["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == "pkg:pypi/flask@3.1.1")
        .unwrap();
    assert_eq!(
        flask["digest"]["sha256"].as_str().unwrap().len(),
        64,
        "{flask}"
    );
    // The job itself has no network: the set is all it has.
    let offline = run(
        &f,
        "py",
        &[
            "python3",
            "-c",
            "import socket, flask, importlib.metadata as m\ntry:\n    socket.create_connection(('1.1.1.1', 443), timeout=2)\n    print('reached')\nexcept OSError:\n    print('offline with flask', m.version('flask'))",
        ],
    );
    assert_eq!(offline["status"], "passed", "{offline}");
    assert_eq!(offline["output"], "offline with flask 3.1.1\n", "{offline}");
    assert_eq!(offline["phases"]["dependencies"], "cached");
    // An unpinned requirement is refused before anything runs, naming the file, line and
    // package.
    f.commit(&[("requirements.txt", "flask>=3\n", false)], "unpinned");
    let r = f.run(&["--profile", "py"], &["python3", "-m", "pytest"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("requirements.txt line 1: flask is not pinned"),
        "{}",
        r.stderr
    );
}

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

/// A registry of one npm package on loopback (plain HTTP), as an internal registry would be:
/// (port, the tarball's integrity). The package has a `postinstall` script that must not run.
fn npm_registry(dir: &std::path::Path) -> (u16, String) {
    let pkg = dir.join("package");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name": "left-pad", "version": "1.3.0", "main": "index.js",
            "scripts": {"postinstall": "touch ran-postinstall"}}"#,
    )
    .unwrap();
    std::fs::write(
        pkg.join("index.js"),
        "module.exports = (s, n) => String(s).padStart(n);\n",
    )
    .unwrap();
    let tgz = dir.join("left-pad-1.3.0.tgz");
    let ok = Command::new("tar")
        .args(["czf"])
        .arg(&tgz)
        .args(["-C"])
        .arg(dir)
        .arg("package")
        .status()
        .unwrap();
    assert!(ok.success());
    let bytes = std::fs::read(&tgz).unwrap();
    let integrity = {
        use base64::Engine;
        use sha2::Digest;
        format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&bytes))
        )
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        for c in l.incoming().flatten() {
            let bytes = bytes.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(c.try_clone().unwrap());
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                loop {
                    let mut l = String::new();
                    if reader.read_line(&mut l).unwrap_or(0) == 0 || l.trim().is_empty() {
                        break;
                    }
                }
                let mut c = c;
                let path = first.split_whitespace().nth(1).unwrap_or("");
                if path.ends_with(".tgz") {
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        bytes.len()
                    );
                    let _ = c.write_all(&bytes);
                } else {
                    let _ = c.write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                }
            });
        }
    });
    (port, integrity)
}

/// An npm project whose tests require a package from a registry (an internal one here, on
/// loopback: the npm registry is not reachable from this machine): `npm ci --ignore-scripts`
/// fetches it in the sandbox, its `postinstall` never runs, and `npm test` passes offline.
#[test]
fn an_npm_project_passes_npm_test_and_no_install_script_runs() {
    if !docker() || !crate::toolchain::toolchain() {
        return;
    }
    let reg = tempfile::tempdir().unwrap();
    let (port, integrity) = npm_registry(reg.path());
    let lock = format!(
        r#"{{"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
  "packages": {{
    "": {{"name": "app", "version": "1.0.0", "dependencies": {{"left-pad": "1.3.0"}}}},
    "node_modules/left-pad": {{"version": "1.3.0", "hasInstallScript": true,
      "resolved": "http://127.0.0.1:{port}/left-pad/-/left-pad-1.3.0.tgz",
      "integrity": "{integrity}"}}
  }}}}
"#
    );
    let f = Fixture::new(&[
        (
            "package.json",
            r#"{"name": "app", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"},
                "scripts": {"test": "node test.js"}}"#,
            false,
        ),
        ("package-lock.json", &lock, false),
        (
            "test.js",
            "const pad = require('left-pad');\nif (pad('x', 3) !== '  x') process.exit(1);\nconsole.log('npm test passed');\n",
            false,
        ),
    ])
    .with_config(&format!(
        "[egress]\nallow = [\"127.0.0.1:{port}\"]\n\
         [profiles.node]\nimage = \"{TOOLCHAIN}\"\ndependencies = [\"npm\"]\n"
    ));
    let v = run(&f, "node", &["npm", "test"]);
    assert_eq!(v["status"], "passed", "{v}");
    assert!(
        v["output"].as_str().unwrap().contains("npm test passed"),
        "{v}"
    );
    assert_eq!(
        v["dependencies"]["resolved"][0]["uri"], "pkg:npm/left-pad@1.3.0",
        "{v}"
    );
    let no_scripts = run(
        &f,
        "node",
        &[
            "sh",
            "-c",
            "ls /deps/npm/node_modules/left-pad; test ! -e /deps/npm/node_modules/left-pad/ran-postinstall && echo no-install-script-ran",
        ],
    );
    assert!(
        no_scripts["output"]
            .as_str()
            .unwrap()
            .contains("no-install-script-ran"),
        "{no_scripts}"
    );
    // A tampered tarball fails npm's integrity check: the fetch fails, naming it.
    let bad = lock.replace(&integrity, "sha512-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==");
    f.commit(&[("package-lock.json", &bad, false)], "wrong integrity");
    let v = run(&f, "node", &["npm", "test"]);
    assert_eq!(v["status"], "error", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("the fetch (npm) failed"),
        "{v}"
    );
    assert!(v["error"].as_str().unwrap().contains("integrity"), "{v}");
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
