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
