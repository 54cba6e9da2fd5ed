//! Store traits: where artifacts (and memoized responses) are kept; durable contexts and
//! memory are in [`durable`](crate::durable). In-memory defaults live beside their
//! layers; `llm-context` adds SQLite and Redis.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::{Artifact, ArtifactStore, Scope};
//!
//! fn takes_any_store(_store: Arc<dyn ArtifactStore>) {}
//! let artifact = Artifact::new("the full text", 1_000_000);
//! assert!(!artifact.truncated);
//! ```
//!
//! Every method takes the tenant [`Scope`] and the session: a store never answers for
//! another tenant or session, whatever id it is asked for.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::offload::cut_chars;
use crate::scope::Scope;
use crate::tokens::char_count;

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

/// A stored tool result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Artifact {
    /// The stored text (at most `artifact_max_chars` characters).
    pub text: Arc<str>,
    /// Characters in the original result.
    pub original_chars: usize,
    /// Whether `text` was cut short of the original.
    pub truncated: bool,
}

impl Artifact {
    /// An artifact for `original`, cut to `max_chars` characters on a character boundary.
    pub fn new(original: &str, max_chars: usize) -> Self {
        Self::counted(original, char_count(original), max_chars)
    }

    /// [`Artifact::new`] for an `original` of `original_chars` characters, counted already.
    pub(crate) fn counted(original: &str, original_chars: usize, max_chars: usize) -> Self {
        let text = cut_chars(original, max_chars);
        Self {
            text: Arc::from(text),
            original_chars,
            truncated: original_chars > max_chars,
        }
    }

    /// Characters stored.
    pub fn stored_chars(&self) -> usize {
        self.original_chars.min(char_count(&self.text))
    }
}

/// Where offloaded and cleared tool results are kept, per (scope, session).
#[async_trait]
pub trait ArtifactStore: Send + Sync + 'static {
    /// Stores `artifact` under `id`. Storing an id that is already there keeps one copy
    /// (ids are content-addressed) and counts as a use for eviction.
    async fn put(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
        artifact: Artifact,
    ) -> Result<(), StoreError>;

    /// The artifact `id` of this scope and session, or `None` (unknown, evicted, or
    /// another tenant's or session's).
    async fn get(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
    ) -> Result<Option<Artifact>, StoreError>;
}
