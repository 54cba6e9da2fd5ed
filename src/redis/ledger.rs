//! [`RedisLedgerStream`]: the rows of `serve`'s ledger on one Redis stream, which every
//! replica appends to and reads back, so that their requests land in one view.

use std::sync::Arc;

use llm_context_layers::StoreError;
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::options::RedisOptions;

/// The most rows the stream keeps (approximately: Redis trims in whole nodes); older
/// ones leave the views' sessions, as in one process's memory.
pub const LEDGER_STREAM_ROWS: usize = 100_000;

/// The ledger's rows on a Redis stream (`{prefix}ledger`), as JSON text.
#[derive(Clone)]
pub struct RedisLedgerStream {
    conn: ConnectionManager,
    options: Arc<RedisOptions>,
    secret: Option<Arc<str>>,
}

impl std::fmt::Debug for RedisLedgerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedgerStream")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisLedgerStream {
    pub(crate) fn with_secret(
        conn: ConnectionManager,
        options: Arc<RedisOptions>,
        secret: Option<Arc<str>>,
    ) -> Self {
        Self {
            conn,
            options,
            secret,
        }
    }

    fn key(&self) -> String {
        format!("{}ledger", self.options.key_prefix())
    }

    /// Appends one entry, `kind` (`row`: a request's row as JSON; `passed`: a tenant's
    /// request passed through) and its text; its stream id.
    pub async fn append(&self, kind: &str, text: &str) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        redis_client::cmd("XADD")
            .arg(self.key())
            .arg("MAXLEN")
            .arg("~")
            .arg(LEDGER_STREAM_ROWS)
            .arg("*")
            .arg(kind)
            .arg(text)
            .query_async(&mut conn)
            .await
            .map_err(|e| store_error("ledger append", &e, self.secret.as_deref()))
    }

    /// At most `count` entries after the id `after` (`"0"`: from the start), oldest
    /// first: each one's id, kind and text.
    pub async fn after(
        &self,
        after: &str,
        count: usize,
    ) -> Result<Vec<(String, String, String)>, StoreError> {
        let mut conn = self.conn.clone();
        let entries: Vec<(String, Vec<(String, String)>)> = redis_client::cmd("XRANGE")
            .arg(self.key())
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await
            .map_err(|e| store_error("ledger read", &e, self.secret.as_deref()))?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, fields)| {
                let (kind, text) = fields.into_iter().next()?;
                Some((id, kind, text))
            })
            .collect())
    }
}
