//! Candidate integration and evidence: wire records (the shapes orchestrators already send),
//! states, and the pure rules (path safety, conflict markers, request digests). No I/O here.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Most submissions in one candidate.
pub const MAX_SUBMISSIONS: usize = 256;
/// Most files in one resolve batch.
pub const MAX_RESOLVE_FILES: usize = 32;
/// Largest serialized candidate aggregate.
pub const MAX_AGGREGATE_BYTES: usize = 16 * 1024 * 1024;
/// Largest combined evidence packet snapshots per candidate.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024;
/// Largest transcript (evidence and owned copies).
pub const MAX_TRANSCRIPT_BYTES: usize = 16 * 1024 * 1024;
/// Mutation history entries kept per candidate.
pub const MAX_MUTATIONS: usize = 128;
/// Candidate lifetime.
pub const CANDIDATE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
/// How long a deleted or expired candidate's tombstone is kept.
pub const TOMBSTONE_RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
/// Largest page of `integration.patch` (and its default `limit`).
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;
/// Smallest page `integration.patch` accepts as `limit`.
pub const MIN_PATCH_PAGE_BYTES: usize = 1024;
/// Largest conflicted file `integration.conflict` returns as text; a larger one is described
/// (size, mode) without its content, since a resolution replaces the whole file.
pub const MAX_CONFLICT_CONTENT_BYTES: u64 = 1024 * 1024;
/// Furthest byte `integration.patch` skips to (`offset`): git renders and discards what lies
/// before a page, so a deep page costs as much as reading up to it.
pub const MAX_PATCH_OFFSET: u64 = 256 * 1024 * 1024;
/// Longest idempotency key.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 128;
/// Longest repository-relative path in a resolution.
pub use crate::domain::path::{MAX_PATH_BYTES, is_dotgit_alias};
/// Most verifications one candidate keeps (each holds up to 64 KiB of output).
pub const MAX_VERIFICATIONS_PER_CANDIDATE: usize = 64;
/// Most verification ids one delivery request may select.
pub const MAX_REQUEST_VERIFICATIONS: usize = 64;
/// Candidate states.
pub use crate::domain::candidate::{
    CandidateEvent, CandidateState, EvidenceSource, MutationOperation,
};

/// The ordered four-tuple identifying one submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmissionRef {
    pub workspace_id: String,
    pub run_id: String,
    pub evidence_ref: String,
    pub retained_revision: String,
}

/// A durable evidence packet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidencePacket {
    pub evidence_ref: String,
    pub workspace_id: String,
    pub run_id: String,
    pub base_revision: String,
    pub retained_revision: String,
    pub sources: Vec<EvidenceSource>,
    pub transcript_sha256: Option<String>,
    pub created_at: String,
    pub expires_at: String,
}

/// One immutable input of a candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateInput {
    pub submission: SubmissionRef,
    pub base_revision: String,
    pub evidence: EvidencePacket,
    pub transcript_id: Option<String>,
    pub transcript_checksum: Option<String>,
}

/// One entry of the bounded mutation history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Mutation {
    pub actor_key: String,
    pub operation: MutationOperation,
    pub idempotency_key: String,
    pub digest: String,
    pub result_id: String,
}

/// The candidate aggregate, exactly as `integration.show` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub candidate_id: String,
    pub workspace_id: String,
    pub mission_id: Option<String>,
    pub mission_accepted_set_version: Option<u64>,
    pub submissions: Vec<SubmissionRef>,
    pub required_sources: Vec<EvidenceSource>,
    pub inputs: Vec<CandidateInput>,
    pub target_ref: String,
    pub expected_target_revision: String,
    pub candidate_revision: Option<String>,
    pub state: CandidateState,
    pub conflicts: Option<Vec<String>>,
    pub applied_inputs: usize,
    /// Filled from the verification records on every read, oldest first.
    pub verifications: Vec<crate::verification::Verification>,
    pub delivery_request: Option<DeliveryRequest>,
    pub delivery_receipt: Option<DeliveryReceipt>,
    pub created_at: String,
    pub expires_at: String,
    pub error: Option<String>,
    pub version: u64,
    pub mutations: Vec<Mutation>,
    /// Each resolution batch, oldest first: who wrote it and the commit whose diff against its
    /// parent (the merge as it stood) is exactly what they wrote.
    #[serde(default)]
    pub resolutions: Vec<Resolution>,
}

