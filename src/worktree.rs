//! Reading a governed worktree without following symlinks: the content hashes claims and
//! proposals pin (the wire's `current_hash`), computed beneath the worktree root (never the process's working directory).
//!
//! - file: SHA-256 hex of the bytes; `None` when the path does not exist;
//! - line range: the 1-based inclusive lines, split on LF and joined with LF, hashed;
//!   `None` when the file is missing or the range starts past its end;
//! - directory: every non-directory entry below it, sorted by its repository-relative name,
//!   hashed as name, NUL, bytes, NUL; `.git` (in any spelling) is excluded (it is not
//!   content: its index and logs change on every read-only git call); `None` when the directory does not exist.
//!
//! A symlink is hashed as its target text (what git stores), never followed, so a link cannot
//! pull bytes from outside the tree into a hash. Sockets, fifos and devices are refused. A
//! directory hash reads at most [`crate::limits::MAX_DIRECTORY_HASH_BYTES`] and
//! [`crate::limits::MAX_DIRECTORY_HASH_ENTRIES`].

use crate::beneath::Root;
use crate::domain::claim::Span;
use crate::limits;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

fn io(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// What is at a path, read without following a symlink.
enum Content {
    Missing,
    Bytes(Vec<u8>),
    /// A symlink's target text.
    Link(Vec<u8>),
    Directory(OwnedFd),
}

/// The directory holding `rel` (opened beneath `root`, never through a symlink) and `rel`'s
/// name in it; `None` when the directory does not exist.
fn parent_of<'a>(root: &Root, rel: &'a str) -> std::io::Result<Option<(OwnedFd, &'a str)>> {
    let (parent, name) = match rel.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, rel),
    };
    let dir = match parent {
        Some(p) => match root.open_at(
            Path::new(p),
            OFlag::O_PATH | OFlag::O_DIRECTORY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        },
        None => root.reopen(OFlag::O_PATH)?,
    };
    Ok(Some((dir, name)))
}

/// Reads `rel` beneath `root`: a regular file's bytes, a symlink's target text, or a directory.
fn read_entry(root: &Root, rel: &str) -> std::io::Result<Content> {
    match parent_of(root, rel)? {
        Some((dir, name)) => entry_at(&dir, name),
        None => Ok(Content::Missing),
    }
}

/// The target of `rel` when it is a symlink (read beneath `root`), `None` otherwise.
pub fn link_target(root: &Root, rel: &str) -> std::io::Result<Option<Vec<u8>>> {
    let Some((dir, name)) = parent_of(root, rel)? else {
        return Ok(None);
    };
    match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => {
            Ok(Some(
                nix::fcntl::readlinkat(dir.as_fd(), name)
                    .map_err(io)?
                    .into_encoded_bytes(),
            ))
        }
        Ok(_) | Err(nix::errno::Errno::ENOENT) => Ok(None),
        Err(e) => Err(io(e)),
    }
}

/// Most symlinks one resolution follows (the kernel's own limit, ELOOP).
pub const MAX_SYMLINK_HOPS: u32 = 40;

/// Checks that every symlink of `links` (path, target), as the tree will be once `overlay`
/// (path -> the symlink target it will hold, `None` for a path that will not be a symlink)
/// replaces what the worktree holds, resolves inside the worktree: judged from the link's
/// own (new) location, component by component, following every symlink it meets on the way
/// (in the overlay, else in the worktree), refusing an absolute target, a climb above the
/// top, a step into `.git` and more than [`MAX_SYMLINK_HOPS`] links. Err names the path.
pub fn links_stay_inside(
    root: &Root,
    links: &[(String, String)],
    overlay: &std::collections::HashMap<String, Option<String>>,
) -> Result<(), String> {
    for (path, target) in links {
        let mut hops = 0;
        let dir: Vec<String> = match path.rsplit_once('/') {
            Some((d, _)) => d.split('/').map(str::to_string).collect(),
            None => vec![],
        };
        resolve_inside(root, overlay, dir, target, &mut hops)
            .map_err(|why| format!("symlink {path:?} -> {target:?} {why}"))?;
    }
    Ok(())
}

fn resolve_inside(
    root: &Root,
    overlay: &std::collections::HashMap<String, Option<String>>,
    mut at: Vec<String>,
    target: &str,
    hops: &mut u32,
) -> Result<Vec<String>, String> {
    if target.starts_with('/') {
        return Err("points to an absolute path".into());
    }
    if target.is_empty() {
        return Err("has an empty target".into());
    }
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if at.pop().is_none() {
                    return Err("leaves the tree".into());
                }
            }
            c if crate::domain::path::is_dotgit_alias(c) => {
                return Err("points into .git".into());
            }
            c => {
                at.push(c.to_string());
                let here = at.join("/");
                let link = match overlay.get(&here) {
                    Some(over) => over.clone(),
                    None => link_target(root, &here)
                        .map_err(|e| format!("cannot be judged: {here:?}: {e}"))?
                        .map(|t| String::from_utf8_lossy(&t).into_owned()),
                };
                if let Some(next) = link {
                    *hops += 1;
                    if *hops > MAX_SYMLINK_HOPS {
                        return Err(format!(
                            "passes through more than {MAX_SYMLINK_HOPS} symlinks"
                        ));
                    }
                    at.pop();
                    at = resolve_inside(root, overlay, at, &next, hops).map_err(|why| {
                        format!("passes through {here:?} -> {next:?}, which {why}")
                    })?;
                }
            }
        }
    }
    Ok(at)
}

