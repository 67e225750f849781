//! The registry's families, labels and zero samples.
use super::*;

#[test]
fn each_engines_isolation_levels_are_exported_once_it_said_them() {
    let m = Metrics::new();
    let sample = |name, runtimes| EngineSample {
        name,
        running: 0,
        up: true,
        failures: 0,
        image_mismatches: 0,
        runtimes,
    };
    m.set_engines([
        sample("a", Some(vec!["runc"])),
        sample("b", Some(vec!["runc", "runsc"])),
        sample("c", None),
    ]);
    let text = m.encode();
    for (engine, runtime, v) in [
        ("a", "runc", 1),
        ("a", "runsc", 0),
        ("b", "runc", 1),
        ("b", "runsc", 1),
    ] {
        let line =
            format!("airlock_engine_runtime{{engine=\"{engine}\",runtime=\"{runtime}\"}} {v}");
        assert!(text.contains(&line), "{line} missing:\n{text}");
    }
    assert!(
        !text.contains("engine_runtime{engine=\"c\""),
        "an engine that has not said is not guessed: {text}"
    );
}

#[test]
fn an_emptied_state_reads_zero_and_every_family_is_exported() {
    let m = Metrics::new();
    m.initialize(["default"], ["local"]);
    let known = KnownStates::all();
    let mut g = crate::store::gauges::Gauges {
        proposals: vec![("in_review".into(), 3)],
        claims_active: 2,
        ..Default::default()
    };
    m.set_gauges(&g, &known);
    let text = m.encode();
    assert!(
        text.contains("airlock_proposals{state=\"in_review\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("airlock_proposals{state=\"accepted\"} 0"),
        "{text}"
    );
    assert!(text.contains("airlock_claims_active 2"), "{text}");
    g.proposals.clear();
    m.set_gauges(&g, &known);
    assert!(
        m.encode()
            .contains("airlock_proposals{state=\"in_review\"} 0")
    );
    for name in [
        "airlock_verification_queue_depth",
        "airlock_live_containers",
        "airlock_output_bytes_total",
        "airlock_source_changed_total",
        "airlock_oom_kills_total",
        "airlock_contentions_open",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    // Families with labels have their known samples at zero from the start.
    for name in [
        "airlock_http_requests",
        "airlock_artifact_write_seconds",
        "airlock_recovery_actions",
        "airlock_verifications",
        "airlock_engine_up",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} missing:\n{text}"
        );
    }
}
