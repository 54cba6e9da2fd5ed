//! [`RedisArtifactStore`]: offloaded tool results shared by every replica.

use std::sync::Arc;

use async_trait::async_trait;
use llm_context_layers::{Artifact, ArtifactStore, Scope, StoreError, StoreErrorKind};
use redis_client::Script;
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::keys;
use super::options::{RedisOptions, millis};
use super::{decode_json, encode_bounded};

/// An [`ArtifactStore`] on Redis, per (tenant, session).
///
/// Each session has a hash of its artifacts, a sorted set of their last use, a small meta
/// hash and its *live set*: the ids its latest request refers to, which
/// [`commit`](ArtifactStore::commit) replaces. A Lua script writes and evicts in one
/// atomic step, however many replicas write at once: a `put` stores one artifact, a
/// `commit` stores a request's artifacts, replaces the live set and reports the
/// references the session does not hold.
///
/// What is kept: every artifact in the live set, even past the bounds; besides those, at
/// most [`RedisOptions::max_artifacts_per_session`] artifacts and
/// [`RedisOptions::max_session_bytes`] bytes (as JSON) per session. What is evicted: the
/// least recently written or read artifacts outside the live set, while the session is
/// over a bound — the one a `put` just stored too, when the live set leaves it no room.
/// An artifact larger than the byte bound is refused: `put` fails with
/// [`StoreErrorKind::TooLarge`], `commit` does not store it and reports it missing. A
/// read counts as a use. A session's keys, its live set included, expire together
/// [`RedisOptions::artifact_ttl`] after its last write or read; its next commit then
/// reports its ids missing. Nothing is ever listed with `SCAN`.
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
    commit: Script,
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
    /// Runs the read script for `id`: the artifact's text, or with `only_exists` 1 when it
    /// is there; either way a use that keeps the session alive.
    async fn read<T: redis_client::FromRedisValue>(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
        only_exists: bool,
    ) -> redis_client::RedisResult<T> {
        let [data, idx, meta, live] = keys::artifacts(self.options.key_prefix(), scope, session);
        let mut conn = self.conn.clone();
        self.scripts
            .get
            .key(data)
            .key(idx)
            .key(meta)
            .key(live)
            .arg(id)
            .arg(millis(self.options.artifact_ttl()))
            .arg(if only_exists { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await
    }

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
                // Both writers evict the same way: the shared function comes first.
                put: Script::new(concat!(
                    include_str!("evict_artifacts.lua"),
                    include_str!("put_artifact.lua")
                )),
                get: Script::new(include_str!("get_artifact.lua")),
                commit: Script::new(concat!(
                    include_str!("evict_artifacts.lua"),
                    include_str!("commit_artifacts.lua")
                )),
            }),
        }
    }

    /// How many artifacts and bytes a session holds (two O(1) reads, no listing).
    pub async fn session_usage(
        &self,
        scope: &Scope,
        session: &str,
    ) -> Result<SessionUsage, StoreError> {
        let [_, idx, meta, _] = keys::artifacts(self.options.key_prefix(), scope, session);
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
        let [data, idx, meta, live] = keys::artifacts(self.options.key_prefix(), scope, session);
        let mut conn = self.conn.clone();
        self.scripts
            .put
            .key(data)
            .key(idx)
            .key(meta)
            .key(live)
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
        let bytes: Option<Vec<u8>> = self
            .read(scope, session, id, false)
            .await
            .map_err(|e| self.error("artifact get", &e))?;
        bytes
            .map(|bytes| decode_json(&bytes, format_args!("artifact {id}")))
            .transpose()
    }

    /// The read's script asked only whether the id is there: the same use as a read,
    /// without moving the text.
    async fn contains(&self, scope: &Scope, session: &str, id: &str) -> Result<bool, StoreError> {
        let found: Option<i64> = self
            .read(scope, session, id, true)
            .await
            .map_err(|e| self.error("artifact contains", &e))?;
        Ok(found.is_some())
    }

    /// One script stores the new artifacts, replaces the live set, evicts around it and
    /// reads which references are missing, so no other replica's write comes between.
    async fn commit(
        &self,
        scope: &Scope,
        session: &str,
        new: Vec<(String, Artifact)>,
        referenced: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let max_bytes = self.options.max_session_bytes();
        let mut values = Vec::with_capacity(new.len());
        for (id, artifact) in new {
            match encode_bounded(&artifact, "artifact", "session", max_bytes) {
                Ok(value) => values.push((id, value)),
                // Not stored, so reported missing like any id the session does not hold.
                Err(e) if e.kind == StoreErrorKind::TooLarge => {}
                Err(e) => return Err(e),
            }
        }
        let keys = keys::artifacts(self.options.key_prefix(), scope, session);
        let mut script = self.scripts.commit.prepare_invoke();
        for key in keys {
            script.key(key);
        }
        script
            // The same bound as `put`'s, at least one.
            .arg(self.options.max_artifacts_per_session().max(1))
            .arg(max_bytes)
            .arg(millis(self.options.artifact_ttl()))
            .arg(values.len());
        for (id, value) in &values {
            script.arg(id).arg(value);
        }
        for id in referenced {
            script.arg(id);
        }
        let mut conn = self.conn.clone();
        script
            .invoke_async::<Vec<String>>(&mut conn)
            .await
            .map_err(|e| self.error("artifact commit", &e))
    }
}
