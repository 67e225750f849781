//! The in-toto Statement v1 Airlock signs, and the three kinds it makes: a verification (SLSA
//! Verification Summary v1, extended by Airlock's own fields), a delivery and an applied
//! transaction (Airlock's own predicate types).
//!
//! Every payload is canonical JSON (keys sorted at every depth, compact: see
//! [`crate::canonical`]), so a statement always has exactly one byte form.

use crate::verification::{Status, Verification};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// `_type` of an in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// `predicateType` of a verification: SLSA Verification Summary v1.
pub const VERIFICATION_PREDICATE: &str = "https://slsa.dev/verification_summary/v1";
/// `predicateType` of a delivery.
pub const DELIVERY_PREDICATE: &str = "urn:airlock:attestation:delivery:v1";
/// `predicateType` of an applied transaction on the governed path.
pub const TRANSACTION_PREDICATE: &str = "urn:airlock:attestation:transaction:v1";
/// Every predicate type Airlock signs; `attestation verify` refuses any other.
pub const PREDICATE_TYPES: [&str; 3] = [
    VERIFICATION_PREDICATE,
    DELIVERY_PREDICATE,
    TRANSACTION_PREDICATE,
];
/// The VSA's `verifiedLevels` entry of a verification that passed (a custom track, which
/// the VSA specification requires not to begin with `SLSA_`).
pub const PASSED_LEVEL: &str = "AIRLOCK_SANDBOXED_RUN_PASSED";

/// An in-toto Statement v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub type_: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: Value,
}

/// One subject: a name and its digests (`gitCommit`, `gitTree`, `sha256`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    pub name: String,
    pub digest: BTreeMap<String, String>,
}

impl Subject {
    fn one(name: impl Into<String>, algorithm: &str, value: &str) -> Subject {
        Subject {
            name: name.into(),
            digest: BTreeMap::from([(algorithm.to_string(), value.to_string())]),
        }
    }
}

impl Statement {
    /// The statement's canonical bytes: what the envelope's payload carries.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::canonical::to_string(self).into_bytes()
    }

    /// Every `gitCommit` digest among the subjects.
    pub fn commits(&self) -> impl Iterator<Item = &str> {
        self.subject
            .iter()
            .filter_map(|s| s.digest.get("gitCommit").map(String::as_str))
    }

    /// Every `gitTree` digest among the subjects.
    pub fn trees(&self) -> impl Iterator<Item = &str> {
        self.subject
            .iter()
            .filter_map(|s| s.digest.get("gitTree").map(String::as_str))
    }
}

/// Who signs: the daemon's configured verifier id and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub id: String,
}

impl Verifier {
    fn value(&self) -> Value {
        json!({"id": self.id, "version": {"airlock": env!("CARGO_PKG_VERSION")}})
    }
}

/// The resource URI of a revision of a repository on this host.
pub fn resource_uri(repository: &str, commit: &str) -> String {
    format!("git+file://{repository}@{commit}")
}

/// The statement of a terminal verification. `PASSED` only for `passed`: every other status
/// (failed, timed out, source changed, error, cancelled...) is `FAILED`, and says which.
pub fn verification(v: &Verification, verifier: &Verifier) -> Statement {
    let passed = v.status == Status::Passed;
    let mut subject = vec![Subject::one(
        format!("revision:{}", v.candidate_revision),
        "gitCommit",
        &v.candidate_revision,
    )];
    if let Some(tree) = &v.candidate_tree {
        subject.push(Subject::one(format!("tree:{tree}"), "gitTree", tree));
    }
    let resource = v
        .repository
        .as_deref()
        .map(|r| resource_uri(r, &v.candidate_revision))
        .unwrap_or_else(|| format!("git+unknown@{}", v.candidate_revision));
    let predicate = json!({
        "verifier": verifier.value(),
        "timeVerified": v.finished_at.as_deref().unwrap_or(&v.created_at),
        "resourceUri": resource,
        "policy": {
            "uri": format!("urn:airlock:environment:sha256:{}", v.environment_sha256),
            "digest": {"sha256": v.environment_sha256},
        },
        "verificationResult": if passed { "PASSED" } else { "FAILED" },
        "verifiedLevels": if passed { vec![PASSED_LEVEL] } else { vec!["FAILED"] },
        "airlock": {
            "verification_id": v.verification_id,
            "status": v.status.as_str(),
            "argv": v.argv,
            "image": v.image,
            "image_id": v.observed_image,
            "user": v.user,
            "working_dir": v.working_dir,
            "timeout_seconds": v.timeout_seconds,
            "cpu_limit": v.cpu_limit,
            "memory_limit_bytes": v.memory_limit_bytes,
            "environment_sha256": v.environment_sha256,
            "setup_script_sha256": v.setup_script_sha256,
            "exit_code": v.exit_code,
            "oom_killed": v.oom_killed,
            "error": v.error,
            "output_sha256": hex::encode(Sha256::digest(v.output.as_bytes())),
            "output_truncated": v.output_truncated,
            "output_bytes_total": v.output_bytes_total,
            "engine": v.engine,
            "duration_ms": v.duration_ms,
            "created_at": v.created_at,
            "finished_at": v.finished_at,
        },
    });
    Statement {
        type_: STATEMENT_TYPE.into(),
        subject,
        predicate_type: VERIFICATION_PREDICATE.into(),
        predicate,
    }
}

