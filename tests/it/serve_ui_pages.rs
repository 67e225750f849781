//! What the web page shows and offers beyond approve/deny: each verification laid out (argv,
//! status, exit code, capped output and its marker, images, environment hash, elapsed time) on
//! real Docker, the combined diff in pages that add up to git's own diff, the proposal's file
//! table, security reviews for holders of the security role, reject and withdraw for the members
//! the server lets do them, and the Secure cookie behind a TLS proxy.

use crate::serve_ui::{HOSTILE, csrf, get, post, proposal_with_hostile_text, sign_in};
use crate::support::daemon::{ALICE, BOB, ERIN, SAM, Server, cand, wait_for};
use crate::support::docker;
use crate::support::repo::git;
use serde_json::{Value, json};

/// A frozen candidate whose diff adds a ~600 KiB file (three web pages of diff).
fn big_candidate(s: &Server) -> (String, String, String) {
    let base = s.head();
    let big: String = (0..60_000).map(|i| format!("line {i:06}\n")).collect();
    let a = s.agent_commit("a", &base, &[("big.txt", &big), ("app.txt", "hello\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let c = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    let cid = cand(&c)["candidate_id"].as_str().unwrap().to_string();
    let rev = cand(&c)["candidate_revision"].as_str().unwrap().to_string();
    (cid, base, rev)
}

fn settled(s: &Server, cid: &str) -> Value {
    let mut last = Value::Null;
    wait_for(
        || {
            let v = s.ok(
                ALICE,
                "integration.show",
                json!({"workspace_id": "ws1", "candidate_id": cid}),
            );
            last = cand(&v)["verifications"].clone();
            last.as_array()
                .unwrap()
                .iter()
                .all(|v| v["status"] != "running")
        },
        "the verifications settle",
    );
    last
}

#[test]
fn the_candidate_page_lays_out_each_verification_and_pages_the_diff() {
    if !docker() {
        return;
    }
    let s = Server::start();
    let (cid, base, rev) = big_candidate(&s);
    // Output far past the cap, with a terminal escape in it; and a plain failure.
    let loud = "head -c 100000 /dev/zero | tr '\\0' x; printf '\\033[31mred\\n'";
    for (argv, key) in [
        (vec!["sh", "-c", loud], "v1"),
        (vec!["sh", "-c", "echo bye; exit 3"], "v2"),
    ] {
        s.ok(
            ALICE,
            "integration.verify",
            json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
                   "argv": argv, "timeout_seconds": 60, "idempotency_key": key}),
        );
    }
    let vs = settled(&s, &cid);
    assert_eq!(vs[0]["status"], "passed", "{vs}");
    assert_eq!(vs[0]["output_truncated"], true, "{vs}");
    assert_eq!(vs[1]["status"], "failed", "{vs}");

    let bob = sign_in(&s, BOB);
    let path = format!("/ui/w/ws1/candidates/{cid}");
    let (status, _, page) = get(&s, &bob, &path);
    assert_eq!(status, 200, "{page}");
    for v in vs.as_array().unwrap() {
        for key in [
            "verification_id",
            "environment_sha256",
            "observed_image",
            "image",
            "engine",
        ] {
            let want = v[key].as_str().unwrap();
            assert!(page.contains(want), "{key} {want} is not on the page");
        }
        assert!(
            page.contains(&format!(
                "<th>isolation</th><td>{}</td>",
                v["runtime"].as_str().unwrap()
            )),
            "the isolation level is on the page"
        );
    }
    assert!(page.contains("<code>sh</code> <code>-c</code> <code>echo bye; exit 3</code>"));
    assert!(page.contains("<td>3</td>"), "the exit code");
    assert!(page.contains("<td>0</td>"), "the other exit code");
    let total = vs[0]["output_bytes_total"].as_u64().unwrap();
    assert!(total > 100_000, "{vs}");
    assert!(page.contains(&format!(
        "output truncated: the command wrote {total} bytes"
    )));
    assert!(
        page.contains("bytes of output omitted]"),
        "the capture's own marker"
    );
    assert!(page.contains("\u{241b}[31mred") && !page.contains('\u{1b}'));
    assert!(page.contains(" s (timeout 60 s)"), "elapsed time");
    assert!(!page.contains("Cancel verification"), "nothing is running");
    // The index lists the candidate with its age and the time it has left.
    let (_, _, index) = get(&s, &bob, "/ui/");
    assert!(index.contains(&path), "{index}");
    assert!(index.contains("s ago</td>"), "{index}");
    assert!(index.contains("in 29d 23h</td>"), "{index}");

    // The diff in pages, each ending at a line end, adding up to git's own diff.
    let git_diff = std::process::Command::new("git")
        .args([
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            "--binary",
            "--no-renames",
            &base,
            &rev,
            "--",
        ])
        .current_dir(&s.repo)
        .output()
        .unwrap()
        .stdout;
    let git_diff = String::from_utf8(git_diff).unwrap();
    let mut joined = String::new();
    let mut offset = 0u64;
    let mut pages = 0;
    loop {
        let p = s.ok(
            BOB,
            "integration.patch",
            json!({"workspace_id": "ws1", "candidate_id": cid, "offset": offset,
                   "limit": 100_000}),
        );
        assert_eq!(p["offset"], offset);
        let text = p["patch"].as_str().unwrap();
        assert!(text.len() <= 100_000);
        joined.push_str(text);
        pages += 1;
        match p["next_offset"].as_u64() {
            Some(next) => {
                assert_eq!(p["truncated"], true);
                assert!(text.ends_with('\n'), "a page ends at a line end");
                assert_eq!(next, offset + text.len() as u64);
                offset = next;
            }
            None => {
                assert_eq!(p["truncated"], false);
                break;
            }
        }
    }
    assert!(pages >= 7, "{pages} pages");
    assert_eq!(joined, git_diff, "the pages add up to git's diff");
    // Past the end: an empty last page. Out of bounds: refused, naming the field and bound.
    let past = s.ok(
        BOB,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid, "offset": git_diff.len() + 10}),
    );
    assert_eq!(past["patch"], "");
    assert!(past["next_offset"].is_null());
    for (body, field, bound) in [
        (json!({"limit": 1023}), "limit", "1024..=1048576"),
        (json!({"limit": 1_048_577}), "limit", "1024..=1048576"),
        (json!({"offset": 268_435_457u64}), "offset", "268435456"),
    ] {
        let mut b = json!({"workspace_id": "ws1", "candidate_id": cid});
        b.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let (status, v) = s.call(BOB, "integration.patch", b);
        assert_eq!(status, 400, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert_eq!(v["error"]["code"], "invalid_argument", "{v}");
        assert!(message.starts_with(field) && message.contains(bound), "{v}");
    }

    // The web page walks the same pages: first, next, ..., the last.
    let mut at = path.clone();
    let mut seen = 0;
    loop {
        let (status, _, page) = get(&s, &bob, &at);
        assert_eq!(status, 200, "{page}");
        seen += 1;
        let marker = "?offset=";
        match page.find(marker) {
            Some(i) => {
                let rest = &page[i + marker.len()..];
                let n: u64 = rest[..rest.find('#').unwrap()].parse().unwrap();
                assert!(page.contains("next page"));
                at = format!("{path}?offset={n}");
            }
            None => {
                assert!(page.contains("the last page"), "{page}");
                assert!(page.contains("line 059999"), "the diff's end");
                assert!(page.contains("first page"));
                break;
            }
        }
        assert!(seen < 10, "the pages never end");
    }
    assert_eq!(seen, 3, "600 KiB in 256 KiB pages");
    let (_, _, first) = get(&s, &bob, &path);
    assert!(first.contains("line 000000") && !first.contains("line 059999"));
    let (status, _, _) = get(&s, &bob, &format!("{path}?offset=x"));
    assert_eq!(status, 400, "a malformed offset");
}

