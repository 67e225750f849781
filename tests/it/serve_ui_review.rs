//! The proposal page as an approver decides from it (fake runtime; the page, not the sandbox):
//! the diff of the current revision per file with anchors, added and removed lines marked for
//! CSS, renames, mode changes and binary files shown plainly, content that looks like a patch
//! header kept as content, hostile file names and contents escaped (checked in a real browser:
//! no alert, no script), and "Request human approval" gone once the revision is approved.

use crate::serve_ui::{get, sign_in};
use crate::serve_ui_browser::{browse, has_button};
use crate::support::daemon::{ALICE, BOB, ERIN, Server};
use crate::support::repo::git;
use serde_json::json;

const EVIL: &str = "<img src=x onerror=alert(7)>.txt";

fn hostile_patch(s: &Server) -> String {
    std::fs::write(s.repo.join("old.txt"), "stays\n").unwrap();
    std::fs::write(s.repo.join("run.sh"), "echo\n").unwrap();
    git(&s.repo, &["add", "-A"]);
    git(&s.repo, &["commit", "-q", "-m", "files"]);
    std::fs::write(
        s.repo.join(EVIL),
        "<script>alert(8)</script>\ndiff --git a/fake b/fake\n--- a/fake\n",
    )
    .unwrap();
    std::fs::write(s.repo.join("README"), "rebased\n\u{1b}[31mred\u{1b}[0m\n").unwrap();
    git(&s.repo, &["mv", "old.txt", "new.txt"]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        s.repo.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(s.repo.join("blob.bin"), [0u8, 1, 2, 255, 0, 9]).unwrap();
    git(&s.repo, &["add", "-A"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--cached", "--no-color", "--binary", "-M"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_proposal_page_shows_the_diff_per_file_escaped_and_the_approval_state() {
    let s = Server::fake_governed_with(
        "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n[workspaces.ws1.policy]\nhuman_approval = \"always\"\n",
    );
    let patch = hostile_patch(&s);
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c"}),
    );
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "Files", "summary_md": "s",
               "patch": patch, "rollback_notes": "revert <it>",
               "expected_tests": [["sh", "-c", "test -f new.txt"]], "idempotency_key": "p"}),
    )["proposal"]
        .clone();
    let id = p["proposal_id"].as_str().unwrap().to_string();
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "r"}),
    );
    let path = format!("/ui/w/ws1/proposals/{id}");

    // The HTML: one anchored section per file, lines marked, nothing unescaped.
    let cookie = sign_in(&s, BOB);
    let (status, _, html) = get(&s, &cookie, &path);
    assert_eq!(status, 200, "{html}");
    for i in 0..5 {
        assert!(
            html.contains(&format!("id=\"file-{i}\"")),
            "file-{i} section"
        );
        assert!(
            html.contains(&format!("href=\"{path}?page=0#file-{i}\"")),
            "file-{i} link"
        );
    }
    // The file list, with its totals, comes first: before the summary and the diff.
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("{needle:?}: {html}"))
    };
    assert!(at("Files of the current revision") < at("Summary (as written by its author)"));
    assert!(html.contains("5 files changed, "), "{html}");
    assert!(
        !html.contains("id=\"file-5\""),
        "content that looks like a header is no file"
    );
    assert!(
        html.contains("<span class=\"add\">+diff --git a/fake b/fake\n</span>"),
        "{html}"
    );
    assert!(html.contains("<span class=\"add\">+--- a/fake\n</span>"));
    assert!(
        html.contains("<span class=\"del\">"),
        "the README loses its old line"
    );
    assert!(!html.contains("<script>alert(8)"), "contents are escaped");
    assert!(!html.contains("<img src=x"), "names are escaped");
    assert!(html.contains("&lt;img src=x onerror=alert(7)&gt;.txt"));
    assert!(
        !html.contains('\u{1b}'),
        "control characters are shown, not sent"
    );
    assert!(html.contains("binary: not shown"));
    assert!(html.contains("mode 100644 → 100755"), "{html}");
    assert!(html.contains("old.txt</code> → <code>new.txt"), "{html}");
    assert!(html.contains("revert &lt;it&gt;"), "rollback notes");
    assert!(html.contains("test -f new.txt") && html.contains("not run"));
    assert!(html.contains("Blocked: "), "{html}");

    // bob's overview: the proposal waits for his vote; the empty sections say so.
    let (_, _, overview) = get(&s, &cookie, "/ui/");
    assert!(
        overview.contains("review: your vote on the current revision"),
        "{overview}"
    );
    assert!(overview.contains(&id));
    assert!(
        overview.contains("No candidates in this workspace."),
        "{overview}"
    );
    assert!(
        overview.contains(">blocked<"),
        "the verdict column: {overview}"
    );

    // In a real browser, nothing runs; then the approval flow: once approved, no second ask.
    s.ok(
        BOB,
        "vote.cast",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": p["current_revision"],
               "vote": "approve", "reason_md": "ok", "idempotency_key": "v"}),
    );
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": path, "shot": "review-1-diff-hostile"},
            {"do": "click", "button": "Request human approval", "shot": "review-2-asked"},
            {"do": "sign_in", "token": ERIN},
            {"do": "open", "path": "/ui/", "shot": "review-3-overview-waiting"},
            {"do": "open", "path": path, "shot": "review-3-to-approve"},
            {"do": "click", "button": "Approve", "fill": {"reason_md": "fine"}, "shot": "review-4-approved"},
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": path, "shot": "review-5-after"},
        ]),
    );
    let text = pages[1]["text"].as_str().unwrap();
    assert!(
        text.contains("<script>alert(8)</script>"),
        "shown as text: {text}"
    );
    assert!(text.contains(EVIL), "{text}");
    assert!(has_button(&pages[1], "Request human approval"));
    assert!(
        !has_button(&pages[2], "Request human approval"),
        "one pending at a time"
    );
    let erins = pages[4]["text"].as_str().unwrap();
    assert!(
        erins.contains("decide the human approval (asked by member:alice)"),
        "{erins}"
    );
    assert!(has_button(&pages[5], "Approve"), "{}", pages[5]);
    assert!(
        !has_button(&pages[8], "Request human approval"),
        "approved already: {}",
        pages[8]
    );
    assert!(
        pages[8]["text"]
            .as_str()
            .unwrap()
            .contains("Approvable: validate"),
        "{}",
        pages[8]
    );
    let (_, _, after) = get(&s, &cookie, "/ui/");
    assert!(!after.contains("review: your vote"), "bob voted: {after}");
}

