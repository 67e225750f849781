//! What a commit is: a revision resolved to its commit id, its tree, whether an id is exactly a
//! commit, and its author and subject. Answers keyed by a full commit id never change, so the
//! repository handle remembers the trees and summaries it read (bounded).

use super::plumbing::CommitSummary;
use super::{MAX_REV_BYTES, Repo, StagingError, is_oid, run_git};
use crate::limits;

impl Repo {
    /// Resolves a branch, tag, short or full id to the full commit id, once.
    pub fn resolve_commit(&self, rev: &str) -> Result<String, StagingError> {
        if rev.is_empty() || rev.len() > MAX_REV_BYTES {
            return Err(StagingError::InvalidRevision(format!(
                "must be 1..={MAX_REV_BYTES} bytes, got {}",
                rev.len()
            )));
        }
        if rev.contains('\0') || rev.starts_with('-') || rev.chars().any(char::is_control) {
            return Err(StagingError::InvalidRevision(format!(
                "{rev:?} must not start with '-' or contain control characters"
            )));
        }
        let mut cmd = self.git();
        cmd.args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
            .arg(format!("{rev}^{{commit}}"));
        let unknown = || StagingError::UnknownRevision {
            rev: rev.to_string(),
            repo: self.git_dir.clone(),
        };
        let (_, out) = run_git(cmd, &[0]).map_err(|_| unknown())?;
        let oid = String::from_utf8(out).map_err(|_| unknown())?;
        let oid = oid.trim_end();
        if !is_oid(oid) {
            return Err(unknown());
        }
        Ok(oid.to_string())
    }

    /// The tree id of a commit.
    pub fn tree_of(&self, commit: &str) -> Result<String, StagingError> {
        if let Some(tree) = self.trees.lock().expect("trees").get(commit) {
            return Ok(tree.clone());
        }
        let mut cmd = self.git();
        cmd.args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{commit}^{{tree}}"));
        let (_, out) = run_git(cmd, &[0])?;
        let tree = String::from_utf8_lossy(&out).trim().to_string();
        if !is_oid(&tree) {
            return Err(StagingError::Git {
                args: "rev-parse ^{tree}".into(),
                code: None,
                stderr: format!("not a tree id: {tree:?}"),
            });
        }
        if is_oid(commit) {
            let mut known = self.trees.lock().expect("trees");
            if known.len() >= limits::MAX_REMEMBERED_TREES {
                known.clear();
            }
            known.insert(commit.to_string(), tree.clone());
        }
        Ok(tree)
    }

    /// True when `oid` names an existing commit (exactly that id).
    pub fn is_commit(&self, oid: &str) -> bool {
        is_oid(oid) && self.resolve_commit(oid).is_ok_and(|c| c == oid)
    }

    /// Each commit's author (`Name <email>`) and subject line, in the order given (one git
    /// process for those not read before). Commits that are not in the repository are an
    /// error.
    pub fn commit_summaries(&self, commits: &[&str]) -> Result<Vec<CommitSummary>, StagingError> {
        let missing: Vec<&str> = {
            let known = self.summaries.lock().expect("summaries");
            commits
                .iter()
                .copied()
                .filter(|c| !known.contains_key(*c))
                .collect()
        };
        if !missing.is_empty() {
            let read = self.read_summaries(&missing)?;
            self.remember_summaries(read);
        }
        let known = self.summaries.lock().expect("summaries");
        commits
            .iter()
            .map(|c| {
                known.get(*c).cloned().ok_or_else(|| StagingError::Git {
                    args: "log --no-walk".into(),
                    code: Some(0),
                    stderr: format!("no summary for {c}"),
                })
            })
            .collect()
    }

    /// Whether `oid` is exactly a commit ([`Repo::is_commit`]), asked in the same git process
    /// that reads the summaries of `also` (commit ids a later step will want, such as a
    /// candidate's inputs): one process instead of two. When that read fails for any reason
    /// the answer is asked on its own, so one bad id in `also` never changes it.
    /// A commit whose summary was read before is known to be one (commits never change), so
    /// when every id is known no git process runs at all.
    pub fn is_commit_reading(&self, oid: &str, also: &[&str]) -> bool {
        if !is_oid(oid) {
            return false;
        }
        let mut all = vec![oid];
        all.extend(also.iter().copied().filter(|c| is_oid(c) && *c != oid));
        {
            let known = self.summaries.lock().expect("summaries");
            if all.iter().all(|c| known.contains_key(*c)) {
                return true;
            }
        }
        match self.read_summaries(&all) {
            Ok(read) => {
                self.remember_summaries(read);
                true
            }
            Err(_) => self.is_commit(oid),
        }
    }

    /// The summary of `oid` if this handle read it before; never runs git.
    pub(crate) fn remembered_summary(&self, oid: &str) -> Option<CommitSummary> {
        self.summaries.lock().expect("summaries").get(oid).cloned()
    }

    /// The tree of a merge that only moves `ours` forward to `theirs`, when the remembered
    /// summary of `theirs` shows it is one ([`Repo::merge_tree`]); `None` otherwise.
    pub(super) fn forward_merge(
        &self,
        base: Option<&str>,
        ours: &str,
        theirs: &str,
    ) -> Option<String> {
        let known = self.remembered_summary(theirs)?;
        let ours_is_base = match base {
            Some(base) => base == ours,
            None => known.parents.iter().any(|p| p == ours),
        };
        ours_is_base.then_some(known.tree)
    }

    fn remember_summaries(&self, read: Vec<CommitSummary>) {
        let mut known = self.summaries.lock().expect("summaries");
        if known.len() + read.len() > crate::limits::MAX_REMEMBERED_SUMMARIES {
            known.clear();
        }
        for s in read {
            known.insert(s.oid.clone(), s);
        }
    }

