//! The policy that gates apply, as a pure function of the stored evidence.
//!
//! Evidence is always about one revision (the current one): votes, the latest security review,
//! the latest human approval and the validation's test results. The verdict lists every
//! requirement with its state and the evidence ids behind it, so a human can see exactly what
//! is missing or blocking, and who overrode what.

use super::IllegalTransition;
use super::proposal::Risk;
use serde::{Deserialize, Serialize};

/// A vote's meaning (anything else is refused at the edge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VoteKind {
    Approve,
    ApproveWithNotes,
    Revise,
    Reject,
    Veto,
    Abstain,
}

impl VoteKind {
    pub const ALL: [VoteKind; 6] = [
        VoteKind::Approve,
        VoteKind::ApproveWithNotes,
        VoteKind::Revise,
        VoteKind::Reject,
        VoteKind::Veto,
        VoteKind::Abstain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VoteKind::Approve => "approve",
            VoteKind::ApproveWithNotes => "approve_with_notes",
            VoteKind::Revise => "revise",
            VoteKind::Reject => "reject",
            VoteKind::Veto => "veto",
            VoteKind::Abstain => "abstain",
        }
    }

    /// Counts towards `required_approvals` and role requirements.
    pub fn approves(self) -> bool {
        match self {
            VoteKind::Approve | VoteKind::ApproveWithNotes => true,
            VoteKind::Revise | VoteKind::Reject | VoteKind::Veto | VoteKind::Abstain => false,
        }
    }

    /// Blocks the revision it is cast on (`revise` until a newer revision exists, which is the
    /// same thing: votes on older revisions are not evidence).
    pub fn blocks(self) -> bool {
        match self {
            VoteKind::Revise | VoteKind::Reject | VoteKind::Veto => true,
            VoteKind::Approve | VoteKind::ApproveWithNotes | VoteKind::Abstain => false,
        }
    }
}

/// A security review's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityVerdict {
    Pass,
    Fail,
    NeedsChanges,
}

impl SecurityVerdict {
    pub const ALL: [SecurityVerdict; 3] = [
        SecurityVerdict::Pass,
        SecurityVerdict::Fail,
        SecurityVerdict::NeedsChanges,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SecurityVerdict::Pass => "pass",
            SecurityVerdict::Fail => "fail",
            SecurityVerdict::NeedsChanges => "needs_changes",
        }
    }
}

/// When a gate applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    Never,
    #[default]
    HighRisk,
    Always,
}

impl Gate {
    pub fn applies(self, high_risk: bool) -> bool {
        match self {
            Gate::Never => false,
            Gate::HighRisk => high_risk,
            Gate::Always => true,
        }
    }
}

/// A human approval's life: requested, then decided once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
}

/// What can happen to a human approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalEvent {
    Approve,
    Deny,
}

impl ApprovalState {
    pub const ALL: [ApprovalState; 3] = [
        ApprovalState::Pending,
        ApprovalState::Approved,
        ApprovalState::Denied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
        }
    }

    pub fn on(self, event: ApprovalEvent) -> Result<ApprovalState, IllegalTransition> {
        match (self, event) {
            (ApprovalState::Pending, ApprovalEvent::Approve) => Ok(ApprovalState::Approved),
            (ApprovalState::Pending, ApprovalEvent::Deny) => Ok(ApprovalState::Denied),
            (
                ApprovalState::Approved | ApprovalState::Denied,
                ApprovalEvent::Approve | ApprovalEvent::Deny,
            ) => Err(IllegalTransition {
                machine: "human approval",
                from: self.as_str(),
                event: match event {
                    ApprovalEvent::Approve => "approve",
                    ApprovalEvent::Deny => "deny",
                },
            }),
        }
    }
}

/// Paths matching `glob` need a vote from a holder of `role`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRole {
    pub glob: String,
    pub role: String,
}

/// A workspace's policy (`[workspaces.<id>.policy]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub required_approvals: u32,
    pub required_roles: Vec<String>,
    pub high_risk_paths: Vec<String>,
    pub path_roles: Vec<PathRole>,
    pub security_review: Gate,
    pub human_approval: Gate,
    pub required_tests: bool,
    /// Checks every validation runs on the post-image commit beside the author's expected
    /// tests: a gate the author cannot choose away.
    #[serde(default)]
    pub required_checks: Vec<RequiredCheck>,
    /// When a claim acquired without `release_on` ends by itself.
    #[serde(default)]
    pub claims_release_on: super::claim::ReleaseOn,
}

