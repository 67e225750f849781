//! The one prologue every mutating call goes through. A call that changes something carries an
//! idempotency key, and its workflow, once the caller is authorised and the parameters are
//! checked, calls [`Keys::begin`] with the operation, the key and the call's parameters (the
//! key left out): the key is checked, bound under the operation with the digest of those
//! parameters and the time by the context's clock, its gate taken, and the store asked. The
//! answer is a [`Prologue`]: [`Prologue::Replay`] when the same actor already committed the
//! same call (answer its recorded result), [`Prologue::Fresh`] with the [`Keyed`] call
//! otherwise, whose [`Keyed::binding`] the change commits in its own transaction, so the key
//! is bound exactly when the change is durable; the same key with other parameters is
//! `conflict`. A change whose insert finds the binding already there (another process won)
//! asks [`Keyed::judge`] the same question. No workflow reads bindings itself.
//!
//! **The same answer every time.** Once a keyed call has answered, [`Keys::seal`] keeps that
//! answer (its bytes, under the workspace, actor, method and key, with the digest of the
//! call's parameters), and every later answer of the key, a racing duplicate's or a retry's,
//! is those bytes: the caller that lost a race or its connection reads exactly what the winner
//! read. A call is authorised and judged (replay or conflict) by its workflow first; sealing
//! only chooses which bytes a successful answer carries.
//!
//! **One call per key at a time.** [`Keys::begin`] first takes the key's gate (one per
//! workspace, actor, operation and key, in this process) and the [`Keyed`] holds it until it
//! is dropped with the call: a second call with the same key, racing the first or retried
//! while the first still works (after a `503` for the call's budget), waits for it and then
//! finds its binding, answering the replay. No work is started twice for one key.

use crate::engine::actor::Actor;
use crate::engine::clock::Clock;
use crate::engine::error::ServiceError;
use crate::store::replies::SealedReply;
use crate::store::{Binding, Store};

/// A checked idempotency key, the operation it binds, and the digest of its call.
#[derive(Debug, Clone)]
pub struct Keyed {
    pub key: String,
    pub digest: String,
    pub operation: String,
    /// When the call arrived (RFC 3339, by the context's clock): the binding's `created_at`.
    pub at: String,
    /// The key's gate, once [`Keys::begin`] took it; let go with the last clone.
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
    /// The answer to send for a successful call of `method` by `actor` with the keyed request
    /// `body`: the first answer sealed under its workspace, actor, method and key (this one,
    /// if it is the first). Answers over
    /// [`crate::limits::MAX_SEALED_REPLY_BYTES`], and a store that cannot seal answer `reply`
    /// as it is.
    pub async fn seal(
        &self,
        actor: &Actor,
        method: &str,
        body: KeyedBody,
        reply: Vec<u8>,
    ) -> Vec<u8> {
        if reply.len() > crate::limits::MAX_SEALED_REPLY_BYTES {
            return reply;
        }
        let sealed = SealedReply {
            workspace_id: body.workspace_id,
            actor_key: actor.key(),
            method: method.to_string(),
            idempotency_key: body.key,
            digest: body.digest,
            reply: reply.clone(),
            sealed_at: crate::ids::rfc3339(self.clock.now()),
        };
        match self.store.seal_reply(sealed).await {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(method, error = %e, "an answer could not be sealed; its replays answer the result as it is then");
                reply
            }
        }
    }

    /// Forgets the answers sealed longer ago than [`crate::limits::SEALED_REPLY_RETENTION`].
    pub async fn prune_sealed(&self) -> Result<usize, crate::store::StoreError> {
        let before = self.clock.now() - crate::limits::SEALED_REPLY_RETENTION;
        self.store
            .prune_sealed_replies(crate::ids::rfc3339(before))
            .await
    }

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

/// What a keyed request body names: its workspace, its idempotency key and the digest of the
/// rest of it (canonical JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedBody {
    pub workspace_id: String,
    pub key: String,
    pub digest: String,
}

