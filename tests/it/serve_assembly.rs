//! `airlock serve`: candidate assembly and resolution, exact retries across crashes, the
//! patch cap, the transcript cap.
//! Real HTTP on loopback, real git, real SQLite; jobs on the scripted fake runtime.

use crate::support::*;
use serde_json::{Value, json};

#[test]
fn clean_multi_input_assembly_freezes_on_the_target() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("a.txt", "from a\n")]);
    let b = s.agent_commit("b", &base, &[("b.txt", "from b\n")]);
    let c = s.agent_commit("c", &base, &[("dir/c.txt", "from c\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some("transcript a")),
        s.evidence("run_b", &base, &b, None),
        s.evidence("run_c", &base, &c, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &base, "p1"),
    );
    let cd = cand(&v);
    assert_eq!(cd["state"], "frozen", "{v}");
    assert_eq!(cd["applied_inputs"], 3);
    let rev = cd["candidate_revision"].as_str().unwrap();
    assert_eq!(
        git(&s.repo, &["rev-parse", &format!("{rev}^")]),
        base,
        "parent is the target"
    );
    assert_eq!(
        git(&s.repo, &["rev-list", "--count", "--first-parent", rev]),
        "2",
        "one commit on top of the target"
    );
    assert_eq!(
        git(&s.repo, &["rev-list", "--parents", "-n1", rev]),
        format!("{rev} {base} {a} {b} {c}"),
        "and it merges the agents' own commits, in order (history = \"merge\")"
    );
    assert_eq!(file_at(&s.repo, rev, "a.txt"), "from a");
    assert_eq!(file_at(&s.repo, rev, "dir/c.txt"), "from c");
    let cid = cd["candidate_id"].as_str().unwrap();
    assert_eq!(
        git(
            &s.repo,
            &[
                "rev-parse",
                &format!("refs/airlock/candidates/{cid}/revision")
            ]
        ),
        rev
    );
    assert_eq!(cd["inputs"][0]["transcript_id"], "0");
    assert!(cd["inputs"][0]["transcript_checksum"].as_str().is_some());
    let patch = s.ok(
        BOB,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(patch["truncated"], false);
    let text = patch["patch"].as_str().unwrap();
    for f in ["a/a.txt", "a/b.txt", "a/dir/c.txt"] {
        assert!(text.contains(&format!("diff --git {f}")), "{text}");
    }
    // The target itself never moved.
    assert_eq!(s.head(), base);
    let shown = s.ok(
        BOB,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(shown, v);
}

#[test]
fn conflict_then_resolution_in_two_batches() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("x.txt", "A\n"), ("y.txt", "A\n")]);
    let b = s.agent_commit(
        "b",
        &base,
        &[("x.txt", "B\n"), ("y.txt", "B\n"), ("z.txt", "B only\n")],
    );
    let subs = vec![
        s.evidence("run_a", &base, &a, None),
        s.evidence("run_b", &base, &b, None),
    ];
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &base, "p1"),
    );
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted");
    assert_eq!(c["conflicts"], json!(["x.txt", "y.txt"]));
    assert_eq!(c["applied_inputs"], 1);
    let cid = c["candidate_id"].as_str().unwrap().to_string();
    let v1 = c["version"].as_u64().unwrap();
    // Patch needs a frozen candidate.
    s.err(
        ALICE,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
        "failed_precondition",
    );

    // Batch 1: x.txt only.
    let r1 = json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": v1,
                    "files": [{"path": "x.txt", "content": "A and B\n"}], "idempotency_key": "r1"});
    let v = s.ok(ALICE, "integration.resolve", r1.clone());
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted");
    assert_eq!(c["conflicts"], json!(["y.txt"]));
    let v2 = c["version"].as_u64().unwrap();
    assert!(v2 > v1);
    // An exact retry of the completed batch returns the current candidate, changing nothing.
    let again = s.ok(ALICE, "integration.resolve", r1);
    assert_eq!(cand(&again)["version"], v2);
    // A stale version with a new key is refused before anything is recorded.
    let stale = json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": v1,
                       "files": [{"path": "y.txt", "content": "stale\n"}], "idempotency_key": "r-stale"});
    let m = s.err(ALICE, "integration.resolve", stale, "conflict");
    assert!(m.contains("stale"), "{m}");
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&now)["version"], v2, "nothing recorded");

    // Batch 2: delete y.txt.
    let v = s.ok(ALICE, "integration.resolve", json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": v2, "files": [{"path": "y.txt", "delete": true}], "idempotency_key": "r2"}));
    let c = cand(&v);
    assert_eq!(c["state"], "frozen", "{v}");
    assert_eq!(c["applied_inputs"], 2);
    let rev = c["candidate_revision"].as_str().unwrap();
    assert_eq!(file_at(&s.repo, rev, "x.txt"), "A and B");
    assert_eq!(file_at(&s.repo, rev, "z.txt"), "B only");
    let tree = git(&s.repo, &["ls-tree", "--name-only", rev]);
    assert!(!tree.contains("y.txt"));
    let ops: Vec<&str> = c["mutations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["operation"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            "integration.prepare",
            "integration.resolve",
            "integration.resolve"
        ]
    );
    // Frozen is never edited again.
    let m = s.err(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": c["version"], "files": [{"path": "x.txt", "content": "later\n"}],
        "idempotency_key": "r3"}),
        "failed_precondition",
    );
    assert!(m.contains("frozen"), "{m}");
}

