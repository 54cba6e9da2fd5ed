//! Who goes at the connection cap: the connection that has waited longest without a
//! request in flight (one still sending its headers, or a kept-alive one between
//! requests) is closed to admit a new one, so a health check or a real request is
//! answered at once rather than after an idle connection's header timeout. A
//! connection with a request in flight (its response, streams included, not yet wholly
//! written) is never shed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The server's open connections and whether each has a request in flight.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
    /// Told when a connection's last request in flight ends: a new connection waiting
    /// for a place (every one was busy) may now shed it.
    became_idle: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    open: HashMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// Requests in flight (hyper's HTTP/1 serves one at a time; counted all the same).
    busy: usize,
    /// When it last had nothing in flight: opened, or its last response ended.
    idle_since: Instant,
    /// Told to close.
    shed: Arc<Notify>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves counts, never a broken invariant.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection opened: its handle, and what tells it to close.
    pub(crate) fn open(self: &Arc<Self>) -> (Connection, Arc<Notify>) {
        let shed = Arc::new(Notify::new());
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        inner.open.insert(
            id,
            Entry {
                busy: 0,
                idle_since: Instant::now(),
                shed: shed.clone(),
            },
        );
        let connection = Connection {
            id,
            registry: self.clone(),
        };
        (connection, shed)
    }

    /// Tells the connection idle longest to close; `false` when every one is busy.
    pub(crate) fn shed_one(&self) -> bool {
        let inner = self.lock();
        let oldest = inner
            .open
            .values()
            .filter(|e| e.busy == 0)
            .min_by_key(|e| e.idle_since);
        match oldest {
            Some(entry) => {
                entry.shed.notify_one();
                true
            }
            None => false,
        }
    }

    /// Until a connection's requests in flight have all ended (at once if one has since
    /// this was last awaited).
    pub(crate) async fn some_became_idle(&self) {
        self.became_idle.notified().await;
    }

    /// The connections open (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().open.len()
    }
}

/// One open connection's place in the registry, left when dropped (the connection
/// ended).
#[derive(Debug)]
pub(crate) struct Connection {
    id: u64,
    registry: Arc<Registry>,
}

impl Connection {
    /// A request began: the connection is busy until the guard is dropped (put it in the
    /// response's body, [`Guarded`]).
    pub(crate) fn begin(&self) -> InFlight {
        if let Some(entry) = self.registry.lock().open.get_mut(&self.id) {
            entry.busy += 1;
        }
        InFlight {
            id: self.id,
            registry: self.registry.clone(),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.registry.lock().open.remove(&self.id);
    }
}

/// A request in flight on a connection; its end when dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    id: u64,
    registry: Arc<Registry>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(entry) = self.registry.lock().open.get_mut(&self.id) {
            entry.busy = entry.busy.saturating_sub(1);
            if entry.busy == 0 {
                entry.idle_since = Instant::now();
                self.registry.became_idle.notify_one();
            }
        }
    }
}

/// A response body holding its request's [`InFlight`] until it is wholly written (or
/// dropped): a stream keeps its connection busy to its end.
pub(crate) struct Guarded {
    inner: Body,
    _in_flight: InFlight,
}

impl Guarded {
    /// `inner`, holding `in_flight`.
    pub(crate) fn body(inner: Body, in_flight: InFlight) -> Body {
        Body::new(Self {
            inner,
            _in_flight: in_flight,
        })
    }
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_longest_idle_goes_and_a_busy_one_never() {
        let registry = Arc::new(Registry::default());
        let (first, first_shed) = registry.open();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let (second, second_shed) = registry.open();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        // The first is busy: the second, idle longest of the idle ones, goes.
        let request = first.begin();
        assert!(registry.shed_one());
        let told = |n: &Arc<Notify>| {
            let n = n.clone();
            async move {
                tokio::time::timeout(std::time::Duration::from_millis(1), n.notified())
                    .await
                    .is_ok()
            }
        };
        assert!(told(&second_shed).await);
        assert!(!told(&first_shed).await);
        drop(second);
        // Only a busy one left: nobody goes.
        assert!(!registry.shed_one());
        // Its request over, it is idle again, and may go.
        drop(request);
        assert!(registry.shed_one());
        assert!(told(&first_shed).await);
        drop(first);
        assert_eq!(registry.len(), 0);
    }
}
