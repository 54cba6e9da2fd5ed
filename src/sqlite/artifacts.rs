//! [`ArtifactStore`] on [`SqliteStore`]: offloaded tool results and folded summary spans
//! in the same file as the context records that name them, so a restart loses neither.

use async_trait::async_trait;
use llm_context_layers::store::{StoreError, StoreErrorKind};
use llm_context_layers::{Artifact, ArtifactStore, Scope};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{SqliteStore, sql_error, to_i64};

/// The artifacts table and the live sets. `used` orders a session's artifacts by last use
/// (a per-session counter bumped on every write and read, so that several processes
/// sharing the file agree on it without a clock); the index serves the eviction order and
/// the session's totals without reading the texts. `artifact_live` holds the ids each
/// session's latest request refers to (stored or not), which eviction passes over; a file
/// written before it existed gets it, empty, when opened.
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
CREATE TABLE IF NOT EXISTS artifact_live (
    scope   TEXT NOT NULL,
    session TEXT NOT NULL,
    id      TEXT NOT NULL,
    PRIMARY KEY (scope, session, id)
) WITHOUT ROWID;
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
/// the other stores.
///
/// What is kept: every artifact of the session's *live set* (the ids its latest
/// [`commit`](ArtifactStore::commit) named), even past the bounds; besides those, at most
/// [`SqliteOptions::max_artifacts_per_session`] artifacts and
/// [`SqliteOptions::max_session_bytes`] bytes (as JSON) per session. What is evicted: the
/// least recently written or read artifacts outside the live set, while the session is
/// over a bound — the one a `put` just stored too, when the live set leaves it no room.
/// An artifact larger than the byte bound is refused: `put` fails with
/// [`StoreErrorKind::TooLarge`], `commit` does not store it and reports it missing. A
/// write and its evictions are one transaction; a commit (its artifacts, the new live set,
/// the evictions and the missing references) is one `IMMEDIATE` transaction, so handles
/// in other processes never see it half done. Sessions are not bounded in number (this
/// is a file, not memory): a session's artifacts stay until its own bounds evict them.
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
        let v = self.encode(&artifact)?;
        let bounds = self.bounds();
        let (scope, session, id) = (scope.key(), session.to_owned(), id.to_owned());
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            let mut next = next_use(&tx, &scope, &session)?;
            if store_one(&tx, &scope, &session, &id, &v, &mut next)? {
                // The artifact just stored is the most recent and within the byte bound,
                // so it goes only when live ones leave it no room.
                evict(&tx, &scope, &session, bounds)?;
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

    /// One IMMEDIATE transaction stores the new artifacts, replaces the live set, evicts
    /// around it and reads which references are missing, so no other handle's write
    /// comes between.
    async fn commit(
        &self,
        scope: &Scope,
        session: &str,
        new: Vec<(String, Artifact)>,
        referenced: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut values = Vec::with_capacity(new.len());
        for (id, artifact) in new {
            match self.encode(&artifact) {
                Ok(v) => values.push((id, v)),
                // Not stored, so reported missing like any id the session does not hold.
                Err(e) if e.kind == StoreErrorKind::TooLarge => {}
                Err(e) => return Err(e),
            }
        }
        let bounds = self.bounds();
        let (scope, session, referenced) = (scope.key(), session.to_owned(), referenced.to_vec());
        self.with_conn(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            tx.prepare_cached("DELETE FROM artifact_live WHERE scope = ?1 AND session = ?2")
                .and_then(|mut st| st.execute(params![scope, session]))
                .map_err(sql_error)?;
            {
                let mut live = tx
                    .prepare_cached(
                        "INSERT OR IGNORE INTO artifact_live (scope, session, id)
                         VALUES (?1, ?2, ?3)",
                    )
                    .map_err(sql_error)?;
                for id in &referenced {
                    live.execute(params![scope, session, id])
                        .map_err(sql_error)?;
                }
            }
            let mut next = next_use(&tx, &scope, &session)?;
            for (id, v) in &values {
                store_one(&tx, &scope, &session, id, v, &mut next)?;
            }
            evict(&tx, &scope, &session, bounds)?;
            // Every reference held is a use, in the request's order: once the next
            // request drops them, they are the most recent of the artifacts that may go.
            let mut missing = Vec::new();
            {
                let mut touch = tx
                    .prepare_cached(
                        "UPDATE artifacts SET used = ?4
                         WHERE scope = ?1 AND session = ?2 AND id = ?3",
                    )
                    .map_err(sql_error)?;
                for id in referenced {
                    if touch
                        .execute(params![scope, session, id, next])
                        .map_err(sql_error)?
                        == 0
                    {
                        missing.push(id);
                    } else {
                        next += 1;
                    }
                }
            }
            tx.commit().map_err(sql_error)?;
            Ok(missing)
        })
        .await
    }
}

/// A session's bounds: at most `n` artifacts and `bytes` bytes besides its live set.
#[derive(Clone, Copy)]
struct Bounds {
    n: i64,
    bytes: i64,
}

impl SqliteStore {
    fn bounds(&self) -> Bounds {
        Bounds {
            // Zero would evict the artifact just stored.
            n: to_i64(self.options.max_artifacts_per_session.max(1)),
            bytes: to_i64(self.options.max_session_bytes),
        }
    }

