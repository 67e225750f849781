//! The tar streams of an engine's workspace volume: a tree packed as it is sent (the engine
//! receives the first bytes while the rest is still being packed) and a read-back unpacked as
//! it arrives, each on a blocking thread joined to the async transfer by a bounded channel of
//! chunks.

use crate::sandbox::SandboxError;
use crate::sandbox::runtime::{VolumeFile, VolumeFiles};
use bytes::Bytes;
use std::io::{Read, Write};
use tokio::sync::mpsc;

/// Bytes a packed chunk holds before it is sent.
pub const CHUNK_BYTES: usize = 256 << 10;
/// Chunks on their way between a blocking packer or unpacker and its transfer: what either
/// side may run ahead of the other by.
pub const CHUNKS_IN_FLIGHT: usize = 16;

/// A writer handing its bytes to an async transfer in chunks of [`CHUNK_BYTES`]. Once the
/// transfer is gone, a write fails with `BrokenPipe`.
pub struct ChunkSender {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChunkSender {
    pub fn new(tx: mpsc::Sender<std::io::Result<Bytes>>) -> ChunkSender {
        ChunkSender {
            tx,
            buf: Vec::with_capacity(CHUNK_BYTES),
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }

    /// Ends the stream with `e`: the transfer fails with it.
    pub fn fail(self, e: std::io::Error) {
        let _ = self.tx.blocking_send(Err(e));
    }
}

impl Write for ChunkSender {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// The chunks of a sender as a request body's stream.
pub fn chunk_stream(
    rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

/// A reader of chunks an async transfer receives: the end of the stream (the sender dropped)
/// is the end of the file.
pub struct ChunkReceiver {
    rx: mpsc::Receiver<Bytes>,
    chunk: Bytes,
}

impl ChunkReceiver {
    pub fn new(rx: mpsc::Receiver<Bytes>) -> ChunkReceiver {
        ChunkReceiver {
            rx,
            chunk: Bytes::new(),
        }
    }
}

impl Read for ChunkReceiver {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.chunk = chunk,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len());
        out[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// Whether a symlink at `path` (relative to the volume's root) with a relative `target` leads
/// out of the volume: the engine's archive extraction refuses such a link ("invalid symlink"),
/// though git keeps it and a local checkout has it.
pub fn leads_out(path: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let mut depth: i64 = path.matches('/').count() as i64;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// Symlinks left out of a packed tar because the engine's extraction refuses them (a relative
/// target leading out of the volume): `(path, target)`, made afterwards in the holder.
pub type Outward = Vec<(String, String)>;

/// A tar of `files` owned by `uid:gid`, in memory, and the symlinks left out of it.
pub fn pack(files: &VolumeFiles, uid: u32, gid: u32) -> Result<(Vec<u8>, Outward), SandboxError> {
    pack_into(files, uid, gid, Vec::new())
        .map_err(|e| SandboxError::Runtime(format!("pack workspace: {e}")))
}

/// The tree as a tar stream written into `w` as it is made: directories first (each once),
/// every entry owned by `uid:gid`, regular files 0644 or 0755, as a checkout would have them;
/// the symlinks leading out of the volume are left out and returned.
pub fn pack_into<W: Write>(
    files: &VolumeFiles,
    uid: u32,
    gid: u32,
    w: W,
) -> std::io::Result<(W, Outward)> {
    let mut b = tar::Builder::new(w);
    let mut dirs = std::collections::BTreeSet::new();
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(uid.into());
        h.set_gid(gid.into());
        h.set_size(size);
        h.set_mtime(0);
        h
    };
    let mut outward = Vec::new();
    for (path, file) in files {
        if let VolumeFile::Symlink { target } = file
            && leads_out(path, target)
        {
            outward.push((path.clone(), target.clone()));
            continue;
        }
        let mut parent = std::path::Path::new(path).parent();
        let mut missing = Vec::new();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            if dirs.insert(p.to_path_buf()) {
                missing.push(p.to_path_buf());
            }
            parent = p.parent();
        }
        for d in missing.into_iter().rev() {
            let mut h = header(tar::EntryType::Directory, 0o755, 0);
            b.append_data(&mut h, &d, std::io::empty())?;
        }
        match file {
            VolumeFile::File { executable, bytes } => {
                let mode = if *executable { 0o755 } else { 0o644 };
                let mut h = header(tar::EntryType::Regular, mode, bytes.len() as u64);
                b.append_data(&mut h, path, bytes.as_slice())?;
            }
            VolumeFile::Symlink { target } => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                b.append_link(&mut h, path, target)?;
            }
        }
    }
    Ok((b.into_inner()?, outward))
}

/// A read-back tar stream (its first component is the mount's own name) as volume files:
/// regular files and symlinks; a hard link is the file it links to; directories and special
/// files (fifos, devices, sockets) are not files of a tree and are left out, so a tracked path
/// that became one reads as changed. At most `max_entries` entries.
pub fn unpack_from<R: Read>(r: R, max_entries: u64) -> Result<VolumeFiles, SandboxError> {
    let fail = |what: String| SandboxError::Runtime(format!("read back workspace: {what}"));
    let mut files = VolumeFiles::new();
    let mut archive = tar::Archive::new(r);
    let mut entries_seen = 0u64;
    for entry in archive.entries().map_err(|e| fail(e.to_string()))? {
        let mut entry = entry.map_err(|e| fail(e.to_string()))?;
        entries_seen += 1;
        if max_entries > 0 && entries_seen > max_entries + 1 {
            return Err(fail(format!("more than {max_entries} entries")));
        }
        let raw = entry.path().map_err(|e| fail(e.to_string()))?.into_owned();
        let Some(rel) = strip_mount(&raw) else {
            continue;
        };
        let kind = entry.header().entry_type();
        let file = if kind.is_file() {
            let executable = entry.header().mode().map_err(|e| fail(e.to_string()))? & 0o100 != 0;
            let mut bytes = Vec::with_capacity(entry.size() as usize);
            std::io::Read::read_to_end(&mut entry, &mut bytes).map_err(|e| fail(e.to_string()))?;
            VolumeFile::File { executable, bytes }
        } else if kind.is_symlink() {
            let target = entry
                .link_name()
                .map_err(|e| fail(e.to_string()))?
                .ok_or_else(|| fail(format!("{rel}: a symlink without a target")))?;
            VolumeFile::Symlink {
                target: target
                    .to_str()
                    .ok_or_else(|| fail(format!("{rel}: a target that is not UTF-8")))?
                    .to_string(),
            }
        } else if kind.is_hard_link() {
            let target = entry
                .link_name()
                .map_err(|e| fail(e.to_string()))?
                .and_then(|t| strip_mount(&t));
            match target.and_then(|t| files.get(&t).cloned()) {
                Some(f) => f,
                None => continue,
            }
        } else {
            continue;
        };
        files.insert(rel, file);
    }
    Ok(files)
}

/// `w/a/b` -> `a/b`; `None` for the mount itself or a path that is not UTF-8 (not a path of
/// a tree Airlock staged, so never one the source check compares).
pub fn strip_mount(p: &std::path::Path) -> Option<String> {
    let s = p.to_str()?;
    let rest = s.split_once('/')?.1.trim_end_matches('/');
    (!rest.is_empty()).then(|| rest.to_string())
}

/// [`unpack_from`] of a read-back held in memory.
pub fn unpack(tar_bytes: &[u8], max_entries: u64) -> Result<VolumeFiles, SandboxError> {
    unpack_from(tar_bytes, max_entries)
}

#[cfg(test)]
mod tests {

