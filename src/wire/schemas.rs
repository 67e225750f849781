//! The API document's schemas of the domain values the API shows. The domain holds no framework
//! derives, so their OpenAPI form lives here, beside the wire types that embed them: a state
//! enum's values come from its own `ALL` list through serde (the names are spelled once, in
//! the domain); a record's shape is a mirror struct whose fields a test compares with what the
//! domain value serializes to.

use crate::domain::{
    candidate::{CandidateState, EvidenceSource, MutationOperation},
    claim::{ClaimMode, ClaimState, ContentionState, ReleaseOn, Span},
    delivery::{ReceiptResult, RequestState},
    isolation::Isolation,
    policy::{ApprovalState, Override, ReqState, Requirement, SecurityVerdict, Verdict, VoteKind},
    proposal::{ProposalState, Risk},
    transaction::{ControlAction, FailureCode, TxState},
    validation::{StageName, StageState},
    verification::Status,
};
use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// A string enum of `values`' serde names.
fn string_enum<T: Serialize>(description: Option<&str>, values: &[T]) -> RefOr<Schema> {
    let names: Vec<serde_json::Value> = values
        .iter()
        .map(|v| serde_json::to_value(v).expect("a unit variant serializes to its name"))
        .collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names))
        .description(description)
        .into()
}

/// `ToSchema` for a domain enum from its `ALL` list.
macro_rules! string_enums {
    ($($ty:ty => $description:expr;)*) => {$(
        impl utoipa::PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                string_enum($description, &<$ty>::ALL)
            }
        }
        impl utoipa::ToSchema for $ty {}
    )*};
}

string_enums! {
    CandidateState => None;
    EvidenceSource => Some("A kind of evidence a packet can carry and a candidate can require of every input.");
    MutationOperation => Some("The operations a candidate's mutation history records, by their API method names.");
    ClaimMode => Some("What a claim lets its holder do (four modes: reading, writing, reviewing, exclusive).");
    ClaimState => Some("Where a claim is in its life.");
    ReleaseOn => Some("When a claim ends by itself.");
    ContentionState => Some("A contention's state: recorded open by a refused acquire, resolved once by an admin.");
    RequestState => Some("State of a delivery request.");
    ReceiptResult => Some("What a delivery did, as its receipt records it.");
    VoteKind => Some("A vote's meaning (anything else is refused at the edge).");
    SecurityVerdict => Some("A security review's verdict.");
    ApprovalState => Some("A human approval's life: requested, then decided once.");
    ReqState => Some("A requirement's state.");
    ProposalState => Some("Where a proposal is in its life. `accepted` is reached only by apply.");
    Risk => Some("How risky the author says the change is.");
    TxState => Some("Where an apply transaction is.");
    ControlAction => Some("What `transaction.control` may ask.");
    FailureCode => Some("Why a transaction failed or needs attention: the `failure_code` of its phase's detail.");
    StageName => Some("A validation stage, in the order stages run.");
    StageState => Some("A stage's outcome.");
    Status => Some("Status of a verification. `running` is the only non-terminal state.");
    Isolation => Some("The isolation level a job's container runs under: the OCI runtime `runc` (the host's kernel) or `runsc` (gVisor's user-space kernel).");
}

/// `ToSchema` for a domain record through its mirror (same name in the document).
macro_rules! mirrored {
    ($($ty:ty => $mirror:ty;)*) => {$(
        impl utoipa::PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                <$mirror as utoipa::PartialSchema>::schema()
            }
        }
        impl utoipa::ToSchema for $ty {
            fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
                <$mirror as utoipa::ToSchema>::schemas(out)
            }
        }
    )*};
}

mirrored! {
    Span => SpanShape;
    Requirement => RequirementShape;
    Override => OverrideShape;
    Verdict => VerdictShape;
}

/// 1-based inclusive line span of a symbol, as a parser found it in the worktree.
#[allow(dead_code)]
#[derive(utoipa::ToSchema)]
struct SpanShape {
    start: u64,
    end: u64,
}

/// One requirement of the verdict.
#[allow(dead_code)]
#[derive(utoipa::ToSchema)]
struct RequirementShape {
    /// `approvals`, `role:<role>`, `no_blocking_votes`, `security_review`, `human_approval`,
    /// `tests`.
    name: String,
    state: ReqState,
    /// The ids of the evidence behind the state.
    evidence: Vec<String>,
    /// What satisfies it, what is missing or what blocks, in words.
    detail: String,
}

/// A human override, and what it overrode.
#[allow(dead_code)]
#[derive(utoipa::ToSchema)]
struct OverrideShape {
    approval_id: String,
    by: Option<String>,
    reason_md: Option<String>,
    overridden: Vec<String>,
}

/// The policy's answer for the current revision.
#[allow(dead_code)]
#[derive(utoipa::ToSchema)]
struct VerdictShape {
    approvable: bool,
    high_risk: bool,
    requirements: Vec<Requirement>,
    #[schema(rename = "override")]
    human_override: Option<Override>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::PartialSchema;

    /// The property names a schema declares.
    fn properties<T: PartialSchema>() -> Vec<String> {
        let v = serde_json::to_value(T::schema()).unwrap();
        let mut names: Vec<String> = v["properties"]
            .as_object()
            .expect("a record schema has properties")
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    fn keys<T: Serialize>(value: &T) -> Vec<String> {
        let mut names: Vec<String> = serde_json::to_value(value)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    #[test]
    fn every_mirror_declares_exactly_what_its_domain_record_serializes() {
        let requirement = Requirement {
            name: "tests".into(),
            state: ReqState::Missing,
            evidence: vec![],
            detail: String::new(),
        };
        let human_override = Override {
            approval_id: "appr_1".into(),
            by: None,
            reason_md: None,
            overridden: vec![],
        };
        let verdict = Verdict {
            approvable: false,
            high_risk: false,
            requirements: vec![requirement.clone()],
            human_override: Some(human_override.clone()),
        };
        assert_eq!(properties::<Span>(), keys(&Span { start: 1, end: 2 }));
        assert_eq!(properties::<Requirement>(), keys(&requirement));
        assert_eq!(properties::<Override>(), keys(&human_override));
        assert_eq!(properties::<Verdict>(), keys(&verdict));
    }

    #[test]
    fn an_enums_schema_lists_every_value_by_its_serde_name() {
        let v = serde_json::to_value(<TxState as PartialSchema>::schema()).unwrap();
        let listed: Vec<&str> = v["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let spelled: Vec<&str> = TxState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(listed, spelled);
        assert_eq!(v["type"], "string");
        assert_eq!(
            <MutationOperation as utoipa::ToSchema>::name(),
            "MutationOperation"
        );
    }
}
