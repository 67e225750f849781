//! Signed attestations: every terminal verification, delivery and applied transaction can be
//! carried away as an in-toto Statement v1 in a DSSE envelope, signed with the daemon's
//! Ed25519 key and checkable offline with its public key.
//!
//! - [`keys`]: the signing key (`signing_key`, PKCS#8 PEM), public keys
//!   (`verification_keys`) and key ids (SHA-256 of the public key's DER form).
//! - [`dsse`]: the envelope, PAE and signatures.
//! - [`statement`]: what each kind of statement says.
//! - [`verify`]: checking one (`airlock attestation verify`, the web page).
//!
//! Without `signing_key` nothing is signed: records carry no `attestation`.

pub mod dsse;
pub mod keys;
pub mod statement;
pub mod verify;

pub use dsse::Envelope;
pub use keys::{KeyError, PublicKey, SigningKey};
pub use statement::{Statement, Verifier};

use crate::config::Config;
use crate::verification::Verification;

/// The daemon's signing key (if configured) and every public key its attestations may be
/// checked with: the signing key's own first, then `verification_keys` (older keys kept so
/// that what they signed still verifies).
#[derive(Debug)]
pub struct Attestor {
    signer: Option<SigningKey>,
    keys: Vec<PublicKey>,
    pub verifier: Verifier,
}

impl Attestor {
    /// Signs nothing; checks nothing.
    pub fn disabled() -> Attestor {
        Attestor {
            signer: None,
            keys: vec![],
            verifier: Verifier {
                id: crate::config::DEFAULT_VERIFIER_ID.into(),
            },
        }
    }

    /// Reads the configured keys. Errors name the config field and the file.
    pub fn load(config: &Config) -> Result<Attestor, String> {
        let signer = match &config.signing_key {
            Some(path) => Some(SigningKey::read(path).map_err(|e| format!("signing_key: {e}"))?),
            None => None,
        };
        let mut keys: Vec<PublicKey> = signer.iter().map(|s| s.public.clone()).collect();
        for (i, path) in config.verification_keys.iter().enumerate() {
            let k = PublicKey::read(path).map_err(|e| format!("verification_keys[{i}]: {e}"))?;
            if !keys.iter().any(|have| have.key_id == k.key_id) {
                keys.push(k);
            }
        }
        Ok(Attestor {
            signer,
            keys,
            verifier: Verifier {
                id: config.verifier_id.clone(),
            },
        })
    }

    /// An attestor signing with `key` (tests).
    pub fn with_key(key: SigningKey, verifier_id: &str) -> Attestor {
        Attestor {
            keys: vec![key.public.clone()],
            signer: Some(key),
            verifier: Verifier {
                id: verifier_id.into(),
            },
        }
    }

    /// Whether attestations are signed.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// The id of the key new attestations are signed with.
    pub fn signing_key_id(&self) -> Option<&str> {
        self.signer.as_ref().map(|s| s.public.key_id.as_str())
    }

    /// Every public key attestations are checked with, the signing key's first.
    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }

    /// Signs `statement`, when a signing key is configured.
    pub fn sign(&self, statement: &Statement) -> Option<Envelope> {
        self.signer
            .as_ref()
            .map(|k| Envelope::sign(&statement.to_bytes(), k))
    }

    /// Attaches the attestation of a terminal verification (replacing any it had: the
    /// statement covers the record as it is now). Without a key it removes none it had.
    pub fn attest_verification(&self, v: &mut Verification) {
        debug_assert!(v.status.is_terminal());
        if let Some(e) = self.sign(&statement::verification(v, &self.verifier)) {
            v.attestation = Some(e);
        }
    }

    /// Checks an attestation against the configured keys.
    pub fn check(&self, envelope: &Envelope) -> Result<verify::Verified, verify::Refused> {
        verify::verify(envelope, &self.keys)
    }
}

#[cfg(test)]
mod tests;
