//! [`SqliteStore`]: context records, memory and artifacts in one SQLite file.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use llm_context::durable::{ContextRecord, ContextStore};
//! use llm_context::sqlite::SqliteStore;
//! use llm_context::{Message, Scope};
//!
//! let dir = tempfile::tempdir()?;
//! let store = SqliteStore::open(dir.path().join("agent.db"))?;
//! let scope = Scope::org("acme");
//!
//! let mut record = ContextRecord::new();
//! record.messages.push(Message::user("hello"));
//! record.version = store.save(&scope, "root", &record).await?;
//!
//! // Another process (or a restart) finds the last committed version.
//! let again = SqliteStore::open(dir.path().join("agent.db"))?;
//! assert_eq!(again.load(&scope, "root").await?.unwrap().version, 1);
//! # Ok(()) }
//! ```
//!
//! For one process, durable across crashes: WAL, every write one atomic transaction. It
//! implements [`ContextStore`] (compare-and-set on the version), [`MemoryStore`] (TTL,
//! prefix listing) and [`ArtifactStore`](llm_context_layers::ArtifactStore) (bounded per
//! session, least recently used out first, never what the session's latest request
//! refers to), so the artifacts a record's summary names survive a restart with it. It passes the same contract tests as the in-memory backends of
//! [`llm_context_layers::durable`] and `llm_context::redis::RedisDurableStore` (feature `redis`),
//! the backend for many replicas sharing state.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use llm_context_layers::Scope;
use llm_context_layers::durable::{ContextRecord, ContextStore, MemoryEntry, MemoryStore};
use llm_context_layers::store::{StoreError, StoreErrorKind, check_context_id, version_conflict};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

mod artifacts;

use artifacts::ARTIFACT_SCHEMA;
pub use artifacts::ArtifactUsage;

/// How hard SQLite works to make a commit survive a power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// `synchronous = NORMAL`: a commit survives the process crashing at any point; a
    /// power loss may take back the last commits, never corrupt the file. SQLite's
    /// advice for WAL mode.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is on disk before `save` returns.
    Full,
}

/// How a [`SqliteStore`] opens its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Durability of a commit. Default [`Synchronous::Normal`].
    pub synchronous: Synchronous,
    /// How long a statement waits for another process's lock. Default 5 s.
    pub busy_timeout: Duration,
    /// Expired memory entries deleted per write, oldest first (so the file does not
    /// grow with dead entries nobody reads). Default 64.
    pub purge_batch: usize,
    /// The most artifacts kept per (tenant, session) besides those its latest request
    /// refers to (its live set, see
    /// [`ArtifactStore::commit`](llm_context_layers::ArtifactStore::commit), kept even
    /// past this); the least recently used of the others go. Default 1,024: on disk, so
    /// that a long-running agent's folded history stays readable (the in-memory and Redis
    /// stores default to 32, the default `ContextPolicy::max_artifacts`).
    pub max_artifacts_per_session: usize,
    /// The most bytes of artifacts (as JSON) kept per session besides its live set; the
    /// least recently used of the others go, and one artifact larger than this is
    /// refused. Default 256 MiB, eight times the default
    /// `ContextPolicy::max_artifact_bytes` (32 MiB of text per request): a whole live set
    /// fits with room for JSON escaping and the older artifacts. Keep it above the
    /// policy's bound, or an artifact a request may refer to can be refused as too large.
    pub max_session_bytes: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            purge_batch: 64,
            max_artifacts_per_session: 1_024,
            max_session_bytes: 256 << 20,
        }
    }
}

impl SqliteOptions {
    /// Sets `synchronous`.
    #[must_use]
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets `busy_timeout`.
    #[must_use]
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets `max_artifacts_per_session`.
    #[must_use]
    pub fn with_max_artifacts_per_session(mut self, n: usize) -> Self {
        self.max_artifacts_per_session = n;
        self
    }

