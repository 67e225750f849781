//! The source check: which tracked paths of a checkout differ from the staged revision after
//! the job ran. A full checkout is walked path by path against its nanosecond snapshot; an
//! overlay checkout is judged from its upper directory alone (`overlay::changed_in_upper`),
//! which test builds cross-check against the full walk.

use super::*;

impl Repo {
    /// Blob ids of regular files, as git would store them (no filters), read from `tree`.
    fn hash_files(&self, tree: &Path, paths: &[&[u8]]) -> Result<Vec<String>, StagingError> {
        let mut oids = Vec::with_capacity(paths.len());
        let (batch, single): (Vec<&[u8]>, Vec<&[u8]>) =
            paths.iter().partition(|p| !p.contains(&b'\n'));
        if !batch.is_empty() {
            let mut input = Vec::new();
            for p in &batch {
                input.extend_from_slice(p);
                input.push(b'\n');
            }
            let mut cmd = self.git();
            cmd.current_dir(tree)
                .args(["hash-object", "--no-filters", "--stdin-paths"]);
            let (_, out) = self.run_with_input(cmd, &input, &[0])?;
            oids.extend(String::from_utf8_lossy(&out).lines().map(str::to_string));
        }
        for p in &single {
            let bytes =
                std::fs::read(tree.join(OsStr::from_bytes(p))).map_err(io_err("read", tree))?;
            oids.push(self.hash_bytes(&bytes)?);
        }
        if oids.len() != paths.len() {
            return Err(StagingError::Git {
                args: "hash-object".into(),
                code: None,
                stderr: format!("{} hashes for {} paths", oids.len(), paths.len()),
            });
        }
        // Same order as `paths`: batch entries first, then the rest.
        let mut by_path: std::collections::HashMap<&[u8], String> =
            std::collections::HashMap::new();
        for (p, o) in batch.iter().chain(single.iter()).zip(oids) {
            by_path.insert(p, o);
        }
        Ok(paths.iter().map(|p| by_path[p].clone()).collect())
    }

