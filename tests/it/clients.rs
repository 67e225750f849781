//! Hostile clients against a real daemon over loopback: idle and slow connections, malformed
//! bodies, header tricks, unsafe resolution paths, refs git would refuse, probing for other
//! workspaces' packets, internal errors that must not leak host details, criss-cross merges.

use crate::support::{ALICE, Server, cand, conflicted};
use crate::support::{BIN, git};
use crate::support::{call, call_raw, request};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn raise_own_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Whether the server still holds `c` open: nothing to read yet (it neither closed it nor
/// answered it with a timeout).
fn still_open(c: &TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let open = matches!(c.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    c.set_nonblocking(false).unwrap();
    open
}

#[test]
fn a_thousand_idle_and_slow_connections_do_not_starve_the_daemon() {
    raise_own_fd_limit();
    // Default limits: max_connections 512, 10 s to send headers, 30 s for the body.
    let s = Server::fake();
    let mut held = Vec::new();
    for i in 0..1000 {
        let Ok(mut c) = TcpStream::connect(&s.addr) else {
            continue;
        };
        match i % 3 {
            // Idle: connected, nothing sent.
            0 => {}
            // Slowloris: half a header block.
            1 => {
                let _ = c.write_all(b"POST /api/v1/integration.list HTTP/1.1\r\nHost: x\r\n");
            }
            // Slow body: headers complete, a body that will never finish.
            _ => {
                let _ = c.write_all(
                    b"POST /api/v1/integration.list HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\nContent-Length: 1000\r\n\r\n{\"works",
                );
            }
        }
        held.push(c);
    }
    for _ in 0..20 {
        let (st, body) = request(&s.addr, "GET", "/healthz", None, b"").expect("healthz answers");
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
        let (st, v) = call(
            &s.addr,
            Some(ALICE),
            "integration.list",
            &json!({"workspace_id": "ws1"}),
        );
        assert_eq!(st, 200, "{v}");
    }
    // Served while held connections are still open: the answers did not wait for the header
    // and body timeouts to close them first (the server's own account, not this test's clock).
    let open = held.iter().filter(|c| still_open(c)).count();
    assert!(
        open > 0,
        "every held connection was closed before the answers came"
    );
    let fds = open_fds(s.pid());
    assert!(fds < 512 + 256, "the daemon holds {fds} file descriptors");
    drop(held);
}

/// Reads until EOF or `limit`, returning what arrived and how long it took.
fn read_until_closed(c: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    c.set_read_timeout(Some(limit)).unwrap();
    let start = Instant::now();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    (got, start.elapsed())
}

#[test]
fn header_body_and_idle_timeouts_close_slow_clients() {
    let s = Server::fake_with(
        "header_read_timeout_seconds = 2\nbody_read_timeout_seconds = 2\nkeep_alive_idle_seconds = 3\nmax_connections = 4\n",
    );
    // Slow headers: closed by the header timeout, no response.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"POST /api/v1/integration.list HTTP/1.1\r\n")
        .unwrap();
    let (_, took) = read_until_closed(&mut slow, Duration::from_secs(20));
    assert!(took < Duration::from_secs(10), "slow headers held {took:?}");
    // A trickled body: 408 with deadline_exceeded once the body deadline passes.
    let mut trickle = TcpStream::connect(&s.addr).unwrap();
    trickle
        .write_all(b"POST /api/v1/integration.list HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    let (got, took) = read_until_closed(&mut trickle, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("deadline_exceeded") && text.contains("body_read_timeout_seconds"));
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A keep-alive connection left idle after a response is closed.
    let mut ka = TcpStream::connect(&s.addr).unwrap();
    ka.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 512];
    let n = ka.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let (_, took) = read_until_closed(&mut ka, Duration::from_secs(20));
    assert!(
        took < Duration::from_secs(10),
        "idle keep-alive held {took:?}"
    );
    // Beyond max_connections, idle connections make room: the daemon still answers.
    let idle: Vec<_> = (0..8)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    let (st, _) = request(&s.addr, "GET", "/healthz", None, b"").unwrap();
    assert_eq!(st, 200);
    drop(idle);
}

#[test]
fn bodies_must_be_objects_and_errors_name_the_field() {
    let s = Server::fake();
    let (cid, version, _) = conflicted(&s);
    // Positional arrays would bind fields by order and bypass unknown-field refusal.
    for (method, body) in [
        ("integration.decide", json!(["ws1", cid, "req_x", 1, true])),
        ("integration.list", json!(["ws1"])),
        ("integration.show", json!("ws1")),
        ("integration.show", json!(null)),
    ] {
        let (st, v) = call(&s.addr, Some(ALICE), method, &body);
        assert_eq!(st, 400, "{method} {body}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("must be a JSON object"),
            "{v}"
        );
    }
    let cases: [(&str, &[u8], &str); 6] = [
        (
            "integration.resolve",
            br#"{"workspace_id":"ws1","candidate_id":"c","expected_version":1,"files":[{"path":5}],"idempotency_key":"k"}"#,
            "files[0].path",
        ),
        (
            "integration.verify",
            br#"{"workspace_id":"ws1","candidate_id":"c","candidate_revision":"r","argv":["true"],"timeout_seconds":-1,"idempotency_key":"k"}"#,
            "timeout_seconds",
        ),
        (
            "integration.list",
            br#"{"workspace_id":"ws1","limit":100000000000000000000000}"#,
            "limit",
        ),
        (
            "integration.show",
            br#"{"workspace_id":"ws1","candidate_id":"c\q"}"#,
            "candidate_id",
        ),
        (
            "integration.show",
            br#"{"workspace_id":"ws1","candidate_id":"c","agent_id":"x"}"#,
            "agent_id",
        ),
        (
            "integration.show",
            br#"{"workspace_id":"ws1","candidate_id":"c"} trailing"#,
            "trailing",
        ),
    ];
    for (method, body, field) in cases {
        let (st, v) = call_raw(&s.addr, Some(ALICE), method, body);
        assert_eq!(st, 400, "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains(field), "{field:?} not named: {m}");
    }
    // Nothing above changed the candidate.
    let v = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&v)["version"], version);
}

#[test]
fn two_authorization_headers_are_refused() {
    let s = Server::fake();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    let body = br#"{"workspace_id":"ws1"}"#;
    write!(
        c,
        "POST /api/v1/integration.list HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {ALICE}\r\nAuthorization: Bearer bob-token-view-only\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(body).unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got).unwrap();
    assert!(got.starts_with("HTTP/1.1 401"), "{got}");
    assert!(got.contains("more than one Authorization header"), "{got}");
}

#[test]
fn duplicate_token_hashes_are_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("airlock.toml");
    let h = "a".repeat(64);
    std::fs::write(
        &cfg,
        format!(
            "[workspaces.w]\nrepo = \"/nonexistent\"\nmembers = {{ a = [\"view\"], b = [\"decide\"] }}\n\
             [[tokens]]\nsha256 = \"{h}\"\nmember_id = \"a\"\n[[tokens]]\nsha256 = \"{h}\"\nmember_id = \"b\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tokens[1].sha256") && err.contains("tokens[0]"),
        "{err}"
    );
}

#[test]
fn unsafe_and_ambiguous_resolution_paths_are_refused_and_real_docs_are_not_conflicts() {
    let s = Server::fake();
    let (cid, version, _) = conflicted(&s);
    let batches = [
        json!([{"path": ":(glob)*", "content": "x"}]),
        json!([{"path": ":!f.txt", "content": "x"}]),
        json!([{"path": ":(icase)F.TXT", "content": "x"}]),
        json!([{"path": "git~1/config", "content": "x"}]),
        json!([{"path": ".git./config", "content": "x"}]),
        json!([{"path": ".git /config", "content": "x"}]),
        json!([{"path": ".git::$INDEX_ALLOCATION/config", "content": "x"}]),
        json!([{"path": ".g\u{200c}it/config", "content": "x"}]),
        json!([{"path": "sub/.GiT/hooks/x", "content": "x"}]),
        json!([{"path": "d", "content": "x"}, {"path": "d/e.txt", "content": "y"}]),
        json!([{"path": "d/e.txt", "content": "y"}, {"path": "d", "delete": true}]),
    ];
    for (i, files) in batches.iter().enumerate() {
        let (st, v) = s.call(
            ALICE,
            "integration.resolve",
            json!({"workspace_id": "ws1",
            "candidate_id": cid, "expected_version": version, "files": files,
            "idempotency_key": format!("bad-{i}")}),
        );
        assert_eq!(st, 400, "{files}: {v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("files["), "{files}: {m}");
        assert!(
            !m.contains(&*s.dir.path().to_string_lossy()),
            "host path leaked: {m}"
        );
    }
    let v = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&v)["version"], version, "nothing changed");
    // A real reStructuredText file (pip's own documentation, which the test script installs)
    // underlines a heading with =======: it resolves the conflict.
    let text = real_rst_with_seven_equals();
    let v = s.ok(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1",
        "candidate_id": cid, "expected_version": version,
        "files": [{"path": "f.txt", "content": text}], "idempotency_key": "rst"}),
    );
    let c = cand(&v);
    assert_eq!(c["state"], "frozen", "{v}");
    let rev = c["candidate_revision"].as_str().unwrap();
    assert_eq!(
        git(&s.repo, &["show", &format!("{rev}:f.txt")]),
        text.trim_end(),
        "exactly the given bytes"
    );
}