    /// Sets `max_session_bytes`.
    #[must_use]
    pub fn with_max_session_bytes(mut self, bytes: usize) -> Self {
        self.max_session_bytes = bytes;
        self
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS contexts (
    scope   TEXT    NOT NULL,
    id      TEXT    NOT NULL,
    version INTEGER NOT NULL,
    record  BLOB    NOT NULL,
    PRIMARY KEY (scope, id)
);
CREATE TABLE IF NOT EXISTS memory (
    scope TEXT    NOT NULL,
    k     TEXT    NOT NULL,
    exp   INTEGER NOT NULL,
    v     BLOB    NOT NULL,
    PRIMARY KEY (scope, k)
);
CREATE INDEX IF NOT EXISTS memory_exp ON memory (exp);
";

/// `exp` of an entry that never expires.
const NEVER: i64 = i64::MAX;

/// Context records, memory entries and artifacts in one SQLite file, in WAL mode.
///
/// Every write is one atomic transaction (one statement, or for a memory put the write
/// and its housekeeping together): a process killed in the middle of a write leaves the
/// last committed version readable, and a compare-and-set is a single `UPDATE … WHERE version = ?` (or, for a first write, `INSERT … ON CONFLICT DO
/// NOTHING`). Statements run on
/// tokio's blocking pool over one connection, so the async runtime never waits on disk;
/// several processes may open the same file (SQLite's locks serialize their writes).
///
/// See the [module docs](super) for an example.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    options: SqliteOptions,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn sql_error(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreErrorKind::Timeout,
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::DiskFull) => {
            StoreErrorKind::Unavailable
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Other,
    };
    StoreError::new(kind, format!("sqlite: {e}"))
}

/// `n` as an SQLite integer, `i64::MAX` when over.
fn to_i64(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Opens (creating when absent) the database at `path` with the default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the database at `path` with `options`: WAL mode, the schema created when
    /// missing.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path).map_err(sql_error)?;
        conn.busy_timeout(options.busy_timeout).map_err(sql_error)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(sql_error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                format!(
                    "sqlite: {} cannot use WAL mode (got {mode})",
                    path.display()
                ),
            ));
        }
        let sync = match options.synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        conn.execute_batch(&format!("PRAGMA synchronous = {sync};"))
            .map_err(sql_error)?;
        conn.execute_batch(SCHEMA).map_err(sql_error)?;
        conn.execute_batch(ARTIFACT_SCHEMA).map_err(sql_error)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path,
            options,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            // A panic inside `f` cannot leave SQLite half written: each call is one
            // statement or one transaction, rolled back when dropped uncommitted.
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::new(StoreErrorKind::Other, format!("sqlite task failed: {e}")))?
    }
}

#[async_trait]
impl ContextStore for SqliteStore {
    async fn load(&self, scope: &Scope, id: &str) -> Result<Option<ContextRecord>, StoreError> {
        check_context_id(id)?;
        let (scope, id) = (scope.key(), id.to_owned());
        let row = self
            .with_conn(move |conn| {
                conn.prepare_cached(
                    "SELECT version, record FROM contexts WHERE scope = ?1 AND id = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![scope, id], |row| {
                        Ok((row.get::<_, i64>(0)?, row.get::<_, Vec<u8>>(1)?))
                    })
                    .optional()
                })
                .map_err(sql_error)
            })
            .await?;
        row.map(|(version, bytes)| ContextRecord::decode(&bytes, version as u64))
            .transpose()
    }

    async fn save(
        &self,
        scope: &Scope,
        id: &str,
        record: &ContextRecord,
    ) -> Result<u64, StoreError> {
        check_context_id(id)?;
        let bytes = record.encode();
        let expected = record.version;
        let (scope, id) = (scope.key(), id.to_owned());
        self.with_conn(move |conn| {
            // One statement either way: a first write inserts only when there is no
            // record; a later one updates only the expected version.
            let changed = if expected == 0 {
                conn.prepare_cached(
                    "INSERT INTO contexts (scope, id, version, record) VALUES (?1, ?2, 1, ?3)
                     ON CONFLICT (scope, id) DO NOTHING",
                )
                .and_then(|mut st| st.execute(params![scope, id, bytes]))
            } else {
                conn.prepare_cached(
                    "UPDATE contexts SET version = ?3 + 1, record = ?4
                     WHERE scope = ?1 AND id = ?2 AND version = ?3",
                )
                .and_then(|mut st| st.execute(params![scope, id, to_i64(expected), bytes]))
            }
            .map_err(sql_error)?;
            if changed == 1 {
                return Ok(expected + 1);
            }
            let found: i64 = conn
                .query_row(
                    "SELECT version FROM contexts WHERE scope = ?1 AND id = ?2",
                    params![scope, id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql_error)?
                .unwrap_or(0);
            Err(version_conflict(&id, expected, found as u64))
        })
        .await
    }

    async fn delete(&self, scope: &Scope, id: &str) -> Result<bool, StoreError> {
        check_context_id(id)?;
        let (scope, id) = (scope.key(), id.to_owned());
        self.with_conn(move |conn| {
            conn.execute(
                "DELETE FROM contexts WHERE scope = ?1 AND id = ?2",
                params![scope, id],
            )
            .map(|n| n > 0)
            .map_err(sql_error)
        })
        .await
    }
}

