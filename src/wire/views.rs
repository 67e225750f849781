//! Reply objects: each service builds one of these and serializes it, so `/openapi.json`
//! documents exactly what the API answers (the candidate flow's own records, `Candidate`
//! and friends, live in `crate::candidate`).

use super::ResumePolicy;
use serde::Serialize;

/// `integration.patch` result: one page, ending at a line end when more follows.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PatchResult {
    pub patch: String,
    /// More of the diff follows this page.
    pub truncated: bool,
    /// The byte offset this page starts at.
    pub offset: u64,
    /// Where the next page starts; absent on the last page.
    pub next_offset: Option<u64>,
}

/// `integration.conflict` result: one conflicted path as the merge left it, so a resolver can
/// edit the conflict markers out instead of writing the file blind.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ConflictView {
    pub path: String,
    /// The merge left a file at this path (a modify/delete or a file/directory conflict may
    /// leave none).
    pub present: bool,
    /// Its octal mode (`100644`, `100755`, `120000`), when present.
    pub mode: Option<String>,
    pub bytes: u64,
    /// It holds a NUL byte or is not UTF-8.
    pub binary: bool,
    /// The file, conflict markers included; null when absent, binary, or over
    /// `MAX_CONFLICT_CONTENT_BYTES` (1 MiB).
    pub content: Option<String>,
    /// Why `content` is null, when it is.
    pub note: Option<String>,
}

/// A claim as every claim method answers it: `status` is `expired` once its time passed,
/// swept or not.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimView {
    pub claim_id: String,
    pub workspace_id: String,
    pub resource_id: String,
    pub resource: ClaimResource,
    pub mode: crate::domain::claim::ClaimMode,
    pub holder: String,
    pub task_id: String,
    pub session_id: Option<String>,
    pub fencing_token: i64,
    pub status: crate::domain::claim::ClaimState,
    pub base_hash: Option<String>,
    pub renewable: bool,
    pub resume_policy: ResumePolicy,
    pub release_on: crate::domain::claim::ReleaseOn,
    pub rationale: Option<String>,
    pub acquired_at: String,
    pub heartbeat_at: String,
    pub expires_at: String,
    pub version: i64,
}

/// The answer of every method that acts on one claim.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimReply {
    pub claim: ClaimView,
}

/// `claim.release`'s answer: `changed: false` when it was already released.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimReleaseReply {
    pub claim: ClaimView,
    pub changed: bool,
}

/// `claim.list`'s answer, one page.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimListReply {
    pub claims: Vec<ClaimView>,
    pub next_cursor: Option<String>,
}

/// A claimed resource, parsed: its type, path, and for a symbol its name and span.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClaimResource {
    /// `file`, `directory`, `symbol`, or another lowercase category.
    #[serde(rename = "type")]
    pub kind: String,
    pub path: Option<String>,
    pub symbol: Option<String>,
    pub span: Option<crate::domain::claim::Span>,
}

/// What the proposal methods that change one answer: the proposal, and for `request_review`
/// the current revision's review plan (null when none was stored).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProposalReply {
    pub proposal: ProposalView,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ReviewPlan>)]
    pub review_plan: Option<Option<ReviewPlan>>,
}

/// A vote, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Vote {
    pub vote_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub voter: String,
    /// The roles the voter held when voting.
    pub roles: Vec<String>,
    pub vote: crate::domain::policy::VoteKind,
    pub confidence: f64,
    pub reason_md: String,
    /// The voter's newest vote on this revision (older ones are history).
    pub current: bool,
    pub created_at: String,
}

/// A security review, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SecurityReview {
    pub review_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub reviewer: String,
    pub verdict: crate::domain::policy::SecurityVerdict,
    pub notes_md: String,
    pub created_at: String,
}

/// A human approval, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Approval {
    pub approval_id: String,
    pub workspace_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub requested_by: String,
    pub state: crate::domain::policy::ApprovalState,
    pub decided_by: Option<String>,
    #[serde(rename = "override")]
    pub override_votes: bool,
    pub reason_md: Option<String>,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// A decision, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Decision {
    pub decision_id: String,
    pub workspace_id: String,
    pub proposal_id: Option<String>,
    pub revision: Option<String>,
    pub task_id: Option<String>,
    pub decision: String,
    pub decided_by: String,
    pub rationale_md: String,
    pub created_at: String,
}

/// The review side of a proposal's current revision: its plan, votes, security reviews,
/// approvals and the verdict.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ReviewPicture {
    /// Null until review is requested for the current revision.
    pub review_plan: Option<ReviewPlan>,
    pub votes: Vec<Vote>,
    pub security_reviews: Vec<SecurityReview>,
    pub approvals: Vec<Approval>,
    pub verdict: crate::domain::policy::Verdict,
}

