//! A pool of two real engines behind one daemon: the machine's own (its socket) and a second
//! dockerd over mutual TLS. Jobs go where a slot is free and the image id is the expected one;
//! every result names its engine.

use crate::delivery::{frozen, settled, verification, verify};
use crate::support::engine2::SecondEngine;
use crate::support::*;
use std::collections::BTreeSet;

const IMAGE: &str = "airlock/minimal:latest";

fn pool_config(engine: &SecondEngine, here_jobs: usize, there_jobs: usize) -> String {
    format!(
        "max_concurrent_verifications = 4\n\
         [[engines]]\nname = \"here\"\nhost = \"unix:///var/run/docker.sock\"\nmax_jobs = {here_jobs}\n{}",
        engine.config("there", there_jobs)
    )
}

/// Containers of a creation key on the second engine.
fn remote_containers(engine: &SecondEngine, key: &str) -> usize {
    engine
        .out(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=airlock.creation_key={key}"),
        ])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

#[test]
fn two_engines_with_one_slot_each_run_two_jobs_at_once_and_results_name_them() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    let s = Server::start_with(&pool_config(&engine, 1, 1));
    let (cid, rev, _) = frozen(&s);
    let v1 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v1");
    let v2 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "v2");
    // Both run at once, one on each engine: each engine's one slot holds one of them.
    let (mut k1, mut k2) = (String::new(), String::new());
    wait_for(
        || {
            k1 = verification(&s, &cid, &v1)["creation_key"]
                .as_str()
                .unwrap()
                .into();
            k2 = verification(&s, &cid, &v2)["creation_key"]
                .as_str()
                .unwrap()
                .into();
            let here = containers_with_key(&k1).len() + containers_with_key(&k2).len();
            let there = remote_containers(&engine, &k1) + remote_containers(&engine, &k2);
            here == 1 && there == 1
        },
        "one job on each engine",
    );
    // A third waits for a slot (visible in /metrics as unplaced) and runs once one frees.
    let v3 = verify(&s, &cid, &rev, &["true"], 60, "v3");
    wait_for(
        || {
            let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
            String::from_utf8_lossy(&body).contains("airlock_jobs_unplaced 1")
        },
        "the third job waiting for an engine",
    );
    assert_eq!(verification(&s, &cid, &v3)["status"], "running");
    for v in [&v1, &v2] {
        s.ok(
            ALICE,
            "integration.cancel_verification",
            serde_json::json!({"workspace_id": "ws1", "candidate_id": cid, "verification_id": v}),
        );
    }
    let r3 = settled(&s, &cid, &v3);
    assert_eq!(r3["status"], "passed", "{r3}");
    let engines: BTreeSet<String> = [&v1, &v2]
        .iter()
        .map(|v| {
            verification(&s, &cid, v)["engine"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(engines, BTreeSet::from(["here".into(), "there".into()]));
    assert!(
        ["here", "there"].contains(&r3["engine"].as_str().unwrap()),
        "{r3}"
    );
    let (_, body) = request(&s.addr, "GET", "/metrics", None, b"").unwrap();
    let metrics = String::from_utf8_lossy(&body);
    assert!(
        metrics
            .contains("airlock_engine_verifications_total{engine=\"here\",status=\"cancelled\"} 1")
            || metrics.contains(
                "airlock_engine_verifications_total{engine=\"there\",status=\"cancelled\"} 1"
            ),
        "{metrics}"
    );
    // No job of either engine left a container, holder or volume on either engine (the
    // workspace goes right after the result is settled).
    let k3 = r3["creation_key"].as_str().unwrap().to_string();
    wait_for(
        || {
            let out = std::process::Command::new("docker")
                .args(["volume", "ls", "-q"])
                .output()
                .unwrap();
            let local = String::from_utf8_lossy(&out.stdout).into_owned();
            [&k1, &k2, &k3]
                .iter()
                .all(|k| !local.lines().any(|l| l == k.as_str()))
                && engine.leftovers() == (vec![], vec![])
        },
        "every workspace volume removed",
    );
}

#[test]
fn an_engine_whose_image_id_differs_never_gets_a_job() {
    if !docker() {
        return;
    }
    let engine = SecondEngine::start(&[IMAGE]);
    // The second engine's airlock/minimal:latest is another image (one more layer).
    engine.out(&["run", "--name", "mutate", IMAGE, "touch", "/tmp/x"]);
    engine.out(&["commit", "mutate", IMAGE]);
    engine.out(&["rm", "mutate"]);
    let s = Server::start_with(&pool_config(&engine, 2, 4));
    let (cid, rev, _) = frozen(&s);
    let ids: Vec<String> = (0..3)
        .map(|i| verify(&s, &cid, &rev, &["true"], 60, &format!("k{i}")))
        .collect();
    for id in &ids {
        let r = settled(&s, &cid, id);
        assert_eq!(r["status"], "passed", "{r}");
        assert_eq!(r["engine"], "here", "{r}");
    }
    // With the machine's engine busy, a job waits out its timeout rather than run on the
    // other image, and settles error saying why.
    let busy = verify(&s, &cid, &rev, &["sleep", "60"], 120, "busy");
    let busy2 = verify(&s, &cid, &rev, &["sleep", "60"], 120, "busy2");
    wait_for(
        || {
            [&busy, &busy2].iter().all(|v| {
                let key = verification(&s, &cid, v)["creation_key"]
                    .as_str()
                    .unwrap()
                    .to_string();
                !containers_with_key(&key).is_empty()
            })
        },
        "both slots of the machine's engine in use",
    );
    let id = verify(&s, &cid, &rev, &["true"], 2, "waits");
    let r = settled(&s, &cid, &id);
    assert_eq!(r["status"], "error", "{r}");
    let why = r["error"].as_str().unwrap();
    assert!(why.starts_with("not placed on an engine:"), "{why}");
    assert!(why.contains("here: all 2 slots in use"), "{why}");
    assert!(
        why.contains("there: image airlock/minimal:latest is sha256:"),
        "{why}"
    );
    assert!(r["engine"].is_null(), "{r}");
    for v in [&busy, &busy2] {
        s.ok(
            ALICE,
            "integration.cancel_verification",
            serde_json::json!({"workspace_id": "ws1", "candidate_id": cid, "verification_id": v}),
        );
    }
    let (containers, volumes) = engine.leftovers();
    assert_eq!(volumes, Vec::<String>::new());
    assert_eq!(
        containers,
        Vec::<String>::new(),
        "no job container was ever made there"
    );
}
