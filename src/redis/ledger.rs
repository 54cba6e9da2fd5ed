//! [`RedisLedgerStream`]: the rows of `serve`'s ledger on one Redis stream, which every
//! replica appends to and reads back, so that their requests land in one view.

use std::sync::Arc;

use llm_context_layers::StoreError;
use redis_client::aio::ConnectionManager;

use super::connect::Twin;
use super::error::store_error;
use super::options::RedisOptions;

/// The most rows the stream keeps (approximately: Redis trims in whole nodes); older
/// ones leave the views' sessions, as in one process's memory.
pub const LEDGER_STREAM_ROWS: usize = 100_000;

/// The ledger's rows on a Redis stream (`{prefix}ledger`), as JSON text.
///
/// Not a connection but what opens one: [`connect`](Self::connect) gives each user (the
/// ledger's worker of each proxy built on these stores) a connection of its own, because
/// the worker drives its Redis calls from a runtime of its own, and a multiplexed
/// connection is served by the runtime that connected it.
#[derive(Clone)]
pub struct RedisLedgerStream {
    twin: Twin,
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
        twin: Twin,
        options: Arc<RedisOptions>,
        secret: Option<Arc<str>>,
    ) -> Self {
        Self {
            twin,
            options,
            secret,
        }
    }

    /// A connection to the stream of its own, made by the first call sent on it, on
    /// that caller's runtime (and remade there after a failure).
    pub fn connect(&self) -> Result<LedgerConnection, StoreError> {
        let conn = self
            .twin
            .connection()
            .map_err(|e| store_error("ledger connect", &e, self.secret.as_deref()))?;
        Ok(LedgerConnection {
            conn,
            stream: self.clone(),
        })
    }
}

/// One connection to a [`RedisLedgerStream`], from [`RedisLedgerStream::connect`].
pub struct LedgerConnection {
    conn: ConnectionManager,
    stream: RedisLedgerStream,
}

impl std::fmt::Debug for LedgerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerConnection")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl LedgerConnection {
    fn key(&self) -> String {
        format!("{}ledger", self.stream.options.key_prefix())
    }

    fn secret(&self) -> Option<&str> {
        self.stream.secret.as_deref()
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
            .map_err(|e| store_error("ledger append", &e, self.secret()))
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
            .map_err(|e| store_error("ledger read", &e, self.secret()))?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, fields)| {
                let (kind, text) = fields.into_iter().next()?;
                Some((id, kind, text))
            })
            .collect())
    }
}
