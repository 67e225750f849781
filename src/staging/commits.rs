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
            "--format=%H%x1f%an <%ae>%x1f%s",
            "--end-of-options",
        ]);
        cmd.args(commits);
        let (_, out) = run_git(cmd, &[0])?;
        let text = String::from_utf8_lossy(&out);
        let all: Vec<CommitSummary> = text
            .split('\0')
            .filter(|e| !e.trim().is_empty())
            .filter_map(|e| {
                let mut f = e.trim_start_matches('\n').splitn(3, '\u{1f}');
                Some(CommitSummary {
                    oid: f.next()?.to_string(),
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
