//! Child processes: every program Airlock starts (git, mkfs, mount, image build scripts) is
//! killed by the kernel when the thread that started it dies, however Airlock dies. A `git
//! checkout-index` left writing after `kill -9` would otherwise race recovery's removal of the
//! checkout it is writing into.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd`'s child receive SIGKILL when its parent dies (`PR_SET_PDEATHSIG`).
///
/// The kernel delivers the signal when the *thread* that forked the child exits. Airlock waits
/// for every child on the thread that spawned it (a tokio worker or a blocking-pool thread that
/// is busy until the child is reaped), so the signal only fires when Airlock itself is gone.
pub fn dies_with_parent(cmd: &mut Command) -> &mut Command {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed. It makes two raw syscalls (prctl, getppid) and builds an io::Error from
    // a raw errno, which allocates nothing; it touches no lock, no allocator and no shared state.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            // The parent may have died between fork and prctl: then nobody will ever send the
            // signal, so refuse to run at all.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc_esrch()));
            }
            Ok(())
        })
    };
    cmd
}

/// `ESRCH`: the process we were started for no longer exists.
fn libc_esrch() -> i32 {
    nix::errno::Errno::ESRCH as i32
}

/// A command for `program` that dies with Airlock, with stdin closed.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.stdin(std::process::Stdio::null());
    dies_with_parent(&mut cmd);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_killed_when_its_parent_dies() {
        // An intermediate thread starts `sleep 30` and exits at once: the kernel must kill
        // the sleep, because its parent (that thread) is gone.
        let child = std::thread::spawn(|| command("sleep").arg("30").spawn().unwrap())
            .join()
            .unwrap();
        let pid = child.id();
        let mut child = child;
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "child {pid} outlived its parent thread"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status:?}");
    }
}
