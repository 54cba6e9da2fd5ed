//! The accept loop: each connection served by hyper with a header timeout, at most
//! `max_connections` at once (at the cap, the one idle longest is shed for a new one:
//! [`shed`](super::shed)), drained on shutdown.
//!
//! axum's own `serve` sets neither a header timeout nor a connection cap, so a client
//! that opens connections and sends nothing (or a byte at a time) holds a file
//! descriptor each until the process runs out and stops answering even `/healthz`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use super::shed::{Guarded, Registry};

/// How long a connection may take to send a request's headers by default, counted from
/// when it opens or its last response ended: so it is the keep-alive idle timeout too.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The connections served at once by default, lowered at start to leave the process
/// file descriptors for its upstreams, Redis and files: a quarter of `RLIMIT_NOFILE`, at
/// least 64, stays free.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The connection settings of one server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Connections {
    pub(crate) header_timeout: Duration,
    pub(crate) max_connections: usize,
}

/// `wanted` connections, lowered to what the open-file limit allows with headroom: a
/// quarter of the limit, at least 64, stays free for everything else the server opens.
/// Without a readable limit (not Unix), `wanted`.
pub(crate) fn connection_cap(wanted: usize) -> usize {
    match open_file_limit() {
        Some(limit) => {
            let headroom = (limit / 4).max(64);
            wanted.min(limit.saturating_sub(headroom).max(1))
        }
        None => wanted,
    }
}

/// The soft limit on open files, when it is finite and can be read.
#[cfg(unix)]
fn open_file_limit() -> Option<usize> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current.and_then(|n| usize::try_from(n).ok())
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<usize> {
    None
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and
/// waits for the connections open to end, for at most `drain`.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    connections: Connections,
    shutdown: impl Future<Output = ()> + Send,
    drain: Option<Duration>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(connections.max_connections));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(connections.header_timeout);
    let registry = Arc::new(Registry::default());
    'accept: loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A slot for it: at the cap, the connection idle longest is shed to make room
        // (never one with a request in flight); when every one is busy, the new one
        // waits for a slot, and the ones behind it in the listen backlog.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if registry.shed_one() {
                    tracing::debug!(
                        event = "connection_shed",
                        "at the connection cap: the connection idle longest is closed"
                    );
                }
                loop {
                    tokio::select! {
                        slot = slots.clone().acquire_owned() => match slot {
                            Ok(slot) => break slot,
                            Err(_closed) => break 'accept,
                        },
                        // Every one was busy; one is idle now: it goes.
                        () = registry.some_became_idle() => {
                            registry.shed_one();
                        }
                        () = &mut shutdown => break 'accept,
                    }
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (connection, shed) = registry.open();
        let connection = Arc::new(connection);
        // The peer, for `/metrics` (loopback only with a key table), as axum names it;
        // each request marks the connection busy until its response is wholly written.
        let router = router.clone();
        let service = tower::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let in_flight = connection.begin();
            let call = router.clone().oneshot(req);
            async move {
                let response = call.await?;
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| Guarded::body(body, in_flight)),
                )
            }
        });
        let service = TowerToHyperService::new(service);
        let serving = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            tokio::select! {
                ended = serving => if let Err(error) = ended {
                    tracing::debug!(event = "connection_closed", %error, "connection ended with an error");
                },
                // Dropping the connection closes it.
                () = shed.notified() => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::warn!(
        event = "serve_draining",
        drain_seconds = drain.map(|d| d.as_secs_f64()),
        "shutting down: draining the requests in flight"
    );
    match drain {
        Some(drain) => {
            if tokio::time::timeout(drain, graceful.shutdown())
                .await
                .is_err()
            {
                tracing::warn!(
                    event = "serve_drain_timeout",
                    "the drain timeout passed: the requests still in flight are cut off"
                );
            }
        }
        None => graceful.shutdown().await,
    }
    Ok(())
}

/// An accept that failed: a connection reset before it was accepted is nothing; out of
/// file descriptors (or another resource), wait a little rather than spin.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(event = "accept_failed", error = %e, "cannot accept a connection");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_a_quarter_of_the_open_file_limit_free() {
        let Some(limit) = open_file_limit() else {
            assert_eq!(connection_cap(10), 10);
            return;
        };
        let cap = connection_cap(usize::MAX);
        assert!(cap >= 1 && cap < limit, "{cap} of {limit}");
        if limit >= 256 {
            assert!(cap <= limit - limit / 4, "{cap} of {limit}");
        }
        assert!(connection_cap(1) == 1);
    }
}