/// One `integration.resolve` batch as history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolution {
    /// The input (0-based) whose conflicts it resolved.
    pub input: usize,
    pub actor_key: String,
    /// Its tree is the candidate after the batch; its parent's tree the merge before it (kept
    /// at `refs/airlock/candidates/<id>/resolutions/<n>`).
    pub commit: String,
    pub paths: Vec<String>,
}

/// The bounded list projection.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CandidateSummary {
    pub candidate_id: String,
    pub workspace_id: String,
    pub state: CandidateState,
    pub candidate_revision: Option<String>,
    pub target_ref: String,
    pub expected_target_revision: String,
    pub delivery_request: Option<DeliveryRequest>,
    pub delivery_receipt: Option<DeliveryReceipt>,
    pub created_at: String,
    pub expires_at: String,
}

/// How a delivery lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryAction {
    /// Atomic update of the target branch from expected_target_revision to the candidate.
    UpdateRef,
    /// A public `refs/heads/airlock/proposal-<request_id>` ref; the target is untouched.
    Proposal,
}

pub use crate::domain::delivery::{ReceiptResult, RequestEvent, RequestState};

/// A request binding a frozen revision to passed verifications and an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryRequest {
    pub request_id: String,
    pub request_version: u64,
    pub candidate_revision: String,
    pub verification_ids: Vec<String>,
    pub target_ref: String,
    pub expected_target_revision: String,
    pub action: DeliveryAction,
    pub state: RequestState,
    pub requested_by: String,
    pub decided_by: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub decided_at: Option<String>,
    /// The decider's reason, when they gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason: Option<String>,
}

/// Durable proof of a delivery, written to Git in the same ref transaction as the delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryReceipt {
    pub receipt_id: String,
    pub request_id: String,
    /// The verified (frozen) revision.
    pub candidate_revision: String,
    /// The commit written to the target (or the proposal ref): the candidate's tree, merged
    /// or squashed onto the target with the inputs, verifications and approver in its message.
    /// Absent in receipts written before landed commits existed (they landed the candidate
    /// revision itself).
    #[serde(default)]
    pub landed_revision: Option<String>,
    pub target_ref: String,
    pub previous_revision: Option<String>,
    pub action: DeliveryAction,
    pub result: ReceiptResult,
    pub proposal_ref: Option<String>,
    pub created_at: String,
    /// The delivery's signed statement (when a signing key is configured): the landed
    /// commit as subject, the request, approver, this receipt (without this field) and the
    /// verifications it relied on by attestation digest. Also in `refs/notes/airlock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::attest::Envelope>,
}

impl Candidate {
    pub fn summary(&self) -> CandidateSummary {
        CandidateSummary {
            candidate_id: self.candidate_id.clone(),
            workspace_id: self.workspace_id.clone(),
            state: self.state,
            candidate_revision: self.candidate_revision.clone(),
            target_ref: self.target_ref.clone(),
            expected_target_revision: self.expected_target_revision.clone(),
            delivery_request: self.delivery_request.clone(),
            delivery_receipt: self.delivery_receipt.clone(),
            created_at: self.created_at.clone(),
            expires_at: self.expires_at.clone(),
        }
    }

    /// Appends a mutation, keeping the newest [`MAX_MUTATIONS`].
    pub fn record_mutation(&mut self, m: Mutation) {
        self.mutations.push(m);
        if self.mutations.len() > MAX_MUTATIONS {
            let drop = self.mutations.len() - MAX_MUTATIONS;
            self.mutations.drain(..drop);
        }
    }
}

