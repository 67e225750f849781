//! Checking a record against the statement signed for it: a signature proves the statement,
//! not the record around it, so `airlock attestation verify` on a record also proves that
//! every attested field of the record says what the statement says. A verification record is
//! checked by rebuilding its statement from the record and comparing the two; a delivery
//! receipt by comparing it with the receipt the statement carries; an applied transaction by
//! the fields its statement names. Any difference is refused, naming the record's field.

use super::{Verifier, verification};
use crate::attest::statement::{
    DELIVERY_PREDICATE, Statement, TRANSACTION_PREDICATE, VERIFICATION_PREDICATE,
};
use crate::verification::Verification;
use serde_json::Value;

/// Why a record does not say what its attestation says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordRefused {
    #[error("the record is not a {kind} record: {why}")]
    NotARecord { kind: &'static str, why: String },
    #[error("the record's {field} is {record}, but its attestation says {signed}")]
    Differs {
        field: String,
        record: String,
        signed: String,
    },
}

/// A record that says what its attestation says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordChecked {
    /// What kind of record it is.
    pub kind: &'static str,
    /// The record's fields the statement does not cover, sorted (what a signature cannot
    /// vouch for: bookkeeping such as a verification's `expires_at` or `phases`).
    pub not_attested: Vec<String>,
}

/// Fields of a verification record its statement covers (every one named, so that the
/// others can be reported as not attested).
const VERIFICATION_ATTESTED: [&str; 27] = [
    "verification_id",
    "candidate_revision",
    "candidate_tree",
    "repository",
    "argv",
    "image",
    "observed_image",
    "user",
    "working_dir",
    "timeout_seconds",
    "cpu_limit",
    "memory_limit_bytes",
    "environment_sha256",
    "setup_script_sha256",
    "status",
    "exit_code",
    "oom_killed",
    "error",
    "output",
    "output_truncated",
    "output_bytes_total",
    "engine",
    "duration_ms",
    "created_at",
    "finished_at",
    "dependencies",
    "runtime",
];

/// A transaction record's attested fields and where its statement holds each.
const TRANSACTION_ATTESTED: [(&str, &str); 10] = [
    ("transaction_id", "/predicate/transaction_id"),
    ("workspace_id", "/predicate/workspace_id"),
    ("proposal_id", "/predicate/proposal_id"),
    ("revision", "/predicate/proposal_revision/sha256"),
    ("validation_id", "/predicate/validation/validation_id"),
    ("applied_by", "/predicate/applied_by"),
    ("head_before", "/predicate/head_before"),
    ("head_after", "/predicate/head_after"),
    ("hashes", "/predicate/paths"),
    ("claims", "/predicate/verdict/claims"),
];

/// Checks `record` (the JSON object that carried the envelope as `attestation`) against the
/// verified `statement` of that envelope.
pub fn check_record(record: &Value, statement: &Statement) -> Result<RecordChecked, RecordRefused> {
    let Some(fields) = record.as_object() else {
        return Err(RecordRefused::NotARecord {
            kind: "known",
            why: "it is not a JSON object".into(),
        });
    };
    let present = |attested: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = fields
            .keys()
            .filter(|k| k.as_str() != "attestation" && !attested.contains(&k.as_str()))
            .cloned()
            .collect();
        v.sort();
        v
    };
    match statement.predicate_type.as_str() {
        VERIFICATION_PREDICATE => {
            check_verification(record, statement)?;
            Ok(RecordChecked {
                kind: "verification",
                not_attested: present(&VERIFICATION_ATTESTED),
            })
        }
        DELIVERY_PREDICATE => {
            let mut receipt = record.clone();
            if let Some(o) = receipt.as_object_mut() {
                o.remove("attestation");
            }
            let signed = &statement.predicate["receipt"];
            if let Some(pointer) = first_difference(&receipt, signed, String::new()) {
                let field = pointer
                    .trim_start_matches('/')
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                return Err(differs(&field, &receipt, signed, &pointer));
            }
            Ok(RecordChecked {
                kind: "delivery receipt",
                not_attested: vec![],
            })
        }
        TRANSACTION_PREDICATE => {
            let statement = serde_json::to_value(statement).expect("a statement serializes");
            let mut attested = Vec::new();
            for (field, pointer) in TRANSACTION_ATTESTED {
                attested.push(field);
                let have = record.get(field).unwrap_or(&Value::Null);
                let signed = statement.pointer(pointer).unwrap_or(&Value::Null);
                if have != signed {
                    return Err(RecordRefused::Differs {
                        field: field.into(),
                        record: shown(have),
                        signed: shown(signed),
                    });
                }
            }
            // The approvals the verdict counted: the record lists them too.
            attested.push("approvals");
            let signed = statement
                .pointer("/predicate/verdict/approvals")
                .unwrap_or(&Value::Null);
            let have = record.get("approvals").unwrap_or(&Value::Null);
            if have != signed {
                return Err(RecordRefused::Differs {
                    field: "approvals".into(),
                    record: shown(have),
                    signed: shown(signed),
                });
            }
            Ok(RecordChecked {
                kind: "transaction",
                not_attested: present(&attested),
            })
        }
        other => Err(RecordRefused::NotARecord {
            kind: "known",
            why: format!("its attestation's predicateType {other:?} has no record form"),
        }),
    }
}

