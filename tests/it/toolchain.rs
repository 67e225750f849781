//! Real projects (C, Python, Rust) verified with the built-in `toolchain` profile: Debian with
//! build tools, in the same hardened sandbox (no network, read-only root, non-root user).

use crate::support::*;

/// Builds `airlock/toolchain` once per test run (a no-op when its content hash already exists).
pub(crate) fn toolchain() -> bool {
    built("toolchain")
}

/// Builds the image directory `name` under `images/` once per test run (a no-op when its
/// content hash already exists); false when Docker tests are skipped.
pub(crate) fn built(name: &'static str) -> bool {
    if !docker() {
        return false;
    }
    static BUILT: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut done = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !done.contains(&name) {
        let out = std::process::Command::new(BIN)
            .args(["images", "build", name, "--images-dir"])
            .arg(std::path::Path::new(ROOT).join("images"))
            .output()
            .expect("airlock images build runs");
        assert!(
            out.status.success(),
            "airlock images build {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        done.push(name);
    }
    true
}

fn run_toolchain(f: &Fixture, argv: &[&str]) -> serde_json::Value {
    let r = f.run(&["--profile", "toolchain", "--timeout", "600"], argv);
    r.json.unwrap_or_else(|| panic!("no result: {}", r.stderr))
}

#[test]
fn c_project_make_test_passes() {
    if !toolchain() {
        return;
    }
    let f = Fixture::new(&[
        ("add.c", "int add(int a, int b) { return a + b; }\n", false),
        (
            "test_add.c",
            "#include <stdio.h>\nint add(int, int);\nint main(void) {\n  if (add(2, 3) != 5) { puts(\"FAIL\"); return 1; }\n  puts(\"all tests passed\");\n  return 0;\n}\n",
            false,
        ),
        (
            "Makefile",
            "test: test_add\n\t./test_add\n\ntest_add: add.c test_add.c\n\tcc -Wall -O2 -o $@ $^\n",
            false,
        ),
        (".gitignore", "test_add\n", false),
    ]);
    let v = run_toolchain(&f, &["make", "test"]);
    assert_eq!(v["status"], "passed", "{v}");
    assert!(v["output"].as_str().unwrap().contains("all tests passed"));
    assert_eq!(v["image"], "airlock/toolchain:latest");
    assert_eq!(v["memory_limit_bytes"], 2u64 << 30);
    f.assert_clean(&v);
}

#[test]
fn python_pytest_pass_and_fail() {
    if !toolchain() {
        return;
    }
    let f = Fixture::new(&[
        ("calc.py", "def mul(a, b):\n    return a * b\n", false),
        (
            "test_calc.py",
            "from calc import mul\n\ndef test_mul():\n    assert mul(3, 4) == 12\n",
            false,
        ),
    ]);
    let v = run_toolchain(
        &f,
        &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    assert_eq!(v["status"], "passed", "{v}");
    assert!(v["output"].as_str().unwrap().contains("1 passed"), "{v}");
    f.assert_clean(&v);

    f.commit(
        &[(
            "test_calc.py",
            "from calc import mul\n\ndef test_mul():\n    assert mul(3, 4) == 13\n",
            false,
        )],
        "break the test",
    );
    let v = run_toolchain(
        &f,
        &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["exit_code"], 1);
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains("assert 12 == 13") && out.contains("1 failed"),
        "failure visible: {out}"
    );
    f.assert_clean(&v);
}

#[test]
fn rust_crate_cargo_test_offline_passes() {
    if !toolchain() {
        return;
    }
    let f = Fixture::new(&[
        (
            "Cargo.toml",
            "[package]\nname = \"sample\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
            false,
        ),
        (
            "src/lib.rs",
            "pub fn double(x: u32) -> u32 { x * 2 }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn doubles() { assert_eq!(super::double(21), 42); }\n}\n",
            false,
        ),
    ]);
    let v = run_toolchain(
        &f,
        &[
            "sh",
            "-c",
            "cargo test --offline && test -d target/debug && echo target-in-workspace",
        ],
    );
    assert_eq!(v["status"], "passed", "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(out.contains("test result: ok. 1 passed"), "{out}");
    assert!(out.contains("target-in-workspace"), "{out}");
    f.assert_clean(&v);
}

#[test]
fn build_step_reaching_the_network_fails_clearly() {
    if !toolchain() {
        return;
    }
    let f = Fixture::new(&[(
        "fetch.py",
        "import urllib.request\nurllib.request.urlopen('https://registry.example/simple/six/', timeout=10)\nprint('fetched')\n",
        false,
    )]);
    let v = run_toolchain(&f, &["python3", "fetch.py"]);
    assert_eq!(v["status"], "failed", "{v}");
    let out = v["output"].as_str().unwrap();
    assert!(!out.contains("fetched"));
    assert!(
        out.contains("URLError")
            && (out.contains("name resolution")
                || out.contains("Network is unreachable")
                || out.contains("Name or service not known")),
        "the failure says the network is not there: {out}"
    );
}

#[test]
fn test_that_rewrites_a_tracked_file_is_source_changed() {
    if !toolchain() {
        return;
    }
    let f = Fixture::new(&[
        ("expected.txt", "golden\n", false),
        (
            "test_golden.py",
            "def test_regenerates_golden_file():\n    open('expected.txt', 'w').write('regenerated\\n')\n",
            false,
        ),
    ]);
    let v = run_toolchain(
        &f,
        &["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
    );
    assert_eq!(v["status"], "source_changed", "{v}");
    assert!(v["error"].as_str().unwrap().contains("expected.txt"));
    f.assert_clean(&v);
}

#[test]
fn unreachable_package_source_fails_the_build_clearly() {
    if !docker() {
        return;
    }
    // A package source that cannot be reached (and sends nothing over the network).
    let d = tempfile::tempdir().unwrap();
    let sources = d.path().join("unreachable.list");
    std::fs::write(
        &sources,
        "deb file:///nonexistent-airlock-mirror bookworm main\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args([
            "images",
            "build",
            "toolchain",
            "--without-rust",
            "--images-dir",
        ])
        .arg(std::path::Path::new(ROOT).join("images"))
        .env("AIRLOCK_APT_SOURCES", &sources)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("check that the package source(s)") && err.contains("unreachable.list"),
        "{err}"
    );
    assert!(err.contains("build-rootfs.sh failed"), "{err}");
}

/// Real suites bind and connect on `localhost` (a well-known Python web framework's own tests
/// fail without it): the job resolves it through a normal hosts file, binds a real socket on it
/// and connects to it, while any other address stays unreachable (network_mode none).
#[test]
fn localhost_resolves_and_a_real_socket_binds_on_it_with_the_network_still_off() {
    if !toolchain() {
        return;
    }
    let script = r#"
import socket
addrs = sorted({a[4][0] for a in socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)})
print("addrs=" + ",".join(addrs))
srv = socket.socket()
srv.bind(("localhost", 0))
srv.listen(1)
cli = socket.create_connection(("localhost", srv.getsockname()[1]), timeout=5)
conn, _ = srv.accept()
cli.sendall(b"ping")
print("echo=" + conn.recv(4).decode())
try:
    socket.create_connection(("192.0.2.1", 80), timeout=2)
    print("outside=reachable")
except OSError as e:
    print("outside=unreachable")
"#;
    let f = Fixture::new(&[("t.py", script, false)]);
    let v = run_toolchain(&f, &["python3", "t.py"]);
    assert_eq!(v["status"], "passed", "{v}");
    let out = kv(v["output"].as_str().unwrap());
    assert!(out["addrs"].contains("127.0.0.1"), "{out:?}");
    assert_eq!(out["echo"], "ping");
    assert_eq!(out["outside"], "unreachable");
}

/// The image carries the tools real suites expect beyond a compiler: a pager, pkg-config and
/// CMake (a CMake project configures out of tree and runs its tests with ctest).
#[test]
fn cmake_pkg_config_and_less_are_in_the_toolchain_image() {
    if !toolchain() {
        return;
    }
    let f = Fixture::new(&[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.10)\nproject(t C)\nenable_testing()\nadd_executable(t t.c)\nadd_test(NAME t COMMAND t)\n",
            false,
        ),
        ("t.c", "int main(void) { return 0; }\n", false),
    ]);
    let v = run_toolchain(
        &f,
        &[
            "sh",
            "-c",
            "less --version | head -n 1 && pkg-config --version && mkdir /tmp/build && cd /tmp/build \
             && cmake -S /workspace -B . >/dev/null && make >/dev/null && ctest 2>&1 | tail -n 3",
        ],
    );
    assert_eq!(v["status"], "passed", "{v}");
    assert!(
        v["output"].as_str().unwrap().contains("100% tests passed"),
        "{v}"
    );
    f.assert_clean(&v);
}
