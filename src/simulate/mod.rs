//! What a context policy would cost: an agent conversation run through the real stack,
//! every prepared request billed by a model of the provider's prompt cache.
//!
//! ```
//! use llm_context::simulate::{Calls, Candidate, Conversation, Simulation};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::simulate::SimulateError> {
//! let conversation = Conversation::generate(4, 1);
//! let simulation = Simulation::new("claude-sonnet-4-6").with_calls(Calls::PerRound);
//! let [minimal, _, uncached] = &Candidate::comparison()[..] else { unreachable!() };
//!
//! let cached = simulation.run(&conversation, minimal).await?;
//! let plain = simulation.run(&conversation, uncached).await?;
//! // The same prompts; with breakpoints most of them are read from the cache.
//! assert_eq!(cached.input_tokens, plain.input_tokens);
//! assert!(cached.cache_read_share() > 0.5);
//! assert_eq!(plain.cache_read_share(), 0.0);
//! assert!(cached.cost_usd < plain.cost_usd);
//! # Ok(()) }
//! ```
//!
//! * [`Conversation`]: the agent's transcript and when it calls the model, generated
//!   (seeded, tool-heavy: code, logs and JSON results with non-ASCII text, heavy-tailed
//!   sizes) or read from a recorded transcript.
//! * [`Simulation::run`]: one [`Candidate`] (a named [`ContextPolicy`](crate::ContextPolicy))
//!   through a fresh [`ContextPolicyLayer`](crate::ContextPolicyLayer) with one session,
//!   on a simulated clock, the agent keeping its whole transcript whatever the stack
//!   sends. It returns an [`Outcome`]: tokens, cache reads and writes, cost, messages the
//!   model did not see, cut moves and refused calls.
//! * The cache model is chosen by the model's provider in the [catalog](crate::catalog):
//!   [`AnthropicCache`] (breakpoints, 20-block lookback, TTLs refreshed on read, the
//!   model's minimum) over the request as the Anthropic client renders it
//!   ([`anthropic::blocks`]), or [`OpenAiCache`] (automatic prefix caching in 128-token
//!   steps from 1,024) over the request's units ([`openai::units`]). Prices are the
//!   catalog's.
//!
//! A delegated request ([`Executor::Delegate`](crate::Executor::Delegate)) is billed as
//! the provider edits it: its `clear_tool_uses` edit is applied to what the stack sent
//! before the cache model sees it, so the cleared region moving costs the cache writes
//! after it (what the edit's `clear_at_least` is there to batch).
//!
//! Token counts are the crate's estimate, so the figures compare policies with each
//! other; they are not a bill.
//!
//! `llm-context simulate` prints the outcomes of several policies side by side.

pub mod anthropic;
mod cache;
mod content;
mod conversation;
pub mod openai;
mod provider;
mod run;

pub use anthropic::AnthropicCache;
pub use cache::{Block, Chain, Tally};
pub use conversation::{ANOTHER_ROUND, Conversation, MAX_PARALLEL_CALLS, MAX_ROUNDS};
pub use openai::OpenAiCache;
pub use run::{
    Calls, Candidate, OUTPUT_TOKENS_PER_CALL, Outcome, ROUND_SECONDS, SESSION, Sessions,
    SimulateError, Simulation, TURN_GAP_SECONDS,
};