/// The candidate page a decider reads: the summary of what is approved first (the target still
/// current or not, the selected verifications with status, environment and expiry), the
/// request as labelled fields, the verifications outside the request marked, each input with
/// its commit subject and author, the diff before the decision form.
#[test]
fn the_candidate_page_puts_the_decision_summary_and_the_decision_first() {
    use crate::delivery::{frozen, settled, verify};
    let s = Server::fake();
    let (cid, rev, _) = frozen(&s);
    let failed = verify(&s, &cid, &rev, &["fake-exit", "1", "broke"], 60, "v1");
    let passed = verify(&s, &cid, &rev, &["true"], 60, "v2");
    assert_eq!(settled(&s, &cid, &failed)["status"], "failed");
    assert_eq!(settled(&s, &cid, &passed)["status"], "passed");
    s.ok(
        ALICE,
        "integration.request_delivery",
        json!({"workspace_id": "ws1", "candidate_id": cid, "candidate_revision": rev,
               "verification_ids": [passed], "action": "update_ref", "idempotency_key": "r"}),
    );
    let path = format!("/ui/w/ws1/candidates/{cid}");
    let dave = sign_in(&s, crate::support::daemon::DAVE);
    let (status, _, html) = get(&s, &dave, &path);
    assert_eq!(status, 200, "{html}");
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not on the page: {html}"))
    };
    assert!(
        at("The target is still at") < at("Inputs, in order"),
        "the summary comes first"
    );
    assert!(html.contains(&format!(
        "Not part of the delivery request: <a href=\"{path}#verification-{failed}\"><code>{failed}</code></a>"
    )));
    assert!(!html.contains(&format!(
        "Not part of the delivery request: <a href=\"{path}#verification-{passed}\""
    )));
    assert!(at("<th>Requested by</th>") > at("Delivery request"));
    assert!(html.contains("<th>Decided by</th><td><span class=\"badge\">not yet</span>"));
    // frozen() commits on branch "a" with message "a" as the test user.
    assert!(html.contains("<strong>a</strong><br>by "), "{html}");
    // The decision sits under its summary, above the inputs and the diff it weighs (which the
    // summary's verifications and target check already stand for).
    assert!(
        at("The target is still at") < at("Approve delivery")
            && at("Approve delivery") < at("Inputs, in order")
            && at("Approve delivery") < at("Combined diff"),
        "the decision is at the top"
    );
    assert!(html.contains("name=\"reason\""), "a reason field: {html}");
    // The files it changes, with their counts, before the inputs and the diff; the totals are
    // the diff's own added and removed lines.
    assert!(at("<h2>Files</h2>") < at("Inputs, in order"), "{html}");
    let stat = &html[at("<p class=\"diffstat\">")..];
    let stat = &stat[..stat.find("</p>").unwrap()];
    let diff = &html[at("Combined diff")..];
    let (adds, dels) = (
        diff.matches("<span class=\"add\">+").count()
            - diff.matches("<span class=\"add\">+++ ").count(),
        diff.matches("<span class=\"del\">-").count()
            - diff.matches("<span class=\"del\">--- ").count(),
    );
    assert!(
        stat.contains(&format!(">+{adds}<")) && stat.contains(&format!(">-{dels}<")),
        "{stat} vs +{adds} -{dels}"
    );
    assert!(
        html.contains("<span class=\"add\">+hello\n</span>"),
        "{html}"
    );

    // The target moves: the summary says delivery would be refused.
    let base = s.head();
    let moved = s.agent_commit("elsewhere", &base, &[("other.txt", "x\n")]);
    git(&s.repo, &["update-ref", "refs/heads/main", &moved]);
    let (_, _, html) = get(&s, &dave, &path);
    assert!(html.contains("The target moved"), "{html}");
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": crate::support::daemon::DAVE},
            {"do": "open", "path": path, "shot": "candidate-decision-summary"},
        ]),
    );
    assert!(has_button(&pages[1], "Approve delivery"), "{}", pages[1]);
}

