//! Symbol resources over a real daemon on loopback, resolved by tree-sitter in a real governed
//! worktree: spans at grant, overlap by span, unresolvable symbols refused, `resource.show`,
//! coverage of a proposal's changed lines by claimed symbols, and reconcile re-resolving spans.

use crate::support::daemon::{ALICE, DAVE, Server};
use crate::support::repo::git;
use serde_json::json;

const LIB: &str = "pub fn a() -> u32 {\n    1\n}\n\npub fn b() -> u32 {\n    2\n}\n";

fn setup() -> Server {
    let s = Server::fake_governed();
    std::fs::create_dir_all(s.repo.join("src")).unwrap();
    std::fs::write(s.repo.join("src/lib.rs"), LIB).unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "lib"]);
    s
}

fn diff_of(s: &Server, new_lib: &str) -> String {
    std::fs::write(s.repo.join("src/lib.rs"), new_lib).unwrap();
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["checkout", "-q", "--", "src/lib.rs"]);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn symbol_claims_carry_the_parsers_span_and_overlap_by_it() {
    let s = setup();
    let (st, a) = s.acquire(ALICE, "symbol:src/lib.rs#a", "write", "a1");
    assert_eq!(st, 200, "{a}");
    assert_eq!(
        a["claim"]["resource"]["span"],
        json!({"start": 1, "end": 3})
    );
    assert_eq!(a["claim"]["resource"]["symbol"], "a");
    assert_eq!(a["claim"]["base_hash"].as_str().unwrap().len(), 64);
    // b's lines do not overlap a's: dave may write it; the whole file he may not.
    let (st, b) = s.acquire(DAVE, "symbol:src/lib.rs#b", "write", "d1");
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        b["claim"]["resource"]["span"],
        json!({"start": 5, "end": 7})
    );
    let (st, _) = s.acquire(DAVE, "file:src/lib.rs", "write", "d2");
    assert_eq!(st, 409, "a file claim overlaps the symbols in it");
    // Unresolvable symbols are refused, never granted with a zero span.
    for (id, needle) in [
        ("symbol:src/lib.rs#zzz", "declares no symbol"),
        ("symbol:src/nope.rs#a", "does not exist"),
        ("symbol:README#a", "no parser"),
    ] {
        let m = s.err(
            DAVE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": id, "mode": "read",
                   "idempotency_key": id}),
            "failed_precondition",
        );
        assert!(m.contains(needle), "{id}: {m}");
    }
    let shown = s.ok(
        DAVE,
        "resource.show",
        json!({"workspace_id": "ws1", "resource_id": "symbol:src/lib.rs#b"}),
    );
    let r = &shown["resource"];
    assert_eq!(r["type"], "symbol");
    assert_eq!(r["language"], "rust");
    assert_eq!(r["span"], json!({"start": 5, "end": 7}));
    assert_eq!(r["current_hash"], b["claim"]["base_hash"]);
}

#[test]
fn a_proposal_changes_only_lines_inside_its_claimed_symbols() {
    let s = setup();
    let (st, _) = s.acquire(ALICE, "symbol:src/lib.rs#a", "write", "a1");
    assert_eq!(st, 200);
    let inside = diff_of(&s, &LIB.replace("    1\n", "    10\n"));
    let outside = diff_of(&s, &LIB.replace("    2\n", "    20\n"));
    let create = |patch: &str, key: &str| {
        s.call(
            ALICE,
            "proposal.create",
            json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
                   "patch": patch, "affected_resources": ["symbol:src/lib.rs#a"],
                   "idempotency_key": key}),
        )
    };
    let (st, e) = create(&outside, "p1");
    assert_eq!(st, 412, "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(m.contains("lines 6..=6 are inside no held symbol"), "{m}");
    let (st, v) = create(&inside, "p2");
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["proposal"]["affected_resources"],
        json!(["symbol:src/lib.rs#a"]),
        "the symbol covers its file: no file resource is added"
    );
}

#[test]
fn reconcile_re_resolves_spans_so_moved_code_is_unchanged_and_edited_code_is_not() {
    let s = setup();
    let (_, a) = s.acquire(ALICE, "symbol:src/lib.rs#a", "write", "a1");
    let (_, b) = s.acquire(ALICE, "symbol:src/lib.rs#b", "write", "a2");
    // Lines inserted above both move them; b's body changes too.
    let moved = format!("// header\n\n{}", LIB.replace("    2\n", "    22\n"));
    std::fs::write(s.repo.join("src/lib.rs"), moved).unwrap();
    let r = s.ok(
        ALICE,
        "claim.reconcile",
        json!({"workspace_id": "ws1", "idempotency_key": "r1"}),
    );
    assert_eq!(r["unchanged"], json!([a["claim"]["claim_id"]]), "{r}");
    assert_eq!(r["suspended"], json!([b["claim"]["claim_id"]]), "{r}");
    // A symbol that no longer resolves is reported, never taken as unchanged.
    std::fs::write(s.repo.join("src/lib.rs"), "pub fn c() {}\n").unwrap();
    let r = s.ok(
        ALICE,
        "claim.reconcile",
        json!({"workspace_id": "ws1", "idempotency_key": "r2"}),
    );
    assert_eq!(
        r["unreadable"][0]["claim_id"], a["claim"]["claim_id"],
        "{r}"
    );
    assert!(
        r["unreadable"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("declares no symbol"),
        "{r}"
    );
}
