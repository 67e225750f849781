//! The web page in a real browser (headless Chromium driven by Selenium): an approver
//! approves and a viewer gets no button, a decider approves a delivery with a reason, and a
//! candidate and a proposal each go all the way through the pages alone.

use crate::serve_ui::{awaiting_approval, awaiting_decision, get, sign_in};
use crate::support::daemon::{ALICE, BOB, ERIN, Server};
use crate::support::repo::git;
use serde_json::{Value, json};

/// Runs the Selenium script (tests/fixtures/ui_browser.py) with `steps` against `s`; returns
/// the pages it saw. Screenshots land in target/ui-screenshots/.
pub fn browse(s: &Server, steps: Value) -> Vec<Value> {
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            std::path::Path::new(tool).exists(),
            "{tool} is missing: run scripts/install-prereqs.sh (Debian's chromium and chromium-driver)"
        );
    }
    let job = json!({"base": format!("http://{}", s.addr), "shots": shots, "steps": steps});
    let v = crate::support::python_json("ui_browser.py", s.dir.path(), &job);
    v["pages"].as_array().unwrap().clone()
}

pub fn has_button(page: &Value, label: &str) -> bool {
    page["buttons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b == label)
}

#[test]
fn in_a_real_browser_an_approver_approves_and_a_viewer_gets_no_button() {
    let s = Server::fake_governed();
    let (id, aid) = awaiting_approval(&s);
    let page = format!("/ui/w/ws1/proposals/{id}");
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": BOB},
            {"do": "open", "path": page, "shot": "proposal-as-viewer"},
            {"do": "forge", "action": format!("/ui/w/ws1/approvals/{aid}/decide"),
             "fields": {"proposal_id": id, "approve": "true", "reason_md": "forged"}},
            {"do": "sign_in", "token": ERIN},
            {"do": "open", "path": "/ui/", "shot": "index"},
            {"do": "open", "path": page, "shot": "proposal-pending-approval"},
            {"do": "click", "button": "Approve", "fill": {"reason_md": "read it, fine"},
             "shot": "proposal-approved"},
        ]),
    );
    // [sign-in, viewer's page, forged post, sign-in, index, approver's page, after approving]
    assert_eq!(pages.len(), 7, "{pages:?}");
    let viewer = &pages[1];
    assert!(
        viewer["text"]
            .as_str()
            .unwrap()
            .contains("<script>alert(1)</script>"),
        "hostile text shows as text: {viewer}"
    );
    assert!(!has_button(viewer, "Approve"), "{viewer}");
    assert!(
        pages[2]["text"].as_str().unwrap().contains("CSRF"),
        "{}",
        pages[2]
    );
    assert!(pages[4]["text"].as_str().unwrap().contains(&id));
    assert!(has_button(&pages[5], "Approve"), "{}", pages[5]);
    let after = &pages[6];
    assert!(
        after["path"].as_str().unwrap().ends_with(&page[1..]),
        "{after}"
    );
    assert!(!has_button(after, "Approve"));
    assert!(
        after["text"].as_str().unwrap().contains("read it, fine"),
        "{after}"
    );
    let text = after["text"].as_str().unwrap();
    assert!(
        text.contains("approved") && text.contains("member:erin"),
        "{after}"
    );
}

#[test]
fn in_a_real_browser_a_decider_approves_a_delivery() {
    use crate::support::daemon::{DAVE, cand};
    let s = Server::fake();
    let (cid, _) = awaiting_decision(&s);
    let page = format!("/ui/w/ws1/candidates/{cid}");
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": BOB},
            {"do": "open", "path": page, "shot": "candidate-as-viewer"},
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": page, "shot": "candidate-as-requester"},
            {"do": "sign_in", "token": DAVE},
            {"do": "open", "path": page, "shot": "candidate-requested"},
            {"do": "click", "button": "Approve delivery", "shot": "candidate-approved",
             "fill": {"reason": "read every file <b>twice</b>"}},
        ]),
    );
    assert_eq!(pages.len(), 7, "{pages:?}");
    let requester = pages[3]["text"].as_str().unwrap();
    assert!(
        requester
            .contains("You requested this delivery. This workspace has distinct_approver = true"),
        "{requester}"
    );
    assert!(!has_button(&pages[3], "Approve delivery"));
    // Each who cannot decide is told why.
    assert!(
        pages[1]["text"]
            .as_str()
            .unwrap()
            .contains("Deciding a delivery needs the decide permission in this workspace"),
        "{}",
        pages[1]
    );
    // The decision comes before the diff.
    let decider = pages[5]["text"].as_str().unwrap();
    let (form, diff) = (
        decider.find("Reason (kept with the decision)").unwrap(),
        decider.find("Combined diff").unwrap(),
    );
    assert!(form < diff, "the decision form is at the top: {decider}");
    let after = pages[6]["text"].as_str().unwrap();
    assert!(
        after.contains("read every file <b>twice</b>"),
        "the reason, as text: {after}"
    );
    assert!(!has_button(&pages[1], "Approve delivery"));
    assert!(
        pages[1]["text"]
            .as_str()
            .unwrap()
            .contains("<img src=x onerror=alert(1)>")
    );
    assert!(has_button(&pages[5], "Approve delivery"), "{}", pages[5]);
    assert!(!has_button(&pages[6], "Approve delivery"), "{}", pages[6]);
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&now)["delivery_request"]["state"], "approved");
    assert_eq!(cand(&now)["delivery_request"]["decided_by"], "member:dave");
    assert_eq!(
        cand(&now)["delivery_request"]["decision_reason"],
        "read every file <b>twice</b>"
    );
}