#[test]
fn unsafe_resolutions_are_refused_and_change_nothing() {
    let s = Server::fake();
    let (cid, version, _) = conflicted(&s);
    let bad_files = [
        json!({"path": "/etc/passwd", "content": "x"}),
        json!({"path": "../outside.txt", "content": "x"}),
        json!({"path": "a/../f.txt", "content": "x"}),
        json!({"path": ".git/hooks/post-commit", "content": "x"}),
        json!({"path": "sub/.GIT/config", "content": "x"}),
        json!({"path": "f\u{0}.txt", "content": "x"}),
        json!({"path": "", "content": "x"}),
        json!({"path": "link/evil.txt", "content": "x"}),
        json!({"path": "real", "content": "x"}),
        json!({"path": "f.txt", "content": "<<<<<<< ours\nA\n=======\nB\n>>>>>>> theirs\n"}),
        json!({"path": "f.txt"}),
        json!({"path": "f.txt", "content": "x", "delete": true}),
        json!({"path": "missing.txt", "delete": true}),
    ];
    for (i, f) in bad_files.iter().enumerate() {
        let m = s.err(
            ALICE,
            "integration.resolve",
            json!({"workspace_id": "ws1", "candidate_id": cid,
            "expected_version": version, "files": [f], "idempotency_key": format!("bad-{i}")}),
            "invalid_argument",
        );
        assert!(m.contains("files[0]"), "{f}: {m}");
    }
    let too_many: Vec<Value> = (0..33)
        .map(|i| json!({"path": format!("f{i}.txt"), "content": "x"}))
        .collect();
    s.err(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": version, "files": too_many, "idempotency_key": "many"}),
        "invalid_argument",
    );
    for v in [json!(0), json!(-1), Value::Null] {
        let mut body = json!({"workspace_id": "ws1", "candidate_id": cid,
            "files": [{"path": "f.txt", "content": "ok\n"}], "idempotency_key": "nov"});
        if !v.is_null() {
            body["expected_version"] = v;
        }
        let m = s.err(ALICE, "integration.resolve", body, "invalid_argument");
        assert!(m.contains("expected_version"), "{m}");
    }
    let c = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&c)["version"],
        version,
        "no refused request recorded anything"
    );
    assert!(s.repo.join("real/keep.txt").exists());
    // The safe resolution still works afterwards.
    let v = s.ok(ALICE, "integration.resolve", json!({"workspace_id": "ws1", "candidate_id": cid,
        "expected_version": version, "files": [{"path": "f.txt", "content": "A+B\n"}], "idempotency_key": "good"}));
    assert_eq!(cand(&v)["state"], "frozen");
}

