//! What every governed request shares: the idempotency key and its replay, the workspace
//! check, paging cursors and limits, and the text-field check.

use crate::config::Permission;
use crate::engine::Context;
use crate::engine::service::{Actor, ServiceError};
use crate::limits;
use crate::store::Binding;

/// An opaque paging cursor: `<prefix><position>`, as a previous page's `next_cursor` said;
/// `None` for the first page.
pub(super) fn parse_cursor(
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

/// A checked idempotency key and the digest of the request it came with (the key left out).
pub(super) struct Keyed {
    pub(super) key: String,
    pub(super) digest: String,
    pub(super) operation: &'static str,
}

impl Keyed {
    pub(super) fn new<T: serde::Serialize>(
        operation: &'static str,
        key: &str,
        params_without_key: &T,
    ) -> Result<Keyed, ServiceError> {
        crate::candidate::check_idempotency_key(key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        Ok(Keyed {
            key: key.to_string(),
            digest: crate::candidate::digest(params_without_key),
            operation,
        })
    }

    /// The key of a call this one makes on its behalf (`<key>/<suffix>`), so a replay of this
    /// call replays that one too. A key near the length limit is replaced by its digest, so
    /// the derived key is always a valid key.
    pub(super) fn derived(&self, suffix: &str) -> String {
        let plain = format!("{}/{suffix}", self.key);
        if plain.len() <= crate::candidate::MAX_IDEMPOTENCY_KEY_BYTES {
            plain
        } else {
            format!("sha256:{}", crate::apply::sha256_hex(plain.as_bytes()))
        }
    }

    pub(super) fn binding(&self, workspace_id: &str, actor: &Actor, result_id: &str) -> Binding {
        Binding {
            workspace_id: workspace_id.to_string(),
            actor_key: actor.key(),
            operation: self.operation.to_string(),
            idempotency_key: self.key.clone(),
            digest: self.digest.clone(),
            result_id: result_id.to_string(),
        }
    }
}

impl Context {
    /// The result id an earlier call with this key recorded (a replay), if any; the key with
    /// other parameters is `conflict`.
    pub(super) async fn replay_of(
        &self,
        workspace_id: &str,
        actor: &Actor,
        k: &Keyed,
    ) -> Result<Option<String>, ServiceError> {
        self.bound_result(workspace_id, &actor.key(), k.operation, &k.key, &k.digest)
            .await
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_key_is_always_a_valid_key_and_the_same_each_time() {
        let short = Keyed::new("op", "k1", &"params").unwrap();
        assert_eq!(short.derived("claim/0"), "k1/claim/0");
        let max = "k".repeat(crate::candidate::MAX_IDEMPOTENCY_KEY_BYTES);
        let long = Keyed::new("op", &max, &"params").unwrap();
        for suffix in ["claim/0", "claim/1", "proposal"] {
            let d = long.derived(suffix);
            crate::candidate::check_idempotency_key(&d).unwrap();
            assert_eq!(d, long.derived(suffix), "deterministic");
        }
        assert_ne!(long.derived("claim/0"), long.derived("claim/1"));
    }
}
