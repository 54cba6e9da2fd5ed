//! Opening the connection every Redis store shares, and what start-up does when the
//! server is not there.
//!
//! Two kinds of failure are told apart, because they call for opposite answers. A server
//! that cannot be reached (refused, timed out, still loading its data set) is an outage:
//! it passes, so the stores start degraded — every call fails with
//! [`StoreErrorKind::Unavailable`] (or `Timeout`, after the connection's few retries),
//! which the memo and the artifact steps turn into a provider call and a warning — and
//! connect as soon as it is back. A server that
//! answers but refuses the credentials, or a URL that cannot be used, is a configuration
//! error: waiting does not fix it, so it fails the constructor with a typed error.

use std::sync::Arc;

use llm_context_layers::{StoreError, StoreErrorKind};
use redis_client::AsyncConnectionConfig;
use redis_client::aio::{ConnectionManager, ConnectionManagerConfig};

use super::RedisOptions;
use super::error::{is_auth_error, is_outage, redact_url, store_error, url_password};

/// Reconnection tries after a lost connection, before a command fails; the next command
/// starts over. Few and short: the memo layer is waiting, bounded by its own timeout.
const RECONNECT_RETRIES: usize = 3;
const RECONNECT_MAX_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

/// What [`open`] gives: the stores' shared connection, the URL's password (which the
/// stores scrub from their errors), and what opens another connection like it.
pub(crate) struct Opened {
    /// The connection the stores share, driven by the caller's runtime.
    pub(crate) conn: ConnectionManager,
    /// The URL's password, if any.
    pub(crate) secret: Option<Arc<str>>,
    /// Opens a connection of the same settings, on first use.
    pub(crate) twin: Twin,
}

/// Opens connections of the same settings as the stores', each on first use.
///
/// A multiplexed connection's reader runs as a task of the runtime that connected it,
/// and it reconnects on the runtime of whichever caller found it broken. A caller that
/// drives a private runtime only now and then (the ledger's worker) must have a
/// connection of its own, or a reconnect it makes leaves every other caller waiting on a
/// reader that nobody polls.
#[derive(Clone)]
// Opened only by `serve`'s ledger.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub(crate) struct Twin {
    client: redis_client::Client,
    config: ConnectionManagerConfig,
}

#[cfg(feature = "serve")]
impl Twin {
    /// A new connection, made by the first command sent on it, on that caller's runtime.
    pub(crate) fn connection(&self) -> redis_client::RedisResult<ConnectionManager> {
        ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
    }
}

/// Opens a multiplexed connection to `url` that reconnects by itself, with the timeouts
/// of `options`.
///
/// A direct probe (connect, authenticate, select the database, `PING`) comes first, so
/// that its error says why. Fails with [`StoreErrorKind::Invalid`] for an unreadable URL
/// or settings the server refuses (a database index out of range), and
/// [`StoreErrorKind::Authentication`] for refused credentials. When the server cannot be
/// reached, logs a warning (`redis_unreachable`) and returns a connection that is made
/// on first use and again after each failed try. Errors never show the password.
pub(crate) async fn open(url: &str, options: &RedisOptions) -> Result<Opened, StoreError> {
    let shown = redact_url(url);
    let secret: Option<Arc<str>> = url_password(url).map(Arc::from);
    let client = redis_client::Client::open(url).map_err(|e| {
        let mut error = store_error(&format!("URL {shown} is not valid"), &e, secret.as_deref());
        error.kind = StoreErrorKind::Invalid;
        error
    })?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connect_timeout()))
        .set_response_timeout(Some(options.response_timeout()))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_max_delay(RECONNECT_MAX_DELAY);

    let twin = Twin {
        client: client.clone(),
        config: config.clone(),
    };
    let reason = match probe(&client, options).await {
        Ok(()) => {
            let eager = tokio::time::timeout(
                options.connect_timeout(),
                ConnectionManager::new_with_config(client.clone(), config.clone()),
            )
            .await;
            match eager {
                Ok(Ok(conn)) => return Ok(Opened { conn, secret, twin }),
                // Gone again since the probe: the same degraded start as below.
                Ok(Err(e)) => store_error("connect", &e, None),
                Err(_) => timed_out(options),
            }
        }
        Err(Probe::Down(reason)) => reason,
        Err(Probe::Refused(e)) => {
            let (what, kind) = if is_auth_error(&e) {
                ("the credentials", StoreErrorKind::Authentication)
            } else {
                ("the connection settings", StoreErrorKind::Invalid)
            };
            let mut error =
                store_error(&format!("at {shown} refused {what}"), &e, secret.as_deref());
            error.kind = kind;
            return Err(error);
        }
    };
    let reason = scrub(reason, secret.as_deref());
    tracing::warn!(
        event = "redis_unreachable",
        url = %shown,
        reason = %reason.message,
        "{shown} cannot be reached ({}); the Redis stores start without it and connect \
         when it is back",
        reason.message
    );
    let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(|e| {
        let mut error = store_error("connection settings", &e, secret.as_deref());
        error.kind = StoreErrorKind::Invalid;
        error
    })?;
    Ok(Opened { conn, secret, twin })
}

enum Probe {
    /// The server cannot be reached now: an outage.
    Down(StoreError),
    /// The server answered and refused: a configuration error.
    Refused(redis_client::RedisError),
}

/// One direct connection and a `PING`, within the connect timeout. The `PING` is what
/// finds a missing password: without one, the connection opens and every command then
/// fails with `NOAUTH`.
async fn probe(client: &redis_client::Client, options: &RedisOptions) -> Result<(), Probe> {
    let attempt = async {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout()))
            .set_response_timeout(Some(options.response_timeout()));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis_client::cmd("PING").query_async::<()>(&mut conn).await
    };
    match tokio::time::timeout(options.connect_timeout(), attempt).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if is_auth_error(&e) || !is_outage(&e) => Err(Probe::Refused(e)),
        Ok(Err(e)) => Err(Probe::Down(store_error("connect", &e, None))),
        Err(_) => Err(Probe::Down(timed_out(options))),
    }
}

/// `error` with the password taken out of its message.
fn scrub(mut error: StoreError, secret: Option<&str>) -> StoreError {
    if let Some(secret) = secret.filter(|s| !s.is_empty()) {
        error.message = error.message.replace(secret, "***");
    }
    error
}

fn timed_out(options: &RedisOptions) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!("no answer within {:?}", options.connect_timeout()),
    )
}

/// `PING` on `conn`: whether the server answers now, for readiness checks.
pub(crate) async fn ping(conn: &ConnectionManager, secret: Option<&str>) -> Result<(), StoreError> {
    let mut conn = conn.clone();
    redis_client::cmd("PING")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| store_error("ping", &e, secret))
}
