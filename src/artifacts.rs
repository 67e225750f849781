//! Atomic, checksummed recovery artifacts: `<data_dir>/artifacts/verifications/<id>.json`.
//!
//! Written as temp file in the same directory, fsync, rename, fsync of the directory. The body
//! is canonical JSON (sorted keys, compact) and its SHA-256 sits beside it, so a flipped byte,
//! a truncation or another verification's file is detected and never restored.

use crate::limits;
use crate::verification::Verification;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Version of the artifact format.
pub const SCHEMA_VERSION: u32 = 1;
/// Marker in temp file names; leftovers matching it are swept by recovery.
pub const TEMP_MARKER: &str = ".tmp.";

/// The checksummed body of an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactBody {
    pub schema_version: u32,
    pub verification_id: String,
    pub creation_key: String,
    pub candidate_revision: String,
    pub result: Verification,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArtifactFile {
    sha256: String,
    body: serde_json::Value,
}

/// I/O failure while writing or moving an artifact. Never retried-and-assumed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}")]
pub struct ArtifactIoError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Why an artifact on disk cannot be trusted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

/// The artifact directories of one data dir.
#[derive(Debug, Clone)]
pub struct Artifacts {
    dir: PathBuf,
    quarantine: PathBuf,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ArtifactIoError + 'a {
    move |source| ArtifactIoError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Canonical bytes of a body: compact JSON with sorted keys.
fn canonical(body: &serde_json::Value) -> String {
    crate::canonical::to_string(body)
}

/// Writes `bytes` to `dir/name` atomically and durably.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ArtifactIoError> {
    write_atomic_timed(dir, name, bytes).map(|(p, _)| p)
}

