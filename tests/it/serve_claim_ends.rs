//! How claims end and come back, over HTTP: `claim.resume` brings a suspended claim back only
//! while its resource is as granted and nothing granted meanwhile conflicts (raced against a
//! conflicting grant from a barrier), and `release_on = "proposal_end"` releases a claim in the
//! same transaction that withdraws or rejects the proposal it covered (acceptance by apply is
//! in `governed_gates`).

use crate::support::daemon::{ALICE, BOB, DAVE, Server};
use serde_json::{Value, json};

const ROUNDS: usize = 50;
const JITTER_MS: u64 = 15;

fn acquire(s: &Server, token: &str, resource: &str, extra: Value, key: &str) -> (u16, Value) {
    let mut body = json!({"workspace_id": "ws1", "task_id": "t1", "resource_id": resource,
                          "mode": "write", "idempotency_key": key});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.call(token, "claim.acquire", body)
}

fn granted(s: &Server, token: &str, resource: &str, extra: Value, key: &str) -> Value {
    let (code, v) = acquire(s, token, resource, extra, key);
    assert_eq!(code, 200, "{v}");
    v["claim"].clone()
}

fn suspend(s: &Server, claim: &Value, key: &str) {
    s.ok(
        ALICE,
        "claim.suspend",
        json!({"workspace_id": "ws1", "claim_id": claim["claim_id"], "idempotency_key": key}),
    );
}

fn resume(s: &Server, token: &str, claim: &Value, key: &str) -> (u16, Value) {
    s.call(
        token,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": claim["claim_id"], "idempotency_key": key}),
    )
}

fn status(s: &Server, claim: &Value) -> Value {
    s.ok(
        ALICE,
        "claim.show",
        json!({"workspace_id": "ws1", "claim_id": claim["claim_id"]}),
    )["claim"]["status"]
        .clone()
}

fn events(s: &Server) -> Vec<Value> {
    s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "limit": 200}),
    )["events"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_suspended_claim_resumes_only_as_granted_and_never_over_a_newer_grant() {
    let s = Server::fake_governed();
    let c = granted(&s, DAVE, "file:README", json!({}), "c1");
    suspend(&s, &c, "s1");

    // Bad input and the wrong caller change nothing.
    let m = s.err(
        DAVE,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": c["claim_id"], "idempotency_key": "r",
               "agent_id": "dave"}),
        "invalid_argument",
    );
    assert!(m.contains("agent_id"), "{m}");
    s.err(
        DAVE,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": "clm_missing", "idempotency_key": "r0"}),
        "not_found",
    );
    let (code, v) = resume(&s, BOB, &c, "r-bob");
    assert_eq!(code, 403, "{v}");
    // A changed resource is refused with its current hash; restored, the claim resumes.
    std::fs::write(s.repo.join("README"), "changed\n").unwrap();
    let m = s.err(
        DAVE,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": c["claim_id"], "idempotency_key": "r1"}),
        "failed_precondition",
    );
    assert!(
        m.contains("changed since the grant") && m.contains("current hash"),
        "{m}"
    );
    assert_eq!(status(&s, &c), "suspended");
    std::fs::write(s.repo.join("README"), "base\n").unwrap();
    let (code, v) = resume(&s, DAVE, &c, "r2");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["claim"]["status"], "active", "{v}");
    assert_eq!(v["claim"]["fencing_token"], c["fencing_token"], "{v}");
    // A replay answers the same; an active claim does not resume again.
    let (code, again) = resume(&s, DAVE, &c, "r2");
    assert_eq!(
        (code, &again["claim"]["version"]),
        (200, &v["claim"]["version"])
    );
    let m = s.err(
        DAVE,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": c["claim_id"], "idempotency_key": "r3"}),
        "failed_precondition",
    );
    assert!(m.contains("only a suspended claim resumes"), "{m}");
    let resumed: Vec<Value> = events(&s)
        .into_iter()
        .filter(|e| e["kind"] == "claim.resume")
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["prior"], "suspended");

    // Suspended again, another holder is granted the resource: the old grant cannot come
    // back over it; an admin may resume it once the newer claim is gone (recorded as forced).
    suspend(&s, &c, "s2");
    let newer = granted(&s, ALICE, "file:README", json!({}), "c-alice");
    let m = s.err(
        DAVE,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": c["claim_id"], "idempotency_key": "r4"}),
        "conflict",
    );
    assert!(m.contains(newer["claim_id"].as_str().unwrap()), "{m}");
    assert_eq!(
        status(&s, &c),
        "suspended",
        "a refused resume changes nothing"
    );
    s.ok(
        ALICE,
        "claim.release",
        json!({"workspace_id": "ws1", "claim_id": newer["claim_id"], "idempotency_key": "rel"}),
    );
    let (code, v) = resume(&s, ALICE, &c, "r5");
    assert_eq!(code, 200, "{v}");
    let last = events(&s)
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "claim.resume")
        .unwrap();
    assert_eq!(last["actor"], "member:alice", "{last}");
    assert_eq!(last["payload"]["forced"], true, "{last}");

    // Past its expiry, a suspended claim stays ended: acquire again.
    suspend(&s, &c, "s3");
    s.set_clock(time::OffsetDateTime::now_utc() + time::Duration::days(2));
    let m = s.err(
        DAVE,
        "claim.resume",
        json!({"workspace_id": "ws1", "claim_id": c["claim_id"], "idempotency_key": "r6"}),
        "failed_precondition",
    );
    assert!(m.contains("past its expiry"), "{m}");
}

