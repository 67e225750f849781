//! The merge loop: apply inputs in order until a conflict or the frozen revision.

use super::*;

impl Service {
    /// Applies inputs from `next_input` until a conflict or the end (then freezes).
    pub(super) fn assemble(&self, repo: &Repo, l: &mut Loaded) -> Result<(), ServiceError> {
        let cid = l.c.candidate_id.clone();
        let time = self.stamp_time(&l.c);
        let owned: std::collections::HashMap<String, String> = repo
            .refs_under(&candidate_refs_prefix(&cid))?
            .into_iter()
            .collect();
        let start_commit = l.a.acc_commit.clone();
        // Whether each distinct input base is in the target's history, asked once per base: the
        // accumulated commit always descends from expected_target_revision, so a base in the
        // target's history is in the accumulated history too.
        let mut base_in_target: std::collections::HashMap<String, bool> =
            std::collections::HashMap::new();
        while l.a.next_input < l.c.inputs.len() {
            let i = l.a.next_input;
            let input = &l.c.inputs[i];
            let theirs = owned
                .get(&input_ref(&cid, i))
                .ok_or_else(|| ServiceError::Internal(format!("owned input ref {i} vanished")))?;
            // When the input's base is already part of the accumulated history, git picks the
            // merge bases itself, exactly as `git merge` would: in a criss-cross history an
            // explicit base that is only one of several merge bases reports conflicts git's
            // own merge does not. Otherwise the input's declared base is the only one we have.
            let in_target = match base_in_target.get(&input.base_revision) {
                Some(known) => *known,
                None => {
                    let known =
                        repo.is_ancestor(&input.base_revision, &l.c.expected_target_revision)?;
                    base_in_target.insert(input.base_revision.clone(), known);
                    known
                }
            };
            let in_history =
                in_target || repo.is_ancestor(&input.base_revision, &l.a.acc_commit)?;
            let base = if in_history {
                None
            } else {
                Some(input.base_revision.as_str())
            };
            let merged = repo.merge_tree(base, &l.a.acc_commit, theirs)?;
            if merged.conflicts.is_empty() {
                let stamp = CommitStamp {
                    message: &format!("airlock: apply input {i} of {cid}"),
                    time,
                };
                let next = repo.commit_tree(&merged.tree, &[&l.a.acc_commit], &stamp)?;
                l.a.acc_commit = next;
                l.a.next_input += 1;
                l.c.applied_inputs = l.a.next_input;
            } else {
                let stamp = CommitStamp {
                    message: &format!("airlock: conflicted merge of input {i} of {cid}"),
                    time,
                };
                let held = repo.commit_tree(&merged.tree, &[&l.a.acc_commit], &stamp)?;
                // Intermediate commits stay reachable (safe from gc) through the work ref.
                if l.a.acc_commit != start_commit {
                    self.set_ref(repo, &work_ref(&cid), &l.a.acc_commit)?;
                }
                self.set_ref(repo, &conflict_ref(&cid), &held)?;
                l.a.conflict_tree = Some(merged.tree);
                l.c.conflicts = Some(merged.conflicts);
                l.c.state = l.c.state.on(CandidateEvent::Conflict)?;
                return Ok(());
            }
        }
        if l.a.acc_commit != start_commit {
            self.set_ref(repo, &work_ref(&cid), &l.a.acc_commit)?;
        }
        let tree = repo.commit_tree_of(&l.a.acc_commit)?;
        let stamp = CommitStamp {
            message: &format!(
                "airlock candidate {cid}\n\n{} input(s) onto {}",
                l.c.inputs.len(),
                l.c.expected_target_revision
            ),
            time,
        };
        let frozen = repo.commit_tree(&tree, &[&l.c.expected_target_revision], &stamp)?;
        match repo.ref_value(&revision_ref(&cid))? {
            Some(v) if v == frozen => {}
            Some(v) => {
                return Err(ServiceError::Internal(format!(
                    "candidate revision ref already at {v}"
                )));
            }
            None => repo.update_refs(&[RefOp::Create {
                name: revision_ref(&cid),
                new: frozen.clone(),
            }])?,
        }
        if let Some(old) = repo.ref_value(&conflict_ref(&cid))? {
            repo.update_refs(&[RefOp::Delete {
                name: conflict_ref(&cid),
                old,
            }])?;
        }
        l.c.candidate_revision = Some(frozen);
        l.c.state = l.c.state.on(CandidateEvent::Freeze)?;
        l.c.conflicts = None;
        l.a.conflict_tree = None;
        Ok(())
    }

    pub(super) fn set_ref(&self, repo: &Repo, name: &str, new: &str) -> Result<(), ServiceError> {
        let op = match repo.ref_value(name)? {
            Some(old) if old == new => return Ok(()),
            Some(old) => RefOp::Update {
                name: name.into(),
                new: new.into(),
                old,
            },
            None => RefOp::Create {
                name: name.into(),
                new: new.into(),
            },
        };
        Ok(repo.update_refs(&[op])?)
    }
}
