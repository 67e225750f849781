//! The web page at `/ui/` over real HTTP: sign-in and its cookie, the CSP, hostile strings an
//! agent wrote rendered as inert text, the approve button only for members who may decide,
//! CSRF and permissions checked on the server.

use crate::support::daemon::{ALICE, BOB, ERIN, RUN_A, Server};
use crate::support::http::{Headers, exchange};
use crate::support::repo::git;
use serde_json::{Value, json};

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

pub(crate) fn header<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
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
pub(crate) fn awaiting_approval(s: &Server) -> (String, String) {
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
pub(crate) fn awaiting_decision(s: &Server) -> (String, Value) {
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

    // Every id on the page leads to its record: the selected verifications and the request to
    // their places on the page, and, once delivered, the receipt to its labelled fields.
    let delivered = s.ok(
        ALICE,
        "integration.deliver",
        json!({"workspace_id": "ws1", "candidate_id": cid, "request_id": request_id,
               "request_version": req["request_version"]}),
    );
    let receipt_id = cand(&delivered)["delivery_receipt"]["receipt_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, _, page) = get(&s, &bob, &path);
    for v in req["verification_ids"].as_array().unwrap() {
        let v = v.as_str().unwrap();
        assert!(
            page.contains(&format!("href=\"{path}#verification-{v}\"")),
            "{v} links to its section: {page}"
        );
        assert!(
            page.contains(&format!("id=\"verification-{v}\"")),
            "{v}'s section"
        );
    }
    for (id, anchor) in [
        (request_id, "delivery-request"),
        (receipt_id.as_str(), "receipt"),
    ] {
        assert!(
            page.contains(&format!("href=\"{path}#{anchor}\"><code>{id}</code></a>")),
            "{id}: {page}"
        );
        assert!(page.contains(&format!("id=\"{anchor}\"")), "{anchor}");
    }
    assert!(
        page.contains("<th>Landed revision</th>"),
        "labelled: {page}"
    );
    assert!(!page.contains("<th>landed_revision</th>"), "no raw record");
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
