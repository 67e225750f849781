//! Git plumbing for candidates and evidence: ref transactions, three-way tree merges, commits,
//! resolution trees and bounded diffs. Every path list is read NUL-separated (`-z`); every write
//! runs with `core.fsync=all`; hooks never run.

use super::{Repo, StagingError, is_oid, run_git};
use crate::domain::git::{FileMode, ObjectKind};
use crate::process::Stdio;
use std::io::Read;

/// One ref change inside an atomic `update-ref --stdin` transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefOp {
    /// Create `name` at `new`; fails if it exists.
    Create { name: String, new: String },
    /// Move `name` from `old` to `new`.
    Update {
        name: String,
        new: String,
        old: String,
    },
    /// Delete `name`, which must be at `old`.
    Delete { name: String, old: String },
    /// Fail the transaction unless `name` is at `old`.
    Verify { name: String, old: String },
}

/// Result of a three-way tree merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOutcome {
    pub tree: String,
    /// Sorted, deduplicated repository-relative paths; empty when clean.
    pub conflicts: Vec<String>,
}

/// A tree entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub mode: FileMode,
    pub kind: ObjectKind,
    pub oid: String,
}

/// Fixed identity and time for commits Airlock makes, so re-running a step after a crash yields
/// the same commit id.
pub struct CommitStamp<'a> {
    pub message: &'a str,
    /// Unix seconds.
    pub time: i64,
}

/// A commit as a landing message names it, with its tree and parents (what a merge that
/// only moves forward needs: [`Repo::merge_tree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitSummary {
    pub oid: String,
    pub tree: String,
    pub parents: Vec<String>,
    pub author: String,
    pub subject: String,
}

impl Repo {
    /// Checks that `path` is the top of a non-bare working tree (what a governed workspace's
    /// `worktree` must be): not bare, not a subdirectory of another tree.
    pub fn check_work_tree(path: &std::path::Path) -> Result<(), String> {
        let mut cmd = super::git_command();
        cmd.arg("-C")
            .arg(path)
            .args(["rev-parse", "--is-bare-repository", "--show-toplevel"]);
        let (_, out) = run_git(cmd, &[0])
            .map_err(|_| format!("{} is not a git working tree", path.display()))?;
        let out = String::from_utf8_lossy(&out);
        let mut lines = out.lines();
        if lines.next() != Some("false") {
            return Err(format!(
                "{} is a bare repository, not a working tree",
                path.display()
            ));
        }
        let top = lines
            .next()
            .map(std::path::PathBuf::from)
            .unwrap_or_default();
        let canonical =
            std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if top != canonical {
            return Err(format!(
                "{} is inside the working tree {}, not its top",
                path.display(),
                top.display()
            ));
        }
        Ok(())
    }

