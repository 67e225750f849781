//! Races against `patch.apply`, over real HTTP, on a real worktree, with git's dry run in the
//! sandbox: each test releases `patch.apply` and one gate-changing call (a veto, a forced
//! release followed by a re-grant, a withdrawal) from a barrier, with jitter on both sides,
//! for `ROUNDS` rounds, and asserts the invariant from the outcome, the files and the event
//! log: nothing lands after a committed veto, re-grant or withdrawal, nothing committed
//! after `prepared` changes what is installed, and no round leaves a transaction open.

use crate::support::daemon::{ALICE, BOB, DAVE, SAM, Server};
use serde_json::{Value, json};

const ROUNDS: usize = 50;
/// Most milliseconds either side of a race waits after the barrier.
const JITTER_MS: u64 = 40;
/// Validations run this many at a time while the rounds are prepared.
const PARALLEL_VALIDATIONS: usize = 3;
const EXTRA: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\nsam = [\"reviewer\"]\n\
                     [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

/// One validated proposal of dave's that creates `path`, approved by bob.
#[derive(Debug, Clone)]
struct Ready {
    path: String,
    proposal_id: Value,
    revision: String,
    validation_id: Value,
    claim_id: Value,
}

fn server() -> Option<Server> {
    if !crate::toolchain::built("git") {
        return None;
    }
    Some(Server::governed_with(EXTRA))
}

fn creation(path: &str) -> String {
    format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{path}\n"
    )
}

/// `n` rounds' proposals, each under its own `file:` claim of dave's, reviewed by bob and
/// validated (a few at a time).
fn prepare(s: &Server, tag: &str, n: usize) -> Vec<Ready> {
    let made: Vec<Ready> = (0..n)
        .map(|i| {
            let path = format!("{tag}{i}.txt");
            let c = s.ok(
                DAVE,
                "claim.acquire",
                json!({"workspace_id": "ws1", "task_id": "t", "resource_id": format!("file:{path}"),
                       "mode": "write", "idempotency_key": format!("c-{path}")}),
            );
            let p = s.ok(
                DAVE,
                "proposal.create",
                json!({"workspace_id": "ws1", "task_id": "t", "title": path, "summary_md": "s",
                       "patch": creation(&path), "idempotency_key": format!("p-{path}")}),
            );
            let id = p["proposal"]["proposal_id"].clone();
            let revision = p["proposal"]["current_revision"]
                .as_str()
                .unwrap()
                .to_string();
            s.ok(
                DAVE,
                "proposal.request_review",
                json!({"workspace_id": "ws1", "proposal_id": id, "idempotency_key": format!("r-{path}")}),
            );
            s.ok(
                BOB,
                "vote.cast",
                json!({"workspace_id": "ws1", "proposal_id": id, "revision": revision,
                       "vote": "approve", "reason_md": "ok", "idempotency_key": format!("v-{path}")}),
            );
            Ready {
                path,
                proposal_id: id,
                revision,
                validation_id: Value::Null,
                claim_id: c["claim"]["claim_id"].clone(),
            }
        })
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(made.clone());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_VALIDATIONS {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(r) = made.get(i) else { break };
                    let v = s.ok(
                        DAVE,
                        "patch.validate",
                        json!({"workspace_id": "ws1", "proposal_id": r.proposal_id,
                               "revision": r.revision, "idempotency_key": format!("val-{}", r.path)}),
                    )["validation"]
                        .clone();
                    assert_eq!(v["valid"], true, "{v}");
                    assert_eq!(v["complete"], true, "{v}");
                    done.lock().unwrap()[i].validation_id = v["validation_id"].clone();
                }
            });
        }
    });
    done.into_inner().unwrap()
}

/// A deterministic jitter for round `round`, side `side` (no clock, no global RNG).
pub(crate) fn jitter(round: usize, side: u64) -> std::time::Duration {
    let mut x = (round as u64 + 1)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(side.wrapping_mul(1442695040888963407));
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    std::time::Duration::from_millis(x % (JITTER_MS + 1))
}

