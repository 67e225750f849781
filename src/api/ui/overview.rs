//! The overview (`/ui/`): per workspace, first what is waiting for the signed-in member (human
//! approvals they may decide, delivery requests they may decide, proposals in review that want
//! their vote, open contentions they may resolve), then candidates, proposals and transactions
//! with their state and, for proposals, the policy's verdict. An empty section says so.

use super::*;

/// At most this many proposals in review are asked for the caller's vote and the verdict on
/// one overview (each is two reads); the rest link to their pages without them.
pub const OVERVIEW_PROPOSALS_JUDGED: usize = 20;

/// One thing waiting for the member: what, where, and the link that acts on it.
struct Waiting {
    what: String,
    subject: String,
    link: String,
}

fn items(v: &Result<Value, ServiceError>, key: &str) -> Vec<Value> {
    v.as_ref()
        .ok()
        .and_then(|v| v[key].as_array().cloned())
        .unwrap_or_default()
}

/// A table of `list`, or the plain sentence `empty` when there is nothing.
fn table_or(
    list: &Result<Value, ServiceError>,
    key: &str,
    empty: &str,
    cols: &[&str],
    link: impl Fn(&Value) -> Option<String>,
) -> Markup {
    match list {
        Err(e) => html! { p.blocked { (e.code()) ": " (e.to_string()) } },
        Ok(v) => {
            let all = v[key].as_array().map(Vec::as_slice).unwrap_or(&[]);
            if all.is_empty() {
                html! { p { (empty) } }
            } else {
                rows(all, cols, link)
            }
        }
    }
}

