//! `WorkingContext`: what an agent knows right now — the transcript it reasons over, the
//! notes it has taken and the record of what it has done.
//!
//! ```
//! use llm_context_layers::working::LastNTurns;
//! use llm_context_layers::{Message, PrefixContext, WorkingContext};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::BoxError> {
//! let mut ctx = WorkingContext::new()
//!     .with_prefix(PrefixContext::new("You are a careful research assistant."));
//! ctx.append(Message::user("What changed in the pricing table?"))
//!     .note("ticket", "ENG-4412");
//!
//! assert_eq!(ctx.size(), 1);          // the tail only
//! assert_eq!(ctx.assembled().len(), 2); // what the provider sees: prefix, then tail
//! assert_eq!(ctx.tokens().await?, 25);
//!
//! // Into the stack: the prefix, a narrowed tail, the scope and the session.
//! let request = ctx.slice(&LastNTurns(4)).to_request("gpt-5.4");
//! assert!(request.prefix.is_some());
//! # Ok(()) }
//! ```
//!
//! # Four axes
//!
//! | axis | shape | who uses it |
//! |---|---|---|
//! | prefix | frozen [`PrefixContext`](crate::PrefixContext), shared by `Arc` | every LLM call |
//! | tail | `Vec<Message>` | every LLM call |
//! | scratchpad | string keys → JSON, ordered | cross-step notes |
//! | journal | [`MutationJournal`] | hierarchical agents |
//!
//! A single-shot chat agent uses the first three and never touches the journal; a
//! long-lived sub-agent reporting to a parent uses all four. Long-term recall is not an
//! axis: it belongs to a memory source whose results reach the prompt as grounding.
//!
//! The prefix is its own frozen type because the provider's prompt cache is real: a cache
//! read costs a tenth of a fresh read, and editing anything near the top of the
//! messages invalidates the cache from there on. No mutator of `WorkingContext` can
//! reach the prefix; changing it means building a new one.
//!
//! # Composition
//!
//! ```
//! use llm_context_layers::working::MergeMode;
//! use llm_context_layers::{Message, WorkingContext};
//!
//! let mut parent = WorkingContext::new();
//! parent.append(Message::user("Summarise the incident.")).note("owner", "sre");
//!
//! let mut child = parent.fork(); // own tail and scratchpad, same prefix
//! child.append(Message::assistant("Root cause: expired cert.")).note("owner", "me");
//! assert_eq!((parent.size(), child.size()), (1, 2));
//!
//! parent.merge(&child, MergeMode::Union); // fan-in without duplicating shared history
//! assert_eq!(parent.size(), 2);
//! assert_eq!(parent.get("owner").and_then(|v| v.as_str()), Some("me"));
//! ```
//!
//! [`slice`](WorkingContext::slice) narrows the tail with a scope (see [`ContextSelection`]);
//! [`freeze`](WorkingContext::freeze) takes an immutable, hashable snapshot
//! ([`FrozenContext`]); [`diff`](WorkingContext::diff) says what changed
//! ([`ContextDiff`]).
//!
//! # The journal
//!
//! ```
//! use llm_context_layers::WorkingContext;
//! use serde_json::json;
//!
//! let mut child = WorkingContext::new();
//! child.journal_mut().record(json!({"kind": "row_written", "id": 1, "agent_id": "enricher-a"}));
//! assert_eq!(child.journal().diff().len(), 1); // what the parent has not absorbed yet
//! child.journal_mut().mark_committed();
//! assert!(!child.journal().has_uncommitted());
//! ```
//!
//! # Sharing
//!
//! A `WorkingContext` is private to its owner. [`SharedContext`] puts one behind an async
//! lock for a team blackboard; see its module example for a sequence of writes that must
//! look atomic across an `.await`.
//!
//! # Token counting
//!
//! [`tokens`](WorkingContext::tokens) counts what [`assembled`](WorkingContext::assembled)
//! returns through the context's [`TokenCounter`](crate::tokens::TokenCounter), the
//! approximate one by default, so it agrees with every other estimate in the stack.
//! [`limit`](WorkingContext::limit) is a declared ceiling, not an enforcement: the
//! caller's policy owns the decision to prune or abort.
//!
//! Nothing here calls a model: this module is pure data operations. Compaction, recall
//! and invocation compose around a `WorkingContext`, in the layers.

mod context;
mod diff;
mod frozen;
mod journal;
mod selection;
mod shared;

pub use context::{MergeMode, WorkingContext};
pub use diff::ContextDiff;
pub use frozen::FrozenContext;
pub use journal::MutationJournal;
pub use selection::{
    AllOf, AnyOf, ContextSelection, LastNTurns, MessageSelection, Not, PositionalSelectionError,
    RoleFilter, SelectionList, Since, Tagged,
};
pub use shared::{LockedFuture, SharedContext};
