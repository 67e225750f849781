//! The apply fence on a real SQLite file: while a transaction is open, every write that
//! could change one of its gates is refused in its own transaction, naming the transaction;
//! the expiry sweep holds its claims; the gate decides on the facts as committed; settling
//! lifts the fence.

use super::applies::{ApplyFacts, Fence, GateRefusal, Move, TxRow, ValidationRow};
use super::claims::{Acquire, Acquired, ClaimRow};
use super::proposals::{ProposalRow, RevisionRow};
use super::reviews::NewVote;
use super::*;
use crate::domain::claim::{ClaimEvent, ClaimMode, ClaimState, ResourceId};
use crate::domain::policy::VoteKind;
use crate::domain::proposal::{ProposalEvent, ProposalState};
use crate::domain::transaction::{TxEvent, TxState};

const REV: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn binding(op: &str, key: &str) -> Binding {
    Binding {
        workspace_id: "ws".into(),
        actor_key: "member:alice".into(),
        operation: op.into(),
        idempotency_key: key.into(),
        digest: "d".into(),
        result_id: key.into(),
        created_at: "t0".into(),
    }
}

async fn claim(s: &Store, holder: &str, resource: &str, now: i64, ttl: i64) -> ClaimRow {
    let a = Acquire {
        claim_id: format!("clm_{}", crate::ids::new_creation_key()),
        workspace_id: "ws".into(),
        resource: ResourceId::parse(resource).unwrap(),
        span: None,
        holder: holder.into(),
        task_id: "t".into(),
        session_id: None,
        mode: ClaimMode::Write,
        release_on: crate::domain::claim::ReleaseOn::Manual,
        expires_at: now + ttl,
        now,
        now_rfc3339: format!("t{now}"),
        record: "{}".into(),
        binding: None,
    };
    match s.acquire_claim(a).await.unwrap() {
        Acquired::Granted(c) => c,
        other => panic!("{other:?}"),
    }
}

/// A proposal in review with a validation; returns its id.
async fn proposal(s: &Store) -> String {
    let id = format!("prp_{}", crate::ids::new_creation_key());
    s.create_proposal(
        ProposalRow {
            proposal_id: id.clone(),
            workspace_id: "ws".into(),
            author: "member:dave".into(),
            task_id: "t".into(),
            status: ProposalState::Pending,
            version: 1,
            current_revision: REV.into(),
            record: "{}".into(),
            seq: 0,
        },
        RevisionRow {
            number: 1,
            revision: REV.into(),
            bytes: 1,
            created_at: "t".into(),
            affected_resources: "[]".into(),
        },
        binding("proposal.create", &id),
    )
    .await
    .unwrap();
    s.transition_proposal(
        &id,
        1,
        ProposalEvent::RequestReview,
        "{}".into(),
        "member:dave",
        None,
        binding("proposal.request_review", &format!("rr-{id}")),
        "t",
        None,
    )
    .await
    .unwrap();
    s.insert_validation(
        ValidationRow {
            validation_id: format!("val-{id}"),
            workspace_id: "ws".into(),
            proposal_id: id.clone(),
            revision: REV.into(),
            expires_at: i64::MAX,
            record: "{}".into(),
        },
        "member:alice",
        "t",
        binding("patch.validate", &format!("v-{id}")),
    )
    .await
    .unwrap();
    id
}