/// A patch that renames a file, adds an executable script and a binary file.
fn file_kinds_patch(s: &Server) -> String {
    std::fs::create_dir_all(s.repo.join("docs")).unwrap();
    git(&s.repo, &["mv", "README", "docs/README.md"]);
    std::fs::write(s.repo.join("tool.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::write(s.repo.join("blob.bin"), [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        s.repo.join("tool.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    git(&s.repo, &["add", "-A"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--cached", "--binary", "-M", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-qfd"]);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_proposal_page_offers_security_review_reject_and_withdraw_to_whom_the_server_allows() {
    let s = Server::fake_governed_with("[workspaces.ws1.roles]\nerin = [\"security\"]\n");
    let p = proposal_with_hostile_text(&s);
    let id = p["proposal"]["proposal_id"].as_str().unwrap().to_string();
    let path = format!("/ui/w/ws1/proposals/{id}");
    let (alice, bob, erin, sam) = (
        sign_in(&s, ALICE),
        sign_in(&s, BOB),
        sign_in(&s, ERIN),
        sign_in(&s, SAM),
    );
    let page_of = |cookie: &str| {
        let (status, _, page) = get(&s, cookie, &path);
        assert_eq!(status, 200, "{page}");
        page
    };
    // Only erin holds security; the author never reviews their own proposal.
    assert!(page_of(&erin).contains("Record security review"));
    for who in [&alice, &bob, &sam] {
        assert!(!page_of(who).contains("Record security review"));
    }
    // Reject is for reviewers and admins other than the author; withdraw for the author.
    let a = page_of(&alice);
    assert!(a.contains("Withdraw proposal") && !a.contains("Reject proposal"));
    let b = page_of(&bob);
    assert!(b.contains("Reject proposal") && !b.contains("Withdraw proposal"));

    // sam's hand-made security review is refused by the server (no security role); erin's,
    // with hostile notes, is recorded and shown inert.
    let act = format!("{path}/act");
    let notes = format!("{HOSTILE} <i>sec-notes</i>");
    let review = |cookie: &str, key: &str| {
        let page = page_of(cookie);
        let rev = p["proposal"]["current_revision"].as_str().unwrap();
        post(
            &s,
            cookie,
            &act,
            &[
                ("csrf", &csrf(&page)),
                ("op", "security_review"),
                ("revision", rev),
                ("verdict", "needs_changes"),
                ("notes_md", &notes),
                ("idempotency_key", key),
            ],
        )
    };
    let (status, body) = review(&sam, "sr-sam");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("security"), "{body}");
    let (status, body) = review(&erin, "sr-erin");
    assert_eq!(status, 303, "{body}");
    let e = page_of(&erin);
    assert!(
        e.contains("needs_changes") && e.contains("member:erin"),
        "{e}"
    );
    assert!(
        e.contains("&lt;i&gt;sec-notes") && !e.contains("<i>sec-notes"),
        "{e}"
    );
    let listed = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(
        listed["security_reviews"].as_array().unwrap().len(),
        1,
        "{listed}"
    );

    // The author's hand-made reject is refused; a forged one without the token too.
    let transition = |cookie: &str, op: &str, token: &str, key: &str| {
        post(
            &s,
            cookie,
            &act,
            &[
                ("csrf", token),
                ("op", op),
                ("reason_md", "no"),
                ("idempotency_key", key),
            ],
        )
    };
    assert_eq!(transition(&alice, "reject", &csrf(&a), "x1").0, 403);
    assert_eq!(transition(&bob, "reject", "", "x2").0, 403);
    assert_eq!(transition(&bob, "withdraw", &csrf(&b), "x3").0, 403);
    let now = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    assert_eq!(now["proposal"]["status"], "in_review", "nothing changed");
    // bob rejects through his form; then nobody is offered anything.
    let (status, body) = transition(&bob, "reject", &csrf(&b), "x4");
    assert_eq!(status, 303, "{body}");
    for who in [&alice, &bob, &erin] {
        let page = page_of(who);
        assert!(page.contains("rejected"), "{page}");
        for gone in [
            "Reject proposal",
            "Withdraw proposal",
            "Record security review",
            "Cast vote",
            "Validate",
        ] {
            let button = format!(">{gone}</button>");
            assert!(
                !page.contains(&button),
                "{gone} offered on a rejected proposal"
            );
        }
    }

    // A second proposal: renames, modes and binaries in the file table; withdrawn by its
    // author.
    for (i, r) in ["file:blob.bin", "file:docs/README.md", "file:tool.sh"]
        .iter()
        .enumerate()
    {
        let (status, v) = s.acquire(ALICE, r, "write", &format!("kinds-{i}"));
        assert_eq!(status, 200, "{v}");
    }
    let patch = file_kinds_patch(&s);
    let q = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "kinds", "summary_md": "s",
               "patch": patch, "idempotency_key": "p2"}),
    );
    let qid = q["proposal"]["proposal_id"].as_str().unwrap().to_string();
    let qpath = format!("/ui/w/ws1/proposals/{qid}");
    let (_, _, page) = get(&s, &alice, &qpath);
    assert!(
        page.contains("<code>README</code> → <code>docs/README.md</code>"),
        "{page}"
    );
    assert!(page.contains("<code>tool.sh</code>") && page.contains(">100755<"));
    assert!(
        page.contains("<span class=\"badge\">binary</span>"),
        "{page}"
    );
    assert!(page.contains("Withdraw proposal"));
    let (status, body) = post(
        &s,
        &alice,
        &format!("{qpath}/act"),
        &[
            ("csrf", &csrf(&page)),
            ("op", "withdraw"),
            ("reason_md", ""),
            ("idempotency_key", "w1"),
        ],
    );
    assert_eq!(status, 303, "{body}");
    let now = s.ok(
        ALICE,
        "proposal.get",
        json!({"workspace_id": "ws1", "proposal_id": qid}),
    );
    assert_eq!(now["proposal"]["status"], "withdrawn", "{now}");
}

