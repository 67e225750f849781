//! The in-toto Statement v1 and the predicate types Airlock signs: a verification's (SLSA
//! Verification Summary v1, extended by Airlock's own fields), a delivery's and an applied
//! transaction's (Airlock's own). What each says is made in [`crate::engine::attesting`],
//! over the records; this module knows only the statement's form.
//!
//! Every payload is canonical JSON (keys sorted at every depth, compact: see
//! [`crate::canonical`]), so a statement always has exactly one byte form.

use serde::{Deserialize, Serialize};
use serde_json::Value;
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
    /// A subject with one digest.
    pub fn one(name: impl Into<String>, algorithm: &str, value: &str) -> Subject {
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