/// Opens a transaction of `proposal_id` holding `claims` and `paths`, through `gate`.
async fn open(
    s: &Store,
    proposal_id: &str,
    claims: &[&ClaimRow],
    paths: &[&str],
    gate: super::applies::ApplyGate,
) -> Result<TxRow, StoreError> {
    let id = format!("txn_{}", crate::ids::new_creation_key());
    s.open_transaction(
        TxRow {
            transaction_id: id.clone(),
            workspace_id: "ws".into(),
            proposal_id: proposal_id.into(),
            revision: REV.into(),
            validation_id: format!("val-{proposal_id}"),
            status: TxState::Prepared,
            version: 1,
            record: String::new(),
            seq: 0,
        },
        Fence {
            claims: claims.iter().map(|c| c.claim_id.clone()).collect(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
        },
        gate,
        "member:alice",
        "{}",
        "t",
        binding("patch.apply", &id),
    )
    .await
}

fn pass() -> super::applies::ApplyGate {
    Box::new(|_: &ApplyFacts| Ok("{}".to_string()))
}

fn fenced(r: Result<impl std::fmt::Debug, StoreError>, txn: &str) {
    match r {
        Err(StoreError::Precondition { message, .. }) => {
            assert!(message.contains(txn), "{message}")
        }
        other => panic!("not refused by the fence of {txn}: {other:?}"),
    }
}

async fn settle(s: &Store, t: &TxRow) {
    s.advance_transaction(Move {
        id: t.transaction_id.clone(),
        expected_version: t.version,
        ev: TxEvent::Fail,
        record: "{}".into(),
        actor: "member:alice".into(),
        detail: "{}".into(),
        at: "t".into(),
        binding: None,
        rebase: vec![],
    })
    .await
    .unwrap();
}

fn vote(proposal_id: &str, key: &str) -> NewVote {
    NewVote {
        vote_id: format!("vot_{key}"),
        proposal_id: proposal_id.into(),
        revision: REV.into(),
        voter: "member:sam".into(),
        roles: vec!["reviewer".into()],
        vote: VoteKind::Veto,
        confidence: 1.0,
        reason_md: "no".into(),
        at: "t".into(),
        binding: binding("vote.cast", key),
    }
}

#[tokio::test]
async fn an_open_transaction_fences_its_evidence_claims_and_paths_until_it_settles() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("db")).unwrap();
    let held = claim(&s, "member:dave", "file:a.txt", 100, 900).await;
    let other = claim(&s, "member:erin", "file:z.txt", 100, 900).await;
    let p = proposal(&s).await;
    let t = open(&s, &p, &[&held], &["a.txt"], pass()).await.unwrap();
    let txn = t.transaction_id.clone();
    // Evidence and the proposal's own moves.
    fenced(s.cast_vote(vote(&p, "v1")).await, &txn);
    fenced(
        s.transition_proposal(
            &p,
            2,
            ProposalEvent::Withdraw,
            "{}".into(),
            "member:dave",
            None,
            binding("proposal.withdraw", "w"),
            "t",
            None,
        )
        .await,
        &txn,
    );
    // The claims it holds, whatever the event; others' claims are free.
    for ev in [ClaimEvent::Release, ClaimEvent::Revoke, ClaimEvent::Suspend] {
        fenced(
            s.transition_claim(&held.claim_id, held.version, ev, "member:alice", true, "t")
                .await,
            &txn,
        );
    }
    s.transition_claim(
        &other.claim_id,
        other.version,
        ClaimEvent::Suspend,
        "member:alice",
        true,
        "t",
    )
    .await
    .unwrap();
    // No new grant on a path it installs, even once its own claim's time is up; elsewhere,
    // yes.
    let mut regrant = Acquire {
        claim_id: "clm_regrant".into(),
        workspace_id: "ws".into(),
        resource: ResourceId::parse("directory:").unwrap(),
        span: None,
        holder: "member:erin".into(),
        task_id: "t".into(),
        session_id: None,
        mode: ClaimMode::Write,
        release_on: crate::domain::claim::ReleaseOn::Manual,
        expires_at: 10_000,
        now: 2_000,
        now_rfc3339: "t".into(),
        record: "{}".into(),
        binding: None,
    };
    fenced(s.acquire_claim(regrant.clone()).await, &txn);
    regrant.resource = ResourceId::parse("file:a.txt").unwrap();
    fenced(s.acquire_claim(regrant.clone()).await, &txn);
    regrant.resource = ResourceId::parse("file:b.txt").unwrap();
    assert!(matches!(
        s.acquire_claim(regrant.clone()).await.unwrap(),
        Acquired::Granted(_)
    ));
    // The sweep holds the fenced claim past its expiry and expires the suspended one.
    assert_eq!(s.expire_due_claims(2_000, "t").await.unwrap(), 1);
    assert_eq!(
        s.claim(&held.claim_id).await.unwrap().unwrap().status,
        ClaimState::Active
    );
    assert_eq!(
        s.claim(&other.claim_id).await.unwrap().unwrap().status,
        ClaimState::Expired,
        "a suspended claim past its expiry expires too"
    );
    // A second apply in the workspace waits, told what clears the first.
    let p2 = proposal(&s).await;
    match open(&s, &p2, &[], &["q.txt"], pass()).await {
        Err(StoreError::Conflict(m)) => {
            assert!(m.contains(&txn) && m.contains("recovery"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // Settled: the fence is gone.
    settle(&s, &t).await;
    assert_eq!(s.expire_due_claims(2_000, "t").await.unwrap(), 1);
    assert_eq!(
        s.claim(&held.claim_id).await.unwrap().unwrap().status,
        ClaimState::Expired
    );
    s.cast_vote(vote(&p, "v2")).await.unwrap();
    regrant.claim_id = "clm_after".into();
    regrant.resource = ResourceId::parse("file:a.txt").unwrap();
    assert!(matches!(
        s.acquire_claim(regrant).await.unwrap(),
        Acquired::Granted(_)
    ));
}

#[tokio::test]
async fn the_gate_sees_what_was_committed_and_its_refusal_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("db")).unwrap();
    let c = claim(&s, "member:dave", "file:a.txt", 100, 900).await;
    let p = proposal(&s).await;
    s.cast_vote(vote(&p, "veto")).await.unwrap();
    let gate: super::applies::ApplyGate = Box::new(|f: &ApplyFacts| {
        assert_eq!(f.proposal.status, ProposalState::InReview);
        assert_eq!(f.claims.len(), 1);
        assert!(f.claims[0].1.is_some());
        if f.review.votes.iter().any(|v| v.vote == VoteKind::Veto) {
            return Err(GateRefusal {
                field: None,
                message: "vetoed".into(),
            });
        }
        Ok("{}".into())
    });
    match open(&s, &p, &[&c], &["a.txt"], gate).await {
        Err(StoreError::Precondition { message, .. }) => assert_eq!(message, "vetoed"),
        other => panic!("{other:?}"),
    }
    let rows: i64 = s
        .call(|c| {
            Ok(c.query_row(
                "SELECT (SELECT COUNT(*) FROM transactions) + (SELECT COUNT(*) FROM transaction_claims)
                      + (SELECT COUNT(*) FROM transaction_paths)",
                [],
                |r| r.get(0),
            )?)
        })
        .await
        .unwrap();
    assert_eq!(rows, 0, "a refused gate commits nothing");
    // Nothing fences the claim: its holder may release it.
    s.transition_claim(
        &c.claim_id,
        c.version,
        ClaimEvent::Release,
        "member:dave",
        false,
        "t",
    )
    .await
    .unwrap();
}