/// A deterministic jitter for round `round`, side `side`.
fn jitter(round: usize, side: u64) -> std::time::Duration {
    let x = (round as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(side.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    std::time::Duration::from_millis((x ^ (x >> 31)) % (JITTER_MS + 1))
}

#[test]
fn a_resume_racing_a_conflicting_grant_never_leaves_both_active() {
    let s = Server::fake_governed();
    let (mut resumed, mut grants) = (0, 0);
    for round in 0..ROUNDS {
        let resource = format!("file:race{round}.txt");
        let c = granted(&s, DAVE, &resource, json!({}), &format!("c{round}"));
        suspend(&s, &c, &format!("s{round}"));
        let barrier = std::sync::Barrier::new(2);
        let (r, a) = std::thread::scope(|scope| {
            let r = scope.spawn(|| {
                barrier.wait();
                std::thread::sleep(jitter(round, 1));
                resume(&s, DAVE, &c, &format!("r{round}"))
            });
            let a = scope.spawn(|| {
                barrier.wait();
                std::thread::sleep(jitter(round, 2));
                acquire(&s, ALICE, &resource, json!({}), &format!("a{round}"))
            });
            (r.join().unwrap(), a.join().unwrap())
        });
        // Exactly one of them holds the resource now, whichever committed first.
        assert!(
            (r.0 == 200) != (a.0 == 200),
            "round {round}: resume {r:?}, acquire {a:?}"
        );
        let active = s.ok(
            ALICE,
            "claim.list",
            json!({"workspace_id": "ws1", "resource_id": resource, "status": "active"}),
        )["claims"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(active, 1, "round {round}");
        if r.0 == 200 {
            resumed += 1;
        } else {
            assert_eq!(r.1["error"]["code"], "conflict", "{r:?}");
            grants += 1;
        }
    }
    eprintln!("resume races: {resumed} resumed, {grants} granted to the other holder");
}

fn readme_patch() -> &'static str {
    "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-base\n+next\n"
}

fn create(s: &Server, key: &str) -> Value {
    s.ok(
        DAVE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": key, "summary_md": "s",
               "patch": readme_patch(), "idempotency_key": format!("p-{key}")}),
    )["proposal"]
        .clone()
}

