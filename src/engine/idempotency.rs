//! The one idempotent-mutation mechanism every workflow uses. A call that changes something
//! carries an idempotency key; [`Keyed`] is that key checked, with the operation it is bound
//! under and the digest of the call's parameters (the key left out). Before acting, the
//! workflow asks [`Context::replay_of`]: an earlier call with the same actor, operation, key
//! and digest is a replay (its recorded result id is answered), the same key with other
//! parameters is `conflict`. The change then commits [`Keyed::binding`] in its own
//! transaction, so the key is bound exactly when the change is durable.

use super::Context;
use super::service::{Actor, ServiceError};
use crate::store::Binding;

/// A checked idempotency key, the operation it binds, and the digest of its call.
#[derive(Debug, Clone)]
pub struct Keyed {
    pub key: String,
    pub digest: String,
    pub operation: String,
}

impl Keyed {
    /// `key` checked, for `operation`, with the digest of the call's parameters (serialized
    /// without the key).
    pub fn new<T: serde::Serialize>(
        operation: impl Into<String>,
        key: &str,
        params_without_key: &T,
    ) -> Result<Keyed, ServiceError> {
        Self::with_digest(operation, key, crate::candidate::digest(params_without_key))
    }

    /// `key` checked, for `operation`, with a digest the caller computed.
    pub fn with_digest(
        operation: impl Into<String>,
        key: &str,
        digest: String,
    ) -> Result<Keyed, ServiceError> {
        crate::candidate::check_idempotency_key(key)
            .map_err(|m| ServiceError::invalid_field("idempotency_key", m))?;
        Ok(Keyed {
            key: key.to_string(),
            digest,
            operation: operation.into(),
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
            format!("sha256:{}", crate::apply::sha256_hex(plain.as_bytes()))
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
        }
    }
}

impl Context {
    /// The result id an earlier call with this key recorded (a replay), if any; the key with
    /// other parameters is `conflict`.
    pub async fn replay_of(
        &self,
        workspace_id: &str,
        actor: &Actor,
        k: &Keyed,
    ) -> Result<Option<String>, ServiceError> {
        match self
            .data
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

    #[test]
    fn a_bad_key_is_refused_naming_the_field() {
        let e = Keyed::new("op", "", &()).unwrap_err();
        assert_eq!(e.code(), "invalid_argument", "{e}");
        assert!(e.to_string().contains("idempotency_key"), "{e}");
    }
}
