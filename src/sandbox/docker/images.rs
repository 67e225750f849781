//! Builds Airlock's sandbox images locally from `images/<name>/` through the Docker API. No
//! registry is ever contacted: each directory holds a `Dockerfile` (FROM scratch) and an
//! optional `image.toml` naming host files (with the Debian package that provides them) to copy
//! into the build context.

use super::{DockerRuntime, docker_err};
use crate::sandbox::SandboxError;
use bollard::query_parameters::{BuildImageOptionsBuilder, TagImageOptionsBuilder};
use futures_util::StreamExt;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Label holding the SHA-256 of the build context an image was built from.
pub const LABEL_CONTENT_SHA256: &str = "airlock.content_sha256";
/// Repository prefix of every Airlock image.
pub const IMAGE_REPOSITORY_PREFIX: &str = "airlock/";
/// Largest build context Airlock will assemble in memory.
pub const MAX_CONTEXT_BYTES: usize = 512 * 1024 * 1024;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Manifest {
    #[serde(default)]
    host_files: Vec<HostFile>,
    rootfs: Option<RootfsBuild>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RootfsBuild {
    /// Script that writes the rootfs tar to `$AIRLOCK_ROOTFS_TAR`: a file in the image
    /// directory (`NAME`) or one shared by the images directory (`../NAME`). Its bytes are part
    /// of the image's content hash either way.
    script: String,
    /// Whether the host's Rust toolchain may be copied in (`--with-rust`, or by default when
    /// the host has one). `false` for images that never build Rust (the git image).
    #[serde(default = "yes")]
    rust: bool,
    /// Dockerfile-style changes applied on import (ENV, USER, WORKDIR, ...).
    #[serde(default)]
    changes: Vec<String>,
}

/// Where `airlock images build` takes its lock: one build at a time per machine, so two at
/// once never point the same tags at two images (the second finds the first's image by its
/// content hash and reuses it). `/run` (root's), else the temp dir, per user.
pub fn build_lock_path() -> std::path::PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        std::path::PathBuf::from("/run/airlock-images-build.lock")
    } else {
        std::env::temp_dir().join(format!("airlock-images-build-{uid}.lock"))
    }
}

/// Holds the machine's image-build lock (see [`build_lock_path`]) while it lives.
pub struct BuildLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl BuildLock {
    /// Takes the lock, waiting for another build to finish first (`waiting` is told once).
    pub fn take(waiting: impl FnOnce(&Path)) -> Result<BuildLock, SandboxError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = build_lock_path();
        let failed =
            |e: String| SandboxError::Build(format!("the build lock {}: {e}", path.display()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| failed(e.to_string()))?;
        let file = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        {
            Ok(lock) => return Ok(BuildLock { _lock: lock }),
            Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
            Err((_, e)) => return Err(failed(e.to_string())),
        };
        waiting(&path);
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map(|lock| BuildLock { _lock: lock })
            .map_err(|(_, e)| failed(e.to_string()))
    }
}

/// Options of one build.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildOptions {
    /// Copy the host's Rust toolchain into rootfs images: `None` = when the host has one.
    pub with_rust: Option<bool>,
}

fn yes() -> bool {
    true
}

