//! The filesystem a checkout lives on. By default every job gets its own: a sparse ext4 image
//! without a journal under `checkouts/<key>/disk.img`, sized by the profile's `disk_bytes` and
//! `inodes`, loop-mounted `nosuid,nodev` at `checkouts/<key>/mnt`; the tree is `mnt/tree`. A job
//! that fills it gets `ENOSPC` inside its own filesystem and never touches the host's. The
//! image is unmounted (which detaches the loop device) and deleted with the checkout.
//!
//! `checkout_filesystem = "directory"` keeps the older layout (a plain directory on the data
//! dir's filesystem, no quota) for hosts without loop devices or without root.

use super::StagingError;
use crate::beneath::{Identity, Root};
use crate::limits;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How checkouts get their filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CheckoutFs {
    /// A loop-mounted ext4 image per job with these limits.
    Loop { disk_bytes: u64, inodes: u64 },
    /// A directory on the data dir's filesystem; no disk or inode quota.
    Directory,
}

/// The layout of one checkout directory (`checkouts/<key>/`).
pub const DISK_IMAGE: &str = "disk.img";
/// Mount point of the job's filesystem inside the checkout directory.
pub const MOUNT_POINT: &str = "mnt";

/// Why loop-mounted checkouts cannot work on this host, or `None` when they can.
pub fn loop_support_problem() -> Option<String> {
    let fix =
        "set checkout_filesystem = \"directory\" in the config to run without per-job disk quotas";
    if !nix::unistd::geteuid().is_root() {
        return Some(format!(
            "per-job checkout filesystems need root (loop devices and mount); Airlock runs as uid {}: run it as root, or {fix}",
            nix::unistd::geteuid()
        ));
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some(format!(
            "per-job checkout filesystems need loop devices, and /dev/loop-control does not exist: load the loop module (modprobe loop) or, in a container, pass the loop devices through; or {fix}"
        ));
    }
    for tool in ["mkfs.ext4", "mount"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            return Some(format!(
                "per-job checkout filesystems need {tool} on PATH (apt-get install e2fsprogs mount); or {fix}"
            ));
        }
    }
    None
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StagingError + 'a {
    move |source| StagingError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn run_tool(mut cmd: crate::process::Command, what: &str) -> Result<(), StagingError> {
    let out = cmd.output().map_err(|e| StagingError::Io {
        op: "run",
        path: PathBuf::from(what),
        source: e,
    })?;
    if !out.status.success() {
        return Err(StagingError::Space(format!(
            "{what} failed (exit {:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Job `key`'s checkout directory holding nothing but empty directories down to where its
/// tree will be ([`tree_rel`]), made before anything is staged, so a container can be created
/// with that path as its bind source while the tree is staged: the engine resolves the path
/// again when it starts the container, and the staged tree is checked to be there just
/// before. Refused when the checkout directory exists. Staging then takes the reservation
/// over ([`allocate`] accepts a checkout directory holding exactly this).
pub fn reserve(checkouts: &Root, key: &str, fs: CheckoutFs) -> Result<PathBuf, StagingError> {
    let dir = checkouts.path().join(key);
    let created = checkouts
        .mkdir(Path::new(key), 0o700)
        .map_err(io("create checkout dir", &dir))?;
    if !created {
        return Err(StagingError::Space(format!(
            "checkout dir {} already exists",
            dir.display()
        )));
    }
    let mut rel = PathBuf::from(key);
    for part in tree_rel(fs).components() {
        rel.push(part);
        checkouts
            .mkdir(&rel, 0o755)
            .map_err(io("reserve checkout tree", &checkouts.path().join(&rel)))?;
    }
    Ok(checkouts.path().join(rel))
}

/// Whether checkout directory `key` holds exactly what [`reserve`] makes: one real directory
/// at each step down to the tree's path, and the tree's directory empty.
pub fn is_reservation(checkouts: &Root, key: &str, fs: CheckoutFs) -> bool {
    let mut rel = PathBuf::from(key);
    let mut below = tree_rel(fs)
        .components()
        .map(|c| c.as_os_str().to_os_string())
        .collect::<Vec<_>>()
        .into_iter();
    loop {
        let Ok(dir) = checkouts.open_dir(&rel) else {
            return false;
        };
        let Ok(entries) = std::fs::read_dir(dir.path()) else {
            return false;
        };
        let names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
        match below.next() {
            None => return names.is_empty(),
            Some(next) if names == [next.clone()] => rel.push(next),
            Some(_) => return false,
        }
    }
}

/// Turns checkout directory `key`, made from a [`reserve`]ation, back into exactly that
/// reservation: its filesystems unmounted (the reserved path beneath them is there again at
/// once, so it never stops naming a directory), everything else in it removed.
pub fn back_to_reservation(
    checkouts: &Root,
    key: &str,
    fs: CheckoutFs,
) -> Result<(), StagingError> {
    let dir = checkouts.path().join(key);
    unmount(&dir)?;
    let keep = tree_rel(fs)
        .components()
        .next()
        .map(|c| c.as_os_str().to_os_string());
    let entries = std::fs::read_dir(&dir).map_err(io("list checkout dir", &dir))?;
    for entry in entries {
        let entry = entry.map_err(io("list checkout dir", &dir))?;
        if Some(entry.file_name()) == keep {
            continue;
        }
        let path = entry.path();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        removed.map_err(io("remove from checkout dir", &path))?;
    }
    if is_reservation(checkouts, key, fs) {
        Ok(())
    } else {
        Err(StagingError::Space(format!(
            "checkout dir {} is not its reservation again after the filesystems beneath it were unmounted",
            dir.display()
        )))
    }
}

/// A checkout directory with its tree ready for git to fill: `(tree path, tree identity)`.
/// The directory must not exist, or hold exactly a [`reserve`]ation: a loop filesystem is
/// then formatted with the reserved tree's directory already in it, so the reserved path names
/// a directory before, across and after the mount.
pub(super) fn allocate(
    checkouts: &Root,
    key: &str,
    fs: CheckoutFs,
) -> Result<(PathBuf, Identity), StagingError> {
    let dir = checkouts.path().join(key);
    checkouts
        .mkdir(Path::new(key), 0o700)
        .map_err(io("create checkout dir", &dir))
        .and_then(|created| {
            if created || is_reservation(checkouts, key, fs) {
                Ok(())
            } else {
                Err(StagingError::Space(format!(
                    "checkout dir {} already exists",
                    dir.display()
                )))
            }
        })?;
    let co = checkouts
        .open_dir(Path::new(key))
        .map_err(io("open checkout dir", &dir))?;
    let tree_parent = match fs {
        CheckoutFs::Directory => co,
        CheckoutFs::Loop { disk_bytes, inodes } => {
            let img = dir.join(DISK_IMAGE);
            let f = co
                .create_file(Path::new(DISK_IMAGE), 0o600)
                .map_err(io("create disk image", &img))?;
            // Sparse: blocks are only used on the data dir's filesystem as the job writes.
            f.set_len(disk_bytes).map_err(io("size disk image", &img))?;
            drop(f);
            let mnt = dir.join(MOUNT_POINT);
            co.mkdir(Path::new(MOUNT_POINT), 0o755)
                .map_err(io("create mount point", &mnt))?;
            let before = co
                .identity(Some(Path::new(MOUNT_POINT)))
                .map_err(io("stat mount point", &mnt))?;
            let mut mkfs = crate::process::command("mkfs.ext4");
            mkfs.args(["-q", "-F", "-O", "^has_journal", "-m", "0", "-b", "4096"])
                .arg("-N")
                .arg(inodes.to_string())
                .args(["-E", "nodiscard,lazy_itable_init=1,root_owner=0:0"])
                // What the mount point holds (a reservation's empty tree directory, or
                // nothing) is in the filesystem from the start.
                .arg("-d")
                .arg(&mnt)
                .arg(&img);
            run_tool(mkfs, "mkfs.ext4")?;
            let mut mount = crate::process::command("mount");
            mount
                .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noatime"])
                .arg(&img)
                .arg(&mnt);
            run_tool(mount, "mount")?;
            // The mount must sit exactly on the directory created above: a new filesystem's
            // root in place of that directory, reached without any symlink.
            let root = co
                .open_dir(Path::new(MOUNT_POINT))
                .map_err(io("open mount", &mnt))?;
            let after = root.identity(None).map_err(io("stat mount", &mnt))?;
            if after.dev == before.dev {
                return Err(StagingError::Space(format!(
                    "{} is not the mounted job filesystem after mount",
                    mnt.display()
                )));
            }
            root
        }
    };
    tree_parent
        .mkdir(Path::new("tree"), 0o755)
        .map_err(io("create checkout tree", tree_parent.path()))?;
    let identity = tree_parent
        .identity(Some(Path::new("tree")))
        .map_err(io("stat checkout tree", tree_parent.path()))?;
    Ok((tree_parent.path().join("tree"), identity))
}

/// The tree path of a checkout directory for this kind of filesystem.
pub fn tree_rel(fs: CheckoutFs) -> PathBuf {
    match fs {
        CheckoutFs::Directory => PathBuf::from("tree"),
        CheckoutFs::Loop { .. } => Path::new(MOUNT_POINT).join("tree"),
    }
}

/// True when `mnt` is a mount point (its device differs from its parent's).
pub(super) fn is_mounted(mnt: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::symlink_metadata(mnt),
        mnt.parent().map(std::fs::symlink_metadata),
    ) {
        (Ok(m), Some(Ok(p))) => m.is_dir() && m.dev() != p.dev(),
        _ => false,
    }
}

/// Unmounts a checkout's job filesystem if it is mounted, retrying while it is busy (a process
/// that outlived its job, or a git child that has not died yet). Unmounting detaches the loop
/// device. Fails, leaving everything in place for the next pass, if it stays busy.
pub(super) fn unmount(dir: &Path) -> Result<(), StagingError> {
    let mnt = dir.join(MOUNT_POINT);
    // An overlay checkout's tree is a mount on the job's filesystem: it goes first.
    unmount_at(&mnt.join("tree"))?;
    unmount_at(&mnt)
}

/// Unmounts whatever is mounted at `mnt` (nothing if it is not a mount point), retrying while
/// it is busy.
pub(super) fn unmount_at(mnt: &Path) -> Result<(), StagingError> {
    let mnt = mnt.to_path_buf();
    let mut attempt = 0;
    while is_mounted(&mnt) {
        attempt += 1;
        match nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()) {
            Ok(()) => continue,
            Err(nix::errno::Errno::EBUSY) if attempt < limits::UNMOUNT_ATTEMPTS => {
                std::thread::sleep(limits::UNMOUNT_RETRY_DELAY * attempt);
            }
            Err(e) => {
                return Err(StagingError::Space(format!(
                    "cannot unmount the job filesystem at {} after {attempt} attempt(s): {e}",
                    mnt.display()
                )));
            }
        }
    }
    Ok(())
}
