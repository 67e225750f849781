//! The one rule for engine names and labels (an engine's, and those a profile requires).

use super::ConfigError;
use crate::limits::MAX_ENGINE_NAME_BYTES;

/// An engine name or a label (of an engine, or one a profile requires): 1 to
/// [`engines::MAX_ENGINE_NAME_BYTES`] bytes of ASCII letters, digits, '-', '_' or '.'.
pub(crate) fn check_name(field: String, name: &str, what: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_ENGINE_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            field,
            message: format!(
                "{what} {name:?} must be 1 to {MAX_ENGINE_NAME_BYTES} bytes of ASCII letters, digits, '-', '_' or '.'"
            ),
        })
    }
}
