//! The composite layer: every preparation step, in order, from one [`ContextPolicy`](crate::ContextPolicy).
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextLimitError, ContextPolicy, ContextPolicyLayer, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = ContextPolicy::default().with_max_context_tokens(4_000).with_reserve_tokens(1_000);
//! let model = ServiceBuilder::new()
//!     .layer(ContextPolicyLayer::new(policy).unwrap())
//!     .service(MockModel::echo());
//!
//! // A request that fits goes through untouched.
//! let reply = model.clone().oneshot(ChatRequest::new("mock", vec![Message::user("hi")])).await.unwrap();
//! assert!(!reply.report.changed());
//!
//! // One that cannot fit fails before the model is called.
//! let huge = Message::user("word ".repeat(20_000));
//! let err = model.oneshot(ChatRequest::new("mock", vec![huge])).await.unwrap_err();
//! let limit = err.downcast_ref::<ContextLimitError>().unwrap();
//! assert_eq!(limit.allowance, 3_000);
//! # }
//! ```
//!
//! The steps, outermost first:
//!
//! 1. **prune** old turns and 2. **clear** old tool results — one linear plan, in the
//!    order the policy asks, with every tool result sized as it will be sent (see
//!    [`fit`](crate::fit));
//! 3. **offload** tool results longer than `tool_result_max_chars` into the artifact
//!    store, and store what clearing replaced, so nothing is lost (see
//!    [`offload`](crate::offload));
//! 4. **prefix**: a configured prefix is injected *before* the plan (so it counts in the
//!    allowance) and the cache breakpoints are marked on what is sent
//!    ([`with_prefix`](ContextPolicyLayer::with_prefix), see [`prefix`](crate::prefix));
//! 5. **memo**: tenant-scoped memoization of the prepared request, off unless
//!    [`with_memo`](ContextPolicyLayer::with_memo) (see [`memo`](crate::memo));
//! 6. then the inner service.
//!
//! When the policy sets no `max_context_tokens` or `context_window`, the ceiling is the model's
//! window from the [`catalog`](crate::catalog) (then 32,000).
//!
//! When nothing has to be stored the inner call is made straight away, with no
//! allocation; otherwise the stores are written first (clone-and-swap, so the ready
//! inner service is the one called). With [`ContextPolicyLayer::with_auto_resolve`] the
//! layer also answers the model's `read_context_artifact` calls itself.
//!
//! Preparation is a pure function of the request, the policy and the store contents:
//! preparing a prepared request changes nothing.
//!
//! Memory: the planner's per-message lists (about 40 bytes a message) belong to the
//! service and are reused from one request to the next, so a service keeps that much for
//! the longest recent transcript; it lets them go when a request is less than a quarter
//! as long (and they are over 65,536 messages long). A clone of the service starts
//! without them.
//! Kept messages are moved, never copied; the request's message list is compacted in
//! place.

mod layer;
mod resolve;
mod service;
mod steps;
mod stream;

pub use layer::{ContextPolicyLayer, DEFAULT_RESOLVE_ROUNDS};
pub use resolve::READ_BUDGET_SPENT;
pub use service::ContextPolicyService;