impl KeyedBody {
    /// The body's workspace, key and digest, when it names both (non-empty strings).
    pub fn of(body: &[u8]) -> Option<KeyedBody> {
        let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let o = v.as_object_mut()?;
        let key = match o.remove("idempotency_key")? {
            serde_json::Value::String(k) if !k.is_empty() => k,
            _ => return None,
        };
        let workspace_id = o.get("workspace_id")?.as_str()?.to_string();
        Some(KeyedBody {
            workspace_id,
            key,
            digest: crate::candidate::digest(&v),
        })
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

    /// The result of a binding already committed under this call's key (by a racing call of
    /// another process, say) with the parameters' digest `bound`: `result_id` when they are
    /// this call's parameters, `conflict` when they are others.
    pub fn judge(&self, bound: &str, result_id: String) -> Result<String, ServiceError> {
        if bound == self.digest {
            Ok(result_id)
        } else {
            Err(ServiceError::Conflict(
                "idempotency_key was already used with different parameters".into(),
            ))
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
    /// The prologue of a mutating call by `actor` in `workspace_id` (see the module's doc):
    /// `key` checked and bound under `operation` with the digest of `params_without_key` (the
    /// call's parameters, defaults resolved, the key left out).
    pub async fn begin<T: serde::Serialize>(
        &self,
        workspace_id: &str,
        actor: &Actor,
        operation: impl Into<String>,
        key: &str,
        params_without_key: &T,
    ) -> Result<Prologue, ServiceError> {
        let digest = crate::candidate::digest(params_without_key);
        self.begin_digest(workspace_id, actor, operation, key, digest)
            .await
    }

    /// [`Keys::begin`] with a digest the caller computed (of parameters it reduced first, a
    /// transcript's hash for its bytes, say).
    pub async fn begin_digest(
        &self,
        workspace_id: &str,
        actor: &Actor,
        operation: impl Into<String>,
        key: &str,
        digest: String,
    ) -> Result<Prologue, ServiceError> {
        let k = self.keyed_digest(operation, key, digest)?;
        Ok(match self.replay_of(workspace_id, actor, &k).await? {
            Some(result_id) => Prologue::Replay(result_id),
            None => Prologue::Fresh(k),
        })
    }

    /// `key` checked, for `operation`, with the call's digest, stamped now.
    fn keyed_digest(
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
    async fn replay_of(
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
            .idempotency_binding(workspace_id, &actor.key(), &k.operation, &k.key)
            .await?
        {
            None => Ok(None),
            Some((bound, result)) => k.judge(&bound, result).map(Some),
        }
    }
}

/// What the prologue of a keyed call found.
#[must_use]
#[derive(Debug)]
pub enum Prologue {
    /// A new call: act, and commit [`Keyed::binding`] with the change. The key's gate is held
    /// while this value (or a clone of its [`Keyed`]) lives.
    Fresh(Keyed),
    /// The same call, by the same actor, committed before: the result id it recorded.
    Replay(String),
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

    #[test]
    fn a_keyed_body_is_its_workspace_key_and_the_digest_of_the_rest() {
        let a = KeyedBody::of(br#"{"workspace_id": "w", "x": 1, "idempotency_key": "k"}"#).unwrap();
        let b =
            KeyedBody::of(br#"{"idempotency_key": "other", "x": 1, "workspace_id": "w"}"#).unwrap();
        assert_eq!((a.workspace_id.as_str(), a.key.as_str()), ("w", "k"));
        assert_eq!(
            a.digest, b.digest,
            "the key and the order of fields are not parameters"
        );
        let c = KeyedBody::of(br#"{"workspace_id": "w", "x": 2, "idempotency_key": "k"}"#).unwrap();
        assert_ne!(a.digest, c.digest);
        for unkeyed in [
            &br#"{"workspace_id": "w", "x": 1}"#[..],
            br#"{"workspace_id": "w", "idempotency_key": ""}"#,
            br#"{"idempotency_key": "k"}"#,
            br#"[1]"#,
            b"not json",
        ] {
            assert_eq!(
                KeyedBody::of(unkeyed),
                None,
                "{}",
                String::from_utf8_lossy(unkeyed)
            );
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_first_answer_sealed_under_a_key_is_every_later_answer() {
        let dir = tempfile::tempdir().unwrap();
        let clock = dir.path().join("clock");
        let now = crate::ids::now();
        std::fs::write(&clock, crate::ids::rfc3339(now)).unwrap();
        let keys = Keys::new(
            Store::open(&dir.path().join("db")).unwrap(),
            Clock::File(clock.clone()),
        );
        let alice = Actor::Member {
            member_id: "alice".into(),
        };
        let body = |x: u32, k: &str| {
            KeyedBody::of(
                format!(r#"{{"workspace_id":"w","x":{x},"idempotency_key":"{k}"}}"#).as_bytes(),
            )
            .unwrap()
        };
        let first = keys
            .seal(&alice, "m", body(1, "k"), b"first".to_vec())
            .await;
        assert_eq!(first, b"first");
        let again = keys
            .seal(&alice, "m", body(1, "k"), b"rebuilt".to_vec())
            .await;
        assert_eq!(again, b"first", "a replay answers the sealed bytes");
        // Another method, actor or key has its own answer; other parameters never get this one.
        assert_eq!(
            keys.seal(&alice, "n", body(1, "k"), b"n".to_vec()).await,
            b"n"
        );
        let bob = Actor::Member {
            member_id: "bob".into(),
        };
        assert_eq!(
            keys.seal(&bob, "m", body(1, "k"), b"bob".to_vec()).await,
            b"bob"
        );
        assert_eq!(
            keys.seal(&alice, "m", body(2, "k"), b"other".to_vec())
                .await,
            b"other"
        );
        // An answer over the bound is sent but not kept.
        let big = vec![b'x'; crate::limits::MAX_SEALED_REPLY_BYTES + 1];
        assert_eq!(
            keys.seal(&alice, "m", body(1, "big"), big.clone()).await,
            big
        );
        assert_eq!(
            keys.seal(&alice, "m", body(1, "big"), b"small".to_vec())
                .await,
            b"small"
        );
        // Within their retention they stay; past it they go, and a replay then answers anew.
        assert_eq!(keys.prune_sealed().await.unwrap(), 0);
        let later = now + crate::limits::SEALED_REPLY_RETENTION + std::time::Duration::from_secs(1);
        std::fs::write(&clock, crate::ids::rfc3339(later)).unwrap();
        assert_eq!(keys.prune_sealed().await.unwrap(), 4);
        let anew = keys
            .seal(&alice, "m", body(1, "k"), b"rebuilt".to_vec())
            .await;
        assert_eq!(anew, b"rebuilt");
    }
}
