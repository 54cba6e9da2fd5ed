//! Single flight: concurrent identical requests in one scope share one call.
//!
//! The first request for a key becomes the *leader*: it looks in the store and, on a
//! miss, calls the provider. Requests for the same key that arrive meanwhile are
//! *followers*: they wait on a watch channel for the leader's outcome. The map's lock is
//! held only to join or leave, never across the store or the provider call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use super::key::MemoKey;
use crate::model::ChatResponse;

/// What a leader publishes: the response, or the error's text (errors are not `Clone`).
pub(crate) type Outcome = Result<ChatResponse, Arc<str>>;

type Slot = Option<Outcome>;

/// The flights in progress, shared by every service made from one layer.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    // In-process only and never persisted, so the std hasher is fine here.
    map: Mutex<HashMap<MemoKey, Entry>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    outcome: watch::Receiver<Slot>,
}

/// The role a request gets for its key.
pub(crate) enum Join {
    /// No identical request is in flight: this one does the work.
    Leader(Lead),
    /// An identical request is in flight: wait for it.
    Follower(watch::Receiver<Slot>),
}

impl Flights {
    /// Joins the flight for `key`, leading it when there is none.
    pub(crate) fn join(self: &Arc<Self>, key: &MemoKey) -> Join {
        let mut map = self.lock();
        if let Some(entry) = map.get(key) {
            return Join::Follower(entry.outcome.clone());
        }
        let (tx, rx) = watch::channel(None);
        // Ids only tell this flight's entry from a later one for the same key.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        map.insert(key.clone(), Entry { id, outcome: rx });
        Join::Leader(Lead {
            flights: Arc::clone(self),
            key: key.clone(),
            id,
            tx,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MemoKey, Entry>> {
        // The map is valid after any panic (inserts and removes are single calls).
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().len()
    }
}

/// The leader's handle. Dropping it ends the flight: followers that have no outcome by
/// then see a closed channel and try again (one of them leads), so a cancelled leader
/// never strands them.
pub(crate) struct Lead {
    flights: Arc<Flights>,
    key: MemoKey,
    id: u64,
    tx: watch::Sender<Slot>,
}

impl Lead {
    /// Gives the outcome to every follower, present and arriving until the lead drops.
    pub(crate) fn publish(&self, outcome: Outcome) {
        // `send_replace` stores the value even when no follower is listening yet.
        self.tx.send_replace(Some(outcome));
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        let mut map = self.flights.lock();
        if map.get(&self.key).is_some_and(|e| e.id == self.id) {
            map.remove(&self.key);
        }
    }
}

/// Waits for the leader; `None` when it went away without an outcome.
pub(crate) async fn follow(mut rx: watch::Receiver<Slot>) -> Option<Outcome> {
    match rx.wait_for(Option::is_some).await {
        Ok(slot) => slot.clone(),
        Err(_) => None,
    }
}

/// The error a request gets when it waited on an identical request whose call failed.
///
/// The failure is delivered to every waiter and nothing is memoized. The request that
/// made the call gets the original, typed error; a waiter gets its text here, because an
/// error value cannot be shared. Retrying is safe: a retry starts a new flight.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an identical request in flight failed: {message}")]
#[non_exhaustive]
pub struct FlightError {
    /// The failed call's error, as text.
    pub message: String,
}

impl FlightError {
    /// A flight error carrying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