/// `proposal.get`: the proposal, its current revision's files, the decisions about it, and
/// its review picture.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProposalGetReply {
    pub proposal: ProposalView,
    pub files: Vec<FileView>,
    pub decisions: Vec<ProposalDecisionView>,
    #[serde(flatten)]
    pub review: ReviewPicture,
}

/// `proposal.list`: a page, with the cursor of the next one.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProposalListReply {
    pub proposals: Vec<ProposalView>,
    pub next_cursor: Option<String>,
}

/// `vote.cast`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct VoteReply {
    pub vote: Vote,
}

/// `vote.list`: oldest first, history included.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct VoteListReply {
    pub votes: Vec<Vote>,
}

/// `security.review`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SecurityReviewReply {
    pub security_review: SecurityReview,
}

/// `human.request_approval` and `human.decide`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApprovalReply {
    pub approval: Approval,
}

/// `decision.record`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DecisionReply {
    pub decision: Decision,
}

/// `decision.list`: oldest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DecisionListReply {
    pub decisions: Vec<Decision>,
}

/// `policy.evaluate`: the verdict for the proposal's current revision.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PolicyEvaluateReply {
    pub proposal_id: String,
    pub revision: String,
    pub status: crate::domain::proposal::ProposalState,
    pub verdict: crate::domain::policy::Verdict,
    /// Set when the proposal is not in review: the verdict is then informational.
    pub note: Option<&'static str>,
}

/// A proposal as every proposal method answers it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProposalView {
    pub proposal_id: String,
    pub workspace_id: String,
    pub task_id: String,
    pub session_id: Option<String>,
    pub deliberation_id: Option<String>,
    pub author: String,
    pub title: String,
    pub summary_md: String,
    pub risk: crate::domain::proposal::Risk,
    pub status: crate::domain::proposal::ProposalState,
    pub version: i64,
    /// SHA-256 hex of the current revision's patch bytes.
    pub current_revision: String,
    /// Every revision, oldest first.
    pub revisions: Vec<RevisionView>,
    pub affected_resources: Vec<String>,
    pub expected_tests: Vec<Vec<String>>,
    pub rollback_notes: Option<String>,
    pub base_revision: Option<String>,
    /// The reason given with the last transition (a rejection's, a withdrawal's).
    pub reason_md: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One immutable revision of a proposal's patch.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RevisionView {
    pub revision: String,
    pub number: i64,
    pub bytes: i64,
    pub created_at: String,
    pub current: bool,
}

/// A transaction as every transaction method answers it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TransactionView {
    pub transaction_id: String,
    pub workspace_id: String,
    pub proposal_id: String,
    pub revision: String,
    pub validation_id: String,
    pub status: crate::domain::transaction::TxState,
    pub version: i64,
    pub applied_by: String,
    /// Every path the apply touches.
    pub paths: Vec<String>,
    /// Per path: its fingerprints before and after, once applied.
    pub hashes: Vec<PathHashes>,
    pub head_before: Option<String>,
    pub head_after: Option<String>,
    pub claims: Vec<String>,
    pub approvals: Vec<String>,
    pub test_verifications: Vec<String>,
    pub rollback_sha256: Option<String>,
    pub blocked_reason: Option<String>,
    /// The failed or cancelled transaction this one retries.
    pub retry_of: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Once applied, when a signing key is configured: the signed in-toto statement of the
    /// apply (HEAD before and every post-image as subjects; the proposal revision, verdict,
    /// claims, validation and its tests' attestations by digest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::attest::Envelope>,
}

/// One entry of a workspace's event log (`event.list`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventView {
    /// The log position: poll with `since` set to the last one seen.
    pub seq: i64,
    /// What the event is about (a claim, proposal, transaction, ... id).
    pub subject: String,
    pub kind: String,
    pub actor: String,
    pub prior: Option<String>,
    pub new: Option<String>,
    /// The event's detail, as the method that wrote it recorded it (null if unreadable).
    #[schema(value_type = Object, nullable = true)]
    pub payload: serde_json::Value,
    pub at: String,
}

/// Per touched path of an applied transaction: what it held before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PathHashes {
    pub path: String,
    pub before: crate::install::Fingerprint,
    pub after: crate::install::Fingerprint,
}

/// One contention (`claim.contentions`): who asked for what, which claim stood in the way,
/// and what an admin may still do about it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ContentionView {
    pub contention_id: String,
    pub requested_resource_id: String,
    /// The requested resource's path (none for a resource kind without one).
    pub requested_path: Option<String>,
    /// The requester.
    pub agent: String,
    pub task_id: Option<String>,
    pub mode: crate::domain::claim::ClaimMode,
    pub challenged_claim: String,
    /// The challenged claim's holder (none once that claim is removed).
    pub holder: Option<String>,
    pub state: super::ContentionState,
    pub resolution: Option<super::ResolutionKind>,
    pub reason: Option<String>,
    pub created_at: String,
    /// The challenged claim's current lease end.
    pub lease_expires_at: Option<String>,
    /// What `claim.resolve_contention` accepts now (none once resolved).
    pub allowed_resolutions: Vec<super::ResolutionKind>,
}

