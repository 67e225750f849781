//! Statements and their checks, on records built here (the integration suite signs real runs).

use super::*;
use crate::attest::statement;
use crate::attest::verify::{Refused, check_subject, verify, verify_bytes};
use crate::verification::Status;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

fn record(status: Status) -> Verification {
    let mut v = crate::artifacts::tests::sample("ver_1", "k1");
    v.status = status;
    v.candidate_tree = Some("b".repeat(40));
    v.repository = Some("/srv/repo.git".into());
    v
}

fn attestor() -> Attestor {
    Attestor::with_key(SigningKey::from_seed([1; 32]), "urn:airlock:test")
}

fn statement_of(e: &Envelope) -> Statement {
    serde_json::from_slice(&e.payload_bytes().unwrap()).unwrap()
}

/// Re-signs a changed statement with `key`: a forger with a key of their own.
fn resign(st: &Statement, key: &SigningKey) -> Envelope {
    Envelope::sign(&st.to_bytes(), key)
}

#[test]
fn only_passed_says_passed_and_every_other_status_says_which() {
    let a = attestor();
    for status in Status::ALL.into_iter().filter(|s| s.is_terminal()) {
        let mut v = record(status);
        a.attest_verification(&mut v);
        let env = v.attestation.clone().unwrap();
        let ok = a.check(&env).unwrap();
        let p = &ok.statement.predicate;
        assert_eq!(ok.statement.predicate_type, VERIFICATION_PREDICATE);
        assert_eq!(
            p["verificationResult"] == "PASSED",
            status == Status::Passed,
            "{status:?}: {p}"
        );
        assert_eq!(p["airlock"]["status"], status.as_str());
        if status != Status::Passed {
            assert_eq!(p["verifiedLevels"], serde_json::json!(["FAILED"]));
        }
    }
}

#[test]
fn a_verification_statement_names_what_ran_where_and_how_it_ended() {
    let a = attestor();
    let mut v = record(Status::Passed);
    a.attest_verification(&mut v);
    let st = statement_of(v.attestation.as_ref().unwrap());
    assert_eq!(st.type_, statement::STATEMENT_TYPE);
    assert_eq!(
        st.commits().collect::<Vec<_>>(),
        [v.candidate_revision.as_str()]
    );
    assert_eq!(st.trees().collect::<Vec<_>>(), ["b".repeat(40)]);
    let p = &st.predicate;
    assert_eq!(p["verifier"]["id"], "urn:airlock:test");
    assert_eq!(p["timeVerified"], v.finished_at.clone().unwrap());
    assert_eq!(
        p["resourceUri"],
        format!("git+file:///srv/repo.git@{}", v.candidate_revision)
    );
    assert_eq!(p["policy"]["digest"]["sha256"], v.environment_sha256);
    let air = &p["airlock"];
    assert_eq!(air["argv"], serde_json::json!(v.argv));
    assert_eq!(air["image_id"], "sha256:abc");
    assert_eq!(air["setup_script_sha256"], v.setup_script_sha256);
    assert_eq!(air["exit_code"], 0);
    assert_eq!(air["engine"], "local");
    assert_eq!(air["duration_ms"], 5);
    assert_eq!(air["output_truncated"], false);
    assert_eq!(
        air["output_sha256"],
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"ok\n"))
    );
    // The payload is canonical JSON: one byte form.
    let bytes = v.attestation.as_ref().unwrap().payload_bytes().unwrap();
    assert_eq!(bytes, st.to_bytes());
}

