//! What Airlock attests, made from its records: a terminal verification's statement (SLSA
//! VSA v1 with Airlock's fields), a delivery's and an applied transaction's; and the
//! [`Attestor`]: the configured signing key, the public keys attestations are checked with
//! and the verifier id. The statement's form, the envelope and the keys are [`crate::attest`]'s.

use crate::attest::statement::{
    DELIVERY_PREDICATE, STATEMENT_TYPE, Statement, Subject, TRANSACTION_PREDICATE,
    VERIFICATION_PREDICATE,
};
use crate::attest::{Envelope, PublicKey, SigningKey, verify};
use crate::config::Config;
use crate::verification::{Status, Verification};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The VSA's `verifiedLevels` entry of a verification that passed (a custom track, which
/// the VSA specification requires not to begin with `SLSA_`).
pub const PASSED_LEVEL: &str = "AIRLOCK_SANDBOXED_RUN_PASSED";

/// The daemon's signing key (if configured) and every public key its attestations may be
/// checked with: the signing key's own first, then `verification_keys` (older keys kept so
/// that what they signed still verifies).
#[derive(Debug)]
pub struct Attestor {
    signer: Option<SigningKey>,
    keys: Vec<PublicKey>,
    pub verifier: Verifier,
}

impl Attestor {
    /// Signs nothing; checks nothing.
    pub fn disabled() -> Attestor {
        Attestor {
            signer: None,
            keys: vec![],
            verifier: Verifier {
                id: crate::config::DEFAULT_VERIFIER_ID.into(),
            },
        }
    }

    /// Reads the configured keys. Errors name the config field and the file.
    pub fn load(config: &Config) -> Result<Attestor, String> {
        let signer = match &config.signing_key {
            Some(path) => Some(SigningKey::read(path).map_err(|e| format!("signing_key: {e}"))?),
            None => None,
        };
        let mut keys: Vec<PublicKey> = signer.iter().map(|s| s.public.clone()).collect();
        for (i, path) in config.verification_keys.iter().enumerate() {
            let k = PublicKey::read(path).map_err(|e| format!("verification_keys[{i}]: {e}"))?;
            if !keys.iter().any(|have| have.key_id == k.key_id) {
                keys.push(k);
            }
        }
        Ok(Attestor {
            signer,
            keys,
            verifier: Verifier {
                id: config.verifier_id.clone(),
            },
        })
    }

    /// An attestor signing with `key` (tests).
    pub fn with_key(key: SigningKey, verifier_id: &str) -> Attestor {
        Attestor {
            keys: vec![key.public.clone()],
            signer: Some(key),
            verifier: Verifier {
                id: verifier_id.into(),
            },
        }
    }

    /// Whether attestations are signed.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// The id of the key new attestations are signed with.
    pub fn signing_key_id(&self) -> Option<&str> {
        self.signer.as_ref().map(|s| s.public.key_id.as_str())
    }

    /// Every public key attestations are checked with, the signing key's first.
    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// Signs `statement`, when a signing key is configured.
    pub fn sign(&self, statement: &Statement) -> Option<Envelope> {
        self.signer
            .as_ref()
            .map(|k| Envelope::sign(&statement.to_bytes(), k))
    }

    /// Attaches the attestation of a terminal verification (replacing any it had: the
    /// statement covers the record as it is now). Without a key it removes none it had.
    pub fn attest_verification(&self, v: &mut Verification) {
        debug_assert!(v.status.is_terminal());
        if let Some(e) = self.sign(&verification(v, &self.verifier)) {
            v.attestation = Some(e);
        }
    }

    /// Checks an attestation against the configured keys.
    pub fn check(&self, envelope: &Envelope) -> Result<verify::Verified, verify::Refused> {
        verify::verify(envelope, &self.keys)
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
    let mut predicate = predicate;
    // Only with a dependency set (so a statement without one is exactly as before): the set's
    // key, lockfiles and content digest, and every package it resolved to as a resource
    // descriptor (SLSA's `resolvedDependencies` form: a package URL and its digests).
    if let Some(d) = &v.dependencies {
        predicate["airlock"]["dependencies"] =
            serde_json::to_value(d).expect("a dependency record serializes");
        predicate["airlock"]["resolvedDependencies"] = d
            .resolved
            .iter()
            .map(|r| json!({"uri": r.uri, "digest": r.digest}))
            .collect();
    }
    // Only when the record names it (a record from before isolation levels has none, and its
    // statement is exactly as before): the OCI runtime the job ran under.
    if let Some(r) = v.runtime {
        predicate["airlock"]["runtime"] = json!(r.as_str());
    }
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
    use crate::install::Fingerprint;
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

mod records;
pub use records::{RecordChecked, RecordRefused, check_record};

#[cfg(test)]
mod tests;