#[test]
fn exact_retries_after_crashes_mid_prepare_and_mid_resolve() {
    let mut s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("f.txt", "A\n")]);
    let b = s.agent_commit("b", &base, &[("f.txt", "B\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some("t")),
        s.evidence("run_b", &base, &b, None),
    ];
    let body = s.prepare_body(subs, &base, "crashy");
    for point in ["prepare_after_insert", "prepare_after_retain"] {
        s.restart(Some(point));
        let resp = request(
            &s.addr,
            "POST",
            "/api/v1/integration.prepare",
            Some(ALICE),
            body.to_string().as_bytes(),
        );
        assert!(
            resp.is_none() || resp.unwrap().0 != 200,
            "{point}: the daemon died mid-request"
        );
        s.wait_dead();
    }
    s.restart(None);
    let v = s.ok(ALICE, "integration.prepare", body.clone());
    let c = cand(&v).clone();
    assert_eq!(c["state"], "conflicted", "{v}");
    let cid = c["candidate_id"].as_str().unwrap().to_string();
    let listed = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    assert_eq!(
        listed["candidates"].as_array().unwrap().len(),
        1,
        "one candidate, however many retries"
    );
    // A retry never extends expiry; the same key with other parameters is a conflict.
    let again = s.ok(ALICE, "integration.prepare", body.clone());
    assert_eq!(cand(&again)["expires_at"], c["expires_at"]);
    let mut other = body.clone();
    other["target_ref"] = json!("refs/heads/other");
    s.err(ALICE, "integration.prepare", other, "conflict");

    // Crash after the resolution intent is durable, before Git changes.
    let version = c["version"].as_u64().unwrap();
    let resolve = json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": version,
                         "files": [{"path": "f.txt", "content": "AB\n"}], "idempotency_key": "res"});
    s.restart(Some("resolve_after_intent"));
    let resp = request(
        &s.addr,
        "POST",
        "/api/v1/integration.resolve",
        Some(ALICE),
        resolve.to_string().as_bytes(),
    );
    assert!(resp.is_none() || resp.unwrap().0 != 200);
    s.wait_dead();
    s.restart(None);
    // While it is pending, a different new key is refused.
    let mut different = resolve.clone();
    different["idempotency_key"] = json!("res-2");
    let m = s.err(ALICE, "integration.resolve", different, "conflict");
    assert!(m.contains("pending"), "{m}");
    // The exact retry reuses the original binding although the version advanced.
    let v = s.ok(ALICE, "integration.resolve", resolve);
    assert_eq!(cand(&v)["state"], "frozen", "{v}");
    let rev = cand(&v)["candidate_revision"].as_str().unwrap();
    assert_eq!(file_at(&s.repo, rev, "f.txt"), "AB");
}

#[test]
fn patch_is_truncated_at_one_mebibyte() {
    let s = Server::fake();
    let base = s.head();
    let big: String = (0..40_000)
        .map(|i| format!("line {i} of a large generated file\n"))
        .collect();
    assert!(big.len() > 1024 * 1024);
    let a = s.agent_commit("a", &base, &[("big.txt", &big)]);
    let sub = s.evidence("run_a", &base, &a, None);
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    let cid = cand(&v)["candidate_id"].as_str().unwrap();
    let p = s.ok(
        ALICE,
        "integration.patch",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(p["truncated"], true);
    let text = p["patch"].as_str().unwrap();
    assert!(
        text.len() <= 1024 * 1024 && text.len() > 1024 * 1024 - 100,
        "{}",
        text.len()
    );
    assert!(text.starts_with("diff --git a/big.txt b/big.txt"));
}

#[test]
fn owned_transcripts_are_capped_per_candidate() {
    let s = Server::fake();
    let base = s.head();
    // Two transcripts of 9 MiB each: each is allowed, together they exceed the 16 MiB cap.
    let big = "t".repeat(9 * 1024 * 1024);
    let a = s.agent_commit("a", &base, &[("a.txt", "a\n")]);
    let b = s.agent_commit("b", &base, &[("b.txt", "b\n")]);
    let subs = vec![
        s.evidence("run_a", &base, &a, Some(&big)),
        s.evidence("run_b", &base, &b, Some(&big)),
    ];
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs.clone(), &base, "p"),
        "resource_exhausted",
    );
    assert!(
        m.contains("submissions[1]") && m.contains("16777216"),
        "{m}"
    );
    // One of them alone fits.
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![subs[0].clone()], &base, "p1"),
    );
    assert_eq!(cand(&v)["state"], "frozen");
}

