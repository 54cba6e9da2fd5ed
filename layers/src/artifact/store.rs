//! The [`ArtifactStore`] trait and the [`Artifact`] it keeps.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::model::Scope;
use crate::store::StoreError;
use crate::tokens::{char_count, truncate_chars};

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
        let text = truncate_chars(original, max_chars);
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

    /// Whether the artifact `id` of this scope and session is stored. The stack asks
    /// before it takes a preview or a stub in a request at its word, since tool output can
    /// imitate them. The default reads the artifact; a backend that can answer without
    /// moving the text (an `EXISTS`, an index) should.
    async fn contains(&self, scope: &Scope, session: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.get(scope, session, id).await?.is_some())
    }

    /// Stores what one prepared request displaced and records every artifact id the
    /// request refers to (`referenced`, which includes the new ones) as the session's
    /// *live* set, replacing the previous request's. Returns the ids of `referenced` the
    /// store does not hold afterwards, in their order: the caller sends none of them.
    ///
    /// A store with bounds evicts only artifacts outside the live set, so every id the
    /// session's latest request names stays readable while that request is the latest.
    /// The live set may exceed the bounds: the planner keeps a request's references within
    /// [`ContextPolicy::max_artifacts`](crate::ContextPolicy::max_artifacts) and
    /// [`ContextPolicy::max_artifact_bytes`](crate::ContextPolicy::max_artifact_bytes),
    /// and a store's bounds should be at least those. A whole idle session may still be
    /// evicted (a bound on sessions); its next commit then reports its ids missing and the
    /// stack stores them again from the request.
    ///
    /// The shipped stores do all of it in one atomic step. The default puts each artifact
    /// and then asks [`contains`](Self::contains) for each reference, which reports what
    /// is missing but cannot keep the store's own eviction off the live set: a store with
    /// bounds should override it.
    async fn commit(
        &self,
        scope: &Scope,
        session: &str,
        new: Vec<(String, Artifact)>,
        referenced: &[String],
    ) -> Result<Vec<String>, StoreError> {
        for (id, artifact) in new {
            match self.put(scope, session, &id, artifact).await {
                Ok(()) => {}
                // One artifact the store refuses is one missing reference, not a failed
                // request.
                Err(e) if e.kind == crate::store::StoreErrorKind::TooLarge => {}
                Err(e) => return Err(e),
            }
        }
        let mut missing = Vec::new();
        for id in referenced {
            if !self.contains(scope, session, id).await? {
                missing.push(id.clone());
            }
        }
        Ok(missing)
    }
}

/// An artifact to store: the full text a preview or a stub stands for.
#[derive(Clone, Debug)]
pub(crate) struct Displaced {
    pub(crate) id: String,
    pub(crate) artifact: Artifact,
}
