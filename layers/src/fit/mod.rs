//! Fitting a request into the window: the one planner behind [`PruneLayer`],
//! [`ClearLayer`] and [`ContextPolicyLayer`](crate::ContextPolicyLayer), and the session's
//! remembered [`cut`].
//!
//! ```
//! use llm_context_layers::fit::PruneLayer;
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, Message};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let mut messages = Vec::new();
//! for i in 0..40 {
//!     messages.push(Message::user(format!("question {i}: {}", "why? ".repeat(40))));
//!     messages.push(Message::assistant(format!("answer {i}: {}", "because ".repeat(40))));
//! }
//! let policy = ContextPolicy::default().with_max_context_tokens(2_000).with_reserve_tokens(500);
//! let model = PruneLayer::new(policy).unwrap().layer(MockModel::echo());
//! let reply = model.oneshot(ChatRequest::new("mock", messages)).await.unwrap();
//! assert!(reply.report.after_tokens <= 1_500);
//! assert_eq!(reply.report.history_start, Some(2 * reply.report.pruned_turns));
//! # }
//! ```
//!
//! Pruning and clearing decide together: whether a turn must go depends on how much
//! clearing (and offloading) will save, and the order of the two is a policy choice. So
//! they are stages of one planner, and each layer runs the stages it owns:
//!
//! | layer | stages | fails with `ContextLimitError` |
//! |---|---|---|
//! | `PruneLayer` | drop old turns, then old rounds of kept turns | yes |
//! | `ClearLayer` | clear old tool results | no |
//! | `ContextPolicyLayer` | all, in the policy's order, sized as offloading will send | yes |
//!
//! The plan is computed in one linear pass with a running total; nothing outside the
//! layer depends on positions. Used alone, [`PruneLayer`] and [`ClearLayer`] plan with the
//! same budget as the composite: the policy's `max_context_tokens`, else the model's window from
//! the catalog ([`with_catalog`](PruneLayer::with_catalog)), divided by a
//! [`Calibration`](crate::Calibration) factor when given
//! ([`with_calibration`](PruneLayer::with_calibration)).

mod clear;
pub mod cut;
mod fitting;
pub mod pairing;
mod plan;
mod prune;
mod turns;

pub use clear::{Clear, ClearLayer};
pub use cut::{Cut, CutStore, Cuts, LocalCutStore};
pub(crate) use fitting::{Fit, FitConfig, Fitting, budget, prepare};
pub use pairing::PairingError;
pub(crate) use plan::{Applied, Kept, Long, Reference, Scratch, Stages, summary_references};
pub use prune::{Prune, PruneLayer};
pub(crate) use turns::Layout;
