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
    // Without the symbol named, the file is judged whole, and the refusal says why and what
    // to name.
    let (st, e) = s.call(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": inside, "idempotency_key": "p0"}),
    );
    assert_eq!(st, 412, "{e}");
    assert_eq!(e["error"]["field"], "affected_resources", "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("affected_resources") && m.contains("includes file:src/lib.rs"),
        "{m}"
    );
    assert!(
        m.contains("the author holds symbol:src/lib.rs#a there: name them in affected_resources"),
        "{m}"
    );
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

#[test]
fn a_preview_pages_files_and_diff_gives_the_exact_bytes_and_the_touched_symbols() {
    let s = setup();
    let head = s.head();
    s.acquire(ALICE, "directory:", "write", "c1");
    // Touch b's body and add a file; the worktree's README too.
    std::fs::write(
        s.repo.join("src/lib.rs"),
        LIB.replace("    2\n", "    20\n"),
    )
    .unwrap();
    std::fs::write(s.repo.join("README"), "base\nmore\n").unwrap();
    std::fs::write(s.repo.join("new.txt"), "n\n").unwrap();
    git(&s.repo, &["add", "-A", "--intent-to-add"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-q", "-fd"]);
    let patch = String::from_utf8(out.stdout).unwrap();
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": patch, "base_revision": head, "idempotency_key": "p1"}),
    );
    let id = p["proposal"]["proposal_id"].clone();
    let preview = |part: &str, extra: serde_json::Value| {
        let mut b = json!({"workspace_id": "ws1", "proposal_id": id, "part": part});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        s.ok(DAVE, "proposal.preview", b)
    };
    let m = preview("metadata", json!({}));
    assert_eq!(
        (
            m["files"].as_u64(),
            m["added"].as_u64(),
            m["removed"].as_u64()
        ),
        (Some(3), Some(3), Some(1))
    );
    assert_eq!(m["stale_base"], false);
    assert_eq!(m["worktree_head"], head.as_str());
    // The worktree moves on: the base is stale.
    std::fs::write(s.repo.join("other"), "o\n").unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "moved"]);
    assert_eq!(preview("metadata", json!({}))["stale_base"], true);
    // Files in pages of two.
    let f1 = preview("files", json!({"limit": 2}));
    assert_eq!(f1["files"].as_array().unwrap().len(), 2);
    let f2 = preview("files", json!({"limit": 2, "cursor": f1["next_cursor"]}));
    assert_eq!(f2["files"].as_array().unwrap().len(), 1);
    assert_eq!(f2["next_cursor"], serde_json::Value::Null);
    assert_eq!(f2["files"][0]["operation"], "modify");
    // The diff's lines, paged, are the patch's lines exactly (no phantom last line).
    let mut lines = vec![];
    let mut cursor = serde_json::Value::Null;
    loop {
        let d = preview("diff", json!({"limit": 5, "cursor": cursor}));
        lines.extend(
            d["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap().to_string()),
        );
        cursor = d["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    assert_eq!(lines.join("\n") + "\n", patch);
    let raw = preview("raw", json!({}));
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw["patch"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes, patch.as_bytes());
    assert_eq!(raw["sha256"], p["proposal"]["current_revision"]);
    // Symbols: b's lines changed, a's did not; other files say why they have none.
    let sy = preview("symbols", json!({}));
    let files = sy["files"].as_array().unwrap();
    let lib = files.iter().find(|f| f["path"] == "src/lib.rs").unwrap();
    assert_eq!(lib["symbols"].as_array().unwrap().len(), 1, "{lib}");
    assert_eq!(lib["symbols"][0]["resource_id"], "symbol:src/lib.rs#b");
    let readme = files.iter().find(|f| f["path"] == "README").unwrap();
    assert!(
        readme["note"].as_str().unwrap().contains("no parser"),
        "{readme}"
    );
    let created = files.iter().find(|f| f["path"] == "new.txt").unwrap();
    assert!(
        created["note"].as_str().unwrap().contains("created"),
        "{created}"
    );
    // Bad input names its field.
    for (b, field) in [
        (json!({"part": "everything"}), "part"),
        (json!({"part": "diff", "limit": 5001}), "limit"),
        (json!({"part": "files", "cursor": "nope"}), "cursor"),
        (json!({"part": "raw", "revision": "abc"}), "revision"),
    ] {
        let mut body = json!({"workspace_id": "ws1", "proposal_id": id});
        for (k, v) in b.as_object().unwrap() {
            body[k] = v.clone();
        }
        let m = s.err(DAVE, "proposal.preview", body, "invalid_argument");
        assert!(m.contains(field), "{m}");
    }
    s.err(
        DAVE,
        "proposal.preview",
        json!({"workspace_id": "ws1", "proposal_id": id, "part": "raw", "revision": "0".repeat(64)}),
        "not_found",
    );
}

#[test]
fn a_file_nested_past_the_bounds_is_refused_as_resource_exhausted_and_the_daemon_stays_well() {
    let s = setup();
    let deep = |n: usize| format!("{}fn f() {{}}\n{}", "mod m {\n".repeat(n), "}\n".repeat(n));
    std::fs::write(s.repo.join("src/deep.rs"), deep(100_000)).unwrap();
    std::fs::write(s.repo.join("src/nested.rs"), deep(100)).unwrap();
    std::fs::write(
        s.repo.join("src/ns.ts"),
        format!(
            "{}export function f() {{}}\n{}",
            "namespace N {\n".repeat(100_000),
            "}\n".repeat(100_000)
        ),
    )
    .unwrap();
    for (resource, limit) in [
        ("symbol:src/deep.rs#f", "bracket nesting"),
        ("symbol:src/ns.ts#f", "bracket nesting"),
        ("symbol:src/nested.rs#f", "container nesting"),
    ] {
        let (code, v) = s.call(
            ALICE,
            "resource.show",
            json!({"workspace_id": "ws1", "resource_id": resource}),
        );
        assert_eq!(code, 413, "{resource}: {v}");
        assert_eq!(v["error"]["code"], "resource_exhausted", "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains(limit), "{resource}: {m}");
        // A claim on it is refused the same way, and nothing is granted.
        let (code, v) = s.acquire(ALICE, resource, "write", &format!("c-{resource}"));
        assert_eq!(code, 413, "{v}");
    }
    let listed = s.ok(ALICE, "claim.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["claims"], json!([]));
    // Ordinary files still resolve.
    let v = s.ok(
        ALICE,
        "resource.show",
        json!({"workspace_id": "ws1", "resource_id": "symbol:src/lib.rs#b"}),
    );
    assert_eq!(v["resource"]["span"], json!({"start": 5, "end": 7}));
}
