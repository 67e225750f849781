//! One idempotency key, two calls at once: released together from a barrier with jitter on
//! both sides, for many rounds and for idempotent methods of every workflow (jobs, claims,
//! proposals, evidence, candidates), both calls answer 200 with the same result: one did the
//! work, the other waited for its key and got the replay. Never a `409 conflict` for a call
//! whose parameters were the same, and never the work done twice. (Fake runtime: the logic of
//! the key, not the sandbox.)

use crate::support::daemon::{ALICE, RUN_A, Server};
use serde_json::{Value, json};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const ROUNDS: usize = 12;

/// A little jitter, different per round and side, so both orders are tried.
fn jitter(round: usize, side: usize) {
    let micros = ((round * 7919 + side * 104_729) % 3000) as u64;
    std::thread::sleep(Duration::from_micros(micros));
}

/// Two calls of `method` with `body` from `token`, released together; both answers.
fn race(
    s: &Server,
    token: &'static str,
    method: &'static str,
    body: Value,
    round: usize,
) -> [(u16, Value); 2] {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|side| {
            let (addr, body, barrier) = (s.addr.clone(), body.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                jitter(round, side);
                crate::support::http::call(&addr, Some(token), method, &body)
            })
        })
        .collect();
    let mut out = handles.into_iter().map(|h| h.join().unwrap());
    [out.next().unwrap(), out.next().unwrap()]
}

/// Both answers are 200 and name the same result at `pointer`.
fn same_result(method: &str, round: usize, answers: &[(u16, Value); 2], pointer: &str) -> String {
    for (status, v) in answers {
        assert_eq!(*status, 200, "{method} round {round}: {v}");
    }
    let ids: Vec<&str> = answers
        .iter()
        .map(|(_, v)| {
            v.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("{method}: no {pointer} in {v}"))
        })
        .collect();
    assert_eq!(
        ids[0], ids[1],
        "{method} round {round}: two results for one key"
    );
    ids[0].to_string()
}

#[test]
fn two_calls_with_one_key_at_once_get_one_result_in_every_workflow() {
    let s = Server::fake_governed();
    let base = s.head();
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "tp", "resource_id": "directory:new",
               "mode": "write", "idempotency_key": "cover"}),
    );
    let mut jobs = std::collections::HashSet::new();
    for round in 0..ROUNDS {
        let key = format!("k{round}");
        let a = race(
            &s,
            ALICE,
            "job.submit",
            json!({"workspace_id": "ws1", "revision": "main", "argv": ["true"],
                   "idempotency_key": key}),
            round,
        );
        jobs.insert(same_result("job.submit", round, &a, "/job/job_id"));
        let a = race(
            &s,
            ALICE,
            "claim.acquire",
            json!({"workspace_id": "ws1", "task_id": "t", "resource_id": format!("file:r{round}"),
                   "mode": "write", "idempotency_key": key}),
            round,
        );
        same_result("claim.acquire", round, &a, "/claim/claim_id");
        let patch = format!(
            "diff --git a/new/p{round}.txt b/new/p{round}.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new/p{round}.txt\n@@ -0,0 +1 @@\n+p\n"
        );
        let a = race(
            &s,
            ALICE,
            "proposal.create",
            json!({"workspace_id": "ws1", "task_id": "tp", "title": "t", "summary_md": "s",
                   "patch": patch, "idempotency_key": key}),
            round,
        );
        same_result("proposal.create", round, &a, "/proposal/proposal_id");
        let commit = s.agent_commit(
            &format!("e{round}"),
            &base,
            &[("e.txt", &format!("{round}\n"))],
        );
        let a = race(
            &s,
            RUN_A,
            "evidence.record",
            json!({"workspace_id": "ws1", "run_id": "run_a", "base_revision": base,
                   "revision": commit, "idempotency_key": key}),
            round,
        );
        let evidence = same_result("evidence.record", round, &a, "/evidence/evidence_ref");
        let sub = json!({"workspace_id": "ws1", "run_id": "run_a", "evidence_ref": evidence,
                         "retained_revision": commit});
        let a = race(
            &s,
            ALICE,
            "integration.prepare",
            s.prepare_body(vec![sub], &base, &key),
            round,
        );
        same_result("integration.prepare", round, &a, "/candidate/candidate_id");
    }
    assert_eq!(jobs.len(), ROUNDS, "one job per key, never two");
    let listed = s.ok(
        ALICE,
        "job.list",
        json!({"workspace_id": "ws1", "limit": 200}),
    )["jobs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(listed, ROUNDS, "no key did its work twice");
}

const GOVERNED: &str = "[workspaces.ws1.roles]\nbob = [\"reviewer\"]\n\
                        [workspaces.ws1.policy]\nsecurity_review = \"never\"\nhuman_approval = \"never\"\n";

