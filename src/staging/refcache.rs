//! Remembered answers to "what are these refs' values", for hot read paths.
//!
//! A remembered answer is always computed by `git for-each-ref`. What
//! is remembered is that answer together with a *stamp* of every file git consulted to give it
//! (with the `files` ref backend): the loose ref file of each name (or its absence) and
//! `packed-refs`, each as (inode, size, mtime, ctime). While the stamp is unchanged, git would
//! read the same bytes and give the same answer, so it is not asked again.
//!
//! The rules that keep this exact:
//! - stamps use `lstat`; git replaces ref files by rename, which changes the inode, and any
//!   in-place edit changes ctime, which no user can set;
//! - an answer is kept only when every stamped time is older than
//!   [`crate::limits::REF_CACHE_RACY_MARGIN`] before the stamp was taken (git's "racy" rule: a
//!   change made within the same timestamp tick as the stamp would otherwise be invisible);
//! - a loose ref that is a symbolic ref (its target could move without touching the stamped
//!   file) or a repository with another ref backend is never remembered;
//! - the cache is bounded ([`crate::limits::REF_CACHE_ENTRIES`]); when full it starts over.
//!
//! What is not stamped: object removal. A ref whose object was deleted by hand from the object
//! store keeps its remembered value until the ref files change. Consequential checks (before a
//! delivery, after a verification) always ask git directly.
//!
//! Separately, [`RefCache::read_files`] reads refs from their files in-process, as git's
//! `files` backend does (the loose file, else `packed-refs`), for paths that would otherwise
//! start a git process per call (`integration.prepare`'s evidence refs); it leaves to git
//! anything not in the plain form git writes.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// One file's identity and times, or how looking at it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileStamp {
    Present {
        ino: u64,
        size: u64,
        mtime_ns: i128,
        ctime_ns: i128,
    },
    Absent(std::io::ErrorKind),
}

impl FileStamp {
    fn of(path: &Path) -> FileStamp {
        match std::fs::symlink_metadata(path) {
            Ok(m) => FileStamp::Present {
                ino: m.ino(),
                size: m.size(),
                mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
                ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
            },
            Err(e) => FileStamp::Absent(e.kind()),
        }
    }

    /// True when the file changed at or after `limit_ns` (too recent to be trusted).
    fn is_racy(&self, limit_ns: i128) -> bool {
        match self {
            FileStamp::Present {
                mtime_ns, ctime_ns, ..
            } => *mtime_ns >= limit_ns || *ctime_ns >= limit_ns,
            FileStamp::Absent(_) => false,
        }
    }
}

struct Entry {
    stamp: Vec<FileStamp>,
    values: HashMap<String, String>,
}

/// Remembered ref answers of one repository.
#[derive(Default)]
pub struct RefCache {
    /// `None` when the repository's refs are not plain files (the cache is off).
    common_dir: Option<PathBuf>,
    /// [`crate::limits::REF_CACHE_RACY_MARGIN`], except in tests.
    margin: Duration,
    entries: Mutex<HashMap<Vec<String>, Entry>>,
}

impl std::fmt::Debug for RefCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefCache")
            .field("common_dir", &self.common_dir)
            .finish_non_exhaustive()
    }
}

impl RefCache {
    /// A cache for a repository whose refs live as files under `common_dir`, or a disabled one.
    pub fn new(common_dir: Option<PathBuf>) -> RefCache {
        RefCache::with_margin(common_dir, crate::limits::REF_CACHE_RACY_MARGIN)
    }

