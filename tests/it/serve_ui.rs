//! The web page at `/ui/` over real HTTP: sign-in and its cookie, the CSP, hostile strings an
//! agent wrote rendered as inert text, the approve button only for members who may decide,
//! CSRF and permissions checked on the server.

use crate::support::daemon::{ALICE, BOB, ERIN, RUN_A, Server};
use crate::support::http::{Headers, exchange};
use crate::support::repo::git;
use serde_json::{Value, json};

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

fn header<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

pub fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The sign-in form as a browser gets it: (its CSRF cookie, the form's CSRF value).
pub fn login_form(addr: &str) -> (String, String) {
    let (status, h, page) = exchange(addr, "GET", "/ui/login", &[], b"").unwrap();
    assert_eq!(status, 200);
    let cookie = header(&h, "set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui/login"] {
        assert!(cookie.contains(attr), "{cookie} lacks {attr}");
    }
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = String::from_utf8(page).unwrap();
    let at = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    let value = page[at..].split('"').next().unwrap().to_string();
    assert_eq!(cookie.split_once('=').unwrap().1, value);
    (cookie, value)
}

/// Posts the sign-in form with `token` as a browser on this site would (its CSRF cookie and
/// value), plus `extra` headers; (status, headers).
pub fn login_post(addr: &str, token: &str, extra: &[(&str, &str)]) -> (u16, Headers) {
    let (cookie, csrf) = login_form(addr);
    let body = form_encode(&[("csrf", &csrf), ("token", token)]);
    let mut headers = vec![FORM, ("Cookie", cookie.as_str())];
    headers.extend_from_slice(extra);
    let (status, h, _) = exchange(addr, "POST", "/ui/login", &headers, body.as_bytes()).unwrap();
    (status, h)
}

/// Signs in with `token`; returns the `Cookie` header value.
pub fn sign_in(s: &Server, token: &str) -> String {
    let (status, h) = login_post(&s.addr, token, &[]);
    assert_eq!(status, 303);
    let cookie = header(&h, "set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(attr), "{cookie} lacks {attr}");
    }
    cookie.split(';').next().unwrap().to_string()
}

pub fn get(s: &Server, cookie: &str, path: &str) -> (u16, Headers, String) {
    let (status, h, body) = exchange(&s.addr, "GET", path, &[("Cookie", cookie)], b"").unwrap();
    (status, h, String::from_utf8(body).unwrap())
}

pub fn post(s: &Server, cookie: &str, path: &str, pairs: &[(&str, &str)]) -> (u16, String) {
    let body = form_encode(pairs);
    let (status, _, body) = exchange(
        &s.addr,
        "POST",
        path,
        &[FORM, ("Cookie", cookie)],
        body.as_bytes(),
    )
    .unwrap();
    (status, String::from_utf8(body).unwrap())
}

/// The value of the first field named `name` in a page's forms.
pub fn field(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {name} on the page"));
    let rest = &page[at + marker.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// The session's CSRF token, read from a page's hidden field.
pub fn csrf(page: &str) -> String {
    field(page, "csrf")
}

pub const HOSTILE: &str = "<script>alert(1)</script> \"><img src=x onerror=alert(2)> \
                       <a href=\"javascript:alert(3)\">x</a> \u{1b}[31mred\u{1b}[0m";

pub fn proposal_with_hostile_text(s: &Server) -> Value {
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": "file:README",
               "mode": "write", "idempotency_key": "c1"}),
    );
    std::fs::write(s.repo.join("README"), format!("base\n{HOSTILE}\n")).unwrap();
    let out = std::process::Command::new("git")
        .args(["diff", "--no-color"])
        .current_dir(&s.repo)
        .output()
        .unwrap();
    git(&s.repo, &["checkout", "-q", "--", "README"]);
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "<b>bold</b> \"quoted\"",
               "summary_md": format!("{HOSTILE}\nsecond line"),
               "patch": String::from_utf8(out.stdout).unwrap(), "idempotency_key": "p1"}),
    );
    let id = p["proposal"]["proposal_id"].clone();
    s.ok(
        ALICE,
        "proposal.request_review",
        json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": "r1"}),
    );
    p
}