/// The first real `.rst` file on this machine with a line of exactly seven `=` (a heading
/// underline that looks like a conflict separator): pip's documentation ships several.
fn real_rst_with_seven_equals() -> String {
    let out = std::process::Command::new("find")
        .args([
            "/usr/share/doc",
            "/usr/lib/python3",
            "-name",
            "*.rst",
            "-size",
            "-256k",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find(|t| t.lines().any(|l| l == "=======") && !t.starts_with(char::is_whitespace))
        .expect("a real .rst file with a ======= line (scripts/install-prereqs.sh installs python3-pip, whose docs have them)")
}

#[test]
fn target_refs_git_would_refuse_are_refused_at_prepare() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    for bad in [
        "refs/heads/x.",
        "refs/heads/.hidden",
        "refs/heads/a.lock/b",
        "refs/heads/a..b",
        "refs/heads/@",
    ] {
        let mut body = s.prepare_body(vec![sub.clone()], &base, &format!("p-{bad}"));
        body["target_ref"] = json!(bad);
        let m = s.err(ALICE, "integration.prepare", body, "invalid_argument");
        assert!(m.contains("target_ref"), "{bad}: {m}");
    }
    let v = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    assert_eq!(v["candidates"], json!([]), "no candidate was created");
}

#[test]
fn another_workspaces_packet_looks_exactly_like_a_missing_one() {
    let s = Server::fake();
    let base = s.head();
    // carol records a packet in ws2 (its own repository).
    let repo2 = s.dir.path().join("repo2");
    let base2 = git(&repo2, &["rev-parse", "main"]);
    std::fs::write(repo2.join("c.txt"), "c\n").unwrap();
    git(&repo2, &["add", "-A"]);
    git(&repo2, &["commit", "-q", "-m", "c"]);
    let rev2 = git(&repo2, &["rev-parse", "HEAD"]);
    let v = s.ok(
        "carol-token-other-workspace",
        "evidence.record",
        json!({"workspace_id": "ws2", "run_id": "run_c", "base_revision": base2,
               "revision": rev2, "idempotency_key": "ev-c"}),
    );
    let foreign = v["evidence"]["evidence_ref"].as_str().unwrap().to_string();
    let missing = foreign
        .chars()
        .rev()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect::<String>();
    let answer = |evidence_ref: &str| {
        let sub = json!({"workspace_id": "ws1", "run_id": "run_c", "evidence_ref": evidence_ref,
                         "retained_revision": rev2});
        let (st, v) = s.call(
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub], &base, &format!("p-{evidence_ref}")),
        );
        let m = v["error"]["message"]
            .as_str()
            .unwrap()
            .replace(evidence_ref, "<ref>");
        (st, v["error"]["code"].clone(), m)
    };
    assert_eq!(answer(&foreign), answer(&missing));
}