pub(super) async fn index(State(st): State<AppState>, Signed(s): Signed) -> Response {
    let config = st.service.config();
    let me = s.actor.key();
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut sections = Vec::new();
    for (ws_id, ws) in &config.workspaces {
        if !may(&st, &s, ws_id, Permission::View) {
            continue;
        }
        let enc = urlencode(ws_id);
        let governed = ws.worktree.is_some();
        // Candidates: every workspace has them; delivery requests wait for a decider.
        let candidates = call(&st, &s, "integration.list", json!({"workspace_id": ws_id})).await;
        if may(&st, &s, ws_id, Permission::Decide) {
            let asked = call(
                &st,
                &s,
                "integration.list",
                json!({"workspace_id": ws_id, "request_state": "requested"}),
            )
            .await;
            for c in items(&asked, "candidates") {
                let by = c["delivery_request"]["requested_by"].as_str().unwrap_or("");
                if ws.distinct_approver && by == me {
                    continue;
                }
                let id = c["candidate_id"].as_str().unwrap_or("");
                waiting.push(Waiting {
                    what: format!("decide the delivery request (by {by})"),
                    subject: format!(
                        "{ws_id} · candidate {id} → {}",
                        c["target_ref"].as_str().unwrap_or("")
                    ),
                    link: format!("/ui/w/{enc}/candidates/{}", urlencode(id)),
                });
            }
        }
        let (mut proposals, mut transactions) = (None, None);
        if governed {
            let approvals = call(
                &st,
                &s,
                "human.approval_list",
                json!({"workspace_id": ws_id}),
            )
            .await;
            for a in items(&approvals, "approvals") {
                let pid = a["proposal_id"].as_str().unwrap_or("");
                waiting.push(Waiting {
                    what: format!(
                        "decide the human approval (asked by {})",
                        a["requested_by"].as_str().unwrap_or("")
                    ),
                    subject: format!("{ws_id} · proposal {pid}"),
                    link: format!("/ui/w/{enc}/proposals/{}", urlencode(pid)),
                });
            }
            if may(&st, &s, ws_id, Permission::Admin) {
                let open = call(
                    &st,
                    &s,
                    "claim.contentions",
                    json!({"workspace_id": ws_id, "state": "open"}),
                )
                .await;
                for c in items(&open, "contentions") {
                    waiting.push(Waiting {
                        what: format!(
                            "resolve the contention: {} wants {} held by {}",
                            c["agent"].as_str().unwrap_or(""),
                            c["requested_resource_id"].as_str().unwrap_or(""),
                            c["holder"].as_str().unwrap_or("(gone)")
                        ),
                        subject: format!("{ws_id} · {}", c["contention_id"].as_str().unwrap_or("")),
                        link: "/ui/".into(),
                    });
                }
            }
            let mut listed = call(
                &st,
                &s,
                "proposal.list",
                json!({"workspace_id": ws_id, "order": "newest"}),
            )
            .await;
            // The verdict column, and whether each proposal in review wants this member's vote.
            if let Ok(v) = &mut listed
                && let Some(all) = v["proposals"].as_array_mut()
            {
                let reviewer = may(&st, &s, ws_id, Permission::Review);
                for p in all
                    .iter_mut()
                    .filter(|p| p["status"] == "in_review")
                    .take(OVERVIEW_PROPOSALS_JUDGED)
                {
                    let body = json!({"workspace_id": ws_id, "proposal_id": p["proposal_id"]});
                    let verdict = call(&st, &s, "policy.evaluate", body.clone()).await.ok();
                    p["verdict"] = json!(match verdict
                        .as_ref()
                        .map(|v| v["verdict"]["approvable"] == true)
                    {
                        Some(true) => "approvable",
                        Some(false) => "blocked",
                        None => "unknown",
                    });
                    if reviewer && p["author"] != json!(me) {
                        let votes = call(&st, &s, "vote.list", body).await;
                        let voted = items(&votes, "votes").iter().any(|v| {
                            v["voter"] == json!(me)
                                && v["current"] == true
                                && v["revision"] == p["current_revision"]
                        });
                        if !voted {
                            let pid = p["proposal_id"].as_str().unwrap_or("").to_string();
                            waiting.push(Waiting {
                                what: "review: your vote on the current revision".into(),
                                subject: format!(
                                    "{ws_id} · proposal {pid} · {}",
                                    p["title"].as_str().unwrap_or("")
                                ),
                                link: format!("/ui/w/{enc}/proposals/{}", urlencode(&pid)),
                            });
                        }
                    }
                }
            }
            proposals = Some(listed);
            transactions =
                Some(call(&st, &s, "transaction.list", json!({"workspace_id": ws_id})).await);
        }
        let candidates = candidates.map(|mut v| {
            v["candidates"] = json!(with_times(&st, &v["candidates"]));
            if let Some(all) = v["candidates"].as_array_mut() {
                for c in all {
                    c["request"] = c["delivery_request"]["state"].clone();
                }
            }
            v
        });
        let jobs = super::jobs::active(&st, &s, ws_id).await;
        sections.push(html! {
            h2 { "Workspace " (ws_id) }
            h3 { "Jobs" }
            (jobs)
            h3 { "Candidates" }
            (table_or(&candidates, "candidates", "No candidates in this workspace.",
                &["candidate_id", "state", "request", "target_ref", "age", "expires"],
                |c| c["candidate_id"].as_str().map(|id| format!("/ui/w/{enc}/candidates/{}", urlencode(id)))))
            @if let Some(p) = &proposals {
                h3 { "Proposals" }
                (table_or(p, "proposals", "No proposals in this workspace.",
                    &["proposal_id", "title", "status", "verdict", "author", "risk", "updated_at"],
                    |p| p["proposal_id"].as_str().map(|id| format!("/ui/w/{enc}/proposals/{}", urlencode(id)))))
            }
            @if let Some(t) = &transactions {
                h3 { "Transactions" }
                (table_or(t, "transactions", "No apply transactions in this workspace.",
                    &["transaction_id", "status", "proposal_id", "created_at"],
                    |t| t["transaction_id"].as_str().map(|id| format!("/ui/w/{enc}/transactions/{}", urlencode(id)))))
            }
        });
    }
    page(
        "Airlock",
        Some(&s),
        html! {
            h2 { "Waiting for you" }
            @if waiting.is_empty() {
                p { "Nothing is waiting for you: no approval, delivery decision, review or contention you may act on." }
            } @else {
                table {
                    tr { th { "what" } th { "where" } }
                    @for w in &waiting {
                        tr { td { a href=(w.link) { (w.what) } } td { (w.subject) } }
                    }
                }
            }
            @if sections.is_empty() { p { "You are not a member of any workspace." } }
            @for sec in sections { (sec) }
        },
    )
}
