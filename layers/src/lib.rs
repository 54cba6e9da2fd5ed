//! The pure core of [llm-context](https://docs.rs/llm-context): what an LLM gets to see on
//! every call an agent makes.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, Message, ServiceBuilderExt};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::BoxError> {
//! let policy = ContextPolicy::default().with_max_context_tokens(8_000).with_reserve_tokens(1_000);
//! let model = ServiceBuilder::new()
//!     .context_policy(policy)?          // prune → clear → (offload → prefix → memo)
//!     .service(MockModel::echo());      // any Service<ChatRequest, Response = ChatResponse>
//! let reply = model.oneshot(ChatRequest::new("mock", vec![Message::user("hello")])).await?;
//! println!("{} → {:?}", reply.message.text(), reply.report);
//! # Ok(()) }
//! ```
//!
//! This crate has no network and no filesystem. `llm-context` re-exports all of it and adds
//! provider clients, durable stores and the command-line tool. Its modules, in the order a
//! request meets them:
//!
//! | | modules |
//! |---|---|
//! | plain data | [`Message`], [`ChatRequest`], [`ChatResponse`], [`PreparationReport`], [`Scope`], [`PrefixContext`] (at the root) |
//! | what every step measures and obeys | [`tokens`], [`policy`], [`catalog`], [`hash`], [`calibration`], [`store`] (for store implementors) |
//! | the format the steps share | [`artifact`]: stores, ids, previews, stubs, the read tool |
//! | the steps | [`fit`] (prune and clear), [`offload`], [`prefix`], [`memo`], and the composite [`context_policy`] |
//! | around the path | [`usage`], [`summarize`], [`working`], [`durable`], [`mock`], [`builder`] |
//!
//! The request's path, outermost first: (summarize →) prune → clear → offload → prefix →
//! memo → your model. Every layer can also be used alone (see [`ServiceBuilderExt`]).
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod macros;

// What every step works on and obeys, from the plainest up.
pub mod calibration;
pub mod catalog;
mod error;
pub mod future;
pub mod hash;
pub mod json;
mod model;
pub mod policy;
pub mod store;
pub mod tokens;
pub mod trace;
// The artifact format the steps share.
pub mod artifact;
pub mod budget;
// The steps, in the order a request meets them.
pub mod context_policy;
pub mod fit;
pub mod memo;
pub mod offload;
pub mod prefix;
pub mod stream;
// Around the path.
pub mod builder;
pub mod durable;
pub mod executor;
pub mod mock;
pub mod summarize;
pub mod thinking;
pub mod usage;
pub mod working;

pub use artifact::{Artifact, ArtifactStore};
pub use budget::{Budget, BudgetExceeded, BudgetLayer};
pub use builder::ServiceBuilderExt;
pub use calibration::Calibration;
pub use catalog::{Catalog, CatalogError};
pub use context_policy::{ContextPolicyLayer, ContextPolicyService, READ_BUDGET_SPENT};
pub use error::{BoxError, ContextLimitError, LimitBreakdown, ToolConflictError};
pub use executor::{AppliedEdits, Executor};
pub use fit::{Cut, CutStore, Cuts, LocalCutStore, PairingError};
pub use model::{
    CacheHints, CacheTtl, ChatRequest, ChatResponse, Content, ContentPart, DEFAULT_SESSION,
    FinishReason, GenerationParams, INFERRED_SESSION_PREFIX, MemoHint, Message, OpaqueTool, Origin,
    PrefixContext, PreparationReport, Reasoning, Role, Scope, Text, ToolCall, ToolChoice, ToolSpec,
    Usage, WireFormat,
};
pub use policy::{ContextPolicy, Guard, PolicyError};
pub use prefix::PrefixLayer;
pub use store::{StoreError, StoreErrorKind};
pub use summarize::{SummarizeLayer, SummaryBlock};
pub use usage::{UsageLayer, UsageMeter};
pub use working::{
    ContextDiff, FrozenContext, MergeMode, MutationJournal, SharedContext, WorkingContext,
};
