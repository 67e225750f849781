//! patch.apply under crashes: a kill at every apply phase recovers, at the next start, to
//! exactly the pre-images or exactly the post-images; the rollback artifact and its directory
//! are durable before the first rename into the worktree; a corrupt rollback artifact is
//! quarantined and never used. Real Docker, a real worktree, a real daemon killed.

use crate::serve_apply::{approved, files, post, server, strays, worktree};
use crate::support::daemon::{ALICE, BOB, Server};
use crate::support::governed::validated;
use crate::support::http::request;
use serde_json::{Value, json};

/// A daemon that died mid-apply: the dead daemon, the worktree before, the proposal id and
/// the validation.
type DiedApplying = (Server, Vec<(String, String)>, Value, Value);

/// A governed daemon on real Docker that died at crash point `point` while applying a
/// validated, approved proposal.
fn died_applying_at(point: &str) -> Option<DiedApplying> {
    let mut s = server()?;
    let pre = worktree(&s);
    let (id, rev) = approved(&s, json!([]), "a");
    let v = validated(&s, &id, &rev, "a");
    s.restart(Some(point));
    let body = json!({"workspace_id": "ws1", "proposal_id": id,
                      "validation_id": v["validation_id"], "idempotency_key": "apply-1"});
    let resp = request(
        &s.addr,
        "POST",
        "/api/v1/patch.apply",
        Some(ALICE),
        body.to_string().as_bytes(),
    );
    assert!(
        resp.is_none(),
        "{point}: the daemon should have died mid-apply: {resp:?}"
    );
    s.wait_dead();
    Some((s, pre, id, v))
}

#[test]
fn a_crash_at_every_apply_phase_recovers_to_exactly_pre_or_exactly_post() {
    for (point, want_status, want_files) in [
        ("apply_after_prepared", "cancelled", false),
        ("apply_after_staged", "cancelled", false),
        ("apply_after_installing", "applied", true),
    ] {
        let Some((mut s, pre, id, v)) = died_applying_at(point) else {
            return;
        };
        // The next start recovers from the files before it listens.
        s.restart(None);
        let listed = s.ok(BOB, "transaction.list", json!({"workspace_id": "ws1"}));
        let t = &listed["transactions"][0];
        assert_eq!(t["status"], want_status, "{point}: {listed}");
        let files = worktree(&s);
        if want_files {
            assert_eq!(files, post(), "{point}");
        } else {
            assert_eq!(files, pre, "{point}");
            // The validation still holds: a new apply succeeds.
            let a = s.ok(
                ALICE,
                "patch.apply",
                json!({"workspace_id": "ws1", "proposal_id": id,
                       "validation_id": v["validation_id"], "idempotency_key": "apply-2"}),
            );
            assert_eq!(a["transaction"]["status"], "applied", "{point}: {a}");
            assert_eq!(worktree(&s), post(), "{point}");
        }
    }
}

