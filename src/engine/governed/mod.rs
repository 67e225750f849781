//! The governed patch path on workspaces with a `worktree`: claims and resources, proposals,
//! reviews and the policy, validation in the sandbox, the journaled apply, its recovery and
//! the control actions on its transactions.

pub mod applying;
pub mod claims;
pub mod contentions;
pub mod control;
pub mod proposals;
pub mod recovering;
pub mod requests;
pub mod resources;
pub mod reviews;
pub mod validation;

/// A text field a client sends: at most `max` bytes, not blank when `required`, and never a
/// NUL (it would cut the text short wherever a C string or a terminal shows it).
pub(super) fn check_text_field(
    field: &str,
    v: &str,
    required: bool,
    max: usize,
) -> Result<(), crate::engine::service::ServiceError> {
    use crate::engine::service::ServiceError;
    if (required && v.trim().is_empty()) || v.len() > max {
        return Err(ServiceError::invalid_field(
            field,
            format!(
                "{field} must be {}..={max} bytes{}",
                u8::from(required),
                if required { " and not blank" } else { "" }
            ),
        ));
    }
    if let Some(at) = v.find('\0') {
        return Err(ServiceError::invalid_field(
            field,
            format!("{field} holds a NUL character at byte {at}; text fields never do"),
        ));
    }
    Ok(())
}