/// A delivery's statement: the landed (or proposed) commit and its tree as subject.
pub struct Delivery<'a> {
    pub landed_revision: &'a str,
    pub landed_tree: &'a str,
    pub workspace_id: &'a str,
    pub candidate_id: &'a str,
    pub request: &'a crate::candidate::DeliveryRequest,
    pub receipt: &'a crate::candidate::DeliveryReceipt,
    /// The request's verifications, in its order.
    pub verifications: &'a [&'a Verification],
}

pub fn delivery(d: &Delivery<'_>, verifier: &Verifier) -> Statement {
    let verifications: Vec<Value> = d
        .verifications
        .iter()
        .map(|v| {
            json!({
                "verification_id": v.verification_id,
                "status": v.status.as_str(),
                "candidate_revision": v.candidate_revision,
                "environment_sha256": v.environment_sha256,
                "attestation": v.attestation.as_ref().map(|a| a.digest()),
            })
        })
        .collect();
    let r = d.request;
    let predicate = json!({
        "verifier": verifier.value(),
        "timeDelivered": d.receipt.created_at,
        "workspace_id": d.workspace_id,
        "candidate_id": d.candidate_id,
        "candidate_revision": d.receipt.candidate_revision,
        "request": {
            "request_id": r.request_id,
            "request_version": r.request_version,
            "action": r.action,
            "target_ref": r.target_ref,
            "expected_target_revision": r.expected_target_revision,
            "requested_by": r.requested_by,
            "created_at": r.created_at,
        },
        "approver": r.decided_by,
        "decided_at": r.decided_at,
        "receipt": d.receipt,
        "verifications": verifications,
    });
    Statement {
        type_: STATEMENT_TYPE.into(),
        subject: vec![
            Subject::one(
                format!("revision:{}", d.landed_revision),
                "gitCommit",
                d.landed_revision,
            ),
            Subject::one(format!("tree:{}", d.landed_tree), "gitTree", d.landed_tree),
        ],
        predicate_type: DELIVERY_PREDICATE.into(),
        predicate,
    }
}

/// An applied transaction's statement. Subjects: the worktree's HEAD before the apply and
/// the post-image of every path that has one (a removed path is in the predicate only).
pub struct Transaction<'a> {
    pub transaction_id: &'a str,
    pub workspace_id: &'a str,
    pub proposal_id: &'a str,
    /// The proposal revision's digest (the SHA-256 of its patch).
    pub revision: &'a str,
    pub head_before: Option<&'a str>,
    pub head_after: Option<&'a str>,
    pub applied_by: &'a str,
    pub hashes: &'a [crate::wire::PathHashes],
    /// The verdict's approvals and the claims the apply landed under.
    pub approvals: &'a [String],
    pub claims: &'a [String],
    pub validation_id: &'a str,
    /// The validation's dry run and tests: (verification id, attestation digest if signed).
    pub verifications: Vec<(String, Option<String>)>,
    pub applied_at: &'a str,
}

pub fn transaction(t: &Transaction<'_>, verifier: &Verifier) -> Statement {
    use crate::apply::Fingerprint;
    let mut subject = Vec::new();
    if let Some(head) = t.head_before {
        subject.push(Subject::one(
            format!("head-before:{head}"),
            "gitCommit",
            head,
        ));
    }
    for h in t.hashes {
        match &h.after {
            Fingerprint::File { sha256, .. } | Fingerprint::Symlink { sha256 } => {
                subject.push(Subject::one(h.path.clone(), "sha256", sha256))
            }
            Fingerprint::Absent => {}
        }
    }
    let verifications: Vec<Value> = t
        .verifications
        .iter()
        .map(|(id, digest)| json!({"verification_id": id, "attestation": digest}))
        .collect();
    let predicate = json!({
        "verifier": verifier.value(),
        "timeApplied": t.applied_at,
        "transaction_id": t.transaction_id,
        "workspace_id": t.workspace_id,
        "proposal_id": t.proposal_id,
        "proposal_revision": {"sha256": t.revision},
        "head_before": t.head_before,
        "head_after": t.head_after,
        "applied_by": t.applied_by,
        "paths": t.hashes,
        "verdict": {"approvals": t.approvals, "claims": t.claims},
        "validation": {"validation_id": t.validation_id, "verifications": verifications},
    });
    Statement {
        type_: STATEMENT_TYPE.into(),
        subject,
        predicate_type: TRANSACTION_PREDICATE.into(),
        predicate,
    }
}
