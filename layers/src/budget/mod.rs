//! Budgets enforced before dispatch: limits on calls, input tokens, output tokens and cost
//! in USD, per session and per tenant per hour, day or month.
//!
//! ```
//! use llm_context_layers::budget::{Budget, BudgetExceeded, BudgetLayer};
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, Message, Scope};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let budget: Budget = toml::from_str("calls_per_hour = 2").unwrap();
//! let model = MockModel::echo();
//! let agent = BudgetLayer::new(&budget).layer(model.clone());
//! let ask = || ChatRequest::new("claude-sonnet-4-6", vec![Message::user("hi")])
//!     .with_scope(Scope::org("acme"));
//! agent.clone().oneshot(ask()).await.unwrap();
//! agent.clone().oneshot(ask()).await.unwrap();
//! // The third call of the hour is refused before it is sent.
//! let err = agent.clone().oneshot(ask()).await.unwrap_err();
//! let exceeded = err.downcast_ref::<BudgetExceeded>().unwrap();
//! assert_eq!(exceeded.limit, "calls_per_hour");
//! assert!(exceeded.resets_at.is_some());
//! assert_eq!(model.calls(), 2);
//! # }
//! ```
//!
//! Each call is checked **before** it is sent, from what it is expected to use: one call,
//! the estimate of its prompt, its output limit (`max_output_tokens`, else the layer's
//! output reserve, [`DEFAULT_OUTPUT_RESERVE`]) and their price from the catalog. A call
//! that would take any limit past its maximum is refused with [`BudgetExceeded`] (which
//! limit, what was used, what the call would add, the limit, and when the window resets)
//! and nothing is sent. Otherwise what it is expected to use is reserved at once — calls in
//! flight together cannot cross a limit that each alone would not — and settled once the
//! provider answers from what it counted (cache reads and writes are input tokens, and
//! priced as the catalog prices them). A memo hit costs nothing: put the layer inside the
//! memo (under [`ContextPolicyLayer`](crate::ContextPolicyLayer), whose memo answers
//! before it), or its hits are refunded once they are known. A failed call keeps its
//! call counted and nothing else; a stream that fails or is dropped before its end keeps
//! its reservation.
//!
//! Tenant windows are calendar periods in UTC and reset when the next begins; a session's
//! never does. Counters live in [`LocalBudgetStore`] (this process) or in any
//! [`BudgetStore`]; when the store does not answer, the call is sent with a warning
//! (fail-open), or refused with [`BudgetLayer::fail_closed`].

mod layer;
mod limits;
mod store;

pub use layer::{BudgetLayer, BudgetService, DEFAULT_OUTPUT_RESERVE};
pub use limits::{Amounts, Budget, BudgetExceeded, Kind, Limit, Window, rfc3339};
pub use store::{
    BudgetKey, BudgetStore, Counter, LocalBudgetStore, Reserved, counters, first_crossed,
};
