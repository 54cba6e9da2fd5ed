//! Single flight across processes: a store shared by many processes lets one of them
//! make the call for a key while the others wait for its answer in the store.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::model::ChatResponse;
use crate::store::StoreError;

/// What [`MemoStore::claim`](super::MemoStore::claim) found for a key.
#[non_exhaustive]
pub enum Claim {
    /// The answer is in the store (another process stored it since the lookup).
    Answered(Box<ChatResponse>),
    /// The caller makes the call, holding this lease until it has stored the answer or
    /// failed; others wait meanwhile.
    Leader(Box<dyn MemoLease>),
    /// Another caller holds a live lease: ask again a little later.
    Held,
    /// The store does not coordinate processes (the default): make the call.
    Unshared,
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Answered(response) => f.debug_tuple("Answered").field(response).finish(),
            Self::Leader(lease) => f
                .debug_struct("Leader")
                .field("renew_every", &lease.renew_every())
                .finish_non_exhaustive(),
            Self::Held => f.write_str("Held"),
            Self::Unshared => f.write_str("Unshared"),
        }
    }
}

/// The right to make one key's call, for a limited time, among every process sharing a
/// store. It lapses on its own unless renewed, so a holder that crashed (and can renew
/// nothing) frees the key within the lease time, with no sleep anywhere.
///
/// The memo layer renews it every [`renew_every`](Self::renew_every) while the call
/// runs, and releases it once the answer is stored, or at once when the call failed, so
/// that waiters proceed without waiting out the lease. An implementation releases a
/// lease that is dropped unreleased where it can (a cancelled call).
#[async_trait]
pub trait MemoLease: Send + Sync {
    /// How often the holder renews the lease while it works: a fraction of the lease
    /// time, so that a late renewal or two do not lose it.
    fn renew_every(&self) -> Duration;

    /// Extends the lease to a full lease time from now. `Ok(false)` when it was lost
    /// (it lapsed, and another caller may hold the key now).
    async fn renew(&self) -> Result<bool, StoreError>;

    /// Gives the lease up, so that waiters look again at once. Releasing a lease that
    /// was lost changes nothing.
    async fn release(&self) -> Result<(), StoreError>;
}
