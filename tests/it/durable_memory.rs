//! The store contract and the artifact contract against the in-memory backends.

use std::sync::Arc;

use crate::artifact_contract::ArtifactBackend;
use crate::contract::Backend;
use llm_context::artifact::{ArtifactLimits, LocalArtifactStore};
use llm_context::durable::{LocalContextStore, LocalMemoryStore};

async fn backend() -> Backend {
    Backend {
        contexts: Arc::new(LocalContextStore::new()),
        memory: Arc::new(LocalMemoryStore::new()),
        guard: Box::new(()),
    }
}

store_contract!(backend());

/// The in-memory store bounds the bytes of each session and of all its sessions: the
/// contract's tests each use one store, so both bound the session they fill (and the
/// whole-store bound is the one that refuses an artifact too large).
fn artifacts(
    count: usize,
    bytes: usize,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ArtifactBackend> + Send>> {
    Box::pin(async move {
        let limits = ArtifactLimits::default()
            .with_per_session(count)
            .with_session_bytes(bytes)
            .with_total_bytes(bytes);
        ArtifactBackend {
            store: Arc::new(LocalArtifactStore::new(limits)),
            guard: Box::new(()),
        }
    })
}

artifact_contract!(artifacts);
no_dangling_contract!(artifacts, 64);
