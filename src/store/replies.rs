//! Sealed replies: the first answer a keyed call gave, kept so every replay of that key answers
//! exactly those bytes (`engine::idempotency::Keys::seal`).

use super::{Store, StoreError};
use rusqlite::{OptionalExtension, params};

/// A keyed call's answer, to be sealed under its workspace, actor, method and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedReply {
    pub workspace_id: String,
    pub actor_key: String,
    pub method: String,
    pub idempotency_key: String,
    /// The digest of the call's parameters (its body without the key).
    pub digest: String,
    pub reply: Vec<u8>,
    /// RFC 3339, by the engine's clock.
    pub sealed_at: String,
}

impl Store {
    /// Seals `r` unless the key already has a reply, and answers the sealed reply: the earlier
    /// one when it was sealed for the same parameters, else `r`'s own (a call with other
    /// parameters under the key is refused before it gets here; this never answers it
    /// another call's bytes).
    pub async fn seal_reply(&self, r: SealedReply) -> Result<Vec<u8>, StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT OR IGNORE INTO sealed_replies
                 (workspace_id, actor_key, method, idempotency_key, digest, reply, sealed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    r.workspace_id,
                    r.actor_key,
                    r.method,
                    r.idempotency_key,
                    r.digest,
                    r.reply,
                    r.sealed_at
                ],
            )?;
            let sealed: Option<(String, Vec<u8>)> = c
                .query_row(
                    "SELECT digest, reply FROM sealed_replies
                     WHERE workspace_id = ?1 AND actor_key = ?2 AND method = ?3
                       AND idempotency_key = ?4",
                    params![r.workspace_id, r.actor_key, r.method, r.idempotency_key],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            Ok(match sealed {
                Some((digest, reply)) if digest == r.digest => reply,
                _ => r.reply,
            })
        })
        .await
    }

    /// Removes the replies sealed before `before` (RFC 3339); returns how many. A replay of
    /// such a key still finds its binding and answers its result as it is now.
    pub async fn prune_sealed_replies(&self, before: String) -> Result<usize, StoreError> {
        self.call(move |c| {
            Ok(c.execute(
                "DELETE FROM sealed_replies WHERE sealed_at < ?1",
                params![before],
            )?)
        })
        .await
    }
}