fn entry_at(dir: &OwnedFd, name: &str) -> std::io::Result<Content> {
    let st = match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => return Ok(Content::Missing),
        Err(e) => return Err(io(e)),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFLNK {
        let target = nix::fcntl::readlinkat(dir.as_fd(), name).map_err(io)?;
        Ok(Content::Link(target.into_encoded_bytes()))
    } else if kind == SFlag::S_IFREG {
        let fd = nix::fcntl::openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut bytes)?;
        Ok(Content::Bytes(bytes))
    } else if kind == SFlag::S_IFDIR {
        let fd = nix::fcntl::openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        Ok(Content::Directory(fd))
    } else {
        Err(std::io::Error::other(format!(
            "{name:?} is a special file (socket, fifo or device)"
        )))
    }
}

/// SHA-256 hex of a file's bytes (a symlink's target text); `None` when it is missing.
pub fn file_hash(root: &Root, path: &str) -> std::io::Result<Option<String>> {
    match read_entry(root, path)? {
        Content::Missing => Ok(None),
        Content::Bytes(b) | Content::Link(b) => Ok(Some(hex::encode(Sha256::digest(&b)))),
        Content::Directory(_) => Err(std::io::Error::other(format!(
            "{path:?} is a directory, not a file"
        ))),
    }
}

/// A regular file's bytes for a parser; `None` when it is missing. A symlink or a directory is
/// an error (neither has symbols), as is a file larger than `max` bytes.
pub fn source(root: &Root, path: &str, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    match read_entry(root, path)? {
        Content::Missing => Ok(None),
        Content::Bytes(b) if b.len() > max => Err(std::io::Error::other(format!(
            "{path:?} is {} bytes; symbols are resolved in files of at most {max}",
            b.len()
        ))),
        Content::Bytes(b) => Ok(Some(b)),
        Content::Link(_) => Err(std::io::Error::other(format!(
            "{path:?} is a symlink, not a source file"
        ))),
        Content::Directory(_) => Err(std::io::Error::other(format!(
            "{path:?} is a directory, not a source file"
        ))),
    }
}

/// The hash of lines `span` of a file (so a claim on a symbol sees only its own lines change).
pub fn range_hash(root: &Root, path: &str, span: Span) -> std::io::Result<Option<String>> {
    if span.start == 0 || span.end < span.start {
        return Ok(None);
    }
    let bytes = match read_entry(root, path)? {
        Content::Missing => return Ok(None),
        Content::Bytes(b) | Content::Link(b) => b,
        Content::Directory(_) => {
            return Err(std::io::Error::other(format!(
                "{path:?} is a directory, not a file"
            )));
        }
    };
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let start = span.start as usize;
    if start > lines.len() {
        return Ok(None);
    }
    let end = (span.end as usize).min(lines.len());
    Ok(Some(hex::encode(Sha256::digest(
        lines[start - 1..end].join(&b'\n'),
    ))))
}

/// The directory digest of `path` (empty: the whole worktree); `None` when it is missing.
pub fn directory_hash(root: &Root, path: &str) -> std::io::Result<Option<String>> {
    let dir = if path.is_empty() {
        root.reopen(OFlag::O_RDONLY)?
    } else {
        match read_entry(root, path)? {
            Content::Missing => return Ok(None),
            Content::Directory(fd) => fd,
            Content::Bytes(_) | Content::Link(_) => {
                return Err(std::io::Error::other(format!(
                    "{path:?} is not a directory"
                )));
            }
        }
    };
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    let mut budget = (
        limits::MAX_DIRECTORY_HASH_ENTRIES,
        limits::MAX_DIRECTORY_HASH_BYTES,
    );
    collect(dir, path, &mut entries, &mut budget)?;
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut h = Sha256::new();
    for (name, bytes) in &entries {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(bytes);
        h.update([0]);
    }
    Ok(Some(hex::encode(h.finalize())))
}