/// A workspace's required check (`[[workspaces.<id>.policy.required_checks]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequiredCheck {
    /// A label of 1..=64 of a-z, 0-9, `_` and `-`, unique in the workspace.
    pub name: String,
    pub argv: Vec<String>,
    /// The profile it runs in (the workspace's when `None`).
    pub profile: Option<String>,
    /// Its timeout (`expected_test_timeout_seconds` when `None`).
    pub timeout_seconds: Option<u64>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            required_approvals: 1,
            required_roles: vec![REVIEWER.to_string()],
            high_risk_paths: vec![],
            path_roles: vec![],
            security_review: Gate::HighRisk,
            human_approval: Gate::HighRisk,
            required_tests: false,
            required_checks: vec![],
            claims_release_on: super::claim::ReleaseOn::Manual,
        }
    }
}

/// The role every review plan asks for.
pub const REVIEWER: &str = "reviewer";
/// The role a security review needs.
pub const SECURITY: &str = "security";

/// Longest glob, in bytes.
pub const MAX_GLOB_BYTES: usize = 256;

/// Refuses a glob that is empty, too long, absolute, contains NUL or `\`-escapes, or uses
/// `**` other than as a whole path segment.
pub fn check_glob(glob: &str) -> Result<(), String> {
    if glob.is_empty() || glob.len() > MAX_GLOB_BYTES {
        return Err(format!("a glob is 1..={MAX_GLOB_BYTES} bytes"));
    }
    if glob.starts_with('/') || glob.contains('\0') {
        return Err(format!(
            "{glob:?}: globs are repository-relative, without NUL"
        ));
    }
    for seg in glob.split('/') {
        if seg.contains("**") && seg != "**" {
            return Err(format!(
                "{glob:?}: `**` must be a whole path segment (`a/**/b`)"
            ));
        }
        if seg.is_empty() {
            return Err(format!("{glob:?} has an empty path segment"));
        }
    }
    Ok(())
}

/// Whether `path` matches `glob`: `?` is one character but `/`, `*` any run without `/`, a
/// `**` segment any number of whole segments (zero included). Checked with [`check_glob`].
pub fn glob_matches(glob: &str, path: &str) -> bool {
    let g: Vec<&str> = glob.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    // reach[j]: the first i glob segments can match the first j path segments.
    let mut reach = vec![false; p.len() + 1];
    reach[0] = true;
    for seg in &g {
        let mut next = vec![false; p.len() + 1];
        if *seg == "**" {
            let mut any = false;
            for j in 0..=p.len() {
                any |= reach[j];
                next[j] = any;
            }
        } else {
            for j in 1..=p.len() {
                next[j] = reach[j - 1] && segment_matches(seg.as_bytes(), p[j - 1].as_bytes());
            }
        }
        reach = next;
    }
    reach[p.len()]
}

/// One segment against `*` and `?` (iterative, linear in practice).
fn segment_matches(pat: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < pat.len() && (pat[pi] == b'?' || pat[pi] == s[si]) {
            // `?` stands for one character; step over a whole UTF-8 sequence.
            if pat[pi] == b'?' {
                si += utf8_len(s[si]);
            } else {
                si += 1;
            }
            pi += 1;
        } else if pi < pat.len() && pat[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < pat.len() && pat[pi] == b'*' {
        pi += 1;
    }
    pi == pat.len()
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        0x00..=0xBF => 1,
    }
}

impl Policy {
    /// High risk: risk `high` or `critical`, or a touched path matching `high_risk_paths`.
    pub fn is_high_risk(&self, risk: Risk, paths: &[String]) -> bool {
        let risky = match risk {
            Risk::High | Risk::Critical => true,
            Risk::Low | Risk::Normal => false,
        };
        risky
            || paths
                .iter()
                .any(|p| self.high_risk_paths.iter().any(|g| glob_matches(g, p)))
    }

    /// The roles whose holders must approve: `required_roles` and the roles of `path_roles`
    /// a touched path matches, each once, in that order.
    pub fn approving_roles(&self, paths: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let matched = self
            .path_roles
            .iter()
            .filter(|r| paths.iter().any(|p| glob_matches(&r.glob, p)))
            .map(|r| &r.role);
        for role in self.required_roles.iter().chain(matched) {
            if !out.contains(role) {
                out.push(role.clone());
            }
        }
        out
    }

