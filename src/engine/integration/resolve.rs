//! `integration.resolve`: validate paths and content, save the intent, edit the conflict tree,
//! check the result, continue assembly.

use super::prepare::Assembler;
use super::*;

impl Assembler {
    /// `integration.resolve`.
    pub async fn resolve(
        &self,
        actor: &Actor,
        p: ResolveParams,
    ) -> Result<Candidate, ServiceError> {
        self.ctx
            .authorize(actor, &p.workspace_id, Permission::Integrate)?;
        candidate::check_idempotency_key(&p.idempotency_key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        let expected_version = match p.expected_version {
            Some(v) if v > 0 => v as u64,
            Some(v) => {
                return Err(ServiceError::invalid_field(
                    "expected_version",
                    format!("expected_version is {v}; it must be positive"),
                ));
            }
            None => {
                return Err(ServiceError::invalid_field(
                    "expected_version",
                    "expected_version is required",
                ));
            }
        };
        if p.files.is_empty() || p.files.len() > MAX_RESOLVE_FILES {
            return Err(ServiceError::invalid_field(
                "files",
                format!(
                    "files has {} entries; it needs 1..={MAX_RESOLVE_FILES}",
                    p.files.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, f) in p.files.iter().enumerate() {
            candidate::check_relative_path(&f.path).map_err(|e| {
                ServiceError::invalid_field(
                    format!("files[{i}].path"),
                    format!("files[{i}].path {:?} {e}", f.path),
                )
            })?;
            if f.path.starts_with(':') {
                return Err(ServiceError::invalid_field(
                    format!("files[{i}].path"),
                    format!(
                        "files[{i}].path {:?} starts with ':', which git reads as pathspec magic",
                        f.path
                    ),
                ));
            }
            if !seen.insert(f.path.as_str()) {
                return Err(ServiceError::invalid_field(
                    format!("files[{i}].path"),
                    format!("files[{i}].path {:?} is listed twice", f.path),
                ));
            }
            match (&f.content, f.delete) {
                (Some(_), true) | (None, false) => {
                    return Err(ServiceError::invalid_field(
                        format!("files[{i}]"),
                        format!("files[{i}] needs exactly one of content or delete: true"),
                    ));
                }
                (Some(c), false) if candidate::has_conflict_markers(c) => {
                    return Err(ServiceError::invalid(format!(
                        "files[{i}].content for {:?} still has conflict markers",
                        f.path
                    )));
                }
                _ => {}
            }
        }
        // One path may not be a file while another lies beneath it: the tree cannot hold both.
        for (i, f) in p.files.iter().enumerate() {
            if let Some(parent) = candidate::parents(&f.path)
                .into_iter()
                .find(|d| seen.contains(d))
            {
                return Err(ServiceError::invalid_field(
                    format!("files[{i}].path"),
                    format!(
                        "files[{i}].path {:?} lies beneath {parent:?}, which the same batch writes or deletes as a file",
                        f.path
                    ),
                ));
            }
        }
        #[derive(Serialize)]
        struct ResolveDigest<'a> {
            candidate_id: &'a str,
            expected_version: u64,
            files: &'a [ResolveFile],
        }
        let digest = candidate::digest(&ResolveDigest {
            candidate_id: &p.candidate_id,
            expected_version,
            files: &p.files,
        });
        let Begun {
            mut l,
            actor_key,
            key,
            guard: _guard,
            admitted: _admitted,
        } = self
            .candidates
            .begin_mutation(
                actor,
                Operation::Resolve,
                &p.workspace_id,
                &p.candidate_id,
                &p.idempotency_key,
                &digest,
            )
            .await?;
        let Some(key) = key else {
            return Ok(l.c); // completed earlier: the original binding stands
        };
        if l.c.state.is_fenced() {
            return Err(ServiceError::precondition(format!(
                "candidate is {}",
                l.c.state.as_str()
            )));
        }
        match &l.a.pending_resolution {
            Some(pending) => {
                let exact = pending.actor_key == actor_key
                    && pending.idempotency_key == p.idempotency_key
                    && pending.digest == digest;
                if !exact {
                    return Err(ServiceError::Conflict(
                        "another resolution is pending on this candidate; retry it exactly first"
                            .into(),
                    ));
                }
            }
            None => {
                if l.c.version != expected_version {
                    return Err(ServiceError::Conflict(format!(
                        "expected_version {expected_version} is stale; the candidate is at version {}",
                        l.c.version
                    )));
                }
                if l.c.state != CandidateState::Conflicted {
                    return Err(ServiceError::precondition(format!(
                        "candidate is {}; only a conflicted candidate can be resolved",
                        l.c.state.as_str()
                    )));
                }
                let tree =
                    l.a.conflict_tree
                        .clone()
                        .ok_or_else(|| ServiceError::internal("conflicted without a tree"))?;
                blocking(|| self.check_resolution_paths(&p.workspace_id, &tree, &p.files))?;
                // Durable intent before any Git change.
                l.a.pending_resolution = Some(PendingResolution {
                    actor_key: actor_key.clone(),
                    idempotency_key: p.idempotency_key.clone(),
                    digest: digest.clone(),
                    expected_version,
                    files: p.files.clone(),
                });
                self.candidates.save(&mut l, None, None).await?;
                crate::crash::point(crate::crash::CrashPoint::ResolveAfterIntent);
            }
        }
        if let Err(e) = blocking(|| self.apply_pending_resolution(&mut l)) {
            if matches!(e, ServiceError::InvalidArgument(_)) {
                // The resolution itself cannot be applied: withdraw the intent so the
                // candidate is exactly as it was, and say why.
                l.a.pending_resolution = None;
                self.candidates.save(&mut l, None, None).await?;
            }
            return Err(e);
        }
        let result_id = format!("v{}", l.stored_version + 1);
        self.candidates
            .save_mutation(&mut l, &key, MutationOperation::Resolve, result_id)
            .await?;
        Ok(l.c)
    }

    /// Refuses paths that traverse a symlink, or name a directory, in the candidate tree.
    pub(super) fn check_resolution_paths(
        &self,
        ws: &str,
        tree: &str,
        files: &[ResolveFile],
    ) -> Result<(), ServiceError> {
        let repo = self.ctx.repo(ws);
        for (i, f) in files.iter().enumerate() {
            for parent in candidate::parents(&f.path) {
                if let Some(e) = repo.tree_entry(tree, parent)? {
                    if e.mode == FileMode::Symlink {
                        return Err(ServiceError::invalid_field(
                            format!("files[{i}].path"),
                            format!(
                                "files[{i}].path {:?} traverses the symlink {parent:?}",
                                f.path
                            ),
                        ));
                    }
                    if e.kind != ObjectKind::Tree {
                        return Err(ServiceError::invalid_field(
                            format!("files[{i}].path"),
                            format!(
                                "files[{i}].path {:?}: {parent:?} is a file, not a directory",
                                f.path
                            ),
                        ));
                    }
                }
            }
            if let Some(e) = repo.tree_entry(tree, &f.path)? {
                if e.kind == ObjectKind::Tree || e.mode == FileMode::Gitlink {
                    return Err(ServiceError::invalid_field(
                        format!("files[{i}].path"),
                        format!("files[{i}].path {:?} is a directory or submodule", f.path),
                    ));
                }
            } else if f.delete {
                return Err(ServiceError::invalid_field(
                    format!("files[{i}].path"),
                    format!(
                        "files[{i}].path {:?} does not exist, so it cannot be deleted",
                        f.path
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Applies the recorded resolution intent (deterministic, so safe to repeat after a crash),
    /// then continues assembly when no conflict remains.
    pub(super) fn apply_pending_resolution(&self, l: &mut Loaded) -> Result<(), ServiceError> {
        let pending =
            l.a.pending_resolution
                .clone()
                .ok_or_else(|| ServiceError::internal("no pending resolution"))?;
        let repo = self.ctx.repo(&l.c.workspace_id).clone();
        let cid = l.c.candidate_id.clone();
        let tree =
            l.a.conflict_tree
                .clone()
                .ok_or_else(|| ServiceError::internal("conflicted without a tree"))?;
        let mut edits = Vec::new();
        for f in &pending.files {
            match &f.content {
                Some(content) => {
                    let blob = repo.write_blob(content.as_bytes())?;
                    let mode = match repo.tree_entry(&tree, &f.path)? {
                        Some(e) if e.mode == FileMode::Executable => FileMode::Executable,
                        _ => FileMode::Regular,
                    };
                    edits.push((f.path.clone(), Some((blob, mode))));
                }
                None => edits.push((f.path.clone(), None)),
            }
        }
        let new_tree = repo.edit_tree(&tree, &edits).map_err(|e| {
            ServiceError::invalid(format!(
                "the resolution does not fit the candidate tree: {e}"
            ))
        })?;
        // Postcondition: the new tree holds exactly what was asked for, so a path git dropped
        // or rewrote silently can never be reported as resolved.
        for (path, edit) in &edits {
            let found = repo.tree_entry(&new_tree, path)?;
            let exact = match (edit, &found) {
                (Some((blob, mode)), Some(e)) => {
                    e.kind == ObjectKind::Blob && &e.oid == blob && e.mode == *mode
                }
                (None, None) => true,
                _ => false,
            };
            if !exact {
                return Err(ServiceError::invalid(format!(
                    "the resolution of {path:?} did not produce that file in the candidate tree (found {found:?}); nothing was saved"
                )));
            }
        }
        let resolved: std::collections::BTreeSet<&str> =
            pending.files.iter().map(|f| f.path.as_str()).collect();
        let remaining: Vec<String> =
            l.c.conflicts
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|c| !resolved.contains(c.as_str()))
                .collect();
        let time = self.candidates.stamp_time(&l.c);
        // The batch as history keeps it: a commit of the new tree whose parent holds the merge
        // as it stood (both from the journal, so a repeat after a crash makes the same ones).
        let n = l.c.resolutions.len();
        let i = l.a.next_input;
        let before = repo.commit_tree(
            &tree,
            &[&l.a.acc_commit],
            &CommitStamp {
                message: &format!("airlock: merge of input {i} of {cid} before resolution {n}"),
                time,
            },
        )?;
        let resolution = repo.commit_tree(
            &new_tree,
            &[&before],
            &CommitStamp {
                message: &format!("airlock: resolution {n} of {cid} by {}", pending.actor_key),
                time,
            },
        )?;
        self.set_ref(&repo, &resolution_ref(&cid, n), &resolution)?;
        l.c.resolutions.push(crate::candidate::Resolution {
            input: i,
            actor_key: pending.actor_key.clone(),
            commit: resolution,
            paths: pending.files.iter().map(|f| f.path.clone()).collect(),
        });
        l.a.pending_resolution = None;
        if !remaining.is_empty() {
            let held = repo.commit_tree(
                &new_tree,
                &[&l.a.acc_commit],
                &CommitStamp {
                    message: &format!("airlock: partial resolution of {cid}"),
                    time,
                },
            )?;
            self.set_ref(&repo, &conflict_ref(&cid), &held)?;
            l.a.conflict_tree = Some(new_tree);
            l.c.conflicts = Some(remaining);
            return Ok(());
        }
        let next = repo.commit_tree(
            &new_tree,
            &[&l.a.acc_commit],
            &CommitStamp {
                message: &format!("airlock: apply resolved input {i} of {cid}"),
                time,
            },
        )?;
        self.set_ref(&repo, &work_ref(&cid), &next)?;
        l.a.acc_commit = next;
        l.a.next_input += 1;
        l.c.applied_inputs = l.a.next_input;
        l.a.conflict_tree = None;
        l.c.conflicts = None;
        l.c.state = l.c.state.on(CandidateEvent::Resolve)?;
        self.assemble(&repo, l, None)
    }
}