    #[test]
    fn outward_links_are_those_leading_out_of_the_volume() {
        for (path, target, out) in [
            ("a", "../x", true),
            ("d/a", "../x", false),
            ("d/a", "../../x", true),
            ("a", "/etc/passwd", false),
            ("a", "b/../../x", true),
            ("d/e/a", "./../../b", false),
            ("a", "README", false),
        ] {
            assert_eq!(super::leads_out(path, target), out, "{path} -> {target}");
        }
    }

    use super::*;

    #[test]
    fn a_packed_tree_reads_back_as_itself() {
        let mut files = VolumeFiles::new();
        files.insert(
            "a.txt".into(),
            VolumeFile::File {
                executable: false,
                bytes: b"hi\n".to_vec(),
            },
        );
        files.insert(
            "bin/run".into(),
            VolumeFile::File {
                executable: true,
                bytes: b"#!/bin/sh\n".to_vec(),
            },
        );
        files.insert(
            "d/e/link".into(),
            VolumeFile::Symlink {
                target: "../../a.txt".into(),
            },
        );
        let (tar, outward) = pack(&files, 65532, 65532).unwrap();
        assert!(outward.is_empty(), "{outward:?}");
        let back = unpack(&rooted(&tar), 100).unwrap();
        assert_eq!(back, files);
        assert!(matches!(
            unpack(&pack(&files, 1, 1).unwrap().0, 1),
            Err(SandboxError::Runtime(m)) if m.contains("more than 1 entries")
        ));
        // A link leading out of the volume is left out of the tar and handed back.
        files.insert(
            "d/out".into(),
            VolumeFile::Symlink {
                target: "../../..".into(),
            },
        );
        let (tar, outward) = pack(&files, 1, 1).unwrap();
        assert_eq!(outward, [("d/out".to_string(), "../../..".to_string())]);
        let mut names = vec![];
        for e in tar::Archive::new(tar.as_slice()).entries().unwrap() {
            names.push(e.unwrap().path().unwrap().display().to_string());
        }
        assert!(!names.iter().any(|n| n == "d/out"), "{names:?}");
    }

