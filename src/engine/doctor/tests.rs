//! doctor's checks judged from plain inputs (no engine needed).
use super::*;

#[test]
fn a_profile_whose_runtime_the_engine_lacks_fails_the_isolation_check_with_the_fix() {
    use crate::domain::isolation::Isolation;
    let plain = Config::builtin();
    assert!(
        isolation(&plain, &[Isolation::Runc]).is_none(),
        "nothing to say when every profile is runc and runc is offered"
    );
    let gvisor =
        Config::parse("[profiles.untrusted]\nimage = \"i\"\nruntime = \"runsc\"\n").unwrap();
    let c = isolation(&gvisor, &[Isolation::Runc]).unwrap();
    assert!(!c.ok);
    assert!(
        c.detail.contains("profile untrusted runs under runsc")
            && c.detail.contains("it offers runc"),
        "{c:?}"
    );
    assert!(
        c.fix.as_deref().unwrap().contains("--network=none"),
        "{c:?}"
    );
    let c = isolation(&gvisor, &[Isolation::Runc, Isolation::Runsc]).unwrap();
    assert!(c.ok, "{c:?}");
    assert!(c.detail.contains("runc, runsc"), "{c:?}");
}

#[test]
fn a_missing_verification_key_is_put_back_or_dropped_never_generated() {
    let c = Config::parse("verification_keys = [\"/nonexistent/old.pub\"]\n").unwrap();
    let check = attestation_keys(&c);
    assert!(!check.ok);
    assert!(check.detail.contains("verification_keys[0]"), "{check:?}");
    let fix = check.fix.unwrap();
    assert!(fix.contains("put back the public key file"), "{fix}");
    assert!(!fix.contains("keys generate"), "{fix}");
    let c = Config::parse("signing_key = \"/nonexistent/signing.pem\"\n").unwrap();
    let check = attestation_keys(&c);
    assert!(check.fix.unwrap().contains("airlock keys generate"));
}

#[test]
fn git_versions_parse_and_compare() {
    assert_eq!(parse_git_version("git version 2.47.3\n"), Some((2, 47)));
    assert_eq!(
        parse_git_version("git version 2.39.5 (Apple Git-154)"),
        Some((2, 39))
    );
    assert_eq!(parse_git_version("git version 3.0"), Some((3, 0)));
    assert_eq!(parse_git_version("hg 6"), None);
    assert!(Some((2, 39)) < Some(MIN_GIT) && Some((3, 0)) > Some(MIN_GIT));
}

#[test]
fn the_first_failure_names_the_check_and_the_fix() {
    let r = Report {
        ok: false,
        checks: vec![
            pass("docker", "fine"),
            fail("git", "git version 2.30.0", "install a newer git"),
        ],
    };
    assert_eq!(
        r.first_failure().unwrap(),
        "git: git version 2.30.0 (install a newer git)"
    );
    assert!(r.table().contains("FAIL  git"));
}