#[test]
fn the_rollback_artifact_and_its_directory_are_fsynced_before_the_first_rename_into_the_worktree() {
    let Some(s) = server() else { return };
    let (id, rev) = approved(&s, json!([]), "a");
    let v = validated(&s, &id, &rev, "a");
    // Trace the live daemon (every thread) while it applies.
    let trace = s.dir.path().join("apply.trace");
    let mut strace = std::process::Command::new("strace")
        .args([
            "-f",
            "-y",
            "-qq",
            "-e",
            "trace=fsync,fdatasync,rename,renameat,renameat2,openat,unlinkat",
            "-o",
        ])
        .arg(&trace)
        .args(["-p", &s.pid().to_string()])
        .spawn()
        .expect("strace runs (scripts/install-prereqs.sh installs it)");
    // Wait until strace traces every thread of the daemon (their TracerPid), rather than
    // guessing how long attaching takes on a loaded machine; threads made later are followed
    // by -f.
    let tracer = strace.id().to_string();
    crate::support::daemon::wait_for(
        || {
            let tasks = std::fs::read_dir(format!("/proc/{}/task", s.pid())).unwrap();
            tasks.flatten().all(|t| {
                std::fs::read_to_string(t.path().join("status")).is_ok_and(|st| {
                    st.lines()
                        .any(|l| l.split_whitespace().eq(["TracerPid:", tracer.as_str()]))
                })
            })
        },
        "strace attaches to every thread of the daemon",
    );
    let a = s.ok(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply-1"}),
    );
    assert_eq!(a["transaction"]["status"], "applied");
    let _ = nix_kill(strace.id());
    let _ = strace.wait();
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let tx = a["transaction"]["transaction_id"].as_str().unwrap();
    let artifact = format!("{tx}.rollback.json");
    let find = |what: &str, pred: &dyn Fn(&str) -> bool| {
        lines
            .iter()
            .position(|l| pred(l))
            .unwrap_or_else(|| panic!("no {what} in the trace:\n{text}"))
    };
    let fsync_tmp = find("fsync of the artifact's temp file", &|l: &str| {
        l.contains("fsync(") && l.contains(&format!(".{artifact}"))
    });
    let rename = find("rename of the artifact into place", &|l: &str| {
        (l.contains("rename(") || l.contains("renameat")) && l.contains(&format!("/{artifact}\""))
    });
    let fsync_dir = rename
        + lines[rename..]
            .iter()
            .position(|l| l.contains("fsync(") && l.contains("/transactions>"))
            .unwrap_or_else(|| {
                panic!("no fsync of the transactions directory after the rename:\n{text}")
            });
    let first_install = find("a rename into the worktree", &|l: &str| {
        l.contains("renameat2(") && l.contains(".airlock-stage-")
    });
    assert!(
        fsync_tmp < rename && rename < fsync_dir && fsync_dir < first_install,
        "order: fsync temp {fsync_tmp}, rename {rename}, fsync dir {fsync_dir}, first install {first_install}\n{text}"
    );
    // Every staged file was fsynced before the artifact named it.
    let staged_fsyncs = lines[..fsync_tmp]
        .iter()
        .filter(|l| l.contains("fsync(") && l.contains(".airlock-stage-"))
        .count();
    assert!(
        staged_fsyncs >= 2,
        "staged files fsynced first: {staged_fsyncs}\n{text}"
    );
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    let st = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()?;
    if st.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("kill failed"))
    }
}

/// A rollback artifact that fails its checksum after a crash is quarantined and never used:
/// interrupted in `prepared`, the staged files are removed by their names (nothing visible had
/// changed); interrupted in `installing`, every path is left as it is and the transaction
/// needs attention, naming the quarantined file.
#[test]
fn a_corrupt_rollback_artifact_is_quarantined_and_never_used() {
    for (point, want_status) in [
        ("apply_after_staged", "cancelled"),
        ("apply_after_installing", "needs_attention"),
    ] {
        let Some((mut s, pre, _, _)) = died_applying_at(point) else {
            return;
        };
        let txdir = s.dir.path().join("data/transactions");
        let artifact = std::fs::read_dir(&txdir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(".rollback.json"))
            .unwrap_or_else(|| panic!("{point}: no artifact"));
        let mut env: Value = serde_json::from_slice(&std::fs::read(&artifact).unwrap()).unwrap();
        assert_eq!(env["sha256"].as_str().unwrap().len(), 64);
        env["sha256"] = json!("0".repeat(64));
        std::fs::write(&artifact, env.to_string()).unwrap();
        s.restart(None);
        let listed = s.ok(BOB, "transaction.list", json!({"workspace_id": "ws1"}));
        let t = &listed["transactions"][0];
        assert_eq!(t["status"], want_status, "{point}: {listed}");
        assert!(
            !artifact.exists(),
            "{point}: the corrupt artifact stays in place"
        );
        let q: Vec<_> = std::fs::read_dir(txdir.join("quarantine"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(q.len(), 1, "{point}: {q:?}");
        // Either way the touched paths hold exactly their pre-images: the renames had not
        // begun. Without a usable artifact the staged files of an install are evidence, left
        // for the operator; those of a preparation are removed.
        if want_status == "needs_attention" {
            let reason = t["blocked_reason"].as_str().unwrap();
            assert!(
                reason.contains("quarantined") && reason.contains("checksum"),
                "{reason}"
            );
            let phases = s.ok(
                BOB,
                "transaction.phases",
                json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
            );
            assert_eq!(
                phases["phases"][2]["failure_code"], "artifact_unusable",
                "{phases}"
            );
            assert_eq!(files(&s), pre, "{point}");
            assert!(!strays(&s).is_empty(), "{point}");
        } else {
            assert_eq!(worktree(&s), pre, "{point}");
        }
    }
}
