//! The store contract against the in-memory backends.

mod contract;

use std::sync::Arc;

use contract::Backend;
use llm_context::durable::{InMemoryContextStore, InMemoryMemoryStore};

async fn backend() -> Backend {
    Backend {
        contexts: Arc::new(InMemoryContextStore::new()),
        memory: Arc::new(InMemoryMemoryStore::new()),
        guard: Box::new(()),
    }
}

store_contract!(backend());
