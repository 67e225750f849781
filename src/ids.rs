//! Server-generated identifiers and timestamps.

use std::io::Read;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Returns `n` bytes from the kernel's CSPRNG, hex-encoded.
fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom is readable on every supported Linux host");
    hex::encode(buf)
}

/// A new verification id, `ver_<32 hex>`.
pub fn new_verification_id() -> String {
    format!("ver_{}", random_hex(16))
}

/// A new creation key: 32 lowercase hex characters, safe in container names, labels and paths.
pub fn new_creation_key() -> String {
    random_hex(16)
}

/// True when `key` has the exact shape of a creation key (so it is safe to join into a path).
pub fn is_creation_key(key: &str) -> bool {
    key.len() == 32 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// True when `id` has the exact shape of a verification id.
pub fn is_verification_id(id: &str) -> bool {
    id.strip_prefix("ver_").is_some_and(is_creation_key)
}

/// Formats a time as RFC 3339 in UTC.
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .expect("every UTC OffsetDateTime formats as RFC 3339")
}

/// Current wall-clock time in UTC.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_shape() {
        let k = new_creation_key();
        assert!(is_creation_key(&k), "{k}");
        assert!(is_verification_id(&new_verification_id()));
        assert!(!is_creation_key("../../etc"));
        assert!(!is_verification_id("ver_../x"));
        assert_ne!(new_creation_key(), new_creation_key());
    }
}
