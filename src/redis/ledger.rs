//! [`RedisLedgerStream`]: the rows of `serve`'s ledger on one Redis stream, which every
//! replica appends to and reads back, so that their requests land in one view.

use std::sync::Arc;

#[cfg(feature = "serve")]
use llm_context_layers::StoreError;
#[cfg(feature = "serve")]
use redis_client::aio::ConnectionManager;

use super::connect::Twin;
#[cfg(feature = "serve")]
use super::error::store_error;
use super::options::RedisOptions;

/// The most rows the stream keeps (approximately: Redis trims in whole nodes); older
/// ones leave the views' sessions, as in one process's memory.
pub const LEDGER_STREAM_ROWS: usize = 100_000;

/// The ledger's rows on a Redis stream (`{prefix}ledger`), as JSON text.
///
/// Not a connection but what opens one: each user (the ledger's worker of each proxy built
/// on these stores) gets a connection of its own, because the worker drives its Redis
/// calls from a runtime of its own, and a multiplexed connection is served by the runtime
/// that connected it.
#[derive(Clone)]
// Connected only by `serve`'s ledger.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
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

    #[cfg(feature = "serve")]
    /// A connection to the stream of its own, served by the runtime it is made in (and
    /// remade there after a failure).
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub(crate) fn connect(&self) -> Result<LedgerConnection, StoreError> {
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
#[cfg(feature = "serve")]
pub(crate) struct LedgerConnection {
    conn: ConnectionManager,
    stream: RedisLedgerStream,
}

#[cfg(feature = "serve")]
impl std::fmt::Debug for LedgerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerConnection")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "serve")]
impl LedgerConnection {
    fn key(&self) -> String {
        format!("{}ledger", self.stream.options.key_prefix())
    }

    fn secret(&self) -> Option<&str> {
        self.stream.secret.as_deref()
    }

    /// How long connecting may take, from the stores' options.
    pub(crate) fn connect_timeout(&self) -> std::time::Duration {
        self.stream.options.connect_timeout()
    }

    /// `PING`: connects, where it is not yet.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        super::connect::ping(&self.conn, self.secret()).await
    }

    /// Appends one entry, `kind` (`row`: a request's row as JSON; `passed`: a tenant's
    /// request passed through) and its text; its stream id.
    pub(crate) async fn append(&self, kind: &str, text: &str) -> Result<String, StoreError> {
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
    pub(crate) async fn after(
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
