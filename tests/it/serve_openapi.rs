//! `GET /openapi.json` against the daemon itself: it documents every routed method with exactly
//! the fields the dispatcher parses, and schemathesis (PyPI) fuzzing the running daemon from it
//! finds no 5xx and no reply outside the document. (Every other test's replies are checked
//! against the same document in `support::schema`.)

use crate::support::daemon::{ALICE, Server};
use crate::support::http::{call_raw, request};
use crate::support::python_tool;
use serde_json::Value;
use std::collections::BTreeSet;

fn document(s: &Server) -> Value {
    let (status, body) = request(&s.addr, "GET", "/openapi.json", None, b"").unwrap();
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

/// The field names serde lists in "unknown field `x`, expected one of `a`, `b`".
fn expected_fields(message: &str) -> BTreeSet<String> {
    let tail = message
        .split_once("expected")
        .unwrap_or_else(|| panic!("no field list in {message:?}"))
        .1;
    tail.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_routed_method_is_documented_with_exactly_the_fields_it_parses() {
    let s = Server::fake_governed();
    let doc = document(&s);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let methods: Vec<&str> = airlock::api::methods::METHODS
        .iter()
        .map(|m| m.name)
        .collect();
    // The methods (each a POST); `GET /api/v1/keys` is a read beside them, checked below.
    let documented: Vec<&str> = paths
        .iter()
        .filter(|(_, op)| op.get("post").is_some())
        .filter_map(|(p, _)| p.strip_prefix("/api/v1/"))
        .collect();
    assert_eq!(documented.len(), methods.len(), "{documented:?}");
    for name in methods {
        let op = &paths[&format!("/api/v1/{name}")]["post"];
        assert!(
            op["x-airlock-permission"]
                .as_str()
                .is_some_and(|p| !p.is_empty()),
            "{name}: no permission"
        );
        for status in [
            "200", "400", "401", "403", "404", "409", "412", "413", "500", "503",
        ] {
            assert!(op["responses"][status].is_object(), "{name}: no {status}");
        }
        let reference = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap();
        let schema = doc.pointer(&reference[1..]).unwrap();
        let documented: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            schema["additionalProperties"], false,
            "{name}: unknown fields are refused, the schema must say so"
        );
        // The dispatcher's own parse names every field its type has.
        let (status, v) = call_raw(&s.addr, Some(ALICE), name, br#"{"zz_not_a_field": 0}"#);
        assert_eq!(status, 400, "{name}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("zz_not_a_field"), "{name}: {message}");
        assert_eq!(
            expected_fields(message),
            documented,
            "{name}: the document's request fields are not the ones the daemon parses"
        );
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        for r in &required {
            assert!(documented.contains(r.as_str().unwrap()), "{name}: {r}");
        }
    }
    // The probes and the document itself are there too, without authentication.
    for p in [
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/metrics",
        "/api/v1/keys",
    ] {
        assert!(paths[p]["get"].is_object(), "{p}");
        assert_eq!(paths[p]["get"]["security"], serde_json::json!([]), "{p}");
    }
}

/// schemathesis's configuration. Without real identifiers every generated call stops at the
/// membership check (403) or at a parser (a random string is no patch) and never reaches a
/// method's own logic; with the workspace, the head revision and a patch that applies, most
/// valid cases exercise the method for real. The warnings that mean the document and the
/// server disagree (valid input refused, auth that never works) fail the run.
fn fuzz_config(s: &Server) -> String {
    let head = s.head();
    let patch =
        "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1,2 @@\n base\n+fuzzed\n";
    let toml_str = |v: &str| serde_json::to_string(v).unwrap();
    format!(
        "[dictionaries.workspaces]\nvalues = [\"ws1\"]\n\
         [dictionaries.revisions]\nvalues = [{head}]\n\
         [dictionaries.patches]\nvalues = [{patch}]\n\
         [parameters]\n\
         \"body.workspace_id\" = {{ dictionary = \"workspaces\", probability = 0.9 }}\n\
         \"body.expected_target_revision\" = {{ dictionary = \"revisions\", probability = 0.7 }}\n\
         \"body.base_revision\" = {{ dictionary = \"revisions\", probability = 0.7 }}\n\
         \"body.revision\" = {{ dictionary = \"revisions\", probability = 0.7 }}\n\
         \"body.patch\" = {{ dictionary = \"patches\", probability = 0.8 }}\n\
         [warnings]\nfail-on = [\"validation_mismatch\", \"missing_auth\", \"unresolvable_reference\", \
         \"dictionary_mismatch\", \"method_not_allowed\"]\n\
         {exempt}",
        head = toml_str(&head),
        patch = toml_str(patch),
        exempt = EXEMPT
            .iter()
            .map(|(m, why, warnings)| format!(
                "# {why}\n[[operations]]\ninclude-path = \"/api/v1/{m}\"\nwarnings = {warnings}\n"
            ))
            .collect::<String>(),
    ) + &airlock::api::openapi::STREAMING_ROUTES
        .iter()
        .map(|p| format!("# streams: not a request-reply call\n[[operations]]\ninclude-path = \"{p}\"\nenabled = false\n"))
        .collect::<String>()
}

/// Methods whose valid-looking input the server refuses for reasons no schema can state (its
/// state, other records, cross-field rules), with
/// the warnings kept for them: schemathesis fails the run on a validation mismatch wherever it
/// displays one, and on missing auth per operation.
const EXEMPT: &[(&str, &str, &str)] = &[
    (
        "evidence.record",
        "its revisions must be commits in the repository (412)",
        NO_MISMATCH,
    ),
    (
        "job.submit",
        "its revision must name a commit of the repository (412) and its profile be one the workspace allows",
        NO_MISMATCH,
    ),
    (
        "job.log",
        "follow: true streams only on GET /api/v1/jobs/{id}/log (400 names that route)",
        NO_MISMATCH,
    ),
    (
        "integration.prepare",
        "submissions name evidence this server recorded (412)",
        NO_MISMATCH,
    ),
    (
        "integration.resolve",
        "each file needs exactly one of content or delete: true",
        NO_MISMATCH,
    ),
    (
        "proposal.create",
        "the author must hold claims on every touched path (412)",
        NO_MISMATCH,
    ),
    (
        "proposal.attach_patch",
        "the patch must parse and the proposal exist",
        NO_MISMATCH,
    ),
    (
        "transaction.control",
        "only retry takes a validation_id",
        NO_MISMATCH,
    ),
    // Typed replies let schemathesis follow real claim ids from claim.acquire; what it may do
    // with one then depends on the claim's state (412 once released), which no schema states.
    (
        "claim.heartbeat",
        "only an active claim has a heartbeat",
        NO_MISMATCH,
    ),
    ("claim.suspend", "only from active", NO_MISMATCH),
    (
        "claim.resume",
        "only a suspended claim, its resource unchanged",
        NO_MISMATCH,
    ),
    ("claim.revoke", "not from released", NO_MISMATCH),
    (
        "claim.release",
        "only the holder's active claim",
        NO_MISMATCH,
    ),
    (
        "claim.extend",
        "only an active, renewable claim",
        NO_MISMATCH,
    ),
    ("claim.force_release", "not from released", NO_MISMATCH),
    (
        "patch.validation_list",
        "the proposal must exist (404) and a cursor be one this server returned",
        NO_MISMATCH,
    ),
    (
        "human.decide",
        "the fuzzing member (alice) may not decide human approvals: 403 is right",
        "{ fail-on = false }",
    ),
];
const NO_MISMATCH: &str =
    "{ display = [\"missing_auth\", \"unresolvable_reference\", \"method_not_allowed\"] }";

#[test]
fn schemathesis_finds_no_server_error_and_no_reply_outside_the_document() {
    let s = Server::fake_governed();
    let report = s.dir.path().join("schemathesis.xml");
    let config = s.dir.path().join("schemathesis.toml");
    std::fs::write(&config, fuzz_config(&s)).unwrap();
    let out = std::process::Command::new(python_tool("schemathesis"))
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("http://{}/openapi.json", s.addr)])
        .args(["--header", &format!("Authorization: Bearer {ALICE}")])
        // Bounded: a few examples per method, reproducible.
        // One worker: with real ids linked between methods, the order decides what a call finds.
        .args(["--max-examples", "6", "--seed", "1", "--workers", "1"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--request-timeout", "30", "--no-color"])
        .args(["--report", "junit"])
        .arg("--report-junit-path")
        .arg(&report)
        // Its caches (.hypothesis, .schemathesis) go beside the daemon's files, not in the repo.
        .current_dir(s.dir.path())
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It really exercised the API: its report has a test case for every method.
    let junit = std::fs::read_to_string(&report).unwrap();
    for m in airlock::api::methods::METHODS {
        assert!(
            junit.contains(&format!("POST /api/v1/{}\"", m.name)),
            "schemathesis did not test {}:\n{stdout}",
            m.name
        );
    }
}

/// The routes that are not request-reply JSON are in the document too, marked as streaming
/// with what they speak, and each is a real route of the daemon (never a 404).
#[test]
fn the_streaming_routes_are_documented_as_such_and_exist() {
    let s = Server::fake();
    let doc = document(&s);
    for path in airlock::api::openapi::STREAMING_ROUTES {
        let item = &doc["paths"][path];
        let (verb, op) = item
            .as_object()
            .unwrap_or_else(|| panic!("{path} is not documented"))
            .iter()
            .next()
            .unwrap();
        assert!(op["x-airlock-streaming"].is_string(), "{path}: {op}");
        assert!(op["responses"]["200"].is_object(), "{path}");
        let concrete = path
            .replace("{job_id}", "job_0123456789abcdef0123456789abcdef")
            .replace("{workspace_id}", "ws1");
        let (status, _) = request(&s.addr, &verb.to_uppercase(), &concrete, None, b"{}").unwrap();
        assert_ne!(status, 404, "{verb} {concrete} is no route");
        assert_ne!(status, 405, "{verb} {concrete} is no route");
    }
    let kinds = &doc["paths"]["/api/v1/events"]["get"]["parameters"][3]["schema"]["enum"];
    assert!(
        kinds.as_array().unwrap().contains(&"job.settled".into()),
        "{kinds}"
    );
}
