//! [`ArtifactStore`] on [`SqliteStore`]: offloaded tool results and folded summary spans
//! in the same file as the context records that name them, so a restart loses neither.

use async_trait::async_trait;
use llm_context_layers::store::{StoreError, StoreErrorKind};
use llm_context_layers::{Artifact, ArtifactStore, Scope};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{SqliteStore, sql_error, to_i64};

/// The artifacts table. `used` orders a session's artifacts by last use (a per-session
/// counter bumped on every write and read, so that several processes sharing the file
/// agree on it without a clock); the index serves the eviction order and the session's
/// totals without reading the texts.
pub(super) const ARTIFACT_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS artifacts (
    scope   TEXT    NOT NULL,
    session TEXT    NOT NULL,
    id      TEXT    NOT NULL,
    used    INTEGER NOT NULL,
    bytes   INTEGER NOT NULL,
    v       BLOB    NOT NULL,
    PRIMARY KEY (scope, session, id)
);
CREATE INDEX IF NOT EXISTS artifacts_lru ON artifacts (scope, session, used, bytes);
";

/// What one session holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArtifactUsage {
    /// Artifacts kept.
    pub artifacts: usize,
    /// Their size as stored (JSON bytes).
    pub bytes: usize,
}

impl SqliteStore {
    /// How many artifacts and bytes the session `(scope, session)` holds.
    pub async fn artifact_usage(
        &self,
        scope: &Scope,
        session: &str,
    ) -> Result<ArtifactUsage, StoreError> {
        let (scope, session) = (scope.key(), session.to_owned());
        self.with_conn(move |conn| {
            let (n, bytes) = session_totals(conn, &scope, &session)?;
            Ok(ArtifactUsage {
                artifacts: usize::try_from(n).unwrap_or(0),
                bytes: usize::try_from(bytes).unwrap_or(0),
            })
        })
        .await
    }
}

/// The count and bytes of one session, from the index.
fn session_totals(
    conn: &rusqlite::Connection,
    scope: &str,
    session: &str,
) -> Result<(i64, i64), StoreError> {
    conn.prepare_cached(
        "SELECT count(*), coalesce(sum(bytes), 0) FROM artifacts
         WHERE scope = ?1 AND session = ?2",
    )
    .and_then(|mut st| st.query_row(params![scope, session], |r| Ok((r.get(0)?, r.get(1)?))))
    .map_err(sql_error)
}

/// An [`ArtifactStore`] in the SQLite file, per (tenant, session), with the bounds of
/// the other stores: at most [`SqliteOptions::max_artifacts_per_session`] artifacts and
/// [`SqliteOptions::max_session_bytes`] bytes (as JSON) per session, the least recently
/// written or read going first; an artifact larger than the byte bound is refused with
/// [`StoreErrorKind::TooLarge`]. A write and its evictions are one transaction. Sessions
/// are not bounded in number (this is a file, not memory): a session's artifacts stay
/// until its own bounds evict them.
///
/// [`SqliteOptions::max_artifacts_per_session`]: super::SqliteOptions::max_artifacts_per_session
/// [`SqliteOptions::max_session_bytes`]: super::SqliteOptions::max_session_bytes
#[async_trait]
impl ArtifactStore for SqliteStore {
    async fn put(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
        artifact: Artifact,
    ) -> Result<(), StoreError> {
        let v = serde_json::to_vec(&artifact).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Other,
                format!("cannot encode the artifact: {e}"),
            )
        })?;
        let max_bytes = self.options.max_session_bytes;
        if v.len() > max_bytes {
            return Err(StoreError::new(
                StoreErrorKind::TooLarge,
                format!(
                    "a {} byte artifact is over the session bound of {max_bytes} bytes",
                    v.len()
                ),
            ));
        }
        // Zero would evict the artifact just stored.
        let max_n = to_i64(self.options.max_artifacts_per_session.max(1));
        let max_bytes = to_i64(max_bytes);
        let (scope, session, id) = (scope.key(), session.to_owned(), id.to_owned());
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            let next: i64 = tx
                .prepare_cached(
                    "SELECT coalesce(max(used), 0) + 1 FROM artifacts
                     WHERE scope = ?1 AND session = ?2",
                )
                .and_then(|mut st| st.query_row(params![scope, session], |r| r.get(0)))
                .map_err(sql_error)?;
            // Content-addressed: an id already there is the same text. Kept, and used.
            let touched = tx
                .prepare_cached(
                    "UPDATE artifacts SET used = ?4 WHERE scope = ?1 AND session = ?2 AND id = ?3",
                )
                .and_then(|mut st| st.execute(params![scope, session, id, next]))
                .map_err(sql_error)?;
            if touched == 0 {
                tx.prepare_cached(
                    "INSERT INTO artifacts (scope, session, id, used, bytes, v)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .and_then(|mut st| {
                    st.execute(params![scope, session, id, next, to_i64(v.len()), v])
                })
                .map_err(sql_error)?;
                let (mut n, mut bytes) = session_totals(&tx, &scope, &session)?;
                // The artifact just stored is the most recent and within the byte
                // bound, so it is never the one evicted.
                while n > max_n || (bytes > max_bytes && n > 1) {
                    let freed: i64 = tx
                        .prepare_cached(
                            "DELETE FROM artifacts WHERE rowid =
                               (SELECT rowid FROM artifacts WHERE scope = ?1 AND session = ?2
                                ORDER BY used LIMIT 1)
                             RETURNING bytes",
                        )
                        .and_then(|mut st| st.query_row(params![scope, session], |r| r.get(0)))
                        .map_err(sql_error)?;
                    n -= 1;
                    bytes -= freed;
                }
            }
            tx.commit().map_err(sql_error)
        })
        .await
    }

    async fn get(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
    ) -> Result<Option<Artifact>, StoreError> {
        let (scope, session, id) = (scope.key(), session.to_owned(), id.to_owned());
        let shown = id.clone();
        // A read is a use: one statement marks it the session's most recent and
        // returns it.
        let v: Option<Vec<u8>> = self
            .with_conn(move |conn| {
                conn.prepare_cached(
                    "UPDATE artifacts SET used =
                       (SELECT max(used) FROM artifacts WHERE scope = ?1 AND session = ?2) + 1
                     WHERE scope = ?1 AND session = ?2 AND id = ?3
                     RETURNING v",
                )
                .and_then(|mut st| {
                    st.query_row(params![scope, session, id], |r| r.get(0))
                        .optional()
                })
                .map_err(sql_error)
            })
            .await?;
        v.map(|v| {
            serde_json::from_slice(&v).map_err(|e| {
                StoreError::new(
                    StoreErrorKind::Corrupt,
                    format!("sqlite artifact {shown} does not decode: {e}"),
                )
            })
        })
        .transpose()
    }

    /// The same use as [`get`](Self::get), without reading or decoding the text: the
    /// stack asks this for every preview and stub in a request.
    async fn contains(&self, scope: &Scope, session: &str, id: &str) -> Result<bool, StoreError> {
        let (scope, session, id) = (scope.key(), session.to_owned(), id.to_owned());
        self.with_conn(move |conn| {
            conn.prepare_cached(
                "UPDATE artifacts SET used =
                   (SELECT max(used) FROM artifacts WHERE scope = ?1 AND session = ?2) + 1
                 WHERE scope = ?1 AND session = ?2 AND id = ?3
                 RETURNING 1",
            )
            .and_then(|mut st| {
                st.query_row(params![scope, session, id], |_| Ok(()))
                    .optional()
            })
            .map(|found| found.is_some())
            .map_err(sql_error)
        })
        .await
    }
}