    /// The roles a review plan assigns: always `reviewer`, the approving roles, and
    /// `security` when a security review is required.
    pub fn routing_roles(&self, risk: Risk, paths: &[String]) -> Vec<String> {
        let mut out = vec![REVIEWER.to_string()];
        let mut add = |r: &str| {
            if !out.iter().any(|o| o == r) {
                out.push(r.to_string());
            }
        };
        for r in self.approving_roles(paths) {
            add(&r);
        }
        if self.security_review.applies(self.is_high_risk(risk, paths)) {
            add(SECURITY);
        }
        out
    }
}

/// A current vote on the current revision.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteEvidence {
    pub vote_id: String,
    pub voter: String,
    /// The roles the voter held when voting.
    pub roles: Vec<String>,
    pub vote: VoteKind,
}

/// The latest security review of the current revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewEvidence {
    pub review_id: String,
    pub reviewer: String,
    pub verdict: SecurityVerdict,
}

/// The latest human approval of the current revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalEvidence {
    pub approval_id: String,
    pub state: ApprovalState,
    pub decided_by: Option<String>,
    pub override_votes: bool,
    pub reason_md: Option<String>,
}

/// Test results of the current revision (from its validation): the expected tests and
/// required checks that ran. None ran is never "every test passed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestEvidence {
    pub all_passed: bool,
    /// The verifications that ran; empty when the validation ran none (its tests stage was
    /// skipped, or there was nothing to run).
    pub verification_ids: Vec<String>,
}

/// Everything the verdict may use, all about the current revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub risk: Risk,
    /// Every path the revision touches.
    pub paths: Vec<String>,
    pub votes: Vec<VoteEvidence>,
    pub security: Option<ReviewEvidence>,
    pub approval: Option<ApprovalEvidence>,
    pub tests: Option<TestEvidence>,
}

/// A requirement's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReqState {
    Satisfied,
    Missing,
    Blocked,
    Overridden,
}

impl ReqState {
    /// Every value, for the API document and tests.
    pub const ALL: [ReqState; 4] = [
        ReqState::Satisfied,
        ReqState::Missing,
        ReqState::Blocked,
        ReqState::Overridden,
    ];
}

impl ReqState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReqState::Satisfied => "satisfied",
            ReqState::Missing => "missing",
            ReqState::Blocked => "blocked",
            ReqState::Overridden => "overridden",
        }
    }

    /// Whether the requirement lets the revision through.
    pub fn holds(self) -> bool {
        match self {
            ReqState::Satisfied | ReqState::Overridden => true,
            ReqState::Missing | ReqState::Blocked => false,
        }
    }
}

/// One requirement of the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Requirement {
    /// `approvals`, `role:<role>`, `no_blocking_votes`, `security_review`, `human_approval`,
    /// `tests`.
    pub name: String,
    pub state: ReqState,
    /// The ids of the evidence behind the state.
    pub evidence: Vec<String>,
    /// What satisfies it, what is missing or what blocks, in words.
    pub detail: String,
}

/// A human override, and what it overrode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Override {
    pub approval_id: String,
    pub by: Option<String>,
    pub reason_md: Option<String>,
    pub overridden: Vec<String>,
}

/// The policy's answer for the current revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub approvable: bool,
    pub high_risk: bool,
    pub requirements: Vec<Requirement>,
    #[serde(rename = "override")]
    pub human_override: Option<Override>,
}

fn req(name: &str, state: ReqState, evidence: Vec<String>, detail: String) -> Requirement {
    Requirement {
        name: name.to_string(),
        state,
        evidence,
        detail,
    }
}

