//! Child processes: every program Airlock starts (git, mkfs, mount, image build scripts) is
//! killed by the kernel when the thread that started it dies, however Airlock dies. A `git
//! checkout-index` left writing after `kill -9` would otherwise race recovery's removal of the
//! checkout it is writing into.
//!
//! `PR_SET_PDEATHSIG` has to be set in the child, between its creation and `execve`. The
//! standard library's `pre_exec` hook can do that, but any hook makes it `fork()` the whole
//! process instead of using `posix_spawn` (which clones with `CLONE_VM | CLONE_VFORK`): with
//! the daemon's threads busy, a fork and the copy-on-write faults after it cost ~3 ms more per
//! child, and the candidate flow starts a git process for every step. So [`Command`] spawns
//! the way `posix_spawn` does: `clone(CLONE_VM | CLONE_VFORK)` onto a small stack of its own,
//! and the child, still sharing Airlock's memory, makes only raw system calls on data prepared
//! before the clone (signal dispositions back to default, `prctl`, `dup2`, `chdir`, the
//! signal mask, `execve`), then reports a failed exec through one shared integer. It offers
//! the part of `std::process::Command`'s interface Airlock uses.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc;

/// Bytes of stack the child runs on between the clone and `execve`: it calls a handful of
/// system-call wrappers and nothing else. A guard page below it turns an overflow into a
/// fault instead of a write into Airlock's memory.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Where a child's standard stream comes from or goes to.
#[derive(Debug)]
pub enum Stdio {
    /// Airlock's own stream.
    Inherit,
    /// `/dev/null`.
    Null,
    /// A pipe whose other end is [`Child::stdin`], [`Child::stdout`] or [`Child::stderr`].
    Piped,
    /// This file descriptor (the child gets a duplicate).
    Fd(OwnedFd),
}

impl Stdio {
    /// See [`Stdio::Piped`].
    pub fn piped() -> Stdio {
        Stdio::Piped
    }
    /// See [`Stdio::Null`].
    pub fn null() -> Stdio {
        Stdio::Null
    }
    /// See [`Stdio::Inherit`].
    pub fn inherit() -> Stdio {
        Stdio::Inherit
    }
}

impl From<io::Stderr> for Stdio {
    fn from(e: io::Stderr) -> Stdio {
        match e.as_fd().try_clone_to_owned() {
            Ok(fd) => Stdio::Fd(fd),
            // Without a duplicate the child's stream goes where Airlock's already goes.
            Err(_) => Stdio::Inherit,
        }
    }
}

impl From<std::fs::File> for Stdio {
    fn from(f: std::fs::File) -> Stdio {
        Stdio::Fd(f.into())
    }
}

/// A program to start, with its arguments, environment changes, directory and streams.
#[derive(Debug)]
pub struct Command {
    program: OsString,
    args: Vec<OsString>,
    /// Changes to the inherited environment: `None` removes the variable.
    env: BTreeMap<OsString, Option<OsString>>,
    cwd: Option<PathBuf>,
    stdin: Option<Stdio>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
}

/// A started child. Like `std::process::Child`, dropping it neither waits nor kills.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
    /// The write end of the child's stdin, when piped.
    pub stdin: Option<std::fs::File>,
    /// The read end of the child's stdout, when piped.
    pub stdout: Option<std::fs::File>,
    /// The read end of the child's stderr, when piped.
    pub stderr: Option<std::fs::File>,
}

/// A command for `program` that dies with Airlock, with stdin closed.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.stdin(Stdio::Null);
    cmd
}

