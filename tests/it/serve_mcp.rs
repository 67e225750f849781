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
    // Alice (no review permission, no review role) is offered every agent tool but the
    // reviewers' own: exactly the registry's tools she may call.
    let agent: Vec<&str> = airlock::api::mcp::tools()
        .map(|m| m.name)
        .filter(|n| !["vote.cast", "security.review"].contains(n))
        .collect();
    assert_eq!(names, agent);
    for required in ["claim.acquire", "proposal.create", "proposal.preview"] {
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
    // Without a known token nothing is served, not even `initialize`.
    assert!(sessions[2]["refused"].is_string(), "{}", sessions[2]);
    assert_eq!(alice["server"]["name"], "airlock");
    assert_eq!(alice["server"]["version"], env!("CARGO_PKG_VERSION"));
    // Nothing the refused calls named exists.
    let claims = s.ok(ALICE, "claim.list", json!({"workspace_id": "ws1"}));
    assert_eq!(claims["claims"].as_array().unwrap().len(), 1, "{claims}");
}

/// The transport's refusals carry the API's JSON envelope: a missing or unknown token (at
/// `initialize`, with `WWW-Authenticate`), a wrong `Accept`, an unknown session.
#[test]
fn mcp_refusals_are_the_apis_json_envelope() {
    use crate::support::http::exchange;
    let s = Server::fake_governed();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let both = ("Accept", "application/json, text/event-stream");
    let json_ct = ("Content-Type", "application/json");
    type Case<'a> = (Option<&'a str>, Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: [Case; 4] = [
        (None, vec![both, json_ct], 401, "unauthenticated"),
        (
            Some("not-a-token"),
            vec![both, json_ct],
            401,
            "unauthenticated",
        ),
        (
            Some(ALICE),
            vec![("Accept", "text/plain"), json_ct],
            406,
            "invalid_argument",
        ),
        (
            Some(ALICE),
            vec![both, json_ct, ("Mcp-Session-Id", "no-such-session")],
            404,
            "not_found",
        ),
    ];
    for (token, mut headers, status, code) in cases {
        let auth = token.map(|t| format!("Bearer {t}"));
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        let (got, head, body) =
            exchange(&s.addr, "POST", "/mcp", &headers, init.as_bytes()).unwrap();
        let text = String::from_utf8_lossy(&body);
        assert_eq!(got, status, "{token:?} {headers:?}: {text}");
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
        if status == 401 {
            assert!(
                head.iter()
                    .any(|(k, v)| k == "www-authenticate" && v == "Bearer"),
                "{head:?}"
            );
        }
    }
}

/// One session of `token` making one call; (the tools it was offered, the call's result).
fn one_call(s: &Server, token: &str, tool: &str, arguments: Value) -> (Vec<Value>, Value) {
    let mut out = client(
        s,
        json!([{"token": token, "calls": [["r", tool, arguments]]}]),
    );
    let session = out.remove(0);
    (
        session["tools"].as_array().unwrap().clone(),
        session["r"].clone(),
    )
}

fn structured(r: &Value) -> &Value {
    assert_eq!(r["isError"], false, "{r}");
    &r["structured"]
}