/// A proposal in review with hostile text and a pending human approval alice asked for;
/// returns (proposal id, approval id).
fn awaiting_approval(s: &Server) -> (String, String) {
    let p = proposal_with_hostile_text(s);
    let id = p["proposal"]["proposal_id"].as_str().unwrap().to_string();
    let rev = p["proposal"]["current_revision"]
        .as_str()
        .unwrap()
        .to_string();
    let asked = s.ok(
        ALICE,
        "human.request_approval",
        json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev, "idempotency_key": "q1"}),
    );
    let aid = asked["approval"]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    (id, aid)
}

#[test]
fn sign_in_hostile_text_and_decisions_on_the_web_page() {
    let s = Server::fake_governed();
    // Without a session every page sends the browser to sign in.
    let (status, h, _) = exchange(&s.addr, "GET", "/ui/", &[], b"").unwrap();
    assert_eq!(status, 303);
    assert_eq!(header(&h, "location"), Some("/ui/login"));
    let (status, h, login) = exchange(&s.addr, "GET", "/ui/login", &[], b"").unwrap();
    assert_eq!(status, 200);
    assert!(
        String::from_utf8(login)
            .unwrap()
            .contains("type=\"password\"")
    );
    let csp = header(&h, "content-security-policy").unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    // Unknown tokens and run tokens do not sign in.
    for (token, want) in [("nope", 401), (RUN_A, 403)] {
        let (status, h) = login_post(&s.addr, token, &[]);
        assert_eq!(status, want, "{token}");
        assert!(header(&h, "set-cookie").is_none());
    }
    // A sign-in form posted from another site signs nobody in: without the form's own
    // CSRF cookie and value, with a foreign Origin, or marked cross-site by the browser.
    let body = form_encode(&[("token", ALICE)]);
    let (status, h, _) = exchange(&s.addr, "POST", "/ui/login", &[FORM], body.as_bytes()).unwrap();
    assert_eq!(status, 403, "no CSRF cookie or value");
    assert!(header(&h, "set-cookie").is_none());
    let (cookie, _) = login_form(&s.addr);
    let wrong = form_encode(&[("csrf", "0123456789abcdef"), ("token", ALICE)]);
    let (status, h, _) = exchange(
        &s.addr,
        "POST",
        "/ui/login",
        &[FORM, ("Cookie", cookie.as_str())],
        wrong.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 403, "a CSRF value that is not the cookie's");
    assert!(header(&h, "set-cookie").is_none());
    for hostile in [
        ("Origin", "http://evil.example"),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let (status, h) = login_post(&s.addr, ALICE, &[hostile]);
        assert_eq!(status, 403, "{hostile:?}");
        assert!(header(&h, "set-cookie").is_none(), "{hostile:?}");
    }
    // The daemon's own origin is fine.
    let own = format!("http://{}", s.addr);
    let (status, _) = login_post(
        &s.addr,
        ALICE,
        &[("Origin", &own), ("Sec-Fetch-Site", "same-origin")],
    );
    assert_eq!(status, 303);
    // A made-up cookie is no session.
    let (status, _, _) = get(&s, "airlock_session=0123", "/ui/");
    assert_eq!(status, 303);

    let (id, aid) = awaiting_approval(&s);
    let page_path = format!("/ui/w/ws1/proposals/{id}");

    let erin = sign_in(&s, ERIN);
    let (status, _, index) = get(&s, &erin, "/ui/");
    assert_eq!(status, 200);
    assert!(index.contains(&page_path), "the index links the proposal");
    let (status, h, page) = get(&s, &erin, &page_path);
    assert_eq!(status, 200, "{page}");
    assert!(header(&h, "content-security-policy").is_some());
    // Nothing an agent wrote is markup: no element, no handler, no link, no raw escape.
    for forbidden in ["<script", "<img", "<b>", "href=\"javascript:", "\u{1b}"] {
        assert!(!page.contains(forbidden), "{forbidden:?} reached the page");
    }
    for escaped in [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&quot;&gt;&lt;img",
        "&lt;b&gt;bold",
    ] {
        assert!(page.contains(escaped), "{escaped} missing");
    }
    assert!(
        page.contains("\u{241b}[31mred"),
        "escapes are shown as control pictures"
    );
    // erin may approve: the button is there.
    assert!(page.contains("Approve</button>"), "{page}");
    let token = csrf(&page);
    let action = format!("/ui/w/ws1/approvals/{aid}/decide");

    // bob (view, review) sees the proposal but no approve button, and the server refuses his
    // hand-made POST anyway.
    let bob = sign_in(&s, BOB);
    let (_, _, bob_page) = get(&s, &bob, &page_path);
    assert!(!bob_page.contains("Approve</button>"));
    let bob_csrf = csrf(&bob_page); // his sign-out form
    let (status, body) = post(
        &s,
        &bob,
        &action,
        &[
            ("csrf", &bob_csrf),
            ("proposal_id", &id),
            ("approve", "true"),
            ("reason_md", "me"),
        ],
    );
    assert_eq!(status, 403, "{body}");
    // A forged POST without (or with another session's) CSRF token is refused, and changes
    // nothing.
    for forged in [None, Some(bob_csrf.as_str())] {
        let mut pairs = vec![
            ("proposal_id", id.as_str()),
            ("approve", "true"),
            ("reason_md", "x"),
        ];
        if let Some(t) = forged {
            pairs.push(("csrf", t));
        }
        let (status, body) = post(&s, &erin, &action, &pairs);
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("CSRF"), "{body}");
    }
    let (_, _, still) = get(&s, &erin, &page_path);
    assert!(still.contains("Approve</button>"), "still pending");

    // erin's own form approves, with the key the page made for it; sent twice (a browser
    // resubmitting), the second is a replay of the first, not an error.
    let form = &still[still.find(&action).expect("the approval form")..];
    let key = field(form, "idempotency_key");
    for _ in 0..2 {
        let (status, body) = post(
            &s,
            &erin,
            &action,
            &[
                ("csrf", &token),
                ("proposal_id", &id),
                ("idempotency_key", &key),
                ("approve", "true"),
                ("reason_md", "looks right"),
            ],
        );
        assert_eq!(status, 303, "{body}");
    }
    let (_, _, after) = get(&s, &erin, &page_path);
    assert!(!after.contains("Approve</button>"), "decided: no button");
    assert!(after.contains("approved"), "{after}");
    assert!(after.contains("member:erin"));

    // Signing out ends the session on the server.
    let (status, _) = post(&s, &erin, "/ui/logout", &[("csrf", &token)]);
    assert_eq!(status, 303);
    let (status, _, _) = get(&s, &erin, &page_path);
    assert_eq!(status, 303);
}

