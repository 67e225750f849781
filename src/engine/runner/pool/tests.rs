//! The pool's placement, image checks, health and isolation levels, on scripted engines.

use super::*;
use crate::sandbox::fake::FakeRuntime;

fn engine(name: &str, fake: &Arc<FakeRuntime>, max_jobs: usize, labels: &[&str]) -> PoolEngine {
    PoolEngine::new(
        name,
        fake.clone(),
        Arc::new(crate::workspace::HostBind::new(std::path::Path::new(
            "/nonexistent",
        ))),
        max_jobs,
        labels.iter().map(|l| l.to_string()).collect(),
    )
}

/// A pool whose images are built on `built`.
fn pool(engines: Vec<PoolEngine>, built: &Arc<FakeRuntime>) -> Pool {
    let runtime: Runtime = built.clone();
    Pool::new(engines, Reference::new("the build engine", Ok(runtime)), [])
}

async fn needs_of(pool: &Pool, image: &str) -> Vec<(String, String)> {
    vec![(image.to_string(), pool.built_image_id(image).await.unwrap())]
}

#[tokio::test]
async fn jobs_go_to_the_least_loaded_engine_with_a_slot_and_wait_when_none_has_one() {
    let a = Arc::new(FakeRuntime::new());
    let b = Arc::new(FakeRuntime::new());
    let pool = pool(vec![engine("a", &a, 1, &[]), engine("b", &b, 2, &[])], &a);
    let images = needs_of(&pool, "img").await;
    let needs = Needs {
        images: &images,
        labels: &[],
        isolation: Isolation::Runc,
    };
    let (_tx, mut cancel) = watch::channel(false);
    let short = Duration::from_millis(500);
    let p1 = pool
        .place(&needs, short, &mut cancel, |_| {})
        .await
        .unwrap();
    let p2 = pool
        .place(&needs, short, &mut cancel, |_| {})
        .await
        .unwrap();
    let p3 = pool
        .place(&needs, short, &mut cancel, |_| {})
        .await
        .unwrap();
    let mut names: Vec<&str> = [&p1, &p2, &p3]
        .iter()
        .map(|p| p.engine.name.as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "b"]);
    let mut reasons = Vec::new();
    let full = pool
        .place(&needs, Duration::from_millis(50), &mut cancel, |r| {
            reasons.push(r.to_string())
        })
        .await;
    let full = full.err();
    assert!(
        matches!(&full, Some(Unplaced::Waited(w)) if w.contains("a: all 1 slots in use") && w.contains("b: all 2 slots in use")),
        "{full:?}"
    );
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    // A freed slot wakes a waiting job at once.
    let waiter = async {
        pool.place(&needs, Duration::from_secs(30), &mut cancel, |_| {})
            .await
    };
    let freer = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(p1);
    };
    let (placed, ()) = tokio::join!(waiter, freer);
    assert_eq!(placed.unwrap().engine.name, "a");
}

#[tokio::test]
async fn a_job_runs_only_on_an_engine_that_offers_its_isolation_level() {
    let a = Arc::new(FakeRuntime::new());
    let b = Arc::new(FakeRuntime::new());
    b.offer_runtimes(&[Isolation::Runc, Isolation::Runsc]);
    let pool = pool(vec![engine("a", &a, 4, &[]), engine("b", &b, 4, &[])], &a);
    let images = needs_of(&pool, "img").await;
    let built = images[0].1.clone();
    let (_tx, mut cancel) = watch::channel(false);
    let needs = Needs {
        images: &images,
        labels: &[],
        isolation: Isolation::Runsc,
    };
    // Once each engine said what it offers, runsc jobs go to b only, every time.
    let placed = pool
        .place(&needs, Duration::from_secs(30), &mut cancel, |_| {})
        .await
        .unwrap();
    assert_eq!(placed.engine.name, "b");
    assert_eq!(pool.engines()[0].offered(), Some(vec![Isolation::Runc]));
    let again = pool
        .place(&needs, Duration::from_secs(30), &mut cancel, |_| {})
        .await
        .unwrap();
    assert_eq!(again.engine.name, "b", "a never takes a runsc job");
    drop((placed, again));
    assert_eq!(pool.unplaceable("img", &built, Isolation::Runsc, &[]), None);
    // With no engine offering it, the job is refused before it is recorded, naming what
    // each engine offers and how to register the runtime.
    let c = Arc::new(FakeRuntime::new());
    let only_runc = super::Pool::new(
        vec![engine("c", &c, 4, &[])],
        Reference::new("the build engine", Ok(c.clone() as Runtime)),
        [],
    );
    let images = needs_of(&only_runc, "img").await;
    let needs = Needs {
        images: &images,
        labels: &[],
        isolation: Isolation::Runsc,
    };
    let e = only_runc
        .place(&needs, Duration::from_millis(600), &mut cancel, |_| {})
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, Unplaced::Waited(w) if w.contains("c: does not offer the runtime runsc")),
        "{e:?}"
    );
    let why = only_runc
        .unplaceable("img", &images[0].1, Isolation::Runsc, &[])
        .unwrap();
    assert!(
        why.contains("no engine offers the isolation level (runtime) runsc: c offers runc"),
        "{why}"
    );
    assert_eq!(
        only_runc.unplaceable("img", &images[0].1, Isolation::Runc, &[]),
        None
    );
    // An engine that has not said yet is waited for, never refused.
    let d = PoolEngine::new(
        "d",
        Arc::new(FakeRuntime::new()),
        Arc::new(crate::workspace::HostBind::new(std::path::Path::new(
            "/nonexistent",
        ))),
        1,
        vec![],
    );
    assert_eq!(d.offers(Isolation::Runsc), None);
    assert_eq!(d.offers(Isolation::Runc), Some(true));
}

