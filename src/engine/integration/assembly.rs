//! The merge loop: apply inputs in order until a conflict or the frozen revision.

use super::prepare::Assembler;
use super::*;

impl Assembler {
    /// Applies inputs from `next_input` until a conflict or the end (then freezes). `retained`
    /// is what prepare's retention found (the value of every candidate-owned ref
    /// ([`owned_ref_names`]) and the input refs still to create), when the caller just read
    /// them; otherwise the refs are read here. Each outcome ends in one ref transaction whose
    /// old values are checked against that view, and which makes those creations.
    ///
    /// An input based on the target itself, whose revision descends from the target, is merged
    /// onto the accumulated *tree* with the target as the explicit base: the merge bases git
    /// would compute for it from the accumulated commit (the target and Airlock's own commits
    /// on top of it, each with one parent) are exactly the target, so the tree is the same,
    /// and a run of such inputs needs one git process each instead of a merge and a step
    /// commit. A commit is made when an input needs git's own merge bases, before a conflict
    /// (which is then merged again from the commit, so a resolver sees the same conflict), and
    /// never for the last input, whose tree the frozen commit carries. A git older than
    /// [`crate::staging::GIT_MERGES_TREES`] merges only commits: then every input is merged
    /// the step-by-step way.
    pub(super) fn assemble(
        &self,
        repo: &Repo,
        l: &mut Loaded,
        retained: Option<super::prepare::Retained>,
    ) -> Result<(), ServiceError> {
        let planned = self.plan_assembly(repo, l, retained)?;
        planned.publish(repo, l)
    }