/// The rootfs script a manifest names: `NAME` in the image directory or `../NAME` beside it,
/// with no other path component.
fn rootfs_script(dir: &Path, name: &str, script: &str) -> Result<PathBuf, SandboxError> {
    let file = script.strip_prefix("../").unwrap_or(script);
    let base = if file.len() == script.len() {
        dir.to_path_buf()
    } else {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let path = base.join(file);
    if file.is_empty() || file.contains('/') || file == ".." || !path.is_file() {
        return Err(SandboxError::Build(format!(
            "[{name}] rootfs script {script:?} must be a file in {} or its parent (\"../NAME\")",
            dir.display()
        )));
    }
    Ok(path)
}

/// A rootfs image's script, content hash and the host Rust it would copy in.
type RootfsInputs = (PathBuf, String, Option<(PathBuf, String)>);

fn rootfs_inputs(
    dir: &Path,
    name: &str,
    rootfs: &RootfsBuild,
    opts: BuildOptions,
) -> Result<RootfsInputs, SandboxError> {
    let script = rootfs_script(dir, name, &rootfs.script)?;
    let script_bytes = std::fs::read(&script)
        .map_err(|e| SandboxError::Build(format!("[{name}] {}: {e}", script.display())))?;
    let rust = match opts.with_rust {
        _ if !rootfs.rust => None,
        Some(false) => None,
        Some(true) => Some(host_rust().ok_or_else(|| {
            SandboxError::Build(format!(
                "[{name}] --with-rust was given but rustc is not installed on this host"
            ))
        })?),
        None => host_rust(),
    };
    let (_, context_sha) = build_context(dir)?;
    let inputs = format!(
        "context {context_sha}\nscript {}\nrust {}\n{}",
        hex::encode(Sha256::digest(&script_bytes)),
        rust.as_ref().map(|r| r.1.as_str()).unwrap_or("none"),
        host_build_inputs()
    );
    Ok((script, hex::encode(Sha256::digest(inputs.as_bytes())), rust))
}

/// The content hash `airlock images build NAME` would give `images_dir/NAME` now.
pub fn content_sha(
    images_dir: &Path,
    name: &str,
    opts: BuildOptions,
) -> Result<String, SandboxError> {
    let dir = images_dir.join(name);
    match load_manifest(&dir)?.rootfs {
        Some(rootfs) => rootfs_inputs(&dir, name, &rootfs, opts).map(|(_, sha, _)| sha),
        None => build_context(&dir).map(|(_, sha)| sha),
    }
}

fn load_manifest(dir: &Path) -> Result<Manifest, SandboxError> {
    match std::fs::read_to_string(dir.join("image.toml")) {
        Ok(t) => toml::from_str(&t)
            .map_err(|e| SandboxError::Build(format!("{}: {e}", dir.join("image.toml").display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Manifest::default()),
        Err(e) => Err(SandboxError::Build(format!("{}: {e}", dir.display()))),
    }
}

/// The host's Rust sysroot (`rustc --print sysroot`) and `rustc -vV`, if rustc is installed.
fn host_rust() -> Option<(PathBuf, String)> {
    let run = |args: &[&str]| {
        crate::process::command("rustc")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    Some((PathBuf::from(run(&["--print", "sysroot"])?), run(&["-vV"])?))
}

/// Host state a rootfs build reads besides its own directory: the release and apt sources.
fn host_build_inputs() -> String {
    let mut files = vec![
        PathBuf::from("/etc/os-release"),
        PathBuf::from("/etc/apt/sources.list"),
    ];
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    let mut inputs = String::new();
    // An operator override of the package sources (see images/build-rootfs.sh).
    if let Ok(over) = std::env::var("AIRLOCK_APT_SOURCES") {
        inputs.push_str(&format!("AIRLOCK_APT_SOURCES={over}\n"));
        files.extend(over.split_whitespace().map(PathBuf::from));
    }
    for f in files {
        if let Ok(text) = std::fs::read_to_string(&f) {
            inputs.push_str(&format!("== {}\n{text}\n", f.display()));
        }
    }
    inputs
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    /// Absolute path on the host.
    source: PathBuf,
    /// Path inside the build context.
    dest: String,
    /// Debian package that provides `source`, for the error message.
    package: String,
}

/// What happened to one image.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub name: String,
    pub reference: String,
    pub content_tag: String,
    pub content_sha256: String,
    pub image_id: String,
    pub skipped: bool,
}

/// Image directory names under `images_dir`, sorted.
pub fn image_names(images_dir: &Path) -> Result<Vec<String>, SandboxError> {
    let rd = std::fs::read_dir(images_dir).map_err(|e| {
        SandboxError::Build(format!(
            "cannot read images directory {}: {e}",
            images_dir.display()
        ))
    })?;
    let mut names = Vec::new();
    for entry in rd.flatten() {
        let dir = entry.path();
        let is_rootfs = load_manifest(&dir).is_ok_and(|m| m.rootfs.is_some());
        if dir.join("Dockerfile").is_file() || is_rootfs {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Assembles the deterministic tar build context of one image directory and its SHA-256.
pub fn build_context(dir: &Path) -> Result<(Vec<u8>, String), SandboxError> {
    let manifest = load_manifest(dir)?;
    // Context path -> (host path, package that provides it, if from the host).
    let mut files: BTreeMap<String, (PathBuf, Option<String>)> = BTreeMap::new();
    collect_dir(dir, dir, &mut files)?;
    for hf in manifest.host_files {
        if !hf.source.is_file() {
            return Err(SandboxError::Build(format!(
                "{} is not installed: apt-get install {} (needed for {})",
                hf.package,
                hf.package,
                hf.source.display()
            )));
        }
        if hf.dest.starts_with('/') || hf.dest.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(SandboxError::Build(format!(
                "host_files dest {:?} must be a relative path without '..'",
                hf.dest
            )));
        }
        files.insert(hf.dest, (hf.source, Some(hf.package)));
    }
    let mut builder = tar::Builder::new(Vec::new());
    for (rel, (src, package)) in &files {
        let data = std::fs::read(src).map_err(|e| match package {
            Some(p) => SandboxError::Build(format!(
                "{} is not readable ({e}): apt-get install --reinstall {p}",
                src.display()
            )),
            None => SandboxError::Build(format!("{}: {e}", src.display())),
        })?;
        let mode = file_mode(src)?;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, rel, data.as_slice())
            .map_err(|e| SandboxError::Build(format!("tar {rel}: {e}")))?;
        if builder.get_ref().len() > MAX_CONTEXT_BYTES {
            return Err(SandboxError::Build(format!(
                "build context of {} exceeds {MAX_CONTEXT_BYTES} bytes",
                dir.display()
            )));
        }
    }
    let bytes = builder
        .into_inner()
        .map_err(|e| SandboxError::Build(format!("tar: {e}")))?;
    let sha = hex::encode(Sha256::digest(&bytes));
    Ok((bytes, sha))
}

fn file_mode(p: &Path) -> Result<u32, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(p)
        .map_err(|e| SandboxError::Build(format!("{}: {e}", p.display())))?
        .permissions()
        .mode();
    Ok(if m & 0o111 != 0 { 0o755 } else { 0o644 })
}

fn collect_dir(
    root: &Path,
    dir: &Path,
    out: &mut BTreeMap<String, (PathBuf, Option<String>)>,
) -> Result<(), SandboxError> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| SandboxError::Build(format!("{}: {e}", dir.display())))?;
    for entry in rd {
        let entry = entry.map_err(|e| SandboxError::Build(format!("{}: {e}", dir.display())))?;
        let path = entry.path();
        let ft = entry
            .file_type()
            .map_err(|e| SandboxError::Build(format!("{}: {e}", path.display())))?;
        if ft.is_dir() {
            collect_dir(root, &path, out)?;
        } else if ft.is_file() {
            let rel = path
                .strip_prefix(root)
                .expect("walked paths are under the root")
                .to_string_lossy()
                .into_owned();
            out.insert(rel, (path, None));
        }
    }
    Ok(())
}

impl DockerRuntime {
    /// Builds `images_dir/<name>` unless an image with the same content hash exists, then
    /// points `airlock/<name>:latest` at it. Progress goes to `progress`.
    pub async fn build_image(
        &self,
        images_dir: &Path,
        name: &str,
        opts: BuildOptions,
        progress: &mut dyn Write,
    ) -> Result<BuiltImage, SandboxError> {
        let dir = images_dir.join(name);
        if let Some(rootfs) = load_manifest(&dir)?.rootfs {
            return self
                .build_rootfs_image(&dir, name, &rootfs, opts, progress)
                .await;
        }
        if !dir.join("Dockerfile").is_file() {
            return Err(SandboxError::Build(format!(
                "{} has no Dockerfile; images: {}",
                dir.display(),
                image_names(images_dir)?.join(", ")
            )));
        }
        let (context, sha) = build_context(&dir)?;
        let repo = format!("{IMAGE_REPOSITORY_PREFIX}{name}");
        let content_tag = sha[..16].to_string();
        let tagged = format!("{repo}:{content_tag}");
        let latest = format!("{repo}:latest");
        let _ = writeln!(
            progress,
            "[{name}] build context {} bytes, sha256 {sha}",
            context.len()
        );
        if let Some(done) = self.existing(name, &sha, progress).await? {
            return Ok(done);
        }
        let labels = HashMap::from([
            (LABEL_CONTENT_SHA256.to_string(), sha.clone()),
            ("airlock.image".to_string(), name.to_string()),
        ]);
        let opts = BuildImageOptionsBuilder::default()
            .t(&tagged)
            .rm(true)
            .forcerm(true)
            .networkmode("none")
            .labels(&labels)
            .build();
        let transfers = self.transfers();
        let mut stream = transfers.build_image(
            opts,
            None,
            Some(bollard::body_full(bytes::Bytes::from(context))),
        );
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| SandboxError::Build(format!("[{name}] {e}")))?;
            if let Some(detail) = info.error_detail {
                return Err(SandboxError::Build(format!(
                    "[{name}] {}",
                    detail.message.unwrap_or_default()
                )));
            }
            if let Some(s) = info.stream {
                let s = s.trim_end();
                if !s.is_empty() {
                    let _ = writeln!(progress, "[{name}] {s}");
                }
            }
        }
        let id = self.image_id(&tagged).await?;
        self.tag(&tagged, &repo, "latest").await?;
        let _ = writeln!(progress, "[{name}] built {tagged} and {latest} ({id})");
        Ok(BuiltImage {
            name: name.to_string(),
            reference: latest,
            content_tag,
            content_sha256: sha,
            image_id: id,
            skipped: false,
        })
    }

    /// The already-built image with content hash `sha`, re-pointing `latest` at it.
    /// The content hash label of the image `reference`, or `None` when it is not present.
    pub async fn image_content_sha(&self, reference: &str) -> Option<Option<String>> {
        let img = self.docker().inspect_image(reference).await.ok()?;
        Some(
            img.config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(LABEL_CONTENT_SHA256).cloned()),
        )
    }

    async fn existing(
        &self,
        name: &str,
        sha: &str,
        progress: &mut dyn Write,
    ) -> Result<Option<BuiltImage>, SandboxError> {
        let repo = format!("{IMAGE_REPOSITORY_PREFIX}{name}");
        let content_tag = sha[..16].to_string();
        let tagged = format!("{repo}:{content_tag}");
        let Ok(existing) = self.docker().inspect_image(&tagged).await else {
            return Ok(None);
        };
        let label = existing
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(LABEL_CONTENT_SHA256).cloned());
        if label.as_deref() != Some(sha) {
            return Ok(None);
        }
        self.tag(&tagged, &repo, "latest").await?;
        let _ = writeln!(
            progress,
            "[{name}] up to date: {tagged} ({} MiB)",
            existing.size.unwrap_or(0) >> 20
        );
        Ok(Some(BuiltImage {
            name: name.to_string(),
            reference: format!("{repo}:latest"),
            content_tag,
            content_sha256: sha.to_string(),
            image_id: existing.id.unwrap_or_default(),
            skipped: true,
        }))
    }

    /// Builds a `[rootfs]` image: runs its script on the host, then imports the tar.
    async fn build_rootfs_image(
        &self,
        dir: &Path,
        name: &str,
        rootfs: &RootfsBuild,
        opts: BuildOptions,
        progress: &mut dyn Write,
    ) -> Result<BuiltImage, SandboxError> {
        use futures_util::TryStreamExt;
        use tokio::io::AsyncReadExt;
        let (script, sha, rust) = rootfs_inputs(dir, name, rootfs, opts)?;
        let rust_note = match &rust {
            Some((sysroot, _)) => format!("rust from {}", sysroot.display()),
            None => "no rust".to_string(),
        };
        let _ = writeln!(
            progress,
            "[{name}] rootfs image, inputs sha256 {sha}, {rust_note}"
        );
        if let Some(done) = self.existing(name, &sha, progress).await? {
            return Ok(done);
        }
        let started = std::time::Instant::now();
        let tmp = tempfile::tempdir()
            .map_err(|e| SandboxError::Build(format!("[{name}] temp dir: {e}")))?;
        let tar_path = tmp.path().join("rootfs.tar");
        let _ = writeln!(progress, "[{name}] running {}", script.display());
        let mut cmd = crate::process::command("bash");
        cmd.arg(&script)
            .env("AIRLOCK_ROOTFS_TAR", &tar_path)
            .env("AIRLOCK_IMAGE_DIR", dir)
            .env(
                "AIRLOCK_RUST_SYSROOT",
                rust.as_ref().map(|r| r.0.as_os_str()).unwrap_or_default(),
            )
            .stdin(crate::process::Stdio::Null)
            .stdout(std::io::stderr())
            .stderr(std::io::stderr());
        let status = tokio::task::spawn_blocking(move || cmd.status())
            .await
            .expect("waiting for the build script does not panic")
            .map_err(|e| SandboxError::Build(format!("[{name}] cannot run the script: {e}")))?;
        if !status.success() {
            return Err(SandboxError::Build(format!(
                "[{name}] {} failed ({status}); see its output above",
                rootfs.script
            )));
        }
        let tar_size = std::fs::metadata(&tar_path)
            .map_err(|e| {
                SandboxError::Build(format!("[{name}] the script wrote no rootfs tar: {e}"))
            })?
            .len();
        let _ = writeln!(
            progress,
            "[{name}] importing a {} MiB root filesystem",
            tar_size >> 20
        );
        let repo = format!("{IMAGE_REPOSITORY_PREFIX}{name}");
        let content_tag = sha[..16].to_string();
        let tagged = format!("{repo}:{content_tag}");
        let mut changes = rootfs.changes.clone();
        changes.push(format!("LABEL {LABEL_CONTENT_SHA256}={sha}"));
        changes.push(format!("LABEL airlock.image={name}"));
        let file = tokio::fs::File::open(&tar_path)
            .await
            .map_err(|e| SandboxError::Build(format!("[{name}] {e}")))?;
        // Streamed in 1 MiB chunks: the tar is never held in memory.
        let body = futures_util::stream::try_unfold(file, |mut f| async move {
            let mut buf = vec![0u8; 1 << 20];
            let n = f.read(&mut buf).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.truncate(n);
            Ok(Some((bytes::Bytes::from(buf), f)))
        });
        let docker = self
            .docker()
            .clone()
            .with_timeout(std::time::Duration::from_secs(
                crate::limits::IMPORT_TIMEOUT_SECS,
            ));
        let import = bollard::query_parameters::CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(&repo)
            .tag(&content_tag)
            .changes(changes)
            .build();
        let mut stream =
            docker.create_image(Some(import), Some(bollard::body_try_stream(body)), None);
        while let Some(info) = stream
            .try_next()
            .await
            .map_err(|e| SandboxError::Build(format!("[{name}] import: {e}")))?
        {
            if let Some(detail) = info.error_detail {
                return Err(SandboxError::Build(format!(
                    "[{name}] import: {}",
                    detail.message.unwrap_or_default()
                )));
            }
        }
        let image = self
            .docker()
            .inspect_image(&tagged)
            .await
            .map_err(|source| docker_err("inspect image")(source))?;
        self.tag(&tagged, &repo, "latest").await?;
        let _ = writeln!(
            progress,
            "[{name}] built {tagged} and {repo}:latest: {} MiB in {} s",
            image.size.unwrap_or(0) >> 20,
            started.elapsed().as_secs()
        );
        Ok(BuiltImage {
            name: name.to_string(),
            reference: format!("{repo}:latest"),
            content_tag,
            content_sha256: sha,
            image_id: image.id.unwrap_or_default(),
            skipped: false,
        })
    }

    async fn tag(&self, source: &str, repo: &str, tag: &str) -> Result<(), SandboxError> {
        self.docker()
            .tag_image(
                source,
                Some(
                    TagImageOptionsBuilder::default()
                        .repo(repo)
                        .tag(tag)
                        .build(),
                ),
            )
            .await
            .map_err(|source| docker_err("tag image")(source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_deterministic_and_content_addressed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        std::fs::write(d.path().join("rootfs/a"), "x").unwrap();
        let (a, sha_a) = build_context(d.path()).unwrap();
        let (b, sha_b) = build_context(d.path()).unwrap();
        assert_eq!(a, b);
        assert_eq!(sha_a, sha_b);
        std::fs::write(d.path().join("rootfs/a"), "y").unwrap();
        let (_, sha_c) = build_context(d.path()).unwrap();
        assert_ne!(sha_a, sha_c);
    }

    #[test]
    fn rootfs_directories_are_images_too() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("fs")).unwrap();
        std::fs::write(
            d.path().join("fs/image.toml"),
            "[rootfs]\nscript = \"b.sh\"\nchanges = [\"USER 1:1\"]\n",
        )
        .unwrap();
        std::fs::create_dir(d.path().join("df")).unwrap();
        std::fs::write(d.path().join("df/Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::create_dir(d.path().join("notes")).unwrap();
        assert_eq!(image_names(d.path()).unwrap(), ["df", "fs"]);
        std::fs::write(
            d.path().join("fs/image.toml"),
            "[rootfs]\nscrip = \"b.sh\"\n",
        )
        .unwrap();
        assert!(
            load_manifest(&d.path().join("fs")).is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn a_rootfs_script_is_in_the_image_directory_or_shared_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("fs");
        std::fs::create_dir(&img).unwrap();
        std::fs::write(img.join("own.sh"), "").unwrap();
        std::fs::write(d.path().join("shared.sh"), "").unwrap();
        assert_eq!(
            rootfs_script(&img, "fs", "own.sh").unwrap(),
            img.join("own.sh")
        );
        assert_eq!(
            rootfs_script(&img, "fs", "../shared.sh").unwrap(),
            d.path().join("shared.sh")
        );
        for bad in [
            "",
            "..",
            "../",
            "../../shared.sh",
            "/etc/passwd",
            "x/own.sh",
            "missing.sh",
            "../fs",
        ] {
            let e = rootfs_script(&img, "fs", bad).unwrap_err().to_string();
            assert!(e.contains("must be a file in"), "{bad}: {e}");
        }
    }

    #[test]
    fn missing_host_file_names_the_package() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(
            d.path().join("image.toml"),
            "[[host_files]]\nsource = \"/nonexistent/busybox\"\ndest = \"busybox\"\npackage = \"busybox-static\"\n",
        )
        .unwrap();
        let e = build_context(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("busybox-static is not installed: apt-get install busybox-static"),
            "{e}"
        );
    }

    #[test]
    fn hostile_dest_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(
            d.path().join("image.toml"),
            "[[host_files]]\nsource = \"/etc/hostname\"\ndest = \"../x\"\npackage = \"p\"\n",
        )
        .unwrap();
        assert!(build_context(d.path()).is_err());
    }
}