#[tokio::test]
async fn labels_image_ids_and_health_keep_jobs_off_an_engine() {
    let a = Arc::new(FakeRuntime::new());
    let b = Arc::new(FakeRuntime::new());
    let pool = pool(
        vec![engine("a", &a, 4, &[]), engine("b", &b, 4, &["gpu"])],
        &a,
    );
    let images = needs_of(&pool, "img").await;
    let (_tx, mut cancel) = watch::channel(false);
    let short = Duration::from_millis(500);
    let gpu = ["gpu".to_string()];
    let needs = Needs {
        images: &images,
        labels: &gpu,
        isolation: Isolation::Runc,
    };
    assert_eq!(
        pool.place(&needs, short, &mut cancel, |_| {})
            .await
            .unwrap()
            .engine
            .name,
        "b"
    );
    // An engine whose image has another id never gets the job.
    let other_images = vec![("img".to_string(), "sha256:other".to_string())];
    let other = Needs {
        images: &other_images,
        labels: &[],
        isolation: Isolation::Runc,
    };
    let e = pool
        .place(&other, short, &mut cancel, |_| {})
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, Unplaced::Waited(w) if w.contains("not the built sha256:other")),
        "{e:?}"
    );
    // A failed engine is skipped until a check finds it answering again.
    pool.engines()[1].mark_down("connection refused");
    let e = pool
        .place(&needs, Duration::from_millis(20), &mut cancel, |_| {})
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&e, Unplaced::Waited(w) if w.contains("b: unreachable (connection refused)") && w.contains("a: lacks label \"gpu\"")),
        "{e:?}"
    );
    let placed = pool
        .place(
            &needs,
            crate::limits::IMAGE_RECHECK_INTERVAL * 3,
            &mut cancel,
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(
        placed.engine.name, "b",
        "checked again and back in placement"
    );
    // Cancelled while waiting.
    let (tx, mut cancel) = watch::channel(false);
    tx.send(true).unwrap();
    assert_eq!(
        pool.place(&other, Duration::from_secs(30), &mut cancel, |_| {})
            .await
            .err(),
        Some(Unplaced::Cancelled)
    );
}