#[test]
fn in_a_real_browser_a_candidate_goes_from_conflicted_to_delivered_through_the_page_alone() {
    use crate::support::daemon::{DAVE, cand, conflicted};
    let s = Server::fake();
    let (cid, _, _) = conflicted(&s);
    let page = format!("/ui/w/ws1/candidates/{cid}");
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": page, "shot": "walk-1-conflicted"},
            {"do": "click", "button": "Resolve", "fill": {"content_0": "resolved by a human\n"},
             "shot": "walk-2-frozen"},
            {"do": "click", "button": "Verify", "fill": {"argv": "true"}, "shot": "walk-3-verifying"},
            {"do": "open", "path": page, "until": "Request delivery", "shot": "walk-4-verified"},
            {"do": "click", "button": "Request delivery", "shot": "walk-5-requested"},
            {"do": "sign_in", "token": DAVE},
            {"do": "open", "path": page, "shot": "walk-6-to-decide"},
            {"do": "click", "button": "Approve delivery", "shot": "walk-7-approved"},
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": page, "until": "Deliver", "shot": "walk-8-to-deliver"},
            {"do": "click", "button": "Deliver", "shot": "walk-9-delivered"},
        ]),
    );
    assert!(has_button(&pages[1], "Resolve"), "{}", pages[1]);
    assert!(
        !has_button(&pages[2], "Resolve") && has_button(&pages[2], "Verify"),
        "{}",
        pages[2]
    );
    assert!(has_button(&pages[4], "Request delivery"), "{}", pages[4]);
    assert!(
        !has_button(&pages[5], "Request delivery"),
        "one open request: {}",
        pages[5]
    );
    assert!(
        !has_button(&pages[5], "Approve delivery"),
        "alice requested: dave decides"
    );
    assert!(has_button(&pages[7], "Approve delivery"), "{}", pages[7]);
    assert!(has_button(&pages[10], "Deliver"), "{}", pages[10]);
    assert!(!has_button(&pages[11], "Deliver"), "{}", pages[11]);
    // Delivered: the header says so, and no new request is offered against the moved target.
    assert!(
        pages[11]["text"]
            .as_str()
            .unwrap()
            .contains("delivery delivered (landed at"),
        "{}",
        pages[11]
    );
    assert!(!has_button(&pages[11], "Request delivery"), "{}", pages[11]);
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    // What landed, where and when; never the false alarm that the target moved (it moved
    // to the very commit this delivery landed).
    let delivered = pages[11]["text"].as_str().unwrap();
    let receipt = &cand(&now)["delivery_receipt"];
    assert!(!delivered.contains("The target moved"), "{delivered}");
    assert!(
        delivered.contains(&format!(
            "Delivered: refs/heads/main moved from {} to {}",
            receipt["previous_revision"].as_str().unwrap(),
            receipt["landed_revision"].as_str().unwrap()
        )),
        "{delivered}"
    );
    assert!(
        delivered.contains("The target is still at the landed commit."),
        "{delivered}"
    );
    assert!(
        delivered.contains(receipt["receipt_id"].as_str().unwrap()),
        "{delivered}"
    );
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    let c = cand(&now);
    assert_eq!(c["delivery_request"]["state"], "delivered", "{now}");
    assert_eq!(c["delivery_receipt"]["result"], "landed", "{now}");
    let landed = std::process::Command::new("git")
        .args(["cat-file", "-p", "main:f.txt"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&landed.stdout),
        "resolved by a human\n",
        "the target ref carries exactly the resolution typed into the page"
    );
}