    /// [`Assembler::assemble`] up to its ref transaction: every merge and commit made (objects
    /// only, which no ref names yet), the journal's step commits recorded in `l`, and the one
    /// ref transaction and end state left to [`Planned::publish`]. Nothing it writes is visible
    /// until then, so it may run before the candidate's own record is durable.
    pub(super) fn plan_assembly(
        &self,
        repo: &Repo,
        l: &mut Loaded,
        retained: Option<super::prepare::Retained>,
    ) -> Result<Planned, ServiceError> {
        let cid = l.c.candidate_id.clone();
        let time = self.candidates.stamp_time(&l.c);
        let (owned, creates) = match retained {
            Some(r) => (r.refs, r.creates),
            None => (repo.refs_named(&owned_ref_names(&l.c))?, Vec::new()),
        };
        let start_commit = l.a.acc_commit.clone();
        // The merged tree of all inputs, when this call merged the last one.
        let mut acc_tree: Option<String> = None;
        // Inputs merged onto a tree past `acc_commit` (which covers `next_input` inputs): the
        // tree and how many.
        let mut on_tree: Option<(String, usize)> = None;
        // The input revisions known to descend from the target, asked once when needed.
        let mut descends: Option<std::collections::HashSet<String>> = None;
        // Whether each distinct input base is in the target's history, asked once per base: the
        // accumulated commit always descends from expected_target_revision, so a base in the
        // target's history is in the accumulated history too.
        let mut base_in_target: std::collections::HashMap<String, bool> =
            std::collections::HashMap::new();
        let len = l.c.inputs.len();
        loop {
            let merged_on_tree = on_tree.as_ref().map_or(0, |t| t.1);
            let i = l.a.next_input + merged_on_tree;
            if i >= len {
                break;
            }
            let input = &l.c.inputs[i];
            let theirs = owned
                .get(&input_ref(&cid, i))
                .ok_or_else(|| ServiceError::internal(format!("owned input ref {i} vanished")))?;
            if input.base_revision == l.c.expected_target_revision
                && (on_tree.is_some() || i + 1 < len)
                && crate::staging::git_merges_trees()
            {
                let descends = match &mut descends {
                    Some(d) => d,
                    None => descends.insert(descending_from_target(repo, &l.c, &owned)?),
                };
                if descends.contains(theirs) {
                    let ours = on_tree
                        .as_ref()
                        .map_or(l.a.acc_commit.as_str(), |t| t.0.as_str());
                    let merged = repo.merge_tree(Some(&input.base_revision), ours, theirs)?;
                    if merged.conflicts.is_empty() {
                        on_tree = Some((merged.tree, merged_on_tree + 1));
                        continue;
                    }
                }
            }
            if let Some((tree, n)) = on_tree.take() {
                let message = match n {
                    1 => format!("airlock: apply input {} of {cid}", l.a.next_input),
                    _ => format!(
                        "airlock: apply inputs {}..={} of {cid}",
                        l.a.next_input,
                        l.a.next_input + n - 1
                    ),
                };
                let stamp = CommitStamp {
                    message: &message,
                    time,
                };
                l.a.acc_commit = repo.commit_tree(&tree, &[&l.a.acc_commit], &stamp)?;
                l.a.next_input += n;
                l.c.applied_inputs = l.a.next_input;
            }
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
                if i + 1 == len {
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
                let mut ops = creates;
                if l.a.acc_commit != start_commit {
                    ops.extend(set_op(&owned, &work_ref(&cid), &l.a.acc_commit));
                }
                ops.extend(set_op(&owned, &conflict_ref(&cid), &held));
                return Ok(Planned {
                    ops,
                    end: PlannedEnd::Conflict {
                        tree: merged.tree,
                        conflicts: merged.conflicts,
                    },
                });
            }
        }
        if let Some((tree, _)) = on_tree {
            acc_tree = Some(tree);
        }
        let mut ops = creates;
        if l.a.acc_commit != start_commit {
            ops.extend(set_op(&owned, &work_ref(&cid), &l.a.acc_commit));
        }
        let tree = match acc_tree {
            Some(tree) => tree,
            None => repo.commit_tree_of(&l.a.acc_commit)?,
        };
        let history = self.candidates.history_of(&l.c.workspace_id);
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
        Ok(Planned {
            ops,
            end: PlannedEnd::Frozen { revision: frozen },
        })
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

/// The input revisions of `c` that descend from its target (or are it), in one
/// `for-each-ref --contains` over the refs that hold them: the evidence refs, and the
/// candidate's input refs that already exist. An input whose refs were both gone is simply
/// not in the set (it is merged the step-by-step way).
fn descending_from_target(
    repo: &Repo,
    c: &Candidate,
    owned: &std::collections::HashMap<String, String>,
) -> Result<std::collections::HashSet<String>, ServiceError> {
    let mut names: Vec<String> = c
        .inputs
        .iter()
        .map(|i| evidence_ref_name(&i.evidence.evidence_ref))
        .collect();
    names.extend(
        (0..c.inputs.len())
            .map(|i| input_ref(&c.candidate_id, i))
            .filter(|n| owned.contains_key(n)),
    );
    Ok(repo
        .refs_named_containing(&names, &c.expected_target_revision)?
        .into_values()
        .collect())
}

/// An assembly made up to its ref transaction ([`Assembler::plan_assembly`]).
pub(super) struct Planned {
    /// The one ref transaction of the outcome, with the input refs' creations.
    ops: Vec<RefOp>,
    end: PlannedEnd,
}

/// How a planned assembly ends.
enum PlannedEnd {
    /// An input conflicts: the candidate waits for a resolution of this merge.
    Conflict {
        tree: String,
        conflicts: Vec<String>,
    },
    /// Every input merged: the frozen commit.
    Frozen { revision: String },
}

impl Planned {
    /// Makes the planned ref transaction (checked against the values the plan read) and moves
    /// the candidate to the end it planned. The caller saves it.
    pub(super) fn publish(self, repo: &Repo, l: &mut Loaded) -> Result<(), ServiceError> {
        repo.update_refs(&self.ops)?;
        match self.end {
            PlannedEnd::Conflict { tree, conflicts } => {
                l.a.conflict_tree = Some(tree);
                l.c.conflicts = Some(conflicts);
                l.c.state = l.c.state.on(CandidateEvent::Conflict)?;
            }
            PlannedEnd::Frozen { revision } => {
                l.a.next_input = l.c.inputs.len();
                l.c.applied_inputs = l.a.next_input;
                l.c.candidate_revision = Some(revision);
                l.c.state = l.c.state.on(CandidateEvent::Freeze)?;
                l.c.conflicts = None;
                l.a.conflict_tree = None;
            }
        }
        Ok(())
    }
}