#[test]
fn internal_errors_return_an_id_and_keep_host_details_in_the_log() {
    let s = Server::fake();
    // Git cannot create refs under refs/airlock when a file stands there.
    std::fs::create_dir_all(s.repo.join(".git/refs")).unwrap();
    std::fs::write(s.repo.join(".git/refs/airlock"), "not a directory").unwrap();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let (st, v) = s.call(
        ALICE,
        "evidence.record",
        json!({"workspace_id": "ws1", "run_id": "run_a", "base_revision": base,
               "revision": a, "idempotency_key": "ev"}),
    );
    assert_eq!(st, 500, "{v}");
    assert_eq!(v["error"]["code"], "internal");
    let id = v["error"]["error_id"].as_str().unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains(id), "{m}");
    let text = v.to_string();
    for leak in [
        "/tmp",
        "/dev/shm",
        ".git",
        "update-ref",
        "--git-dir",
        "GIT_",
    ] {
        assert!(!text.contains(leak), "{leak:?} leaked: {text}");
    }
}

#[test]
fn criss_cross_inputs_merge_as_git_merge_does() {
    let s = Server::fake();
    let r = &s.repo;
    let lines = |l1: &str, l5: &str, l9: &str| format!("{l1}\nb\nc\nd\n{l5}\nf\ng\nh\n{l9}\n");
    std::fs::write(r.join("f.txt"), lines("a", "e", "i")).unwrap();
    git(r, &["add", "-A"]);
    git(r, &["commit", "-q", "-m", "root"]);
    let root = git(r, &["rev-parse", "HEAD"]);
    let commit = |branch: &str, from: &str, content: String| {
        git(r, &["checkout", "-q", "-B", branch, from]);
        std::fs::write(r.join("f.txt"), content).unwrap();
        git(r, &["commit", "-q", "-am", branch]);
        git(r, &["rev-parse", "HEAD"])
    };
    let x1 = commit("x", &root, lines("X", "e", "i"));
    let y1 = commit("y", &root, lines("a", "Y", "i"));
    // The criss-cross: each side merges the other's first commit.
    git(r, &["checkout", "-q", "x"]);
    git(r, &["merge", "-q", "--no-edit", &y1]);
    git(r, &["checkout", "-q", "y"]);
    git(r, &["merge", "-q", "--no-edit", &x1]);
    let x3 = commit("x", "x", lines("X", "Y2", "i"));
    let y3 = commit("y", "y", lines("X", "Y", "Z"));
    git(r, &["checkout", "-q", "main"]);
    git(r, &["reset", "-q", "--hard", &x3]);
    let bases = git(r, &["merge-base", "--all", &x3, &y3]);
    assert_eq!(bases.lines().count(), 2, "two merge bases: {bases}");
    // The input's base x1 is one of them; an explicit --merge-base=x1 conflicts on line 5.
    let explicit = std::process::Command::new("git")
        .current_dir(r)
        .args([
            "merge-tree",
            "--write-tree",
            &format!("--merge-base={x1}"),
            &x3,
            &y3,
        ])
        .output()
        .unwrap();
    assert_eq!(
        explicit.status.code(),
        Some(1),
        "the explicit base conflicts"
    );
    let expected_tree = git(r, &["merge-tree", "--write-tree", &x3, &y3]);
    let sub = s.evidence("run_a", &x1, &y3, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &x3, "criss-cross"),
    );
    let c = cand(&v);
    assert_eq!(c["state"], "frozen", "{v}");
    let rev = c["candidate_revision"].as_str().unwrap();
    assert_eq!(
        git(r, &["rev-parse", &format!("{rev}^{{tree}}")]),
        expected_tree
    );
    assert_eq!(
        git(r, &["show", &format!("{rev}:f.txt")]),
        lines("X", "Y2", "Z").trim_end()
    );
    let _: Value = v;
}

#[test]
fn the_maintenance_pass_packs_airlocks_refs_and_leaves_others_loose() {
    let s = Server::fake_with("maintenance_interval_seconds = 1\n");
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    assert_eq!(cand(&v)["state"], "frozen");
    let refs_before = s.git_refs("refs/airlock/");
    assert!(refs_before.len() >= 3, "{refs_before:?}");
    let loose = |dir: &str| {
        let out = std::process::Command::new("find")
            .arg(s.repo.join(".git").join(dir))
            .args(["-type", "f"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    let start = Instant::now();
    while loose("refs/airlock") > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "refs never packed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        s.git_refs("refs/airlock/"),
        refs_before,
        "every ref survives packing"
    );
    assert!(
        loose("refs/heads") > 0,
        "the repository's own branches are left alone"
    );
    // Shown and assembled as before.
    let shown = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cand(&v)["candidate_id"]}),
    );
    assert_eq!(cand(&shown)["state"], "frozen");
}