#[test]
fn a_conflicted_path_is_shown_as_the_merge_left_it_bounded_and_only_to_members() {
    let s = Server::fake();
    let base = s.head();
    // A text file, a binary one (a NUL byte) and one over the 1 MiB content bound, each
    // changed differently by both agents.
    let big = |c: char| format!("{}\n", c.to_string().repeat(1024 * 1024 + 10));
    let setup = s.agent_commit(
        "setup",
        &base,
        &[
            ("f.txt", "one\ntwo\nthree\n"),
            ("bin.dat", "\0base"),
            ("big.txt", &big('x')),
        ],
    );
    git(&s.repo, &["reset", "-q", "--hard", &setup]);
    let a = s.agent_commit(
        "a",
        &setup,
        &[
            ("f.txt", "one\nA <script>\nthree\n"),
            ("bin.dat", "\0a"),
            ("big.txt", &big('a')),
        ],
    );
    let b = s.agent_commit(
        "b",
        &setup,
        &[
            ("f.txt", "one\nB\nthree\n"),
            ("bin.dat", "\0b"),
            ("big.txt", &big('b')),
        ],
    );
    let v = s.prepare_pair(&setup, &a, &b, "p");
    let c = cand(&v);
    assert_eq!(c["state"], "conflicted", "{v}");
    assert_eq!(c["conflicts"], json!(["big.txt", "bin.dat", "f.txt"]));
    let cid = c["candidate_id"].as_str().unwrap().to_string();
    let ask = |token: &str, path: Value| {
        s.call(
            token,
            "integration.conflict",
            json!({"workspace_id": "ws1", "candidate_id": cid, "path": path}),
        )
    };

    // bob may view: the text file with both sides between git's markers.
    let (status, text) = ask(BOB, json!("f.txt"));
    assert_eq!(status, 200, "{text}");
    assert_eq!(text["present"], true);
    assert_eq!(text["mode"], "100644");
    assert_eq!(text["binary"], false);
    assert!(text["note"].is_null(), "{text}");
    let content = text["content"].as_str().unwrap();
    assert_eq!(text["bytes"], content.len());
    for part in [
        "one\n<<<<<<< ",
        "A <script>\n=======\nB\n>>>>>>> ",
        "three\n",
    ] {
        assert!(content.contains(part), "{part:?} missing from {content:?}");
    }

    let (status, bin) = ask(BOB, json!("bin.dat"));
    assert_eq!(status, 200, "{bin}");
    assert_eq!(bin["binary"], true);
    assert!(bin["content"].is_null(), "{bin}");
    assert!(bin["note"].as_str().unwrap().contains("binary"), "{bin}");

    let (status, huge) = ask(BOB, json!("big.txt"));
    assert_eq!(status, 200);
    assert!(huge["content"].is_null());
    assert!(huge["bytes"].as_u64().unwrap() > 1024 * 1024, "{huge}");
    assert!(
        huge["note"]
            .as_str()
            .unwrap()
            .contains("up to 1048576 bytes"),
        "{huge}"
    );

    // Only listed conflicts, and nothing for callers outside the workspace.
    for path in [
        json!("README"),
        json!("../f.txt"),
        json!("f.txt/"),
        json!(""),
    ] {
        let (status, e) = ask(BOB, path.clone());
        assert_eq!(status, 400, "{path}: {e}");
        assert_eq!(e["error"]["code"], "invalid_argument");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("is not one of the candidate's 3 conflicted paths"),
            "{e}"
        );
    }
    let (status, e) = ask(BOB, json!(7));
    assert_eq!(status, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("path"));
    let (status, _) = ask(CAROL, json!("f.txt"));
    assert_eq!(status, 403, "another workspace's member");
    let (status, _) = s.call(
        BOB,
        "integration.conflict",
        json!({"workspace_id": "ws1", "candidate_id": "cand_00000000000000000000000000000000",
               "path": "f.txt"}),
    );
    assert_eq!(status, 404);

    // Resolved, there is nothing left to show.
    let v = s.ok(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": c["version"],
               "files": [{"path": "f.txt", "content": "one\nA and B\nthree\n"},
                         {"path": "bin.dat", "delete": true},
                         {"path": "big.txt", "content": "small now\n"}],
               "idempotency_key": "r"}),
    );
    assert_eq!(cand(&v)["state"], "frozen", "{v}");
    let (status, e) = ask(BOB, json!("f.txt"));
    assert_eq!(status, 412, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only a conflicted candidate"),
        "{e}"
    );
}

