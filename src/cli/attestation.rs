//! `airlock keys generate` and `airlock attestation verify`.

use super::{fail, refuse};
use crate::attest::{PublicKey, SigningKey, verify};
use crate::config::Config;
use crate::limits;
use clap::Subcommand;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Write a new Ed25519 signing key to PATH (PKCS#8 PEM, mode 0600; refused if PATH
    /// exists) and print its public key (PEM) and key id. Name it as `signing_key` in the
    /// config to sign attestations.
    Generate {
        /// Where the private key is written.
        path: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum AttestationCommand {
    /// Check an attestation: the DSSE envelope, its signature by a known key, the in-toto
    /// statement and its predicate type, and with --repo and --rev that its subject is that
    /// revision. Exit 0 when all hold (one summary line on stdout), 1 with one line saying
    /// why otherwise. FILE may be an envelope, a record holding one as `attestation` (a
    /// verification, a delivery receipt or a transaction: every field the statement covers
    /// must then say what the statement says, and a second line names the fields it does not
    /// cover), or envelopes one per line (a `refs/notes/airlock` note): each must hold.
    Verify {
        /// The attestation file, or - for stdin.
        file: String,
        /// A public key (PEM) to check with (repeatable); default: the configured keys
        /// (signing_key's public half and verification_keys).
        #[arg(long = "public-key", value_name = "PEM")]
        public_key: Vec<PathBuf>,
        /// With --rev: the repository the subject must be a revision of.
        #[arg(long, value_name = "PATH", requires = "rev")]
        repo: Option<PathBuf>,
        /// With --repo: the revision the subject must name (its commit, and its tree).
        #[arg(long, value_name = "REV", requires = "repo")]
        rev: Option<String>,
        /// Server configuration file naming signing_key and verification_keys (used when no
        /// --public-key is given).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

pub fn keys(cmd: KeysCommand) -> ExitCode {
    match cmd {
        KeysCommand::Generate { path } => match SigningKey::generate(&path) {
            Ok(k) => {
                print!("{}", k.public.pem);
                println!("key id: {}", k.public.key_id);
                ExitCode::SUCCESS
            }
            Err(e @ crate::attest::KeyError::Exists { .. }) => refuse(e),
            Err(e) => fail(e),
        },
    }
}

pub fn attestation(cmd: AttestationCommand) -> ExitCode {
    match cmd {
        AttestationCommand::Verify {
            file,
            public_key,
            repo,
            rev,
            config,
        } => {
            // What is to be checked first: a missing file is the first thing to say.
            let bytes = match read_input(&file) {
                Ok(b) => b,
                Err(e) => return refuse(e),
            };
            let keys = match keys_of(&public_key, config.as_deref()) {
                Ok(k) => k,
                Err(e) => return refuse(e),
            };
            let subject = match (&repo, &rev) {
                (Some(repo), Some(rev)) => match resolve(repo, rev) {
                    Ok(s) => Some(s),
                    Err(e) => return refuse(e),
                },
                _ => None,
            };
            match check_all(&bytes, &keys, subject.as_ref()) {
                Ok(lines) => {
                    for l in lines {
                        println!("{l}");
                    }
                    ExitCode::SUCCESS
                }
                Err(why) => {
                    eprintln!("airlock: attestation refused: {why}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// The keys to check with: `--public-key` files, else the configured ones.
fn keys_of(files: &[PathBuf], config: Option<&std::path::Path>) -> Result<Vec<PublicKey>, String> {
    if !files.is_empty() {
        return files
            .iter()
            .map(|p| PublicKey::read(p).map_err(|e| format!("--public-key: {e}")))
            .collect();
    }
    let config = Config::load(config).map_err(|e| e.to_string())?;
    let a = crate::engine::attesting::Attestor::load(&config)?;
    if a.keys().is_empty() {
        return Err(
            "no public key: pass --public-key PEM, or --config naming signing_key or verification_keys"
                .into(),
        );
    }
    Ok(a.keys().to_vec())
}

fn read_input(file: &str) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    let max = limits::MAX_ATTESTATION_BYTES as u64 + 1;
    let read = if file == "-" {
        std::io::stdin().take(max).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(max).read_to_end(&mut bytes))
    };
    read.map_err(|e| format!("{file}: {e}"))?;
    if bytes.len() > limits::MAX_ATTESTATION_BYTES {
        return Err(format!(
            "{file} is larger than {} bytes",
            limits::MAX_ATTESTATION_BYTES
        ));
    }
    Ok(bytes)
}

/// (commit, tree) of REV in REPO.
fn resolve(repo: &std::path::Path, rev: &str) -> Result<(String, String), String> {
    let r = crate::staging::Repo::open(repo).map_err(|e| format!("--repo: {e}"))?;
    let commit = r.resolve_commit(rev).map_err(|e| format!("--rev: {e}"))?;
    let tree = r.tree_of(&commit).map_err(|e| format!("--rev: {e}"))?;
    Ok((commit, tree))
}

/// One envelope to check, and the record that carried it (when it came in one).
struct Input {
    envelope: serde_json::Value,
    record: Option<serde_json::Value>,
}

/// The envelopes in `bytes`: one JSON document (an envelope, or a record whose `attestation`
/// is one), or one envelope per line.
fn envelopes(bytes: &[u8]) -> Result<Vec<Input>, String> {
    let unsigned = "the record has no attestation (was a signing key configured when it settled?)";
    let one = |v: serde_json::Value| match v.get("attestation") {
        Some(a) if v.get("payload").is_none() => {
            if a.is_null() {
                Err(unsigned.to_string())
            } else {
                Ok(Input {
                    envelope: a.clone(),
                    record: Some(v),
                })
            }
        }
        // A record without the field: settled unsigned.
        None if v.get("payload").is_none() && v.get("verification_id").is_some() => {
            Err(unsigned.to_string())
        }
        _ => Ok(Input {
            envelope: v,
            record: None,
        }),
    };
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
        return Ok(vec![one(v)?]);
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| "not a DSSE envelope: not UTF-8 text".to_string())?;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v = serde_json::from_str(line)
            .map_err(|e| format!("not a DSSE envelope (line {}): {e}", i + 1))?;
        out.push(one(v)?);
    }
    if out.is_empty() {
        return Err("not a DSSE envelope: the input is empty".into());
    }
    Ok(out)
}

/// Checks every envelope in `bytes`; the summary line of each, or the first refusal.
fn check_all(
    bytes: &[u8],
    keys: &[PublicKey],
    subject: Option<&(String, String)>,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    let mut checked = Vec::new();
    let all = envelopes(bytes)?;
    let n = all.len();
    for (i, input) in all.into_iter().enumerate() {
        let which = if n > 1 {
            format!("envelope {}: ", i + 1)
        } else {
            String::new()
        };
        let raw = serde_json::to_vec(&input.envelope).expect("a JSON value serializes");
        let v = verify::verify_bytes(&raw, keys).map_err(|e| format!("{which}{e}"))?;
        // The signature proves the statement; the record around it must say the same.
        let record = input
            .record
            .as_ref()
            .map(|r| crate::engine::attesting::check_record(r, &v.statement))
            .transpose()
            .map_err(|e| format!("{which}{e}"))?;
        // A note carries the delivery and the verifications it relied on: the subject check
        // applies to the first (the delivery's, on the landed commit) only.
        if let Some((commit, tree)) = subject
            && (i == 0 || n == 1)
        {
            verify::check_subject(&v.statement, commit, tree).map_err(|e| format!("{which}{e}"))?;
        }
        let result = v.statement.predicate["verificationResult"]
            .as_str()
            .map(|r| format!(" {r}"))
            .unwrap_or_default();
        let subjects: Vec<String> = v.statement.subject.iter().map(|s| s.name.clone()).collect();
        lines.push(format!(
            "verified: {}{result} by key {} ({}); subject {}",
            v.statement.predicate_type,
            v.key_id,
            v.digest,
            subjects.join(", ")
        ));
        if let Some(r) = record {
            lines.push(format!(
                "record: every attested field of the {} record matches its attestation{}",
                r.kind,
                if r.not_attested.is_empty() {
                    String::new()
                } else {
                    format!(" (not attested: {})", r.not_attested.join(", "))
                }
            ));
        }
        checked.push(v);
    }
    verify::check_note(&checked).map_err(|e| e.to_string())?;
    Ok(lines)
}