/// One file of a resolution: whole new content, or deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveFile {
    /// Repository-relative; the document's pattern is a conservative subset of what is accepted.
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64}){0,8}$")]
    pub path: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub delete: bool,
}

/// Server-private assembly journal of a candidate (never a wire field).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Assembly {
    /// Commit holding everything applied so far (starts at expected_target_revision).
    pub acc_commit: String,
    /// Index of the next input to apply.
    pub next_input: usize,
    /// Tree of the conflicted merge of input `next_input`, while conflicted.
    pub conflict_tree: Option<String>,
    /// Resolution intent recorded before Git changes.
    pub pending_resolution: Option<PendingResolution>,
    /// The idempotency binding of the prepare that created this candidate.
    pub prepare_actor_key: String,
    pub prepare_key: String,
    pub prepare_digest: String,
    /// Version of the newest delivery request (the next one gets this + 1).
    #[serde(default)]
    pub last_request_version: u64,
}

/// A resolution whose intent is durable but whose Git work may not be finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PendingResolution {
    pub actor_key: String,
    pub idempotency_key: String,
    pub digest: String,
    pub expected_version: u64,
    pub files: Vec<ResolveFile>,
}

/// SHA-256 over the canonical JSON of request parameters (sorted keys).
pub fn digest<T: Serialize>(params: &T) -> String {
    hex::encode(Sha256::digest(
        crate::canonical::to_string(params).as_bytes(),
    ))
}

