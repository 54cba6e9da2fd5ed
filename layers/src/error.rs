//! Errors: typed, `#[non_exhaustive]`, never a panic.
//!
//! Layers return [`BoxError`] in the tower manner; find a [`ContextLimitError`] with
//! `downcast_ref`:
//!
//! ```
//! use llm_context_layers::{BoxError, ContextLimitError, LimitBreakdown};
//!
//! let err: BoxError = Box::new(ContextLimitError::new(40_000, 30_000, LimitBreakdown::default()));
//! let limit = err.downcast_ref::<ContextLimitError>().unwrap();
//! assert_eq!(limit.needed_tokens, 40_000);
//! assert!(err.to_string().contains("40000 tokens"));
//! ```

use serde::{Deserialize, Serialize};

/// A type-erased error, as tower uses.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where the tokens that must be kept go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LimitBreakdown {
    /// The frozen prefix.
    pub prefix_tokens: usize,
    /// System messages before the first turn.
    pub system_tokens: usize,
    /// Tool definitions.
    pub tool_tokens: usize,
    /// Earlier turns protected by `preserve_recent`, at their smallest.
    pub protected_turn_tokens: usize,
    /// The current (newest) turn, at its smallest.
    pub current_turn_tokens: usize,
}

impl LimitBreakdown {
    /// The sum of the parts.
    pub fn total(&self) -> usize {
        self.prefix_tokens
            + self.system_tokens
            + self.tool_tokens
            + self.protected_turn_tokens
            + self.current_turn_tokens
    }
}

/// The request cannot fit the allowance even after every reduction the policy allows.
/// Returned **before** the inner service is called.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "context limit: the request needs at least {needed_tokens} tokens but the prompt allowance is {allowance} \
     (prefix {p}, system {s}, tools {t}, earlier protected turns {pt}, current turn {ct}); \
     {advice}",
    advice = Self::ADVICE,
    p = breakdown.prefix_tokens,
    s = breakdown.system_tokens,
    t = breakdown.tool_tokens,
    pt = breakdown.protected_turn_tokens,
    ct = breakdown.current_turn_tokens
)]
#[non_exhaustive]
pub struct ContextLimitError {
    /// The fewest tokens the request can be brought down to.
    pub needed_tokens: usize,
    /// `max_tokens - reserve_tokens`.
    pub allowance: usize,
    /// Where the needed tokens go.
    pub breakdown: LimitBreakdown,
}

impl ContextLimitError {
    /// What a person can change so that the request fits; the end of the message.
    pub const ADVICE: &'static str =
        "shorten the current turn or the prefix, lower preserve_recent, or raise max_tokens";

    /// A context limit error.
    pub fn new(needed_tokens: usize, allowance: usize, breakdown: LimitBreakdown) -> Self {
        Self {
            needed_tokens,
            allowance,
            breakdown,
        }
    }
}

/// The request defines a tool with a name the stack needs for its own tool, with a
/// different definition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the request defines its own `{name}` tool, which the context stack needs for reading \
     offloaded results; rename that tool or remove it"
)]
#[non_exhaustive]
pub struct ToolConflictError {
    /// The tool's name.
    pub name: String,
}
