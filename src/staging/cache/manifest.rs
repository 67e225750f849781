//! A cache entry's manifest: written once its tree is filled, read back (its checksum checked)
//! when the entry is found at open, and the check that the tree stands exactly as recorded.

use super::{Entry, MANIFEST, MANIFEST_HEADER, MAX_MANIFEST_BYTES, io};
use crate::domain::git::FileMode;
use crate::staging::{Snapshot, Staged, StagingError, StatKey};
use sha2::Digest;
use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

fn stat_text(s: &Option<StatKey>) -> String {
    match s {
        Some(s) => format!(
            "{} {} {} {} {}",
            s.ino, s.size, s.mtime_ns, s.ctime_ns, s.mode
        ),
        None => "- - - - -".into(),
    }
}

/// `header`, `empty <oid>`, `bytes <n>`, then per path `<mode> <oid> <stat> <len>\t<path>`,
/// then `sha256 <hex of everything before>`.
pub(super) fn write_manifest(
    path: &Path,
    empty_tree: &str,
    bytes: u64,
    snapshot: &Snapshot,
) -> Result<(), StagingError> {
    let mut body = format!("{MANIFEST_HEADER}\nempty {empty_tree}\nbytes {bytes}\n").into_bytes();
    for (p, s) in snapshot.iter() {
        body.extend_from_slice(
            format!(
                "{} {} {} {}\t",
                s.mode.as_str(),
                s.oid,
                stat_text(&s.stat),
                p.len()
            )
            .as_bytes(),
        );
        body.extend_from_slice(p);
        body.push(b'\n');
    }
    let digest = hex::encode(sha2::Sha256::digest(&body));
    body.extend_from_slice(format!("sha256 {digest}\n").as_bytes());
    std::fs::write(path, body).map_err(io("write tree cache manifest", path))
}

/// The non-directories and directories beneath `root` (not counting `root`), from the
/// directory entries' types: no `lstat` per path.
fn count_tree(root: &Path) -> std::io::Result<(u64, u64)> {
    let (mut files, mut dirs) = (0u64, 0u64);
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                dirs += 1;
                todo.push(e.path());
            } else {
                files += 1;
            }
        }
    }
    Ok((files, dirs))
}

/// Reads an entry found at open from its manifest, whose checksum must hold.
pub(super) fn read_manifest(dir: &Path, key: &str, owner: (u32, u32)) -> Result<Entry, String> {
    use std::io::Read;
    let path = dir.join(MANIFEST);
    let mut body = Vec::new();
    std::fs::File::open(&path)
        .map_err(|e| format!("manifest: {e}"))?
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("manifest: {e}"))?;
    if body.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(format!("manifest is over {MAX_MANIFEST_BYTES} bytes"));
    }
    let trailer_at = body[..body.len().saturating_sub(1)]
        .iter()
        .rposition(|b| *b == b'\n')
        .map(|i| i + 1)
        .ok_or("manifest has no checksum")?;
    let (content, trailer) = body.split_at(trailer_at);
    let want = format!("sha256 {}\n", hex::encode(sha2::Sha256::digest(content)));
    if trailer != want.as_bytes() {
        return Err("manifest checksum does not match".into());
    }
    let bad = |what: &str| format!("manifest: {what}");
    let mut rest = content;
    let mut line = || -> Result<&[u8], String> {
        let nl = rest.iter().position(|b| *b == b'\n').ok_or(bad("short"))?;
        let (l, r) = rest.split_at(nl);
        rest = &r[1..];
        Ok(l)
    };
    if line()? != MANIFEST_HEADER.as_bytes() {
        return Err(bad("unknown header"));
    }
    let field = |l: &[u8], name: &str| -> Result<String, String> {
        std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.strip_prefix(name))
            .map(str::to_string)
            .ok_or(bad(name))
    };
    let empty_tree = field(line()?, "empty ")?;
    let bytes: u64 = field(line()?, "bytes ")?
        .parse()
        .map_err(|_| bad("bytes"))?;
    let mut snapshot = Vec::new();
    while !rest.is_empty() {
        let tab = rest.iter().position(|b| *b == b'\t').ok_or(bad("no tab"))?;
        let meta = std::str::from_utf8(&rest[..tab]).map_err(|_| bad("meta"))?;
        let f: Vec<&str> = meta.split(' ').collect();
        let [mode, oid, ino, size, mtime, ctime, stmode, len] = f[..] else {
            return Err(bad("fields"));
        };
        let len: usize = len.parse().map_err(|_| bad("length"))?;
        let start = tab + 1;
        if rest.len() < start + len + 1 || rest[start + len] != b'\n' {
            return Err(bad("path"));
        }
        let p = rest[start..start + len].to_vec();
        rest = &rest[start + len + 1..];
        let mode = FileMode::parse(mode).ok_or(bad("mode"))?;
        let stat = if ino == "-" {
            None
        } else {
            let n = |s: &str| s.parse::<i128>().map_err(|_| bad("stat"));
            Some(StatKey {
                ino: n(ino)? as u64,
                size: n(size)? as u64,
                mtime_ns: n(mtime)?,
                ctime_ns: n(ctime)?,
                mode: n(stmode)? as u32,
            })
        };
        if stat.is_none() && mode != FileMode::Gitlink {
            return Err(format!(
                "{:?} has no recorded stat",
                String::from_utf8_lossy(&p)
            ));
        }
        snapshot.push((
            p,
            Staged {
                mode,
                oid: oid.to_string(),
                stat,
            },
        ));
    }
    Ok(Entry {
        key: key.to_string(),
        dir: dir.to_path_buf(),
        bytes,
        owner,
        empty_tree,
        snapshot: Arc::new(snapshot),
        last_used: AtomicU64::new(0),
    })
}

/// Checks that an entry read from its manifest stands as it was filled: every path `lstat`s
/// exactly as recorded, and nothing else is in its tree.
pub(super) fn check_stats(entry: &Entry) -> Result<(), String> {
    let tree = entry.dir.join("tree");
    let snapshot = &entry.snapshot;
    for (p, s) in snapshot.iter() {
        if let Some(want) = &s.stat {
            let now = crate::staging::stat_key(&tree.join(std::ffi::OsStr::from_bytes(p)));
            if now.as_ref() != Some(want) {
                return Err(format!(
                    "{:?} is not as it was cached",
                    String::from_utf8_lossy(p)
                ));
            }
        }
    }
    // Nothing was added either: exactly the recorded paths and the directories they (and the
    // gitlinks, staged as empty directories) need. A stray file in the lower layer would show
    // in every job as if the revision had it.
    let mut want_dirs: HashSet<&[u8]> = HashSet::new();
    let mut want_files = 0u64;
    for (p, s) in snapshot.iter() {
        if s.mode == FileMode::Gitlink {
            want_dirs.insert(p);
        } else {
            want_files += 1;
        }
        let mut at = p.len();
        while let Some(i) = p[..at].iter().rposition(|b| *b == b'/') {
            if !want_dirs.insert(&p[..i]) {
                break;
            }
            at = i;
        }
    }
    let (files, dirs) = count_tree(&tree).map_err(|e| format!("walking the tree: {e}"))?;
    if (files, dirs) != (want_files, want_dirs.len() as u64) {
        return Err(format!(
            "the tree holds {files} file(s) and {dirs} directories, the manifest {want_files} and {}",
            want_dirs.len()
        ));
    }
    Ok(())
}