/// A resolution is shown as its own diff against the merge as it stood, attributed to the
/// member who wrote it: the line neither agent wrote is visible as the resolver's.
#[test]
fn a_resolution_is_its_own_diff_attributed_to_the_resolver() {
    let s = Server::fake();
    let (cid, version, _) = crate::support::daemon::conflicted(&s);
    let v = s.ok(
        ALICE,
        "integration.resolve",
        json!({"workspace_id": "ws1", "candidate_id": cid, "expected_version": version,
               "files": [{"path": "f.txt", "content": "A and B, <b>by hand</b>\n"}],
               "idempotency_key": "res"}),
    );
    let c = &v["candidate"];
    assert_eq!(c["state"], "frozen", "{v}");
    assert_eq!(c["resolutions"][0]["actor_key"], "member:alice");
    assert_eq!(c["resolutions"][0]["input"], 1);
    let commit = c["resolutions"][0]["commit"].as_str().unwrap();
    assert_eq!(
        git(&s.repo, &["show", "-s", "--format=%s", commit]),
        format!("airlock: resolution 0 of {cid} by member:alice")
    );
    let bob = sign_in(&s, BOB);
    let (_, _, html) = get(&s, &bob, &format!("/ui/w/ws1/candidates/{cid}"));
    assert!(
        html.contains("resolved by <strong>member:alice</strong>"),
        "{html}"
    );
    assert!(
        html.contains("<span class=\"add\">+A and B, &lt;b&gt;by hand&lt;/b&gt;\n</span>"),
        "the resolver's own line: {html}"
    );
    assert!(
        html.contains("<span class=\"del\">-&lt;&lt;&lt;&lt;&lt;&lt;&lt;"),
        "the markers it removed"
    );
}

