//! What every service of one memo layer shares, and how it shows in `Debug`.

use std::sync::Arc;
use std::time::Duration;

use super::breaker::Breaker;
use super::flight::Flights;
use super::store::MemoStore;

/// What every service of one layer shares: the store, the timeout and the flights in
/// progress (so clones of a service, e.g. behind a `Buffer`, single-flight together).
pub(crate) struct MemoState {
    pub(crate) store: Arc<dyn MemoStore>,
    pub(crate) timeout: Duration,
    pub(crate) backoff: Duration,
    pub(crate) breaker: Breaker,
    pub(crate) flights: Arc<Flights>,
    /// Where the inner service sends requests, part of every key ([`MemoLayer::upstream`]).
    pub(crate) upstream: Arc<str>,
}

impl MemoState {
    pub(super) fn new(
        store: Arc<dyn MemoStore>,
        timeout: Duration,
        backoff: Duration,
        upstream: Arc<str>,
    ) -> Self {
        Self {
            store,
            timeout,
            backoff,
            breaker: Breaker::new(backoff),
            flights: Arc::default(),
            upstream,
        }
    }
}

/// Debug output without the store or the predicate, which need not be `Debug`.
pub(crate) fn debug_memo(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    shared: Option<&MemoState>,
    inner: Option<&dyn std::fmt::Debug>,
) -> std::fmt::Result {
    let mut d = f.debug_struct(name);
    if let Some(inner) = inner {
        d.field("inner", inner);
    }
    d.field("enabled", &shared.is_some());
    if let Some(s) = shared {
        d.field("store_timeout", &s.timeout);
        d.field("store_backoff", &s.backoff);
    }
    d.finish_non_exhaustive()
}
