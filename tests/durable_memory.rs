//! The store contract against the in-memory backends.

mod contract;

use std::sync::Arc;

use contract::Backend;
use llm_context::durable::{LocalContextStore, LocalMemoryStore};

async fn backend() -> Backend {
    Backend {
        contexts: Arc::new(LocalContextStore::new()),
        memory: Arc::new(LocalMemoryStore::new()),
        guard: Box::new(()),
    }
}

store_contract!(backend());
