//! For store implementors: the error every store returns, and the helpers every backend
//! of a store trait shares.
//!
//! ```
//! use llm_context_layers::store::{check_context_id, StoreError, StoreErrorKind};
//!
//! fn save(id: &str) -> Result<(), StoreError> {
//!     check_context_id(id)?; // the same rule on every backend
//!     Err(StoreError::new(StoreErrorKind::Unavailable, "the backend is down"))
//! }
//! assert_eq!(save("").unwrap_err().kind, StoreErrorKind::Invalid);
//! assert_eq!(save("root").unwrap_err().kind, StoreErrorKind::Unavailable);
//! ```
//!
//! The store traits themselves live beside what they store:
//! [`ArtifactStore`](crate::artifact::ArtifactStore), [`MemoStore`](crate::memo::MemoStore),
//! [`CutStore`](crate::fit::CutStore), and the durable
//! [`ContextStore`](crate::durable::ContextStore) and
//! [`MemoryStore`](crate::durable::MemoryStore). Every method of each takes the tenant
//! [`Scope`](crate::Scope): a store never answers for another tenant, whatever id it is
//! asked for. `llm-context` implements them on SQLite and Redis; a backend of your own
//! uses the helpers here so that it keeps the same rules.

use std::time::{SystemTime, UNIX_EPOCH};

/// What kind of store failure this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The backend cannot be reached.
    Unavailable,
    /// The backend did not answer in time.
    Timeout,
    /// A compare-and-set lost against a newer version.
    Conflict,
    /// A record could not be decoded.
    Corrupt,
    /// A value is over a configured bound.
    TooLarge,
    /// A key, id or value breaks a rule of the store (the message names it).
    Invalid,
    /// The backend refused the credentials it was given (a wrong password or user): a
    /// configuration error to fix, not an outage to wait out.
    Authentication,
    /// Anything else.
    Other,
}

/// A store failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("store error ({kind:?}): {message}")]
#[non_exhaustive]
pub struct StoreError {
    /// What kind of failure.
    pub kind: StoreErrorKind,
    /// What happened (never contains credentials).
    pub message: String,
}

impl StoreError {
    /// A store error.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// The longest context id, in bytes.
pub const MAX_CONTEXT_ID_BYTES: usize = 512;

/// Fails unless `id` is a usable context id: 1 to [`MAX_CONTEXT_ID_BYTES`] bytes, no
/// control characters. Every backend checks it, so an id works on all or on none.
pub fn check_context_id(id: &str) -> Result<(), StoreError> {
    if id.is_empty() || id.len() > MAX_CONTEXT_ID_BYTES {
        return Err(StoreError::new(
            StoreErrorKind::Invalid,
            format!(
                "a context id must be 1 to {MAX_CONTEXT_ID_BYTES} bytes, got {}",
                id.len()
            ),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(StoreError::new(
            StoreErrorKind::Invalid,
            format!("context id {id:?} contains a control character"),
        ));
    }
    Ok(())
}

/// The error of a write against a stale version.
pub fn version_conflict(id: &str, expected: u64, found: u64) -> StoreError {
    StoreError::new(
        StoreErrorKind::Conflict,
        format!(
            "context {id:?} is at version {found}, not {expected}: another writer committed \
             first; reload it and apply the change again"
        ),
    )
}

/// Milliseconds since the Unix epoch, by the system clock.
pub fn system_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