impl Command {
    /// `program` with no arguments, Airlock's environment and streams.
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }

    /// Adds one argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Command {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self.arg(a);
        }
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(&mut self, key: impl AsRef<OsStr>, val: impl AsRef<OsStr>) -> &mut Command {
        self.env
            .insert(key.as_ref().to_owned(), Some(val.as_ref().to_owned()));
        self
    }

    /// Removes an environment variable from the child's environment.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Command {
        self.env.insert(key.as_ref().to_owned(), None);
        self
    }

    /// The child's working directory.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The child's stdin.
    pub fn stdin(&mut self, s: impl Into<Stdio>) -> &mut Command {
        self.stdin = Some(s.into());
        self
    }

    /// The child's stdout.
    pub fn stdout(&mut self, s: impl Into<Stdio>) -> &mut Command {
        self.stdout = Some(s.into());
        self
    }

    /// The child's stderr.
    pub fn stderr(&mut self, s: impl Into<Stdio>) -> &mut Command {
        self.stderr = Some(s.into());
        self
    }

    /// The arguments (without the program).
    pub fn get_args(&self) -> impl Iterator<Item = &OsStr> {
        self.args.iter().map(OsString::as_os_str)
    }

    /// Starts the child; unset streams are inherited.
    pub fn spawn(&mut self) -> io::Result<Child> {
        self.spawn_with(Stdio::Inherit, Stdio::Inherit)
    }

    /// Runs the child to its end with stdout and stderr captured (unless set otherwise) and
    /// stdin from `/dev/null` (unless set otherwise).
    pub fn output(&mut self) -> io::Result<Output> {
        if self.stdin.is_none() {
            self.stdin = Some(Stdio::Null);
        }
        self.spawn_with(Stdio::Piped, Stdio::Piped)?
            .wait_with_output()
    }

    /// Runs the child to its end; unset streams are inherited.
    pub fn status(&mut self) -> io::Result<ExitStatus> {
        let mut child = self.spawn()?;
        drop(child.stdin.take());
        child.wait()
    }

    fn spawn_with(&mut self, out_default: Stdio, err_default: Stdio) -> io::Result<Child> {
        let env = self.environment();
        let path = resolve_program(&self.program, &env)?;
        let cstr = |b: &[u8]| {
            CString::new(b).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte")
            })
        };
        let path = cstr(path.as_os_str().as_bytes())?;
        let mut argv = vec![cstr(self.program.as_bytes())?];
        for a in &self.args {
            argv.push(cstr(a.as_bytes())?);
        }
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in &env {
            let mut kv = k.clone().into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(cstr(&kv)?);
        }
        let cwd = match &self.cwd {
            Some(d) => Some(cstr(d.as_os_str().as_bytes())?),
            None => None,
        };
        let (stdin_child, stdin_parent) = child_end(self.stdin.take(), Stdio::Inherit, true)?;
        let (stdout_child, stdout_parent) = child_end(self.stdout.take(), out_default, false)?;
        let (stderr_child, stderr_parent) = child_end(self.stderr.take(), err_default, false)?;
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        let failed = AtomicI32::new(0);
        let plan = Plan {
            path: path.as_ptr(),
            argv: argv_ptrs.as_ptr(),
            envp: envp_ptrs.as_ptr(),
            cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            fds: [
                stdin_child.as_ref().map_or(-1, |f| f.as_raw_fd()),
                stdout_child.as_ref().map_or(-1, |f| f.as_raw_fd()),
                stderr_child.as_ref().map_or(-1, |f| f.as_raw_fd()),
            ],
            parent: nix::unistd::getpid().as_raw(),
            failed: &failed,
        };
        let pid = clone_and_exec(&plan)?;
        // The child has exec'd or exited: its ends of the pipes are its own now.
        drop((stdin_child, stdout_child, stderr_child));
        let errno = failed.load(Ordering::Acquire);
        if errno != 0 {
            let mut child = Child::new(pid);
            let _ = child.wait();
            return Err(io::Error::from_raw_os_error(errno));
        }
        let mut child = Child::new(pid);
        child.stdin = stdin_parent.map(std::fs::File::from);
        child.stdout = stdout_parent.map(std::fs::File::from);
        child.stderr = stderr_parent.map(std::fs::File::from);
        Ok(child)
    }

    /// Airlock's environment with this command's changes, as the child will see it.
    fn environment(&self) -> BTreeMap<OsString, OsString> {
        let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        for (k, v) in &self.env {
            match v {
                Some(v) => env.insert(k.clone(), v.clone()),
                None => env.remove(k),
            };
        }
        env
    }
}

/// The executable `program` names: itself when it holds a slash, otherwise the first
/// executable file of that name in the child's `PATH` (as `execvp` would search it).
fn resolve_program(program: &OsStr, env: &BTreeMap<OsString, OsString>) -> io::Result<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(program));
    }
    let path = env
        .get(OsStr::new("PATH"))
        .cloned()
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(&path) {
        let candidate = if dir.as_os_str().is_empty() {
            PathBuf::from(".").join(program)
        } else {
            dir.join(program)
        };
        if nix::unistd::access(&candidate, nix::unistd::AccessFlags::X_OK).is_ok()
            && std::fs::metadata(&candidate).is_ok_and(|m| m.is_file())
        {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} was not found on PATH", program.to_string_lossy()),
    ))
}