/// An entry from its row: `exp` is [`NEVER`] for no expiry.
fn entry_from_row(key: impl Into<String>, v: &[u8], exp: i64) -> Result<MemoryEntry, StoreError> {
    let expires_at_ms = (exp != NEVER).then_some(exp.max(0) as u64);
    MemoryEntry::decode(key, v, expires_at_ms)
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn put(&self, scope: &Scope, entry: MemoryEntry) -> Result<(), StoreError> {
        let scope = scope.key();
        let exp = entry.expires_at_ms.map_or(NEVER, to_i64);
        let v = entry.encode_value();
        let purge = to_i64(self.options.purge_batch);
        let now = to_i64(llm_context_layers::store::system_now_ms());
        self.with_conn(move |conn| {
            // One transaction, taking the write lock at once (waiting `busy_timeout` for
            // it) rather than upgrading from a read.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            tx.prepare_cached(
                "INSERT INTO memory (scope, k, exp, v) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (scope, k) DO UPDATE SET exp = excluded.exp, v = excluded.v",
            )
            .and_then(|mut st| st.execute(params![scope, entry.key, exp, v]))
            .map_err(sql_error)?;
            // Housekeeping by the real clock, through the `exp` index; reads never
            // depend on it, they filter by their own `now`.
            tx.prepare_cached(
                "DELETE FROM memory WHERE rowid IN
                   (SELECT rowid FROM memory WHERE exp <= ?1 ORDER BY exp LIMIT ?2)",
            )
            .and_then(|mut st| st.execute(params![now, purge]))
            .map_err(sql_error)?;
            tx.commit().map_err(sql_error)
        })
        .await
    }

    async fn get(
        &self,
        scope: &Scope,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<MemoryEntry>, StoreError> {
        let (scope, k) = (scope.key(), key.to_owned());
        let row = self
            .with_conn(move |conn| {
                conn.prepare_cached(
                    "SELECT v, exp FROM memory WHERE scope = ?1 AND k = ?2 AND exp > ?3",
                )
                .and_then(|mut st| {
                    st.query_row(params![scope, k, to_i64(now_ms)], |row| {
                        Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
                    })
                    .optional()
                })
                .map_err(sql_error)
            })
            .await?;
        row.map(|(v, exp)| entry_from_row(key, &v, exp)).transpose()
    }

    async fn delete(&self, scope: &Scope, key: &str, now_ms: u64) -> Result<bool, StoreError> {
        let (scope, key) = (scope.key(), key.to_owned());
        self.with_conn(move |conn| {
            let exp: Option<i64> = conn
                .query_row(
                    "DELETE FROM memory WHERE scope = ?1 AND k = ?2 RETURNING exp",
                    params![scope, key],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql_error)?;
            Ok(exp.is_some_and(|exp| exp > to_i64(now_ms)))
        })
        .await
    }

    async fn range(
        &self,
        scope: &Scope,
        from: &str,
        to: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<MemoryEntry>, StoreError> {
        let (scope, from, to) = (scope.key(), from.to_owned(), to.map(str::to_owned));
        let limit = to_i64(limit);
        let rows = self
            .with_conn(move |conn| {
                let now = to_i64(now_ms);
                // Two statements rather than `?3 IS NULL OR k < ?3`, so that both
                // bounds reach the primary-key index.
                let map = |row: &rusqlite::Row<'_>| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Vec<u8>>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                };
                let rows: Result<Vec<_>, _> = match &to {
                    Some(to) => conn
                        .prepare_cached(
                            "SELECT k, v, exp FROM memory
                             WHERE scope = ?1 AND k >= ?2 AND k < ?3 AND exp > ?4
                             ORDER BY k LIMIT ?5",
                        )
                        .and_then(|mut st| {
                            st.query_map(params![scope, from, to, now, limit], map)?
                                .collect()
                        }),
                    None => conn
                        .prepare_cached(
                            "SELECT k, v, exp FROM memory
                             WHERE scope = ?1 AND k >= ?2 AND exp > ?3
                             ORDER BY k LIMIT ?4",
                        )
                        .and_then(|mut st| {
                            st.query_map(params![scope, from, now, limit], map)?
                                .collect()
                        }),
                };
                rows.map_err(sql_error)
            })
            .await?;
        rows.into_iter()
            .map(|(k, v, exp)| entry_from_row(k, &v, exp))
            .collect()
    }
}