#[test]
fn every_tampered_part_is_refused() {
    let a = attestor();
    let mut v = record(Status::Passed);
    a.attest_verification(&mut v);
    let env = v.attestation.clone().unwrap();
    let keys = a.keys();

    // Any payload byte.
    let payload = env.payload_bytes().unwrap();
    for i in (0..payload.len()).step_by(7) {
        let mut p = payload.clone();
        p[i] ^= 0x01;
        let mut t = env.clone();
        t.payload = STANDARD.encode(&p);
        assert!(verify(&t, keys).is_err(), "byte {i}");
    }
    // The signature.
    let mut t = env.clone();
    let mut sig = STANDARD.decode(&t.signatures[0].sig).unwrap();
    sig[0] ^= 0x80;
    t.signatures[0].sig = STANDARD.encode(sig);
    assert!(matches!(verify(&t, keys), Err(Refused::Signature(_))));
    // The key id.
    let mut t = env.clone();
    t.signatures[0].keyid = "0".repeat(64);
    assert!(matches!(verify(&t, keys), Err(Refused::Signature(_))));
    // The subject, re-signed by someone else's key: the signature is not by a known key.
    let mut st = statement_of(&env);
    st.subject[0]
        .digest
        .insert("gitCommit".into(), "c".repeat(40));
    let forged = resign(&st, &SigningKey::from_seed([2; 32]));
    assert!(matches!(verify(&forged, keys), Err(Refused::Signature(_))));
    // The subject, signed by the right key, is still checked against the revision asked about.
    let ok = verify(&resign(&st, &SigningKey::from_seed([1; 32])), keys).unwrap();
    assert!(matches!(
        check_subject(&ok.statement, &v.candidate_revision, &"b".repeat(40)),
        Err(Refused::SubjectCommit { .. })
    ));
    let good = verify(&env, keys).unwrap();
    check_subject(&good.statement, &v.candidate_revision, &"b".repeat(40)).unwrap();
    assert!(matches!(
        check_subject(&good.statement, &v.candidate_revision, &"d".repeat(40)),
        Err(Refused::SubjectTree { .. })
    ));
}

#[test]
fn statements_airlock_never_signs_are_refused_even_when_signed() {
    let key = SigningKey::from_seed([1; 32]);
    let keys = [key.public.clone()];
    let mut v = record(Status::SourceChanged);
    attestor().attest_verification(&mut v);
    let st = statement_of(v.attestation.as_ref().unwrap());

    // A FAILED result relabelled PASSED disagrees with its own status.
    let mut t = st.clone();
    t.predicate["verificationResult"] = "PASSED".into();
    assert!(matches!(
        verify(&resign(&t, &key), &keys),
        Err(Refused::ResultDisagrees { .. })
    ));
    let mut t = st.clone();
    t.type_ = "https://in-toto.io/Statement/v0.1".into();
    assert!(matches!(
        verify(&resign(&t, &key), &keys),
        Err(Refused::StatementType(_))
    ));
    let mut t = st.clone();
    t.predicate_type = "https://slsa.dev/provenance/v1".into();
    assert!(matches!(
        verify(&resign(&t, &key), &keys),
        Err(Refused::PredicateType(_))
    ));
    let mut t = st.clone();
    t.subject.clear();
    assert!(matches!(
        verify(&resign(&t, &key), &keys),
        Err(Refused::NoSubject)
    ));
    let mut t = st.clone();
    t.subject[0].digest.insert("gitCommit".into(), "XYZ".into());
    assert!(matches!(
        verify(&resign(&t, &key), &keys),
        Err(Refused::SubjectDigest { .. })
    ));
    // Not an envelope, wrong payload type, oversized, too many signatures, no keys.
    assert!(matches!(
        verify_bytes(b"{", &keys),
        Err(Refused::NotAnEnvelope(_))
    ));
    let mut e = resign(&st, &key);
    e.payload_type = "application/json".into();
    assert!(matches!(verify(&e, &keys), Err(Refused::PayloadType(_))));
    let big = vec![b' '; crate::limits::MAX_ATTESTATION_BYTES + 1];
    assert!(matches!(
        verify_bytes(&big, &keys),
        Err(Refused::TooLarge { .. })
    ));
    let mut e = resign(&st, &key);
    e.signatures = vec![e.signatures[0].clone(); crate::limits::MAX_ENVELOPE_SIGNATURES + 1];
    assert!(matches!(
        verify(&e, &keys),
        Err(Refused::TooManySignatures { .. })
    ));
    assert!(matches!(
        verify(&resign(&st, &key), &[]),
        Err(Refused::NoKeys)
    ));
    // A payload that is not a statement at all.
    let e = Envelope::sign(b"[1,2,3]", &key);
    assert!(matches!(verify(&e, &keys), Err(Refused::NotAStatement(_))));
}

