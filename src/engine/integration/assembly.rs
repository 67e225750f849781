//! The merge loop: apply inputs in order until a conflict or the frozen revision.

use super::*;

impl Integration {
    /// Applies inputs from `next_input` until a conflict or the end (then freezes). `owned` is
    /// the current value of every candidate-owned ref ([`owned_ref_names`]), when the caller
    /// just read or wrote them; otherwise they are read here. Each outcome ends in one ref
    /// transaction whose old values are checked against that view.
    pub(super) fn assemble(
        &self,
        repo: &Repo,
        l: &mut Loaded,
        owned: Option<std::collections::HashMap<String, String>>,
    ) -> Result<(), ServiceError> {
        let cid = l.c.candidate_id.clone();
        let time = self.stamp_time(&l.c);
        let owned = match owned {
            Some(owned) => owned,
            None => repo.refs_named(&owned_ref_names(&l.c))?,
        };
        let start_commit = l.a.acc_commit.clone();
        // The merged tree of all inputs, when this call merged the last one.
        let mut acc_tree: Option<String> = None;
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
                .ok_or_else(|| ServiceError::internal(format!("owned input ref {i} vanished")))?;
            // When the input's base is already part of the accumulated history, git picks the
            // merge bases itself, exactly as `git merge` would: in a criss-cross history an
            // explicit base that is only one of several merge bases reports conflicts git's
            // own merge does not. Otherwise the input's declared base is the only one we have.
            let in_target = match base_in_target.get(&input.base_revision) {
                Some(known) => *known,
                // A commit is its own ancestor: the common case needs no git process.
                None if input.base_revision == l.c.expected_target_revision => true,
                None => {
                    let known =
                        repo.is_ancestor(&input.base_revision, &l.c.expected_target_revision)?;
                    base_in_target.insert(input.base_revision.clone(), known);
                    known
                }
            };
            let in_history = in_target
                || input.base_revision == l.a.acc_commit
                || repo.is_ancestor(&input.base_revision, &l.a.acc_commit)?;
            let base = if in_history {
                None
            } else {
                Some(input.base_revision.as_str())
            };
            let merged = repo.merge_tree(base, &l.a.acc_commit, theirs)?;
            if merged.conflicts.is_empty() {
                // The last input needs no step commit of its own: the frozen commit carries its
                // tree. The journal keeps `acc_commit` covering exactly `next_input` inputs, so
                // the last one counts as applied only once the candidate is frozen.
                if i + 1 == l.c.inputs.len() {
                    acc_tree = Some(merged.tree);
                    break;
                }
                let stamp = CommitStamp {
                    message: &format!("airlock: apply input {i} of {cid}"),
                    time,
                };
                l.a.acc_commit = repo.commit_tree(&merged.tree, &[&l.a.acc_commit], &stamp)?;
                l.a.next_input += 1;
                l.c.applied_inputs = l.a.next_input;
            } else {
                let stamp = CommitStamp {
                    message: &format!("airlock: conflicted merge of input {i} of {cid}"),
                    time,
                };
                let held = repo.commit_tree(&merged.tree, &[&l.a.acc_commit], &stamp)?;
                // Intermediate commits stay reachable (safe from gc) through the work ref.
                let mut ops = Vec::new();
                if l.a.acc_commit != start_commit {
                    ops.extend(set_op(&owned, &work_ref(&cid), &l.a.acc_commit));
                }
                ops.extend(set_op(&owned, &conflict_ref(&cid), &held));
                repo.update_refs(&ops)?;
                l.a.conflict_tree = Some(merged.tree);
                l.c.conflicts = Some(merged.conflicts);
                l.c.state = l.c.state.on(CandidateEvent::Conflict)?;
                return Ok(());
            }
        }
        let mut ops = Vec::new();
        if l.a.acc_commit != start_commit {
            ops.extend(set_op(&owned, &work_ref(&cid), &l.a.acc_commit));
        }
        let tree = match acc_tree {
            Some(tree) => tree,
            None => repo.commit_tree_of(&l.a.acc_commit)?,
        };
        let history = self.history_of(&l.c.workspace_id);
        let frozen = super::history::frozen_commit(repo, &l.c, history, &tree, time)?;
        match owned.get(&revision_ref(&cid)) {
            Some(v) if *v == frozen => {}
            Some(v) => {
                return Err(ServiceError::internal(format!(
                    "candidate revision ref already at {v}"
                )));
            }
            None => ops.push(RefOp::Create {
                name: revision_ref(&cid),
                new: frozen.clone(),
            }),
        }
        if let Some(old) = owned.get(&conflict_ref(&cid)) {
            ops.push(RefOp::Delete {
                name: conflict_ref(&cid),
                old: old.clone(),
            });
        }
        repo.update_refs(&ops)?;
        l.a.next_input = l.c.inputs.len();
        l.c.applied_inputs = l.a.next_input;
        l.c.candidate_revision = Some(frozen);
        l.c.state = l.c.state.on(CandidateEvent::Freeze)?;
        l.c.conflicts = None;
        l.a.conflict_tree = None;
        Ok(())
    }

    /// Points `name` at `new` (one ref, its own transaction), reading its current value first.
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

/// The op that moves `name` (whose current value `owned` holds) to `new`, if it must move.
fn set_op(
    owned: &std::collections::HashMap<String, String>,
    name: &str,
    new: &str,
) -> Option<RefOp> {
    match owned.get(name) {
        Some(old) if old == new => None,
        Some(old) => Some(RefOp::Update {
            name: name.into(),
            new: new.into(),
            old: old.clone(),
        }),
        None => Some(RefOp::Create {
            name: name.into(),
            new: new.into(),
        }),
    }
}