    /// The blob id of `bytes` (not written).
    fn hash_bytes(&self, bytes: &[u8]) -> Result<String, StagingError> {
        let mut cmd = self.git();
        cmd.args(["hash-object", "--no-filters", "--stdin"]);
        let (_, out) = self.run_with_input(cmd, bytes, &[0])?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Tracked paths whose content, mode, type or presence differ from the staged revision,
    /// sorted, at most `limit` (plus the total count). Untracked files are ignored, and so are
    /// submodules (gitlinks).
    ///
    /// Every tracked path is `lstat`ed and compared with the nanosecond snapshot taken at
    /// staging. A path whose inode, size, mode, mtime and ctime are all unchanged was not touched
    /// (ctime cannot be set by the job). Any other path is changed, except a regular file or
    /// symlink of the same type and executable bit, whose bytes are re-hashed and compared with
    /// the staged blob id (a job may rewrite a file with identical bytes). The cost is one
    /// `lstat` per tracked path plus a hash of each file whose stat moved.
    pub fn changed_paths(
        &self,
        checkout: &Checkout,
        limit: usize,
    ) -> Result<(Vec<String>, usize), StagingError> {
        let Some(upper) = &checkout.upper else {
            return self.changed_in_tree(checkout, limit);
        };
        let found = overlay::changed_in_upper(self, upper, &checkout.snapshot, limit)?;
        // Test builds prove the two checks agree on every job the suite runs: the full walk
        // of the merged tree (against the stats recorded when the base tree was cached) must
        // name the same paths.
        #[cfg(feature = "test-hooks")]
        {
            let full = self.changed_in_tree(checkout, limit)?;
            if full != found {
                return Err(StagingError::Space(format!(
                    "the overlay source check found {found:?} but the full-tree check found {full:?}"
                )));
            }
        }
        Ok(found)
    }

    /// The full-tree check: every tracked path of the checkout's tree against its snapshot.
    pub fn changed_in_tree(
        &self,
        checkout: &Checkout,
        limit: usize,
    ) -> Result<(Vec<String>, usize), StagingError> {
        let mut changed: std::collections::BTreeSet<Vec<u8>> = std::collections::BTreeSet::new();
        let mut suspect_files: Vec<(&[u8], &str)> = Vec::new();
        for (path, staged) in checkout.snapshot.iter() {
            if staged.mode == FileMode::Gitlink {
                continue;
            }
            let now = stat_key(&checkout.tree.join(OsStr::from_bytes(path)));
            if now.is_some() && now == staged.stat {
                continue;
            }
            let Some(now) = now else {
                changed.insert(path.clone());
                continue;
            };
            match self.judge(&checkout.tree, path, staged, now.mode)? {
                Verdict::Same => {}
                Verdict::Rehash => suspect_files.push((path, staged.oid.as_str())),
                Verdict::Changed => {
                    changed.insert(path.clone());
                }
            }
        }
        self.rehash_suspects(&checkout.tree, &suspect_files, &mut changed)?;
        Ok(listing(changed, limit))
    }

    /// Whether a tracked path whose stat moved still holds its staged content. `mode` is the
    /// path's `lstat` mode now, beneath `dir`.
    pub(crate) fn judge(
        &self,
        dir: &Path,
        path: &[u8],
        staged: &Staged,
        mode: u32,
    ) -> Result<Verdict, StagingError> {
        let kind = mode & S_IFMT;
        let exec = mode & 0o100 != 0;
        match staged.mode {
            FileMode::Regular | FileMode::Executable
                if kind == S_IFREG && exec == (staged.mode == FileMode::Executable) =>
            {
                Ok(Verdict::Rehash)
            }
            FileMode::Symlink if kind == S_IFLNK => {
                let target = std::fs::read_link(dir.join(OsStr::from_bytes(path)))
                    .map_err(io_err("readlink", dir))?;
                Ok(
                    if self.hash_bytes(target.as_os_str().as_bytes())? == staged.oid {
                        Verdict::Same
                    } else {
                        Verdict::Changed
                    },
                )
            }
            // Anything else changed type, lost or gained its executable bit, or was a
            // directory where git keeps none (gitlinks are skipped by the callers).
            FileMode::Regular
            | FileMode::Executable
            | FileMode::Symlink
            | FileMode::Gitlink
            | FileMode::Tree => Ok(Verdict::Changed),
        }
    }

    /// Re-hashes the suspect files beneath `dir` and adds those whose bytes differ.
    pub(crate) fn rehash_suspects(
        &self,
        dir: &Path,
        suspects: &[(&[u8], &str)],
        changed: &mut std::collections::BTreeSet<Vec<u8>>,
    ) -> Result<(), StagingError> {
        if suspects.is_empty() {
            return Ok(());
        }
        let paths: Vec<&[u8]> = suspects.iter().map(|(p, _)| *p).collect();
        let oids = self.hash_files(dir, &paths)?;
        for ((path, staged_oid), oid) in suspects.iter().zip(oids) {
            if oid != *staged_oid {
                changed.insert(path.to_vec());
            }
        }
        Ok(())
    }
}

/// What a tracked path whose stat moved holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its staged content (a symlink with the same target).
    Same,
    /// Something else: another type, the other executable bit, another symlink target.
    Changed,
    /// A regular file of the same executable bit: its bytes must be re-hashed to tell.
    Rehash,
}

/// The paths and count of a set of changed paths, at most `limit` listed.
pub(crate) fn listing(
    changed: std::collections::BTreeSet<Vec<u8>>,
    limit: usize,
) -> (Vec<String>, usize) {
    let mut paths: Vec<String> = changed
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    paths.sort();
    paths.dedup();
    let total = paths.len();
    paths.truncate(limit);
    (paths, total)
}