fn names(tools: &[Value]) -> Vec<&str> {
    tools.iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// The whole governed path as agents drive it, through the Python client on real Docker: the
/// author claims, proposes, asks for review and validates; a reviewer votes; a member with
/// `apply` applies and reads the transaction. Each token is offered only the tools it may call
/// (`patch.apply` and `transaction.control` to members with `apply`, admin actions to admins),
/// each described with who may call it; `patch.reject` is seed 000's name for
/// `proposal.reject`.
#[test]
fn agents_drive_the_governed_path_to_an_apply_with_the_tools_their_tokens_allow() {
    use crate::support::daemon::{DAVE, RUN_A};
    if !crate::toolchain::built("git") {
        return;
    }
    let s = Server::governed_with(
        "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
         [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n",
    );
    let listed = client(
        &s,
        json!([
            {"token": ALICE, "calls": []},
            {"token": BOB, "calls": []},
            {"token": RUN_A, "calls": []},
            {"token": "not-a-token", "calls": []},
        ]),
    );
    let (alice, bob, run) = (
        names(listed[0]["tools"].as_array().unwrap()),
        names(listed[1]["tools"].as_array().unwrap()),
        names(listed[2]["tools"].as_array().unwrap()),
    );
    assert!(
        listed[3]["refused"].is_string(),
        "no token, no session: {}",
        listed[3]
    );
    for t in [
        "patch.validate",
        "patch.validation_show",
        "patch.reject",
        "patch.apply",
        "transaction.show",
        "transaction.control",
        "claim.resume",
        "claim.suspend",
    ] {
        assert!(
            alice.contains(&t),
            "alice (apply, admin) lacks {t}: {alice:?}"
        );
    }
    for t in [
        "patch.validation_show",
        "patch.reject",
        "vote.cast",
        "security.review",
        "proposal.get",
    ] {
        assert!(bob.contains(&t), "bob lacks {t}: {bob:?}");
    }
    // Bob views and reviews: nothing he may not call is offered to him (he cannot propose,
    // so he is never an author who validates, and he cannot verify or record evidence).
    for t in [
        "job.submit",
        "job.cancel",
        "proposal.create",
        "claim.acquire",
        "evidence.record",
        "patch.validate",
    ] {
        assert!(
            !bob.contains(&t),
            "bob (view, review) is offered {t}: {bob:?}"
        );
    }
    // A run without a review role is not offered the reviewers' tools.
    for t in ["vote.cast", "security.review", "decision.record"] {
        assert!(
            !run.contains(&t),
            "a run without a role is offered {t}: {run:?}"
        );
    }
    // Verification jobs are an agent's to ask for: a run token is offered them.
    for t in [
        "job.submit",
        "job.show",
        "job.list",
        "job.cancel",
        "job.log",
    ] {
        assert!(run.contains(&t), "a run lacks {t}: {run:?}");
    }
    for (who, list) in [("bob", &bob), ("a run", &run)] {
        for t in [
            "patch.apply",
            "transaction.control",
            "claim.suspend",
            "human.decide",
        ] {
            assert!(!list.contains(&t), "{who} is offered {t}: {list:?}");
        }
    }
    let describe = |name: &str| {
        listed[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["description"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        describe("patch.apply").contains("permission: members with apply"),
        "{}",
        describe("patch.apply")
    );
    assert!(
        describe("patch.reject").contains("an alias of proposal.reject"),
        "{}",
        describe("patch.reject")
    );

    let patch = "diff --git a/mcp.txt b/mcp.txt\nnew file mode 100644\n--- /dev/null\n+++ b/mcp.txt\n@@ -0,0 +1 @@\n+from an agent\n";
    let (_, r) = one_call(
        &s,
        DAVE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:mcp.txt",
               "mode": "write", "release_on": "proposal_end", "idempotency_key": "c"}),
    );
    let claim = structured(&r)["claim"].clone();
    let (_, r) = one_call(
        &s,
        DAVE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t", "title": "mcp", "summary_md": "s",
               "patch": patch, "idempotency_key": "p"}),
    );
    let proposal = structured(&r)["proposal"].clone();
    let (id, rev) = (
        proposal["proposal_id"].clone(),
        proposal["current_revision"].clone(),
    );
    let (_, r) = one_call(
        &s,
        DAVE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "rr"}),
    );
    structured(&r);
    let (_, r) = one_call(
        &s,
        BOB,
        "vote.cast",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "vote": "approve",
               "reason_md": "ok", "idempotency_key": "v"}),
    );
    structured(&r);
    let (_, r) = one_call(
        &s,
        DAVE,
        "patch.validate",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
               "idempotency_key": "val"}),
    );
    let vid = structured(&r)["validation"]["validation_id"].clone();
    crate::support::daemon::wait_for(
        || {
            s.ok(
                ALICE,
                "patch.validation_show",
                json!({"workspace_id": "ws1", "validation_id": vid}),
            )["validation"]["complete"]
                == true
        },
        "the validation completes",
    );
    let (_, r) = one_call(
        &s,
        BOB,
        "patch.validation_show",
        json!({"workspace_id": "ws1", "validation_id": vid}),
    );
    assert_eq!(structured(&r)["validation"]["valid"], true, "{r}");
    let apply = json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": vid,
                       "idempotency_key": "a"});
    let (_, r) = one_call(&s, BOB, "patch.apply", apply.clone());
    refused(&r, "permission_denied");
    assert!(
        r["structured"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("it needs members with apply"),
        "{r}"
    );
    let (_, r) = one_call(&s, ALICE, "patch.apply", apply);
    let applied = structured(&r).clone();
    assert_eq!(applied["transaction"]["status"], "applied", "{applied}");
    assert_eq!(applied["proposal"]["status"], "accepted", "{applied}");
    assert_eq!(
        std::fs::read_to_string(s.repo.join("mcp.txt")).unwrap(),
        "from an agent\n"
    );
    let (_, r) = one_call(
        &s,
        DAVE,
        "transaction.show",
        json!({"workspace_id": "ws1", "transaction_id": applied["transaction"]["transaction_id"]}),
    );
    assert_eq!(structured(&r)["transaction"]["status"], "applied");
    // The claim marked proposal_end ended in the apply that accepted the proposal.
    let shown = s.ok(
        DAVE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": claim["claim_id"]}),
    );
    assert_eq!(shown["claim"]["status"], "released", "{shown}");

    // A reviewer rejects the next proposal under seed 000's tool name.
    let (_, r) = one_call(
        &s,
        DAVE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "file:README",
               "mode": "write", "idempotency_key": "c2"}),
    );
    structured(&r);
    let (_, r) = one_call(
        &s,
        DAVE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t", "title": "next", "summary_md": "s",
               "patch": "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-base\n+next\n",
               "idempotency_key": "p2"}),
    );
    let next = structured(&r)["proposal"]["proposal_id"].clone();
    let (_, r) = one_call(
        &s,
        BOB,
        "patch.reject",
        json!({"workspace_id": "ws1", "proposal_id": next, "reason_md": "not now",
               "idempotency_key": "rej"}),
    );
    assert_eq!(structured(&r)["proposal"]["status"], "rejected", "{r}");
}