fn check_verification(record: &Value, signed: &Statement) -> Result<(), RecordRefused> {
    let v: Verification =
        serde_json::from_value(record.clone()).map_err(|e| RecordRefused::NotARecord {
            kind: "verification",
            why: e.to_string(),
        })?;
    // The statement the record would have been signed as, by the verifier that signed it.
    let verifier = Verifier {
        id: signed.predicate["verifier"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    let mut rebuilt = verification(&v, &verifier);
    rebuilt.predicate["verifier"] = signed.predicate["verifier"].clone();
    let rebuilt = serde_json::to_value(&rebuilt).expect("a statement serializes");
    let signed_value = serde_json::to_value(signed).expect("a statement serializes");
    // The subject first: a revision that differs shows in the subject and in the
    // resource URI, and is named as the revision.
    let difference = ["subject", "predicate", "_type", "predicateType"]
        .iter()
        .find_map(|k| first_difference(&rebuilt[k], &signed_value[k], format!("/{k}")))
        .or_else(|| first_difference(&rebuilt, &signed_value, String::new()));
    match difference {
        None => Ok(()),
        Some(pointer) => {
            let field = verification_field(&pointer);
            let signed_at = signed_value.pointer(&pointer).unwrap_or(&Value::Null);
            let record_at = match field {
                "output" => {
                    return Err(RecordRefused::Differs {
                        field: "output".into(),
                        record: format!(
                            "{} bytes with SHA-256 {}",
                            v.output.len(),
                            rebuilt.pointer(&pointer).map(shown).unwrap_or_default()
                        ),
                        signed: format!("output_sha256 {}", shown(signed_at)),
                    });
                }
                f => record.get(f).unwrap_or(&Value::Null),
            };
            Err(RecordRefused::Differs {
                field: field.into(),
                record: shown(record_at),
                signed: shown(signed_at),
            })
        }
    }
}

/// The record field a difference in a verification statement at `pointer` comes from.
fn verification_field(pointer: &str) -> &str {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["subject", "0", ..] => "candidate_revision",
        ["subject", ..] => "candidate_tree",
        ["predicate", "timeVerified", ..] => "finished_at",
        ["predicate", "resourceUri", ..] => "repository",
        ["predicate", "policy", ..] => "environment_sha256",
        ["predicate", "verificationResult" | "verifiedLevels", ..] => "status",
        ["predicate", "airlock", "image_id", ..] => "observed_image",
        ["predicate", "airlock", "output_sha256", ..] => "output",
        ["predicate", "airlock", "resolvedDependencies", ..] => "dependencies",
        ["predicate", "airlock", field, ..] => field,
        _ => pointer,
    }
}

fn differs(field: &str, record: &Value, signed: &Value, pointer: &str) -> RecordRefused {
    RecordRefused::Differs {
        field: field.into(),
        record: shown(record.pointer(pointer).unwrap_or(&Value::Null)),
        signed: shown(signed.pointer(pointer).unwrap_or(&Value::Null)),
    }
}

/// A value as the refusal shows it: JSON, cut short.
fn shown(v: &Value) -> String {
    const MAX: usize = 120;
    let text = match v {
        Value::Null => "absent or null".to_string(),
        other => other.to_string(),
    };
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// The JSON pointer of the first place (in key order) where `a` and `b` differ: a value, a
/// key only one of them has, or an array's length.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_difference(p, q, here),
                    _ => Some(here),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            let inner = x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (p, q))| first_difference(p, q, format!("{at}/{i}")));
            inner.or_else(|| {
                (x.len() != y.len()).then_some(format!("{at}/{}", x.len().min(y.len())))
            })
        }
        _ => (a != b).then_some(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::SigningKey;
    use crate::engine::attesting::Attestor;
    use crate::verification::Status;
    use serde_json::json;

    fn signed_record(status: Status) -> (Value, Statement) {
        let a = Attestor::with_key(SigningKey::from_seed([3; 32]), "urn:airlock:test");
        let mut v = crate::artifacts::tests::sample("ver_1", "k1");
        v.status = status;
        v.exit_code = Some(3);
        v.output = "boom\n".into();
        v.candidate_tree = Some("b".repeat(40));
        v.repository = Some("/srv/repo.git".into());
        a.attest_verification(&mut v);
        let st: Statement =
            serde_json::from_slice(&v.attestation.as_ref().unwrap().payload_bytes().unwrap())
                .unwrap();
        (serde_json::to_value(&v).unwrap(), st)
    }

    #[test]
    fn an_unedited_record_holds_and_names_what_is_not_attested() {
        let (record, st) = signed_record(Status::Failed);
        let ok = check_record(&record, &st).unwrap();
        assert_eq!(ok.kind, "verification");
        assert_eq!(
            ok.not_attested,
            ["container_id", "creation_key", "expires_at"],
            "{ok:?}"
        );
    }

    #[test]
    fn every_attested_field_of_a_verification_record_is_checked() {
        let (record, st) = signed_record(Status::Failed);
        let edits: Vec<(&str, Value)> = vec![
            ("verification_id", json!("ver_2")),
            ("candidate_revision", json!("c".repeat(40))),
            ("candidate_tree", json!("d".repeat(40))),
            ("repository", json!("/elsewhere.git")),
            ("argv", json!(["rm", "-rf", "/"])),
            ("image", json!("airlock/other:latest")),
            ("observed_image", json!("sha256:def")),
            ("user", json!("0:0")),
            ("working_dir", json!("/")),
            ("timeout_seconds", json!(1799)),
            ("cpu_limit", json!(64.0)),
            ("memory_limit_bytes", json!(1)),
            ("environment_sha256", json!("0".repeat(64))),
            ("setup_script_sha256", json!("1".repeat(64))),
            ("status", json!("passed")),
            ("exit_code", json!(0)),
            ("oom_killed", json!(true)),
            ("error", json!("nothing")),
            ("output", json!("all good\n")),
            ("output_truncated", json!(true)),
            ("output_bytes_total", json!(1)),
            ("engine", json!("elsewhere")),
            ("duration_ms", json!(1)),
            ("created_at", json!("2020-01-01T00:00:00Z")),
            ("finished_at", json!("2020-01-01T00:00:01Z")),
            (
                "dependencies",
                json!({"key": "k", "lockfiles": {"Cargo.lock": "0"}, "sha256": null, "resolved": []}),
            ),
            ("runtime", json!("runsc")),
        ];
        assert_eq!(edits.len(), VERIFICATION_ATTESTED.len());
        for (field, value) in edits {
            let mut edited = record.clone();
            assert_ne!(edited[field], value, "{field} is really changed");
            edited[field] = value;
            let err = check_record(&edited, &st).unwrap_err();
            assert!(
                matches!(&err, RecordRefused::Differs { field: f, .. } if f == field),
                "{field}: {err}"
            );
            assert!(
                err.to_string().contains(&format!("record's {field} is")),
                "{err}"
            );
        }
        // Removing an attested field is a difference too; an unknown field is not a record.
        let mut edited = record.clone();
        edited.as_object_mut().unwrap().remove("candidate_tree");
        assert!(check_record(&edited, &st).is_err());
        let mut edited = record.clone();
        edited["verdict"] = json!("passed");
        let err = check_record(&edited, &st).unwrap_err();
        assert!(matches!(err, RecordRefused::NotARecord { .. }), "{err}");
        // Fields no statement covers may change: they are reported, not refused.
        let mut edited = record.clone();
        edited["expires_at"] = json!("2099-01-01T00:00:00Z");
        assert!(check_record(&edited, &st).is_ok());
    }

    #[test]
    fn the_refusal_of_a_status_edit_names_the_field_and_both_values() {
        let (mut record, st) = signed_record(Status::Failed);
        record["status"] = json!("passed");
        assert_eq!(
            check_record(&record, &st).unwrap_err().to_string(),
            "the record's status is \"passed\", but its attestation says \"failed\""
        );
        let (mut record, st) = signed_record(Status::Failed);
        record["output"] = json!("fine\n");
        let e = check_record(&record, &st).unwrap_err().to_string();
        assert!(
            e.starts_with("the record's output is 5 bytes with SHA-256"),
            "{e}"
        );
    }

    #[test]
    fn first_difference_finds_values_keys_and_lengths() {
        assert_eq!(
            first_difference(&json!({"a": 1}), &json!({"a": 1}), String::new()),
            None
        );
        assert_eq!(
            first_difference(
                &json!({"a": {"b": [1, 2]}}),
                &json!({"a": {"b": [1, 3]}}),
                String::new()
            ),
            Some("/a/b/1".into())
        );
        assert_eq!(
            first_difference(&json!({"a": [1]}), &json!({"a": [1, 2]}), String::new()),
            Some("/a/1".into())
        );
        assert_eq!(
            first_difference(&json!({"a": 1}), &json!({"a": 1, "b": 2}), String::new()),
            Some("/b".into())
        );
    }
}
