//! What a delivered candidate leaves in the target's history, so `git log` tells the story
//! without Airlock: which agents' commits were merged, in which order, which verifications
//! passed on exactly which environment, who asked and who approved.
//!
//! With `history = "merge"` (the default) the frozen candidate commit's parents are the target
//! revision and every input's retained revision (the agents' own commits, authors and messages
//! kept), and the landed commit merges it into the target. With `"squash"` the candidate commit
//! has the target as its only parent and the landed commit is one commit on the target. Either
//! way the trees are exactly the merged tree the assembly computed (the parents never change a
//! tree), and the landed commit's message ends in git trailers (`git interpret-trailers
//! --parse` reads them): `Airlock-Candidate`, `Airlock-Request`, `Requested-by`,
//! `Approved-by`, and one `Verified-by` per selected verification with its status, revision
//! and `environment_sha256`.
//!
//! Both commits are built from durable facts only (the inputs, the request, the verification
//! records, the decision time), so a step repeated after a crash makes the same objects.

use crate::candidate::{Candidate, DeliveryRequest};
use crate::config::History;
use crate::staging::Repo;
use crate::staging::plumbing::CommitStamp;
use crate::verification::Verification;

/// Longest commit subject a message quotes; longer ones are cut (with `...`).
pub const MAX_QUOTED_SUBJECT: usize = 120;

/// One line of text from a commit or a record, safe inside a message: control characters
/// become spaces and it is cut at [`MAX_QUOTED_SUBJECT`] characters.
fn line(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    if clean.chars().count() <= MAX_QUOTED_SUBJECT {
        return clean.to_string();
    }
    let cut: String = clean.chars().take(MAX_QUOTED_SUBJECT).collect();
    format!("{cut}...")
}

fn short(oid: &str) -> &str {
    &oid[..oid.len().min(12)]
}

/// Each input's retained revision, in order.
fn input_revisions(c: &Candidate) -> Vec<&str> {
    c.inputs
        .iter()
        .map(|i| i.submission.retained_revision.as_str())
        .collect()
}

/// The frozen candidate commit of `tree`: its parents and message.
pub fn frozen_commit(
    repo: &Repo,
    c: &Candidate,
    history: History,
    tree: &str,
    time: i64,
) -> Result<String, crate::staging::StagingError> {
    let revs = input_revisions(c);
    let summaries = repo.commit_summaries(&revs)?;
    let mut message = format!(
        "airlock candidate {}: {} input(s) onto {}\n\nInputs, merged in this order:\n",
        c.candidate_id,
        c.inputs.len(),
        c.target_ref
    );
    for (input, s) in c.inputs.iter().zip(&summaries) {
        message.push_str(&format!(
            "- {} {} {} ({}, evidence {})\n",
            short(&s.oid),
            line(&s.subject),
            line(&format!("by {}", s.author)),
            line(&input.submission.run_id),
            line(&input.submission.evidence_ref),
        ));
    }
    let mut parents: Vec<&str> = vec![c.expected_target_revision.as_str()];
    if history == History::Merge {
        for r in &revs {
            if !parents.contains(r) {
                parents.push(r);
            }
        }
    }
    repo.commit_tree(
        tree,
        &parents,
        &CommitStamp {
            message: &message,
            time,
        },
    )
}

/// The commit a delivery writes to the target: the candidate's tree, merged (or squashed) onto
/// the target, with the story in trailers. `verifications` are the request's selected ones.
pub fn landed_commit(
    repo: &Repo,
    c: &Candidate,
    req: &DeliveryRequest,
    verifications: &[&Verification],
    history: History,
    time: i64,
) -> Result<String, crate::staging::StagingError> {
    let rev = &req.candidate_revision;
    let tree = repo.commit_tree_of(rev)?;
    let revs = input_revisions(c);
    let summaries = repo.commit_summaries(&revs)?;
    let mut message = format!(
        "Land {} onto {} ({} input(s))\n\n",
        c.candidate_id,
        req.target_ref,
        c.inputs.len()
    );
    for s in &summaries {
        message.push_str(&format!(
            "- {} {} {}\n",
            short(&s.oid),
            line(&s.subject),
            line(&format!("by {}", s.author))
        ));
    }
    message.push('\n');
    message.push_str(&format!("Airlock-Candidate: {}\n", c.candidate_id));
    message.push_str(&format!("Airlock-Revision: {rev}\n"));
    message.push_str(&format!("Airlock-Request: {}\n", req.request_id));
    message.push_str(&format!("Requested-by: {}\n", line(&req.requested_by)));
    if let Some(by) = &req.decided_by {
        message.push_str(&format!("Approved-by: {}\n", line(by)));
    }
    for v in verifications {
        message.push_str(&format!(
            "Verified-by: {} {} on {} environment_sha256={}",
            v.verification_id,
            v.status.as_str(),
            v.candidate_revision,
            v.environment_sha256
        ));
        if let Some(a) = &v.attestation {
            message.push_str(&format!(" attestation={}", a.digest()));
        }
        message.push('\n');
    }
    let parents: Vec<&str> = match history {
        History::Merge => vec![req.expected_target_revision.as_str(), rev.as_str()],
        History::Squash => vec![req.expected_target_revision.as_str()],
    };
    repo.commit_tree(
        &tree,
        &parents,
        &CommitStamp {
            message: &message,
            time,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_lines_have_no_control_characters_and_a_bound() {
        assert_eq!(line("fix\nVerified-by: forged"), "fix Verified-by: forged");
        assert_eq!(line(" a\tb "), "a b");
        let long = "x".repeat(500);
        assert_eq!(line(&long).chars().count(), MAX_QUOTED_SUBJECT + 3);
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
    }
}
