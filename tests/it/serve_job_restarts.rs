//! Jobs across a daemon's restarts, over real HTTP on real Docker: kill -9 with jobs queued and
//! running resumes the queued exactly once and judges the running one; a queued job whose
//! profile changed while the daemon was down is settled `error` saying so, and only once its
//! artifact is written (until then it stays queued, and the daemon starts all the same).

use crate::support::jobs::{id, settled, show, submit};
use crate::support::*;
use serde_json::{Value, json};

#[test]
fn kill_9_with_jobs_queued_and_running_resumes_the_queued_once_and_judges_the_running() {
    if !docker() {
        return;
    }
    let mut s = Server::start_with("max_concurrent_verifications = 1\n");
    let since = unix_now().saturating_sub(1);
    let running = submit(
        &s,
        ALICE,
        "ws1",
        &["sh", "-c", "echo started; sleep 60"],
        "r",
    );
    let q1 = submit(&s, ALICE, "ws1", &["echo", "one"], "q1");
    let q2 = submit(&s, ALICE, "ws1", &["echo", "two"], "q2");
    let rkey = kill9_while(&mut s, &running, &q2);
    s.restart(None);
    let r = settled(&s, ALICE, "ws1", &id(&running));
    assert_eq!(r["state"], "error", "{r}");
    assert!(containers_with_key(&rkey).is_empty());
    let log = s.ok(
        ALICE,
        "job.log",
        json!({"workspace_id": "ws1", "job_id": id(&running)}),
    );
    assert!(
        log["log"].as_str().unwrap().ends_with(
            "[airlock: the daemon stopped while this job ran; its output was not kept]\n"
        ),
        "{log}"
    );
    for (j, out) in [(&q1, "one\n"), (&q2, "two\n")] {
        let done = settled(&s, ALICE, "ws1", &id(j));
        assert_eq!(done["state"], "passed", "{done}");
        assert_eq!(done["verification"]["output"], out);
        let key = j["verification"]["creation_key"].as_str().unwrap();
        assert_eq!(
            create_events(key, since),
            1,
            "a queued job runs exactly once"
        );
    }
    assert_eq!(
        create_events(&rkey, since),
        1,
        "the interrupted job is never rerun"
    );
}

/// A queued job that cannot be taken up again (its profile's environment changed while the
/// daemon was down) is settled `error` naming why, artifact first: while its artifact cannot
/// be written (the artifacts directory made immutable) it is not settled at all, the daemon
/// starts anyway, and the next start settles it.
#[test]
fn a_queued_job_that_cannot_resume_is_settled_error_only_with_its_artifact() {
    if !docker() {
        return;
    }
    let mut s = Server::start_with("max_concurrent_verifications = 1\n");
    let running = submit(&s, ALICE, "ws1", &["sleep", "60"], "r");
    let queued = submit(&s, ALICE, "ws1", &["echo", "never"], "q");
    kill9_while(&mut s, &running, &queued);
    // The default profile's environment changes while the daemon is down.
    let mut text = std::fs::read_to_string(&s.config).unwrap();
    text.push_str(
        "\n[profiles.default]\nimage = \"airlock/minimal:latest\"\n\
         env = { LANG = \"C.UTF-8\", CHANGED = \"1\" }\n",
    );
    std::fs::write(&s.config, text).unwrap();
    let artifacts = s.dir.path().join("data/artifacts/verifications");
    let chattr = |flag: &str| {
        let st = std::process::Command::new("chattr")
            .arg(flag)
            .arg(&artifacts)
            .status()
            .unwrap();
        assert!(st.success(), "chattr {flag} {}", artifacts.display());
    };
    chattr("+i");
    s.restart(None);
    // Not settled without its artifact: still queued, and the daemon serves.
    let j = show(&s, ALICE, "ws1", &id(&queued));
    chattr("-i");
    assert_eq!(j["state"], "queued", "{j}");
    s.kill9();
    s.restart(None);
    let done = settled(&s, ALICE, "ws1", &id(&queued));
    assert_eq!(done["state"], "error", "{done}");
    let error = done["verification"]["error"].as_str().unwrap();
    assert!(
        error.contains("could not be resumed after a restart")
            && error.contains("environment changed"),
        "{error}"
    );
    let vid = done["verification"]["verification_id"].as_str().unwrap();
    assert!(
        artifacts.join(format!("{vid}.json")).is_file(),
        "settled with its artifact"
    );
    let again = s.ok(
        ALICE,
        "job.show",
        json!({"workspace_id": "ws1", "job_id": id(&queued)}),
    );
    assert_eq!(again["job"]["state"], "error");
}

/// Kills the daemon (SIGKILL) once `running`'s container runs, with `queued` still queued;
/// returns the running job's creation key.
fn kill9_while(s: &mut Server, running: &Value, queued: &Value) -> String {
    let rkey = running["verification"]["creation_key"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(
        || !containers_with_key(&rkey).is_empty(),
        "the running job's container",
    );
    assert_eq!(show(s, ALICE, "ws1", &id(queued))["state"], "queued");
    s.kill9();
    rkey
}