/// Each input's transcript is quoted on the candidate page, escaped and bounded.
#[test]
fn an_inputs_transcript_is_quoted_escaped_and_bounded() {
    let s = Server::fake();
    let base = s.head();
    let a = s.agent_commit("t", &base, &[("t.txt", "t\n")]);
    let transcript = format!("<script>alert(9)</script>\n{}", "x".repeat(3000));
    let sub = s.evidence("run_a", &base, &a, Some(&transcript));
    let v = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "pt"),
    );
    let cid = v["candidate"]["candidate_id"].as_str().unwrap().to_string();
    let bob = sign_in(&s, BOB);
    let (_, _, html) = get(&s, &bob, &format!("/ui/w/ws1/candidates/{cid}"));
    assert!(
        html.contains("&lt;script&gt;alert(9)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script>alert(9)"));
    assert!(html.contains("(first 2048 bytes)"), "{html}");
    assert!(!html.contains(&"x".repeat(2100)), "bounded");
}

/// With a second revision, the page compares the files each revision leaves (the post-images
/// each one's validation made in the sandbox), per file, not the two patch texts; before both
/// are validated it says why there is no comparison yet.
#[test]
fn a_second_revision_is_compared_with_the_first_by_its_files() {
    if !crate::toolchain::built("git") {
        return;
    }
    let s = Server::governed_with("");
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c"}),
    );
    let patch_of = |files: &[(&str, &str)]| {
        for (path, text) in files {
            std::fs::write(s.repo.join(path), text).unwrap();
        }
        git(&s.repo, &["add", "-A"]);
        let out = std::process::Command::new("git")
            .args(["diff", "--cached", "--no-color"])
            .current_dir(&s.repo)
            .output()
            .unwrap();
        git(&s.repo, &["reset", "-q", "--hard"]);
        git(&s.repo, &["clean", "-q", "-fd"]);
        String::from_utf8(out.stdout).unwrap()
    };
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": patch_of(&[("README", "base\nfirst try\nkept\n")]), "idempotency_key": "p"}),
    );
    let id = p["proposal"]["proposal_id"].as_str().unwrap().to_string();
    let rev1 = p["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    let bob = sign_in(&s, BOB);
    let path = format!("/ui/w/ws1/proposals/{id}");
    let (_, _, one) = get(&s, &bob, &path);
    assert!(!one.contains("id=\"compare\""), "one revision only");
    // Revision 1 is validated while it is current (only the current revision can be).
    let v1 = crate::support::governed::validated(&s, &json!(id), &rev1, "1");
    let two = s.ok(
        ALICE,
        "proposal.attach_patch",
        json!({"workspace_id": "ws1", "proposal_id": id, "expected_version": p["proposal"]["version"],
               "patch": patch_of(&[("README", "base\nsecond <try>\nkept\n"), ("<b>notes.txt", "new & shiny\n")]),
               "idempotency_key": "a"}),
    );
    let rev2 = two["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, _, page) = get(&s, &bob, &path);
    assert!(
        page.contains("What the files hold after revision 2 against revision 1"),
        "{page}"
    );
    assert!(page.contains("Not compared yet"), "{page}");
    assert!(page.contains("validate the newer revision"), "{page}");

    let v2 = crate::support::governed::validated(&s, &json!(id), &rev2, "2");
    assert_eq!(
        (v1["valid"].clone(), v2["valid"].clone()),
        (json!(true), json!(true))
    );
    let (_, _, page) = get(&s, &bob, &path);
    let compared = &page[page.find("id=\"compare\"").expect("the comparison")..];
    // Each revision's validation is linked to its entry on the page.
    for v in [&v1, &v2] {
        let vid = v["validation_id"].as_str().unwrap();
        assert!(
            compared.contains(&format!("#validation-{vid}\"")),
            "{compared}"
        );
        assert!(
            page.contains(&format!("id=\"validation-{vid}\"")),
            "the anchor"
        );
    }
    assert!(
        compared.contains("2 touched path(s) compared; 2 differ between revision 1 and revision 2"),
        "{compared}"
    );
    // README: the lines between the two post-images, not a diff of the patches (no "-+").
    assert!(
        compared.contains("<span class=\"del\">-first try\n</span>"),
        "{compared}"
    );
    assert!(
        compared.contains("<span class=\"add\">+second &lt;try&gt;\n</span>"),
        "{compared}"
    );
    assert!(
        compared.contains("<span class=\"ctx\"> kept\n</span>"),
        "{compared}"
    );
    assert!(!compared.contains("-+first"), "{compared}");
    // The file only revision 2 creates: absent after revision 1, escaped name and content.
    assert!(compared.contains("&lt;b&gt;notes.txt"), "{compared}");
    assert!(
        compared.contains("<span class=\"add\">+new &amp; shiny\n</span>"),
        "{compared}"
    );
    assert!(!compared.contains("<b>notes"), "escaped");

    // In a real browser: the comparison reads as text (the hostile name too), and the newer
    // revision's validation link lands on its entry.
    let v2_id = v2["validation_id"].as_str().unwrap();
    let pages = crate::serve_ui_browser::browse(
        &s,
        json!([
            {"do": "sign_in", "token": BOB},
            {"do": "open", "path": path, "shot": "proposal-revisions-compared"},
            {"do": "follow", "href_ends": format!("#validation-{v2_id}"), "shot": "proposal-validation-followed"},
        ]),
    );
    let text = pages[1]["text"].as_str().unwrap();
    for shown in [
        "What the files hold after revision 2 against revision 1",
        "<b>notes.txt",
        "+second <try>",
        "-first try",
        "revision 1: absent; revision 2: a file of 12 bytes",
    ] {
        assert!(text.contains(shown), "{shown:?} not shown: {text}");
    }
    assert!(
        pages[2]["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{}#validation-{v2_id}", &path[1..])),
        "{}",
        pages[2]
    );

    // A comparison reads and shows at most MAX_COMPARED_FILES differing paths; the rest are
    // counted (here 102 paths, 101 differ).
    let many = |differ: &str| -> Vec<(String, String)> {
        (0..102)
            .map(|i| {
                let text = if i == 0 { "same\n" } else { differ };
                (format!("many/n{i:03}.txt"), text.to_string())
            })
            .collect()
    };
    let as_refs = |v: &[(String, String)]| -> String {
        let refs: Vec<(&str, &str)> = v.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        patch_of(&refs)
    };
    std::fs::create_dir_all(s.repo.join("many")).unwrap();
    let m1 = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": as_refs(&many("one\n")), "idempotency_key": "m1"}),
    )["proposal"]
        .clone();
    let m_id = m1["proposal_id"].clone();
    crate::support::governed::validated(&s, &m_id, m1["current_revision"].as_str().unwrap(), "m1");
    std::fs::create_dir_all(s.repo.join("many")).unwrap();
    let m2 = s.ok(
        ALICE,
        "proposal.attach_patch",
        json!({"workspace_id": "ws1", "proposal_id": m_id, "expected_version": m1["version"],
               "patch": as_refs(&many("two\n")), "idempotency_key": "m2"}),
    )["proposal"]
        .clone();
    crate::support::governed::validated(&s, &m_id, m2["current_revision"].as_str().unwrap(), "m2");
    let (_, _, page) = get(
        &s,
        &bob,
        &format!("/ui/w/ws1/proposals/{}", m_id.as_str().unwrap()),
    );
    let limit = airlock::engine::governed::validation::compare::MAX_COMPARED_FILES;
    assert!(
        page.contains(&format!(
            "102 touched path(s) compared; 101 differ between revision 1 and revision 2. The first {limit} are shown here."
        )),
        "{page}"
    );
    assert_eq!(page.matches("id=\"compare-").count(), limit);
    assert!(
        !page.contains("many/n000.txt</code> <span class=\"badge\">the same"),
        "same paths are counted, not shown"
    );

    // A revision replaced before anyone validated it has no files to compare by: said so.
    let q = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "t", "summary_md": "s",
               "patch": patch_of(&[("other.txt", "one\n")]), "idempotency_key": "q"}),
    )["proposal"]
        .clone();
    let q2 = s.ok(
        ALICE,
        "proposal.attach_patch",
        json!({"workspace_id": "ws1", "proposal_id": q["proposal_id"], "expected_version": q["version"],
               "patch": patch_of(&[("other.txt", "two\n")]), "idempotency_key": "q2"}),
    )["proposal"]
        .clone();
    let rev = q2["current_revision"].as_str().unwrap();
    crate::support::governed::validated(&s, &q["proposal_id"], rev, "q2");
    let (_, _, page) = get(
        &s,
        &bob,
        &format!("/ui/w/ws1/proposals/{}", q["proposal_id"].as_str().unwrap()),
    );
    assert!(
        page.contains(
            "the older revision was not validated (with a passing dry run) while it was current"
        ),
        "{page}"
    );
}