/// What git's own step-by-step merge makes of `inputs` (base, revision) onto `target`: each
/// merged into the accumulated commit with git's merge bases when its base is in the
/// accumulated history, with its declared base otherwise, and committed. Returns the tree, or
/// the first conflicted input's index with its conflicted paths.
fn git_step_by_step(
    repo: &std::path::Path,
    target: &str,
    inputs: &[(&str, &str)],
) -> Result<String, (usize, Vec<String>)> {
    let mut acc = target.to_string();
    let mut tree = git(repo, &["rev-parse", &format!("{target}^{{tree}}")]);
    for (i, (base, rev)) in inputs.iter().enumerate() {
        let in_history = std::process::Command::new("git")
            .current_dir(repo)
            .args(["merge-base", "--is-ancestor", base, &acc])
            .status()
            .unwrap()
            .success();
        let mut args = vec![
            "merge-tree".to_string(),
            "--write-tree".into(),
            "--name-only".into(),
            "--no-messages".into(),
        ];
        if !in_history {
            args.push(format!("--merge-base={base}"));
        }
        args.extend([acc.clone(), rev.to_string()]);
        let out = std::process::Command::new("git")
            .current_dir(repo)
            .args(&args)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        tree = lines.next().unwrap().to_string();
        if out.status.code() == Some(1) {
            return Err((i, lines.map(str::to_string).collect()));
        }
        assert!(out.status.success(), "{args:?}");
        acc = git(repo, &["commit-tree", &tree, "-p", &acc, "-m", "step"]);
    }
    Ok(tree)
}

