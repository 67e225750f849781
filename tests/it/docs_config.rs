//! The documented configuration is real: the manual's TOML blocks (every ```toml block; an
//! `image.toml` is marked as one) paste into one file in the order shown and that file loads,
//! so do the README's, and the manual's governed example, with its roles, policy, required
//! check and tokens exactly as printed, runs a patch from a claim to an apply on real Docker.

use crate::support::daemon::{Server, wait_for};
use crate::support::markdown::{bodies, document};
use crate::support::repo::git;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The manual's pages whose ```toml blocks make one configuration file.
const CONFIG_PAGES: [&str; 5] = [
    "docs/configuration.md",
    "docs/governed-path.md",
    "docs/engines.md",
    "docs/images.md",
    "docs/dependencies.md",
];

/// The config blocks of `pages`, in order (fences whose info string is exactly `toml`).
fn config_blocks(pages: &[&str]) -> Vec<String> {
    pages
        .iter()
        .flat_map(|p| bodies(&document(p), "toml"))
        .collect()
}

/// `blocks` pasted into one file: blocks of top-level keys first (TOML puts those before any
/// table), then the rest, each group in the order shown; loaded as `airlock serve` loads it.
fn load(blocks: Vec<String>) -> airlock::config::Config {
    let (tables, mut blocks): (Vec<String>, Vec<String>) = blocks
        .into_iter()
        .partition(|b| b.trim_start().starts_with('['));
    blocks.extend(tables);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.toml");
    std::fs::write(&path, blocks.join("\n")).unwrap();
    airlock::config::Config::load(Some(&path))
        .unwrap_or_else(|e| panic!("the documented config does not load: {e}"))
}

#[test]
fn the_readmes_config_blocks_paste_into_one_file_that_loads() {
    let c = load(bodies(&document("README.md"), "toml"));
    for ws in ["app", "docs", "farm"] {
        assert!(c.workspaces.contains_key(ws), "{ws}");
    }
    assert_eq!(c.tokens.len(), 3);
}

#[test]
fn the_manuals_config_blocks_paste_into_one_file_that_loads() {
    let blocks = config_blocks(&CONFIG_PAGES);
    assert!(blocks.len() >= 6, "{blocks:?}");
    let c = load(blocks);
    for ws in ["ws_123", "ws_gov", "docs"] {
        assert!(c.workspaces.contains_key(ws), "{ws}");
    }
    assert!(c.profiles.contains_key("web"));
    assert_eq!(c.engines.len(), 2);
    assert_eq!(c.tokens.len(), 6);
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
    config_blocks(&["docs/governed-path.md"])
        .into_iter()
        .find(|b| b.starts_with("[workspaces.docs]"))
        .expect("the governed example")
}

/// The manual's example tokens (`<member>-token`) and a check that the printed hashes are
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

/// Every key the loader accepts, table by table (read from its own refusal of an unknown key,
/// which lists what it expected), is in the configuration reference's table for that table,
/// so a key added to the config without its documented default and bound fails here.
#[test]
fn every_key_the_loader_accepts_is_in_the_configuration_reference() {
    let reference = document("docs/configuration.md");
    let section = |heading: &str| -> String {
        let start = reference
            .find(&format!("\n### {heading}\n"))
            .unwrap_or_else(|| panic!("no section {heading}"));
        let rest = &reference[start + 5..];
        rest[..rest.find("\n### ").unwrap_or(rest.len())].to_string()
    };
    let probes = [
        ("", "Top level"),
        ("[profiles.x]\nimage = \"a\"\n", "`[profiles.<name>]`"),
        ("[workspaces.w]\n", "`[workspaces.<id>]`"),
        ("[workspaces.w.policy]\n", "`[workspaces.<id>.policy]`"),
        (
            "[[workspaces.w.policy.required_checks]]\n",
            "`[workspaces.<id>.policy]`",
        ),
        (
            "[[workspaces.w.policy.path_roles]]\n",
            "`[workspaces.<id>.policy]`",
        ),
        (
            "[[workspaces.w.webhooks]]\n",
            "`[[workspaces.<id>.webhooks]]`",
        ),
        ("[[tokens]]\n", "`[[tokens]]`"),
        ("[[engines]]\n", "`[[engines]]`"),
        ("[[engines]]\n[engines.tls]\n", "`[[engines]]`"),
        ("[egress]\n", "`[egress]`"),
        ("[dependencies]\n", "`[dependencies]`"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.toml");
    let mut missing = vec![];
    for (table, heading) in probes {
        std::fs::write(&path, format!("{table}zz_probe = 1\n")).unwrap();
        let e = airlock::config::Config::load(Some(&path))
            .expect_err(table)
            .to_string();
        // serde's forms: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`".
        let expected = e
            .split_once("unknown field `zz_probe`, expected ")
            .unwrap_or_else(|| panic!("{table:?}: {e}"))
            .1;
        let keys: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        assert!(!keys.is_empty(), "{e}");
        let text = section(heading);
        for key in keys {
            if !text.contains(&format!("`{key}`")) {
                missing.push(format!("{heading}: {key}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys the loader accepts that docs/configuration.md does not list:\n{}",
        missing.join("\n")
    );
}
