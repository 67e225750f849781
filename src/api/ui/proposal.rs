//! The proposal page and its forms: review, votes, human approvals, validate, apply.

use super::*;
use crate::engine::governed::validation::compare::Comparison;

/// The active claims on a proposal's resources: named in `affected_resources`, or on a path the
/// revision touches.
pub(super) fn touching<'a>(
    claims: &'a Option<Value>,
    affected: &Value,
    files: &Value,
) -> Vec<&'a Value> {
    let named: Vec<&str> = affected
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let paths: Vec<&str> = files
        .as_array()
        .map(|a| {
            a.iter()
                .flat_map(|f| [f["old_path"].as_str(), f["new_path"].as_str()])
                .flatten()
                .collect()
        })
        .unwrap_or_default();
    claims
        .as_ref()
        .and_then(|c| c["claims"].as_array())
        .map(|all| {
            all.iter()
                .filter(|c| {
                    c["resource_id"]
                        .as_str()
                        .is_some_and(|r| named.contains(&r))
                        || c["resource"]["path"].as_str().is_some_and(|p| {
                            paths
                                .iter()
                                .any(|t| p.is_empty() || *t == p || t.starts_with(&format!("{p}/")))
                        })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Who may satisfy a missing requirement of the verdict, by its name.
fn who_satisfies(name: &str) -> String {
    match name {
        "approvals" => "a member with review votes approve on the current revision".into(),
        "no_blocking_votes" => {
            "the reviewers who voted reject, veto or revise vote again (or the author attaches a new revision)".into()
        }
        "security_review" => {
            "a reviewer holding the security role records a security review that passes".into()
        }
        "human_approval" => {
            "a member with approve decides a human approval (request one below)".into()
        }
        "tests" => "validate the current revision: its expected tests and checks must pass".into(),
        n => match n.strip_prefix("role:") {
            Some(role) => format!("a holder of role {role:?} votes approve"),
            None => "see the requirement's detail".into(),
        },
    }
}

/// The current revision's files at the top: each with its operation, mode, added and removed
/// lines, linked to its section on the diff page that shows it, and the totals.
fn files_of(files: &[Value], patch: &str, here: &str) -> Markup {
    let pages = super::diff::pages(&super::diff::split(patch));
    let page_of = |i: usize| pages.iter().position(|r| r.contains(&i)).unwrap_or(0);
    let sum = |k: &str| files.iter().filter_map(|f| f[k].as_u64()).sum::<u64>();
    html! {
        h2 { "Files of the current revision" }
        p.diffstat {
            (files.len()) @if files.len() == 1 { " file changed, " } @else { " files changed, " }
            span.satisfied { "+" (sum("added")) } " " span.blocked { "-" (sum("removed")) }
        }
        table {
            tr { th { "operation" } th { "path" } th { "mode" } th { "binary" } th { "+" } th { "-" } }
            @for (i, f) in files.iter().enumerate() {
                tr {
                    td { (value(&f["operation"])) }
                    td { a href=(format!("{here}?page={}#file-{i}", page_of(i))) { (file_path(f)) } }
                    td { (file_mode(f)) }
                    td { @if f["binary"] == true { span.badge { "binary" } } }
                    td.satisfied { (value(&f["added"])) }
                    td.blocked { (value(&f["removed"])) }
                }
            }
        }
    }
}

/// The verdict headline: what the page's reader can decide from at a glance.
fn headline(verdict: Option<&Value>, applicable: bool, state: Option<ProposalState>) -> Markup {
    let Some(v) = verdict.map(|v| &v["verdict"]) else {
        return html! { p.headline.waiting { "The policy's verdict could not be read." } };
    };
    let reqs = v["requirements"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let open: Vec<&Value> = reqs
        .iter()
        .filter(|r| r["state"] != "satisfied" && r["state"] != "overridden")
        .collect();
    html! {
        @match state {
            Some(s) if s.is_terminal() => p.headline.waiting { "This proposal is " (s.as_str()) ": nothing more can be decided." },
            Some(ProposalState::Pending) => p.headline.waiting { "Not in review yet: the author requests review first." },
            _ if open.is_empty() && applicable => p.headline.ready { "Ready to apply: every requirement is met and the current revision has a valid validation." },
            _ if open.is_empty() => p.headline.waiting { "Approvable: validate the current revision to apply it." },
            _ => div.headline.blocked {
                "Blocked: " (open.len()) " of " (reqs.len()) " requirements are not met"
                ul { @for r in &open {
                    li { strong { (value(&r["name"])) } " (" (value(&r["state"])) "): " (value(&r["detail"]))
                         " — " em { (who_satisfies(r["name"].as_str().unwrap_or(""))) } }
                } }
            },
        }
    }
}

pub(super) async fn proposal_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let body = json!({"workspace_id": ws, "proposal_id": id});
    let got = match call(&st, &s, "proposal.get", body.clone()).await {
        Ok(v) => v,
        Err(e) => return error_page(&e, &s),
    };
    let p = &got["proposal"];
    let current = p["current_revision"].as_str().unwrap_or("").to_string();
    let verdict = call(&st, &s, "policy.evaluate", body.clone()).await.ok();
    let votes = call(&st, &s, "vote.list", body.clone()).await.ok();
    let claims = call(
        &st,
        &s,
        "claim.list",
        json!({"workspace_id": ws, "status": "active", "limit": crate::limits::UI_CLAIMS_SHOWN}),
    )
    .await
    .ok();
    let transactions = call(
        &st,
        &s,
        "transaction.list",
        json!({"workspace_id": ws, "proposal_id": id}),
    )
    .await
    .ok();
    let approvals = st
        .service
        .reviews
        .approval_list(&s.actor, &ws, &id)
        .await
        .unwrap_or_default()
        .iter()
        .map(|a| json!(a))
        .collect::<Vec<Value>>();
    let can_approve = may(&st, &s, &ws, Permission::Approve);
    let approved_now = approvals.iter().any(|a| {
        a["state"] == json!(crate::domain::policy::ApprovalState::Approved)
            && a["revision"] == p["current_revision"]
    });
    // The page reads the views as the API shows them.
    let validations: Vec<Value> = st
        .service
        .validations
        .validation_list(&s.actor, &ws, &id)
        .await
        .unwrap_or_default()
        .iter()
        .map(|v| json!(v))
        .collect();
    let security_reviews = st
        .service
        .reviews
        .security_review_list(&s.actor, &ws, &id)
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| json!(r))
        .collect::<Vec<Value>>();
    let me = json!(format!("member:{}", s.member));
    let author = p["author"] == me;
    let status = &p["status"];
    let in_review = *status == json!(ProposalState::InReview);
    let act = format!("/ui/w/{}/proposals/{}/act", urlencode(&ws), urlencode(&id));
    let pending_approval = approvals.iter().any(|a| {
        a["state"] == json!(crate::domain::policy::ApprovalState::Pending)
            && a["revision"] == p["current_revision"]
    });
    // The newest complete, valid, unexpired validation of the current revision: what apply takes.
    let applicable = validations.iter().rev().find(|v| {
        v["revision"] == p["current_revision"]
            && v["valid"] == true
            && v["complete"] == true
            && v["expired"] == false
    });
    // The newest validation of the current revision, with its tests' records.
    let latest = match validations
        .iter()
        .rev()
        .find(|v| v["revision"] == p["current_revision"])
    {
        Some(v) => call(
            &st,
            &s,
            "patch.validation_show",
            json!({"workspace_id": ws, "validation_id": v["validation_id"]}),
        )
        .await
        .ok()
        .map(|r| r["validation"].clone()),
        None => None,
    };
    let patch = match st.service.proposals.read_patch(&current).await {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return error_page(&e, &s),
    };
    let diff_page: usize = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(0);
    // With several revisions: what the files hold after the newest against the one before,
    // from the post-images each one's validation made in the sandbox.
    let revisions = p["revisions"].as_array().cloned().unwrap_or_default();
    let comparison = match revisions.len() {
        0 | 1 => None,
        n if revisions[n - 1]["current"] != true => None,
        n => {
            let rev = |i: usize| revisions[i]["revision"].as_str().unwrap_or("").to_string();
            match st
                .service
                .validations
                .compare_revisions(&s.actor, &ws, &id, &rev(n - 2), &rev(n - 1))
                .await
            {
                Ok(c) => Some((c, format!("revision {}", n - 1), format!("revision {n}"))),
                Err(e) => return error_page(&e, &s),
            }
        }
    };
    let links = Links {
        ws: &ws,
        candidate: None,
        proposal: Some(&id),
    };
    let here = format!("/ui/w/{}/proposals/{}", urlencode(&ws), urlencode(&id));
    let button = |op: &str, label: &str| {
        html! {
            form method="post" action=(act) {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="op" value=(op);
                input type="hidden" name="revision" value=(current);
                input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                button type="submit" { (label) }
            }
        }
    };
    let stale = |v: &Value| v["revision"].as_str().is_some_and(|r| r != current);
    let state: Option<ProposalState> = serde_json::from_value(status.clone()).ok();
    let can = |e: ProposalEvent| state.is_some_and(|st| st.on(e).is_ok());
    // Reject: a reviewer or an admin, never the author; withdraw: the author only.
    let may_reject = can(ProposalEvent::Reject)
        && !author
        && (may(&st, &s, &ws, Permission::Review) || may(&st, &s, &ws, Permission::Admin));
    let may_withdraw =
        can(ProposalEvent::Withdraw) && author && may(&st, &s, &ws, Permission::Propose);
    let may_security = !state.is_none_or(ProposalState::is_terminal)
        && !author
        && may(&st, &s, &ws, Permission::Review)
        && st
            .service
            .reviews
            .holds_role(&s.actor, &ws, crate::domain::policy::SECURITY);
    let with_reason = |op: &str, label: &str, required: bool| {
        html! {
            form method="post" action=(act) {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="op" value=(op);
                input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                label { "Reason " input type="text" name="reason_md" required[required]; }
                " " button type="submit" { (label) }
            }
        }
    };
    page(
        &format!("Proposal {id}"),
        Some(&s),
        html! {
            (headline(verdict.as_ref(), applicable.is_some(), state))
            p { strong { (value(&p["title"])) } " · " (value(&p["status"])) " · by " (value(&p["author"]))
                " · risk " (value(&p["risk"])) " · revision " (value(&p["current_revision"])) }
            (files_of(got["files"].as_array().map(Vec::as_slice).unwrap_or(&[]), &patch, &here))
            h2 { "Summary (as written by its author)" } pre { (visible(p["summary_md"].as_str().unwrap_or(""))) }
            @if *status == json!(ProposalState::Pending) && author { (button("request_review", "Request review")) }
            @if in_review && !pending_approval && !approved_now
                && (author || [Permission::Review, Permission::Approve, Permission::Admin].into_iter().any(|x| may(&st, &s, &ws, x))) {
                (button("request_approval", "Request human approval"))
            }
            @if in_review && (author || may(&st, &s, &ws, Permission::Apply)) { (button("validate", "Validate")) }
            @if in_review && may(&st, &s, &ws, Permission::Apply) && let Some(v) = applicable {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="apply";
                    input type="hidden" name="validation_id" value=(v["validation_id"].as_str().unwrap_or(""));
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    button type="submit" { "Apply" }
                }
            }
            @if may_withdraw { (with_reason("withdraw", "Withdraw proposal", false)) }
            @if may_reject { (with_reason("reject", "Reject proposal", true)) }
            h2 { "Expected tests and required checks" }
            (tests_table(&p["expected_tests"], latest.as_ref()))
            h2 { "Rollback notes" }
            @match p["rollback_notes"].as_str().filter(|n| !n.is_empty()) {
                Some(n) => pre { (visible(n)) },
                None => p { "The author gave none." },
            }
            h2 { "Affected resources" }
            @match p["affected_resources"].as_array().filter(|a| !a.is_empty()) {
                Some(a) => ul { @for r in a { li { code { (value(r)) } } } },
                None => p { "None named beyond the touched paths." },
            }
            h2 id="diff" { "Diff of the current revision" }
            (super::diff::render(&patch, got["files"].as_array().map(Vec::as_slice).unwrap_or(&[]), diff_page,
                |n| format!("{here}?page={n}#diff")))
            @if let Some((c, old_name, new_name)) = &comparison {
                h2 id="compare" { "What the files hold after " (new_name) " against " (old_name) }
                @match c {
                    Comparison::Files { old_validation, new_validation, compared } => {
                        p { "Each touched path as each revision leaves it, from the files its validation's dry run made in the sandbox ("
                            (validation_link(&ws, &id, old_validation)) " and " (validation_link(&ws, &id, new_validation)) ")." }
                        (super::compare::render(compared, old_name, new_name))
                    }
                    Comparison::Unavailable(why) => p.missing { "Not compared yet: " (why) "." },
                }
            }
            h2 { "Revisions" }
            table {
                tr { th { "number" } th { "revision" } th { "bytes" } th { "created" } }
                @for r in p["revisions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    tr {
                        td { (value(&r["number"])) @if r["current"] != true { " " span.badge.stale { "not current" } } }
                        td { (value(&r["revision"])) } td { (value(&r["bytes"])) } td { (value(&r["created_at"])) }
                    }
                }
            }
            h2 { "Policy verdict" }
            @if let Some(v) = &verdict {
                table {
                    tr { th { "requirement" } th { "state" } th { "detail" } }
                    @for r in v["verdict"]["requirements"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                        tr {
                            td { (value(&r["name"])) }
                            td class=(r["state"].as_str().unwrap_or("")) { (value(&r["state"])) }
                            td { (value(&r["detail"])) }
                        }
                    }
                }
            }
            h2 { "Votes" }
            @let votes = votes.as_ref().and_then(|v| v["votes"].as_array()).map(Vec::as_slice).unwrap_or(&[]);
            @if votes.is_empty() { p { span.badge { "none" } } } @else {
                table {
                    tr { th { "voter" } th { "vote" } th { "roles" } th { "confidence" } th { "reason" } th { "revision" } th { "cast" } }
                    @for v in votes {
                        tr {
                            td { (value(&v["voter"])) } td { (value(&v["vote"])) }
                            td { (v["roles"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
                            td { (value(&v["confidence"])) } td { (value(&v["reason_md"])) }
                            td { @if stale(v) { span.badge.stale { "not current" } } @else { "current" }
                                 @if v["current"] == false { " " span.badge { "superseded" } } }
                            td { (value(&v["created_at"])) }
                        }
                    }
                }
            }
            @if in_review && !author && may(&st, &s, &ws, Permission::Review) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="vote";
                    input type="hidden" name="revision" value=(current);
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    label { "Vote on the current revision " select name="vote" {
                        @for v in ["approve", "approve_with_notes", "revise", "reject", "veto", "abstain"] {
                            option value=(v) { (v) }
                        }
                    } }
                    " " label { "Reason " input type="text" name="reason_md" required; }
                    " " button type="submit" { "Cast vote" }
                }
            }
            h2 { "Security reviews" }
            @if security_reviews.is_empty() { p { span.badge { "none" } } } @else {
                table {
                    tr { th { "reviewer" } th { "verdict" } th { "notes" } th { "revision" } th { "recorded" } }
                    @for r in &security_reviews {
                        tr {
                            td { (value(&r["reviewer"])) } td { (value(&r["verdict"])) } td { (value(&r["notes_md"])) }
                            td { @if stale(r) { span.badge.stale { "not current" } } @else { "current" } }
                            td { (value(&r["created_at"])) }
                        }
                    }
                }
            }
            @if may_security {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="security_review";
                    input type="hidden" name="revision" value=(current);
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    label { "Security verdict on the current revision " select name="verdict" {
                        @for v in crate::domain::policy::SecurityVerdict::ALL {
                            option value=(v.as_str()) { (v.as_str()) }
                        }
                    } }
                    " " label { "Notes " input type="text" name="notes_md" required; }
                    " " button type="submit" { "Record security review" }
                }
            }
            h2 { "Validations" }
            @if validations.is_empty() { p { span.badge { "none" } } }
            @for v in &validations {
                div id=(format!("validation-{}", v["validation_id"].as_str().unwrap_or(""))) {
                    @if stale(v) { span.badge.stale { "not current" } }
                    p { (value(&v["validation_id"])) " · valid " (value(&v["valid"])) " · complete " (value(&v["complete"]))
                        @if let Some(t) = v["for_transaction_id"].as_str() { " · for the retry of " (links.id(t)) } }
                    (rows(v["stages"].as_array().map(Vec::as_slice).unwrap_or(&[]), &["name", "state", "reason"], |_| None))
                }
            }
            h2 { "Human approvals" }
            @if approvals.is_empty() { p { span.badge { "none" } } }
            @for a in &approvals {
                div id=(format!("approval-{}", a["approval_id"].as_str().unwrap_or(""))) {
                    @if stale(a) { span.badge.stale { "not current" } }
                    (links.value(a))
                    @if a["state"] == json!(crate::domain::policy::ApprovalState::Pending) && can_approve && !stale(a) {
                        form method="post" action=(format!("/ui/w/{}/approvals/{}/decide", urlencode(&ws), urlencode(a["approval_id"].as_str().unwrap_or("")))) {
                            input type="hidden" name="csrf" value=(s.csrf);
                            input type="hidden" name="proposal_id" value=(id);
                            input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                            label { "Reason " input type="text" name="reason_md" required; }
                            " "
                            button type="submit" name="approve" value="true" { "Approve" }
                            " "
                            button type="submit" name="approve" value="false" { "Deny" }
                        }
                    }
                }
            }
            h2 { "Claims on the touched resources" }
            table {
                tr { th { "resource" } th { "holder" } th { "mode" } th { "fencing token" } th { "expires" } }
                @for c in touching(&claims, &p["affected_resources"], &got["files"]) {
                    tr {
                        td { (value(&c["resource_id"])) } td { (value(&c["holder"])) } td { (value(&c["mode"])) }
                        td { (value(&c["fencing_token"])) }
                        td { (value(&c["expires_at"])) " (" (countdown(&st, &c["expires_at"])) ")" }
                    }
                }
            }
            h2 { "Transactions" }
            @if let Some(t) = &transactions {
                (rows(t["transactions"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                    &["transaction_id", "status", "created_at"],
                    |t| t["transaction_id"].as_str().map(|tid| format!("/ui/w/{}/transactions/{}", urlencode(&ws), urlencode(tid)))))
            }
            h2 { "Decisions" } (links.value(&got["decisions"]))
        },
    )
}

/// A validation's id as a link to its entry in the page's list of validations.
fn validation_link(ws: &str, proposal: &str, validation_id: &str) -> Markup {
    html! {
        a href=(format!("/ui/w/{}/proposals/{}#validation-{}", urlencode(ws), urlencode(proposal), urlencode(validation_id))) {
            code { (validation_id) }
        }
    }
}

/// Largest piece of a test's output shown on the page (the rest is in its verification).
const TEST_OUTPUT_SHOWN: usize = 4096;

/// Each expected test and required check with its latest result on the current revision.
fn tests_table(expected: &Value, latest: Option<&Value>) -> Markup {
    let expected = expected.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let runs = latest
        .and_then(|v| v["tests"].as_array())
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let checks = latest
        .and_then(|v| v["checks"].as_array())
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let check_of = |vid: &Value| {
        checks
            .iter()
            .find(|c| c["verification_id"] == *vid)
            .and_then(|c| c["name"].as_str())
    };
    html! {
        @if expected.is_empty() && runs.is_empty() {
            p { "No expected tests, and no required check has run yet." }
        } @else {
            @if latest.is_none() { p.missing { "Not validated yet: none of these has run on the current revision." } }
            table {
                tr { th { "what" } th { "argv" } th { "status" } th { "exit" } th { "output" } }
                @for t in runs {
                    tr id=(format!("verification-{}", t["verification_id"].as_str().unwrap_or(""))) {
                        td { @match check_of(&t["verification_id"]) {
                            Some(n) => { "required check " strong { (visible(n)) } },
                            None => "expected test",
                        } }
                        td { code { (value(&t["argv"])) } }
                        td class=(if t["status"] == "passed" { "satisfied" } else { "blocked" }) { (value(&t["status"])) }
                        td { (value(&t["exit_code"])) }
                        td { pre { (visible(&t["output"].as_str().unwrap_or("").chars().take(TEST_OUTPUT_SHOWN).collect::<String>())) } }
                    }
                }
                @if runs.is_empty() {
                    @for argv in expected {
                        tr { td { "expected test" } td { code { (value(argv)) } } td.missing { "not run" } td {} td {} }
                    }
                }
            }
        }
    }
}

/// "old -> new" for a rename or copy, the one path otherwise (`/dev/null` sides are absent).
fn file_path(f: &Value) -> Markup {
    match (f["old_path"].as_str(), f["new_path"].as_str()) {
        (Some(a), Some(b)) if a != b => html! { code { (visible(a)) } " → " code { (visible(b)) } },
        (_, Some(p)) | (Some(p), None) => html! { code { (visible(p)) } },
        (None, None) => html! { span.badge { "none" } },
    }
}

/// "100644 → 100755" when the mode changes, the one mode otherwise.
fn file_mode(f: &Value) -> Markup {
    match (f["old_mode"].as_str(), f["new_mode"].as_str()) {
        (Some(a), Some(b)) if a != b => html! { span.stale { (a) " → " (b) } },
        (_, Some(m)) | (Some(m), None) => html! { (m) },
        (None, None) => html! {},
    }
}

/// The proposal page's workflow forms: request review, vote, security review, request a human
/// approval, validate, apply, reject, withdraw; each the API method of that name, with the key
/// made when the page rendered.
pub(super) async fn proposal_act(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let s = match form_session(&st, &headers, field("csrf")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let key = field("idempotency_key");
    let (method, body) = match field("op") {
        "request_review" => (
            "proposal.request_review",
            json!({"workspace_id": ws, "proposal_id": id, "idempotency_key": key}),
        ),
        "vote" => (
            "vote.cast",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "vote": field("vote"), "reason_md": field("reason_md"), "idempotency_key": key}),
        ),
        "request_approval" => (
            "human.request_approval",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "idempotency_key": key}),
        ),
        "validate" => (
            "patch.validate",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "idempotency_key": key}),
        ),
        "security_review" => (
            "security.review",
            json!({"workspace_id": ws, "proposal_id": id, "revision": field("revision"),
                   "verdict": field("verdict"), "notes_md": field("notes_md"),
                   "idempotency_key": key}),
        ),
        "reject" | "withdraw" => (
            if field("op") == "reject" {
                "proposal.reject"
            } else {
                "proposal.withdraw"
            },
            json!({"workspace_id": ws, "proposal_id": id,
                   "reason_md": Some(field("reason_md")).filter(|r| !r.trim().is_empty()),
                   "idempotency_key": key}),
        ),
        "apply" => (
            "patch.apply",
            json!({"workspace_id": ws, "proposal_id": id, "validation_id": field("validation_id"),
                   "idempotency_key": key}),
        ),
        other => return unknown_op(&s, other),
    };
    let back = format!("/ui/w/{}/proposals/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, method, body, &back).await
}

#[derive(Deserialize)]
pub(super) struct ApprovalForm {
    #[serde(default)]
    csrf: String,
    proposal_id: String,
    approve: bool,
    reason_md: String,
    /// Made when the page rendered: a resubmitted form replays the decision.
    #[serde(default)]
    idempotency_key: String,
}

pub(super) async fn approval_decide(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<ApprovalForm>,
) -> Response {
    let s = match form_session(&st, &headers, &f.csrf) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let body = json!({"workspace_id": ws, "approval_id": id, "approve": f.approve,
                      "reason_md": f.reason_md, "idempotency_key": f.idempotency_key});
    let back = format!(
        "/ui/w/{}/proposals/{}",
        urlencode(&ws),
        urlencode(&f.proposal_id)
    );
    act(&st, &s, "human.decide", body, &back).await
}