/// A frozen candidate with a hostile diff, a passed verification with a hostile argv and alice's
/// delivery request; returns (candidate id, the request_delivery answer).
fn awaiting_decision(s: &Server) -> (String, Value) {
    use crate::support::daemon::{cand, wait_for};
    let base = s.head();
    let a = s.agent_commit("a", &base, &[("app.txt", "<script>alert(1)</script>\n")]);
    let sub = s.evidence("run_a", &base, &a, None);
    let c = s.ok(
        ALICE,
        "integration.prepare",
        s.prepare_body(vec![sub], &base, "p"),
    );
    let cid = cand(&c)["candidate_id"].as_str().unwrap().to_string();
    let rev = cand(&c)["candidate_revision"].as_str().unwrap().to_string();
    let v = s.ok(
        ALICE,
        "integration.verify",
        json!({"workspace_id": "ws1", "candidate_id": cid,
        "candidate_revision": rev, "argv": ["true", "<img src=x onerror=alert(1)>"],
        "timeout_seconds": 60, "idempotency_key": "v1"}),
    );
    let vid = cand(&v)["verifications"][0]["verification_id"].clone();
    wait_for(
        || {
            let v = s.ok(
                ALICE,
                "integration.show",
                json!({"workspace_id": "ws1", "candidate_id": cid}),
            );
            cand(&v)["verifications"][0]["status"] != "running"
        },
        "the verification settles",
    );
    let r = s.ok(
        ALICE,
        "integration.request_delivery",
        json!({"workspace_id": "ws1",
        "candidate_id": cid, "candidate_revision": rev, "verification_ids": [vid],
        "action": "update_ref", "idempotency_key": "d1"}),
    );
    assert_eq!(cand(&r)["delivery_request"]["state"], "requested", "{r}");
    (cid, r)
}

