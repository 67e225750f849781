//! The transaction page: phases, per-path recovery states, advised control actions.

use super::*;

pub(super) async fn transaction_page(
    State(st): State<AppState>,
    Signed(s): Signed,
    Path((ws, id)): Path<(String, String)>,
) -> Response {
    let body = json!({"workspace_id": ws, "transaction_id": id});
    let t = match call(&st, &s, "transaction.show", body.clone()).await {
        Ok(v) => v["transaction"].clone(),
        Err(e) => return error_page(&e, &s),
    };
    let phases = call(&st, &s, "transaction.phases", body.clone()).await;
    let recovery = call(&st, &s, "transaction.recovery", body).await;
    let section = |r: &Result<Value, ServiceError>, f: &dyn Fn(&Value) -> Markup| match r {
        Ok(v) => f(v),
        Err(e) => html! { p.blocked { (e.code()) ": " (e.to_string()) } },
    };
    page(
        &format!("Transaction {id}"),
        Some(&s),
        html! {
            p { "Status " strong { (value(&t["status"])) } " · proposal "
                a href=(format!("/ui/w/{}/proposals/{}", urlencode(&ws), urlencode(t["proposal_id"].as_str().unwrap_or("")))) {
                    (value(&t["proposal_id"]))
                }
            }
            h2 { "Phases" }
            (section(&phases, &|v| rows(v["phases"].as_array().map(Vec::as_slice).unwrap_or(&[]),
                &["phase", "actor", "started_at", "ended_at", "reason", "failure_code", "request_id"], |_| None)))
            h2 { "Recovery: each touched path judged from the file" }
            (section(&recovery, &|v| html! {
                p { "Repository state " strong { (value(&v["repository_state"])) } }
                (rows(v["paths"].as_array().map(Vec::as_slice).unwrap_or(&[]), &["path", "state"], |_| None))
                h3 { "Advice" } (value(&v["actions"]))
                @if may(&st, &s, &ws, Permission::Apply) {
                    @for a in v["actions"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                        // resolve (settle a flagged transaction as its files show) is an admin's.
                        @if let Some(action) = a.as_str().filter(|a| ["validate", "retry", "cancel", "compensate"].contains(a)
                            || (*a == "resolve" && may(&st, &s, &ws, Permission::Admin))) {
                            form method="post" action=(format!("/ui/w/{}/transactions/{}/act", urlencode(&ws), urlencode(&id))) {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="action" value=(action);
                                input type="hidden" name="idempotency_key" value=(crate::ids::new_creation_key());
                                label { "Reason " input type="text" name="reason"; }
                                " " button type="submit" { (action) }
                            }
                        }
                    }
                }
                @if !v["blocked_reason"].is_null() { p.blocked { "Blocked: " (value(&v["blocked_reason"])) } }
                @if !v["artifact_error"].is_null() { p.blocked { "Rollback artifact: " (value(&v["artifact_error"])) } }
            }))
            h2 { "The transaction" }
            (fields(&t, &ws))
            h2 { "Paths" }
            (paths(&t))
            @if t["status"] == "applied" {
                p { "Attestation: " (attestation(&t["attestation"], st.service.attestor())) }
            }
        },
    )
}

/// A list of ids, each once, in the order first given.
fn once(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in v
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(Value::as_str)
    {
        if !out.iter().any(|o| o == id) {
            out.push(id.to_string());
        }
    }
    out
}

/// The transaction's own fields, labelled.
fn fields(t: &Value, ws: &str) -> Markup {
    let enc = urlencode(ws);
    // Ids that live on the proposal's page (its validation, approvals, tests) link there.
    let links = Links {
        ws,
        candidate: None,
        proposal: t["proposal_id"].as_str(),
    };
    let text = |k: &str| -> Markup {
        match t[k].as_str() {
            Some(v) => html! { code { (v) } },
            None => html! { span.badge { "none" } },
        }
    };
    let list = |k: &str| -> Markup {
        let ids = once(&t[k]);
        html! {
            @if ids.is_empty() { span.badge { "none" } }
            @else { @for (i, id) in ids.iter().enumerate() { @if i > 0 { ", " } (links.id(id)) } }
        }
    };
    let link = |prefix: &str, k: &str| -> Markup {
        match t[k].as_str() {
            Some(id) => {
                html! { a href=(format!("/ui/w/{enc}/{prefix}/{}", urlencode(id))) { code { (id) } } }
            }
            None => html! { span.badge { "none" } },
        }
    };
    html! {
        table.fields {
            tr { th { "Status" } td { strong { (value(&t["status"])) } " (version " (value(&t["version"])) ")" } }
            tr { th { "Proposal" } td { (link("proposals", "proposal_id")) " at revision " (text("revision")) } }
            tr { th { "Validation" } td { (links.value(&t["validation_id"])) } }
            tr { th { "Applied by" } td { (text("applied_by")) } }
            tr { th { "HEAD" } td { (text("head_before")) " → " (text("head_after")) } }
            tr { th { "Claims" } td { (list("claims")) } }
            tr { th { "Approvals" } td { (list("approvals")) } }
            tr { th { "Tests" } td { (list("test_verifications")) } }
            tr { th { "Rollback artifact" } td { (text("rollback_sha256")) } }
            tr { th { "Retries" } td { (link("transactions", "retry_of")) } }
            tr { th { "Blocked" } td { (text("blocked_reason")) } }
            tr { th { "Created" } td { (value(&t["created_at"])) } }
            tr { th { "Updated" } td { (value(&t["updated_at"])) } }
        }
    }
}

/// A path's fingerprint (`install::Fingerprint` as JSON): absent, a file's or a link's digest.
fn fingerprint(f: &Value) -> Markup {
    let sha = f["sha256"].as_str().unwrap_or("?");
    match f["kind"].as_str() {
        Some("file") if f["executable"] == true => html! { "executable file " code { (sha) } },
        Some("file") => html! { "file " code { (sha) } },
        Some("symlink") => html! { "symlink " code { (sha) } },
        _ => html! { span.badge { "absent" } },
    }
}

/// Every path with its fingerprints before and after (once applied).
fn paths(t: &Value) -> Markup {
    let hashes = t["hashes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    html! {
        table.paths {
            tr { th { "path" } th { "before" } th { "after" } }
            @for p in t["paths"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                @let h = hashes.iter().find(|h| h["path"] == *p);
                tr {
                    td { code { (p.as_str().unwrap_or("")) } }
                    @match h {
                        Some(h) => { td { (fingerprint(&h["before"])) } td { (fingerprint(&h["after"])) } },
                        None => { td { span.badge { "not yet applied" } } td {} },
                    }
                }
            }
        }
    }
}

/// The transaction page's control buttons: `transaction.control` with the advised action.
pub(super) async fn transaction_act(
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
    let reason = Some(field("reason")).filter(|r| !r.trim().is_empty());
    let body = json!({"workspace_id": ws, "transaction_id": id, "action": field("action"),
                      "reason": reason, "idempotency_key": field("idempotency_key")});
    let back = format!("/ui/w/{}/transactions/{}", urlencode(&ws), urlencode(&id));
    act(&st, &s, "transaction.control", body, &back).await
}