    fn with_margin(common_dir: Option<PathBuf>, margin: Duration) -> RefCache {
        RefCache {
            common_dir,
            margin,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn stamp(&self, common: &Path, names: &[String]) -> Vec<FileStamp> {
        let mut stamp = Vec::with_capacity(names.len() + 1);
        stamp.push(FileStamp::of(&common.join("packed-refs")));
        stamp.extend(names.iter().map(|n| FileStamp::of(&common.join(n))));
        stamp
    }

    /// The values of `names` (those that exist), from memory when nothing git would read has
    /// changed, otherwise from `ask` (which must be git's answer for exactly these names).
    pub fn get<E>(
        &self,
        names: &[String],
        ask: impl FnOnce() -> Result<HashMap<String, String>, E>,
    ) -> Result<HashMap<String, String>, E> {
        let Some(common) = self.common_dir.as_deref() else {
            return ask();
        };
        let now = SystemTime::now();
        let before = self.stamp(common, names);
        if let Some(e) = self.lock().get(names)
            && e.stamp == before
        {
            return Ok(e.values.clone());
        }
        let values = ask()?;
        // Keep the answer only if the files did not change while git read them, none changed
        // too recently to be told apart, and no loose ref is symbolic.
        let limit_ns = now
            .checked_sub(self.margin)
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        let stable = self.stamp(common, names) == before
            && !before.iter().any(|s| s.is_racy(limit_ns))
            && names.iter().zip(&before[1..]).all(|(n, s)| match s {
                FileStamp::Present { .. } => is_plain_loose_ref(&common.join(n)),
                FileStamp::Absent(_) => true,
            });
        if stable {
            let mut entries = self.lock();
            if entries.len() >= crate::limits::REF_CACHE_ENTRIES {
                entries.clear();
            }
            entries.insert(
                names.to_vec(),
                Entry {
                    stamp: before,
                    values: values.clone(),
                },
            );
        }
        Ok(values)
    }

    /// The values of `names` (those that exist) read from the ref files themselves, the way
    /// git's `files` backend reads them: a name's loose file, else its line in `packed-refs`
    /// (git writes both by renaming a finished file into place, and packs a ref before it
    /// removes the loose file, so reading in this order never misses a ref that exists).
    /// `None`, meaning "ask git", whenever anything is not as git itself writes it: refs
    /// that are not plain files, a name outside the plain shape or in a worktree's private
    /// namespace, a symbolic or malformed loose ref, an unusual or unreadable `packed-refs`.
    pub fn read_files(&self, names: &[String]) -> Option<HashMap<String, String>> {
        let common = self.common_dir.as_deref()?;
        let mut values = HashMap::new();
        let mut in_packed = Vec::new();
        for name in names {
            if !is_plain_shared_ref_name(name) {
                return None;
            }
            match read_loose(&common.join(name))? {
                Some(oid) => {
                    values.insert(name.clone(), oid);
                }
                None => in_packed.push(name.as_str()),
            }
        }
        if in_packed.is_empty() {
            return Some(values);
        }
        let packed = match std::fs::read(common.join("packed-refs")) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(values),
            Err(_) => return None,
        };
        let wanted: std::collections::HashSet<&str> = in_packed.into_iter().collect();
        let text = std::str::from_utf8(&packed).ok()?;
        if !text.is_empty() && !text.ends_with('\n') {
            return None;
        }
        for line in text.lines() {
            if line.starts_with('#') {
                if !line.starts_with("# pack-refs with:") {
                    return None;
                }
                continue;
            }
            if let Some(peeled) = line.strip_prefix('^') {
                if !super::is_oid(peeled) {
                    return None;
                }
                continue;
            }
            let (oid, name) = line.split_once(' ')?;
            if !super::is_oid(oid) {
                return None;
            }
            if wanted.contains(name) {
                values.insert(name.to_string(), oid.to_string());
            }
        }
        Some(values)
    }

    /// Whether any loose ref file exists under `dir` (e.g. `refs/airlock`). True when refs are
    /// not plain files, so callers that skip work on `false` never skip it wrongly.
    pub fn has_loose_refs_under(&self, dir: &str) -> Result<bool, super::StagingError> {
        let Some(common) = self.common_dir.as_deref() else {
            return Ok(true);
        };
        fn walk(dir: &Path) -> std::io::Result<bool> {
            let rd = match std::fs::read_dir(dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
            };
            for entry in rd {
                let entry = entry?;
                let ft = entry.file_type()?;
                if ft.is_dir() {
                    if walk(&entry.path())? {
                        return Ok(true);
                    }
                } else {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        let path = common.join(dir);
        walk(&path).map_err(|source| super::StagingError::Io {
            op: "list loose refs",
            path,
            source,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<String>, Entry>> {
        self.entries
            .lock()
            .expect("the ref cache lock is never poisoned")
    }

    /// How many answers are remembered (for tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// True when `path` is a regular file holding an object id (not `ref: <target>`).
/// A full ref name of the shape Airlock's own refs have, outside the namespaces git keeps per
/// worktree: `refs/` then components of letters, digits, `-`, `_` and `.`, none empty, none
/// starting with `.` or ending with `.lock`.
fn is_plain_shared_ref_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("refs/") else {
        return false;
    };
    if ["worktree/", "bisect/", "rewritten/"]
        .iter()
        .any(|p| rest.starts_with(p))
    {
        return false;
    }
    rest.split('/').all(|c| {
        !c.is_empty()
            && !c.starts_with('.')
            && !c.ends_with(".lock")
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    })
}

/// A loose ref file's value: `Some(Some(oid))` when it holds exactly an object id and a
/// newline, `Some(None)` when there is no such file (or a directory stands there), `None` when
/// it is anything else (symbolic, malformed, unreadable).
fn read_loose(path: &Path) -> Option<Option<String>> {
    match std::fs::read(path) {
        Ok(b) => {
            let text = std::str::from_utf8(b.strip_suffix(b"\n")?).ok()?;
            super::is_oid(text).then(|| Some(text.to_string()))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::NotADirectory
                    | std::io::ErrorKind::IsADirectory
            ) =>
        {
            Some(None)
        }
        Err(_) => None,
    }
}

fn is_plain_loose_ref(path: &Path) -> bool {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(80);
    if f.take(80).read_to_end(&mut head).is_err() {
        return false;
    }
    let text = head.strip_suffix(b"\n").unwrap_or(&head);
    super::is_oid(std::str::from_utf8(text).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A repository with two commits and refs `refs/airlock/a` (loose) and `refs/airlock/b`.
    fn repo() -> (tempfile::TempDir, PathBuf, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        git(&root, &["init", "-q"]);
        let c = |m: &str| {
            git(
                &root,
                &[
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@e",
                    "commit",
                    "-q",
                    "--allow-empty",
                    "-m",
                    m,
                ],
            );
            git(&root, &["rev-parse", "HEAD"])
        };
        let (one, two) = (c("one"), c("two"));
        git(&root, &["update-ref", "refs/airlock/a", &one]);
        git(&root, &["update-ref", "refs/airlock/b", &one]);
        (dir, root.join(".git"), one, two)
    }

    /// Counts how often git was asked, and asks it for real.
    fn ask(
        common: &Path,
        names: &[String],
        asked: &std::cell::Cell<u32>,
    ) -> Result<HashMap<String, String>, String> {
        asked.set(asked.get() + 1);
        let out = git(
            common,
            &[
                &["for-each-ref", "--format=%(refname) %(objectname)"][..],
                &names.iter().map(String::as_str).collect::<Vec<_>>()[..],
            ]
            .concat(),
        );
        Ok(out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(r, o)| (r.to_string(), o.to_string()))
            .collect())
    }

    fn names() -> Vec<String> {
        vec![
            "refs/airlock/a".into(),
            "refs/airlock/b".into(),
            "refs/airlock/c".into(),
        ]
    }

    #[test]
    fn an_unchanged_answer_is_remembered_and_every_kind_of_change_asks_git_again() {
        let (_d, common, one, two) = repo();
        let cache = RefCache::with_margin(Some(common.clone()), Duration::ZERO);
        let asked = std::cell::Cell::new(0);
        let get = || {
            cache
                .get(&names(), || ask(&common, &names(), &asked))
                .unwrap()
        };
        let first = get();
        assert_eq!(first.len(), 2);
        assert_eq!(get(), first);
        assert_eq!(asked.get(), 1, "the unchanged answer came from memory");

        // A loose ref moved (rename into place: a new inode).
        git(&common, &["update-ref", "refs/airlock/a", &two]);
        assert_eq!(get()["refs/airlock/a"], two);
        assert_eq!(asked.get(), 2);
        // A ref appeared where there was none.
        git(&common, &["update-ref", "refs/airlock/c", &one]);
        assert_eq!(get().len(), 3);
        assert_eq!(asked.get(), 3);
        // Refs packed: the loose files vanish, packed-refs changes; same values.
        git(&common, &["pack-refs", "--all"]);
        assert_eq!(get().len(), 3);
        assert_eq!(asked.get(), 4);
        // A packed ref deleted.
        git(&common, &["update-ref", "-d", "refs/airlock/b"]);
        assert!(!get().contains_key("refs/airlock/b"));
        assert_eq!(asked.get(), 5);
        // A loose ref edited in place (same inode, same size): its ctime moves.
        git(&common, &["update-ref", "refs/airlock/a", &one]);
        get();
        let before = asked.get();
        // Past the kernel's timestamp tick, so the edit gets another ctime (with the real
        // margin, an answer this recent would not have been remembered at all).
        std::thread::sleep(Duration::from_millis(30));
        std::fs::write(common.join("refs/airlock/a"), format!("{two}\n")).unwrap();
        assert_eq!(get()["refs/airlock/a"], two);
        assert_eq!(asked.get(), before + 1);
    }

    #[test]
    fn recent_changes_and_symbolic_refs_are_never_remembered() {
        let (_d, common, one, _) = repo();
        // Everything here changed within the last hour.
        let cache = RefCache::with_margin(Some(common.clone()), Duration::from_secs(3600));
        let asked = std::cell::Cell::new(0);
        cache
            .get(&names(), || ask(&common, &names(), &asked))
            .unwrap();
        cache
            .get(&names(), || ask(&common, &names(), &asked))
            .unwrap();
        assert_eq!(asked.get(), 2, "a racy stamp is not trusted");
        assert!(cache.is_empty());

        let cache = RefCache::with_margin(Some(common.clone()), Duration::ZERO);
        std::fs::write(common.join("refs/airlock/a"), "ref: refs/airlock/b\n").unwrap();
        let asked = std::cell::Cell::new(0);
        let got = cache
            .get(&names(), || ask(&common, &names(), &asked))
            .unwrap();
        assert_eq!(got["refs/airlock/a"], one);
        cache
            .get(&names(), || ask(&common, &names(), &asked))
            .unwrap();
        assert_eq!(
            asked.get(),
            2,
            "a symbolic ref's target can move without a stamp change"
        );

        // With another ref backend there is no stamp at all.
        let off = RefCache::new(None);
        let asked = std::cell::Cell::new(0);
        off.get(&names(), || ask(&common, &names(), &asked))
            .unwrap();
        off.get(&names(), || ask(&common, &names(), &asked))
            .unwrap();
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn loose_refs_are_found_only_where_they_are() {
        let (_d, common, _, _) = repo();
        let cache = RefCache::new(Some(common.clone()));
        assert!(cache.has_loose_refs_under("refs/airlock").unwrap());
        git(&common, &["pack-refs", "--all"]);
        assert!(!cache.has_loose_refs_under("refs/airlock").unwrap());
        assert!(!cache.has_loose_refs_under("refs/nowhere").unwrap());
        assert!(
            RefCache::new(None)
                .has_loose_refs_under("refs/airlock")
                .unwrap()
        );
    }

    /// Git's answer for exactly `names`.
    fn git_values(common: &Path, names: &[String]) -> HashMap<String, String> {
        let asked = std::cell::Cell::new(0);
        let mut all = ask(common, names, &asked).unwrap();
        all.retain(|n, _| names.contains(n));
        all
    }

    #[test]
    fn refs_read_from_their_files_are_what_git_reads_through_every_kind_of_change() {
        let (_d, common, one, two) = repo();
        let tag = {
            let root = common.parent().unwrap();
            git(
                root,
                &[
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@e",
                    "tag",
                    "-a",
                    "-m",
                    "t",
                    "t1",
                    &one,
                ],
            );
            git(root, &["rev-parse", "refs/tags/t1"])
        };
        let cache = RefCache::new(Some(common.clone()));
        let names: Vec<String> = [
            "refs/airlock/a",
            "refs/airlock/b",
            "refs/airlock/c",
            "refs/airlock/d",
            "refs/airlock/d/e",
            "refs/airlock/x.y/z_1-2",
            "refs/tags/t1",
            "refs/heads/master",
            "refs/heads/main",
        ]
        .map(String::from)
        .to_vec();
        let values = [one.clone(), two.clone()];
        // A fixed xorshift: the same sequence of changes every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut read_by_files = 0;
        for round in 0..120 {
            let name = &names[next(6) as usize];
            let value = &values[next(2) as usize];
            match next(7) {
                0 | 1 => {
                    // update-ref refuses a name in a directory/file conflict; that is fine.
                    let _ = Command::new("git")
                        .arg("-C")
                        .arg(&common)
                        .args(["update-ref", name, value])
                        .env("GIT_CONFIG_GLOBAL", "/dev/null")
                        .output()
                        .unwrap();
                }
                2 => {
                    let _ = Command::new("git")
                        .arg("-C")
                        .arg(&common)
                        .args(["update-ref", "-d", name])
                        .env("GIT_CONFIG_GLOBAL", "/dev/null")
                        .output()
                        .unwrap();
                }
                3 => drop(git(&common, &["pack-refs", "--all"])),
                4 => drop(git(&common, &["pack-refs", "--all", "--no-prune"])),
                _ => {}
            }
            let ours = cache.read_files(&names);
            let theirs = git_values(&common, &names);
            let ours = ours.unwrap_or_else(|| panic!("round {round}: plain refs read by git"));
            read_by_files += 1;
            assert_eq!(ours, theirs, "round {round}");
            assert_eq!(
                ours.get("refs/tags/t1"),
                Some(&tag),
                "the tag, not its peeled commit"
            );
        }
        assert_eq!(read_by_files, 120);
        // A loose ref over a packed one of the same name wins, as in git.
        git(&common, &["update-ref", "refs/airlock/a", &one]);
        git(&common, &["pack-refs", "--all"]);
        git(&common, &["update-ref", "refs/airlock/a", &two]);
        assert_eq!(
            cache.read_files(&names).unwrap().get("refs/airlock/a"),
            Some(&two)
        );
        assert_eq!(
            cache.read_files(&names).unwrap(),
            git_values(&common, &names)
        );

        // Whatever is not in the plain form git writes is left to git.
        git(
            &common,
            &["symbolic-ref", "refs/airlock/c", "refs/airlock/b"],
        );
        assert_eq!(cache.read_files(&names), None, "a symbolic ref");
        git(
            &common,
            &["update-ref", "--no-deref", "-d", "refs/airlock/c"],
        );
        assert!(cache.read_files(&names).is_some());
        std::fs::write(common.join("refs/airlock/b"), format!("{one} trailing\n")).unwrap();
        assert_eq!(
            cache.read_files(&names),
            None,
            "a loose ref git would read leniently"
        );
        std::fs::write(common.join("refs/airlock/b"), format!("{one}\n")).unwrap();
        let packed = std::fs::read_to_string(common.join("packed-refs")).unwrap();
        std::fs::write(common.join("packed-refs"), packed.trim_end()).unwrap();
        assert_eq!(cache.read_files(&names), None, "packed-refs cut short");
        std::fs::write(common.join("packed-refs"), &packed).unwrap();
        assert!(cache.read_files(&names).is_some());
        for odd in [
            "HEAD",
            "refs/airlock/../HEAD",
            "refs/airlock//a",
            "refs/airlock/.a",
            "refs/airlock/a.lock",
            "refs/airlock/a b",
            "refs/worktree/a",
            "refs/bisect/bad",
        ] {
            assert_eq!(cache.read_files(&[odd.to_string()]), None, "{odd}");
        }
        // Another ref backend: never read in-process.
        assert_eq!(RefCache::new(None).read_files(&names), None);
    }
}