#[test]
fn inputs_of_every_kind_assemble_to_the_tree_of_gits_own_step_by_step_merge() {
    // Inputs on the target (merged onto the accumulated tree, one git process each), one on an
    // older commit (git's own merge bases, from a commit), one whose evidence names the target
    // as its base although it does not descend from it (its declared base, from a commit),
    // and two that change different lines of one file.
    let s = Server::fake();
    let old = s.head();
    let lines = |a: &str, z: &str| format!("{a}\nb\nc\nd\ne\nf\ng\nh\n{z}\n");
    let target = s.agent_commit(
        "target",
        &old,
        &[("shared.txt", &lines("a", "z")), ("x.txt", "x\n")],
    );
    git(&s.repo, &["reset", "-q", "--hard", &target]);
    let a = s.agent_commit("a", &target, &[("a.txt", "from a\n")]);
    let b = s.agent_commit("b", &target, &[("shared.txt", &lines("B", "z"))]);
    let c = s.agent_commit("c", &old, &[("c.txt", "from c\n")]);
    let d = s.agent_commit("d", &target, &[("shared.txt", &lines("a", "D"))]);
    let e = s.agent_commit("e", &old, &[("e.txt", "from e\n")]);
    let f = s.agent_commit("f", &target, &[("dir/f.txt", "from f\n")]);
    let inputs = [
        (target.as_str(), a.as_str()),
        (target.as_str(), b.as_str()),
        (old.as_str(), c.as_str()),
        (target.as_str(), d.as_str()),
        (target.as_str(), e.as_str()),
        (target.as_str(), f.as_str()),
    ];
    let expected = git_step_by_step(&s.repo, &target, &inputs).expect("a clean merge");
    let subs = inputs
        .iter()
        .enumerate()
        .map(|(i, (base, rev))| s.evidence(&format!("run_{i}"), base, rev, None))
        .collect();
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &target, "mixed"),
    );
    let cd = cand(&v);
    assert_eq!(cd["state"], "frozen", "{v}");
    let rev = cd["candidate_revision"].as_str().unwrap();
    assert_eq!(
        git(&s.repo, &["rev-parse", &format!("{rev}^{{tree}}")]),
        expected
    );
    assert_eq!(
        file_at(&s.repo, rev, "shared.txt"),
        lines("B", "D").trim_end()
    );
    // Every input ref was made, in the outcome's transaction.
    let cid = cd["candidate_id"].as_str().unwrap();
    // a and b went onto the tree and were committed once, before c; c and e each needed a
    // commit of their own (d, on the tree, was committed before e); f, the last, none: four
    // Airlock commits where the step-by-step merge makes five.
    let work = format!("refs/airlock/candidates/{cid}/work");
    let steps = git(
        &s.repo,
        &[
            "log",
            "--first-parent",
            "--format=%s",
            &work,
            &format!("^{target}"),
        ],
    );
    let expected_steps: Vec<String> = if airlock::staging::git_merges_trees() {
        vec![
            format!("airlock: apply inputs 0..=1 of {cid}"),
            format!("airlock: apply input 2 of {cid}"),
            format!("airlock: apply input 3 of {cid}"),
            format!("airlock: apply input 4 of {cid}"),
        ]
    } else {
        // A git that merges only commits: one step commit per input but the last.
        (0..5)
            .map(|i| format!("airlock: apply input {i} of {cid}"))
            .collect()
    };
    assert_eq!(steps.lines().rev().collect::<Vec<_>>(), expected_steps);
    for (i, (_, r)) in inputs.iter().enumerate() {
        assert_eq!(
            git(
                &s.repo,
                &[
                    "rev-parse",
                    &format!("refs/airlock/candidates/{cid}/inputs/{i}")
                ]
            ),
            *r
        );
    }

    // A conflict after inputs merged onto the tree: the same paths as git's step-by-step
    // merge, and the conflicted file's markers name a commit (the accumulated one), as a
    // resolver always saw them.
    let g = s.agent_commit("g", &target, &[("a.txt", "from g\n")]);
    let with_conflict = [
        (target.as_str(), b.as_str()),
        (target.as_str(), a.as_str()),
        (target.as_str(), f.as_str()),
        (target.as_str(), g.as_str()),
        (target.as_str(), d.as_str()),
    ];
    let (at, paths) = git_step_by_step(&s.repo, &target, &with_conflict).unwrap_err();
    let subs = with_conflict
        .iter()
        .enumerate()
        .map(|(i, (base, rev))| s.evidence(&format!("run_k{i}"), base, rev, None))
        .collect();
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, &target, "conflicting"),
    );
    let cd = cand(&v);
    assert_eq!(cd["state"], "conflicted", "{v}");
    assert_eq!(cd["applied_inputs"], at);
    assert_eq!(cd["conflicts"], json!(paths));
    let cid = cd["candidate_id"].as_str().unwrap();
    let (status, text) = s.call(
        BOB,
        "integration.conflict",
        json!({"workspace_id": "ws1", "candidate_id": cid, "path": "a.txt"}),
    );
    assert_eq!(status, 200, "{text}");
    let content = text["content"].as_str().unwrap_or_default().to_string();
    let label = content
        .lines()
        .find_map(|l| l.strip_prefix("<<<<<<< "))
        .unwrap_or_else(|| panic!("no conflict marker in {text}"));
    assert_eq!(
        git(&s.repo, &["cat-file", "-t", label]),
        "commit",
        "{content}"
    );
    // The accumulated commit holds exactly the inputs before the conflict.
    assert_eq!(
        git(&s.repo, &["rev-parse", &format!("{label}^{{tree}}")]),
        git_step_by_step(&s.repo, &target, &with_conflict[..at]).unwrap()
    );
}

#[test]
fn a_prepare_with_no_or_too_many_submissions_is_refused_naming_the_bound() {
    let s = Server::fake();
    let base = s.head();
    let sub = |i: usize| {
        json!({"workspace_id": "ws1", "run_id": format!("run_{i}"),
               "evidence_ref": format!("evidence_{i}"), "retained_revision": base})
    };
    let too_many: Vec<Value> = (0..=airlock::candidate::MAX_SUBMISSIONS).map(sub).collect();
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(too_many, &base, "too-many"),
        "invalid_argument",
    );
    assert!(
        m.contains("submissions has 257 entries") && m.contains("1..=256"),
        "{m}"
    );
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![], &base, "none"),
        "invalid_argument",
    );
    assert!(m.contains("submissions has 0 entries"), "{m}");
    // At the bound the count is accepted: the refusal is about the (missing) evidence.
    let at_bound: Vec<Value> = (0..airlock::candidate::MAX_SUBMISSIONS).map(sub).collect();
    let m = s.err(
        ALICE,
        "integration.prepare",
        s.prepare_body(at_bound, &base, "at-bound"),
        "failed_precondition",
    );
    assert!(m.contains("submissions[0].evidence_ref"), "{m}");
    // Nothing was created by any of them.
    let listed = s.ok(ALICE, "integration.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["candidates"], json!([]));
}