/// The verdict: a pure function of `policy` and `ev`.
pub fn evaluate(policy: &Policy, ev: &Evidence) -> Verdict {
    let high_risk = policy.is_high_risk(ev.risk, &ev.paths);
    let approving: Vec<&VoteEvidence> = ev.votes.iter().filter(|v| v.vote.approves()).collect();
    let mut vote_reqs = Vec::new();

    let ids = |vs: &[&VoteEvidence]| vs.iter().map(|v| v.vote_id.clone()).collect::<Vec<_>>();
    let n = approving.len() as u32;
    vote_reqs.push(req(
        "approvals",
        if n >= policy.required_approvals {
            ReqState::Satisfied
        } else {
            ReqState::Missing
        },
        ids(&approving),
        format!(
            "{n} of {} approving votes (approve, approve_with_notes) on the current revision",
            policy.required_approvals
        ),
    ));
    for role in policy.approving_roles(&ev.paths) {
        let holders: Vec<&VoteEvidence> = approving
            .iter()
            .copied()
            .filter(|v| v.roles.contains(&role))
            .collect();
        vote_reqs.push(req(
            &format!("role:{role}"),
            if holders.is_empty() {
                ReqState::Missing
            } else {
                ReqState::Satisfied
            },
            ids(&holders),
            if holders.is_empty() {
                format!("no approving vote from a holder of role {role:?}")
            } else {
                format!("approved by a holder of role {role:?}")
            },
        ));
    }
    let blocking: Vec<&VoteEvidence> = ev.votes.iter().filter(|v| v.vote.blocks()).collect();
    vote_reqs.push(req(
        "no_blocking_votes",
        if blocking.is_empty() {
            ReqState::Satisfied
        } else {
            ReqState::Blocked
        },
        ids(&blocking),
        if blocking.is_empty() {
            "no reject, veto or revise vote on the current revision".into()
        } else {
            let who: Vec<String> = blocking
                .iter()
                .map(|v| format!("{} by {} ({})", v.vote.as_str(), v.voter, v.vote_id))
                .collect();
            format!("blocked: {}", who.join(", "))
        },
    ));

    // A human override turns vote requirements that are not satisfied into `overridden`.
    let overriding = ev
        .approval
        .as_ref()
        .filter(|a| a.state == ApprovalState::Approved && a.override_votes);
    let mut overridden = Vec::new();
    if let Some(a) = overriding {
        for r in &mut vote_reqs {
            if r.state != ReqState::Satisfied {
                r.state = ReqState::Overridden;
                r.detail = format!(
                    "{}; overridden by {} ({}): {}",
                    r.detail,
                    a.decided_by.as_deref().unwrap_or("a human"),
                    a.approval_id,
                    a.reason_md.as_deref().unwrap_or_default()
                );
                r.evidence.push(a.approval_id.clone());
                overridden.push(r.name.clone());
            }
        }
    }
    let mut requirements = vote_reqs;

    if policy.security_review.applies(high_risk) {
        requirements.push(match &ev.security {
            None => req(
                "security_review",
                ReqState::Missing,
                vec![],
                "a security review by a holder of role \"security\" is required".into(),
            ),
            Some(r) => req(
                "security_review",
                match r.verdict {
                    SecurityVerdict::Pass => ReqState::Satisfied,
                    SecurityVerdict::Fail | SecurityVerdict::NeedsChanges => ReqState::Blocked,
                },
                vec![r.review_id.clone()],
                format!("security review {} by {}", r.verdict.as_str(), r.reviewer),
            ),
        });
    }
    if policy.human_approval.applies(high_risk) {
        requirements.push(match &ev.approval {
            None => req(
                "human_approval",
                ReqState::Missing,
                vec![],
                "a human approval is required; none was requested for this revision".into(),
            ),
            Some(a) => req(
                "human_approval",
                match a.state {
                    ApprovalState::Approved => ReqState::Satisfied,
                    ApprovalState::Pending => ReqState::Missing,
                    ApprovalState::Denied => ReqState::Blocked,
                },
                vec![a.approval_id.clone()],
                match a.state {
                    ApprovalState::Pending => "the human approval is pending".to_string(),
                    ApprovalState::Approved | ApprovalState::Denied => format!(
                        "{} by {}",
                        a.state.as_str(),
                        a.decided_by.as_deref().unwrap_or("?")
                    ),
                },
            ),
        });
    }
    if policy.required_tests {
        requirements.push(match &ev.tests {
            None => req(
                "tests",
                ReqState::Missing,
                vec![],
                "the expected tests have not run on this revision".into(),
            ),
            Some(t) if t.verification_ids.is_empty() => req(
                "tests",
                ReqState::Missing,
                vec![],
                "no test ran on this revision: the validation's tests stage was skipped or had nothing to run (name expected tests, or add required_checks to the policy)".into(),
            ),
            Some(t) => req(
                "tests",
                if t.all_passed {
                    ReqState::Satisfied
                } else {
                    ReqState::Blocked
                },
                t.verification_ids.clone(),
                if t.all_passed {
                    "every expected test and required check passed on this revision".into()
                } else {
                    "an expected test or required check did not pass on this revision".into()
                },
            ),
        });
    }
    let approvable = requirements
        .iter()
        .all(|r| matches!(r.state, ReqState::Satisfied | ReqState::Overridden));
    Verdict {
        approvable,
        high_risk,
        requirements,
        human_override: overriding.map(|a| Override {
            approval_id: a.approval_id.clone(),
            by: a.decided_by.clone(),
            reason_md: a.reason_md.clone(),
            overridden,
        }),
    }
}

#[cfg(test)]
mod tests;
