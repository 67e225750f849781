//! What a client written against the seed systems sends that Airlock refuses on purpose, and
//! the sentence its error adds naming the difference (docs/differences.md has the whole
//! table). Only requests that are refused anyway get a hint: nothing here
//! changes what is accepted.

/// A method name the seed systems used, and what Airlock calls instead.
const RENAMED_METHODS: &[(&str, &str)] = &[
    (
        "approval.decide",
        "a human approval is decided with human.decide (a candidate's delivery with integration.decide)",
    ),
    (
        "resource.extend",
        "a claim's lease is extended with claim.extend",
    ),
    (
        "proposal.request-review",
        "the method is proposal.request_review",
    ),
    (
        "transaction.apply",
        "a transaction is created by patch.apply itself",
    ),
];

/// A field the seed systems accepted, by method (`*`: any), and why Airlock takes none.
const REFUSED_FIELDS: &[(&str, &str, &str)] = &[
    (
        "*",
        "agent_id",
        "Airlock takes the caller from the bearer token, never from a field",
    ),
    (
        "*",
        "actor",
        "Airlock takes the caller from the bearer token, never from a field",
    ),
    (
        "claim.acquire",
        "claim_id",
        "claim ids are made by Airlock (a supplied id was an upsert key that could replace a row)",
    ),
    (
        "claim.acquire",
        "run_id",
        "a run is the run token's; a member's token names the member",
    ),
    (
        "proposal.create",
        "proposal_id",
        "proposal ids are made by Airlock (a supplied id could name another proposal)",
    ),
    (
        "proposal.create",
        "status",
        "a proposal starts pending and moves only by its transitions",
    ),
    (
        "proposal.create",
        "patch_path",
        "Airlock stores the patch's bytes (patch, or patch_base64 for bytes that are not UTF-8), never a path it reads later",
    ),
    (
        "proposal.attach_patch",
        "patch_path",
        "Airlock stores the patch's bytes (patch, or patch_base64 for bytes that are not UTF-8), never a path it reads later",
    ),
    (
        "patch.apply",
        "transaction_id",
        "transaction ids are made by Airlock (a supplied id could overwrite another transaction's rollback artifact)",
    ),
];

const SEE: &str = "see docs/differences.md (Differences from the earlier systems)";

/// The hint for an unknown method name, if a seed system used it.
pub fn unknown_method(method: &str) -> Option<String> {
    RENAMED_METHODS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, why)| format!("{why} ({SEE})"))
}

/// The hint for a refused request field, from serde's message (`unknown field `x``, `unknown
/// variant `x``), if it is a seed client's.
pub fn refused_field(method: &str, field: &str, message: &str) -> Option<String> {
    let quoted = |what: &str| {
        let at = message.find(what)? + what.len();
        let rest = &message[at..];
        let end = rest.find('`')?;
        Some(rest[..end].to_string())
    };
    if let Some(name) = quoted("unknown field `") {
        return REFUSED_FIELDS
            .iter()
            .find(|(m, f, _)| (*m == "*" || *m == method) && *f == name)
            .map(|(_, _, why)| format!("{why} ({SEE})"));
    }
    if method == "transaction.control" && field == "action" {
        return match quoted("unknown variant `")?.as_str() {
            "apply" => Some(format!(
                "a transaction is created and installed by patch.apply, never advanced by a control action ({SEE})"
            )),
            "pending" | "staged" | "stage" => Some(format!(
                "{} ({SEE})",
                crate::domain::transaction::STAGE_REFUSAL
            )),
            _ => None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_seed_shapes_get_a_hint() {
        let m = "unknown field `agent_id`, expected one of `workspace_id`";
        assert!(
            refused_field("claim.acquire", "agent_id", m)
                .unwrap()
                .contains("bearer token")
        );
        assert!(refused_field("claim.acquire", "colour", "unknown field `colour`").is_none());
        assert!(refused_field("proposal.create", "claim_id", "unknown field `claim_id`").is_none());
        let v = "unknown variant `apply`, expected one of `retry`";
        assert!(
            refused_field("transaction.control", "action", v)
                .unwrap()
                .contains("patch.apply")
        );
        assert!(refused_field("transaction.control", "action", "unknown variant `x`").is_none());
        assert!(
            unknown_method("approval.decide")
                .unwrap()
                .contains("human.decide")
        );
        assert!(unknown_method("nothing.here").is_none());
        // Every renamed method's replacement exists; none is itself a routed name.
        for (old, _) in RENAMED_METHODS {
            assert!(
                super::super::methods::spec(old).is_none(),
                "{old} is routed"
            );
        }
    }
}
