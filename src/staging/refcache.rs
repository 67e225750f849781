//! Remembered answers to "what are these refs' values", for hot read paths.
//!
//! Git stays the only reader of refs: an answer is always computed by `git for-each-ref`. What
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
}
