//! Proposals: `proposal.create`, `proposal.attach_patch`, `proposal.get`,
//! `proposal.list`, `proposal.request_review`, `proposal.reject` and `proposal.withdraw`.
//!
//! A patch is parsed by the strict parser before anything is written, stored as an artifact
//! named by the SHA-256 of its bytes (fsynced, and checked against its name whenever it is
//! read) and only then named by a revision row. The author must hold an active, unexpired
//! write or exclusive claim on every affected resource. A new revision never changes an old
//! one: everything bound to a revision names its digest, so evidence about revision n stops
//! counting the moment n+1 is current.

mod affected;
mod preview;
mod reads;

use super::requests::check_text;
use crate::canonical::sha256_hex;
use crate::config::Permission;
pub(in crate::engine::governed) use crate::domain::claim::covers as claim_covers;
use crate::domain::claim::{ClaimState, ResourceId};
use crate::domain::proposal::{ProposalEvent, ProposalState, Risk};
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::{Claims, Proposals};
use crate::engine::idempotency::Prologue;
use crate::limits;
use crate::patch::coverage::Held;
use crate::patch::{ChangeKind, Patch};
use crate::store::Inserted;
use crate::store::claims::ClaimFilter;
use crate::store::proposals::{NewDecision, ProposalRow, RevisionRow};
use crate::wire::{ProposalAttachParams, ProposalCreateParams, ProposalTransitionParams};
use affected::affected_resources;

/// The private part of a proposal row: what the wire object carries beyond the columns.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    session_id: Option<String>,
    deliberation_id: Option<String>,
    title: String,
    summary_md: String,
    pub(in crate::engine::governed) risk: Risk,
    pub(in crate::engine::governed) affected_resources: Vec<String>,
    pub(in crate::engine::governed) expected_tests: Vec<Vec<String>>,
    rollback_notes: Option<String>,
    base_revision: Option<String>,
    created_at: String,
    updated_at: String,
    /// The reason given with the last transition (a rejection's, a withdrawal's).
    reason_md: Option<String>,
    /// The applied transaction this proposal reverses (`transaction.control compensate`):
    /// when it applies, that transaction becomes `rolled_back` in the same commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::engine::governed) compensates: Option<String>,
}