#[test]
fn rotation_keeps_old_attestations_verifying() {
    let d = tempfile::tempdir().unwrap();
    let old = SigningKey::generate(&d.path().join("old.pem")).unwrap();
    let new_path = d.path().join("new.pem");
    SigningKey::generate(&new_path).unwrap();
    std::fs::write(d.path().join("old.pub"), &old.public.pem).unwrap();
    let mut v = record(Status::Passed);
    Attestor::with_key(old, "urn:airlock:test").attest_verification(&mut v);
    let env = v.attestation.unwrap();
    let text = |extra: &str| {
        format!(
            "signing_key = {:?}\n{extra}",
            new_path.display().to_string()
        )
    };
    let without = Attestor::load(&crate::config::Config::parse(&text("")).unwrap()).unwrap();
    assert!(matches!(without.check(&env), Err(Refused::Signature(_))));
    let with = Attestor::load(
        &crate::config::Config::parse(&text(&format!(
            "verification_keys = [{:?}]\n",
            d.path().join("old.pub").display().to_string()
        )))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(with.keys().len(), 2);
    with.check(&env).unwrap();
}

#[test]
fn key_config_errors_name_the_field() {
    let e = crate::config::Config::parse("signing_key = \"relative.pem\"").unwrap_err();
    assert!(e.to_string().contains("signing_key"), "{e}");
    let e = crate::config::Config::parse("verification_keys = [\"/a\", \"b\"]").unwrap_err();
    assert!(e.to_string().contains("verification_keys[1]"), "{e}");
    let e = crate::config::Config::parse("verifier_id = \"has space\"").unwrap_err();
    assert!(e.to_string().contains("verifier_id"), "{e}");
    let e = Attestor::load(
        &crate::config::Config::parse("signing_key = \"/nonexistent/airlock.pem\"").unwrap(),
    )
    .unwrap_err();
    assert!(
        e.starts_with("signing_key: /nonexistent/airlock.pem"),
        "{e}"
    );
}

#[test]
fn a_note_holds_a_delivery_and_only_the_verifications_it_names() {
    let a = attestor();
    let mut relied = record(Status::Passed);
    a.attest_verification(&mut relied);
    let mut other = record(Status::Passed);
    other.verification_id = "ver_2".into();
    a.attest_verification(&mut other);
    let relied_env = relied.attestation.clone().unwrap();
    let delivery = Statement {
        type_: statement::STATEMENT_TYPE.into(),
        subject: statement_of(&relied_env).subject,
        predicate_type: statement::DELIVERY_PREDICATE.into(),
        predicate: serde_json::json!({"verifications": [
            {"verification_id": "ver_1", "attestation": relied_env.digest()},
        ]}),
    };
    let delivery_env = a.sign(&delivery).unwrap();
    let check = |envs: &[&Envelope]| {
        let all: Vec<_> = envs.iter().map(|e| a.check(e).unwrap()).collect();
        crate::attest::verify::check_note(&all)
    };
    check(&[&delivery_env, &relied_env]).unwrap();
    check(&[&delivery_env]).unwrap();
    assert!(matches!(
        check(&[
            &delivery_env,
            &relied_env,
            other.attestation.as_ref().unwrap()
        ]),
        Err(Refused::NotReliedOn { index: 3, .. })
    ));
    assert!(matches!(
        check(&[&relied_env, &delivery_env]),
        Err(Refused::NoteWithoutDelivery(_))
    ));
}
