//! What every governed request shares: the idempotency key and its replay, the workspace
//! check, paging cursors and limits, and the text-field check.

use crate::config::Permission;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::limits;

/// An opaque paging cursor: `<prefix><position>`, as a previous page's `next_cursor` said;
/// `None` for the first page.
pub(crate) fn parse_cursor(
    prefix: &str,
    cursor: Option<&str>,
) -> Result<Option<i64>, ServiceError> {
    let Some(c) = cursor else {
        return Ok(None);
    };
    c.strip_prefix(prefix)
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .map(Some)
        .ok_or_else(|| {
            ServiceError::invalid_field(
                "cursor",
                format!("cursor {c:?} is not a next_cursor this server returned"),
            )
        })
}

/// The `next_cursor` of a page: set when the page is full (more may follow).
pub(super) fn next_cursor(
    prefix: &str,
    len: usize,
    limit: u32,
    last: Option<i64>,
) -> Option<String> {
    (len == limit as usize)
        .then(|| last.map(|n| format!("{prefix}{n}")))
        .flatten()
}

/// A list's page size: default 50, 1..=200.
pub(super) fn page_limit(limit: Option<u32>) -> Result<u32, ServiceError> {
    let limit = limit.unwrap_or(limits::DEFAULT_LIST_LIMIT);
    if !(1..=limits::MAX_CLAIM_LIST_LIMIT).contains(&limit) {
        return Err(ServiceError::invalid_field(
            "limit",
            format!(
                "limit is {limit}; it must be between 1 and {}",
                limits::MAX_CLAIM_LIST_LIMIT
            ),
        ));
    }
    Ok(limit)
}

pub(super) fn check_text(field: &str, v: &str, required: bool) -> Result<(), ServiceError> {
    super::check_text_field(field, v, required, limits::MAX_CLAIM_TEXT_BYTES)
}

pub(super) use crate::engine::idempotency::Keyed;

impl crate::engine::context::Handles {
    /// The workspace's worktree root, if the actor may use `perm` there and it is governed.
    pub(super) fn governed(
        &self,
        actor: &Actor,
        workspace_id: &str,
        perm: Permission,
    ) -> Result<std::path::PathBuf, ServiceError> {
        let ws = self.authorize(actor, workspace_id, perm)?;
        ws.worktree.clone().ok_or_else(|| {
            ServiceError::precondition(format!(
                "workspace {workspace_id:?} has no worktree: the governed path is off there"
            ))
        })
    }
}
