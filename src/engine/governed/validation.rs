//! `patch.validate` and `patch.validation_show` (issue 13): a probe of one revision with no
//! side effect on claims or resources. Stages: `claims`, `artifact`, `parse`, `coverage`,
//! `dry_run` (Git applies the patch **inside a sandbox container** to a scratch index holding
//! only the touched paths' current bytes; trusted code harvests the post-images the job wrote
//! and checks that git changed exactly the paths the parser found), `tests` (each expected
//! test runs as a verification against a private commit of the worktree's HEAD tree with the
//! post-images, asynchronously) and `policy` (reported).

use super::claims::Keyed;
use crate::apply::{Fingerprint, Image};
use crate::config::Permission;
use crate::domain::claim::{ClaimState, ResourceId};
use crate::engine::service::{Actor, Service, ServiceError};
use crate::limits;
use crate::patch::coverage::Held;
use crate::store::applies::ValidationRow;
use crate::verification::Status;
use crate::wire::{ValidateParams, ValidationShowParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Instant;

/// A stage's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StageState {
    Executed,
    Skipped,
    Failed,
    Running,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Stage {
    pub(super) name: String,
    pub(super) state: StageState,
    pub(super) reason: String,
    pub(super) duration_ms: u64,
}

/// A claim the validation relied on, with the token apply must still see.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct HeldClaim {
    pub(super) claim_id: String,
    pub(super) resource_id: String,
    pub(super) fencing_token: i64,
}

/// A post-image as the validation stored it: files and symlink targets as blobs in the
/// worktree's object store (retained by the validation's private ref).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PostImage {
    pub(super) path: String,
    pub(super) fingerprint: Fingerprint,
    pub(super) blob: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Record {
    pub(super) validation_id: String,
    pub(super) proposal_id: String,
    pub(super) revision: String,
    pub(super) requested_by: String,
    pub(super) created_at: String,
    pub(super) expires_at: String,
    pub(super) worktree_head: Option<String>,
    pub(super) stages: Vec<Stage>,
    pub(super) claims: Vec<HeldClaim>,
    pub(super) stale_claims: Vec<String>,
    pub(super) pre_images: Vec<(String, Fingerprint)>,
    pub(super) post_images: Vec<PostImage>,
    pub(super) dry_run_verification: Option<String>,
    pub(super) test_verifications: Vec<String>,
    pub(super) tests_commit: Option<String>,
}

