//! The README's configuration is real: its TOML blocks (every ```toml block; an `image.toml`
//! is marked as one) paste into one file in the order shown and that file loads, and the
//! governed example, with its roles, policy, required check and tokens exactly as printed,
//! runs a patch from a claim to an apply on real Docker.

use crate::support::daemon::{Server, wait_for};
use crate::support::repo::git;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const README: &str = include_str!("../../README.md");

/// The README's config blocks, in order (fences whose info string is exactly `toml`).
fn config_blocks() -> Vec<String> {
    let mut out = vec![];
    let mut current: Option<String> = None;
    for line in README.lines() {
        let fence = line.trim_start();
        match &mut current {
            None if fence == "```toml" => current = Some(String::new()),
            Some(_) if fence == "```" => out.push(current.take().unwrap()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```toml block");
    out
}

#[test]
fn the_readmes_config_blocks_paste_into_one_file_that_loads() {
    // Blocks of top-level keys first (TOML puts those before any table), then the rest, each
    // group in the order shown.
    let (tables, mut blocks): (Vec<String>, Vec<String>) = config_blocks()
        .into_iter()
        .partition(|b| b.trim_start().starts_with('['));
    blocks.extend(tables);
    assert!(blocks.len() >= 6, "{blocks:?}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.toml");
    std::fs::write(&path, blocks.join("\n")).unwrap();
    let c = airlock::config::Config::load(Some(&path))
        .unwrap_or_else(|e| panic!("the README's config does not load: {e}"));
    for ws in ["ws_123", "ws_gov", "docs", "farm"] {
        assert!(c.workspaces.contains_key(ws), "{ws}");
    }
    assert!(c.profiles.contains_key("web"));
    assert_eq!(c.engines.len(), 2);
    assert_eq!(c.tokens.len(), 7);
    assert!(c.signing_key.is_some());
    assert_eq!(c.verification_keys.len(), 1);
    assert_eq!(c.verifier_id, "https://airlock.example");
    // The one shown with the governed example names every policy key.
    let policy_keys = [
        "required_approvals",
        "required_roles",
        "high_risk_paths",
        "path_roles",
        "security_review",
        "human_approval",
        "required_tests",
        "claims_release_on",
        "required_checks",
    ];
    let governed = governed_block();
    for key in policy_keys {
        assert!(governed.contains(key), "the governed example lacks {key}");
    }
}

fn governed_block() -> String {
    config_blocks()
        .into_iter()
        .find(|b| b.starts_with("[workspaces.docs]"))
        .expect("the governed example")
}

/// The README's example tokens (`<member>-token`) and a check that the printed hashes are
/// theirs.
fn token(member: &str) -> String {
    let t = format!("{member}-token");
    let hash = hex::encode(Sha256::digest(t.as_bytes()));
    assert!(governed_block().contains(&hash), "{member}'s hash");
    t
}

#[test]
fn the_readmes_governed_example_walks_a_patch_to_an_apply() {
    if !crate::toolchain::built("git") {
        return;
    }
    let mut s = Server::governed_with("");
    let tree = s.dir.path().join("docs");
    std::fs::create_dir(&tree).unwrap();
    git(&tree, &["init", "-q", "-b", "main"]);
    std::fs::write(tree.join("README.md"), "# Docs\n").unwrap();
    git(&tree, &["add", "-A"]);
    git(&tree, &["commit", "-q", "-m", "base"]);
    let block = governed_block().replace(
        "worktree = \"/srv/checkouts/docs\"",
        &format!("worktree = \"{}\"", tree.display()),
    );
    assert!(block.contains(&tree.display().to_string()));
    std::fs::write(
        &s.config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n{block}",
            s.dir.path().join("data").display()
        ),
    )
    .unwrap();
    s.restart(None);
    let (erin, rob, ops) = (token("erin"), token("rob"), token("ops"));
    let _ = token("sec");

    let propose = |text: &str, key: &str| -> (Value, String) {
        std::fs::write(tree.join("README.md"), text).unwrap();
        let diff = std::process::Command::new("git")
            .args(["diff", "--no-color"])
            .current_dir(&tree)
            .output()
            .unwrap();
        git(&tree, &["checkout", "-q", "--", "README.md"]);
        let p = s.ok(
            &erin,
            "proposal.create",
            json!({"workspace_id": "docs", "task_id": "t1", "title": "Docs", "summary_md": "s",
                   "patch": String::from_utf8(diff.stdout).unwrap(),
                   "idempotency_key": format!("p-{key}")}),
        )["proposal"]
            .clone();
        let rev = p["current_revision"].as_str().unwrap().to_string();
        s.ok(
            &erin,
            "proposal.request_review",
            json!({"workspace_id": "docs", "proposal_id": p["proposal_id"],
                   "idempotency_key": format!("r-{key}")}),
        );
        s.ok(
            &rob,
            "vote.cast",
            json!({"workspace_id": "docs", "proposal_id": p["proposal_id"], "revision": rev,
                   "vote": "approve", "reason_md": "ok", "idempotency_key": format!("v-{key}")}),
        );
        (p["proposal_id"].clone(), rev)
    };
    let validate = |id: &Value, rev: &str, key: &str| -> Value {
        let vid = s.ok(
            &ops,
            "patch.validate",
            json!({"workspace_id": "docs", "proposal_id": id, "revision": rev,
                   "idempotency_key": format!("val-{key}")}),
        )["validation"]["validation_id"]
            .clone();
        let mut last = Value::Null;
        wait_for(
            || {
                last = s.ok(
                    &ops,
                    "patch.validation_show",
                    json!({"workspace_id": "docs", "validation_id": vid}),
                )["validation"]
                    .clone();
                last["complete"] == true
            },
            "the validation settles",
        );
        last
    };
    s.ok(
        &erin,
        "claim.acquire",
        json!({"workspace_id": "docs", "task_id": "t1", "resource_id": "file:README.md",
               "mode": "write", "idempotency_key": "c"}),
    );

    // The required check is real: a patch that leaves a conflict marker fails it.
    let (bad, bad_rev) = propose("# Docs\n<<<<<<< ours\nmine\n", "bad");
    let v = validate(&bad, &bad_rev, "bad");
    assert_eq!(v["valid"], false, "{v}");
    let check = &v["checks"][0];
    assert_eq!(check["name"], "no-conflict-markers", "{v}");
    // A second validation of the same revision; the list pages through both, oldest first.
    let again = validate(&bad, &bad_rev, "bad-2");
    let page = |cursor: Option<&Value>| {
        let mut body = json!({"workspace_id": "docs", "proposal_id": bad, "limit": 1});
        if let Some(c) = cursor {
            body["cursor"] = c.clone();
        }
        s.ok(&erin, "patch.validation_list", body)
    };
    let first = page(None);
    assert_eq!(first["validations"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first["validations"][0]["validation_id"], v["validation_id"]);
    assert_eq!(first["validations"][0]["valid"], false);
    let second = page(Some(&first["next_cursor"]));
    assert_eq!(
        second["validations"][0]["validation_id"],
        again["validation_id"]
    );
    let end = page(Some(&second["next_cursor"]));
    assert_eq!(end["validations"], json!([]), "{end}");
    assert_eq!(end["next_cursor"], Value::Null);
    s.err(
        &erin,
        "patch.validation_list",
        json!({"workspace_id": "docs", "proposal_id": "prp_0000"}),
        "not_found",
    );
    s.ok(
        &erin,
        "proposal.withdraw",
        json!({"workspace_id": "docs", "proposal_id": bad, "idempotency_key": "w-bad"}),
    );

    let (id, rev) = propose("# Docs\n\nHow to land a change.\n", "good");
    let v = validate(&id, &rev, "good");
    assert_eq!(v["valid"], true, "{v}");
    let verdict = s.ok(
        &ops,
        "policy.evaluate",
        json!({"workspace_id": "docs", "proposal_id": id}),
    );
    assert_eq!(verdict["verdict"]["approvable"], true, "{verdict}");
    let applied = s.ok(
        &ops,
        "patch.apply",
        json!({"workspace_id": "docs", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "a"}),
    );
    assert_eq!(applied["transaction"]["status"], "applied", "{applied}");
    assert_eq!(
        std::fs::read_to_string(tree.join("README.md")).unwrap(),
        "# Docs\n\nHow to land a change.\n"
    );
}