impl Proposals {
    /// The patch's bytes from exactly one of `patch` (text) and `patch_base64` (any bytes),
    /// within `max_patch_bytes`.
    fn patch_bytes(
        &self,
        patch: Option<String>,
        patch_base64: Option<String>,
    ) -> Result<Vec<u8>, ServiceError> {
        let max = self.ctx.config.max_patch_bytes;
        let bytes = match (patch, patch_base64) {
            (Some(_), Some(_)) => {
                return Err(ServiceError::invalid_field(
                    "patch_base64",
                    "give patch or patch_base64, not both",
                ));
            }
            (None, None) => {
                return Err(ServiceError::invalid_field(
                    "patch",
                    "a patch is required: patch (text) or patch_base64 (bytes)",
                ));
            }
            (Some(p), None) => p.into_bytes(),
            (None, Some(b)) => {
                // Refused before decoding when even the decoded form would be too large.
                if b.len() / 4 * 3 > max + 3 {
                    return Err(ServiceError::exhausted_field(
                        "patch_base64",
                        format!("patch_base64 decodes to more than max_patch_bytes {max}"),
                    ));
                }
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b.as_bytes())
                    .map_err(|e| {
                        ServiceError::invalid_field(
                            "patch_base64",
                            format!("patch_base64 is not standard padded base64: {e}"),
                        )
                    })?
            }
        };
        if bytes.len() > max {
            return Err(ServiceError::exhausted_field(
                "patch",
                format!("patch is {} bytes; max_patch_bytes is {max}", bytes.len()),
            ));
        }
        Ok(bytes)
    }

    /// Parses a patch strictly (its size was checked by [`Proposals::patch_bytes`]).
    fn checked_patch(&self, patch: &[u8]) -> Result<Patch, ServiceError> {
        if patch.is_empty() {
            return Err(ServiceError::invalid_field("patch", "patch is empty"));
        }
        let parsed = crate::patch::parse(patch)
            .map_err(|e| ServiceError::invalid_field("patch", format!("patch refused: {e}")))?;
        if parsed.files.is_empty() {
            return Err(ServiceError::invalid_field(
                "patch",
                "patch changes no file (no `diff --git` section)",
            ));
        }
        Ok(parsed)
    }

    /// Refuses unless `author` holds an active, unexpired write or exclusive claim covering
    /// every resource in `affected` (naming every one that is not), and unless what the author
    /// holds covers the patch (symbols re-resolved now, so a span that moved since the claim
    /// is judged where it is; every uncovered item named).
    /// Every symlink the patch leaves (created, retargeted, renamed or copied) must resolve
    /// inside the tree from its new location, through the links it meets: a renamed or copied
    /// link keeps a target text only the worktree knows.
    async fn check_links(worktree: &std::path::Path, patch: &Patch) -> Result<(), ServiceError> {
        use crate::domain::git::FileMode;
        let moved: Vec<(String, String)> = patch
            .files
            .iter()
            .filter(|f| matches!(f.kind, ChangeKind::Rename | ChangeKind::Copy))
            .filter(|f| f.symlink_target.is_none())
            .filter_map(|f| Some((f.old_path.clone()?, f.new_path.clone()?)))
            .collect();
        let written: Vec<(String, String)> = patch
            .files
            .iter()
            .filter_map(|f| Some((f.new_path.clone()?, f.symlink_target.clone()?)))
            .collect();
        if moved.is_empty() && written.is_empty() {
            return Ok(());
        }
        // What the patch makes each path: its new target, or (not a link any more) nothing.
        let mut overlay: std::collections::HashMap<String, Option<String>> = patch
            .files
            .iter()
            .flat_map(|f| {
                let gone = f
                    .old_path
                    .clone()
                    .filter(|_| f.kind != ChangeKind::Copy && f.old_path != f.new_path)
                    .map(|p| (p, None));
                let new = f.new_path.clone().map(|p| {
                    let link = (f.new_mode == Some(FileMode::Symlink))
                        .then(|| f.symlink_target.clone())
                        .flatten();
                    (p, link)
                });
                gone.into_iter().chain(new)
            })
            .collect();
        let wt = worktree.to_path_buf();
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
            let mut links = written;
            for (from, to) in &moved {
                if let Some(t) = crate::worktree::link_target(&root, from)
                    .map_err(|e| format!("{from:?}: {e}"))?
                {
                    let t = String::from_utf8_lossy(&t).into_owned();
                    overlay.insert(to.clone(), Some(t.clone()));
                    links.push((to.clone(), t));
                }
            }
            crate::worktree::links_stay_inside(&root, &links, &overlay)
        })
        .await
        .expect("judging symlinks does not panic")
        .map_err(|m| ServiceError::invalid_field("patch", format!("patch refused: {m}")))
    }

    async fn check_held(
        &self,
        workspace_id: &str,
        worktree: &std::path::Path,
        author: &str,
        affected: &[ResourceId],
        patch: &Patch,
    ) -> Result<(), ServiceError> {
        let now = self.ctx.clock.now().unix_timestamp();
        let held: Vec<ResourceId> = self
            .ctx
            .data
            .store
            .list_claims(ClaimFilter {
                workspace_id: workspace_id.into(),
                status: Some(ClaimState::Active),
                holder: Some(author.into()),
                limit: u32::MAX,
                ..Default::default()
            })
            .await?
            .into_iter()
            .filter(|c| c.mode.writes() && c.expires_at > now)
            .map(|c| ResourceId::parse(&c.resource_id).map_err(ServiceError::internal))
            .collect::<Result<_, _>>()?;
        let missing: Vec<&ResourceId> = affected
            .iter()
            .filter(|a| !held.iter().any(|h| claim_covers(h, a)))
            .collect();
        if !missing.is_empty() {
            // A file the patch touches that affected_resources did not name is judged as the
            // whole file; symbol claims the author holds on it cover it only when named.
            let symbols: Vec<String> = missing
                .iter()
                .filter_map(|m| match m {
                    ResourceId::File { path } => Some(path),
                    _ => None,
                })
                .flat_map(|path| {
                    held.iter()
                        .filter(
                            move |h| matches!(h, ResourceId::Symbol { path: p, .. } if p == path),
                        )
                        .map(ResourceId::id)
                })
                .collect();
            let hint = if symbols.is_empty() {
                String::new()
            } else {
                format!(
                    "; the author holds {} there: name them in affected_resources, so the patch is judged against the symbols claimed",
                    symbols.join(", ")
                )
            };
            return Err(ServiceError::precondition_field(
                "affected_resources",
                format!(
                    "affected_resources (the resources named there, and file:<path> for each touched path none of them names) includes {}, which no active write or exclusive claim of the author covers{hint}",
                    missing
                        .iter()
                        .map(|m| m.id())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let mut covering = Vec::with_capacity(held.len());
        for resource in held {
            let span = match &resource {
                ResourceId::Symbol { .. } => {
                    Claims::inspect(worktree.to_path_buf(), resource.clone())
                        .await
                        .ok()
                        .and_then(|(_, span)| span)
                }
                ResourceId::File { .. }
                | ResourceId::Directory { .. }
                | ResourceId::Other { .. } => None,
            };
            covering.push(Held { resource, span });
        }
        let uncovered = crate::patch::coverage::check(patch, &covering);
        if uncovered.is_empty() {
            return Ok(());
        }
        let items: Vec<String> = uncovered.iter().map(ToString::to_string).collect();
        Err(ServiceError::precondition_field(
            "patch",
            format!(
                "the author's claims do not cover the patch: {}",
                items.join("; ")
            ),
        ))
    }

    /// Stores the patch bytes as the artifact named by their digest, durably, before any row
    /// names it. An artifact already there is kept if its bytes check out, replaced otherwise.
    async fn store_patch(&self, bytes: Vec<u8>) -> Result<String, ServiceError> {
        let digest = sha256_hex(&bytes);
        let dir = self.ctx.data.layout.patches();
        let name = format!("{digest}.patch");
        let d = digest.clone();
        tokio::task::spawn_blocking(move || {
            if let Ok(existing) = std::fs::read(dir.join(&name))
                && sha256_hex(&existing) == d
            {
                return Ok(());
            }
            crate::artifacts::write_atomic(&dir, &name, &bytes).map(|_| ())
        })
        .await
        .expect("writing a patch does not panic")
        .map_err(|e| ServiceError::artifact("patch artifact", e))?;
        Ok(digest)
    }

    /// The bytes of revision `digest`, checked against their name.
    pub(crate) async fn read_patch(&self, digest: &str) -> Result<Vec<u8>, ServiceError> {
        let path = self.ctx.data.layout.patch_artifact(digest);
        let d = digest.to_string();
        tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(&path).map_err(|e| {
                ServiceError::internal(format!("patch artifact {}: {e}", path.display()))
            })?;
            if sha256_hex(&bytes) != d {
                return Err(ServiceError::internal(format!(
                    "patch artifact {} does not match its digest: it was changed on disk",
                    path.display()
                )));
            }
            Ok(bytes)
        })
        .await
        .expect("reading a patch does not panic")
    }

    /// `proposal.create`.
    pub async fn proposal_create(
        &self,
        actor: &Actor,
        p: ProposalCreateParams,
    ) -> Result<crate::wire::ProposalReply, ServiceError> {
        self.create_proposal_as(actor, p, None).await
    }

    /// [`Proposals::proposal_create`], for a compensation of the applied transaction
    /// `compensates` when given.
    pub(in crate::engine::governed) async fn create_proposal_as(
        &self,
        actor: &Actor,
        p: ProposalCreateParams,
        compensates: Option<String>,
    ) -> Result<crate::wire::ProposalReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Propose)?;
        check_text("task_id", &p.task_id, true)?;
        for (field, v) in [
            ("session_id", &p.session_id),
            ("deliberation_id", &p.deliberation_id),
        ] {
            if let Some(v) = v {
                check_text(field, v, true)?;
            }
        }
        check_bounded("title", &p.title, true, limits::MAX_PROPOSAL_TITLE_BYTES)?;
        check_bounded(
            "summary_md",
            &p.summary_md,
            true,
            limits::MAX_PROPOSAL_TEXT_BYTES,
        )?;
        if let Some(n) = &p.rollback_notes {
            check_bounded("rollback_notes", n, false, limits::MAX_PROPOSAL_TEXT_BYTES)?;
        }
        if let Some(b) = &p.base_revision
            && !is_object_id(b)
        {
            return Err(ServiceError::invalid_field(
                "base_revision",
                format!("base_revision {b:?} is not a full commit id (40 or 64 lowercase hex)"),
            ));
        }
        let tests = p.expected_tests.clone().unwrap_or_default();
        if tests.len() > limits::MAX_EXPECTED_TESTS {
            return Err(ServiceError::invalid_field(
                "expected_tests",
                format!(
                    "expected_tests has {} entries; the limit is {}",
                    tests.len(),
                    limits::MAX_EXPECTED_TESTS
                ),
            ));
        }
        for (i, argv) in tests.iter().enumerate() {
            crate::verification::validate_argv(argv).map_err(|e| {
                ServiceError::invalid_field(
                    format!("expected_tests[{i}]"),
                    format!("expected_tests[{i}]: {e}"),
                )
            })?;
        }
        let raw = self.patch_bytes(p.patch.clone(), p.patch_base64.clone())?;
        let patch = self.checked_patch(&raw)?;
        let author = actor.key();
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "proposal.create",
                &p.idempotency_key,
                &ProposalCreateParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let row = self.proposal_in(&p.workspace_id, &id).await?;
                return self.proposal_reply(&row).await;
            }
            Prologue::Fresh(k) => k,
        };
        let affected = affected_resources(p.affected_resources.as_deref(), &patch)?;
        Self::check_links(&worktree, &patch).await?;
        self.check_held(&p.workspace_id, &worktree, &author, &affected, &patch)
            .await?;
        let bytes = raw.len() as i64;
        let revision = self.store_patch(raw).await?;
        let now = self.ctx.now_rfc3339();
        let proposal_id = format!("prp_{}", crate::ids::new_creation_key());
        let ids: Vec<String> = affected.iter().map(ResourceId::id).collect();
        let record = Record {
            session_id: p.session_id,
            deliberation_id: p.deliberation_id,
            title: p.title,
            summary_md: p.summary_md,
            risk: p.risk.unwrap_or_default(),
            affected_resources: ids.clone(),
            expected_tests: tests,
            rollback_notes: p.rollback_notes,
            base_revision: p.base_revision,
            created_at: now.clone(),
            updated_at: now.clone(),
            reason_md: None,
            compensates,
        };
        let row = ProposalRow {
            proposal_id: proposal_id.clone(),
            workspace_id: p.workspace_id.clone(),
            author: author.clone(),
            task_id: p.task_id,
            status: ProposalState::Pending,
            version: 1,
            current_revision: revision.clone(),
            record: serde_json::to_string(&record).expect("a proposal record serializes"),
            seq: 0,
        };
        let first = RevisionRow {
            number: 1,
            revision,
            bytes,
            created_at: now,
            affected_resources: serde_json::to_string(&ids).expect("ids serialize"),
        };
        let binding = k.binding(&p.workspace_id, actor, &proposal_id);
        let id = match self
            .ctx
            .data
            .store
            .create_proposal(row, first, binding)
            .await?
        {
            Inserted::New => proposal_id,
            Inserted::Existing {
                digest: bound,
                result_id,
            } => k.judge(&bound, result_id)?,
        };
        let row = self.proposal_in(&p.workspace_id, &id).await?;
        self.proposal_reply(&row).await
    }

    /// `proposal.attach_patch`: revision n+1, by the author, while `pending` or `in_review`.
    pub async fn proposal_attach(
        &self,
        actor: &Actor,
        p: ProposalAttachParams,
    ) -> Result<crate::wire::ProposalReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::Propose)?;
        let raw = self.patch_bytes(p.patch.clone(), p.patch_base64.clone())?;
        let patch = self.checked_patch(&raw)?;
        let author = actor.key();
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                "proposal.attach_patch",
                &p.idempotency_key,
                &ProposalAttachParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let row = self.proposal_in(&p.workspace_id, &id).await?;
                return self.proposal_reply(&row).await;
            }
            Prologue::Fresh(k) => k,
        };
        let row = self.proposal_in(&p.workspace_id, &p.proposal_id).await?;
        if row.author != author {
            return Err(ServiceError::PermissionDenied(
                "only the proposal's author attaches a patch".into(),
            ));
        }
        row.status.on(ProposalEvent::AttachPatch)?;
        if row.version as u64 != p.expected_version {
            return Err(ServiceError::Conflict(format!(
                "proposal {} is at version {}, not expected_version {}",
                row.proposal_id, row.version, p.expected_version
            )));
        }
        let revisions = self.ctx.data.store.revisions(&row.proposal_id).await?;
        let new_digest = sha256_hex(&raw);
        if let Some(same) = revisions.iter().find(|r| r.revision == new_digest) {
            return Err(ServiceError::precondition_field(
                "patch",
                format!(
                    "this patch is already revision {} of the proposal; attach a different one",
                    same.number
                ),
            ));
        }
        let number = revisions.len() as u64 + 1;
        if number > limits::MAX_PROPOSAL_REVISIONS {
            return Err(ServiceError::exhausted(format!(
                "proposal {} has {} revisions; the limit is {}",
                row.proposal_id,
                revisions.len(),
                limits::MAX_PROPOSAL_REVISIONS
            )));
        }
        let affected = affected_resources(p.affected_resources.as_deref(), &patch)?;
        Self::check_links(&worktree, &patch).await?;
        self.check_held(&p.workspace_id, &worktree, &author, &affected, &patch)
            .await?;
        let bytes = raw.len() as i64;
        let revision = self.store_patch(raw).await?;
        let now = self.ctx.now_rfc3339();
        let ids: Vec<String> = affected.iter().map(ResourceId::id).collect();
        let mut record = Self::record_of(&row)?;
        record.affected_resources = ids.clone();
        record.updated_at = now.clone();
        // In review, the new revision gets fresh assignments (saved with it).
        let paths: Vec<String> = patch
            .files
            .iter()
            .flat_map(|f| f.paths().map(str::to_string))
            .collect();
        let ws = self
            .ctx
            .authorize(actor, &p.workspace_id, Permission::Propose)?;
        let plan = self.plan(ws, &row.author, &revision, record.risk, &paths);
        let plan = serde_json::to_string(&plan).expect("a review plan serializes");
        let next = RevisionRow {
            number: number as i64,
            revision,
            bytes,
            created_at: now,
            affected_resources: serde_json::to_string(&ids).expect("ids serialize"),
        };
        let row = self
            .ctx
            .data
            .store
            .attach_revision(
                &row.proposal_id,
                row.version,
                serde_json::to_string(&record).expect("a proposal record serializes"),
                next,
                &author,
                k.binding(&p.workspace_id, actor, &row.proposal_id),
                Some(plan),
            )
            .await?;
        self.proposal_reply(&row).await
    }

    /// `proposal.request_review` and `proposal.withdraw` (the author), `proposal.reject` (a
    /// member with `review` or `admin`; records a `rejected` decision; `reason_md` required).
    pub async fn proposal_transition(
        &self,
        actor: &Actor,
        event: ProposalEvent,
        p: ProposalTransitionParams,
    ) -> Result<crate::wire::ProposalReply, ServiceError> {
        let method = match event {
            ProposalEvent::Reject => {
                if self
                    .ctx
                    .governed(actor, &p.workspace_id, Permission::Review)
                    .is_err()
                {
                    self.ctx
                        .governed(actor, &p.workspace_id, Permission::Admin)?;
                }
                "proposal.reject"
            }
            ProposalEvent::RequestReview | ProposalEvent::Withdraw => {
                self.ctx
                    .governed(actor, &p.workspace_id, Permission::Propose)?;
                if event == ProposalEvent::Withdraw {
                    "proposal.withdraw"
                } else {
                    "proposal.request_review"
                }
            }
            ProposalEvent::AttachPatch | ProposalEvent::Accept => {
                return Err(ServiceError::internal(format!(
                    "{} is not a transition method",
                    event.as_str()
                )));
            }
        };
        match (&p.reason_md, event) {
            (None, ProposalEvent::Reject) => {
                return Err(ServiceError::invalid_field(
                    "reason_md",
                    "proposal.reject needs a reason_md",
                ));
            }
            (Some(r), _) => {
                check_bounded("reason_md", r, true, limits::MAX_PROPOSAL_TEXT_BYTES)?;
            }
            (None, _) => {}
        }
        let key = actor.key();
        let k = match self
            .ctx
            .keys
            .begin(
                &p.workspace_id,
                actor,
                method,
                &p.idempotency_key,
                &ProposalTransitionParams {
                    idempotency_key: String::new(),
                    ..p.clone()
                },
            )
            .await?
        {
            Prologue::Replay(id) => {
                let row = self.proposal_in(&p.workspace_id, &id).await?;
                return self.transition_reply(&row, event).await;
            }
            Prologue::Fresh(k) => k,
        };
        let row = self.proposal_in(&p.workspace_id, &p.proposal_id).await?;
        let by_author = row.author == key;
        match event {
            ProposalEvent::RequestReview | ProposalEvent::Withdraw if !by_author => {
                return Err(ServiceError::PermissionDenied(format!(
                    "only the proposal's author may {}",
                    event.as_str().replace('_', " ")
                )));
            }
            ProposalEvent::Reject if by_author => {
                return Err(ServiceError::PermissionDenied(
                    "the author cannot reject their own proposal; withdraw it instead".into(),
                ));
            }
            ProposalEvent::RequestReview
            | ProposalEvent::Withdraw
            | ProposalEvent::Reject
            | ProposalEvent::AttachPatch
            | ProposalEvent::Accept => {}
        }
        row.status.on(event)?;
        let now = self.ctx.now_rfc3339();
        let mut record = Self::record_of(&row)?;
        record.updated_at = now.clone();
        if p.reason_md.is_some() {
            record.reason_md = p.reason_md.clone();
        }
        let decision = (event == ProposalEvent::Reject).then(|| NewDecision {
            decision_id: format!("dec_{}", crate::ids::new_creation_key()),
            decision: "rejected".into(),
            rationale_md: p.reason_md.clone().unwrap_or_default(),
        });
        // Requesting review persists the plan of the current revision with the transition.
        let plan = if event == ProposalEvent::RequestReview {
            let ws = self
                .ctx
                .authorize(actor, &p.workspace_id, Permission::Propose)?;
            let paths = self.touched_paths(&row.current_revision).await?;
            let plan = self.plan(ws, &row.author, &row.current_revision, record.risk, &paths);
            Some(serde_json::to_string(&plan).expect("a review plan serializes"))
        } else {
            None
        };
        let row = self
            .ctx
            .data
            .store
            .transition_proposal(
                &row.proposal_id,
                row.version,
                event,
                serde_json::to_string(&record).expect("a proposal record serializes"),
                &key,
                decision,
                k.binding(&p.workspace_id, actor, &row.proposal_id),
                &now,
                plan,
            )
            .await?;
        self.transition_reply(&row, event).await
    }

    /// A transition's answer, the same for the call and its replays: the proposal, and for
    /// `request_review` the current revision's review plan.
    async fn transition_reply(
        &self,
        row: &ProposalRow,
        event: ProposalEvent,
    ) -> Result<crate::wire::ProposalReply, ServiceError> {
        let mut reply = self.proposal_reply(row).await?;
        if event == ProposalEvent::RequestReview {
            reply.review_plan = Some(
                self.stored_plan(&row.proposal_id, &row.current_revision)
                    .await?,
            );
        }
        Ok(reply)
    }
}

fn check_bounded(field: &str, v: &str, required: bool, max: usize) -> Result<(), ServiceError> {
    super::check_text_field(field, v, required, max)
}

/// A full Git object id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