/// MCP sessions are bounded: one token's identity may hold `MAX_MCP_SESSIONS_PER_TOKEN` open,
/// the next is refused naming the bound (another token still opens its own), ending one with
/// `DELETE` frees its slot, a session is used only by the token that opened it, and a session
/// idle past `mcp_session_idle_seconds` is closed, its slot freed, while one in use stays.
#[test]
fn mcp_sessions_are_bounded_per_token_and_idle_ones_expire() {
    use crate::support::daemon::CAROL;
    use crate::support::http::exchange;
    let s = Server::fake_with("mcp_session_idle_seconds = 4\n");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let accept = ("Accept", "application/json, text/event-stream");
    // (status, the session id it was given, the body)
    let open = |token: &str| -> (u16, Option<String>, Value) {
        let auth = format!("Bearer {token}");
        let (status, head, body) = exchange(
            &s.addr,
            "POST",
            "/mcp",
            &[accept, ("Authorization", &auth)],
            init.as_bytes(),
        )
        .unwrap();
        let id = head
            .iter()
            .find(|(k, _)| k == "mcp-session-id")
            .map(|(_, v)| v.clone());
        let text = String::from_utf8_lossy(&body).into_owned();
        let v = serde_json::from_str(&text)
            .or_else(|_| {
                // An SSE answer: its data line.
                text.lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .map(serde_json::from_str)
                    .unwrap_or(Ok(Value::Null))
            })
            .unwrap_or(Value::Null);
        (status, id, v)
    };
    let with_session = |token: &str, method: &str, id: &str| -> u16 {
        let auth = format!("Bearer {token}");
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
        exchange(
            &s.addr,
            method,
            "/mcp",
            &[
                accept,
                ("Authorization", &auth),
                ("Mcp-Session-Id", id),
                ("Mcp-Protocol-Version", "2025-06-18"),
            ],
            if method == "POST" {
                ping.as_bytes()
            } else {
                b""
            },
        )
        .unwrap()
        .0
    };
    let max = airlock::limits::MAX_MCP_SESSIONS_PER_TOKEN;
    let mut ids = Vec::new();
    for i in 0..max {
        let (status, id, v) = open(BOB);
        assert_eq!(status, 200, "session {i}: {v}");
        ids.push(id.expect("a session id"));
    }
    let (status, id, v) = open(BOB);
    assert_eq!(status, 413, "{v}");
    assert!(id.is_none());
    assert_eq!(v["error"]["code"], "resource_exhausted", "{v}");
    assert_eq!(v["error"]["field"], "mcp_sessions", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("the limit is {max} per token")),
        "{v}"
    );
    // Another token is not held back by bob's sessions.
    let (status, carol_session, _) = open(CAROL);
    assert_eq!(status, 200);
    // A session is bob's alone.
    assert_eq!(with_session(ALICE, "POST", &ids[0]), 404);
    // DELETE ends one: its slot is free again.
    let first = ids.remove(0);
    let deleted = with_session(BOB, "DELETE", &first);
    assert!(deleted < 300, "DELETE answered {deleted}");
    let (status, id, v) = open(BOB);
    assert_eq!(status, 200, "{v}");
    ids.push(id.unwrap());
    // Idle ones close: keep one in use (a ping every second) past the idle bound; the others
    // go, and their slots with them.
    let keep = ids[0].clone();
    for _ in 0..6 {
        assert_eq!(
            with_session(BOB, "POST", &keep),
            200,
            "the session in use stays"
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let mut opened = 0;
    for _ in 0..max - 1 {
        let (status, _, v) = open(BOB);
        assert_eq!(status, 200, "an idle session's slot is free: {v}");
        opened += 1;
    }
    assert_eq!(opened, max - 1);
    assert_eq!(
        with_session(BOB, "POST", &keep),
        200,
        "still open after the sweep"
    );
    assert_eq!(open(BOB).0, 413, "and the bound holds again");
    assert_eq!(
        with_session(CAROL, "POST", carol_session.as_deref().unwrap()),
        404,
        "carol's idle session was closed"
    );
}