/// Releases `apply` and `other` from one barrier, each after its jitter; both outcomes.
fn race<O: Send>(
    round: usize,
    apply: impl FnOnce() -> (u16, Value) + Send,
    other: impl FnOnce() -> O + Send,
) -> ((u16, Value), O) {
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            barrier.wait();
            std::thread::sleep(jitter(round, 1));
            apply()
        });
        let b = scope.spawn(|| {
            barrier.wait();
            std::thread::sleep(jitter(round, 2));
            other()
        });
        (a.join().unwrap(), b.join().unwrap())
    })
}

fn apply(s: &Server, r: &Ready, round: usize) -> (u16, Value) {
    s.call(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": r.proposal_id,
               "validation_id": r.validation_id, "idempotency_key": format!("apply-{round}-{}", r.path)}),
    )
}

/// The events about `subject`, as (seq, kind).
fn events(s: &Server, subject: &Value) -> Vec<(i64, String)> {
    s.ok(
        ALICE,
        "event.list",
        json!({"workspace_id": "ws1", "subject": subject, "limit": 200}),
    )["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["seq"].as_i64().unwrap(),
                e["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The proposal's transactions; asserts none is left open.
fn transactions(s: &Server, proposal_id: &Value) -> Vec<Value> {
    let t = s.ok(
        ALICE,
        "transaction.list",
        json!({"workspace_id": "ws1", "proposal_id": proposal_id}),
    )["transactions"]
        .as_array()
        .unwrap()
        .clone();
    for x in &t {
        assert!(
            !["prepared", "installing"].contains(&x["status"].as_str().unwrap()),
            "a round left a transaction open: {x}"
        );
    }
    t
}

/// Whether round `r`'s apply landed, checked against the files and the transaction list.
fn landed(s: &Server, r: &Ready, outcome: &(u16, Value)) -> Option<Value> {
    let on_disk = s.repo.join(&r.path).exists();
    let applied: Vec<Value> = transactions(s, &r.proposal_id)
        .into_iter()
        .filter(|t| t["status"] == "applied")
        .collect();
    let ok = outcome.0 == 200;
    assert_eq!(
        on_disk, ok,
        "the file is there exactly when apply answered 200: {outcome:?}"
    );
    assert_eq!(applied.len(), usize::from(ok), "{applied:?} {outcome:?}");
    if !ok {
        assert_eq!(
            outcome.1["error"]["code"], "failed_precondition",
            "a refused apply is a precondition: {outcome:?}"
        );
    }
    applied.into_iter().next()
}

fn seq_of(ev: &[(i64, String)], kind: &str) -> Option<i64> {
    ev.iter().find(|(_, k)| k == kind).map(|(s, _)| *s)
}

#[test]
fn a_veto_racing_apply_is_either_refused_or_blocks_the_apply() {
    let Some(s) = server() else { return };
    let ready = prepare(&s, "veto", ROUNDS);
    let (mut vetoed, mut applied) = (0, 0);
    for (round, r) in ready.iter().enumerate() {
        let (a, veto) = race(
            round,
            || apply(&s, r, round),
            || {
                s.call(
                    SAM,
                    "vote.cast",
                    json!({"workspace_id": "ws1", "proposal_id": r.proposal_id, "revision": r.revision,
                           "vote": "veto", "reason_md": "no", "idempotency_key": format!("veto-{round}")}),
                )
            },
        );
        let tx = landed(&s, r, &a);
        assert!(
            !(veto.0 == 200 && tx.is_some()),
            "round {round}: the veto was committed and the apply landed: {veto:?} {a:?}"
        );
        if veto.0 == 200 {
            vetoed += 1;
            assert!(
                a.1["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("no_blocking_votes"),
                "{a:?}"
            );
            let v = s.ok(
                ALICE,
                "policy.evaluate",
                json!({"workspace_id": "ws1", "proposal_id": r.proposal_id}),
            );
            assert_eq!(v["verdict"]["approvable"], false, "{v}");
        } else {
            applied += 1;
            assert!(
                tx.is_some(),
                "round {round}: neither side won: {veto:?} {a:?}"
            );
            assert_eq!(veto.1["error"]["code"], "failed_precondition", "{veto:?}");
        }
    }
    eprintln!("veto race: {vetoed} vetoed, {applied} applied in {ROUNDS} rounds");
}

#[test]
fn a_forced_release_and_regrant_racing_apply_never_lets_the_old_grant_land() {
    let Some(s) = server() else { return };
    let ready = prepare(&s, "regrant", ROUNDS);
    let (mut regranted, mut applied) = (0, 0);
    for (round, r) in ready.iter().enumerate() {
        let (a, (release, regrant)) = race(
            round,
            || apply(&s, r, round),
            || {
                let release = s.call(
                    ALICE,
                    "claim.force_release",
                    json!({"workspace_id": "ws1", "claim_id": r.claim_id, "reason": "reassigned",
                           "idempotency_key": format!("fr-{round}")}),
                );
                let regrant = (release.0 == 200).then(|| {
                    s.call(
                        ALICE,
                        "claim.acquire",
                        json!({"workspace_id": "ws1", "task_id": "t2",
                               "resource_id": format!("file:{}", r.path), "mode": "write",
                               "idempotency_key": format!("rg-{round}")}),
                    )
                });
                (release, regrant)
            },
        );
        let tx = landed(&s, r, &a);
        let claim_events = events(&s, &r.claim_id);
        let released_at = seq_of(&claim_events, "claim.release");
        match (&tx, released_at) {
            (Some(t), Some(released)) => {
                // Both happened: then the release came after the transaction settled.
                let te = events(&s, &t["transaction_id"]);
                let settled = seq_of(&te, "transaction.applied").unwrap();
                assert!(
                    released > settled,
                    "round {round}: the claim was released (event {released}) before its apply settled (event {settled}): {te:?}"
                );
                applied += 1;
            }
            (Some(_), None) => {
                applied += 1;
                assert_eq!(
                    release.1["error"]["code"], "failed_precondition",
                    "{release:?}"
                );
                assert!(
                    release.1["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("held by transaction"),
                    "{release:?}"
                );
            }
            (None, Some(_)) => {
                regranted += 1;
                let m = a.1["error"]["message"].as_str().unwrap();
                assert!(m.contains("no longer the validated grant"), "{a:?}");
                // The new holder got a new fencing token and nothing of the old grant landed.
                if let Some(g) = &regrant {
                    assert_eq!(g.0, 200, "{g:?}");
                }
            }
            (None, None) => panic!("round {round}: neither side won: {release:?} {a:?}"),
        }
        // Clean up the re-grant, so the next round's claims stay disjoint from it.
        if let Some((200, g)) = &regrant {
            s.ok(
                ALICE,
                "claim.release",
                json!({"workspace_id": "ws1", "claim_id": g["claim"]["claim_id"],
                       "idempotency_key": format!("cleanup-{round}")}),
            );
        }
    }
    eprintln!("re-grant race: {regranted} re-granted first, {applied} applied in {ROUNDS} rounds");
}

#[test]
fn a_withdrawal_racing_apply_never_wedges_the_workspace() {
    let Some(s) = server() else { return };
    let ready = prepare(&s, "withdraw", ROUNDS);
    let (mut withdrawn, mut applied) = (0, 0);
    for (round, r) in ready.iter().enumerate() {
        let (a, w) = race(
            round,
            || apply(&s, r, round),
            || {
                s.call(
                    DAVE,
                    "proposal.withdraw",
                    json!({"workspace_id": "ws1", "proposal_id": r.proposal_id, "reason_md": "never mind",
                           "idempotency_key": format!("w-{round}")}),
                )
            },
        );
        let tx = landed(&s, r, &a);
        let p = s.ok(
            ALICE,
            "proposal.get",
            json!({"workspace_id": "ws1", "proposal_id": r.proposal_id}),
        );
        let status = p["proposal"]["status"].as_str().unwrap().to_string();
        assert!(
            !(w.0 == 200 && tx.is_some()),
            "round {round}: withdrawn and applied: {w:?} {a:?}"
        );
        if w.0 == 200 {
            withdrawn += 1;
            assert_eq!(status, "withdrawn");
        } else {
            applied += 1;
            assert!(tx.is_some(), "round {round}: neither side won: {w:?} {a:?}");
            assert_eq!(status, "accepted", "{p}");
            assert_eq!(w.1["error"]["code"], "failed_precondition", "{w:?}");
        }
    }
    // Every round's apply ran (no round's leftovers refused the next); one more still lands.
    let last = prepare(&s, "after", 1);
    let a = apply(&s, &last[0], ROUNDS);
    assert_eq!(a.0, 200, "{a:?}");
    eprintln!("withdraw race: {withdrawn} withdrawn, {applied} applied in {ROUNDS} rounds");
}

/// Rounds of the holder's own upkeep racing apply: fewer, as no gate changes hands.
const UPKEEP_ROUNDS: usize = 20;
/// Heartbeats sent after one shows the re-based claim, and most heartbeats in a round.
const UPKEEP_AFTER: usize = 5;
const MAX_BEATS: usize = 2_000;

#[test]
fn the_holders_heartbeat_and_extension_racing_apply_are_answered_and_never_undo_the_rebase() {
    let Some(s) = server() else { return };
    let ready = prepare(&s, "upkeep", UPKEEP_ROUNDS);
    for (round, r) in ready.iter().enumerate() {
        let (a, (beats, extend)) = race(
            round,
            || apply(&s, r, round),
            || {
                // Heartbeats back to back until one answers the claim re-based onto the
                // installed bytes (and a few after), so that apply's settle falls between
                // some heartbeat's read and its write.
                let mut beats: Vec<(u16, Value)> = vec![];
                let mut after = 0;
                while after < UPKEEP_AFTER && beats.len() < MAX_BEATS {
                    let beat = s.call(
                        DAVE,
                        "claim.heartbeat",
                        json!({"workspace_id": "ws1", "claim_id": r.claim_id}),
                    );
                    if beat.0 != 200 || beat.1["claim"]["base_hash"] != "" {
                        after += 1;
                    }
                    beats.push(beat);
                }
                let extend = s.call(
                    DAVE,
                    "claim.extend",
                    json!({"workspace_id": "ws1", "claim_id": r.claim_id, "ttl_seconds": 600,
                           "idempotency_key": format!("ext-{round}")}),
                );
                (beats, extend)
            },
        );
        assert!(
            landed(&s, r, &a).is_some(),
            "round {round}: upkeep is no gate, yet the apply did not land: {a:?}"
        );
        // The holder's own upkeep is never refused for a version only the server read.
        for beat in &beats {
            assert_eq!(beat.0, 200, "round {round}: a heartbeat: {beat:?}");
        }
        assert_eq!(extend.0, 200, "round {round}: the extension: {extend:?}");
        // Whatever order they landed in, the claim is based on the bytes apply installed.
        let claim = s.ok(
            DAVE,
            "claim.show",
            json!({"workspace_id": "ws1", "claim_id": r.claim_id}),
        );
        let now = s.ok(
            DAVE,
            "resource.show",
            json!({"workspace_id": "ws1", "resource_id": format!("file:{}", r.path)}),
        );
        assert_eq!(
            claim["claim"]["base_hash"], now["resource"]["current_hash"],
            "round {round}: an upkeep write undid the rebase: {claim}"
        );
        assert_ne!(claim["claim"]["base_hash"], "", "round {round}: {claim}");
    }
}
