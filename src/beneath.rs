//! Paths beneath a trusted root, resolved without following any symlink.
//!
//! Airlock creates everything under its data dir through a [`Root`]: each path is opened with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` relative to a directory descriptor, so a
//! symlink planted anywhere beneath the root (a swapped `checkouts/<key>/tree`, say) makes the
//! call fail with `ELOOP` instead of sending root's writes elsewhere. Kernels without `openat2`
//! (before 5.6, or seccomp sandboxes that answer `ENOSYS`/`EPERM`) get a component-by-component
//! walk with `O_NOFOLLOW`, which refuses the same things.

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// How often `openat2` is retried when the kernel reports a concurrent rename (`EAGAIN`).
const OPENAT2_EAGAIN_RETRIES: u32 = 4;

/// The identity of a file: device and inode. Two opens that give the same identity reached the
/// same file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// A trusted directory; every path handed to it is relative and resolved beneath it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// Refuses absolute paths, `.`/`..` components and empty paths before any syscall.
fn check_relative(rel: &Path) -> std::io::Result<()> {
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a plain relative path", rel.display()),
        ));
    }
    Ok(())
}

impl Root {
    /// Opens `path` (which must be a directory, and not itself a symlink) as a root.
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        Ok(Root {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// A new descriptor of the root directory itself (for reading its entries).
    pub fn reopen(&self, flags: OFlag) -> std::io::Result<OwnedFd> {
        nix::fcntl::openat(
            &self.fd,
            ".",
            flags | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)
    }

    /// The root's path, for messages and for handing to programs that need one.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` beneath the root with `flags`, never following a symlink.
    pub fn open_at(&self, rel: &Path, flags: OFlag, mode: Mode) -> std::io::Result<OwnedFd> {
        check_relative(rel)?;
        let flags = flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
        let how = || {
            OpenHow::new()
                .flags(flags)
                .mode(mode)
                .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS)
        };
        for _ in 0..=OPENAT2_EAGAIN_RETRIES {
            match nix::fcntl::openat2(&self.fd, rel, how()) {
                Ok(fd) => return Ok(fd),
                Err(Errno::EAGAIN) => continue,
                Err(Errno::ENOSYS | Errno::EPERM) => return self.walk_open(rel, flags, mode),
                Err(e) => return Err(io(e)),
            }
        }
        Err(io(Errno::EAGAIN))
    }

    /// The fallback: one component at a time, each opened with `O_NOFOLLOW`.
    fn walk_open(&self, rel: &Path, flags: OFlag, mode: Mode) -> std::io::Result<OwnedFd> {
        let comps: Vec<_> = rel.components().collect();
        let mut dir = nix::fcntl::openat(
            &self.fd,
            ".",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        for (i, c) in comps.iter().enumerate() {
            let name = c.as_os_str();
            let last = i + 1 == comps.len();
            let f = if last {
                flags
            } else {
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
            };
            dir = nix::fcntl::openat(&dir, name, f, mode).map_err(|e| match e {
                // A symlink met with O_PATH|O_NOFOLLOW opens the link itself; O_DIRECTORY then
                // refuses it with ENOTDIR. Report it as the symlink it is.
                Errno::ENOTDIR if !last => io(Errno::ELOOP),
                e => io(e),
            })?;
        }
        Ok(dir)
    }

    /// Opens the directory `rel` (for use as a root of its own).
    pub fn open_dir(&self, rel: &Path) -> std::io::Result<Root> {
        let fd = self.open_at(rel, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())?;
        Ok(Root {
            fd,
            path: self.path.join(rel),
        })
    }

    /// Creates the directory `rel` with `mode`; its parent is resolved beneath the root.
    /// Returns `Ok(false)` when it already existed as a directory (not a symlink).
    pub fn mkdir(&self, rel: &Path, mode: u32) -> std::io::Result<bool> {
        check_relative(rel)?;
        let name = rel
            .file_name()
            .expect("a checked relative path has a last component");
        let parent = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => self.open_at(p, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty())?,
            None => nix::fcntl::openat(
                &self.fd,
                ".",
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(io)?,
        };
        match nix::sys::stat::mkdirat(&parent, name, Mode::from_bits_truncate(mode)) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => {
                // Only an existing real directory counts; a symlink there is refused.
                self.open_dir(rel)?;
                Ok(false)
            }
            Err(e) => Err(io(e)),
        }
    }

    /// Creates the regular file `rel`, which must not exist, and returns it open for writing.
    pub fn create_file(&self, rel: &Path, mode: u32) -> std::io::Result<std::fs::File> {
        let fd = self.open_at(
            rel,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY,
            Mode::from_bits_truncate(mode),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// The identity of `rel` (or of the root itself when `rel` is `None`), without following
    /// symlinks.
    pub fn identity(&self, rel: Option<&Path>) -> std::io::Result<Identity> {
        let st = match rel {
            Some(rel) => {
                let fd = self.open_at(rel, OFlag::O_PATH, Mode::empty())?;
                nix::sys::stat::fstat(fd.as_fd()).map_err(io)?
            }
            None => nix::sys::stat::fstat(self.fd.as_fd()).map_err(io)?,
        };
        Ok(Identity {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_and_escapes_beneath_the_root_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        assert!(root.mkdir(Path::new("a"), 0o700).unwrap());
        assert!(!root.mkdir(Path::new("a"), 0o700).unwrap(), "exists");
        assert!(root.mkdir(Path::new("a/b"), 0o700).unwrap());
        std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("rel")).unwrap();
        for bad in ["link/x", "rel/b/x", "link", "../x", "/etc", "a/../a/x", "."] {
            let e = root.mkdir(Path::new(bad), 0o700);
            assert!(e.is_err(), "{bad} was accepted");
        }
        assert!(root.create_file(Path::new("link/f"), 0o600).is_err());
        assert!(root.create_file(Path::new("rel/f"), 0o600).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let f = root.create_file(Path::new("a/f"), 0o600);
        assert!(f.is_ok());
        assert!(root.create_file(Path::new("a/f"), 0o600).is_err(), "O_EXCL");
        // The fallback walk refuses the same things.
        for bad in ["link/x", "rel/b"] {
            assert!(
                root.walk_open(
                    Path::new(bad),
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
                    Mode::empty()
                )
                .is_err(),
                "{bad}"
            );
        }
        let a = root.identity(Some(Path::new("a"))).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(a.ino, std::fs::metadata(d.path().join("a")).unwrap().ino());
    }
}