/// What [`DockerRuntime::copy_image_to`] did for one image on one engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Copied {
    pub reference: String,
    pub image_id: String,
    /// `false` when the engine already had the image with this id.
    pub copied: bool,
}

/// Chunks of an image export buffered between this engine and the one loading it.
const COPY_BUFFER_CHUNKS: usize = 16;

impl DockerRuntime {
    /// Makes `to` hold `reference` with exactly this engine's image id: a `docker save` stream
    /// from here into `to`'s image load endpoint (an image's id is its config's digest, so a
    /// loaded image keeps it). Nothing is sent when `to` already has that id; a load that
    /// ends with another id is an error.
    pub async fn copy_image_to(
        &self,
        to: &DockerRuntime,
        reference: &str,
    ) -> Result<Copied, SandboxError> {
        let want = self.image_id(reference).await?;
        match to.image_id(reference).await {
            Ok(id) if id == want => {
                return Ok(Copied {
                    reference: reference.to_string(),
                    image_id: want,
                    copied: false,
                });
            }
            Ok(_) | Err(SandboxError::ImageMissing { .. }) => {}
            Err(e) => return Err(e),
        }
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(COPY_BUFFER_CHUNKS);
        let from = self.docker().clone();
        let exported = reference.to_string();
        let feeder = tokio::spawn(async move {
            let mut stream = from.export_image(&exported);
            while let Some(chunk) = stream.next().await {
                let item = chunk.map_err(|e| std::io::Error::other(e.to_string()));
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    break;
                }
            }
        });
        let body =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|x| (x, rx)) },
            );
        let mut load = to.transfers().import_image_stream(
            bollard::query_parameters::ImportImageOptionsBuilder::default()
                .quiet(true)
                .build(),
            body,
            None,
        );
        while let Some(step) = load.next().await {
            let info = step.map_err(|source| docker_err("load image")(source))?;
            if let Some(e) = info.error_detail {
                return Err(SandboxError::Runtime(format!(
                    "loading {reference}: {}",
                    e.message.unwrap_or_default()
                )));
            }
        }
        let _ = feeder.await;
        let got = to.image_id(reference).await?;
        if got != want {
            return Err(SandboxError::Runtime(format!(
                "{reference} loaded as {got}, but it was built as {want}"
            )));
        }
        Ok(Copied {
            reference: reference.to_string(),
            image_id: want,
            copied: true,
        })
    }
}