    /// `tar` as the engine sends a read-back: rooted at the mount's own name.
    fn rooted(tar: &[u8]) -> Vec<u8> {
        let mut rooted = tar::Builder::new(Vec::new());
        for e in tar::Archive::new(tar).entries().unwrap() {
            let mut e = e.unwrap();
            let mut h = e.header().clone();
            let path = format!("w/{}", e.path().unwrap().display());
            if h.entry_type().is_symlink() {
                let target = e.link_name().unwrap().unwrap().into_owned();
                rooted.append_link(&mut h, &path, target).unwrap();
            } else {
                let mut data = Vec::new();
                Read::read_to_end(&mut e, &mut data).unwrap();
                rooted.append_data(&mut h, &path, data.as_slice()).unwrap();
            }
        }
        rooted.into_inner().unwrap()
    }

    /// A tree of `n` files of `size` bytes each, in `n / 100` directories.
    fn tree(n: usize, size: usize) -> VolumeFiles {
        (0..n)
            .map(|i| {
                (
                    format!("d{}/f{i}", i / 100),
                    VolumeFile::File {
                        executable: i % 7 == 0,
                        bytes: vec![(i % 251) as u8; size],
                    },
                )
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tree_packed_through_the_chunk_channel_is_the_tree_packed_in_memory() {
        let files = std::sync::Arc::new(tree(500, 3000));
        let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
        let packing = files.clone();
        let packer = tokio::task::spawn_blocking(move || {
            let mut w = ChunkSender::new(tx);
            let (w, outward) = pack_into(&packing, 7, 7, &mut w)?;
            w.flush()?;
            std::io::Result::Ok(outward)
        });
        let chunks: Vec<std::io::Result<Bytes>> =
            futures_util::StreamExt::collect(chunk_stream(rx)).await;
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let streamed: Vec<u8> = chunks
            .into_iter()
            .flat_map(|c| c.unwrap().to_vec())
            .collect();
        assert!(packer.await.unwrap().unwrap().is_empty());
        assert_eq!(streamed, pack(&files, 7, 7).unwrap().0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_packer_whose_transfer_went_away_stops_with_a_broken_pipe() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let err = tokio::task::spawn_blocking(move || {
            pack_into(&tree(100, CHUNK_BYTES), 1, 1, ChunkSender::new(tx)).map(|_| ())
        })
        .await
        .unwrap()
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_back_unpacked_as_it_arrives_is_the_read_back_unpacked_whole() {
        let files = tree(300, 1000);
        let (tar, _) = pack(&files, 1, 1).unwrap();
        let rooted = rooted(&tar);
        let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
        let unpacker =
            tokio::task::spawn_blocking(move || unpack_from(ChunkReceiver::new(rx), 1000));
        // Chunks of odd sizes, as a network hands them over.
        for chunk in rooted.chunks(4093) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        drop(tx);
        assert_eq!(unpacker.await.unwrap().unwrap(), files);
        assert_eq!(unpack(&rooted, 1000).unwrap(), files);
    }
}
