//! Durable contexts and memory: what lets an agent run for days.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::durable::{ContextRecord, ContextStore, LocalContextStore};
//! use llm_context_layers::{Message, Scope, WorkingContext};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::StoreError> {
//! let store: Arc<dyn ContextStore> = Arc::new(LocalContextStore::new());
//! let scope = Scope::org("acme");
//!
//! // Resume (or start), work a turn, checkpoint.
//! let mut record = store.load(&scope, "root").await?.unwrap_or_default();
//! let mut ctx = record.to_working();
//! ctx.append(Message::user("What changed?")).append(Message::assistant("The price."));
//! let version = record.version;
//! record = ContextRecord::from_working(&ctx);
//! record.version = version;
//! record.version = store.save(&scope, "root", &record).await?;
//! assert_eq!(record.version, 1);
//! # Ok(()) }
//! ```
//!
//! - [`ContextStore`]: versioned [`ContextRecord`]s (prefix, tail, summary block,
//!   scratchpad, journal, token estimate) per tenant, written with compare-and-set: a
//!   write against a stale version fails with a `Conflict` and changes nothing.
//! - [`Compactor`]: the explicit `compact` of a record — plan, summarize, apply —
//!   refusing when the record changed since the plan, and never applying an empty
//!   summary.
//! - [`Memory`] over a [`MemoryStore`]: the agent's tenant-scoped JSON
//!   key/value space with TTL (enforced on read and on listing), key rules, a value size
//!   cap and prefix listing with a limit.
//!
//! This crate has the in-memory backends ([`LocalContextStore`],
//! [`LocalMemoryStore`]); `llm-context` adds SQLite (embedded, durable across
//! crashes) and Redis (shared by replicas), which pass the same contract tests.

mod compact;
mod context_store;
mod memory;
mod memory_local;
mod record;

pub use compact::{CompactError, CompactReport, CompactionPlan, Compactor, Summarization};
pub use context_store::{ContextStore, LocalContextStore};
pub use memory::{Memory, MemoryEntry, MemoryLimits, MemoryStore};
pub use memory_local::LocalMemoryStore;
pub use record::ContextRecord;
