//! Checking an attestation: the envelope's form, its signature by a known key, the statement's
//! type and predicate type, and (when asked) that its subject is a given revision. Each refusal
//! is one line that says which part failed.

use super::dsse::{Envelope, PAYLOAD_TYPE, SignatureRefused};
use super::keys::PublicKey;
use super::statement::{
    DELIVERY_PREDICATE, PREDICATE_TYPES, STATEMENT_TYPE, Statement, VERIFICATION_PREDICATE,
};
use crate::limits;

/// An attestation that holds.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The id of the key whose signature verified.
    pub key_id: String,
    pub statement: Statement,
    /// `sha256:<hex>` of the envelope (see [`Envelope::digest`]).
    pub digest: String,
}

/// Why an attestation does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the attestation is {len} bytes; the limit is {max}", max = limits::MAX_ATTESTATION_BYTES)]
    TooLarge { len: usize },
    #[error("not a DSSE envelope: {0}")]
    NotAnEnvelope(String),
    #[error("payloadType is {0:?}, not {PAYLOAD_TYPE:?}")]
    PayloadType(String),
    #[error("the envelope has {n} signatures; the limit is {max}", max = limits::MAX_ENVELOPE_SIGNATURES)]
    TooManySignatures { n: usize },
    #[error(
        "no public key to verify with (configure signing_key or verification_keys, or pass --public-key)"
    )]
    NoKeys,
    #[error("signature: {0}")]
    Signature(#[from] SignatureRefused),
    #[error("the payload is not an in-toto statement: {0}")]
    NotAStatement(String),
    #[error("_type is {0:?}, not {STATEMENT_TYPE:?}")]
    StatementType(String),
    #[error("predicateType {0:?} is not one Airlock signs")]
    PredicateType(String),
    #[error("the statement has no subject")]
    NoSubject,
    #[error("subject {name:?} has a malformed {algorithm} digest {value:?}")]
    SubjectDigest {
        name: String,
        algorithm: String,
        value: String,
    },
    #[error("verificationResult {result:?} disagrees with status {status:?}")]
    ResultDisagrees { result: String, status: String },
    #[error("subject does not name commit {expected} (it names {found})")]
    SubjectCommit { expected: String, found: String },
    #[error("a note's first envelope must be a delivery's (it is {0:?})")]
    NoteWithoutDelivery(String),
    #[error(
        "envelope {index} ({digest}) is not a verification the delivery relied on (it names {listed})"
    )]
    NotReliedOn {
        index: usize,
        digest: String,
        listed: String,
    },
    #[error("subject names tree {found}, but {commit} has tree {expected}")]
    SubjectTree {
        commit: String,
        expected: String,
        found: String,
    },
}

/// Checks an envelope's bytes against `keys`.
pub fn verify_bytes(bytes: &[u8], keys: &[PublicKey]) -> Result<Verified, Refused> {
    if bytes.len() > limits::MAX_ATTESTATION_BYTES {
        return Err(Refused::TooLarge { len: bytes.len() });
    }
    let envelope: Envelope =
        serde_json::from_slice(bytes).map_err(|e| Refused::NotAnEnvelope(e.to_string()))?;
    verify(&envelope, keys)
}

/// Checks a parsed envelope against `keys`.
pub fn verify(envelope: &Envelope, keys: &[PublicKey]) -> Result<Verified, Refused> {
    if envelope.payload_type != PAYLOAD_TYPE {
        return Err(Refused::PayloadType(envelope.payload_type.clone()));
    }
    if envelope.signatures.len() > limits::MAX_ENVELOPE_SIGNATURES {
        return Err(Refused::TooManySignatures {
            n: envelope.signatures.len(),
        });
    }
    if keys.is_empty() {
        return Err(Refused::NoKeys);
    }
    let key = envelope.verify(keys)?;
    let payload = envelope.payload_bytes()?;
    let statement: Statement =
        serde_json::from_slice(&payload).map_err(|e| Refused::NotAStatement(e.to_string()))?;
    if statement.type_ != STATEMENT_TYPE {
        return Err(Refused::StatementType(statement.type_));
    }
    if !PREDICATE_TYPES.contains(&statement.predicate_type.as_str()) {
        return Err(Refused::PredicateType(statement.predicate_type));
    }
    if statement.subject.is_empty() {
        return Err(Refused::NoSubject);
    }
    for s in &statement.subject {
        for (algorithm, value) in &s.digest {
            let len_ok = match algorithm.as_str() {
                "gitCommit" | "gitTree" => value.len() == 40 || value.len() == 64,
                "sha256" => value.len() == 64,
                _ => false,
            };
            if !len_ok
                || !value
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(Refused::SubjectDigest {
                    name: s.name.clone(),
                    algorithm: algorithm.clone(),
                    value: value.clone(),
                });
            }
        }
    }
    if statement.predicate_type == VERIFICATION_PREDICATE {
        let result = statement.predicate["verificationResult"]
            .as_str()
            .unwrap_or_default();
        let status = statement.predicate["airlock"]["status"]
            .as_str()
            .unwrap_or_default();
        if (result == "PASSED") != (status == "passed") || !matches!(result, "PASSED" | "FAILED") {
            return Err(Refused::ResultDisagrees {
                result: result.into(),
                status: status.into(),
            });
        }
    }
    Ok(Verified {
        key_id: key.key_id.clone(),
        digest: envelope.digest(),
        statement,
    })
}

/// Checks that `statement` is about `commit` (and, when it names a tree, `tree`).
pub fn check_subject(statement: &Statement, commit: &str, tree: &str) -> Result<(), Refused> {
    if !statement.commits().any(|c| c == commit) {
        return Err(Refused::SubjectCommit {
            expected: commit.into(),
            found: statement.commits().collect::<Vec<_>>().join(", "),
        });
    }
    if let Some(found) = statement.trees().find(|t| *t != tree) {
        return Err(Refused::SubjectTree {
            commit: commit.into(),
            expected: tree.into(),
            found: found.into(),
        });
    }
    Ok(())
}

/// Checks a note (`refs/notes/airlock`): its first envelope is a delivery's, and every other
/// one is a verification that delivery names by digest, so nothing unrelated rides along.
pub fn check_note(all: &[Verified]) -> Result<(), Refused> {
    let Some((delivery, rest)) = all.split_first() else {
        return Ok(());
    };
    if rest.is_empty() {
        return Ok(());
    }
    if delivery.statement.predicate_type != DELIVERY_PREDICATE {
        return Err(Refused::NoteWithoutDelivery(
            delivery.statement.predicate_type.clone(),
        ));
    }
    let listed: Vec<&str> = delivery.statement.predicate["verifications"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v["attestation"].as_str()).collect())
        .unwrap_or_default();
    for (i, v) in rest.iter().enumerate() {
        if v.statement.predicate_type != VERIFICATION_PREDICATE
            || !listed.contains(&v.digest.as_str())
        {
            return Err(Refused::NotReliedOn {
                index: i + 2,
                digest: v.digest.clone(),
                listed: if listed.is_empty() {
                    "none".into()
                } else {
                    listed.join(", ")
                },
            });
        }
    }
    Ok(())
}