    /// `git log --no-walk` of exactly these commits, in the order given; an id that is not
    /// exactly a commit (missing, a tree, a tag naming a commit) is an error.
    fn read_summaries(&self, commits: &[&str]) -> Result<Vec<CommitSummary>, StagingError> {
        if commits.is_empty() {
            return Ok(vec![]);
        }
        let mut cmd = self.git();
        cmd.args([
            "log",
            "--no-walk=unsorted",
            "-z",
            "--format=%H%x1f%T%x1f%P%x1f%an <%ae>%x1f%s",
            "--end-of-options",
        ]);
        cmd.args(commits);
        let (_, out) = run_git(cmd, &[0])?;
        let text = String::from_utf8_lossy(&out);
        let all: Vec<CommitSummary> = text
            .split('\0')
            .filter(|e| !e.trim().is_empty())
            .filter_map(|e| {
                let mut f = e.trim_start_matches('\n').splitn(5, '\u{1f}');
                let oid = f.next()?.to_string();
                let tree = f.next().filter(|t| is_oid(t))?.to_string();
                let parents = f.next()?;
                let parents: Vec<String> = parents.split_whitespace().map(String::from).collect();
                if !parents.iter().all(|p| is_oid(p)) {
                    return None;
                }
                Some(CommitSummary {
                    oid,
                    tree,
                    parents,
                    author: f.next()?.to_string(),
                    subject: f.next()?.to_string(),
                })
            })
            .collect();
        // `--no-walk` shows each commit once: map the answer back onto the order asked.
        commits
            .iter()
            .map(|c| {
                all.iter()
                    .find(|s| s.oid == *c)
                    .cloned()
                    .ok_or_else(|| StagingError::Git {
                        args: "log --no-walk".into(),
                        code: Some(0),
                        stderr: format!("no summary for {c}"),
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::{Command, Stdio};

    fn git(dir: &Path, args: &[&str], input: Option<&str>) -> String {
        let mut child = Command::new("git")
            .arg("--git-dir")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@e"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input.unwrap_or("").as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Over a seeded random history of flat trees (merges among them), every merge whose
    /// `ours` is its base is answered from the remembered summary of `theirs`, and every
    /// answer, taken that way or from git, is exactly what `git merge-tree` gives.
    #[test]
    fn a_merge_that_only_moves_forward_is_theirs_tree_as_git_merges_it() {
        let dir = tempfile::tempdir().unwrap();
        let gd = dir.path().join("repo.git");
        let gd = gd.as_path();
        Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(gd)
            .status()
            .unwrap();
        let blobs: Vec<String> = (0..6)
            .map(|i| {
                git(
                    gd,
                    &["hash-object", "-w", "--stdin"],
                    Some(&format!("line one\nline {i}\nline three\n")),
                )
            })
            .collect();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        let mut commits: Vec<String> = Vec::new();
        for i in 0..24 {
            let entries: String = (0..4)
                .filter_map(|f| {
                    let pick = next(blobs.len() as u64 + 1);
                    (pick < blobs.len()).then(|| format!("100644 blob {}\tf{f}\n", blobs[pick]))
                })
                .collect();
            let tree = git(gd, &["mktree"], Some(&entries));
            let mut args = vec![
                "commit-tree".to_string(),
                tree,
                "-m".into(),
                format!("c{i}"),
            ];
            if !commits.is_empty() {
                let first = commits[next(commits.len() as u64)].clone();
                args.extend(["-p".into(), first.clone()]);
                let second = commits[next(commits.len() as u64)].clone();
                if next(3) == 0 && second != first {
                    args.extend(["-p".into(), second]);
                }
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            commits.push(git(gd, &args, None));
        }
        let repo = Repo::open(gd).unwrap();
        let all: Vec<&str> = commits.iter().map(String::as_str).collect();
        repo.commit_summaries(&all).unwrap();
        let (mut forward, mut by_git) = (0, 0);
        for _ in 0..120 {
            let theirs = &commits[1 + next(commits.len() as u64 - 1)];
            let parents = repo.remembered_summary(theirs).unwrap().parents;
            let ours = match next(2) {
                0 => parents[next(parents.len() as u64)].clone(),
                _ => commits[next(commits.len() as u64)].clone(),
            };
            let other = commits[next(commits.len() as u64)].clone();
            let base = match next(3) {
                0 => None,
                1 => Some(ours.as_str()),
                _ => Some(other.as_str()),
            };
            let expect_forward = match base {
                Some(b) => b == ours,
                None => parents.contains(&ours),
            };
            let shortcut = repo.forward_merge(base, &ours, theirs);
            assert_eq!(
                shortcut.is_some(),
                expect_forward,
                "{base:?} {ours} {theirs}"
            );
            if expect_forward {
                forward += 1;
            } else {
                by_git += 1;
            }
            let ours_merge = repo
                .merge_tree(base, &ours, theirs)
                .map_err(|e| e.to_string());
            let git_merge = repo
                .merge_tree_by_git(base, &ours, theirs)
                .map_err(|e| e.to_string());
            assert_eq!(ours_merge, git_merge, "{base:?} {ours} {theirs}");
        }
        assert!(
            forward > 20 && by_git > 20,
            "{forward} forward, {by_git} by git"
        );
        // A commit whose summary was never read is merged by git, even a forward one.
        let fresh = Repo::open(gd).unwrap();
        let child = &commits[1];
        let parent = &fresh_parent(gd, child);
        assert_eq!(fresh.forward_merge(None, parent, child), None);
    }

    fn fresh_parent(gd: &Path, commit: &str) -> String {
        git(gd, &["rev-parse", &format!("{commit}^")], None)
    }
}
