//! Processes an OCI runtime leaves behind on this host for a container the engine no longer
//! has: gVisor's sandbox and gofer after a failed create or start (runsc leaves them running
//! when it refuses to start), and the containerd shim that watched them. Found by the
//! container's full id on their command lines, never by name, and ended with `SIGKILL`.

use std::path::Path;

/// The programs whose leftovers are ended: gVisor's (`runsc`, `runsc-sandbox`, `runsc-gofer`)
/// and containerd's shims (`containerd-shim-runc-v2`, ...).
const RUNTIME_PROGRAMS: [&str; 2] = ["runsc", "containerd-shim"];

/// Sends `SIGKILL` to every process on this host (under `proc`, normally `/proc`) whose program
/// is a runtime's and whose command line names `container_id` (a full, 64-hex container id);
/// returns the pids ended. An id of any other form ends nothing.
pub fn end_runtime_leftovers(proc: &Path, container_id: &str) -> Vec<i32> {
    if container_id.len() != 64 || !container_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return vec![];
    }
    let Ok(entries) = std::fs::read_dir(proc) else {
        return vec![];
    };
    let mut ended = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if names_leftover(&cmdline, container_id) {
            let ok = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok();
            if ok {
                tracing::warn!(
                    pid,
                    container_id,
                    "ended a runtime process left for a removed container"
                );
                ended.push(pid);
            }
        }
    }
    ended
}

/// Whether a NUL-separated command line is a runtime program's naming `container_id`.
fn names_leftover(cmdline: &[u8], container_id: &str) -> bool {
    let mut args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy);
    let Some(program) = args.next() else {
        return false;
    };
    let base = program.rsplit('/').next().unwrap_or(&program).to_string();
    RUNTIME_PROGRAMS.iter().any(|p| base.starts_with(p)) && args.any(|a| a.contains(container_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "2f634656b8c48b0a5ca5d5c1bcd45c135cd9b7e7366f6e16439f7be8cc9359cb";

    #[test]
    fn a_runtime_program_naming_the_id_is_a_leftover_and_nothing_else_is() {
        let line = |args: &[&str]| args.join("\0").into_bytes();
        for args in [
            vec![
                "runsc-gofer",
                "--root=/x",
                &format!("--log=/x/{ID}/log.json"),
            ],
            vec!["runsc-sandbox", "--root=/x", "boot", ID],
            vec![
                "/usr/bin/containerd-shim-runc-v2",
                "-namespace",
                "n",
                "-id",
                ID,
            ],
        ] {
            assert!(names_leftover(&line(&args), ID), "{args:?}");
        }
        for args in [
            // Another program naming the id (a shell, a log reader) is never ended.
            vec!["sh", "-c", ID],
            vec!["tail", &format!("/x/{ID}/log.json")],
            // A runtime program for another container.
            vec!["runsc-sandbox", "boot", &"a".repeat(64)],
            vec![],
        ] {
            assert!(!names_leftover(&line(&args), ID), "{args:?}");
        }
    }

    #[test]
    fn an_id_that_is_not_a_full_container_id_ends_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "abc", &ID[..63], &format!("{}z", &ID[..63])] {
            assert_eq!(end_runtime_leftovers(dir.path(), bad), Vec::<i32>::new());
        }
    }
}
