//! Skipping a store that just failed, so an outage costs each request nothing instead of
//! the whole store timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{StoreError, StoreErrorKind};

#[derive(Debug)]
pub(crate) struct Breaker {
    backoff: Duration,
    // Checked on every request without taking the lock.
    tripped: AtomicBool,
    open: Mutex<Option<Open>>,
}

#[derive(Debug)]
struct Open {
    until: Instant,
    reason: StoreError,
}

impl Breaker {
    pub(crate) fn new(backoff: Duration) -> Self {
        Self {
            backoff,
            tripped: AtomicBool::new(false),
            open: Mutex::new(None),
        }
    }

    /// The failure the store is still skipped for, if it is.
    pub(crate) fn skipped_for(&self) -> Option<StoreError> {
        if !self.tripped.load(Ordering::Acquire) {
            return None;
        }
        let open = self.lock();
        open.as_ref()
            .filter(|o| Instant::now() < o.until)
            .map(|o| o.reason.clone())
    }

    /// Records a failure; only a store that cannot be used (unreachable, slow, or
    /// refusing the credentials) is skipped afterwards.
    pub(crate) fn failed(&self, error: &StoreError) {
        let outage = unusable(error.kind);
        if !outage || self.backoff.is_zero() {
            return;
        }
        *self.lock() = Some(Open {
            until: Instant::now() + self.backoff,
            reason: error.clone(),
        });
        self.tripped.store(true, Ordering::Release);
    }

    /// Records an answer from the store: it is back.
    pub(crate) fn succeeded(&self) {
        if self.tripped.swap(false, Ordering::AcqRel) {
            *self.lock() = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a store failing this way fails every call for a while, whatever is asked: then
/// it is not asked again for the same request, and skipped for the backoff.
pub(crate) fn unusable(kind: StoreErrorKind) -> bool {
    matches!(
        kind,
        StoreErrorKind::Unavailable | StoreErrorKind::Timeout | StoreErrorKind::Authentication
    )
}
