//! `/mcp` with the official Python MCP client (PyPI `mcp`): it lists exactly the registry's
//! agent methods with their request schemas, and its calls are the API's calls: the same
//! bearer-token identity, the same permissions, the same refusals of hostile arguments, and the
//! records they create are the ones the HTTP API shows.

use crate::support::daemon::{ALICE, BOB, Server};
use crate::support::python_json;
use crate::support::repo::git;
use serde_json::{Value, json};
use std::process::Command;

fn readme_patch(s: &Server) -> String {
    std::fs::write(s.repo.join("README"), "base\nfrom an agent\n").unwrap();
    let out = Command::new("git")
        .args(["diff", "--no-color", "--no-ext-diff"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    assert!(out.status.success());
    git(&s.repo, &["checkout", "-q", "--", "README"]);
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the client over `sessions` ([token, [[key, tool, arguments]]]).
fn client(s: &Server, sessions: Value) -> Vec<Value> {
    let job = json!({"url": format!("http://{}/mcp", s.addr), "sessions": sessions});
    let v = python_json("mcp_client.py", s.dir.path(), &job);
    v["sessions"].as_array().unwrap().clone()
}

fn refused(r: &Value, code: &str) {
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structured"]["error"]["code"], code, "{r}");
}

#[test]
fn the_python_client_lists_the_agent_tools_and_its_calls_are_the_apis_calls() {
    let s = Server::fake_governed();
    let patch = readme_patch(&s);
    let acquire = json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "file:README",
                         "mode": "write", "idempotency_key": "mcp-c1"});
    let create = json!({"workspace_id": "ws1", "task_id": "t1", "title": "From an agent",
                        "summary_md": "<script>alert(1)</script>", "patch": patch,
                        "idempotency_key": "mcp-p1"});
    let sessions = client(
        &s,
        json!([
            {"token": ALICE, "calls": [
                ["acquire", "claim.acquire", acquire],
                ["replay", "claim.acquire", acquire],
                ["create", "proposal.create", create],
                ["unknown_field", "claim.show", {"workspace_id": "ws1", "claim_id": "x", "agent_id": "mallory"}],
                ["missing_field", "claim.acquire", {"workspace_id": "ws1"}],
                ["not_a_tool", "integration.prepare", {"workspace_id": "ws1"}],
                ["human_only", "human.decide", {"workspace_id": "ws1"}],
            ]},
            {"token": BOB, "calls": [
                ["acquire", "claim.acquire", {"workspace_id": "ws1", "task_id": "t2",
                    "resource_id": "file:other", "mode": "write", "idempotency_key": "b1"}],
            ]},
            {"token": "not-a-token", "calls": [
                ["show", "proposal.list", {"workspace_id": "ws1"}],
            ]},
        ]),
    );
    let alice = &sessions[0];

    // The tools are exactly the registry's agent methods, with its request schemas.
    let names: Vec<&str> = alice["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let agent: Vec<&str> = airlock::api::mcp::tools().map(|m| m.name).collect();
    assert_eq!(names, agent);
    for required in [
        "claim.acquire",
        "proposal.create",
        "vote.cast",
        "proposal.preview",
    ] {
        assert!(names.contains(&required), "{required} missing: {names:?}");
    }
    let acquire_schema = alice["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "claim.acquire")
        .unwrap()["inputSchema"]
        .clone();
    assert_eq!(acquire_schema["additionalProperties"], false);
    assert!(
        acquire_schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("idempotency_key"))
    );

    // The calls land as the token's member, exactly as over HTTP.
    assert_eq!(alice["acquire"]["isError"], false, "{}", alice["acquire"]);
    let claim = &alice["acquire"]["structured"]["claim"];
    assert_eq!(claim["holder"], "member:alice", "{claim}");
    assert_eq!(
        alice["replay"]["structured"]["claim"]["claim_id"], claim["claim_id"],
        "a replayed key answers the same claim"
    );
    let shown = s.ok(
        ALICE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": claim["claim_id"]}),
    );
    assert_eq!(shown["claim"]["claim_id"], claim["claim_id"]);
    assert_eq!(alice["create"]["isError"], false, "{}", alice["create"]);
    let proposal = &alice["create"]["structured"]["proposal"];
    let listed = s.ok(ALICE, "proposal.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 1);
    assert_eq!(
        listed["proposals"][0]["proposal_id"],
        proposal["proposal_id"]
    );
    assert_eq!(
        listed["proposals"][0]["summary_md"], "<script>alert(1)</script>",
        "agent text is stored as given (and only ever rendered escaped)"
    );

    // Refusals are tool errors with the API's envelope, naming the field.
    refused(&alice["unknown_field"], "invalid_argument");
    let m = alice["unknown_field"]["structured"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(m.contains("agent_id"), "{m}");
    refused(&alice["missing_field"], "invalid_argument");
    refused(&alice["not_a_tool"], "not_found");
    refused(&alice["human_only"], "not_found");
    refused(&sessions[1]["acquire"], "permission_denied");
    refused(&sessions[2]["show"], "unauthenticated");
    // Nothing the refused calls named exists.
    let claims = s.ok(ALICE, "claim.list", json!({"workspace_id": "ws1"}));
    assert_eq!(claims["claims"].as_array().unwrap().len(), 1, "{claims}");
}