/// A large diff is paged by whole files within the line budget, with links between pages.
#[test]
fn a_large_proposal_diff_is_paged_by_whole_files() {
    let s = Server::fake_governed();
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "directory:",
               "mode": "write", "idempotency_key": "c"}),
    );
    let body: String = (0..1500).map(|i| format!("line {i}\n")).collect();
    for n in 0..3 {
        std::fs::write(s.repo.join(format!("big{n}.txt")), &body).unwrap();
    }
    git(&s.repo, &["add", "-A"]);
    let out = std::process::Command::new("git")
        .args(["diff", "--cached", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["reset", "-q", "--hard"]);
    git(&s.repo, &["clean", "-q", "-fd"]);
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "big", "summary_md": "s",
               "patch": String::from_utf8(out.stdout).unwrap(), "idempotency_key": "p"}),
    )["proposal"]
        .clone();
    let path = format!("/ui/w/ws1/proposals/{}", p["proposal_id"].as_str().unwrap());
    let bob = sign_in(&s, BOB);
    let (_, _, first) = get(&s, &bob, &path);
    assert!(first.contains("Page 1 of 3"), "{first}");
    assert!(first.contains("id=\"file-0\"") && !first.contains("id=\"file-1\""));
    assert!(
        first.contains(&format!("href=\"{path}?page=1#diff\"")),
        "{first}"
    );
    let (_, _, last) = get(&s, &bob, &format!("{path}?page=2"));
    assert!(
        last.contains("Page 3 of 3") && last.contains("id=\"file-2\""),
        "{last}"
    );
    assert!(!last.contains("id=\"file-0\""));
    // The file list on every page links each file to the page that shows it.
    assert!(
        first.contains(&format!("href=\"{path}?page=2#file-2\"")),
        "{first}"
    );
    assert!(last.contains("<span class=\"add\">+line 1499\n</span>"));
    // A page past the end shows the last one.
    let (status, _, past) = get(&s, &bob, &format!("{path}?page=99"));
    assert_eq!(status, 200);
    assert!(past.contains("Page 3 of 3"));
}
