//! The ledger on disk: `--ledger sqlite:PATH`. One SQLite file (WAL), one row per request
//! appended in its own transaction, so a ledger survives restarts and a killed process
//! loses no row it had committed. On open, its rows are read back into the views (each
//! tenant's totals since the file began; the newest sessions and requests).
//!
//! ```
//! use llm_context::serve::ledger::LedgerFile;
//!
//! let dir = tempfile::tempdir()?;
//! let ledger = LedgerFile::open(dir.path().join("ledger.db"))?;
//! assert!(ledger.tenants().is_empty());
//! // A path that cannot be opened says so, by its name.
//! let bad = LedgerFile::open(dir.path().join("no/such/dir/ledger.db")).unwrap_err();
//! assert!(bad.to_string().contains("no/such/dir"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use serde_json::Value;

use super::book::{Book, SessionView, TenantView};
use super::row::Row;

/// A ledger file could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
#[error("ledger {path}: {source}")]
pub struct LedgerError {
    path: PathBuf,
    #[source]
    source: rusqlite::Error,
}

/// A ledger kept in a SQLite file.
#[derive(Debug)]
pub struct LedgerFile {
    path: PathBuf,
    conn: Connection,
    book: Book,
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS ledger_requests (
        id INTEGER PRIMARY KEY,
        at_ms INTEGER NOT NULL,
        row TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS ledger_passed_through (
        tenant TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    );
";

impl LedgerFile {
    /// Opens (or creates) the ledger at `path` and reads its rows back.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        let fail = |source| LedgerError {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(fail)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(fail)?;
        // A commit survives the process being killed at any point (not a power loss).
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(fail)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        let mut book = Book::default();
        {
            let mut rows = conn
                .prepare("SELECT row FROM ledger_requests ORDER BY id")
                .map_err(fail)?;
            let rows = rows
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(fail)?;
            for text in rows {
                let text = text.map_err(fail)?;
                match serde_json::from_str::<Row>(&text) {
                    Ok(row) => {
                        book.append(row);
                    }
                    // A row written by another version, unreadable here: skipped, said.
                    Err(error) => tracing::warn!(event = "ledger_row_unread", %error),
                }
            }
            let mut passed = conn
                .prepare("SELECT tenant, n FROM ledger_passed_through")
                .map_err(fail)?;
            let passed = passed
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(fail)?;
            for p in passed {
                let (tenant, n) = p.map_err(fail)?;
                book.passed_through(&tenant, n.max(0) as u64);
            }
        }
        Ok(Self { path, conn, book })
    }

    /// Every tenant's totals since the file began.
    pub fn tenants(&self) -> Vec<TenantView> {
        self.book.tenants()
    }

    /// The newest sessions (at most [`MAX_SESSIONS`](super::MAX_SESSIONS)), newest first.
    pub fn sessions(&self) -> Vec<SessionView> {
        self.book.sessions()
    }

    /// The overview as JSON, as `GET /llm-context/ledger/sessions` answers it.
    pub fn overview_json(&self) -> Value {
        super::http::overview_json(&self.book, &self.scope())
    }

    fn scope(&self) -> String {
        format!(
            "managed requests since the ledger {} began: each tenant's totals since then; \
             the newest {} sessions and {} requests",
            self.path.display(),
            super::MAX_SESSIONS,
            super::MAX_REQUESTS
        )
    }

    /// Splits the file into what the server's views start from and the writer.
    pub(crate) fn into_parts(self) -> (Book, Writer, String) {
        let scope = self.scope();
        (
            self.book,
            Writer {
                path: self.path,
                conn: self.conn,
            },
            scope,
        )
    }
}

/// Appends to the file, from the ledger's worker.
#[derive(Debug)]
pub(crate) struct Writer {
    path: PathBuf,
    conn: Connection,
}

impl Writer {
    /// Appends `row`; returns its id.
    pub(crate) fn insert(&self, row: &Row) -> Result<i64, LedgerError> {
        let text = serde_json::to_string(row).unwrap_or_default();
        self.conn
            .execute(
                "INSERT INTO ledger_requests (at_ms, row) VALUES (?1, ?2)",
                params![row.at_ms as i64, text],
            )
            .map_err(|source| self.error(source))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Replaces row `id` (its modelled figures, once known).
    pub(crate) fn update(&self, id: i64, row: &Row) -> Result<(), LedgerError> {
        let text = serde_json::to_string(row).unwrap_or_default();
        self.conn
            .execute(
                "UPDATE ledger_requests SET row = ?2 WHERE id = ?1",
                params![id, text],
            )
            .map_err(|source| self.error(source))?;
        Ok(())
    }

    /// Counts a request of `tenant` passed through unmanaged.
    pub(crate) fn passed_through(&self, tenant: &str) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "INSERT INTO ledger_passed_through (tenant, n) VALUES (?1, 1)
                 ON CONFLICT (tenant) DO UPDATE SET n = n + 1",
                params![tenant],
            )
            .map_err(|source| self.error(source))?;
        Ok(())
    }

    fn error(&self, source: rusqlite::Error) -> LedgerError {
        LedgerError {
            path: self.path.clone(),
            source,
        }
    }
}