    pub(super) fn run_with_input(
        &self,
        mut cmd: crate::process::Command,
        input: &[u8],
        ok: &[i32],
    ) -> Result<(i32, Vec<u8>), StagingError> {
        let args = format!("{:?}", cmd.get_args().collect::<Vec<_>>());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StagingError::Git {
                args: args.clone(),
                code: None,
                stderr: format!("cannot run git: {e}"),
            })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let writer = crate::process::feed(stdin, input.to_vec());
        let out = child.wait_with_output().map_err(|e| StagingError::Git {
            args: args.clone(),
            code: None,
            stderr: e.to_string(),
        })?;
        let _ = writer.join();
        let code = out.status.code().unwrap_or(-1);
        if !ok.contains(&code) {
            return Err(StagingError::Git {
                args,
                code: out.status.code(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok((code, out.stdout))
    }

    /// The object a ref points at, if the ref exists.
    pub fn ref_value(&self, name: &str) -> Result<Option<String>, StagingError> {
        let mut cmd = self.git();
        cmd.args([
            "for-each-ref",
            "--format=%(objectname)%00%(refname)",
            "--end-of-options",
            name,
        ]);
        let (_, out) = run_git(cmd, &[0])?;
        Ok(String::from_utf8_lossy(&out).lines().find_map(|l| {
            let (oid, r) = l.split_once('\0')?;
            (r == name).then(|| oid.to_string())
        }))
    }

    /// The values of exactly these refs (full names), those that exist, in one `for-each-ref`.
    pub fn refs_named(
        &self,
        names: &[String],
    ) -> Result<std::collections::HashMap<String, String>, StagingError> {
        self.refs_named_filtered(names, None)
    }

    /// [`Repo::refs_named`], read from the ref files in-process when git's `files` backend
    /// keeps them in the plain form it writes ([`super::refcache::RefCache::read_files`]),
    /// else by git.
    pub fn refs_named_from_files(
        &self,
        names: &[String],
    ) -> Result<std::collections::HashMap<String, String>, StagingError> {
        match self.ref_cache().read_files(names) {
            Some(values) => Ok(values),
            None => self.refs_named(names),
        }
    }

    /// [`Repo::refs_named`], only those whose value is `commit` or descends from it
    /// (`for-each-ref --contains`).
    pub fn refs_named_containing(
        &self,
        names: &[String],
        commit: &str,
    ) -> Result<std::collections::HashMap<String, String>, StagingError> {
        if !is_oid(commit) {
            return Err(StagingError::InvalidRevision(format!(
                "{commit:?} is not a full object id"
            )));
        }
        self.refs_named_filtered(names, Some(commit))
    }

    fn refs_named_filtered(
        &self,
        names: &[String],
        containing: Option<&str>,
    ) -> Result<std::collections::HashMap<String, String>, StagingError> {
        if names.is_empty() {
            return Ok(Default::default());
        }
        for n in names {
            // A for-each-ref pattern with glob characters would match other refs.
            if !n.starts_with("refs/") || n.contains(['*', '?', '[', '\\', '\n', '\0']) {
                return Err(StagingError::InvalidRevision(format!(
                    "{n:?} is not a plain full ref name"
                )));
            }
        }
        let mut cmd = self.git();
        cmd.args(["for-each-ref", "--format=%(refname)%00%(objectname)"]);
        if let Some(commit) = containing {
            cmd.arg(format!("--contains={commit}"));
        }
        cmd.arg("--end-of-options").args(names);
        let (_, out) = run_git(cmd, &[0])?;
        let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.split_once('\0'))
            .filter(|(r, _)| wanted.contains(r))
            .map(|(r, o)| (r.to_string(), o.to_string()))
            .collect())
    }

    /// [`Repo::refs_named`], answered from memory while none of the files git would read to
    /// answer it has changed (see [`super::refcache`]). For reads; consequential checks ask git.
    pub fn refs_named_remembered(
        &self,
        names: &[String],
    ) -> Result<std::collections::HashMap<String, String>, StagingError> {
        self.ref_cache().get(names, || self.refs_named(names))
    }

    /// Every ref under `prefix` (e.g. `refs/airlock/candidates/c1/`) with its value.
    pub fn refs_under(&self, prefix: &str) -> Result<Vec<(String, String)>, StagingError> {
        let mut cmd = self.git();
        cmd.args([
            "for-each-ref",
            "--format=%(refname)%00%(objectname)",
            "--end-of-options",
            prefix,
        ]);
        let (_, out) = run_git(cmd, &[0])?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.split_once('\0'))
            .filter(|(r, _)| r.starts_with(prefix))
            .map(|(r, o)| (r.to_string(), o.to_string()))
            .collect())
    }

    /// Applies every op atomically: all happen or none (old values are checked).
    pub fn update_refs(&self, ops: &[RefOp]) -> Result<(), StagingError> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut script = String::from("start\n");
        for op in ops {
            let line = match op {
                RefOp::Create { name, new } => format!("create {name} {new}\n"),
                RefOp::Update { name, new, old } => format!("update {name} {new} {old}\n"),
                RefOp::Delete { name, old } => format!("delete {name} {old}\n"),
                RefOp::Verify { name, old } => format!("verify {name} {old}\n"),
            };
            if line.trim_end().contains(['\n', '\0']) {
                return Err(StagingError::InvalidRevision(format!(
                    "ref op {op:?} has a newline"
                )));
            }
            script.push_str(&line);
        }
        script.push_str("prepare\ncommit\n");
        let mut cmd = self.git();
        cmd.args(["update-ref", "--stdin"]);
        self.run_with_input(cmd, script.as_bytes(), &[0])?;
        Ok(())
    }

    /// Packs every loose ref under `refs/airlock/` into `packed-refs` (and removes the loose
    /// files), leaving the repository's other refs as they are. Returns whether there was
    /// anything to pack: `git pack-refs` rewrites `packed-refs` even when there is not, which
    /// would needlessly invalidate every remembered ref answer (see [`super::refcache`]).
    pub fn pack_airlock_refs(&self) -> Result<bool, StagingError> {
        if !self.ref_cache().has_loose_refs_under("refs/airlock")? {
            return Ok(false);
        }
        let mut cmd = self.git();
        cmd.args(["pack-refs", "--include", "refs/airlock/*"]);
        run_git(cmd, &[0])?;
        Ok(true)
    }

    /// True when `ancestor` is an ancestor of (or equal to) `descendant`.
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, StagingError> {
        let mut cmd = self.git();
        cmd.args(["merge-base", "--is-ancestor", ancestor, descendant]);
        let (code, _) = run_git(cmd, &[0, 1])?;
        Ok(code == 0)
    }

    /// `git merge-tree --write-tree` of `theirs` into `ours`, from `base` when given, otherwise
    /// from the merge bases git computes (as `git merge` does).
    ///
    /// A merge in which `ours` is the base is answered without git when `theirs` is a commit
    /// whose summary this handle remembers ([`Repo::commit_summaries`]): git takes every path
    /// from the side that changed, so the result is `theirs`'s own tree, clean. That is the
    /// case when `base` is `ours`, or when no base is given and `ours` is a parent of `theirs`
    /// (then `ours` is the one merge base git computes). Any other merge runs git.
    pub fn merge_tree(
        &self,
        base: Option<&str>,
        ours: &str,
        theirs: &str,
    ) -> Result<MergeOutcome, StagingError> {
        if let Some(tree) = self.forward_merge(base, ours, theirs) {
            return Ok(MergeOutcome {
                tree,
                conflicts: Vec::new(),
            });
        }
        self.merge_tree_by_git(base, ours, theirs)
    }

    /// [`Repo::merge_tree`] by `git merge-tree`, always.
    pub fn merge_tree_by_git(
        &self,
        base: Option<&str>,
        ours: &str,
        theirs: &str,
    ) -> Result<MergeOutcome, StagingError> {
        let mut cmd = self.git();
        cmd.args(["merge-tree", "--write-tree", "-z", "--no-messages"]);
        if let Some(base) = base {
            cmd.arg(format!("--merge-base={base}"));
        }
        cmd.args([ours, theirs]);
        let (code, out) = run_git(cmd, &[0, 1])?;
        let mut fields = out.split(|b| *b == 0);
        let tree = String::from_utf8_lossy(fields.next().unwrap_or_default()).to_string();
        if !is_oid(&tree) {
            return Err(StagingError::Git {
                args: "merge-tree".into(),
                code: Some(code),
                stderr: format!("unexpected output: {:?}", String::from_utf8_lossy(&out)),
            });
        }
        let mut conflicts = Vec::new();
        if code == 1 {
            for f in fields {
                if f.is_empty() {
                    break;
                }
                let entry = String::from_utf8_lossy(f);
                if let Some((_, path)) = entry.split_once('\t') {
                    conflicts.push(path.to_string());
                }
            }
            conflicts.sort();
            conflicts.dedup();
            if conflicts.is_empty() {
                // Never treat a conflicted merge with no listed files as clean.
                return Err(StagingError::Git {
                    args: "merge-tree".into(),
                    code: Some(1),
                    stderr: "conflicted merge listed no conflicted files".into(),
                });
            }
        }
        Ok(MergeOutcome { tree, conflicts })
    }

    /// Creates a commit with a fixed identity and time.
    pub fn commit_tree(
        &self,
        tree: &str,
        parents: &[&str],
        stamp: &CommitStamp,
    ) -> Result<String, StagingError> {
        let date = format!("@{} +0000", stamp.time);
        let mut cmd = self.git();
        cmd.env("GIT_AUTHOR_NAME", "Airlock")
            .env("GIT_AUTHOR_EMAIL", "airlock@localhost")
            .env("GIT_COMMITTER_NAME", "Airlock")
            .env("GIT_COMMITTER_EMAIL", "airlock@localhost")
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .args(["commit-tree", tree]);
        for p in parents {
            cmd.args(["-p", p]);
        }
        cmd.args(["-m", stamp.message]);
        let (_, out) = run_git(cmd, &[0])?;
        let oid = String::from_utf8_lossy(&out).trim().to_string();
        if !is_oid(&oid) {
            return Err(StagingError::Git {
                args: "commit-tree".into(),
                code: Some(0),
                stderr: format!("unexpected output {oid:?}"),
            });
        }
        Ok(oid)
    }

    /// The tree of a commit.
    pub fn commit_tree_of(&self, commit: &str) -> Result<String, StagingError> {
        self.resolve_object(&format!("{commit}^{{tree}}"))
    }

    fn resolve_object(&self, expr: &str) -> Result<String, StagingError> {
        let mut cmd = self.git();
        cmd.args(["rev-parse", "--verify", "--quiet", "--end-of-options", expr]);
        let (_, out) = run_git(cmd, &[0])?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// The entry at `path` in `tree`, if any.
    pub fn tree_entry(&self, tree: &str, path: &str) -> Result<Option<TreeEntry>, StagingError> {
        let mut cmd = self.git();
        cmd.args(["ls-tree", "-z", "--full-tree", tree, "--", path]);
        let (_, out) = run_git(cmd, &[0])?;
        Ok(parse_ls_tree(&out)?
            .into_iter()
            .find(|(p, _)| p == path)
            .map(|(_, e)| e))
    }

    /// Every blob and link of `tree`, recursively, by path (git's order).
    pub fn tree_files(&self, tree: &str) -> Result<Vec<(String, TreeEntry)>, StagingError> {
        let mut cmd = self.git();
        cmd.args(["ls-tree", "-r", "-z", "--full-tree", tree]);
        let (_, out) = run_git(cmd, &[0])?;
        parse_ls_tree(&out)
    }

    /// The size of an object in bytes, without reading it.
    pub fn object_size(&self, oid: &str) -> Result<u64, StagingError> {
        let mut cmd = self.git();
        cmd.args(["cat-file", "-s", oid]);
        let (_, out) = run_git(cmd, &[0])?;
        let text = String::from_utf8_lossy(&out);
        text.trim().parse().map_err(|_| StagingError::Git {
            args: "cat-file -s".into(),
            code: None,
            stderr: format!("not a size: {text:?}"),
        })
    }

    /// The content of a blob.
    pub fn read_blob(&self, oid: &str) -> Result<Vec<u8>, StagingError> {
        let mut cmd = self.git();
        cmd.args(["cat-file", "blob", oid]);
        Ok(run_git(cmd, &[0])?.1)
    }

    /// The contents of `oids`, in order, through one `git cat-file --batch` (one process for
    /// a whole tree rather than one per blob), each handed to `each` as it is read; `each`
    /// returning an error stops the read (the child is killed) and returns it.
    pub fn for_each_blob(
        &self,
        oids: &[String],
        mut each: impl FnMut(usize, Vec<u8>) -> Result<(), StagingError>,
    ) -> Result<(), StagingError> {
        use std::io::BufRead;
        let fail = |stderr: String| StagingError::Git {
            args: "cat-file --batch".into(),
            code: None,
            stderr,
        };
        if let Some(bad) = oids.iter().find(|o| !is_oid(o)) {
            return Err(fail(format!("not an object id: {bad:?}")));
        }
        let mut cmd = self.git();
        cmd.args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot run git: {e}")))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let input: Vec<u8> = oids
            .iter()
            .flat_map(|o| [o.as_bytes(), b"\n"].concat())
            .collect();
        let writer = crate::process::feed(stdin, input);
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut read = || -> Result<(), StagingError> {
            let mut header = String::new();
            for (i, oid) in oids.iter().enumerate() {
                header.clear();
                out.read_line(&mut header)
                    .map_err(|e| fail(format!("reading {oid}: {e}")))?;
                // "<oid> blob <size>" (anything else: missing, or not a blob).
                let mut parts = header.split_whitespace();
                let size = match (parts.next(), parts.next(), parts.next()) {
                    (Some(got), Some("blob"), Some(size)) if got == oid => {
                        size.parse::<usize>().ok()
                    }
                    _ => None,
                }
                .ok_or_else(|| fail(format!("{oid}: {:?}", header.trim_end())))?;
                let mut content = vec![0u8; size];
                out.read_exact(&mut content)
                    .map_err(|e| fail(format!("reading {oid}: {e}")))?;
                let mut newline = [0u8; 1];
                out.read_exact(&mut newline)
                    .map_err(|e| fail(format!("reading {oid}: {e}")))?;
                each(i, content)?;
            }
            Ok(())
        };
        let result = read();
        if result.is_err() {
            let _ = child.kill();
        }
        drop(out);
        let status = child.wait();
        let _ = writer.join();
        result?;
        match status {
            Ok(st) if st.success() => Ok(()),
            Ok(st) => Err(fail(format!("exited with {st}"))),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// A new tree: `tree` with each `(path, Some(blob, mode))` written and each `(path, None)`
    /// removed. Uses a private temporary index; no working tree is touched.
    pub fn edit_tree(
        &self,
        tree: &str,
        edits: &[(String, Option<(String, FileMode)>)],
    ) -> Result<String, StagingError> {
        let tmp = super::scratch_dir("temp index dir")?;
        let index = tmp.path().join("index");
        let mut cmd = self.git();
        cmd.env("GIT_INDEX_FILE", &index).args(["read-tree", tree]);
        run_git(cmd, &[0])?;
        let mut script = Vec::new();
        for (path, edit) in edits {
            match edit {
                // index-info: "<mode> <oid>\t<path>", mode 0 removes the path.
                Some((oid, mode)) => {
                    script.extend_from_slice(format!("{} {oid}\t{path}", mode.as_str()).as_bytes())
                }
                None => script.extend_from_slice(
                    format!("0 {}\t{path}", "0".repeat(oid_len(tree))).as_bytes(),
                ),
            }
            script.push(0);
        }
        let mut cmd = self.git();
        cmd.env("GIT_INDEX_FILE", &index)
            .args(["update-index", "-z", "--index-info"]);
        self.run_with_input(cmd, &script, &[0])?;
        let mut cmd = self.git();
        cmd.env("GIT_INDEX_FILE", &index).args(["write-tree"]);
        let (_, out) = run_git(cmd, &[0])?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// The exact binary-safe diff from `from` to `to`, at most `cap` bytes of it.
    /// Returns its exact bytes and whether it was cut.
    /// Each path the diff from `from` to `to` touches with its added and removed line counts
    /// (`None` for a binary file), in git's order (`git diff --numstat`, renames as a removal
    /// and an addition, as the combined diff shows them).
    pub fn numstat(&self, from: &str, to: &str) -> Result<Vec<FileStat>, StagingError> {
        let mut cmd = self.git();
        cmd.args([
            "diff",
            "--numstat",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            from,
            to,
            "--",
        ]);
        let (_, out) = run_git(cmd, &[0])?;
        Ok(out
            .split(|b| *b == 0)
            .filter(|r| !r.is_empty())
            .filter_map(|r| {
                let text = String::from_utf8_lossy(r);
                let mut parts = text.splitn(3, '\t');
                let (added, removed, path) = (parts.next()?, parts.next()?, parts.next()?);
                Some(FileStat {
                    path: path.to_string(),
                    lines: added.parse().ok().zip(removed.parse().ok()),
                })
            })
            .collect())
    }

    pub fn diff_bounded(
        &self,
        from: &str,
        to: &str,
        cap: usize,
    ) -> Result<(Vec<u8>, bool), StagingError> {
        self.diff_bytes(from, to, 0, cap)
    }

    /// One page of the diff from `from` to `to`: `limit` bytes after skipping `offset`, cut back
    /// to the page's last line end (or, for one line longer than a page, to a character
    /// boundary) when more follows. Returns the page and the offset of the next one, if any;
    /// an offset past the end is an empty last page.
    pub fn diff_page(
        &self,
        from: &str,
        to: &str,
        offset: u64,
        limit: usize,
    ) -> Result<(String, Option<u64>), StagingError> {
        let (mut buf, more) = self.diff_bytes(from, to, offset, limit)?;
        if !more {
            return Ok((String::from_utf8_lossy(&buf).into_owned(), None));
        }
        match buf.iter().rposition(|b| *b == b'\n') {
            Some(at) => buf.truncate(at + 1),
            None => {
                if let Err(e) = std::str::from_utf8(&buf)
                    && e.error_len().is_none()
                    && e.valid_up_to() > 0
                {
                    buf.truncate(e.valid_up_to());
                }
            }
        }
        let next = offset + buf.len() as u64;
        Ok((String::from_utf8_lossy(&buf).into_owned(), Some(next)))
    }

    /// At most `cap` bytes of the diff after its first `skip`, and whether more followed.
    fn diff_bytes(
        &self,
        from: &str,
        to: &str,
        skip: u64,
        cap: usize,
    ) -> Result<(Vec<u8>, bool), StagingError> {
        let failed = |e: std::io::Error| StagingError::Git {
            args: "diff".into(),
            code: None,
            stderr: e.to_string(),
        };
        let mut cmd = self.git();
        cmd.args([
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            "--binary",
            "--no-renames",
            from,
            to,
            "--",
        ]);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(failed)?;
        let mut stdout = child.stdout.take().expect("stdout is piped");
        std::io::copy(&mut (&mut stdout).take(skip), &mut std::io::sink()).map_err(failed)?;
        let mut buf = Vec::with_capacity(cap.min(1 << 20) + 1);
        (&mut stdout)
            .take(cap as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(failed)?;
        let truncated = buf.len() > cap;
        if truncated {
            let _ = child.kill();
        }
        drop(stdout);
        let status = child.wait().map_err(failed)?;
        if !truncated && !status.success() {
            return Err(StagingError::Git {
                args: "diff".into(),
                code: status.code(),
                stderr: "git diff failed".into(),
            });
        }
        buf.truncate(cap);
        Ok((buf, truncated))
    }

    /// Removes `*.lock` files under `refs/airlock/` left by a killed git process. Only safe while
    /// no Airlock git process runs on this repository (daemon start-up, before the listener).
    pub fn remove_stale_airlock_locks(&self) -> Result<Vec<std::path::PathBuf>, StagingError> {
        let mut removed = Vec::new();
        let root = self.git_dir().join("refs").join("airlock");
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&p, out),
                    Ok(t)
                        if t.is_file()
                            && p.extension().is_some_and(|x| x == "lock")
                            && std::fs::remove_file(&p).is_ok() =>
                    {
                        out.push(p);
                    }
                    _ => {}
                }
            }
        }
        walk(&root, &mut removed);
        Ok(removed)
    }
}

