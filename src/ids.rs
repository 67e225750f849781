//! Server-generated identifiers and timestamps.

use std::io::Read;
use time::OffsetDateTime;

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

/// A new job id, `job_<32 hex>`.
pub fn new_job_id() -> String {
    format!("job_{}", random_hex(16))
}

/// True when `id` has the exact shape of a job id.
pub fn is_job_id(id: &str) -> bool {
    id.strip_prefix("job_").is_some_and(is_creation_key)
}

/// A new error id, `err_<16 hex>`: the client gets it, the log has the details under it.
pub fn new_error_id() -> String {
    format!("err_{}", random_hex(8))
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

/// Formats a time as RFC 3339 in UTC with exactly nine fraction digits
/// (`2026-12-01T07:40:44.123456789Z`). The fixed shape makes text order equal time order, which
/// the store relies on when it compares expiry times in SQL.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.nanosecond()
    )
}

/// Parses an RFC 3339 time (as [`rfc3339`] writes them); `None` when it is not one.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// Current wall-clock time in UTC.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::format_description::well_known::Rfc3339;

    #[test]
    fn ids_have_their_shape() {
        let k = new_creation_key();
        assert!(is_creation_key(&k), "{k}");
        assert!(is_verification_id(&new_verification_id()));
        assert!(!is_creation_key("../../etc"));
        assert!(!is_verification_id("ver_../x"));
        assert_ne!(new_creation_key(), new_creation_key());
    }

    #[test]
    fn timestamps_have_one_shape_and_sort_as_text() {
        let a = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_900_000_000).unwrap();
        let b = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_900_000_001).unwrap();
        let c = OffsetDateTime::from_unix_timestamp(1_700_000_001).unwrap();
        let (sa, sb, sc) = (rfc3339(a), rfc3339(b), rfc3339(c));
        assert_eq!(sa, "2023-11-14T22:13:20.900000000Z");
        assert_eq!(sc, "2023-11-14T22:13:21.000000000Z");
        assert!(sa < sb && sb < sc);
        // Still RFC 3339, and a time in another offset is written in UTC.
        assert_eq!(OffsetDateTime::parse(&sb, &Rfc3339).unwrap(), b);
        let shifted = b.to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(rfc3339(shifted), sb);
    }
}