#[test]
fn the_session_cookie_is_secure_only_when_browsers_come_over_tls() {
    let s = Server::fake_with("public_url = \"https://airlock.example\"\n");
    let (status, h) = crate::serve_ui::login_post(&s.addr, ALICE, &[]);
    assert_eq!(status, 303);
    let cookie = h
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    // Without public_url (plain HTTP), a Secure cookie would never come back: none is set.
    let plain = Server::fake();
    let (_, h) = crate::serve_ui::login_post(&plain.addr, ALICE, &[]);
    let cookie = h
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(!cookie.contains("Secure"), "{cookie}");
}

/// The resolve form's fields for one batch: `choose(i, path)` gives each file's resolution and
/// the text a browser would send (its lines ending in CRLF), or None to leave it for later.
fn resolve_batch(
    page: &str,
    choose: impl Fn(usize, &str) -> (&'static str, String),
) -> Vec<(String, String)> {
    let mut pairs = vec![
        ("csrf".to_string(), csrf(page)),
        ("op".to_string(), "resolve".to_string()),
        (
            "idempotency_key".to_string(),
            crate::serve_ui::field(page, "idempotency_key"),
        ),
        (
            "expected_version".to_string(),
            crate::serve_ui::field(page, "expected_version"),
        ),
    ];
    for i in 0.. {
        let name = format!("path_{i}");
        if !page.contains(&format!("name=\"{name}\"")) {
            break;
        }
        let path = crate::serve_ui::field(page, &name);
        let (resolution, text) = choose(i, &path);
        pairs.push((name, path.clone()));
        pairs.push((format!("resolution_{i}"), resolution.to_string()));
        pairs.push((format!("content_{i}"), text.replace('\n', "\r\n")));
        if page.contains(&format!("name=\"eol_{i}\" value=\"crlf\"")) {
            pairs.push((format!("eol_{i}"), "crlf".into()));
        }
    }
    pairs
}

#[test]
fn the_resolve_form_shows_each_conflicted_file_resolves_in_batches_and_keeps_crlf() {
    use crate::support::daemon::file_at;
    let s = Server::fake();
    let base = s.head();
    // 35 conflicted files: more than one resolve call may carry (32), one with CRLF line
    // endings, one whose side A tries to break out of the textarea.
    let names: Vec<String> = (0..33).map(|i| format!("f{i:02}.txt")).collect();
    let side = |tag: &str| -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = names
            .iter()
            .map(|n| (n.clone(), format!("{tag}\n")))
            .collect();
        files.push(("crlf.txt".into(), format!("a\r\n{tag}\r\n")));
        let hostile = if tag == "A" {
            "</textarea><script>alert(1)</script>\n".to_string()
        } else {
            format!("{tag}\n")
        };
        files.push(("hostile.txt".into(), hostile));
        files
    };
    let commit = |branch: &str, base: &str, files: &[(String, String)]| {
        let f: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        s.agent_commit(branch, base, &f)
    };
    let setup = commit("setup", &base, &side("base"));
    git(&s.repo, &["reset", "-q", "--hard", &setup]);
    let a = commit("a", &setup, &side("A"));
    let b = commit("b", &setup, &side("B"));
    let v = s.prepare_pair(&setup, &a, &b, "p");
    let cid = cand(&v)["candidate_id"].as_str().unwrap().to_string();
    assert_eq!(cand(&v)["conflicts"].as_array().unwrap().len(), 35, "{v}");
    let path = format!("/ui/w/ws1/candidates/{cid}");
    let act = format!("{path}/act");

    // A viewer sees the conflicts and no form.
    let bob = sign_in(&s, BOB);
    let (_, _, page) = get(&s, &bob, &path);
    assert!(page.contains("crlf.txt") && !page.contains("name=\"resolution_0\""));

    let alice = sign_in(&s, ALICE);
    let (status, _, page) = get(&s, &alice, &path);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("This form resolves the first 32 of 35 conflicted files"),
        "{page}"
    );
    assert!(page.contains("name=\"path_31\"") && !page.contains("name=\"path_32\""));
    // Each file as the merge left it, markers escaped, ready to edit.
    assert!(
        page.contains("&lt;&lt;&lt;&lt;&lt;&lt;&lt; ")
            && page.contains("&gt;&gt;&gt;&gt;&gt;&gt;&gt; "),
        "{page}"
    );
    assert_eq!(crate::serve_ui::field(&page, "path_0"), "crlf.txt");
    // Which side is which: the markers name commits, the page names the input and its run.
    assert!(
        page.contains("is what the first 1 input(s) made of it")
            && page.contains("is input 2 (run run_b, <code>"),
        "{page}"
    );
    assert!(page.contains("name=\"eol_0\" value=\"crlf\""));
    assert!(!page.contains("name=\"eol_1\""), "f00.txt has LF endings");

    let submit = |pairs: Vec<(String, String)>| {
        let refs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let (status, body) = post(&s, &alice, &act, &refs);
        assert_eq!(status, 303, "{body}");
    };
    // First batch: crlf.txt written (its CRLF endings kept), f00 deleted, the rest written.
    let pairs = resolve_batch(&page, |i, _| match i {
        0 => ("content", "a\nmerged\n".into()),
        1 => ("delete", String::new()),
        _ => ("content", "merged\n".into()),
    });
    submit(pairs);
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&now)["conflicts"],
        json!(["f31.txt", "f32.txt", "hostile.txt"]),
        "{now}"
    );

    // The rest fit one form; the textarea breakout stays text.
    let (_, _, page) = get(&s, &alice, &path);
    assert!(!page.contains("This form resolves the first"), "{page}");
    assert!(page.contains("&lt;/textarea&gt;&lt;script&gt;"), "{page}");
    assert!(!page.contains("</textarea><script>"));
    // Second batch: f31 written, f32 deleted, hostile.txt left for later.
    let pairs = resolve_batch(&page, |_, p| match p {
        "f31.txt" => ("content", "merged\n".into()),
        "f32.txt" => ("delete", String::new()),
        _ => ("later", String::new()),
    });
    submit(pairs);
    let (_, _, page) = get(&s, &alice, &path);
    let pairs = resolve_batch(&page, |_, _| ("content", "safe\n".into()));
    submit(pairs);

    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    let c = cand(&now);
    assert_eq!(c["state"], "frozen", "{now}");
    let rev = c["candidate_revision"].as_str().unwrap();
    let raw = |p: &str| {
        let o = std::process::Command::new("git")
            .args(["cat-file", "-p", &format!("{rev}:{p}")])
            .current_dir(&s.repo)
            .output()
            .unwrap();
        (o.status.success(), String::from_utf8(o.stdout).unwrap())
    };
    assert_eq!(
        raw("crlf.txt"),
        (true, "a\r\nmerged\r\n".into()),
        "CRLF kept"
    );
    assert_eq!(
        raw("f01.txt"),
        (true, "merged\n".into()),
        "LF as the file had"
    );
    assert!(!raw("f00.txt").0 && !raw("f32.txt").0, "deleted");
    assert_eq!(file_at(&s.repo, rev, "hostile.txt"), "safe");

    // The form route checks the session before it reads a body.
    let (status, _) = post(&s, "airlock_session=none", &act, &[("op", "resolve")]);
    assert_eq!(status, 401);
}