fn oid_len(any_oid: &str) -> usize {
    any_oid.len()
}

/// `ls-tree -z` records as (path, entry); a path that is not UTF-8 is refused (Airlock's path
/// rules admit only UTF-8 paths).
fn parse_ls_tree(out: &[u8]) -> Result<Vec<(String, TreeEntry)>, StagingError> {
    let mut entries = Vec::new();
    for rec in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let unknown = |what: String| StagingError::Git {
            args: "ls-tree".into(),
            code: None,
            stderr: what,
        };
        let rec = std::str::from_utf8(rec)
            .map_err(|_| unknown(format!("a path that is not UTF-8: {rec:?}")))?;
        let Some((meta, path)) = rec.split_once('\t') else {
            return Err(unknown(format!("unknown entry {rec:?}")));
        };
        let mut parts = meta.split(' ');
        let (Some(mode), Some(kind), Some(oid)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(unknown(format!("unknown entry {meta:?}")));
        };
        entries.push((
            path.to_string(),
            TreeEntry {
                mode: FileMode::parse(mode)
                    .ok_or_else(|| unknown(format!("unknown entry {meta:?}")))?,
                kind: ObjectKind::parse(kind)
                    .ok_or_else(|| unknown(format!("unknown entry {meta:?}")))?,
                oid: oid.into(),
            },
        ));
    }
    Ok(entries)
}

/// One path of a diff's `--numstat`: its added and removed lines (`None`: binary).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileStat {
    pub path: String,
    pub lines: Option<(u64, u64)>,
}

#[cfg(test)]
mod work_tree_tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_governed_worktree_must_be_the_top_of_a_non_bare_tree() {
        let d = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            assert!(
                Command::new("git")
                    .args(args)
                    .output()
                    .unwrap()
                    .status
                    .success(),
                "{args:?}"
            );
        };
        let tree = d.path().join("tree");
        run(&["init", "-q", tree.to_str().unwrap()]);
        std::fs::create_dir(tree.join("sub")).unwrap();
        Repo::check_work_tree(&tree).unwrap();
        let e = Repo::check_work_tree(&tree.join("sub")).unwrap_err();
        assert!(e.contains("not its top"), "{e}");
        let bare = d.path().join("bare.git");
        run(&["init", "-q", "--bare", bare.to_str().unwrap()]);
        assert!(Repo::check_work_tree(&bare).unwrap_err().contains("bare"));
        let plain = d.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert!(
            Repo::check_work_tree(&plain)
                .unwrap_err()
                .contains("not a git working tree")
        );
    }
}
