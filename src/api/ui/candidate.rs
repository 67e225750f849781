//! The candidate page and its forms: resolve, verify, request delivery, decide, deliver.

use super::*;

pub(super) async fn candidate_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
    Query(q): Query<DiffQuery>,
) -> Response {
    let body = json!({"workspace_id": ws, "candidate_id": id});
    let c = match call(&st, &s, "integration.show", body.clone()).await {
        Ok(v) => v["candidate"].clone(),
        Err(e) => return error_page(&e, &s),
    };
    let offset = q.offset.unwrap_or(0);
    // Only a frozen candidate has a combined diff: the others are not asked for one.
    let patch = if c["state"] == json!(CandidateState::Frozen) {
        Some(
            call(
                &st,
                &s,
                "integration.patch",
                json!({"workspace_id": ws, "candidate_id": id, "offset": offset,
                       "limit": crate::limits::UI_DIFF_PAGE_BYTES}),
            )
            .await,
        )
    } else {
        None
    };
    // Each conflicted file of this resolve batch as the merge left it, to edit in place.
    let resolving =
        c["state"] == json!(CandidateState::Conflicted) && may(&st, &s, &ws, Permission::Integrate);
    let mut conflict_views = Vec::new();
    if resolving {
        let paths = c["conflicts"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for path in paths.iter().take(crate::candidate::MAX_RESOLVE_FILES) {
            let view = call(
                &st,
                &s,
                "integration.conflict",
                json!({"workspace_id": ws, "candidate_id": id, "path": path}),
            )
            .await;
            conflict_views.push((path.as_str().unwrap_or("").to_string(), view));
        }
    }
    let may_verify = may(&st, &s, &ws, Permission::Verify);
    let links = Links {
        ws: &ws,
        candidate: Some(&id),
        proposal: None,
    };
    // The server refuses the requester's own decision while distinct_approver holds; the
    // page does not offer it either.
    let own_request = st
        .service
        .config()
        .workspaces
        .get(&ws)
        .is_some_and(|w| w.distinct_approver)
        && c["delivery_request"]["requested_by"] == json!(format!("member:{}", s.member));
    let can_decide = may(&st, &s, &ws, Permission::Decide) && !own_request;
    let request = &c["delivery_request"];
    let pending = request["state"] == json!(RequestState::Requested);
    let act = format!("/ui/w/{}/candidates/{}/act", urlencode(&ws), urlencode(&id));
    let state = &c["state"];
    let frozen = *state == json!(CandidateState::Frozen);
    let conflicts: Vec<&str> = c["conflicts"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Passed verifications of the current revision: what a delivery request can name.
    let passed: Vec<&str> = c["verifications"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| {
                    v["status"] == json!(crate::domain::verification::Status::Passed)
                        && v["candidate_revision"] == c["candidate_revision"]
                })
                .filter_map(|v| v["verification_id"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let open_request = [
        RequestState::Requested,
        RequestState::Approved,
        RequestState::Delivering,
    ]
    .iter()
    .any(|st| request["state"] == json!(st));
    let action = format!(
        "/ui/w/{}/candidates/{}/decide",
        urlencode(&ws),
        urlencode(&id)
    );
    // What a decider approves: the target as it is now, and the request's verifications.
    let crate::engine::integration::read::DeciderView {
        target_now,
        summaries,
        resolution_diffs,
        files,
    } = st
        .service
        .candidates
        .decider_view(&s.actor, &ws, &id)
        .await
        .unwrap_or_default();
    let excerpts = st
        .service
        .candidates
        .transcript_excerpts(&s.actor, &ws, &id)
        .await
        .unwrap_or_default();
    let selected: Vec<&str> = request["verification_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    page(
        &format!("Candidate {id}"),
        Some(&s),
        html! {
            p { "State " strong { (value(&c["state"])) }
                @if let Some(rs) = request["state"].as_str() { " · delivery " strong { (rs) } }
                @if let Some(result) = c["delivery_receipt"]["result"].as_str() {
                    " (" (result) " at " (value(&c["delivery_receipt"]["created_at"])) ")" }
                " · target " (value(&c["target_ref"]))
                " · created " (value(&c["created_at"])) " · expires " (value(&c["expires_at"])) }
            @if !request.is_null() {
                (decision_summary(&c, request, target_now.as_deref(), &links))
            }
            @if pending && can_decide {
                h2 { "Decide" }
                form method="post" action=(action) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="request_id" value=(request["request_id"].as_str().unwrap_or(""));
                    input type="hidden" name="request_version" value=(request["request_version"].as_u64().unwrap_or(0));
                    label { "Reason (kept with the decision) " textarea name="reason" rows="2" cols="60" {} }
                    br;
                    button type="submit" name="approve" value="true" { "Approve delivery" }
                    " "
                    button type="submit" name="approve" value="false" { "Deny delivery" }
                }
            } @else if pending && own_request {
                p.waiting.decide-note { "You requested this delivery. This workspace has distinct_approver = true, so another member with the decide permission decides it." }
            } @else if pending && !may(&st, &s, &ws, Permission::Decide) {
                p.waiting.decide-note { "Deciding a delivery needs the decide permission in this workspace; you do not hold it." }
            }
            @if !files.is_empty() { (file_list(&files)) }
            h2 { "Inputs, in order" }
            table {
                tr { th { "#" } th { "run" } th { "commit" } th { "evidence" } th { "retained revision" } th { "base" }
                     th { "sources" } th { "transcript sha256" } th { "evidence expires" } }
                @for (i, input) in c["inputs"].as_array().map(Vec::as_slice).unwrap_or(&[]).iter().enumerate() {
                    @let e = &input["evidence"];
                    tr {
                        td { (i + 1) }
                        td { (value(&input["submission"]["run_id"])) }
                        td { @if let Some(c) = summaries.get(i) { strong { (visible(&c.subject)) } br; "by " (visible(&c.author)) } }
                        td { code { (value(&input["submission"]["evidence_ref"])) } }
                        td { code { (value(&input["submission"]["retained_revision"])) } }
                        td { code { (value(&input["base_revision"])) } }
                        td { (e["sources"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).unwrap_or_default())
                             @if let Some(Some((text, cut))) = excerpts.get(i) {
                                 details { summary { "transcript" } pre { (visible(text)) } @if *cut { p.missing { "(first " (crate::engine::integration::read::TRANSCRIPT_EXCERPT_BYTES) " bytes)" } } }
                             } }
                        td { code { (value(&e["transcript_sha256"])) } }
                        td { (value(&e["expires_at"])) }
                    }
                }
            }
            h2 { "Conflicts" } (value(&c["conflicts"]))
            @if resolving {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="resolve";
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    input type="hidden" name="expected_version" value=(c["version"].as_u64().unwrap_or(0));
                    @let applied = c["applied_inputs"].as_u64().unwrap_or(0) as usize;
                    @let input = &c["inputs"][applied]["submission"];
                    p { "In each file, the side after " code { "<<<<<<<" } " is what the first "
                        (applied) " input(s) made of it; the side before " code { ">>>>>>>" }
                        " is input " (applied + 1) " (run " (value(&input["run_id"])) ", "
                        code { (value(&input["retained_revision"])) } ")." }
                    @if conflicts.len() > conflict_views.len() {
                        p.missing { "This form resolves the first " (conflict_views.len()) " of "
                            (conflicts.len()) " conflicted files; the rest follow once these are resolved." }
                    }
                    @for (i, (path, view)) in conflict_views.iter().enumerate() {
                        (conflict_file(i, path, view))
                    }
                    button type="submit" { "Resolve" }
                }
            }
            @let resolutions = c["resolutions"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            @if !resolutions.is_empty() {
                h2 { "Resolutions (what the resolver wrote, against the merge)" }
                @for (r, d) in resolutions.iter().zip(&resolution_diffs) {
                    @let input = r["input"].as_u64().unwrap_or(0) as usize;
                    p { "Input " (input + 1) " (run " (value(&c["inputs"][input]["submission"]["run_id"])) ")"
                        " resolved by " strong { (value(&r["actor_key"])) } ": " (value(&r["paths"])) }
                    @match d {
                        Some((text, cut)) => {
                            (super::diff::render_all(text))
                            @if *cut { p.missing { "The rest of this resolution's diff is not shown." } }
                        },
                        None => p.blocked { "This resolution's commit could not be read." },
                    }
                }
            }
            h2 { "Verifications" }
            @let verifications = c["verifications"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            @if verifications.is_empty() { p { span.badge { "none" } } }
            @for v in verifications {
                @if !request.is_null() && !selected.contains(&v["verification_id"].as_str().unwrap_or("")) {
                    p.missing { "Not part of the delivery request: " (links.value(&v["verification_id"])) }
                }
                (verification(v, &c["candidate_revision"], may_verify.then_some(&act), &s, st.service.attestor()))
            }
            @if frozen && may_verify {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="verify";
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    label { "Command, one argument per line " br;
                        textarea name="argv" rows="3" cols="60" required {} }
                    br;
                    label { "Timeout (seconds, empty for the default) " input type="number" name="timeout_seconds" min="1"; }
                    " " button type="submit" { "Verify" }
                }
            }
            h2 id="delivery-request" { "Delivery request" }
            @if request.is_null() { p { "No delivery has been requested." } } @else { (request_fields(request, &links)) }
            // Once delivered, the target has moved on: a new request could only be refused.
            @if frozen && !passed.is_empty() && !open_request && c["delivery_receipt"].is_null()
                && may(&st, &s, &ws, Permission::Integrate) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="request";
                    input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                    input type="hidden" name="verification_ids" value=(passed.join(","));
                    label { "Land by " select name="action" {
                        option value="update_ref" { "updating the target ref" }
                        option value="proposal" { "a proposal ref" }
                    } }
                    " " button type="submit" { "Request delivery" }
                }
            }
            @if request["state"] == json!(RequestState::Approved) && may(&st, &s, &ws, Permission::Push) {
                form method="post" action=(act) {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="op" value="deliver";
                    input type="hidden" name="request_id" value=(request["request_id"].as_str().unwrap_or(""));
                    input type="hidden" name="request_version" value=(request["request_version"].as_u64().unwrap_or(0));
                    button type="submit" { "Deliver" }
                }
            }
            h2 id="receipt" { "Receipt" }
            @if c["delivery_receipt"].is_null() { p { "Nothing has been delivered." } } @else {
                p { "Attestation: " (attestation(&c["delivery_receipt"]["attestation"], st.service.attestor())) }
                (receipt_fields(&c["delivery_receipt"], &links))
            }
            h2 { "Combined diff" }
            @match &patch {
                None => p { span.badge { "no frozen revision yet" } },
                Some(Ok(p)) => {
                    @let here = format!("/ui/w/{}/candidates/{}", urlencode(&ws), urlencode(&id));
                    p { "From byte " (offset)
                        @if offset > 0 { " · " a href=(here) { "first page" } }
                        @if let Some(next) = p["next_offset"].as_u64() {
                            " · " a href=(format!("{here}?offset={next}#diff")) { "next page" }
                        } @else { " · the last page" }
                    }
                    div id="diff" { (super::diff::render_all(p["patch"].as_str().unwrap_or(""))) }
                }
                Some(Err(e)) => p.blocked { (e.code()) ": " (e.to_string()) },
            }
        },
    )
}

/// The top of a candidate with a delivery request: what exactly a decider approves.
fn decision_summary(c: &Value, request: &Value, target_now: Option<&str>, links: &Links) -> Markup {
    let expected = request["expected_target_revision"].as_str().unwrap_or("");
    let verifications = c["verifications"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let ids: Vec<&str> = request["verification_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let receipt = &c["delivery_receipt"];
    // Only a request that may still deliver is judged against the target as it is now; a
    // delivered one says what landed (the target is at that commit, or moved on since).
    let open = matches!(
        request["state"].as_str(),
        Some("requested" | "approved" | "delivering")
    );
    let landed = receipt["landed_revision"]
        .as_str()
        .or(receipt["candidate_revision"].as_str());
    html! {
        div.headline.(if receipt.is_object() { "ready" } else { "waiting" }) {
            "Delivery of " code { (value(&request["candidate_revision"])) } " onto " code { (value(&request["target_ref"])) }
            " by " (value(&request["action"])) ", requested by " (value(&request["requested_by"]))
            " · " strong { (value(&request["state"])) }
            p.target {
                @if receipt["result"] == "landed" {
                    span.satisfied {
                        "Delivered: " code { (value(&receipt["target_ref"])) } " moved from "
                        code { (value(&receipt["previous_revision"])) } " to " code { (landed.unwrap_or("")) }
                        " at " (value(&receipt["created_at"])) " (receipt " (links.value(&receipt["receipt_id"])) ")."
                    }
                    @match target_now {
                        Some(t) if Some(t) == landed => " The target is still at the landed commit.",
                        Some(t) => span { " The target has moved on since: it is at " code { (t) } "." },
                        None => span { " The target ref does not exist now." },
                    }
                } @else if receipt["result"] == "proposed" {
                    span.satisfied {
                        "Proposed: " code { (value(&receipt["proposal_ref"])) } " points at the candidate since "
                        (value(&receipt["created_at"])) " (receipt " (links.value(&receipt["receipt_id"])) "); the target was not touched."
                    }
                } @else if open {
                    @match target_now {
                        Some(t) if t == expected => span.satisfied { "The target is still at " code { (t) } ", the revision the candidate was built on." },
                        Some(t) => span.blocked { "The target moved: it is at " code { (t) } ", the candidate was built on " code { (expected) } "; delivery would be refused." },
                        None => span.blocked { "The target ref does not exist now." },
                    }
                }
            }
            table {
                tr { th { "selected verification" } th { "status" } th { "environment" } th { "expires" } }
                @for id in &ids {
                    @let v = verifications.iter().find(|v| v["verification_id"] == *id);
                    tr {
                        td { (links.id(id)) }
                        @match v {
                            Some(v) => {
                                td class=(if v["status"] == "passed" { "satisfied" } else { "blocked" }) { (value(&v["status"])) }
                                td { code { (value(&v["environment_sha256"])) } }
                                td { (value(&v["expires_at"])) }
                            },
                            None => { td.blocked { "not found" } td {} td {} },
                        }
                    }
                }
            }
        }
    }
}

/// The combined diff's files with their line counts and the totals: what the candidate
/// changes, before any diff is read.
fn file_list(files: &[(String, Option<(u64, u64)>)]) -> Markup {
    let (added, removed) = files
        .iter()
        .filter_map(|f| f.1)
        .fold((0, 0), |(a, r), (x, y)| (a + x, r + y));
    html! {
        h2 { "Files" }
        p.diffstat {
            (files.len()) @if files.len() == 1 { " file changed, " } @else { " files changed, " }
            span.satisfied { "+" (added) } " " span.blocked { "-" (removed) }
        }
        table.files {
            tr { th { "path" } th { "added" } th { "removed" } }
            @for (path, lines) in files {
                tr {
                    td { code { (visible(path)) } }
                    @match lines {
                        Some((a, r)) => { td.satisfied { "+" (a) } td.blocked { "-" (r) } },
                        None => { td colspan="2" { span.badge { "binary" } } },
                    }
                }
            }
        }
    }
}

/// The delivery request as labelled fields; a field not set yet says so.
fn request_fields(r: &Value, links: &Links) -> Markup {
    const ROWS: &[(&str, &str)] = &[
        ("Request", "request_id"),
        ("Version", "request_version"),
        ("State", "state"),
        ("Action", "action"),
        ("Verified revision", "candidate_revision"),
        ("Target", "target_ref"),
        ("Built on", "expected_target_revision"),
        ("Verifications", "verification_ids"),
        ("Requested by", "requested_by"),
        ("Requested at", "created_at"),
        ("Expires", "expires_at"),
        ("Decided by", "decided_by"),
        ("Decided at", "decided_at"),
        ("Reason", "decision_reason"),
    ];
    labelled(r, ROWS, links, Some("not yet"))
}

/// A delivery's receipt as labelled fields (its attestation is shown checked above them); a
/// field the action does not have is left out.
fn receipt_fields(r: &Value, links: &Links) -> Markup {
    const ROWS: &[(&str, &str)] = &[
        ("Receipt", "receipt_id"),
        ("Request", "request_id"),
        ("Result", "result"),
        ("Action", "action"),
        ("Target", "target_ref"),
        ("Previous revision", "previous_revision"),
        ("Verified revision", "candidate_revision"),
        ("Landed revision", "landed_revision"),
        ("Proposal ref", "proposal_ref"),
        ("At", "created_at"),
    ];
    labelled(r, ROWS, links, None)
}

/// `r`'s fields as a table of (label, key) rows, ids linked; a null field shows `unset` as a
/// badge, or is left out without one.
fn labelled(r: &Value, rows: &[(&str, &str)], links: &Links, unset: Option<&str>) -> Markup {
    html! {
        table {
            @for (label, key) in rows {
                @match (&r[*key], unset) {
                    (Value::Null, None) => {},
                    (Value::Null, Some(badge)) => tr { th { (label) } td { span.badge { (badge) } } },
                    (v, _) => tr { th { (label) } td { (links.value(v)) } },
                }
            }
        }
    }
}

/// One file of the resolve form: what the merge left there (conflict markers included) in a
/// textarea to edit, or why it cannot be shown; and whether to write it, delete it, or leave it
/// for a later batch.
fn conflict_file(i: usize, path: &str, view: &Result<Value, ServiceError>) -> Markup {
    let (content, note, crlf) = match view {
        Ok(v) => {
            let content = v["content"].as_str().unwrap_or("");
            (
                content.to_string(),
                v["note"].as_str().map(str::to_string),
                content.contains("\r\n"),
            )
        }
        Err(e) => (String::new(), Some(format!("{}: {e}", e.code())), false),
    };
    // Browsers send a textarea's lines ending in CRLF: the handler turns them back into LF
    // unless the file had CRLF endings.
    let rows = (content.lines().count() + 1).clamp(6, 40);
    html! {
        fieldset {
            legend { code { (visible(path)) } }
            input type="hidden" name=(format!("path_{i}")) value=(path);
            @if crlf { input type="hidden" name=(format!("eol_{i}")) value="crlf"; }
            @if let Some(n) = &note { p.missing { (n) "; write the whole new content below" } }
            @else { p { "As the merge left it: edit the conflict markers out." } }
            label { "Resolution " select name=(format!("resolution_{i}")) {
                option value="content" selected { "the content below" }
                option value="delete" { "delete the file" }
                option value="later" { "leave it for a later batch" }
            } }
            br;
            // The newline after the tag is dropped by the parser, so content that begins with
            // one keeps it.
            textarea name=(format!("content_{i}")) rows=(rows) cols="100" { "\n" (content) }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct DiffQuery {
    offset: Option<u64>,
}

/// One verification: what ran, in what, how it ended, and its output (the server's copy, which
/// is capped: the marker says how much of it the run wrote).
fn verification(
    v: &Value,
    current: &Value,
    act: Option<&String>,
    s: &UiSession,
    keys: &crate::engine::attesting::Attestor,
) -> Markup {
    let status = v["status"].as_str().unwrap_or("");
    let class = match status {
        "passed" => "satisfied",
        "running" => "missing",
        _ => "blocked",
    };
    let elapsed = v["duration_ms"]
        .as_u64()
        .map(|ms| format!("{}.{:03} s", ms / 1000, ms % 1000));
    html! {
        h3 id=(format!("verification-{}", v["verification_id"].as_str().unwrap_or(""))) {
            (value(&v["verification_id"])) " " span class=(class) { (status) }
            @if v["candidate_revision"] != *current { " " span.badge.stale { "not current" } } }
        table {
            tr { th { "argv" } td { @for a in v["argv"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                code { (visible(a.as_str().unwrap_or(""))) } " " } } }
            tr { th { "exit code" } td { (value(&v["exit_code"]))
                @if v["oom_killed"] == true { " " span.blocked { "killed: out of memory" } } } }
            tr { th { "elapsed" } td { @if let Some(e) = &elapsed { (e) } @else { span.badge { "running" } }
                " (timeout " (value(&v["timeout_seconds"])) " s)" } }
            tr { th { "image" } td { (value(&v["image"])) } }
            tr { th { "engine" } td { (value(&v["engine"])) } }
            tr { th { "isolation" } td { (value(&v["runtime"])) } }
            tr { th { "observed image" } td { (value(&v["observed_image"])) } }
            tr { th { "environment sha256" } td { code { (value(&v["environment_sha256"])) } } }
            tr { th { "revision" } td { code { (value(&v["candidate_revision"])) } } }
            tr { th { "started · finished" } td { (value(&v["created_at"])) " · " (value(&v["finished_at"])) } }
            @if !v["error"].is_null() { tr { th { "error" } td.blocked { (value(&v["error"])) } } }
            @if v["status"] != "running" { tr { th { "attestation" } td { (attestation(&v["attestation"], keys)) } } }
        }
        @if v["output_truncated"] == true {
            p.missing { "output truncated: the command wrote " (value(&v["output_bytes_total"]))
                " bytes; their beginning and end are kept, joined by the line that says how many were omitted" }
        }
        @match v["output"].as_str().filter(|o| !o.is_empty()) {
            Some(o) => pre { (visible(o)) },
            None => p { span.badge { "no output" } },
        }
        @if status == "running" && let Some(act) = act {
            form method="post" action=(act) {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="op" value="cancel";
                input type="hidden" name="verification_id" value=(v["verification_id"].as_str().unwrap_or(""));
                button type="submit" { "Cancel verification" }
            }
        }
    }
}

/// The candidate page's workflow forms: resolve, verify, cancel a verification, request
/// delivery, deliver. Each is the
/// API method of that name with the form's fields; the keys come from the rendered form, so a
/// resubmitted form replays instead of acting twice.
pub(super) async fn candidate_act(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    _signed_in: SessionFirst,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let s = match form_session(&st, &headers, field("csrf")) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let number = |k: &str| field(k).trim().parse::<u64>().ok();
    let target = json!({"workspace_id": ws, "candidate_id": id});
    // The revision a verify or a request is about: the one the page showed is the frozen one
    // (a candidate's revision never changes once frozen).
    let revision = || async {
        call(&st, &s, "integration.show", target.clone())
            .await
            .map(|v| v["candidate"]["candidate_revision"].clone())
            .unwrap_or(Value::Null)
    };
    let (method, body) = match field("op") {
        "resolve" => {
            let mut files = Vec::new();
            for i in 0..crate::candidate::MAX_RESOLVE_FILES {
                let Some(path) = f.get(&format!("path_{i}")) else {
                    break;
                };
                match field(&format!("resolution_{i}")) {
                    "later" => {}
                    "delete" => files.push(json!({"path": path, "delete": true})),
                    _ => {
                        let mut content = field(&format!("content_{i}")).replace("\r\n", "\n");
                        if field(&format!("eol_{i}")) == "crlf" {
                            content = content.replace('\n', "\r\n");
                        }
                        files.push(json!({"path": path, "content": content}));
                    }
                }
            }
            (
                "integration.resolve",
                json!({"workspace_id": ws, "candidate_id": id,
                       "expected_version": number("expected_version"), "files": files,
                       "idempotency_key": field("idempotency_key")}),
            )
        }
        "verify" => {
            let argv: Vec<&str> = field("argv")
                .lines()
                .map(|l| l.trim_end_matches('\r'))
                .filter(|l| !l.is_empty())
                .collect();
            (
                "integration.verify",
                json!({"workspace_id": ws, "candidate_id": id,
                       "candidate_revision": revision().await, "argv": argv,
                       "timeout_seconds": number("timeout_seconds"),
                       "idempotency_key": field("idempotency_key")}),
            )
        }
        "request" => {
            let ids: Vec<&str> = field("verification_ids")
                .split(',')
                .filter(|x| !x.is_empty())
                .collect();
            (
                "integration.request_delivery",
                json!({"workspace_id": ws, "candidate_id": id,
                       "candidate_revision": revision().await, "verification_ids": ids,
                       "action": field("action"), "idempotency_key": field("idempotency_key")}),
            )
        }
        "cancel" => (
            "integration.cancel_verification",
            json!({"workspace_id": ws, "candidate_id": id,
                   "verification_id": field("verification_id")}),
        ),
        "deliver" => (
            "integration.deliver",
            json!({"workspace_id": ws, "candidate_id": id, "request_id": field("request_id"),
                   "request_version": number("request_version")}),
        ),
        other => return unknown_op(&s, other),
    };
    let back = format!("/ui/w/{}/candidates/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, method, body, &back).await
}

#[derive(Deserialize)]
pub(super) struct DecideForm {
    #[serde(default)]
    csrf: String,
    request_id: String,
    request_version: u64,
    approve: bool,
    #[serde(default)]
    reason: String,
}

pub(super) async fn candidate_decide(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((ws, id)): Path<(String, String)>,
    Form(f): Form<DecideForm>,
) -> Response {
    let s = match form_session(&st, &headers, &f.csrf) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let reason = Some(f.reason.trim()).filter(|r| !r.is_empty());
    let body = json!({"workspace_id": ws, "candidate_id": id, "request_id": f.request_id,
                      "request_version": f.request_version, "approve": f.approve,
                      "reason": reason});
    let back = format!("/ui/w/{}/candidates/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, "integration.decide", body, &back).await
}