#[test]
fn in_a_real_browser_a_proposal_goes_from_pending_to_applied_through_the_page_alone() {
    // Validation runs git in the git image and the expected test in the sandbox: real Docker.
    if !crate::toolchain::built("git") {
        return;
    }
    let s = Server::governed_with(
        "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
         [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n",
    );
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "file:README",
               "mode": "write", "idempotency_key": "c1"}),
    );
    std::fs::write(s.repo.join("README"), "base\nvia the page\n").unwrap();
    let diff = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["checkout", "-q", "--", "README"]);
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "From the page",
               "summary_md": "s", "patch": String::from_utf8(diff.stdout).unwrap(),
               "expected_tests": [["sh", "-c", "grep -q page README"]], "idempotency_key": "p1"}),
    );
    let id = p["proposal"]["proposal_id"].as_str().unwrap().to_string();
    let page = format!("/ui/w/ws1/proposals/{id}");
    let pages = browse(
        &s,
        json!([
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": page, "shot": "apply-1-pending"},
            {"do": "click", "button": "Request review", "shot": "apply-2-in-review"},
            {"do": "sign_in", "token": BOB},
            {"do": "open", "path": page, "shot": "apply-3-to-vote"},
            {"do": "click", "button": "Cast vote", "fill": {"reason_md": "reads well"},
             "shot": "apply-4-voted"},
            {"do": "sign_in", "token": ALICE},
            {"do": "open", "path": page, "shot": "apply-5-to-validate"},
            {"do": "click", "button": "Validate", "shot": "apply-6-validating"},
            {"do": "open", "path": page, "until": "Apply", "shot": "apply-7-valid"},
            {"do": "click", "button": "Apply", "shot": "apply-8-applied"},
        ]),
    );
    assert!(has_button(&pages[1], "Request review"), "{}", pages[1]);
    assert!(
        !has_button(&pages[4], "Request review"),
        "only the author asks for review"
    );
    assert!(has_button(&pages[4], "Cast vote"), "{}", pages[4]);
    assert!(!has_button(&pages[4], "Apply"), "bob may not apply");
    assert!(
        !has_button(&pages[7], "Cast vote"),
        "the author never votes"
    );
    assert!(has_button(&pages[9], "Apply"), "{}", pages[9]);
    // The headline says where it stands: blocked on bob's vote, then validation, then ready.
    let text = |i: usize| pages[i]["text"].as_str().unwrap().to_string();
    assert!(text(4).contains("Blocked: "), "{}", text(4));
    assert!(
        text(4).contains("votes approve"),
        "who may act: {}",
        text(4)
    );
    assert!(
        text(7).contains("Approvable: validate the current revision"),
        "{}",
        text(7)
    );
    assert!(text(9).contains("Ready to apply"), "{}", text(9));
    // The expected test, with its result on the current revision, and the diff itself.
    assert!(text(9).contains("grep -q page README"), "{}", text(9));
    assert!(text(9).contains("passed"), "{}", text(9));
    assert!(text(9).contains("+via the page"), "{}", text(9));
    assert!(
        text(10).contains("nothing more can be decided"),
        "{}",
        text(10)
    );
    let done = &pages[10];
    assert!(!has_button(done, "Apply"), "{done}");
    assert!(
        done["text"].as_str().unwrap().contains("accepted"),
        "{done}"
    );
    assert_eq!(
        std::fs::read_to_string(s.repo.join("README")).unwrap(),
        "base\nvia the page\n",
        "the worktree has exactly the validated bytes"
    );
    let listed = s.ok(ALICE, "transaction.list", json!({"workspace_id": "ws1"}));
    assert_eq!(listed["transactions"][0]["status"], "applied", "{listed}");
    // The transaction's page: labelled fields, each path with its digests before and after,
    // each approval once, a link to its proposal; no raw record.
    let t = s.ok(
        ALICE,
        "transaction.show",
        json!({"workspace_id": "ws1", "transaction_id": listed["transactions"][0]["transaction_id"]}),
    )["transaction"]
        .clone();
    let cookie = sign_in(&s, ALICE);
    let (status, _, page) = get(
        &s,
        &cookie,
        &format!(
            "/ui/w/ws1/transactions/{}",
            t["transaction_id"].as_str().unwrap()
        ),
    );
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<th>HEAD</th>") && page.contains("<th>Approvals</th>"),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<code>{}</code> → <code>{}</code>",
            t["head_before"].as_str().unwrap(),
            t["head_after"].as_str().unwrap()
        )),
        "{page}"
    );
    let after = t["hashes"][0]["after"]["sha256"].as_str().unwrap();
    assert!(
        page.contains(&format!("file <code>{after}</code>")),
        "{page}"
    );
    for a in t["approvals"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        assert_eq!(
            page.matches(&format!("<code>{a}</code>")).count(),
            1,
            "{a} once: {page}"
        );
    }
    assert!(page.contains(&format!(
        "href=\"/ui/w/ws1/proposals/{}\"",
        t["proposal_id"].as_str().unwrap()
    )));
    assert!(
        !page.contains("<th>hashes</th>") && !page.contains("<th>transaction_id</th>"),
        "no raw record: {page}"
    );
}
