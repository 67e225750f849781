//! The one idempotent-mutation mechanism every workflow uses. A call that changes something
//! carries an idempotency key; [`Keyed`] is that key checked, with the operation it is bound
//! under and the digest of the call's parameters (the key left out). Before acting, the
//! workflow asks [`Keys::replay_of`]: an earlier call with the same actor, operation, key
//! and digest is a replay (its recorded result id is answered), the same key with other
//! parameters is `conflict`. The change then commits [`Keyed::binding`] in its own
//! transaction, so the key is bound exactly when the change is durable. A key is made by
//! [`Keys::keyed`], which stamps it with the context's clock: the binding records when the
//! call arrived by the same clock every other row of the call uses.
//!
//! **One call per key at a time.** [`Keys::replay_of`] first takes the key's gate (one per
//! workspace, actor, operation and key, in this process) and the [`Keyed`] holds it until it
//! is dropped with the call: a second call with the same key, racing the first or retried
//! while the first still works (after a `503` for the call's budget), waits for it and then
//! finds its binding, answering the replay. No work is started twice for one key.

use crate::engine::actor::Actor;
use crate::engine::clock::Clock;
use crate::engine::error::ServiceError;
use crate::store::{Binding, Store};

/// A checked idempotency key, the operation it binds, and the digest of its call.
#[derive(Debug, Clone)]
pub struct Keyed {
    pub key: String,
    pub digest: String,
    pub operation: String,
    /// When the call arrived (RFC 3339, by the context's clock): the binding's `created_at`.
    pub at: String,
    /// The key's gate, once [`Keys::replay_of`] took it; let go with the last clone.
    hold: std::sync::Arc<std::sync::Mutex<Option<tokio::sync::OwnedMutexGuard<()>>>>,
}

/// The idempotency keys of this process's calls: each checked and stamped by the clock, the
/// gates of the keys calls are using now (by workspace, actor, operation and key), and the
/// store their bindings are read from.
pub struct Keys {
    gates: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>,
    >,
    store: Store,
    clock: Clock,
}

impl Keys {
    pub fn new(store: Store, clock: Clock) -> Keys {
        Keys {
            gates: Default::default(),
            store,
            clock,
        }
    }

    /// The gate of `id`, made when no call holds or waits for it.
    fn gate(&self, id: String) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        let mut gates = self.gates.lock().expect("key gates are never poisoned");
        if let Some(g) = gates.get(&id).and_then(std::sync::Weak::upgrade) {
            return g;
        }
        // Forget the gates nobody holds any more (they are remade when needed).
        gates.retain(|_, g| g.strong_count() > 0);
        let g = std::sync::Arc::new(tokio::sync::Mutex::new(()));
        gates.insert(id, std::sync::Arc::downgrade(&g));
        g
    }

    /// Gates held or waited for now.
    pub fn in_use(&self) -> usize {
        self.gates
            .lock()
            .expect("key gates are never poisoned")
            .values()
            .filter(|g| g.strong_count() > 0)
            .count()
    }
}

impl Keyed {
    /// `key` checked, for `operation`, with a digest the caller computed, arriving `at`.
    fn checked(
        operation: impl Into<String>,
        key: &str,
        digest: String,
        at: String,
    ) -> Result<Keyed, ServiceError> {
        crate::candidate::check_idempotency_key(key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        Ok(Keyed {
            key: key.to_string(),
            digest,
            operation: operation.into(),
            at,
            hold: Default::default(),
        })
    }

    /// The key of a call this one makes on its behalf (`<key>/<suffix>`), so a replay of this
    /// call replays that one too. A key near the length limit is replaced by its digest, so
    /// the derived key is always a valid key.
    pub fn derived(&self, suffix: &str) -> String {
        let plain = format!("{}/{suffix}", self.key);
        if plain.len() <= crate::candidate::MAX_IDEMPOTENCY_KEY_BYTES {
            plain
        } else {
            format!("sha256:{}", crate::canonical::sha256_hex(plain.as_bytes()))
        }
    }

    /// The durable binding of this call, by `actor`, to `result_id`.
    pub fn binding(&self, workspace_id: &str, actor: &Actor, result_id: &str) -> Binding {
        self.binding_for(workspace_id, &actor.key(), result_id)
    }

    /// [`Keyed::binding`] for an actor already rendered as its key.
    pub fn binding_for(&self, workspace_id: &str, actor_key: &str, result_id: &str) -> Binding {
        Binding {
            workspace_id: workspace_id.to_string(),
            actor_key: actor_key.to_string(),
            operation: self.operation.clone(),
            idempotency_key: self.key.clone(),
            digest: self.digest.clone(),
            result_id: result_id.to_string(),
            created_at: self.at.clone(),
        }
    }
}

impl Keys {
    /// `key` checked, for `operation`, with the digest of the call's parameters (serialized
    /// without the key), stamped now.
    pub fn keyed<T: serde::Serialize>(
        &self,
        operation: impl Into<String>,
        key: &str,
        params_without_key: &T,
    ) -> Result<Keyed, ServiceError> {
        self.keyed_digest(operation, key, crate::candidate::digest(params_without_key))
    }

    /// [`Keys::keyed`] with a digest the caller computed.
    pub fn keyed_digest(
        &self,
        operation: impl Into<String>,
        key: &str,
        digest: String,
    ) -> Result<Keyed, ServiceError> {
        Keyed::checked(
            operation,
            key,
            digest,
            crate::ids::rfc3339(self.clock.now()),
        )
    }

    /// The result id an earlier call with this key recorded (a replay), if any; the key with
    /// other parameters is `conflict`. Takes the key's gate first (see the module's doc): a
    /// call with the same key still at work is waited for, then replayed.
    pub async fn replay_of(
        &self,
        workspace_id: &str,
        actor: &Actor,
        k: &Keyed,
    ) -> Result<Option<String>, ServiceError> {
        let held = k
            .hold
            .lock()
            .expect("a key's hold is never poisoned")
            .is_some();
        if !held {
            let id = format!(
                "{workspace_id}\n{}\n{}\n{}",
                actor.key(),
                k.operation,
                k.key
            );
            let guard = self.gate(id).lock_owned().await;
            *k.hold.lock().expect("a key's hold is never poisoned") = Some(guard);
        }
        match self
            .store
            .binding(workspace_id, &actor.key(), &k.operation, &k.key)
            .await?
        {
            None => Ok(None),
            Some((bound, result)) if bound == k.digest => Ok(Some(result)),
            Some(_) => Err(ServiceError::Conflict(
                "idempotency_key was already used with different parameters".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Result<Keyed, ServiceError> {
        Keyed::checked("op", k, crate::candidate::digest(&"params"), "t0".into())
    }

    #[test]
    fn a_derived_key_is_always_a_valid_key_and_the_same_each_time() {
        let short = key("k1").unwrap();
        assert_eq!(short.derived("claim/0"), "k1/claim/0");
        let max = "k".repeat(crate::candidate::MAX_IDEMPOTENCY_KEY_BYTES);
        let long = key(&max).unwrap();
        for suffix in ["claim/0", "claim/1", "proposal"] {
            let d = long.derived(suffix);
            crate::candidate::check_idempotency_key(&d).unwrap();
            assert_eq!(d, long.derived(suffix), "deterministic");
        }
        assert_ne!(long.derived("claim/0"), long.derived("claim/1"));
    }

    #[test]
    fn a_bad_key_is_refused_naming_the_field() {
        let e = key("").unwrap_err();
        assert_eq!(e.code(), "invalid_argument", "{e}");
        assert!(e.to_string().contains("idempotency_key"), "{e}");
    }
}