#[tokio::test]
async fn an_engine_listed_first_whose_tag_names_another_image_takes_no_job() {
    let liar = Arc::new(FakeRuntime::new());
    let honest = Arc::new(FakeRuntime::new());
    let built = Arc::new(FakeRuntime::new());
    liar.set_image("img", "sha256:lookalike");
    let pool = pool(
        vec![
            engine("liar", &liar, 4, &[]),
            engine("honest", &honest, 4, &[]),
        ],
        &built,
    );
    // The job is resolved with the id Airlock built, not the first engine's.
    let images = needs_of(&pool, "img").await;
    assert_eq!(images[0].1, "sha256:fake:img");
    let needs = Needs {
        images: &images,
        labels: &[],
        isolation: Isolation::Runc,
    };
    let (_tx, mut cancel) = watch::channel(false);
    let mut seen = vec![];
    for _ in 0..4 {
        let p = pool
            .place(&needs, Duration::from_secs(5), &mut cancel, |_| {})
            .await
            .unwrap();
        seen.push(p.engine.name.clone());
        std::mem::forget(p);
    }
    assert!(seen.iter().all(|n| n == "honest"), "{seen:?}");
    // It says why: the reason, and the engine's mismatches (for /metrics and the log).
    let why = pool
        .try_place(&needs)
        .err()
        .expect("the honest engine's slots are all taken now");
    assert!(
        why.contains("liar: image img is sha256:lookalike, not the built sha256:fake:img"),
        "{why}"
    );
    assert_eq!(
        pool.engines()[0].image_mismatches(pool.reference(), &pool.watched_images()),
        ["image img is sha256:lookalike, not the built sha256:fake:img"]
    );
    assert!(
        pool.engines()[1]
            .image_mismatches(pool.reference(), &pool.watched_images())
            .is_empty()
    );
    // Once its tag names the built image again, it takes jobs at its next check.
    liar.set_image("img", "sha256:fake:img");
    let p = pool
        .place(
            &needs,
            crate::limits::IMAGE_RECHECK_INTERVAL * 3,
            &mut cancel,
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(p.engine.name, "liar");
}

#[tokio::test(start_paused = true)]
async fn a_hung_engine_delays_neither_placement_elsewhere_nor_the_ids_of_built_images() {
    let hung = Arc::new(FakeRuntime::new());
    let fine = Arc::new(FakeRuntime::new());
    let pool = pool(
        vec![engine("hung", &hung, 4, &[]), engine("fine", &fine, 4, &[])],
        &fine,
    );
    let images = needs_of(&pool, "img").await;
    let needs = Needs {
        images: &images,
        labels: &[],
        isolation: Isolation::Runc,
    };
    let (_tx, mut cancel) = watch::channel(false);
    pool.place(&needs, Duration::from_secs(5), &mut cancel, |_| {})
        .await
        .unwrap();
    hung.set_hung(true);
    // Each placement and id lookup reads what the checks found; the paused clock would
    // have to advance by a whole call bound for any of them to wait on the hung engine.
    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        let p = pool
            .place(&needs, Duration::from_secs(5), &mut cancel, |_| {})
            .await
            .unwrap();
        assert_eq!(pool.built_image_id("img").await.unwrap(), images[0].1);
        std::mem::forget(p);
    }
    assert!(started.elapsed() < crate::limits::ENGINE_CALL_TIMEOUT);
    // Its next check gives up on it after one call bound: out of placement, and why.
    tokio::time::sleep(
        crate::limits::IMAGE_RECHECK_INTERVAL + crate::limits::ENGINE_CALL_TIMEOUT * 2,
    )
    .await;
    let why = pool.engines()[0].down_reason().expect("out of placement");
    assert!(why.contains("no answer"), "{why}");
}

#[tokio::test(start_paused = true)]
async fn a_runsc_job_waits_for_a_silent_engine_only_while_no_other_engine_offers_runsc() {
    let bound = crate::limits::ENGINE_CALL_TIMEOUT;
    // An engine that never answers about its images never says what it offers.
    let silent = Arc::new(FakeRuntime::new());
    silent.set_hung(true);
    let gvisor = Arc::new(FakeRuntime::new());
    gvisor.offer_runtimes(&[Isolation::Runc, Isolation::Runsc]);
    // The image is watched from the start, so the silent engine is never without a question.
    let pool = super::Pool::new(
        vec![
            engine("silent", &silent, 4, &[]),
            engine("gvisor", &gvisor, 4, &[]),
        ],
        Reference::new("the build engine", Ok(gvisor.clone() as Runtime)),
        ["img"],
    );
    let started = tokio::time::Instant::now();
    pool.runtimes_known(Isolation::Runsc, bound).await;
    assert!(
        started.elapsed() < bound,
        "waited {:?} for the silent engine although another offers runsc",
        started.elapsed()
    );
    assert_eq!(pool.engines()[0].offered(), None, "still silent");
    assert_eq!(
        pool.unplaceable(
            "img",
            &pool.built_image_id("img").await.unwrap(),
            Isolation::Runsc,
            &[]
        ),
        None
    );

    // With no other engine offering runsc, the silent one's word is waited for (up to the
    // bound): it might offer it.
    let silent = Arc::new(FakeRuntime::new());
    silent.set_hung(true);
    let runc_only = Arc::new(FakeRuntime::new());
    let pool = super::Pool::new(
        vec![
            engine("silent", &silent, 4, &[]),
            engine("runc", &runc_only, 4, &[]),
        ],
        Reference::new("the build engine", Ok(runc_only.clone() as Runtime)),
        ["img"],
    );
    let started = tokio::time::Instant::now();
    pool.runtimes_known(Isolation::Runsc, bound).await;
    assert!(started.elapsed() >= bound, "{:?}", started.elapsed());
    assert_eq!(pool.engines()[1].offered(), Some(vec![Isolation::Runc]));
}
