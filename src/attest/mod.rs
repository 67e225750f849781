//! Signed attestations: every terminal verification, delivery and applied transaction can be
//! carried away as an in-toto Statement v1 in a DSSE envelope, signed with the daemon's
//! Ed25519 key and checkable offline with its public key.
//!
//! - [`keys`]: the signing key (`signing_key`, PKCS#8 PEM), public keys
//!   (`verification_keys`) and key ids (SHA-256 of the public key's DER form).
//! - [`dsse`]: the envelope, PAE and signatures.
//! - [`statement`]: the in-toto statement and the predicate types Airlock signs.
//! - [`verify`]: checking one (`airlock attestation verify`, the web page).
//!
//! This module knows nothing of Airlock's records: what a verification, a delivery or an
//! apply attests, and the configured [`crate::engine::attesting::Attestor`], are the
//! engine's. Without `signing_key` nothing is signed: records carry no `attestation`.

pub mod dsse;
pub mod keys;
pub mod statement;
pub mod verify;

pub use dsse::Envelope;
pub use keys::{KeyError, PublicKey, SigningKey};
pub use statement::Statement;
