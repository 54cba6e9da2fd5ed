//! The pure core of [llm-context](https://docs.rs/llm-context): what an LLM gets to see on
//! every call an agent makes.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, Message, ServiceBuilderExt};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::BoxError> {
//! let policy = ContextPolicy::default().with_max_tokens(8_000).with_reserve_tokens(1_000);
//! let model = ServiceBuilder::new()
//!     .context_policy(policy)?          // prune → clear → (offload → prefix → memo)
//!     .service(MockModel::echo());      // any Service<ChatRequest, Response = ChatResponse>
//! let reply = model.oneshot(ChatRequest::new("mock", vec![Message::user("hello")])).await?;
//! println!("{} → {:?}", reply.message.text(), reply.report);
//! # Ok(()) }
//! ```
//!
//! This crate has no network and no filesystem: the provider-neutral message model
//! ([`Message`], [`ChatRequest`], [`ChatResponse`]), the token estimate ([`tokens`]),
//! [`ContextPolicy`], the tower layers ([`prune`], [`clear`], [`offload`], [`prefix`],
//! [`memo`], [`usage`], [`summarize`], [`ContextPolicyLayer`]), the model [`catalog`] and
//! costs, [`WorkingContext`], durable context records and memory with in-memory backends
//! ([`durable`]), the [`mock`] model, errors and reports. `llm-context` re-exports all of it and adds
//! provider clients, durable stores and the command-line tool.
//!
//! The request's path, outermost first: (summarize →) prune → clear → offload → prefix →
//! memo → your model. Every layer can also be used alone (see [`ServiceBuilderExt`]).
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod builder;
pub mod calibration;
pub mod catalog;
pub mod clear;
pub mod context_policy;
pub mod cut;
pub mod durable;
mod error;
pub mod fit;
mod future;
pub mod hash;
pub mod memo;
pub mod message;
pub mod mock;
pub mod offload;
pub mod policy;
pub mod prefix;
mod prefix_context;
pub mod prune;
mod report;
pub mod request;
mod scope;
pub mod store;
pub mod summarize;
pub mod tokens;
pub mod usage;
pub mod working;

pub use builder::ServiceBuilderExt;
pub use calibration::Calibration;
pub use catalog::{Catalog, CatalogError};
pub use context_policy::{ContextPolicyLayer, ContextPolicyService};
pub use cut::{Cut, CutStore, InMemoryCutStore};
pub use error::{BoxError, ContextLimitError, LimitBreakdown, ToolConflictError};
pub use message::{Content, ContentPart, Message, Role, ToolCall, ToolSpec};
pub use policy::{ContextPolicy, PolicyError};
pub use prefix::PrefixLayer;
pub use prefix_context::PrefixContext;
pub use report::PreparationReport;
pub use request::{
    CacheHints, CacheTtl, ChatRequest, ChatResponse, FinishReason, GenerationParams, MemoHint,
    Usage,
};
pub use scope::Scope;
pub use store::{Artifact, ArtifactStore, StoreError, StoreErrorKind};
pub use summarize::{SummarizeLayer, SummaryBlock};
pub use usage::{UsageLayer, UsageMeter};
pub use working::{
    ContextDiff, FrozenContext, MergeMode, MutationJournal, SharedContext, WorkingContext,
};
