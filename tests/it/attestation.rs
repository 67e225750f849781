//! Signed attestations: real runs on real Docker, signed with a key `airlock keys generate`
//! wrote, checked by `airlock attestation verify` and by a verifier nobody here wrote
//! (scripts/verify-attestation.py: securesystemslib's DSSE verification and
//! in-toto-attestation's schemas); every tampered part refused by both; failures never signed
//! as passes; a kill before signing leaves recovery to sign; deliveries attested in the
//! receipt, the landed commit's trailer and `refs/notes/airlock`; applies in the transaction.

use crate::support::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A key pair made by `airlock keys generate` in `dir`: (private key path, public key path,
/// key id as printed).
pub(crate) fn keys(dir: &Path, name: &str) -> (PathBuf, PathBuf, String) {
    use std::os::unix::fs::MetadataExt;
    let key = dir.join(format!("{name}.pem"));
    let out = Command::new(BIN)
        .args(["keys", "generate"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (pem, id) = text.split_once("key id: ").expect("the key id is printed");
    assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{text}");
    assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(&public, pem).unwrap();
    (key, public, id.trim().to_string())
}

/// scripts/verify-attestation.py on `envelope` with `public`: its JSON answer.
fn in_toto(envelope: &Value, public: &Path) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("envelope.json");
    std::fs::write(&file, envelope.to_string()).unwrap();
    let out = Command::new(python_tool("python"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/verify-attestation.py"))
        .arg(&file)
        .arg(public)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify-attestation.py printed no JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.success(), v["ok"] == true, "{v}");
    v
}

/// `airlock attestation verify - ARGS` with `input` on stdin: (exit code, stdout, stderr).
fn airlock_verify(args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut c = Command::new(BIN)
        .args(["attestation", "verify", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// [`airlock_verify`] with `public`, whose subject must be `rev` of `repo`.
fn airlock_verify_at(public: &Path, repo: &Path, rev: &str, input: &str) -> (i32, String, String) {
    let (public, repo) = (public.to_str().unwrap(), repo.to_str().unwrap());
    airlock_verify(
        &["--public-key", public, "--repo", repo, "--rev", rev],
        input,
    )
}

fn payload(envelope: &Value) -> Value {
    serde_json::from_slice(
        &STANDARD
            .decode(envelope["payload"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap()
}

fn with_payload(envelope: &Value, bytes: &[u8]) -> Value {
    let mut t = envelope.clone();
    t["payload"] = json!(STANDARD.encode(bytes));
    t
}

/// Both verifiers accept `envelope`; returns the Python verifier's answer.
fn both_accept(envelope: &Value, public: &Path) -> Value {
    let p = public.to_str().unwrap();
    let (code, out, err) = airlock_verify(&["--public-key", p], &envelope.to_string());
    assert_eq!(code, 0, "{out}{err}");
    let v = in_toto(envelope, public);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["keyid"], v["computed_keyid"], "{v}");
    v
}

/// Both verifiers refuse `envelope`, airlock with one line naming `why`.
fn both_refuse(envelope: &Value, public: &Path, why: &str, what: &str) {
    let p = public.to_str().unwrap();
    let (code, out, err) = airlock_verify(&["--public-key", p], &envelope.to_string());
    assert_eq!(code, 1, "{what}: {out}{err}");
    assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
    assert!(err.contains(why), "{what}: {err}");
    let v = in_toto(envelope, public);
    assert_eq!(
        v["ok"], false,
        "{what}: the in-toto verifier accepted it: {v}"
    );
}

fn signing_fixture(dir: &Path) -> (Fixture, PathBuf, String) {
    let (key, public, id) = keys(dir, "signing");
    let f = Fixture::new(&[("README", "hello\n", false)])
        .with_config(&format!("signing_key = {:?}\n", key.display().to_string()));
    (f, public, id)
}

#[test]
fn signed_runs_verify_with_airlock_and_in_toto_and_every_tampered_part_is_refused_by_both() {
    if !docker() {
        return;
    }
    let keydir = tempfile::tempdir().unwrap();
    let (f, public, key_id) = signing_fixture(keydir.path());
    // A second `keys generate` onto the same file is refused and changes nothing.
    let key = keydir.path().join("signing.pem");
    let before = std::fs::read(&key).unwrap();
    let out = Command::new(BIN)
        .args(["keys", "generate"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    assert_eq!(std::fs::read(&key).unwrap(), before);

    let v = f.sh("cat README");
    assert_eq!(v["status"], "passed", "{v}");
    let env = v["attestation"].clone();
    assert_eq!(env["payloadType"], "application/vnd.in-toto+json");
    assert_eq!(env["signatures"][0]["keyid"], key_id.as_str());
    // The stored record carries the same attestation.
    let shown = f
        .base(&[
            "verification",
            "show",
            v["verification_id"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["attestation"], env);

    let py = both_accept(&env, &public);
    assert_eq!(py["verificationResult"], "PASSED");
    assert_eq!(py["keyid"], key_id.as_str());
    let st = payload(&env);
    assert_eq!(
        st["subject"][0]["digest"]["gitCommit"],
        v["candidate_revision"]
    );
    let tree = git(&f.repo, &["rev-parse", "HEAD^{tree}"]);
    assert_eq!(st["subject"][1]["digest"]["gitTree"], tree.as_str());
    assert_eq!(st["predicate"]["airlock"]["image_id"], v["observed_image"]);
    assert_eq!(st["predicate"]["airlock"]["argv"], v["argv"]);

    // The configured keys, the whole record, and the subject against the repository.
    let cfg = f.config.as_ref().unwrap().to_str().unwrap().to_string();
    let repo = f.repo.to_str().unwrap().to_string();
    let (code, out, err) = airlock_verify(&["--config", &cfg], &v.to_string());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("PASSED") && out.contains(&key_id), "{out}");
    let (code, _, err) = airlock_verify(
        &["--config", &cfg, "--repo", &repo, "--rev", "HEAD"],
        &env.to_string(),
    );
    assert_eq!(code, 0, "{err}");
    let other = f.commit(&[("README", "changed\n", false)], "later");
    let (code, _, err) = airlock_verify(
        &["--config", &cfg, "--repo", &repo, "--rev", &other],
        &env.to_string(),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("subject does not name commit {other}")),
        "{err}"
    );

    // Every part tampered with.
    let bytes = STANDARD.decode(env["payload"].as_str().unwrap()).unwrap();
    let at = bytes.windows(6).position(|w| w == b"PASSED").unwrap();
    let mut flipped = bytes.clone();
    flipped[at] = b'F';
    both_refuse(
        &with_payload(&env, &flipped),
        &public,
        "does not verify",
        "payload byte",
    );
    let mut t = env.clone();
    let mut sig = STANDARD
        .decode(t["signatures"][0]["sig"].as_str().unwrap())
        .unwrap();
    sig[5] ^= 0x04;
    t["signatures"][0]["sig"] = json!(STANDARD.encode(sig));
    both_refuse(&t, &public, "does not verify", "signature");
    let mut t = env.clone();
    t["signatures"][0]["keyid"] = json!("f".repeat(64));
    both_refuse(&t, &public, "no signature is by a known key", "key id");
    let mut st2 = st.clone();
    st2["subject"][0]["digest"]["gitCommit"] = json!(other);
    let text = airlock::canonical::to_string(&st2);
    both_refuse(
        &with_payload(&env, text.as_bytes()),
        &public,
        "does not verify",
        "subject",
    );
    // A statement re-signed by a key that is not Airlock's: its own key id is unknown, and
    // under Airlock's key id the signature does not verify.
    let forger = airlock::attest::SigningKey::from_seed([42; 32]);
    let forged: Value =
        serde_json::to_value(airlock::attest::Envelope::sign(text.as_bytes(), &forger)).unwrap();
    both_refuse(&forged, &public, "no signature is by a known key", "forged");
    let mut under_ours = forged.clone();
    under_ours["signatures"][0]["keyid"] = json!(key_id);
    both_refuse(
        &under_ours,
        &public,
        "does not verify",
        "forged under our key id",
    );
    // Garbage and an unsigned record are refused with a reason, not a crash.
    let mut unsigned = v.clone();
    unsigned.as_object_mut().unwrap().remove("attestation");
    let (code, _, err) = airlock_verify(&["--config", &cfg], &unsigned.to_string());
    assert_eq!(code, 1);
    assert!(err.contains("the record has no attestation"), "{err}");
    let (code, _, err) = airlock_verify(&["--public-key", public.to_str().unwrap()], "{nope");
    assert_eq!(code, 1);
    assert!(err.contains("not a DSSE envelope"), "{err}");
}

#[test]
fn source_changed_and_timed_out_runs_are_signed_as_failed_never_passed() {
    if !docker() {
        return;
    }
    let keydir = tempfile::tempdir().unwrap();
    let (f, public, _) = signing_fixture(keydir.path());
    let changed = f.sh("echo x >> README");
    assert_eq!(changed["status"], "source_changed", "{changed}");
    let timed = f
        .run(&["--timeout", "1"], &["sleep", "30"])
        .json
        .expect("a JSON result");
    assert_eq!(timed["status"], "timed_out", "{timed}");
    let failed = f.sh("exit 3");
    assert_eq!(failed["status"], "failed", "{failed}");
    for v in [&changed, &timed, &failed] {
        let py = both_accept(&v["attestation"], &public);
        assert_eq!(py["verificationResult"], "FAILED", "{v}");
        let st = payload(&v["attestation"]);
        assert_eq!(st["predicate"]["airlock"]["status"], v["status"]);
        assert_eq!(st["predicate"]["verifiedLevels"], json!(["FAILED"]));
        let (_, out, _) = airlock_verify(
            &["--public-key", public.to_str().unwrap()],
            &v["attestation"].to_string(),
        );
        assert!(out.contains("FAILED") && !out.contains("PASSED"), "{out}");
    }
    // The record around a valid envelope must say what the envelope says: the failed run's
    // record holds as it is, and every edit that would make it read as another result is
    // refused, naming the field.
    let key = ["--public-key", public.to_str().unwrap()];
    let (code, out, err) = airlock_verify(&key, &failed.to_string());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("record: every attested field of the verification record matches")
            && out.contains("not attested: container_id, creation_key, expires_at, phases"),
        "{out}"
    );
    let other_commit = "0".repeat(40);
    for (field, value) in [
        ("status", json!("passed")),
        ("exit_code", json!(0)),
        ("output", json!("all tests passed\n")),
        ("candidate_revision", json!(other_commit)),
        ("candidate_tree", json!(other_commit)),
        ("environment_sha256", json!("0".repeat(64))),
        ("argv", json!(["true"])),
        ("observed_image", json!("sha256:0")),
        ("output_bytes_total", json!(7)),
    ] {
        let mut edited = failed.clone();
        edited[field] = value;
        let (code, out, err) = airlock_verify(&key, &edited.to_string());
        assert_eq!(code, 1, "{field}: {out}");
        assert!(
            err.contains(&format!("the record's {field} is")),
            "{field}: {err}"
        );
    }
}

/// `airlock run` killed at `point` with a signing key; returns the one record after
/// `airlock recover` (with the same config) settled it.
fn crash_then_recover(f: &Fixture, point: &str) -> (Value, Value) {
    use std::os::unix::process::ExitStatusExt;
    let mut c = f.run_cmd(&[], &["cat", "README"]);
    c.env("AIRLOCK_CRASH_AT", point);
    let out = c.output().unwrap();
    assert_eq!(out.status.signal(), Some(9), "{point}");
    let before = f.list(&[]).remove(0);
    let report = f.recover();
    let after = f
        .list(&[])
        .into_iter()
        .find(|v| v["verification_id"] == before["verification_id"])
        .unwrap();
    (after, report)
}

#[test]
fn a_kill_before_signing_leaves_recovery_to_sign_an_error_never_a_pass() {
    if !docker() {
        return;
    }
    let keydir = tempfile::tempdir().unwrap();
    let (f, public, key_id) = signing_fixture(keydir.path());
    let (after, report) = crash_then_recover(&f, "before_sign");
    assert_eq!(after["status"], "error", "{after} {report}");
    assert_eq!(
        report["marked_error"][0]["verification_id"],
        after["verification_id"]
    );
    let py = both_accept(&after["attestation"], &public);
    assert_eq!(py["verificationResult"], "FAILED");
    assert_eq!(py["keyid"], key_id.as_str());
    let st = payload(&after["attestation"]);
    assert_eq!(st["predicate"]["airlock"]["status"], "error");
    assert_eq!(
        st["predicate"]["airlock"]["error"],
        "interrupted before a result was recorded"
    );
    // Killed after its artifact: the result is restored with the signature made before the
    // kill (the artifact carried it), which still verifies and says PASSED.
    let f2 = Fixture::new(&[("README", "hello\n", false)]).with_config(&format!(
        "signing_key = {:?}\n",
        keydir.path().join("signing.pem").display().to_string()
    ));
    let (after, report) = crash_then_recover(&f2, "after_artifact");
    assert_eq!(after["status"], "passed", "{report}");
    let py = both_accept(&after["attestation"], &public);
    assert_eq!(py["verificationResult"], "PASSED");
    assert_eq!(
        payload(&after["attestation"])["predicate"]["airlock"]["verification_id"],
        after["verification_id"]
    );
}

#[test]
fn deliveries_are_attested_in_the_receipt_the_trailer_and_git_notes_and_the_page_checks_them() {
    if !docker() {
        return;
    }
    let keydir = tempfile::tempdir().unwrap();
    let (key, public, key_id) = keys(keydir.path(), "signing");
    let mut s = Server::start_with(&format!(
        "signing_key = {:?}\nverifier_id = \"urn:airlock:test-verifier\"\n",
        key.display().to_string()
    ));
    // The public key, with no token at all.
    let (status, body) = request(&s.addr, "GET", "/api/v1/keys", None, b"").unwrap();
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(listed["signing_key_id"], key_id.as_str());
    assert_eq!(listed["verifier_id"], "urn:airlock:test-verifier");
    assert_eq!(
        listed["keys"][0]["public_key_pem"].as_str().unwrap(),
        std::fs::read_to_string(&public).unwrap()
    );

    let (cid, rev, base) = crate::delivery::frozen(&s);
    let (id, version) = crate::delivery::approved_request(&s, &cid, &rev, "update_ref");
    let c = s.ok(
        ALICE,
        "integration.deliver",
        crate::delivery::deliver_body(&cid, &id, version),
    );
    let c = cand(&c);
    let receipt = &c["delivery_receipt"];
    let landed = receipt["landed_revision"].as_str().unwrap().to_string();
    assert_eq!(s.head(), landed);
    let vs = c["verifications"].as_array().unwrap();
    let verification = vs.iter().find(|v| v["status"] == "passed").unwrap();
    let v_env = &verification["attestation"];
    let d_env = &receipt["attestation"];

    both_accept(v_env, &public);
    let py = both_accept(d_env, &public);
    assert_eq!(py["predicateType"], "urn:airlock:attestation:delivery:v1");
    let st = payload(d_env);
    assert_eq!(st["subject"][0]["digest"]["gitCommit"], landed.as_str());
    let p = &st["predicate"];
    assert_eq!(p["verifier"]["id"], "urn:airlock:test-verifier");
    assert_eq!(p["approver"], "member:dave");
    assert_eq!(p["request"]["request_id"], id.as_str());
    assert_eq!(p["receipt"]["receipt_id"], receipt["receipt_id"]);
    assert_eq!(p["receipt"]["landed_revision"], landed.as_str());
    let digest = airlock::attest::Envelope::digest(&serde_json::from_value(v_env.clone()).unwrap());
    assert_eq!(p["verifications"][0]["attestation"], digest.as_str());
    assert_eq!(
        p["verifications"][0]["verification_id"],
        verification["verification_id"]
    );

    // The landed commit names the verification's attestation by digest...
    let message = git(&s.repo, &["log", "-1", "--format=%B", &landed]);
    assert!(
        message.contains(&format!("attestation={digest}")),
        "{message}"
    );
    // ...and git alone carries both attestations: the note on the landed commit.
    let note = git(&s.repo, &["notes", "--ref=airlock", "show", &landed]);
    let lines: Vec<Value> = note
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, [d_env.clone(), v_env.clone()]);
    let (code, out, err) = airlock_verify_at(&public, &s.repo, &landed, &note);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    // A validly signed verification the delivery did not rely on does not ride along.
    let signer = airlock::attest::SigningKey::read(&key).unwrap();
    let mut stranger = payload(v_env);
    stranger["predicate"]["airlock"]["verification_id"] = json!("ver_stranger");
    let stranger = serde_json::to_value(airlock::attest::Envelope::sign(
        airlock::canonical::to_string(&stranger).as_bytes(),
        &signer,
    ))
    .unwrap();
    both_accept(&stranger, &public);
    let padded = format!("{}\n{stranger}\n", note.trim_end());
    let (code, _, err) = airlock_verify_at(&public, &s.repo, &landed, &padded);
    assert_eq!(code, 1);
    assert!(
        err.contains("envelope 3") && err.contains("is not a verification the delivery relied on"),
        "{err}"
    );
    // The delivery's subject is the landed commit, not the target it was built on.
    let (code, _, err) = airlock_verify_at(&public, &s.repo, &base, &d_env.to_string());
    assert_eq!(code, 1, "{err}");
    // The receipt as a record: it holds as the daemon wrote it, and an edited one does not.
    let (code, out, err) = airlock_verify_at(&public, &s.repo, &landed, &receipt.to_string());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("delivery receipt record matches"), "{out}");
    let mut edited = receipt.clone();
    edited["target_ref"] = json!("refs/heads/elsewhere");
    let (code, _, err) = airlock_verify_at(&public, &s.repo, &landed, &edited.to_string());
    assert_eq!(code, 1);
    assert!(err.contains("the record's target_ref is"), "{err}");

    // The page checks each attestation against the daemon's keys and says so.
    let bob = crate::serve_ui::sign_in(&s, BOB);
    let path = format!("/ui/w/ws1/candidates/{cid}");
    let (_, _, page) = crate::serve_ui::get(&s, &bob, &path);
    assert_eq!(page.matches("data-verified=\"true\"").count(), 2, "{page}");
    assert!(page.contains(&key_id), "the key id is on the page");
    assert!(!page.contains("data-verified=\"false\""));
    // Restarted with another key (the old one not kept as a verification key): the same
    // attestations are shown as not verifying, with the reason.
    let (key2, _, _) = keys(keydir.path(), "rotated");
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(
        &s.config,
        text.replace(key.to_str().unwrap(), key2.to_str().unwrap()),
    )
    .unwrap();
    s.restart(None);
    let bob = crate::serve_ui::sign_in(&s, BOB);
    let (_, _, page) = crate::serve_ui::get(&s, &bob, &path);
    assert_eq!(page.matches("data-verified=\"false\"").count(), 2, "{page}");
    assert!(page.contains("no signature is by a known key"), "{page}");
    // Rotation done right: the old public key listed in verification_keys.
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(
        &s.config,
        format!(
            "verification_keys = [{:?}]\n{text}",
            public.display().to_string()
        ),
    )
    .unwrap();
    s.restart(None);
    let (_, body) = request(&s.addr, "GET", "/api/v1/keys", None, b"").unwrap();
    let listed: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed["keys"][1]["key_id"], key_id.as_str());
    assert_eq!(listed["keys"][1]["signing"], false);
    let bob = crate::serve_ui::sign_in(&s, BOB);
    let (_, _, page) = crate::serve_ui::get(&s, &bob, &path);
    assert_eq!(page.matches("data-verified=\"true\"").count(), 2, "{page}");
}

#[test]
fn an_applied_transaction_is_attested_with_head_before_post_images_and_its_tests() {
    let keydir = tempfile::tempdir().unwrap();
    let (key, public, key_id) = keys(keydir.path(), "signing");
    let Some(s) = crate::serve_apply::server_with(&format!(
        "signing_key = {:?}\n",
        key.display().to_string()
    )) else {
        return;
    };
    let head_before = s.head();
    let (id, rev) =
        crate::serve_apply::approved(&s, json!([["sh", "-c", "grep -q more README"]]), "a");
    let v = crate::support::governed::validated(&s, &id, &rev, "a");
    assert_eq!(v["valid"], true, "{v}");
    let a = s.ok(
        ALICE,
        "patch.apply",
        json!({"workspace_id": "ws1", "proposal_id": id, "validation_id": v["validation_id"],
               "idempotency_key": "apply-1"}),
    );
    let t = &a["transaction"];
    assert_eq!(t["status"], "applied", "{a}");
    let env = &t["attestation"];
    let py = both_accept(env, &public);
    assert_eq!(
        py["predicateType"],
        "urn:airlock:attestation:transaction:v1"
    );
    assert_eq!(py["keyid"], key_id.as_str());
    // transaction.show returns the same attestation.
    let shown = s.ok(
        ALICE,
        "transaction.show",
        json!({"workspace_id": "ws1", "transaction_id": t["transaction_id"]}),
    );
    assert_eq!(&shown["transaction"]["attestation"], env);

    let st = payload(env);
    assert_eq!(
        st["subject"][0]["digest"]["gitCommit"],
        head_before.as_str()
    );
    // Every path with a post-image is a subject, with the SHA-256 of the installed bytes.
    let installed = |p: &str| {
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            std::fs::read(s.repo.join(p)).unwrap(),
        ))
    };
    for path in ["README", "docs/new.md", "run.sh"] {
        let subject = st["subject"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == path)
            .unwrap_or_else(|| panic!("{path} is not a subject: {st}"));
        assert_eq!(
            subject["digest"]["sha256"],
            installed(path).as_str(),
            "{path}"
        );
    }
    assert!(
        !st["subject"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "old.txt"),
        "a removed path has no post-image to name"
    );
    let p = &st["predicate"];
    assert_eq!(p["proposal_revision"]["sha256"], rev.as_str());
    assert_eq!(p["transaction_id"], t["transaction_id"]);
    assert_eq!(p["head_before"], head_before.as_str());
    assert_eq!(p["verdict"]["claims"], t["claims"]);
    // The ids of the evidence that satisfied the verdict: bob's approving vote among them.
    assert_eq!(p["verdict"]["approvals"], t["approvals"]);
    assert!(!t["approvals"].as_array().unwrap().is_empty(), "{t}");
    assert_eq!(p["validation"]["validation_id"], v["validation_id"]);
    // The dry run and the expected test, each by its own attestation's digest.
    let runs = p["validation"]["verifications"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{p}");
    for r in runs {
        let vid = r["verification_id"].as_str().unwrap();
        let out = Command::new(BIN)
            .args(["verification", "show", vid, "--config"])
            .arg(&s.config)
            .output()
            .unwrap();
        let rec: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        let digest = airlock::attest::Envelope::digest(
            &serde_json::from_value(rec["attestation"].clone()).unwrap(),
        );
        assert_eq!(r["attestation"], digest.as_str());
        assert_eq!(
            payload(&rec["attestation"])["predicate"]["verificationResult"],
            "PASSED"
        );
    }
    // Its subject check: HEAD before the apply, not after.
    let (code, _, err) = airlock_verify_at(&public, &s.repo, &head_before, &env.to_string());
    assert_eq!(code, 0, "{err}");
    // The transaction as a record holds; one whose hashes or applier were edited does not.
    let (code, out, err) = airlock_verify_at(&public, &s.repo, &head_before, &t.to_string());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("transaction record matches"), "{out}");
    for (field, value) in [
        ("applied_by", json!("member:mallory")),
        ("hashes", json!([])),
        ("head_after", json!("0".repeat(40))),
    ] {
        let mut edited = t.clone();
        edited[field] = value;
        let (code, _, err) = airlock_verify_at(&public, &s.repo, &head_before, &edited.to_string());
        assert_eq!(code, 1, "{field}");
        assert!(
            err.contains(&format!("the record's {field} is")),
            "{field}: {err}"
        );
    }
    // The transaction's page checks it and shows the key.
    let alice = crate::serve_ui::sign_in(&s, ALICE);
    let path = format!(
        "/ui/w/ws1/transactions/{}",
        t["transaction_id"].as_str().unwrap()
    );
    let (_, _, page) = crate::serve_ui::get(&s, &alice, &path);
    assert_eq!(page.matches("data-verified=\"true\"").count(), 1, "{page}");
    assert!(page.contains(&key_id), "{page}");
}

/// Deliveries of two candidates in one repository released together: each adds its note to
/// `refs/notes/airlock` by compare-and-swap in its own ref transaction, so one of them finds
/// the notes moved and makes its note again on top; neither note is ever lost.
#[test]
fn concurrent_deliveries_in_one_repository_each_keep_their_note() {
    let keydir = tempfile::tempdir().unwrap();
    let (key, public, _) = keys(keydir.path(), "signing");
    let mut s = Server::fake_with(&format!("signing_key = {:?}\n", key.display().to_string()));
    let log = keydir.path().join("daemon.log");
    s.log = Some(log.clone());
    s.env.push(("AIRLOCK_LOG".into(), "airlock=info".into()));
    s.restart(None);
    for round in 0..6 {
        let base = s.head();
        let mut ready = vec![];
        for i in 0..2 {
            let a = s.agent_commit(
                &format!("r{round}i{i}"),
                &base,
                &[(&format!("f{round}-{i}.txt") as &str, "x\n")],
            );
            let sub = s.evidence("run_a", &base, &a, None);
            let c = s.ok(
                ALICE,
                "integration.prepare",
                s.prepare_body(vec![sub], &base, &format!("p{round}-{i}")),
            );
            let cid = cand(&c)["candidate_id"].as_str().unwrap().to_string();
            let rev = cand(&c)["candidate_revision"].as_str().unwrap().to_string();
            let (id, version) = crate::delivery::approved_request(&s, &cid, &rev, "proposal");
            ready.push((cid, id, version));
        }
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<Value> = std::thread::scope(|scope| {
            let handles: Vec<_> = ready
                .iter()
                .enumerate()
                .map(|(i, (cid, id, version))| {
                    let (s, barrier) = (&s, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        std::thread::sleep(std::time::Duration::from_micros(
                            (i as u64 * 700 + round * 300) % 2000,
                        ));
                        s.ok(
                            ALICE,
                            "integration.deliver",
                            crate::delivery::deliver_body(cid, id, *version),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &results {
            let receipt = &cand(r)["delivery_receipt"];
            assert_eq!(receipt["result"], "proposed", "{r}");
            let landed = receipt["landed_revision"].as_str().unwrap();
            let note = git(&s.repo, &["notes", "--ref=airlock", "show", landed]);
            let first: Value = serde_json::from_str(note.lines().next().unwrap()).unwrap();
            assert_eq!(
                first, receipt["attestation"],
                "round {round}: the note is this delivery's"
            );
            let (code, _, err) = airlock_verify(&["--public-key", public.to_str().unwrap()], &note);
            assert_eq!(code, 0, "round {round}: {err}");
        }
    }
    // Twelve deliveries, twelve notes.
    let listed = git(&s.repo, &["notes", "--ref=airlock", "list"]);
    assert_eq!(listed.lines().count(), 12, "{listed}");
    // How often the compare-and-swap lost (timing decides; the invariant above holds either way).
    let retries = std::fs::read_to_string(&log)
        .unwrap()
        .matches("its note is made again")
        .count();
    eprintln!("notes made again after a lost compare-and-swap: {retries}");
}

/// `attestation verify` of a file that is not there says so first, whatever else is missing
/// (here, every key).
#[test]
fn verifying_a_missing_file_names_the_file_before_the_keys() {
    let out = Command::new(BIN)
        .args(["attestation", "verify", "/nonexistent/record.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/record.json"), "{err}");
    assert!(!err.contains("public key"), "{err}");
}
