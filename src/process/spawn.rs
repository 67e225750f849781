//! The clone-and-exec that starts every child: `clone(CLONE_VM | CLONE_VFORK)` onto a stack of
//! its own, and a child that makes only raw system calls until `execve` (see the parent
//! module).

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc;

use super::CHILD_STACK_BYTES;

/// Everything the child needs, prepared before the clone so that it allocates nothing.
pub(super) struct Plan<'a> {
    pub(super) path: *const libc::c_char,
    pub(super) argv: *const *const libc::c_char,
    pub(super) envp: *const *const libc::c_char,
    pub(super) cwd: *const libc::c_char,
    /// The descriptors for 0, 1 and 2; -1 keeps Airlock's.
    pub(super) fds: [RawFd; 3],
    pub(super) parent: libc::pid_t,
    /// The errno of the step that failed, written by the child before it exits.
    pub(super) failed: &'a AtomicI32,
}

/// Clones a child that shares Airlock's memory until it execs (the calling thread waits until
/// then, as with `vfork`) and runs [`child_main`] in it.
pub(super) fn clone_and_exec(plan: &Plan<'_>) -> io::Result<libc::pid_t> {
    let stack = ChildStack::new()?;
    // Every signal is blocked on this thread across the clone, so that no handler of Airlock's
    // runs in the child while it shares Airlock's memory; the child puts the dispositions back
    // to default before it unblocks them.
    let mut all: libc::sigset_t = unsafe_zeroed_sigset();
    let mut old: libc::sigset_t = unsafe_zeroed_sigset();
    #[allow(unsafe_code)]
    // SAFETY: plain calls on sigset_t values owned by this frame; clone gets a stack that
    // stays mapped until it returns (CLONE_VFORK: after the child's exec or exit), a function
    // that only makes async-signal-safe calls, and a pointer to `plan`, which lives across the
    // whole call.
    let pid = unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_entry,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            plan as *const Plan<'_> as *mut libc::c_void,
        );
        let clone_errno = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_errno);
        }
        pid
    };
    drop(stack);
    Ok(pid)
}

fn unsafe_zeroed_sigset() -> libc::sigset_t {
    #[allow(unsafe_code)]
    // SAFETY: sigset_t is a plain bit array; all zeroes is the empty set.
    unsafe {
        std::mem::zeroed()
    }
}

/// The child's entry point (C ABI, on the child's own stack).
extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
    #[allow(unsafe_code)]
    // SAFETY: `arg` is the `Plan` clone_and_exec passed, alive until this child execs or exits
    // (the parent thread is suspended until then).
    let plan = unsafe { &*(arg as *const Plan<'_>) };
    child_main(plan)
}

/// Runs in the child: only raw system calls (through libc's thin wrappers) on data prepared
/// before the clone; no allocation, no lock, nothing that touches Airlock's shared state except
/// `plan.failed`. Never returns: it execs or exits.
fn child_main(plan: &Plan<'_>) -> ! {
    #[allow(unsafe_code)]
    // SAFETY: each call below is async-signal-safe and works on memory this child owns (its
    // stack) or the prepared plan; `_exit` ends the child without running any of Airlock's
    // exit handlers.
    unsafe {
        let fail = |errno: i32| -> ! {
            plan.failed.store(errno.max(1), Ordering::Release);
            libc::_exit(127)
        };
        let last = || *libc::__errno_location();
        // Back to default every disposition Airlock set (its handlers must not run here, and
        // an ignored SIGPIPE, which Rust sets, would be inherited across exec).
        let mut act: libc::sigaction = std::mem::zeroed();
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            if libc::sigaction(sig, std::ptr::null(), &mut act) != 0 {
                continue;
            }
            if sig == libc::SIGPIPE || act.sa_sigaction != libc::SIG_IGN {
                act.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            fail(last());
        }
        // The parent may have died between the clone and prctl: then nobody will ever send
        // the signal, so refuse to run at all.
        if libc::getppid() != plan.parent {
            fail(libc::ESRCH);
        }
        for (target, fd) in plan.fds.iter().enumerate() {
            let target = target as RawFd;
            if *fd < 0 {
                continue;
            }
            if *fd == target {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                if libc::fcntl(target, libc::F_SETFD, 0) != 0 {
                    fail(last());
                }
            } else if libc::dup2(*fd, target) < 0 {
                fail(last());
            }
        }
        if !plan.cwd.is_null() && libc::chdir(plan.cwd) != 0 {
            fail(last());
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(plan.path, plan.argv, plan.envp);
        fail(last())
    }
}

/// The child's stack: an anonymous mapping with a guard page at its low end.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    fn new() -> io::Result<ChildStack> {
        let page = 4096;
        let len = CHILD_STACK_BYTES + page;
        #[allow(unsafe_code)]
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                let e = io::Error::last_os_error();
                libc::munmap(base, len);
                return Err(e);
            }
            Ok(ChildStack { base, len })
        }
    }

    /// The stack's top, 16-byte aligned (the stack grows down).
    fn top(&self) -> *mut libc::c_void {
        (self.base as usize + self.len) as *mut libc::c_void
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: the mapping made in new(), no longer used: the child has exec'd or exited.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}
