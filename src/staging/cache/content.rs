//! The content check of a cache entry found at open (after a restart, or left by another
//! process): the entry must hold exactly the revision's tree, byte for byte.
//!
//! Its manifest is checked against git, not against itself: every path, mode and object id it
//! lists must be the tree's own (`git ls-tree -r`), so a manifest rewritten with a fresh
//! checksum gains nothing. Then every file's and symlink's bytes are hashed as git hashes a
//! blob (`blob <len>\0<bytes>`, SHA-1 or SHA-256 as the repository's ids are) and compared
//! with its id. A raw write to the image's blocks, which no `stat` shows, fails here. The
//! hashing is spread over the machine's cores; it costs about what reading the tree costs,
//! once per entry per process.

use super::super::{Repo, Snapshot};
use crate::domain::git::FileMode;
use sha2::Digest;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Most threads one check hashes with.
const MAX_HASH_THREADS: usize = 8;

/// Why `root` does not hold `tree` as `snapshot` says, or `Ok` when it does.
pub(super) fn verify(
    repo: &Repo,
    tree: &str,
    root: &Path,
    snapshot: &Snapshot,
) -> Result<(), String> {
    let listed = repo
        .tree_files(tree)
        .map_err(|e| format!("listing the tree: {e}"))?;
    if listed.len() != snapshot.len() {
        return Err(format!(
            "the manifest lists {} paths, the tree {}",
            snapshot.len(),
            listed.len()
        ));
    }
    let want: HashMap<&[u8], (FileMode, &str)> = listed
        .iter()
        .map(|(p, e)| (p.as_bytes(), (e.mode, e.oid.as_str())))
        .collect();
    for (p, s) in snapshot.iter() {
        match want.get(p.as_slice()) {
            Some((mode, oid)) if *mode == s.mode && *oid == s.oid => {}
            _ => {
                return Err(format!(
                    "the manifest's {:?} is not the tree's",
                    String::from_utf8_lossy(p)
                ));
            }
        }
    }
    let work: Vec<(&[u8], FileMode, &str)> = snapshot
        .iter()
        .filter(|(_, s)| s.mode != FileMode::Gitlink)
        .map(|(p, s)| (p.as_slice(), s.mode, s.oid.as_str()))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_HASH_THREADS);
    let per = work.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let checks: Vec<_> = work
            .chunks(per)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .find_map(|(p, mode, oid)| check_one(root, p, *mode, oid).err())
                })
            })
            .collect();
        for c in checks {
            if let Some(why) = c.join().expect("hashing does not panic") {
                return Err(why);
            }
        }
        Ok(())
    })
}

/// One path's bytes against its blob id.
fn check_one(root: &Path, p: &[u8], mode: FileMode, oid: &str) -> Result<(), String> {
    let path = root.join(std::ffi::OsStr::from_bytes(p));
    let shown = || String::from_utf8_lossy(p).into_owned();
    let got = match mode {
        FileMode::Symlink => {
            let target = std::fs::read_link(&path).map_err(|e| format!("{:?}: {e}", shown()))?;
            blob_id(
                oid.len(),
                target.as_os_str().as_bytes().len() as u64,
                &mut target.as_os_str().as_bytes(),
            )
        }
        FileMode::Regular | FileMode::Executable => {
            let f = std::fs::File::open(&path).map_err(|e| format!("{:?}: {e}", shown()))?;
            let len = f
                .metadata()
                .map_err(|e| format!("{:?}: {e}", shown()))?
                .len();
            blob_id(
                oid.len(),
                len,
                &mut std::io::BufReader::with_capacity(1 << 16, f),
            )
        }
        FileMode::Gitlink | FileMode::Tree => return Ok(()),
    }
    .map_err(|e| format!("{:?}: {e}", shown()))?;
    if got != oid {
        return Err(format!(
            "{:?} does not hold the revision's bytes (its blob is {got}, the tree says {oid})",
            shown()
        ));
    }
    Ok(())
}

/// The git blob id of `len` bytes read from `r`: SHA-1 for 40-digit ids, SHA-256 for 64.
/// Reading other than `len` bytes is an error (the file changed while it was read).
fn blob_id(id_len: usize, len: u64, r: &mut dyn Read) -> std::io::Result<String> {
    fn hash<D: Digest>(len: u64, r: &mut dyn Read) -> std::io::Result<String> {
        let mut d = D::new();
        d.update(format!("blob {len}\0").as_bytes());
        let mut buf = vec![0u8; 1 << 16];
        let mut seen = 0u64;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            seen += n as u64;
            d.update(&buf[..n]);
        }
        if seen != len {
            return Err(std::io::Error::other(format!(
                "read {seen} bytes, expected {len}"
            )));
        }
        Ok(hex::encode(d.finalize()))
    }
    match id_len {
        40 => hash::<sha1::Sha1>(len, r),
        64 => hash::<sha2::Sha256>(len, r),
        n => Err(std::io::Error::other(format!("an object id of {n} digits"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin` and its SHA-256 repository's id.
        assert_eq!(
            blob_id(40, 6, &mut &b"hello\n"[..]).unwrap(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(
            blob_id(64, 6, &mut &b"hello\n"[..]).unwrap(),
            "2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4"
        );
        assert!(
            blob_id(40, 7, &mut &b"hello\n"[..]).is_err(),
            "a short read"
        );
    }
}