/// For one stream: the descriptor the child gets (`None`: inherit Airlock's) and the
/// parent's end of a pipe when piped. Every descriptor here is close-on-exec; `dup2` in the
/// child makes the copy it keeps.
fn child_end(
    s: Option<Stdio>,
    default: Stdio,
    is_input: bool,
) -> io::Result<(Option<OwnedFd>, Option<OwnedFd>)> {
    match s.unwrap_or(default) {
        Stdio::Inherit => Ok((None, None)),
        Stdio::Fd(fd) => Ok((Some(fd), None)),
        Stdio::Null => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?;
            Ok((Some(f.into()), None))
        }
        Stdio::Piped => {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
            Ok(if is_input {
                (Some(r), Some(w))
            } else {
                (Some(w), Some(r))
            })
        }
    }
}

pub mod leftovers;
mod spawn;
use spawn::{Plan, clone_and_exec};

impl Child {
    fn new(pid: libc::pid_t) -> Child {
        Child {
            pid,
            status: None,
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Sends SIGKILL, unless the child was already reaped.
    pub fn kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .map_err(io::Error::from)
    }

    /// Waits for the child to exit (closing its stdin first, as std does).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        if let Some(st) = self.status {
            return Ok(st);
        }
        let st = loop {
            let mut raw: libc::c_int = 0;
            #[allow(unsafe_code)]
            // SAFETY: waitpid on our own child with a valid out pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut raw, 0) };
            if r == self.pid {
                break ExitStatus::from_raw(raw);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        self.status = Some(st);
        Ok(st)
    }

    /// The child's status if it has exited, without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(st) = self.status {
            return Ok(Some(st));
        }
        let mut raw: libc::c_int = 0;
        #[allow(unsafe_code)]
        // SAFETY: waitpid on our own child with a valid out pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut raw, libc::WNOHANG) };
        match r {
            0 => Ok(None),
            r if r == self.pid => {
                let st = ExitStatus::from_raw(raw);
                self.status = Some(st);
                Ok(Some(st))
            }
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Reads stdout and stderr to their ends (whichever are piped, both at once so that
    /// neither pipe can fill and stall the child) and waits.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        drop(self.stdin.take());
        let (stdout, stderr) = read2(self.stdout.take(), self.stderr.take())?;
        let status = self.wait()?;
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

/// Reads two pipes to their ends at once.
fn read2(out: Option<std::fs::File>, err: Option<std::fs::File>) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let (mut out_buf, mut err_buf) = (Vec::new(), Vec::new());
    match (out, err) {
        (None, None) => {}
        (Some(mut o), None) => {
            o.read_to_end(&mut out_buf)?;
        }
        (None, Some(mut e)) => {
            e.read_to_end(&mut err_buf)?;
        }
        (Some(o), Some(e)) => {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            let mut open = [Some(o), Some(e)];
            let mut chunk = vec![0u8; 64 * 1024];
            while open.iter().any(Option::is_some) {
                let mut fds = Vec::with_capacity(2);
                let mut which = Vec::with_capacity(2);
                for (i, f) in open.iter().enumerate() {
                    if let Some(f) = f {
                        fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
                        which.push(i);
                    }
                }
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                }
                let ready: Vec<usize> = fds
                    .iter()
                    .zip(&which)
                    .filter(|(p, _)| p.revents().is_some_and(|r| !r.is_empty()))
                    .map(|(_, i)| *i)
                    .collect();
                drop(fds);
                for i in ready {
                    let f = open[i].as_mut().expect("polled streams are open");
                    let n = match f.read(&mut chunk) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    };
                    if n == 0 {
                        open[i] = None;
                    } else if i == 0 {
                        out_buf.extend_from_slice(&chunk[..n]);
                    } else {
                        err_buf.extend_from_slice(&chunk[..n]);
                    }
                }
            }
        }
    }
    Ok((out_buf, err_buf))
}

/// Makes a `std::process::Command`'s child receive SIGKILL when its parent thread dies, for
/// the few callers that need std's own type (the test suite's daemons, which it reads
/// through std's `Child`). Such a child is forked rather than cloned: see the module
/// documentation for what that costs.
pub fn dies_with_parent(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed. It makes two raw syscalls (prctl, getppid) and builds an io::Error from
    // a raw errno, which allocates nothing; it touches no lock, no allocator and no shared state.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(
                    nix::errno::Errno::ESRCH as i32,
                ));
            }
            Ok(())
        })
    };
    cmd
}

/// Writes `input` to a child's stdin from a thread of its own (so that a child that fills its
/// stdout before reading all of stdin cannot deadlock against us), returning the thread.
pub fn feed(mut stdin: std::fs::File, input: Vec<u8>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    })
}

#[cfg(test)]
mod tests;