/// Checks a repository-relative path: not empty, not absolute, no empty, `.` or `..` component,
/// no component git would treat as `.git` on any filesystem it protects (see
/// [`is_dotgit_alias`]), no NUL or control characters, bounded length.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return Err(format!("must be 1..={MAX_PATH_BYTES} bytes"));
    }
    if path.starts_with('/') {
        return Err("must be repository-relative, not absolute".into());
    }
    if path.chars().any(|c| c.is_control()) {
        return Err("must not contain NUL or control characters".into());
    }
    if path.contains('\\') {
        return Err("must not contain a backslash".into());
    }
    for comp in path.split('/') {
        match comp {
            "" => return Err("must not contain empty components ('//' or a trailing '/')".into()),
            "." | ".." => return Err("must not contain '.' or '..' components".into()),
            c if is_dotgit_alias(c) => {
                return Err(format!(
                    "must not contain {c:?}, which git treats as .git on some filesystem"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The parent directories of a path, shortest first (`a/b/c` -> `a`, `a/b`).
pub fn parents(path: &str) -> Vec<&str> {
    path.match_indices('/').map(|(i, _)| &path[..i]).collect()
}

/// True when `content` still holds a real conflict: an opening `<<<<<<<` line, later a
/// `=======` line (after an optional diff3 `|||||||` base section), and later a closing
/// `>>>>>>>` line. A lone `=======` (a reStructuredText heading underline, say) is not one.
pub fn has_conflict_markers(content: &str) -> bool {
    let marker = |l: &str, m: &str| l == m || l.strip_prefix(m).is_some_and(|r| r.starts_with(' '));
    #[derive(PartialEq)]
    enum Seen {
        Nothing,
        Open,
        Separator,
    }
    let mut seen = Seen::Nothing;
    for line in content.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        seen = match seen {
            Seen::Nothing if marker(line, "<<<<<<<") => Seen::Open,
            Seen::Open if line == "=======" => Seen::Separator,
            Seen::Separator if marker(line, ">>>>>>>") => return true,
            // A new opening marker before the structure closed starts over from it.
            Seen::Open | Seen::Separator if marker(line, "<<<<<<<") => Seen::Open,
            other => other,
        };
    }
    false
}

/// True for a full lowercase hex object id (SHA-1 or SHA-256).
pub fn is_full_oid(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks an idempotency key.
pub fn check_idempotency_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(format!(
            "idempotency_key must be 1..={MAX_IDEMPOTENCY_KEY_BYTES} bytes"
        ));
    }
    if key.chars().any(char::is_control) {
        return Err("idempotency_key must not contain control characters".into());
    }
    Ok(())
}

/// Checks a target ref: a full `refs/heads/<branch>` name that `git check-ref-format` accepts
/// (no component starting with `.` or ending with `.lock`, no `..`, `@{`, `~^:?*[\\`, space or
/// control character, not ending with `.` or `/`), outside Airlock's own namespace. The branch
/// `@` is refused too: it is git's shorthand for HEAD.
pub fn check_target_ref(r: &str) -> Result<(), String> {
    let Some(branch) = r.strip_prefix("refs/heads/") else {
        return Err(format!(
            "target_ref {r:?} must be a full refs/heads/<branch> name"
        ));
    };
    check_relative_path(branch).map_err(|e| format!("target_ref {r:?}: {e}"))?;
    if branch.starts_with("airlock/") {
        return Err(
            "target_ref must not be under refs/heads/airlock/ (Airlock's proposal refs)".into(),
        );
    }
    let bad_component = branch
        .split('/')
        .any(|c| c.starts_with('.') || c.ends_with(".lock"));
    if bad_component
        || branch.contains(['~', '^', ':', '?', '*', '[', ' ', '\x7f'])
        || branch.contains("@{")
        || branch.contains("..")
        || branch.ends_with('.')
        || branch == "@"
    {
        return Err(format!(
            "target_ref {r:?} is not a valid branch name (git check-ref-format)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_paths_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a/./b",
            "./a",
            "a//b",
            "a/",
            ".git/config",
            "sub/.git/hooks/x",
            "sub/.GIT/x",
            ".git.",
            ".git ",
            ".git. .",
            "a/.git::$INDEX_ALLOCATION/x",
            "git~1/config",
            "GIT~1",
            ".g\u{200c}it/config",
            "\u{feff}.git",
            ".Git",
            "a\0b",
            "a\nb",
            "a\\b",
        ] {
            assert!(check_relative_path(bad).is_err(), "{bad:?}");
        }
        for good in [
            "a",
            "src/auth.go",
            ".gitignore",
            "dir/.github/x",
            "sp ace.txt",
            "ünï.txt",
            ".gitx",
            "git~2",
            ".git-rewrite",
            "x.git",
            ":(glob)x",
            ":!x",
        ] {
            assert!(check_relative_path(good).is_ok(), "{good:?}");
        }
        assert!(check_relative_path(&"a".repeat(MAX_PATH_BYTES + 1)).is_err());
    }

    #[test]
    fn parents_of_a_path() {
        assert_eq!(parents("a/b/c.txt"), vec!["a", "a/b"]);
        assert!(parents("top.txt").is_empty());
    }

    #[test]
    fn conflict_markers() {
        assert!(has_conflict_markers(
            "a\n<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n"
        ));
        assert!(has_conflict_markers(
            "<<<<<<< ours\r\nx\r\n||||||| base\r\nb\r\n=======\r\ny\r\n>>>>>>> theirs\r\n"
        ));
        assert!(has_conflict_markers("<<<<<<<\n=======\n>>>>>>>\n"));
        assert!(!has_conflict_markers("x\n=======\n"));
        assert!(!has_conflict_markers("a == b\n<<<< not a marker\n"));
        assert!(
            !has_conflict_markers("<<<<<<< x\n>>>>>>> y\n"),
            "no separator"
        );
        assert!(
            !has_conflict_markers("=======\n<<<<<<< x\n>>>>>>> y\n"),
            "out of order"
        );
        assert!(!has_conflict_markers(
            "<<<<<<<< eight\n=======\n>>>>>>> y\n"
        ));
    }

    /// Real reStructuredText files on this machine (pip's and Python's documentation; the test
    /// script installs python3-pip) underline headings with `=======`: none of them is a
    /// conflict.
    #[test]
    fn real_documentation_files_are_not_conflicts() {
        let mut checked = 0;
        for root in ["/usr/lib", "/usr/share/doc"] {
            let out = std::process::Command::new("find")
                .args([root, "-name", "*.rst", "-size", "-512k"])
                .output()
                .unwrap();
            for path in String::from_utf8_lossy(&out.stdout).lines() {
                let Ok(text) = std::fs::read_to_string(path) else {
                    continue;
                };
                if text.lines().any(|l| l == "=======") {
                    assert!(
                        !has_conflict_markers(&text),
                        "{path} was taken for a conflict"
                    );
                    checked += 1;
                }
            }
        }
        assert!(
            checked > 0,
            "no .rst file with a ======= line found under /usr/lib or /usr/share/doc"
        );
    }

    /// Every name git's own `check-ref-format` refuses is refused here too, and every name
    /// accepted here git accepts.
    #[test]
    fn target_refs_agree_with_git_check_ref_format() {
        let names = [
            "main",
            "feature/x",
            "x.",
            ".hidden",
            "a/.b",
            "a.lock/b",
            "a.lock",
            "@",
            "a@{b",
            "a..b",
            "a//b",
            "a/",
            "a b",
            "a~b",
            "a^b",
            "a:b",
            "a?b",
            "a*b",
            "a[b",
            "a\\b",
            "a\x7fb",
            "ok-1.2",
            "v@1",
            "a/b.c/d",
        ];
        for n in names {
            let full = format!("refs/heads/{n}");
            let git_ok = std::process::Command::new("git")
                .args(["check-ref-format", &full])
                .status()
                .unwrap()
                .success();
            let ours = check_target_ref(&full).is_ok();
            assert!(!ours || git_ok, "{full:?} accepted here but refused by git");
            // Stricter than git only on purpose: `@` alone is git's shorthand for HEAD, which
            // `git check-ref-format --branch @` refuses as a branch name.
            let stricter = n == "@";
            assert_eq!(ours, git_ok && !stricter, "{full:?}: git says {git_ok}");
        }
    }

    #[test]
    fn digests_ignore_key_order_but_not_values() {
        let a = serde_json::json!({"a": 1, "b": [1, 2]});
        let b = serde_json::json!({"b": [1, 2], "a": 1});
        let c = serde_json::json!({"b": [2, 1], "a": 1});
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&c));
    }

    #[test]
    fn target_refs() {
        assert!(check_target_ref("refs/heads/main").is_ok());
        assert!(check_target_ref("refs/heads/feature/x").is_ok());
        for bad in [
            "main",
            "refs/tags/v1",
            "refs/heads/../x",
            "refs/heads/a..b",
            "refs/heads/x.lock",
            "refs/heads/airlock/proposal-1",
            "refs/heads/a b",
            "refs/heads/x.",
            "refs/heads/.hidden",
            "refs/heads/a/.b",
            "refs/heads/a.lock/b",
            "refs/heads/@",
            "refs/heads/a@{b",
            "refs/heads/a\x7fb",
        ] {
            assert!(check_target_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mutation_history_is_bounded() {
        let mut c: Candidate = serde_json::from_value(serde_json::json!({
            "candidate_id": "c", "workspace_id": "w", "mission_id": null,
            "mission_accepted_set_version": null, "submissions": [], "required_sources": ["git"],
            "inputs": [], "target_ref": "refs/heads/main", "expected_target_revision": "a",
            "candidate_revision": null, "state": "preparing", "conflicts": null, "applied_inputs": 0,
            "verifications": [], "delivery_request": null, "delivery_receipt": null,
            "created_at": "t", "expires_at": "t", "error": null, "version": 1, "mutations": []
        }))
        .unwrap();
        for i in 0..200 {
            c.record_mutation(Mutation {
                actor_key: "a".into(),
                operation: MutationOperation::Resolve,
                idempotency_key: i.to_string(),
                digest: String::new(),
                result_id: String::new(),
            });
        }
        assert_eq!(c.mutations.len(), MAX_MUTATIONS);
        assert_eq!(c.mutations[0].idempotency_key, "72");
    }
}
