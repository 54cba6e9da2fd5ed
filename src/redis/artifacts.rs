//! [`RedisArtifactStore`]: offloaded tool results shared by every replica.

use std::sync::Arc;

use async_trait::async_trait;
use llm_context_layers::{Artifact, ArtifactStore, Scope, StoreError};
use redis_client::Script;
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::keys;
use super::options::{RedisOptions, millis};
use super::{decode_json, encode_bounded};

/// An [`ArtifactStore`] on Redis, per (tenant, session).
///
/// Each session has a hash of its artifacts, a sorted set of their last use and a small
/// meta hash; a Lua script writes an artifact and evicts the least recently used ones in
/// the same atomic step, so [`RedisOptions::max_artifacts_per_session`] and
/// [`RedisOptions::max_session_bytes`] hold however many replicas write at once. A read
/// counts as a use. A session's keys expire together [`RedisOptions::artifact_ttl`] after
/// its last write or read. Nothing is ever listed with `SCAN`.
#[derive(Clone)]
pub struct RedisArtifactStore {
    conn: ConnectionManager,
    options: Arc<RedisOptions>,
    secret: Option<Arc<str>>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    put: Script,
    get: Script,
}

impl std::fmt::Debug for RedisArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArtifactStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// What one session holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionUsage {
    /// Artifacts kept.
    pub artifacts: usize,
    /// Their size as stored (JSON bytes).
    pub bytes: usize,
}

impl RedisArtifactStore {
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
            scripts: Arc::new(Scripts {
                put: Script::new(include_str!("put_artifact.lua")),
                get: Script::new(include_str!("get_artifact.lua")),
            }),
        }
    }

    /// How many artifacts and bytes a session holds (two O(1) reads, no listing).
    pub async fn session_usage(
        &self,
        scope: &Scope,
        session: &str,
    ) -> Result<SessionUsage, StoreError> {
        let [_, idx, meta] = keys::artifacts(self.options.key_prefix(), scope, session);
        let mut conn = self.conn.clone();
        let (artifacts, bytes): (usize, Option<usize>) = redis_client::pipe()
            .cmd("ZCARD")
            .arg(&idx)
            .cmd("HGET")
            .arg(&meta)
            .arg("bytes")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error("artifact usage", &e))?;
        Ok(SessionUsage {
            artifacts,
            bytes: bytes.unwrap_or(0),
        })
    }

    fn error(&self, what: &str, e: &redis_client::RedisError) -> StoreError {
        store_error(what, e, self.secret.as_deref())
    }
}

#[async_trait]
impl ArtifactStore for RedisArtifactStore {
    async fn put(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
        artifact: Artifact,
    ) -> Result<(), StoreError> {
        let max_bytes = self.options.max_session_bytes();
        let value = encode_bounded(&artifact, "artifact", "session", max_bytes)?;
        let [data, idx, meta] = keys::artifacts(self.options.key_prefix(), scope, session);
        let mut conn = self.conn.clone();
        self.scripts
            .put
            .key(data)
            .key(idx)
            .key(meta)
            .arg(id)
            .arg(value)
            // Zero would evict the artifact just stored.
            .arg(self.options.max_artifacts_per_session().max(1))
            .arg(max_bytes)
            .arg(millis(self.options.artifact_ttl()))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| self.error("artifact put", &e))
    }

    async fn get(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
    ) -> Result<Option<Artifact>, StoreError> {
        let [data, idx, meta] = keys::artifacts(self.options.key_prefix(), scope, session);
        let mut conn = self.conn.clone();
        let bytes: Option<Vec<u8>> = self
            .scripts
            .get
            .key(data)
            .key(idx)
            .key(meta)
            .arg(id)
            .arg(millis(self.options.artifact_ttl()))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error("artifact get", &e))?;
        bytes
            .map(|bytes| decode_json(&bytes, format_args!("artifact {id}")))
            .transpose()
    }
}
