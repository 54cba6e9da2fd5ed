//! [`RedisCutStore`]: where each session's history was cut, shared by every replica, so
//! that a conversation whose turns land on different replicas keeps one cached prefix.

use std::sync::Arc;

use llm_context_layers::{CutStore, Cuts, LocalCutStore, Scope, StoreError};
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::keys;
use super::options::{RedisOptions, millis};
use super::{decode_json, encode_bounded};

/// Bounds what a corrupted or hostile entry can make a replica decode: a `Cuts` is three
/// cuts and a thinking binding, under 450 bytes as JSON with every number at its largest.
const MAX_CUTS_BYTES: usize = 1024;

/// A [`CutStore`] on Redis: `{prefix}:cut:{scope key}:{session}`, expiring
/// [`RedisOptions::artifact_ttl`] after its last write, as a session's artifacts do.
///
/// [`CutStore`] is synchronous (it runs inside preparation, which never waits), so this
/// store keeps the cuts in memory ([`LocalCutStore`]) and Redis behind them:
/// [`put`](CutStore::put) writes the memory at once and Redis in a background task, and
/// [`load`](Self::load), awaited before the request is prepared, brings the session's
/// latest cuts from Redis into memory. `llm-context serve` loads every request's session
/// this way. Redis away costs only the shared cut: a replica then keeps its own, and a
/// cut lost is one cache write, never a wrong request.
#[derive(Clone)]
pub struct RedisCutStore {
    conn: ConnectionManager,
    options: Arc<RedisOptions>,
    secret: Option<Arc<str>>,
    local: Arc<LocalCutStore>,
}

impl std::fmt::Debug for RedisCutStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCutStore")
            .field("options", &self.options)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl RedisCutStore {
    /// A store on an open connection.
    pub fn new(conn: ConnectionManager, options: RedisOptions) -> Self {
        Self::with_secret(conn, Arc::new(options), None)
    }

    pub(crate) fn with_secret(
        conn: ConnectionManager,
        options: Arc<RedisOptions>,
        secret: Option<Arc<str>>,
    ) -> Self {
        Self {
            conn,
            options,
            secret,
            local: Arc::new(LocalCutStore::default()),
        }
    }

    /// Brings the session's cuts, as the last replica to prepare it left them, into this
    /// process; a session Redis does not know keeps what this process knows. Fails only
    /// when Redis does not answer or holds something that does not decode.
    pub async fn load(&self, scope: &Scope, session: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let key = keys::cuts(self.options.key_prefix(), scope, session);
        let bytes: Option<Vec<u8>> = redis_client::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| store_error("cuts get", &e, self.secret.as_deref()))?;
        if let Some(bytes) = bytes {
            let cuts: Cuts = decode_json(&bytes, format_args!("cuts of session {session:?}"))?;
            self.local.put(scope, session, cuts);
        }
        Ok(())
    }
}

impl CutStore for RedisCutStore {
    fn get(&self, scope: &Scope, session: &str) -> Option<Cuts> {
        self.local.get(scope, session)
    }

    fn put(&self, scope: &Scope, session: &str, cuts: Cuts) {
        self.local.put(scope, session, cuts);
        // Outside a runtime there is nothing to write with; the cut stays local.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(value) = encode_bounded(&cuts, "cuts", "cut", MAX_CUTS_BYTES) else {
            return;
        };
        let key = keys::cuts(self.options.key_prefix(), scope, session);
        let ttl = millis(self.options.artifact_ttl());
        let mut conn = self.conn.clone();
        let secret = self.secret.clone();
        runtime.spawn(async move {
            let written = redis_client::cmd("SET")
                .arg(&key)
                .arg(value)
                .arg("PX")
                .arg(ttl)
                .query_async::<()>(&mut conn)
                .await;
            if let Err(e) = written {
                let error = store_error("cuts put", &e, secret.as_deref());
                tracing::debug!(event = "cuts_not_shared", %error, "a cut stays local");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_context_layers::Cut;
    use llm_context_layers::thinking::Binding;

    #[test]
    fn the_largest_cuts_fit_the_bound() {
        let cut = Some(Cut {
            position: usize::MAX,
            hash: u128::MAX,
        });
        let cuts = Cuts {
            history: cut,
            rounds: cut,
            cleared: cut,
            thinking: Some(Binding {
                sent: u128::MAX,
                messages: usize::MAX,
                dropped_through: Some(u128::MAX),
            }),
        };
        let json = serde_json::to_vec(&cuts).unwrap();
        assert!(json.len() < 450, "{}", json.len());
        assert!(json.len() < MAX_CUTS_BYTES);
    }
}
