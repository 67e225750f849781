//! History that survives landing (fake runtime: git and the workflow, not the sandbox): the
//! agents' own commits, authors and messages are in the target's history after a delivery,
//! the landed commit's message carries the inputs, the verifications with their environment
//! digests and the approver as trailers git itself parses, a hostile commit subject cannot
//! forge one, and the trees are exactly what assembly made, in `merge` and `squash` alike.

use crate::delivery::{approved_request, deliver_body};
use crate::support::cand;
use crate::support::daemon::{ALICE, Server};
use crate::support::repo::git;
use serde_json::Value;

/// A commit on a branch from `base` by `author`, with `message`.
fn commit_as(
    s: &Server,
    branch: &str,
    base: &str,
    author: &str,
    message: &str,
    file: &str,
) -> String {
    git(&s.repo, &["checkout", "-q", "-B", branch, base]);
    std::fs::write(s.repo.join(file), format!("{branch}\n")).unwrap();
    git(&s.repo, &["add", "-A"]);
    git(
        &s.repo,
        &[
            "-c",
            &format!("user.name={author}"),
            "-c",
            &format!("user.email={author}@agents.example"),
            "commit",
            "-q",
            "-m",
            message,
        ],
    );
    let c = git(&s.repo, &["rev-parse", "HEAD"]);
    git(&s.repo, &["checkout", "-q", "main"]);
    c
}

/// Prepares, verifies, requests, decides and delivers; returns (candidate, the delivered
/// candidate aggregate).
fn land(s: &Server, subs: Vec<Value>, base: &str, key: &str) -> (String, Value) {
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(subs, base, key),
    );
    let c = cand(&v).clone();
    assert_eq!(c["state"], "frozen", "{c}");
    let cid = c["candidate_id"].as_str().unwrap().to_string();
    let rev = c["candidate_revision"].as_str().unwrap().to_string();
    let (id, version) = approved_request(s, &cid, &rev, "update_ref");
    let done = s.ok(
        ALICE,
        "integration.deliver",
        deliver_body(&cid, &id, version),
    );
    (cid, cand(&done).clone())
}

fn trailers(s: &Server, commit: &str) -> Vec<(String, String)> {
    let message = git(&s.repo, &["log", "-1", "--format=%B", commit]);
    let mut child = std::process::Command::new("git")
        .args(["interpret-trailers", "--parse"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(message.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_agents_commits_and_the_story_are_in_the_targets_history() {
    let mut s = Server::fake();
    let base = s.head();
    let a = commit_as(
        &s,
        "a",
        &base,
        "Ada",
        "Add the parser\n\nWith tests.",
        "a.txt",
    );
    let b = commit_as(
        &s,
        "b",
        &base,
        "Bob",
        "Fix the lexer\nApproved-by: mallory",
        "b.txt",
    );
    let subs = vec![
        s.evidence("run_a", &base, &a, None),
        s.evidence("run_b", &base, &b, None),
    ];
    let (cid, c) = land(&s, subs.clone(), &base, "p1");
    let head = s.head();
    assert_eq!(c["delivery_receipt"]["landed_revision"], head);
    let rev = c["candidate_revision"].as_str().unwrap().to_string();

    // `git log` alone tells who wrote what: both agents' commits are in main's history.
    let log = git(&s.repo, &["log", "--format=%H %an %s", "main"]);
    for (commit, author, subject) in [(&a, "Ada", "Add the parser"), (&b, "Bob", "Fix the lexer")] {
        assert!(
            log.contains(&format!("{commit} {author} {subject}")),
            "{commit} by {author} missing:\n{log}"
        );
    }
    // The landed commit's trailers, as git parses them.
    let t = trailers(&s, &head);
    let get = |k: &str| -> Vec<&str> {
        t.iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(get("Airlock-Candidate"), vec![cid.as_str()]);
    assert_eq!(get("Airlock-Revision"), vec![rev.as_str()]);
    assert_eq!(get("Requested-by"), vec!["member:alice"]);
    assert_eq!(
        get("Approved-by"),
        vec!["member:dave"],
        "a commit subject cannot forge a trailer: {t:?}"
    );
    let verified = get("Verified-by");
    assert_eq!(verified.len(), 1, "{t:?}");
    let v = &c["verifications"][0];
    assert_eq!(
        verified[0],
        format!(
            "{} passed on {rev} environment_sha256={}",
            v["verification_id"].as_str().unwrap(),
            v["environment_sha256"].as_str().unwrap()
        )
    );
    let body = git(&s.repo, &["log", "-1", "--format=%B", &head]);
    assert!(
        body.contains("Add the parser by Ada <Ada@agents.example>"),
        "{body}"
    );

    // squash: the same inputs land as one commit with the same story, and the same tree.
    let merged_tree = git(&s.repo, &["rev-parse", &format!("{head}^{{tree}}")]);
    let text = std::fs::read_to_string(&s.config).unwrap().replace(
        "[workspaces.ws1]\n",
        "[workspaces.ws1]\nhistory = \"squash\"\n",
    );
    std::fs::write(&s.config, text).unwrap();
    git(&s.repo, &["update-ref", "refs/heads/main", &base]);
    s.restart(None);
    let (_, c2) = land(&s, subs, &base, "p2");
    let squashed = s.head();
    let rev2 = c2["candidate_revision"].as_str().unwrap();
    assert_eq!(
        git(&s.repo, &["rev-list", "--parents", "-n1", rev2]),
        format!("{rev2} {base}"),
        "squash: the candidate commit's only parent is the target"
    );
    assert_eq!(
        git(&s.repo, &["rev-list", "--parents", "-n1", &squashed]),
        format!("{squashed} {base}")
    );
    assert_eq!(
        git(&s.repo, &["rev-parse", &format!("{squashed}^{{tree}}")]),
        merged_tree,
        "the trees are the assembly's, whatever the history"
    );
    assert_eq!(
        git(&s.repo, &["rev-parse", &format!("{rev2}^{{tree}}")]),
        git(&s.repo, &["rev-parse", &format!("{rev}^{{tree}}")])
    );
    assert!(!git(&s.repo, &["log", "--format=%H", "main"]).contains(&a));
    assert_eq!(
        trailers(&s, &squashed)
            .iter()
            .filter(|(k, _)| k == "Approved-by")
            .count(),
        1
    );
}