#[test]
fn a_delivery_request_is_decided_on_the_candidate_page_by_a_member_with_decide_only() {
    use crate::support::daemon::{DAVE, cand};
    let s = Server::fake();
    let (cid, r) = awaiting_decision(&s);
    let path = format!("/ui/w/ws1/candidates/{cid}");

    // bob (view only) sees the candidate, its diff and verification, escaped, and no buttons.
    let bob = sign_in(&s, BOB);
    let (status, _, page) = get(&s, &bob, &path);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the diff is on the page, escaped"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "the argv is escaped"
    );
    assert!(!page.contains("<script") && !page.contains("<img"));
    assert!(!page.contains("Approve delivery"));
    // dave (decide) gets the buttons and approves.
    let dave = sign_in(&s, DAVE);
    let (_, _, page) = get(&s, &dave, &path);
    assert!(page.contains("Approve delivery"), "{page}");
    let token = csrf(&page);
    let req = &cand(&r)["delivery_request"];
    let request_id = req["request_id"].as_str().unwrap();
    let version = req["request_version"].to_string();
    let action = format!("{path}/decide");
    let fields = |csrf: &str| {
        vec![
            ("csrf".to_string(), csrf.to_string()),
            ("request_id".to_string(), request_id.to_string()),
            ("request_version".to_string(), version.clone()),
            ("approve".to_string(), "true".to_string()),
        ]
    };
    let send = |cookie: &str, f: Vec<(String, String)>| {
        let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        post(&s, cookie, &action, &pairs)
    };
    // bob's hand-made POST with his own session's token: refused by the server.
    let (_, _, bob_page) = get(&s, &bob, &path);
    let (status, body) = send(&bob, fields(&csrf(&bob_page)));
    assert_eq!(status, 403, "{body}");
    // dave's POST without the CSRF token: refused.
    let (status, _) = send(&dave, fields("").into_iter().skip(1).collect());
    assert_eq!(status, 403);
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&now)["delivery_request"]["state"],
        "requested",
        "nothing changed"
    );
    // The workflow forms: an unknown action is refused naming the field; bob (view only) cannot
    // verify by posting the form by hand; nothing without the CSRF token.
    let act = format!("{path}/act");
    let bob_token = csrf(&bob_page);
    let (status, body) = post(&s, &dave, &act, &[("csrf", &token), ("op", "rm -rf")]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("op:"), "{body}");
    let verify = |cookie: &str, csrf: &str| {
        post(
            &s,
            cookie,
            &act,
            &[
                ("csrf", csrf),
                ("op", "verify"),
                ("argv", "true"),
                ("idempotency_key", "ui-v"),
            ],
        )
    };
    assert_eq!(verify(&bob, &bob_token).0, 403);
    assert_eq!(verify(&dave, "").0, 403);
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(
        cand(&now)["verifications"].as_array().unwrap().len(),
        1,
        "no new verification"
    );
    let (status, body) = send(&dave, fields(&token));
    assert_eq!(status, 303, "{body}");
    let now = s.ok(
        ALICE,
        "integration.show",
        json!({"workspace_id": "ws1", "candidate_id": cid}),
    );
    assert_eq!(cand(&now)["delivery_request"]["state"], "approved", "{now}");
    assert_eq!(cand(&now)["delivery_request"]["decided_by"], "member:dave");
}

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

/// A `/ui/` path with no page, or a verb a page does not take, answers an HTML page with the
/// pages' headers; the API's paths keep the JSON envelope.
#[test]
fn paths_under_ui_without_a_page_answer_html_and_api_paths_json() {
    let s = Server::fake();
    for (verb, path, want) in [
        ("GET", "/ui/nope", 404),
        ("GET", "/ui/w/ws1/nothing/here", 404),
        ("PUT", "/ui/login", 405),
    ] {
        let (status, h, body) = exchange(&s.addr, verb, path, &[], b"").unwrap();
        let body = String::from_utf8(body).unwrap();
        assert_eq!(status, want, "{verb} {path}: {body}");
        assert!(
            header(&h, "content-type").unwrap().starts_with("text/html"),
            "{verb} {path}: {h:?}"
        );
        assert!(header(&h, "content-security-policy").is_some(), "{h:?}");
        assert!(body.contains("<!DOCTYPE html>"), "{body}");
        assert!(!body.contains("\"error\""), "{body}");
    }
    let (status, h, _) = exchange(&s.addr, "GET", "/api/v2/nope", &[], b"").unwrap();
    assert_eq!(status, 404);
    assert!(
        header(&h, "content-type")
            .unwrap()
            .starts_with("application/json")
    );
}