#[test]
fn proposal_end_claims_are_released_with_the_withdrawal_or_rejection_that_ends_the_proposal() {
    let s = Server::fake_governed();
    let end = json!({"release_on": "proposal_end"});
    let covering = granted(&s, DAVE, "file:README", end.clone(), "c1");
    assert_eq!(covering["release_on"], "proposal_end", "{covering}");
    let unrelated = granted(&s, DAVE, "file:elsewhere", end.clone(), "c2");
    let manual = granted(&s, DAVE, "directory:", json!({"mode": "read"}), "c3");
    assert_eq!(manual["release_on"], "manual", "{manual}");
    let bad = acquire(&s, DAVE, "file:x", json!({"release_on": "sometimes"}), "c4");
    assert_eq!(bad.0, 400, "{bad:?}");
    assert_eq!(bad.1["error"]["field"], "release_on", "{bad:?}");
    assert!(
        bad.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("release_on"),
        "{bad:?}"
    );

    let p = create(&s, "w");
    s.ok(
        DAVE,
        "proposal.withdraw",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"], "idempotency_key": "w"}),
    );
    assert_eq!(status(&s, &covering), "released");
    assert_eq!(
        status(&s, &unrelated),
        "active",
        "it covered nothing the proposal touched"
    );
    assert_eq!(status(&s, &manual), "active");
    let ev = events(&s);
    let withdrawn = ev
        .iter()
        .find(|e| e["kind"] == "proposal.withdraw")
        .unwrap();
    assert_eq!(
        withdrawn["payload"]["released_claims"],
        json!([covering["claim_id"]]),
        "{withdrawn}"
    );
    let release = ev
        .iter()
        .find(|e| e["kind"] == "claim.release" && e["subject"] == covering["claim_id"])
        .unwrap();
    assert_eq!(release["payload"]["reason"], "proposal_end", "{release}");
    assert_eq!(
        release["payload"]["proposal_id"], p["proposal_id"],
        "{release}"
    );

    // A rejection (here under seed 000's name, patch.reject) ends them the same way.
    let again = granted(&s, DAVE, "file:README", end, "c5");
    let p = create(&s, "r");
    let rejected = s.ok(
        BOB,
        "patch.reject",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"], "reason_md": "no",
               "idempotency_key": "rej"}),
    );
    assert_eq!(rejected["proposal"]["status"], "rejected", "{rejected}");
    assert_eq!(status(&s, &again), "released");
    // patch.reject and proposal.reject are one method: the same key replays the same answer.
    let replay = s.ok(
        BOB,
        "proposal.reject",
        json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"], "reason_md": "no",
               "idempotency_key": "rej"}),
    );
    assert_eq!(replay["proposal"], rejected["proposal"]);
}

/// A claim two open proposals of its holder rely on ends with the last of them, not the first.
#[test]
fn a_proposal_end_claim_stays_while_another_open_proposal_of_its_holder_needs_it() {
    let s = Server::fake_governed();
    let dir = granted(
        &s,
        DAVE,
        "directory:",
        json!({"release_on": "proposal_end"}),
        "c1",
    );
    let first = create(&s, "first");
    let second = s.ok(
        DAVE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t1", "title": "second", "summary_md": "s",
               "patch": "diff --git a/other b/other\nnew file mode 100644\n--- /dev/null\n+++ b/other\n@@ -0,0 +1 @@\n+x\n",
               "idempotency_key": "p-second"}),
    )["proposal"]
        .clone();
    let withdraw = |p: &Value, key: &str| {
        s.ok(
            DAVE,
            "proposal.withdraw",
            json!({"workspace_id": "ws1", "proposal_id": p["proposal_id"], "idempotency_key": key}),
        )
    };
    withdraw(&first, "w1");
    assert_eq!(
        status(&s, &dir),
        "active",
        "the second proposal still needs it"
    );
    withdraw(&second, "w2");
    assert_eq!(status(&s, &dir), "released");
}

#[test]
fn the_workspace_policy_sets_the_default_release_and_refuses_unknown_values() {
    let s = Server::fake_governed_with(
        "[workspaces.ws1.policy]\nclaims_release_on = \"proposal_end\"\n",
    );
    let c = granted(&s, DAVE, "file:README", json!({}), "c1");
    assert_eq!(c["release_on"], "proposal_end", "{c}");
    let m = granted(
        &s,
        DAVE,
        "file:other",
        json!({"release_on": "manual"}),
        "c2",
    );
    assert_eq!(m["release_on"], "manual", "{m}");

    let dir = tempfile::tempdir().unwrap();
    let err = airlock::config::Config::parse(&format!(
        "data_dir = \"{}\"\n[workspaces.w]\nworktree = \"{}\"\n[workspaces.w.policy]\nclaims_release_on = \"sometimes\"\n",
        dir.path().join("data").display(),
        dir.path().display()
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("claims_release_on"), "{err}");
}