/// [`write_atomic`], also returning the time its two fsyncs (file, directory) took.
pub fn write_atomic_timed(
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(PathBuf, std::time::Duration), ArtifactIoError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut fsyncs = std::time::Duration::ZERO;
    let final_path = dir.join(name);
    let tmp = dir.join(format!(
        ".{name}{TEMP_MARKER}{}",
        crate::ids::new_creation_key()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    let result = (|| {
        f.write_all(bytes).map_err(io("write", &tmp))?;
        let t = std::time::Instant::now();
        f.sync_all().map_err(io("fsync", &tmp))?;
        fsyncs += t.elapsed();
        drop(f);
        std::fs::rename(&tmp, &final_path).map_err(io("rename", &final_path))?;
        let t = std::time::Instant::now();
        fsync_dir(dir)?;
        fsyncs += t.elapsed();
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| (final_path, fsyncs))
}

/// The names of the temp files [`write_atomic`] left in `dir` when a write was interrupted.
pub fn temp_files(dir: &Path) -> Result<Vec<String>, ArtifactIoError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("read dir", dir))? {
        let entry = entry.map_err(io("read dir", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.contains(TEMP_MARKER) {
            out.push(name);
        }
    }
    Ok(out)
}

/// Fsyncs a directory so a rename or create in it survives power loss.
pub fn fsync_dir(dir: &Path) -> Result<(), ArtifactIoError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

impl Artifacts {
    /// Artifacts under `data_dir/artifacts`, creating the directories.
    /// Artifacts in `dir`, rejected ones moved to `quarantine` (both created if missing).
    pub fn open(dir: &Path, quarantine: &Path) -> Result<Artifacts, ArtifactIoError> {
        let a = Artifacts {
            dir: dir.to_path_buf(),
            quarantine: quarantine.to_path_buf(),
        };
        for d in [&a.dir, &a.quarantine] {
            std::fs::create_dir_all(d).map_err(io("create dir", d))?;
        }
        Ok(a)
    }

    /// Path of a verification's artifact.
    pub fn path(&self, verification_id: &str) -> PathBuf {
        self.dir.join(format!("{verification_id}.json"))
    }

    /// Writes the terminal result of `v` durably.
    pub fn write(&self, v: &Verification) -> Result<PathBuf, ArtifactIoError> {
        self.write_timed(v).map(|(p, _)| p)
    }

    /// [`Artifacts::write`], also returning the time its fsyncs took.
    pub fn write_timed(
        &self,
        v: &Verification,
    ) -> Result<(PathBuf, std::time::Duration), ArtifactIoError> {
        let body = ArtifactBody {
            schema_version: SCHEMA_VERSION,
            verification_id: v.verification_id.clone(),
            creation_key: v.creation_key.clone(),
            candidate_revision: v.candidate_revision.clone(),
            result: v.clone(),
        };
        let value = serde_json::to_value(&body).expect("an artifact body serializes");
        let sha256 = hex::encode(Sha256::digest(canonical(&value).as_bytes()));
        let file = serde_json::to_vec(&ArtifactFile {
            sha256,
            body: value,
        })
        .expect("an artifact file serializes");
        write_atomic_timed(&self.dir, &format!("{}.json", v.verification_id), &file)
    }

    /// Reads and checks the artifact of `verification_id`, expecting `creation_key`.
    /// `Ok(None)`: no artifact. `Err(Rejected)`: present but untrustworthy.
    pub fn read(
        &self,
        verification_id: &str,
        creation_key: &str,
    ) -> Result<Option<ArtifactBody>, Rejected> {
        let path = self.path(verification_id);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Rejected(format!("cannot open: {e}"))),
        };
        let mut bytes = Vec::new();
        file.take(limits::MAX_ARTIFACT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Rejected(format!("cannot read: {e}")))?;
        if bytes.len() as u64 > limits::MAX_ARTIFACT_BYTES {
            return Err(Rejected(format!(
                "larger than {} bytes",
                limits::MAX_ARTIFACT_BYTES
            )));
        }
        let file: ArtifactFile = serde_json::from_slice(&bytes)
            .map_err(|e| Rejected(format!("not a valid artifact (truncated or corrupt): {e}")))?;
        let actual = hex::encode(Sha256::digest(canonical(&file.body).as_bytes()));
        if actual != file.sha256 {
            return Err(Rejected(format!(
                "checksum mismatch (stored {}, computed {actual})",
                file.sha256
            )));
        }
        let body: ArtifactBody = serde_json::from_value(file.body)
            .map_err(|e| Rejected(format!("body does not match the schema: {e}")))?;
        if body.schema_version != SCHEMA_VERSION {
            return Err(Rejected(format!(
                "schema_version {} is not {SCHEMA_VERSION}",
                body.schema_version
            )));
        }
        if body.verification_id != verification_id || body.result.verification_id != verification_id
        {
            return Err(Rejected(format!(
                "it names verification {} instead of {verification_id}",
                body.verification_id
            )));
        }
        if body.creation_key != creation_key || body.result.creation_key != creation_key {
            return Err(Rejected(format!(
                "it names creation key {} instead of {creation_key}",
                body.creation_key
            )));
        }
        if body.candidate_revision != body.result.candidate_revision {
            return Err(Rejected(
                "candidate_revision disagrees with its result".into(),
            ));
        }
        if !body.result.status.is_terminal() {
            return Err(Rejected(format!(
                "status {} is not terminal",
                body.result.status.as_str()
            )));
        }
        Ok(Some(body))
    }

    /// Moves a rejected artifact into the quarantine directory (durably). Returns the new path.
    pub fn quarantine(&self, verification_id: &str) -> Result<PathBuf, ArtifactIoError> {
        let from = self.path(verification_id);
        let to = self.quarantine.join(format!(
            "{verification_id}.{}.json",
            crate::ids::new_creation_key()
        ));
        std::fs::rename(&from, &to).map_err(io("quarantine", &from))?;
        fsync_dir(&self.quarantine)?;
        fsync_dir(&self.dir)?;
        Ok(to)
    }

    /// Removes the artifacts of settled verifications whose retention ended, then fsyncs the
    /// directory. A missing artifact is not an error (a pass interrupted after it).
    pub fn remove(&self, verification_ids: &[String]) -> Result<(), ArtifactIoError> {
        for id in verification_ids {
            let path = self.path(id);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &path)(e)),
            }
        }
        fsync_dir(&self.dir)
    }

    /// Removes leftover temp files from interrupted writes. Returns the removed paths.
    pub fn sweep_temp(&self) -> Result<Vec<PathBuf>, ArtifactIoError> {
        let mut removed = Vec::new();
        for name in temp_files(&self.dir)? {
            let path = self.dir.join(&name);
            std::fs::remove_file(&path).map_err(io("remove", &path))?;
            removed.push(path);
        }
        Ok(removed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::verification::Status;

    pub(crate) fn sample(id: &str, key: &str) -> Verification {
        Verification {
            verification_id: id.into(),
            candidate_revision: "a".repeat(40),
            argv: vec!["true".into()],
            image: "airlock/minimal:latest".into(),
            observed_image: Some("sha256:abc".into()),
            user: "65532:65532".into(),
            working_dir: "/workspace".into(),
            timeout_seconds: 300,
            cpu_limit: 1.0,
            memory_limit_bytes: 1 << 30,
            environment_sha256: "e".repeat(64),
            setup_script_sha256: "s".repeat(64),
            status: Status::Passed,
            exit_code: Some(0),
            output: "ok\n".into(),
            output_truncated: false,
            output_bytes_total: 3,
            oom_killed: false,
            duration_ms: Some(5),
            error: None,
            created_at: "2026-12-01T00:00:00Z".into(),
            finished_at: Some("2026-12-01T00:00:01Z".into()),
            expires_at: "2026-12-02T00:00:00Z".into(),
            creation_key: key.into(),
            container_id: Some("c".into()),
            engine: Some("local".into()),
            runtime: Some(crate::domain::isolation::Isolation::Runc),
            queued: None,
            queued_reason: None,
            phases: None,
            candidate_tree: None,
            repository: None,
            dependencies: None,
            attestation: None,
        }
    }

    #[test]
    fn round_trip() {
        let d = tempfile::tempdir().unwrap();
        let a = Artifacts::open(&d.path().join("v"), &d.path().join("q")).unwrap();
        let v = sample("ver_1", "k1");
        a.write(&v).unwrap();
        assert_eq!(a.read("ver_1", "k1").unwrap().unwrap().result, v);
        assert_eq!(a.read("ver_2", "k2").unwrap(), None);
        assert!(a.sweep_temp().unwrap().is_empty());
    }

    #[test]
    fn every_corruption_is_rejected() {
        let d = tempfile::tempdir().unwrap();
        let a = Artifacts::open(&d.path().join("v"), &d.path().join("q")).unwrap();
        a.write(&sample("ver_1", "k1")).unwrap();
        let good = std::fs::read(a.path("ver_1")).unwrap();
        // Flip each byte of the output text in turn: any change must be detected.
        let pos = good.windows(3).position(|w| w == b"ok\\").unwrap();
        let mut flipped = good.clone();
        flipped[pos] ^= 0x01;
        std::fs::write(a.path("ver_1"), &flipped).unwrap();
        assert!(a.read("ver_1", "k1").unwrap_err().0.contains("checksum"));
        // Truncated.
        std::fs::write(a.path("ver_1"), &good[..good.len() / 2]).unwrap();
        assert!(a.read("ver_1", "k1").unwrap_err().0.contains("truncated"));
        // Another verification's artifact under this name.
        a.write(&sample("ver_2", "k2")).unwrap();
        std::fs::copy(a.path("ver_2"), a.path("ver_1")).unwrap();
        assert!(a.read("ver_1", "k1").unwrap_err().0.contains("ver_2"));
        // Oversized.
        std::fs::write(
            a.path("ver_1"),
            vec![b' '; limits::MAX_ARTIFACT_BYTES as usize + 2],
        )
        .unwrap();
        assert!(a.read("ver_1", "k1").unwrap_err().0.contains("larger"));
        // Quarantine moves it away.
        let q = a.quarantine("ver_1").unwrap();
        assert!(q.exists());
        assert_eq!(a.read("ver_1", "k1").unwrap(), None);
    }

    #[test]
    fn temp_leftovers_are_swept() {
        let d = tempfile::tempdir().unwrap();
        let a = Artifacts::open(&d.path().join("v"), &d.path().join("q")).unwrap();
        let leftover = a.dir.join(format!(".ver_1.json{TEMP_MARKER}abc"));
        std::fs::write(&leftover, b"partial").unwrap();
        assert_eq!(a.sweep_temp().unwrap(), vec![leftover]);
    }
}