/// `claim.contentions`: a page, with the cursor of the next one.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ContentionListReply {
    pub contentions: Vec<ContentionView>,
    pub next_cursor: Option<String>,
}

/// `claim.resolve_contention`: the resolution, and the claim it extended or transferred.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ContentionResolveReply {
    pub contention_id: String,
    pub resolution: super::ResolutionKind,
    pub claim: Option<ClaimView>,
}

/// `claim.reconcile`: which write claims were suspended (their resource changed), which are
/// unchanged and which could not be judged. Kept as the call's answer for its replays.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReconcileReply {
    pub suspended: Vec<String>,
    pub unchanged: Vec<String>,
    pub unreadable: Vec<UnreadableClaim>,
}

/// `claim.end_session`: the claims released. Kept as the call's answer for its replays.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct EndSessionReply {
    pub released: Vec<String>,
}

/// `resource.show`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ResourceReply {
    pub resource: ResourceView,
}

/// `event.list`: oldest first; `next_since` is the last seq seen (poll with it for what
/// comes later), `next_cursor` is set when the page was full.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventListReply {
    pub events: Vec<EventView>,
    pub next_since: Option<i64>,
    pub next_cursor: Option<String>,
}

/// A claim `claim.reconcile` could not judge (its resource cannot be read), and why.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct UnreadableClaim {
    pub claim_id: String,
    pub reason: String,
}

/// A resource as `resource.show` resolves it in the worktree now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ResourceView {
    /// The canonical spelling of the resource id.
    pub resource_id: String,
    /// `file`, `directory`, `symbol`, or another lowercase category.
    #[serde(rename = "type")]
    pub kind: String,
    pub path: Option<String>,
    pub symbol: Option<String>,
    /// The language the path's extension names, where the governed path knows it.
    pub language: Option<String>,
    /// A symbol's line span, from the parser.
    pub span: Option<crate::domain::claim::Span>,
    pub exists: bool,
    /// The resource's content hash (`worktree`'s rules) (empty when it does not exist).
    pub current_hash: String,
}

/// One file section of a revision's patch, as the parser read it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FileView {
    pub operation: crate::patch::ChangeKind,
    /// None for a created file.
    pub old_path: Option<String>,
    /// None for a deleted file.
    pub new_path: Option<String>,
    /// The octal mode git writes (`100644`, `100755`, `120000`).
    pub old_mode: Option<String>,
    pub new_mode: Option<String>,
    pub binary: bool,
    /// Lines added and removed.
    pub added: u64,
    pub removed: u64,
    /// A rename's or copy's similarity, percent.
    pub similarity: Option<u8>,
    /// The new symlink target, when the patch makes one.
    pub symlink_target: Option<String>,
}

impl FileView {
    pub fn of(f: &crate::patch::FileChange) -> FileView {
        FileView {
            operation: f.kind,
            old_path: f.old_path.clone(),
            new_path: f.new_path.clone(),
            old_mode: f.old_mode.map(|m| m.as_str().to_string()),
            new_mode: f.new_mode.map(|m| m.as_str().to_string()),
            binary: f.binary,
            added: f.added,
            removed: f.removed,
            similarity: f.similarity,
            symlink_target: f.symlink_target.clone(),
        }
    }
}

/// A decision recorded on a proposal's own transitions (a rejection, a withdrawal).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProposalDecisionView {
    pub decision_id: String,
    /// The revision it was about (empty when it named none).
    pub revision: String,
    pub decision: String,
    pub actor: String,
    pub rationale_md: String,
    pub created_at: String,
}

/// A revision's review plan, persisted when review is requested or a revision attached: the
/// roles the policy requires and who may fill each (never the author).
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReviewPlan {
    pub revision: String,
    pub required_roles: Vec<PlannedRole>,
    pub high_risk: bool,
    pub security_review_required: bool,
    pub human_approval_required: bool,
}

/// One role a review plan requires, with the members and runs holding it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlannedRole {
    pub role: String,
    pub candidates: Vec<String>,
}

