//! The dependency phase on real registries, real tools and real Docker: a crate with a
//! dependency passes `cargo test --offline` and a Python project importing flask passes pytest,
//! each with its set fetched once in the sandbox through the egress proxy and mounted read-only;
//! the registries' hosts are learned from this machine's own tools at run time (a recording
//! proxy), never written down. Kept small: one crate, one pinned Python package tree.

use crate::support::egress::Recorder;
use crate::support::*;
use serde_json::Value;
use std::process::Command;

pub(crate) const TOOLCHAIN: &str = "airlock/toolchain:latest";

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

pub(crate) fn run(f: &Fixture, profile: &str, argv: &[&str]) -> Value {
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
