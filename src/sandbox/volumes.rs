//! What an engine's workspace volumes hold, engine-neutral: files by path, the quota a volume is
//! made with, how a dependency set's volume is named. A leaf: the spec and the runtime seam both
//! name these.

use super::SandboxError;
use std::collections::BTreeMap;

/// One file of a workspace an engine holds itself (a volume's content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeFile {
    File { executable: bool, bytes: Vec<u8> },
    Symlink { target: String },
}

/// What a volume is made with: its hard quota and the sandbox user who owns it and its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSpec {
    pub disk_bytes: u64,
    pub inodes: u64,
    pub uid: u32,
    pub gid: u32,
}

/// How a dependency-set volume's name begins; the rest is the set's digest.
pub const DEPS_VOLUME_PREFIX: &str = "airlock-deps-";

/// The volume an engine holds the dependency set of content digest `digest` in
/// ([`super::EngineVolumes::ensure_readonly`]).
pub fn deps_volume_name(digest: &str) -> String {
    format!("{DEPS_VOLUME_PREFIX}{}", &digest[..digest.len().min(32)])
}

/// A volume's files by path (`/`-separated, relative to the volume's root).
pub type VolumeFiles = BTreeMap<String, VolumeFile>;

/// Every file and symlink beneath `dir` as a volume's files (directories follow from them).
pub fn files_of(dir: &std::path::Path) -> Result<VolumeFiles, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |p: &std::path::Path, e: std::io::Error| {
        SandboxError::Runtime(format!("reading {}: {e}", p.display()))
    };
    let mut out = VolumeFiles::new();
    let mut todo = vec![std::path::PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let at = dir.join(&rel);
        for e in std::fs::read_dir(&at).map_err(|e| fail(&at, e))? {
            let e = e.map_err(|e| fail(&at, e))?;
            let path = rel.join(e.file_name());
            let name = path.to_string_lossy().into_owned();
            if name == "lost+found" {
                continue;
            }
            let meta = std::fs::symlink_metadata(e.path()).map_err(|err| fail(&e.path(), err))?;
            if meta.is_dir() {
                todo.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(e.path()).map_err(|err| fail(&e.path(), err))?;
                out.insert(
                    name,
                    VolumeFile::Symlink {
                        target: target.to_string_lossy().into_owned(),
                    },
                );
            } else {
                let bytes = std::fs::read(e.path()).map_err(|err| fail(&e.path(), err))?;
                out.insert(
                    name,
                    VolumeFile::File {
                        executable: meta.permissions().mode() & 0o111 != 0,
                        bytes,
                    },
                );
            }
        }
    }
    Ok(out)
}