    /// `artifact` as JSON; [`StoreErrorKind::TooLarge`] when it is over the session's
    /// byte bound.
    fn encode(&self, artifact: &Artifact) -> Result<Vec<u8>, StoreError> {
        let v = serde_json::to_vec(artifact).map_err(|e| {
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
        Ok(v)
    }
}

/// The session's next use number, above every artifact's.
fn next_use(conn: &rusqlite::Connection, scope: &str, session: &str) -> Result<i64, StoreError> {
    conn.prepare_cached(
        "SELECT coalesce(max(used), 0) + 1 FROM artifacts WHERE scope = ?1 AND session = ?2",
    )
    .and_then(|mut st| st.query_row(params![scope, session], |r| r.get(0)))
    .map_err(sql_error)
}

/// Stores `v` under `id` as use `next` (then bumped), or when the id is there (ids are
/// content-addressed: the same text) keeps it and marks it used. Whether it was new.
fn store_one(
    conn: &rusqlite::Connection,
    scope: &str,
    session: &str,
    id: &str,
    v: &[u8],
    next: &mut i64,
) -> Result<bool, StoreError> {
    let used = *next;
    *next += 1;
    let touched = conn
        .prepare_cached(
            "UPDATE artifacts SET used = ?4 WHERE scope = ?1 AND session = ?2 AND id = ?3",
        )
        .and_then(|mut st| st.execute(params![scope, session, id, used]))
        .map_err(sql_error)?;
    if touched > 0 {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO artifacts (scope, session, id, used, bytes, v)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut st| st.execute(params![scope, session, id, used, to_i64(v.len()), v]))
    .map_err(sql_error)?;
    Ok(true)
}

/// Deletes the session's least recently used artifacts outside its live set while it is
/// over `bounds`; the live ones stay, even past them.
fn evict(
    conn: &rusqlite::Connection,
    scope: &str,
    session: &str,
    bounds: Bounds,
) -> Result<(), StoreError> {
    let (mut n, mut bytes) = session_totals(conn, scope, session)?;
    if n <= bounds.n && bytes <= bounds.bytes {
        return Ok(());
    }
    let victims: Vec<i64> = {
        let mut st = conn
            .prepare_cached(
                "SELECT a.rowid, a.bytes FROM artifacts a
                 WHERE a.scope = ?1 AND a.session = ?2
                   AND NOT EXISTS (SELECT 1 FROM artifact_live l
                                   WHERE l.scope = a.scope AND l.session = a.session
                                     AND l.id = a.id)
                 ORDER BY a.used",
            )
            .map_err(sql_error)?;
        let mut rows = st.query(params![scope, session]).map_err(sql_error)?;
        let mut out = Vec::new();
        while n > bounds.n || bytes > bounds.bytes {
            let Some(row) = rows.next().map_err(sql_error)? else {
                break;
            };
            let (rowid, size): (i64, i64) = (
                row.get(0).map_err(sql_error)?,
                row.get(1).map_err(sql_error)?,
            );
            out.push(rowid);
            n -= 1;
            bytes -= size;
        }
        out
    };
    let mut delete = conn
        .prepare_cached("DELETE FROM artifacts WHERE rowid = ?1")
        .map_err(sql_error)?;
    for rowid in victims {
        delete.execute(params![rowid]).map_err(sql_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The artifact schema before live sets, as files written then have it.
    const SCHEMA_BEFORE_LIVE_SETS: &str = "
        CREATE TABLE artifacts (
            scope   TEXT    NOT NULL,
            session TEXT    NOT NULL,
            id      TEXT    NOT NULL,
            used    INTEGER NOT NULL,
            bytes   INTEGER NOT NULL,
            v       BLOB    NOT NULL,
            PRIMARY KEY (scope, session, id)
        );
        CREATE INDEX artifacts_lru ON artifacts (scope, session, used, bytes);
    ";

    #[tokio::test]
    async fn a_file_from_before_live_sets_opens_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let scope = Scope::org(1);
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_BEFORE_LIVE_SETS).unwrap();
            let v = br#"{"text":"old","original_chars":3,"truncated":false}"#;
            conn.execute(
                "INSERT INTO artifacts VALUES (?1, 's', 'old', 1, ?2, ?3)",
                params![scope.key(), v.len() as i64, &v[..]],
            )
            .unwrap();
        }
        let options = super::super::SqliteOptions::default().with_max_artifacts_per_session(1);
        let store = SqliteStore::open_with(&path, options).unwrap();
        assert_eq!(
            store.get(&scope, "s", "old").await.unwrap(),
            Some(Artifact::new("old", 100))
        );
        let refs = ["old".to_owned(), "new".to_owned()];
        let missing = store
            .commit(
                &scope,
                "s",
                vec![("new".to_owned(), Artifact::new("new", 100))],
                &refs,
            )
            .await
            .unwrap();
        assert!(missing.is_empty(), "{missing:?}");
        // Both live, so both kept over the bound of one; a reopen keeps the live set.
        drop(store);
        let store = SqliteStore::open_with(&path, options).unwrap();
        store
            .put(&scope, "s", "other", Artifact::new("other", 100))
            .await
            .unwrap();
        for (id, kept) in [("old", true), ("new", true), ("other", false)] {
            assert_eq!(store.contains(&scope, "s", id).await.unwrap(), kept, "{id}");
        }
    }
}