/// The dry run's script (bash in the toolchain image): index the pre-images exactly (no
/// filters, no attributes), apply the patch to the index, and write the resulting index's
/// blobs to `out/tree/` with their modes.
const DRY_RUN_SCRIPT: &str = r#"set -euo pipefail
export HOME=/tmp GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0
w=/workspace
git init -q /tmp/dry
export GIT_DIR=/tmp/dry/.git GIT_INDEX_FILE=/tmp/dry/index
cd "$w"
while IFS= read -r -d '' rec; do
  mode=${rec%% *}; path=${rec#* }
  if [ "$mode" = 120000 ]; then
    oid=$(readlink -- "pre/$path" | tr -d '\n' | git hash-object -w --stdin --no-filters)
  else
    oid=$(git hash-object -w --no-filters -- "pre/$path")
  fi
  git update-index --add --cacheinfo "$mode,$oid,$path"
done < pre.index
git apply --cached --check --whitespace=nowarn dry-run.patch
git apply --cached --whitespace=nowarn dry-run.patch
mkdir -p out/tree
git ls-files -s -z | while IFS= read -r -d '' rec; do
  meta=${rec%%$'\t'*}; path=${rec#*$'\t'}
  mode=${meta%% *}; rest=${meta#* }; oid=${rest%% *}
  mkdir -p -- "out/tree/$(dirname -- "$path")"
  if [ "$mode" = 120000 ]; then
    ln -s -- "$(git cat-file blob "$oid")" "out/tree/$path"
  else
    git cat-file blob "$oid" > "out/tree/$path"
    if [ "$mode" = 100755 ]; then chmod 755 "out/tree/$path"; else chmod 644 "out/tree/$path"; fi
  fi
done
echo "dry run: applied"
"#;

fn stage(name: &str, state: StageState, reason: impl Into<String>, t: Instant) -> Stage {
    Stage {
        name: name.into(),
        state,
        reason: reason.into(),
        duration_ms: t.elapsed().as_millis() as u64,
    }
}

fn image_mode(i: &Image) -> Option<&'static str> {
    match i {
        Image::Absent => None,
        Image::File {
            executable: true, ..
        } => Some("100755"),
        Image::File {
            executable: false, ..
        } => Some("100644"),
        Image::Symlink { .. } => Some("120000"),
    }
}

impl Service {
    /// The stored validation of `workspace_id`, or `not_found`.
    pub(super) async fn validation_in(
        &self,
        workspace_id: &str,
        validation_id: &str,
    ) -> Result<(ValidationRow, Record), ServiceError> {
        let not_found = || {
            ServiceError::NotFound(format!(
                "validation {validation_id:?} not found in workspace {workspace_id:?}"
            ))
        };
        let row = self
            .ctx
            .data
            .store
            .validation(validation_id)
            .await?
            .ok_or_else(not_found)?;
        if row.workspace_id != workspace_id {
            return Err(not_found());
        }
        let rec: Record = serde_json::from_str(&row.record)
            .map_err(|e| ServiceError::record(format!("validation {validation_id}"), e))?;
        Ok((row, rec))
    }

    /// The tests stage now, from its verifications: (state, reason, all passed).
    pub(super) async fn tests_state(
        &self,
        rec: &Record,
    ) -> Result<(StageState, String, bool), ServiceError> {
        if rec.test_verifications.is_empty() {
            let st = rec.stages.iter().find(|s| s.name == "tests");
            return Ok(match st {
                Some(s) => (s.state, s.reason.clone(), s.state == StageState::Skipped),
                None => (StageState::Skipped, "no expected tests".into(), true),
            });
        }
        let mut running = 0;
        let mut bad = vec![];
        for id in &rec.test_verifications {
            let v = self
                .ctx
                .data
                .store
                .get(id)
                .await?
                .ok_or_else(|| ServiceError::internal(format!("verification {id} is gone")))?;
            match v.status {
                Status::Running => running += 1,
                Status::Passed => {}
                other => bad.push(format!("{id} {}", other.as_str())),
            }
        }
        Ok(if !bad.is_empty() {
            (
                StageState::Failed,
                format!("did not pass: {}", bad.join(", ")),
                false,
            )
        } else if running > 0 {
            (
                StageState::Running,
                format!("{running} still running"),
                false,
            )
        } else {
            (
                StageState::Executed,
                "every expected test passed".into(),
                true,
            )
        })
    }

    /// The validation as the API shows it (the tests stage as it is now).
    pub(super) async fn validation_view(
        &self,
        row: &ValidationRow,
        rec: &Record,
    ) -> Result<Value, ServiceError> {
        let (tstate, treason, _) = self.tests_state(rec).await?;
        let mut stages = rec.stages.clone();
        if let Some(t) = stages.iter_mut().find(|s| s.name == "tests") {
            t.state = tstate;
            t.reason = treason;
        }
        let complete = stages.iter().all(|s| s.state != StageState::Running);
        let valid = complete
            && stages
                .iter()
                .filter(|s| s.name != "policy")
                .all(|s| matches!(s.state, StageState::Executed | StageState::Skipped));
        let now = self.ctx.clock.now().unix_timestamp();
        Ok(json!({
            "validation_id": rec.validation_id,
            "proposal_id": rec.proposal_id,
            "revision": rec.revision,
            "requested_by": rec.requested_by,
            "valid": valid,
            "complete": complete,
            "expired": row.expires_at <= now,
            "stages": stages,
            "claims": rec.claims,
            "stale_claims": rec.stale_claims,
            "worktree_head": rec.worktree_head,
            "pre_images": rec.pre_images.iter().map(|(p, f)| json!({"path": p, "image": f})).collect::<Vec<_>>(),
            "post_images": rec.post_images.iter().map(|p| json!({"path": p.path, "image": p.fingerprint})).collect::<Vec<_>>(),
            "dry_run_verification": rec.dry_run_verification,
            "test_verifications": rec.test_verifications,
            "created_at": rec.created_at,
            "expires_at": rec.expires_at,
        }))
    }

    /// `patch.validation_show`.
    pub async fn validation_show(
        &self,
        actor: &Actor,
        p: ValidationShowParams,
    ) -> Result<Value, ServiceError> {
        self.governed(actor, &p.workspace_id, Permission::View)?;
        let (row, rec) = self
            .validation_in(&p.workspace_id, &p.validation_id)
            .await?;
        Ok(json!({"validation": self.validation_view(&row, &rec).await?}))
    }

    /// `patch.validate`: permission `apply`, or the proposal's author.
    pub async fn patch_validate(
        &self,
        actor: &Actor,
        p: ValidateParams,
    ) -> Result<Value, ServiceError> {
        let worktree = self.governed(actor, &p.workspace_id, Permission::View)?;
        let k = Keyed::new(
            "patch.validate",
            &p.idempotency_key,
            &ValidateParams {
                idempotency_key: String::new(),
                ..p.clone()
            },
        )?;
        if let Some(id) = self.replay_of(&p.workspace_id, actor, &k).await? {
            let (row, rec) = self.validation_in(&p.workspace_id, &id).await?;
            return Ok(json!({"validation": self.validation_view(&row, &rec).await?}));
        }
        let prop = self.proposal_in(&p.workspace_id, &p.proposal_id).await?;
        let may = actor.key() == prop.author
            || self
                .authorize(actor, &p.workspace_id, Permission::Apply)
                .is_ok();
        if !may {
            return Err(ServiceError::PermissionDenied(
                "patch.validate needs the apply permission, or the proposal's author".into(),
            ));
        }
        if p.revision != prop.current_revision {
            return Err(ServiceError::precondition_field(
                "revision",
                format!(
                    "revision {} is not the proposal's current revision {}",
                    p.revision, prop.current_revision
                ),
            ));
        }
        if prop.status.is_terminal() {
            return Err(ServiceError::precondition(format!(
                "proposal {} is {}",
                prop.proposal_id,
                prop.status.as_str()
            )));
        }
        let precord = Self::record_of(&prop)?;
        let affected: Vec<ResourceId> = precord
            .affected_resources
            .iter()
            .map(|id| ResourceId::parse(id).map_err(ServiceError::internal))
            .collect::<Result<_, _>>()?;
        let validation_id = format!("val_{}", crate::ids::new_creation_key());
        let now = self.ctx.clock.now();
        let ttl = self.ctx.config.validation_ttl;
        let mut rec = Record {
            validation_id: validation_id.clone(),
            proposal_id: prop.proposal_id.clone(),
            revision: p.revision.clone(),
            requested_by: actor.key(),
            created_at: crate::ids::rfc3339(now),
            expires_at: crate::ids::rfc3339(now + ttl),
            worktree_head: {
                let repo = self.repo(&p.workspace_id).clone();
                tokio::task::spawn_blocking(move || repo.resolve_commit("HEAD").ok())
                    .await
                    .expect("rev-parse does not panic")
            },
            stages: vec![],
            claims: vec![],
            stale_claims: vec![],
            pre_images: vec![],
            post_images: vec![],
            dry_run_verification: None,
            test_verifications: vec![],
            tests_commit: None,
        };
        let mut ok = true;

        // claims: the author's write/exclusive claims covering every affected resource.
        let t = Instant::now();
        let nowu = now.unix_timestamp();
        let held = self
            .ctx
            .data
            .store
            .list_claims(crate::store::claims::ClaimFilter {
                workspace_id: p.workspace_id.clone(),
                status: Some(ClaimState::Active),
                holder: Some(prop.author.clone()),
                limit: u32::MAX,
                ..Default::default()
            })
            .await?
            .into_iter()
            .filter(|c| c.mode.writes() && c.expires_at > nowu)
            .collect::<Vec<_>>();
        let mut missing = vec![];
        for a in &affected {
            let cover = held.iter().find(|c| {
                ResourceId::parse(&c.resource_id)
                    .is_ok_and(|r| super::proposals::claim_covers(&r, a))
            });
            match cover {
                None => missing.push(a.id()),
                Some(c) => {
                    if !rec.claims.iter().any(|h| h.claim_id == c.claim_id) {
                        rec.claims.push(HeldClaim {
                            claim_id: c.claim_id.clone(),
                            resource_id: c.resource_id.clone(),
                            fencing_token: c.fencing_token,
                        });
                    }
                }
            }
        }
        for h in &rec.claims {
            let c = held
                .iter()
                .find(|c| c.claim_id == h.claim_id)
                .expect("listed above");
            let r: super::claims::Record = serde_json::from_str(&c.record)
                .map_err(|e| ServiceError::record("a claim record", e))?;
            let resource = ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
            let current = Self::current_hash(worktree.clone(), resource)
                .await
                .ok()
                .flatten();
            if current.unwrap_or_default() != r.base_hash.unwrap_or_default() {
                rec.stale_claims.push(c.claim_id.clone());
            }
        }
        rec.stages.push(if missing.is_empty() {
            stage(
                "claims",
                StageState::Executed,
                format!("{} claims cover every affected resource", rec.claims.len()),
                t,
            )
        } else {
            ok = false;
            stage(
                "claims",
                StageState::Failed,
                format!(
                    "no active write or exclusive claim of the author covers {}",
                    missing.join(", ")
                ),
                t,
            )
        });

        // artifact and parse.
        let t = Instant::now();
        let bytes = match self.read_patch(&p.revision).await {
            Ok(b) => {
                rec.stages.push(stage(
                    "artifact",
                    StageState::Executed,
                    "present; its SHA-256 is the revision",
                    t,
                ));
                Some(b)
            }
            Err(e) => {
                ok = false;
                rec.stages
                    .push(stage("artifact", StageState::Failed, e.to_string(), t));
                None
            }
        };
        let t = Instant::now();
        let patch = match bytes.as_deref().map(crate::patch::parse) {
            Some(Ok(patch)) => {
                rec.stages.push(stage(
                    "parse",
                    StageState::Executed,
                    format!("{} file operations", patch.files.len()),
                    t,
                ));
                Some(patch)
            }
            Some(Err(e)) => {
                ok = false;
                rec.stages
                    .push(stage("parse", StageState::Failed, e.to_string(), t));
                None
            }
            None => {
                rec.stages
                    .push(stage("parse", StageState::Skipped, "no artifact", t));
                None
            }
        };

        // coverage, with symbols re-resolved now.
        let t = Instant::now();
        match &patch {
            None => rec
                .stages
                .push(stage("coverage", StageState::Skipped, "no parsed patch", t)),
            Some(patch) => {
                let mut covering = vec![];
                for c in &held {
                    let resource =
                        ResourceId::parse(&c.resource_id).map_err(ServiceError::internal)?;
                    let span = match &resource {
                        ResourceId::Symbol { .. } => {
                            Self::inspect(worktree.clone(), resource.clone())
                                .await
                                .ok()
                                .and_then(|(_, s)| s)
                        }
                        ResourceId::File { .. }
                        | ResourceId::Directory { .. }
                        | ResourceId::Other { .. } => None,
                    };
                    covering.push(Held { resource, span });
                }
                let uncovered = crate::patch::coverage::check(patch, &covering);
                rec.stages.push(if uncovered.is_empty() {
                    stage(
                        "coverage",
                        StageState::Executed,
                        "every touched path and changed line is covered",
                        t,
                    )
                } else {
                    ok = false;
                    let items: Vec<String> = uncovered.iter().map(ToString::to_string).collect();
                    stage("coverage", StageState::Failed, items.join("; "), t)
                });
            }
        }

        // dry_run, in the sandbox.
        let t = Instant::now();
        match (&patch, &bytes) {
            (Some(patch), Some(bytes)) if ok => {
                match self
                    .dry_run(&p.workspace_id, &worktree, patch, bytes, &mut rec)
                    .await
                {
                    Ok(reason) => {
                        rec.stages
                            .push(stage("dry_run", StageState::Executed, reason, t))
                    }
                    Err(reason) => {
                        ok = false;
                        rec.stages
                            .push(stage("dry_run", StageState::Failed, reason, t));
                    }
                }
            }
            _ => rec.stages.push(stage(
                "dry_run",
                StageState::Skipped,
                "an earlier stage failed",
                t,
            )),
        }

        // tests, asynchronously.
        let t = Instant::now();
        if precord.expected_tests.is_empty() {
            rec.stages.push(stage(
                "tests",
                StageState::Skipped,
                "the proposal names no expected tests",
                t,
            ));
        } else if !ok {
            rec.stages.push(stage(
                "tests",
                StageState::Skipped,
                "an earlier stage failed",
                t,
            ));
        } else {
            match self
                .start_tests(
                    &p.workspace_id,
                    &validation_id,
                    &precord.expected_tests,
                    &mut rec,
                )
                .await
            {
                Ok(()) => rec
                    .stages
                    .push(stage("tests", StageState::Running, "started", t)),
                Err(e) => rec.stages.push(stage("tests", StageState::Failed, e, t)),
            }
        }

        // policy, reported.
        let t = Instant::now();
        let ws = self.authorize(actor, &p.workspace_id, Permission::View)?;
        let verdict = self.verdict(ws, &prop, precord.risk).await?;
        rec.stages.push(stage(
            "policy",
            StageState::Executed,
            if verdict.approvable {
                "approvable"
            } else {
                "not approvable"
            },
            t,
        ));

        let row = ValidationRow {
            validation_id: validation_id.clone(),
            workspace_id: p.workspace_id.clone(),
            proposal_id: prop.proposal_id.clone(),
            revision: p.revision.clone(),
            expires_at: (now + ttl).unix_timestamp(),
            record: serde_json::to_string(&rec).expect("a validation record serializes"),
        };
        self.ctx
            .data
            .store
            .insert_validation(
                row.clone(),
                &actor.key(),
                &self.now_rfc3339(),
                k.binding(&p.workspace_id, actor, &validation_id),
            )
            .await?;
        Ok(json!({"validation": self.validation_view(&row, &rec).await?}))
    }

    /// The sandboxed dry run: fills `rec`'s pre- and post-images, or says why it failed.
    async fn dry_run(
        &self,
        workspace_id: &str,
        worktree: &std::path::Path,
        patch: &crate::patch::Patch,
        bytes: &[u8],
        rec: &mut Record,
    ) -> Result<String, String> {
        // The parser's paths: every side of every change; copy sources are read, not changed.
        let mut read_paths: Vec<String> = vec![];
        let mut changed_paths: Vec<String> = vec![];
        for f in &patch.files {
            for path in f.paths() {
                if !read_paths.iter().any(|p| p == path) {
                    read_paths.push(path.to_string());
                }
            }
            let copy_source = matches!(f.kind, crate::patch::ChangeKind::Copy);
            for path in f.paths() {
                let is_source = copy_source && f.old_path.as_deref() == Some(path);
                if !is_source && !changed_paths.iter().any(|p| p == path) {
                    changed_paths.push(path.to_string());
                }
            }
        }
        let wt = worktree.to_path_buf();
        let paths = read_paths.clone();
        let pre: Vec<(String, Image)> = tokio::task::spawn_blocking(move || {
            let root = crate::beneath::Root::open(&wt).map_err(|e| e.to_string())?;
            paths
                .into_iter()
                .map(|p| {
                    crate::apply::current(&root, &p)
                        .map(|i| (p, i))
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .await
        .expect("reading pre-images does not panic")?;
        rec.pre_images = pre
            .iter()
            .map(|(p, i)| (p.clone(), i.fingerprint()))
            .collect();

        // The job's input: pre/<path> for each existing pre-image, their modes, the patch.
        let repo = self.repo(workspace_id).clone();
        let patch_bytes = bytes.to_vec();
        let pre2 = pre.clone();
        let commit = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let e = |x: crate::staging::StagingError| x.to_string();
            let mut edits = vec![];
            let mut index = Vec::new();
            for (path, img) in &pre2 {
                let (content, mode) = match img {
                    Image::Absent => continue,
                    Image::File { bytes, .. } => (bytes.clone(), image_mode(img).expect("a file")),
                    Image::Symlink { target } => (target.clone().into_bytes(), "120000"),
                };
                let blob = repo.write_blob(&content).map_err(e)?;
                let fm = crate::domain::git::FileMode::parse(mode).expect("a known mode");
                edits.push((format!("pre/{path}"), Some((blob, fm))));
                index.extend_from_slice(format!("{mode} {path}").as_bytes());
                index.push(0);
            }
            let regular = crate::domain::git::FileMode::Regular;
            edits.push((
                "pre.index".into(),
                Some((repo.write_blob(&index).map_err(e)?, regular)),
            ));
            edits.push((
                "dry-run.patch".into(),
                Some((repo.write_blob(&patch_bytes).map_err(e)?, regular)),
            ));
            let tree = repo
                .edit_tree(&repo.empty_tree().map_err(e)?, &edits)
                .map_err(e)?;
            repo.commit_tree(
                &tree,
                &[],
                &crate::staging::plumbing::CommitStamp {
                    message: "airlock dry run",
                    time: 0,
                },
            )
            .map_err(e)
        })
        .await
        .expect("building the dry run does not panic")?;

        let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
        let prepared = self
            .ctx
            .prepare_commit(
                self.repo(workspace_id).clone(),
                commit,
                crate::config::TOOLCHAIN_PROFILE,
                vec!["bash".into(), "-c".into(), DRY_RUN_SCRIPT.into()],
                limits::DRY_RUN_TIMEOUT_SECONDS,
                None,
            )
            .await
            .map_err(|e| format!("the dry run cannot start: {e}"))?
            .harvesting(crate::engine::runner::pipeline::Harvest {
                dir: "out".into(),
                max_files: limits::MAX_PATCH_FILES * 2,
                max_bytes: limits::MAX_DRY_RUN_OUTPUT_BYTES,
                into: slot.clone(),
            });
        let (_tx, cancel) = tokio::sync::watch::channel(false);
        let v = self
            .ctx
            .execute(prepared, cancel)
            .await
            .map_err(|e| format!("the dry run failed to run: {e}"))?;
        rec.dry_run_verification = Some(v.verification_id.clone());
        if v.status != Status::Passed {
            return Err(format!(
                "git apply in the sandbox: {} ({}): {}",
                v.status.as_str(),
                v.error.unwrap_or_default(),
                v.output.trim()
            ));
        }
        let harvested = slot
            .lock()
            .expect("the harvest slot is not poisoned")
            .take()
            .ok_or("the dry run left no output")?
            .map_err(|e| format!("reading the dry run's output: {e}"))?;
        let post: Vec<(String, Image)> = harvested
            .into_iter()
            .filter_map(|(p, i)| p.strip_prefix("tree/").map(|p| (p.to_string(), i)))
            .collect();
        // Git's changed paths, from the images: must be exactly the parser's.
        let mut git_changed: Vec<String> = vec![];
        for (path, before) in &pre {
            let after = post
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, i)| i.fingerprint())
                .unwrap_or(Fingerprint::Absent);
            if after != before.fingerprint() {
                git_changed.push(path.clone());
            }
        }
        for (path, _) in &post {
            if !pre.iter().any(|(p, _)| p == path) {
                git_changed.push(path.clone());
            }
        }
        git_changed.sort();
        let mut parser_changed = changed_paths.clone();
        parser_changed.sort();
        if git_changed != parser_changed {
            return Err(format!(
                "the sandboxed git changed {git_changed:?}, the parser expected {parser_changed:?}"
            ));
        }
        let repo = self.repo(workspace_id).clone();
        let changed = changed_paths.clone();
        let post_images = tokio::task::spawn_blocking(move || -> Result<Vec<PostImage>, String> {
            changed
                .iter()
                .map(|path| {
                    let img = post
                        .iter()
                        .find(|(p, _)| p == path)
                        .map(|(_, i)| i.clone())
                        .unwrap_or(Image::Absent);
                    let blob = match &img {
                        Image::Absent => None,
                        Image::File { bytes, .. } => {
                            Some(repo.write_blob(bytes).map_err(|e| e.to_string())?)
                        }
                        Image::Symlink { target } => Some(
                            repo.write_blob(target.as_bytes())
                                .map_err(|e| e.to_string())?,
                        ),
                    };
                    Ok(PostImage {
                        path: path.clone(),
                        fingerprint: img.fingerprint(),
                        blob,
                    })
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .await
        .expect("storing post-images does not panic")?;
        rec.post_images = post_images;
        Ok(format!(
            "git applied the patch in the sandbox; {} paths change",
            changed_paths.len()
        ))
    }

    /// Starts each expected test as a verification of a private commit: the worktree's HEAD
    /// tree with the post-images.
    async fn start_tests(
        &self,
        workspace_id: &str,
        validation_id: &str,
        tests: &[Vec<String>],
        rec: &mut Record,
    ) -> Result<(), String> {
        let repo = self.repo(workspace_id).clone();
        let head = rec.worktree_head.clone();
        let edits: Vec<(String, Option<(String, crate::domain::git::FileMode)>)> = rec
            .post_images
            .iter()
            .map(|p| {
                let mode = match &p.fingerprint {
                    Fingerprint::Absent => None,
                    Fingerprint::File {
                        executable: true, ..
                    } => Some(crate::domain::git::FileMode::Executable),
                    Fingerprint::File {
                        executable: false, ..
                    } => Some(crate::domain::git::FileMode::Regular),
                    Fingerprint::Symlink { .. } => Some(crate::domain::git::FileMode::Symlink),
                };
                (
                    p.path.clone(),
                    mode.and_then(|m| p.blob.clone().map(|b| (b, m))),
                )
            })
            .collect();
        let vid = validation_id.to_string();
        let commit = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let e = |x: crate::staging::StagingError| x.to_string();
            let base = match &head {
                Some(h) => repo.commit_tree_of(h).map_err(e)?,
                None => repo.empty_tree().map_err(e)?,
            };
            let tree = repo.edit_tree(&base, &edits).map_err(e)?;
            let parents: Vec<&str> = head.iter().map(String::as_str).collect();
            let commit = repo
                .commit_tree(
                    &tree,
                    &parents,
                    &crate::staging::plumbing::CommitStamp {
                        message: "airlock validation",
                        time: 0,
                    },
                )
                .map_err(e)?;
            // Retained (and its post-image blobs with it) while the validation matters.
            repo.update_refs(&[crate::staging::plumbing::RefOp::Create {
                name: format!("refs/airlock/validations/{vid}"),
                new: commit.clone(),
            }])
            .map_err(e)?;
            Ok(commit)
        })
        .await
        .expect("building the test commit does not panic")?;
        rec.tests_commit = Some(commit.clone());
        let profile = self
            .ctx
            .config
            .workspaces
            .get(workspace_id)
            .map(|w| w.profile.clone())
            .unwrap_or_default();
        for argv in tests {
            let prepared = self
                .ctx
                .prepare_commit(
                    self.repo(workspace_id).clone(),
                    commit.clone(),
                    &profile,
                    argv.clone(),
                    limits::DEFAULT_TIMEOUT_SECONDS,
                    None,
                )
                .await
                .map_err(|e| format!("an expected test cannot start: {e}"))?;
            let started = self
                .ctx
                .begin(prepared, None)
                .await
                .map_err(|e| format!("an expected test cannot be recorded: {e}"))?;
            rec.test_verifications
                .push(started.verification.verification_id.clone());
            self.spawn_worker(started);
        }
        Ok(())
    }
}