fn collect(
    dir: OwnedFd,
    prefix: &str,
    out: &mut Vec<(String, Vec<u8>)>,
    budget: &mut (usize, u64),
) -> std::io::Result<()> {
    let keep = dir.try_clone()?;
    let d = nix::dir::Dir::from_fd(dir).map_err(io)?;
    let mut names = Vec::new();
    for e in d {
        let e = e.map_err(io)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." || crate::domain::path::is_dotgit_alias(&name) {
            continue;
        }
        names.push(name);
    }
    for name in names {
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        match entry_at(&keep, &name)? {
            Content::Missing => {}
            Content::Directory(fd) => collect(fd, &rel, out, budget)?,
            Content::Bytes(b) | Content::Link(b) => {
                if budget.0 == 0 {
                    return Err(std::io::Error::other(format!(
                        "the directory holds more than {} entries (MAX_DIRECTORY_HASH_ENTRIES)",
                        limits::MAX_DIRECTORY_HASH_ENTRIES
                    )));
                }
                budget.0 -= 1;
                budget.1 = budget.1.checked_sub(b.len() as u64).ok_or_else(|| {
                    std::io::Error::other(format!(
                        "the directory holds more than {} bytes (MAX_DIRECTORY_HASH_BYTES)",
                        limits::MAX_DIRECTORY_HASH_BYTES
                    ))
                })?;
                out.push((rel, b));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    fn tree() -> (tempfile::TempDir, Root) {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("src/inner")).unwrap();
        std::fs::create_dir_all(r.join(".git/objects")).unwrap();
        std::fs::write(r.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(r.join("src/a.rs"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(r.join("src/inner/b.rs"), "b\n").unwrap();
        std::fs::write(r.join("empty"), "").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", r.join("src/link")).unwrap();
        let root = Root::open(r).unwrap();
        (d, root)
    }

    #[test]
    fn files_hash_their_bytes_and_symlinks_their_target_text() {
        let (_d, root) = tree();
        assert_eq!(
            file_hash(&root, "src/a.rs").unwrap(),
            Some(sha(b"one\ntwo\nthree\n"))
        );
        assert_eq!(
            file_hash(&root, "empty").unwrap(),
            Some(sha(b"")),
            "empty is not missing"
        );
        assert_eq!(file_hash(&root, "nope").unwrap(), None);
        assert_eq!(file_hash(&root, "nope/deeper").unwrap(), None);
        assert_eq!(
            file_hash(&root, "src/link").unwrap(),
            Some(sha(b"/etc/passwd")),
            "never followed"
        );
        assert!(
            file_hash(&root, "src/link/x").is_err(),
            "no path through a symlink"
        );
        assert!(file_hash(&root, "src").is_err());
    }

    #[test]
    fn line_ranges_follow_seed_003s_rules() {
        let (_d, root) = tree();
        let span = |start, end| Span { start, end };
        assert_eq!(
            range_hash(&root, "src/a.rs", span(2, 2)).unwrap(),
            Some(sha(b"two"))
        );
        assert_eq!(
            range_hash(&root, "src/a.rs", span(1, 2)).unwrap(),
            Some(sha(b"one\ntwo"))
        );
        // The trailing LF makes a final empty element; past the end is clamped.
        assert_eq!(
            range_hash(&root, "src/a.rs", span(3, 99)).unwrap(),
            Some(sha(b"three\n"))
        );
        assert_eq!(range_hash(&root, "src/a.rs", span(5, 6)).unwrap(), None);
        assert_eq!(range_hash(&root, "src/a.rs", span(0, 2)).unwrap(), None);
        assert_eq!(range_hash(&root, "src/a.rs", span(3, 2)).unwrap(), None);
        assert_eq!(range_hash(&root, "missing.rs", span(1, 1)).unwrap(), None);
    }

    #[test]
    fn directories_hash_sorted_names_and_bytes_without_git() {
        let (d, root) = tree();
        let mut h = Sha256::new();
        for (name, bytes) in [
            ("src/a.rs", &b"one\ntwo\nthree\n"[..]),
            ("src/inner/b.rs", b"b\n"),
            ("src/link", b"/etc/passwd"),
        ] {
            h.update(name);
            h.update([0]);
            h.update(bytes);
            h.update([0]);
        }
        let want = hex::encode(h.finalize());
        assert_eq!(directory_hash(&root, "src").unwrap(), Some(want));
        let whole = directory_hash(&root, "").unwrap().unwrap();
        // Changing .git changes nothing; changing a file does.
        std::fs::write(d.path().join(".git/HEAD"), "ref: refs/heads/other\n").unwrap();
        assert_eq!(directory_hash(&root, "").unwrap().unwrap(), whole);
        std::fs::write(d.path().join("empty"), "x").unwrap();
        assert_ne!(directory_hash(&root, "").unwrap().unwrap(), whole);
        assert_eq!(directory_hash(&root, "gone").unwrap(), None);
        assert!(directory_hash(&root, "src/a.rs").is_err());
        // A fifo is refused, not read.
        nix::unistd::mkfifo(&d.path().join("src/pipe"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
        assert!(
            directory_hash(&root, "src")
                .unwrap_err()
                .to_string()
                .contains("special file")
        );
    }
}