/// One phase of an apply transaction (`transaction.phases`); a phase lasts until the next
/// begins.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PhaseView {
    pub phase: crate::domain::transaction::TxState,
    pub actor: String,
    /// When it began (also `started_at`).
    pub at: String,
    pub started_at: String,
    /// When the next phase began; none for the phase the transaction is in.
    pub ended_at: Option<String>,
    pub reason: Option<String>,
    /// The `x-request-id` of the call that moved it there.
    pub request_id: Option<String>,
    pub failure_code: Option<crate::domain::transaction::FailureCode>,
    /// The phase's whole detail as recorded (null if unreadable).
    #[schema(value_type = Object, nullable = true)]
    pub detail: serde_json::Value,
}

/// What the touched paths of a transaction add up to, judged from the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepositoryState {
    /// Every path holds its post-image and the transaction is applied.
    Applied,
    /// Every path holds its post-image or some do, but the transaction is not applied.
    PartiallyApplied,
    /// Every path holds its pre-image (staged files at most).
    NotStarted,
    /// Applied, and a path changed since.
    AppliedThenModified,
    /// A path holds neither image, or the rollback artifact cannot be read.
    Unknown,
}

/// `transaction.recovery`: each touched path's state, the repository's, and what
/// `transaction.control` accepts now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoveryView {
    pub transaction_id: String,
    pub status: crate::domain::transaction::TxState,
    pub repository_state: RepositoryState,
    pub paths: Vec<crate::install::PathReport>,
    pub actions: Vec<crate::domain::transaction::ControlAction>,
    pub blocked_reason: Option<String>,
    /// Why the rollback artifact could not be read, if it could not.
    pub artifact_error: Option<String>,
}

/// `transaction.control`'s answer to cancel (and any replay of cancel or compensate).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransactionReply {
    pub transaction: TransactionView,
}

/// `transaction.phases`: a transaction's phases, oldest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PhasesReply {
    pub transaction_id: String,
    pub phases: Vec<PhaseView>,
}

/// `transaction.list`: newest first, with the cursor of the next page.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransactionListReply {
    pub transactions: Vec<TransactionView>,
    pub next_cursor: Option<String>,
}

/// `patch.apply`'s answer, and `transaction.control`'s to retry: the new transaction and the
/// proposal it moved.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyReply {
    pub transaction: TransactionView,
    pub proposal: ProposalView,
}

/// `transaction.control`'s answer to compensate: the reverse-patch proposal it filed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompensationReply {
    pub transaction_id: String,
    pub proposal: ProposalView,
}

/// What every `proposal.preview` part answers besides its own fields.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreviewHeader {
    pub proposal_id: String,
    pub revision: String,
    /// Whether `revision` is the proposal's current one.
    pub current: bool,
    pub part: super::PreviewPart,
}

/// A `proposal.preview` answer: the header's fields and the part's, in one object.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewReply {
    #[serde(flatten)]
    pub header: PreviewHeader,
    #[serde(flatten)]
    pub body: PreviewBody,
}

/// The part-specific fields of a preview.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum PreviewBody {
    Metadata(PreviewMetadata),
    Files(PreviewFiles),
    Diff(PreviewDiff),
    Raw(PreviewRaw),
    Symbols(PreviewSymbols),
}

/// `part = "metadata"`: the revision in numbers and its base against the worktree's HEAD.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreviewMetadata {
    pub base_revision: Option<String>,
    pub worktree_head: Option<String>,
    /// The proposal names a base that is not the worktree's HEAD now.
    pub stale_base: bool,
    pub files: u64,
    pub added: u64,
    pub removed: u64,
    pub binary: u64,
    pub bytes: u64,
}

/// `part = "files"`: a page of the file list.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreviewFiles {
    pub files: Vec<FileView>,
    pub next_cursor: Option<String>,
}

/// `part = "diff"`: a page of the patch's lines (invalid UTF-8 shown as U+FFFD).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreviewDiff {
    pub lines: Vec<String>,
    /// The 1-based number of `lines[0]`.
    pub first_line: u64,
    pub total_lines: u64,
    pub next_cursor: Option<String>,
}

/// `part = "raw"`: the exact patch bytes.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreviewRaw {
    /// Always `base64`.
    pub encoding: String,
    pub patch: String,
    /// The bytes' SHA-256: the revision.
    pub sha256: String,
    pub bytes: u64,
}

/// `part = "symbols"`: per touched file, the worktree's declarations whose spans meet the
/// changed lines.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreviewSymbols {
    pub files: Vec<TouchedFile>,
}

/// One file of a symbols preview; `note` says why it has no symbols when it cannot have any.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TouchedFile {
    pub path: String,
    pub language: Option<String>,
    pub symbols: Vec<TouchedSymbol>,
    pub note: Option<String>,
}

/// A declaration a revision touches, with the resource id that claims it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TouchedSymbol {
    pub resource_id: String,
    pub name: String,
    /// The grammar's node kind (`function_item`, `class_definition`, ...).
    pub kind: String,
    pub span: crate::domain::claim::Span,
}