/// A governed daemon on real Docker (its dry runs need the `git` image),
/// alice holding a write claim on `directory:many` and a reviewed proposal adding `files` new
/// files there: (server, proposal id, revision).
fn many_files(files: usize) -> Option<(Server, Value, String)> {
    if !crate::toolchain::built("git") {
        return None;
    }
    let s = Server::governed_with(GOVERNED);
    s.ok(
        ALICE,
        "claim.acquire",
        json!({"workspace_id": "ws1", "task_id": "t", "resource_id": "directory:many",
               "mode": "write", "idempotency_key": "c"}),
    );
    let mut patch = String::new();
    for i in 0..files {
        patch.push_str(&format!(
            "diff --git a/many/f{i}.txt b/many/f{i}.txt\nnew file mode 100644\n--- /dev/null\n+++ b/many/f{i}.txt\n@@ -0,0 +1 @@\n+{i}\n"
        ));
    }
    let p = s.ok(
        ALICE,
        "proposal.create",
        json!({"workspace_id": "ws1", "task_id": "t", "title": "many", "summary_md": "s",
               "patch": patch, "affected_resources": ["directory:many"], "idempotency_key": "p"}),
    );
    let (id, rev) = crate::support::governed::reviewed(&s, &p, "many");
    Some((s, id, rev))
}

/// Dry-run verifications recorded in the daemon's database, by status.
fn dry_runs(s: &Server) -> Vec<String> {
    let c = rusqlite::Connection::open(s.dir.path().join("data/airlock.db")).unwrap();
    let mut st = c
        .prepare(
            "SELECT status FROM verifications WHERE json_extract(record, '$.image') = 'airlock/git:latest'",
        )
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `patch.validate` outlives its call's budget (shortened here to 100 ms, less than starting
/// any container takes), which answers `503`
/// and advises a retry with the same key: the retries wait for the dry run already running and
/// then answer its validation. One validation, one dry run.
#[test]
fn a_validate_retried_after_its_budget_joins_the_dry_run_already_running() {
    let Some((mut s, id, rev)) = many_files(120) else {
        return;
    };
    // The short budget from here on only: the set-up's calls keep the usual one.
    s.env = vec![("AIRLOCK_TEST_CALL_BUDGET_MS".into(), "100".into())];
    s.restart(None);
    let body = json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                      "idempotency_key": "val"});
    let (status, first) = s.call(ALICE, "patch.validate", body.clone());
    assert_eq!(status, 503, "the dry run outlives a 100 ms budget: {first}");
    assert!(
        first["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry with the same idempotency key"),
        "{first}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut retries = 0;
    let answer = loop {
        let (status, v) = s.call(ALICE, "patch.validate", body.clone());
        retries += 1;
        if status == 200 {
            break v;
        }
        assert_eq!(status, 503, "{v}");
        assert!(std::time::Instant::now() < deadline, "never answered: {v}");
    };
    assert!(retries >= 1);
    let listed = s.ok(
        ALICE,
        "patch.validation_list",
        json!({"workspace_id": "ws1", "proposal_id": id}),
    );
    let all = listed["validations"].as_array().unwrap();
    assert_eq!(all.len(), 1, "one validation for one key: {listed}");
    assert_eq!(
        all[0]["validation_id"], answer["validation"]["validation_id"],
        "{listed}"
    );
    assert_eq!(dry_runs(&s), ["passed"], "one dry run, never a second");
}

/// SIGTERM while a validation's dry run runs: the daemon cancels it like every job, destroys
/// its container and settles its row before it exits; nothing is left for `airlock recover`.
/// (3,000 files keep the dry run busy for well over a second after its container appears.)
#[test]
fn a_daemon_stopped_during_a_dry_run_cancels_and_settles_it() {
    let Some((mut s, id, rev)) = many_files(3000) else {
        return;
    };
    let instance: String = rusqlite::Connection::open(s.dir.path().join("data/airlock.db"))
        .unwrap()
        .query_row(
            "SELECT value FROM meta WHERE key = 'instance_id'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mine = || -> Vec<String> {
        let out = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!("label=airlock.instance={instance}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let addr = s.addr.clone();
    let call = std::thread::spawn(move || {
        crate::support::http::call(
            &addr,
            Some(ALICE),
            "patch.validate",
            &json!({"workspace_id": "ws1", "proposal_id": id, "revision": rev,
                    "idempotency_key": "val"}),
        )
    });
    crate::support::daemon::wait_for(|| !mine().is_empty(), "the dry run's container runs");
    assert_eq!(s.stop(), Some(0), "a clean stop");
    let _ = call.join();
    assert_eq!(
        mine(),
        Vec::<String>::new(),
        "the dry run's container is gone"
    );
    assert_eq!(
        dry_runs(&s),
        ["cancelled"],
        "settled before the exit, not left running"
    );
}
