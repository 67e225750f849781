//! DSSE (Dead Simple Signing Envelope) v1: the envelope, its pre-authentication encoding and
//! Ed25519 signatures over it.
//!
//! The signature covers `PAE(payloadType, payload)` =
//! `"DSSEv1" SP LEN(type) SP type SP LEN(payload) SP payload`, lengths in ASCII decimal, so
//! neither the type nor the payload can be changed without breaking it.

use super::keys::{PublicKey, SigningKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::Signer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The payload type of an in-toto Statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A DSSE envelope in its JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The statement's bytes, base64 (standard alphabet, padded).
    pub payload: String,
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// The signing key's id: hex SHA-256 of its public key's DER form.
    pub keyid: String,
    /// The Ed25519 signature of the PAE, base64.
    pub sig: String,
}

/// The pre-authentication encoding DSSE signs.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// Why an envelope's signature does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRefused {
    #[error("the envelope has no signatures")]
    Unsigned,
    #[error("payload is not base64: {0}")]
    PayloadEncoding(String),
    #[error(
        "no signature is by a known key (signed by {signed}; known: {known})",
        signed = .signed.join(", "),
        known = if .known.is_empty() { "none".to_string() } else { .known.join(", ") }
    )]
    UnknownKey {
        signed: Vec<String>,
        known: Vec<String>,
    },
    #[error("the signature by key {keyid} does not verify (payload, type or signature changed)")]
    Invalid { keyid: String },
}

impl Envelope {
    /// Signs `payload` (an in-toto statement's bytes) with `key`.
    pub fn sign(payload: &[u8], key: &SigningKey) -> Envelope {
        let sig = key.key.sign(&pae(PAYLOAD_TYPE, payload));
        Envelope {
            payload: STANDARD.encode(payload),
            payload_type: PAYLOAD_TYPE.to_string(),
            signatures: vec![EnvelopeSignature {
                keyid: key.public.key_id.clone(),
                sig: STANDARD.encode(sig.to_bytes()),
            }],
        }
    }

    /// `sha256:<hex>` of the envelope's canonical JSON: how other records name it.
    pub fn digest(&self) -> String {
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(crate::canonical::to_string(self).as_bytes()))
        )
    }

    /// The payload's bytes.
    pub fn payload_bytes(&self) -> Result<Vec<u8>, SignatureRefused> {
        STANDARD
            .decode(&self.payload)
            .map_err(|e| SignatureRefused::PayloadEncoding(e.to_string()))
    }

    /// Checks the signatures against `keys`: at least one must be by a known key, and every
    /// signature by a known key must verify (strictly). Returns the key that signed.
    pub fn verify<'k>(&self, keys: &'k [PublicKey]) -> Result<&'k PublicKey, SignatureRefused> {
        if self.signatures.is_empty() {
            return Err(SignatureRefused::Unsigned);
        }
        let payload = self.payload_bytes()?;
        let message = pae(&self.payload_type, &payload);
        let mut good = None;
        for s in &self.signatures {
            let Some(key) = keys.iter().find(|k| k.key_id == s.keyid) else {
                continue;
            };
            let sig = STANDARD
                .decode(&s.sig)
                .ok()
                .and_then(|b| ed25519_dalek::Signature::from_slice(&b).ok())
                .ok_or_else(|| SignatureRefused::Invalid {
                    keyid: s.keyid.clone(),
                })?;
            key.key
                .verify_strict(&message, &sig)
                .map_err(|_| SignatureRefused::Invalid {
                    keyid: s.keyid.clone(),
                })?;
            good.get_or_insert(key);
        }
        good.ok_or_else(|| SignatureRefused::UnknownKey {
            signed: self.signatures.iter().map(|s| s.keyid.clone()).collect(),
            known: keys.iter().map(|k| k.key_id.clone()).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_specification_example() {
        // The protocol document's worked example: type "http://example.com/HelloWorld",
        // body "hello world".
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn a_signed_envelope_verifies_and_every_change_is_refused() {
        let key = SigningKey::from_seed([7; 32]);
        let other = SigningKey::from_seed([8; 32]);
        let keys = [key.public.clone()];
        let env = Envelope::sign(br#"{"a":1}"#, &key);
        assert_eq!(env.verify(&keys).unwrap().key_id, key.public.key_id);

        let mut t = env.clone();
        t.payload = STANDARD.encode(br#"{"a":2}"#);
        assert!(matches!(
            t.verify(&keys),
            Err(SignatureRefused::Invalid { .. })
        ));
        let mut t = env.clone();
        t.payload_type = "application/json".into();
        assert!(matches!(
            t.verify(&keys),
            Err(SignatureRefused::Invalid { .. })
        ));
        let mut t = env.clone();
        let mut sig = STANDARD.decode(&t.signatures[0].sig).unwrap();
        sig[10] ^= 1;
        t.signatures[0].sig = STANDARD.encode(sig);
        assert!(matches!(
            t.verify(&keys),
            Err(SignatureRefused::Invalid { .. })
        ));
        let mut t = env.clone();
        t.signatures[0].keyid = other.public.key_id.clone();
        assert!(matches!(
            t.verify(&keys),
            Err(SignatureRefused::UnknownKey { .. })
        ));
        let mut t = env.clone();
        t.signatures.clear();
        assert_eq!(t.verify(&keys), Err(SignatureRefused::Unsigned));
        // The other key's own signature, under our key's id, is refused too.
        let mut t = Envelope::sign(br#"{"a":1}"#, &other);
        t.signatures[0].keyid = key.public.key_id.clone();
        assert!(matches!(
            t.verify(&keys),
            Err(SignatureRefused::Invalid { .. })
        ));
        // A key that is not known verifies nothing.
        assert!(matches!(
            env.verify(std::slice::from_ref(&other.public)),
            Err(SignatureRefused::UnknownKey { .. })
        ));
    }

    #[test]
    fn key_ids_are_the_sha256_of_the_public_key_der_and_pem_round_trips() {
        let key = SigningKey::from_seed([9; 32]);
        let back = PublicKey::from_pem(&key.public.pem).unwrap();
        assert_eq!(back, key.public);
        let from_private = PublicKey::from_pem(&key.to_pem()).unwrap();
        assert_eq!(from_private.key_id, key.public.key_id);
        // The DER of an Ed25519 SubjectPublicKeyInfo is a 12-byte prefix and the 32-byte key.
        let mut der = hex::decode("302a300506032b6570032100").unwrap();
        der.extend_from_slice(&key.public.key.to_bytes());
        assert_eq!(key.public.key_id, hex::encode(Sha256::digest(&der)));
        assert!(
            PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
                .is_err()
        );
    }
}
