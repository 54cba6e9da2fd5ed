//! What the provider reports it edited: `context_management.applied_edits` and the
//! thinking blocks it dropped (`input_transformations`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::compaction::is_compaction;
use crate::model::{ChatResponse, Content};

/// The provider's edits of one request, summed from its response: tool uses and thinking
/// turns it cleared, the input tokens that freed, compactions, and thinking blocks it
/// dropped (`drop_block`). All zero is a response that says it edited nothing.
///
/// ```
/// use llm_context_layers::executor::AppliedEdits;
/// use serde_json::json;
///
/// let fields = [("context_management".to_owned(), json!({"applied_edits": [
///     {"type": "clear_thinking_20251015", "cleared_thinking_turns": 3, "cleared_input_tokens": 900},
///     {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 8, "cleared_input_tokens": 41_000},
/// ]}))].into_iter().collect();
/// let applied = AppliedEdits::from_fields(&fields).unwrap();
/// assert_eq!((applied.cleared_tool_uses, applied.cleared_input_tokens), (8, 41_900));
/// assert_eq!(applied.cleared_thinking_turns, 3);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct AppliedEdits {
    /// Tool uses whose results (and, when asked, inputs) the provider cleared.
    pub cleared_tool_uses: usize,
    /// Thinking turns the provider cleared.
    pub cleared_thinking_turns: usize,
    /// Input tokens the provider's edits freed.
    pub cleared_input_tokens: usize,
    /// Compactions the provider made.
    pub compactions: usize,
    /// Thinking blocks the provider dropped because their prefix changed
    /// (`block_binding.prefix_mismatch_behavior: "drop_block"`).
    pub dropped_thinking: usize,
}

impl AppliedEdits {
    /// What a response's top-level fields say was edited; `None` when they say nothing
    /// (no `context_management`, no `input_transformations`).
    pub fn from_fields(fields: &BTreeMap<String, Value>) -> Option<Self> {
        let edits = fields
            .get("context_management")
            .and_then(|cm| cm.get("applied_edits"))
            .and_then(Value::as_array);
        let transformations = fields
            .get("input_transformations")
            .and_then(Value::as_array);
        if edits.is_none() && transformations.is_none() {
            return None;
        }
        let mut out = AppliedEdits::default();
        let count = |e: &Value, k: &str| -> usize {
            e.get(k)
                .and_then(Value::as_u64)
                .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        for e in edits.into_iter().flatten() {
            let kind = e.get("type").and_then(Value::as_str).unwrap_or_default();
            out.cleared_input_tokens = out
                .cleared_input_tokens
                .saturating_add(count(e, "cleared_input_tokens"));
            if kind.starts_with("clear_tool_uses_") {
                out.cleared_tool_uses += count(e, "cleared_tool_uses");
            } else if kind.starts_with("clear_thinking_") {
                out.cleared_thinking_turns += count(e, "cleared_thinking_turns");
            } else if kind.starts_with("compact") {
                out.compactions += 1;
            }
        }
        out.dropped_thinking = transformations
            .into_iter()
            .flatten()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("thinking_dropped"))
            .count();
        Some(out)
    }

    /// What a response says was edited: its fields ([`from_fields`](Self::from_fields)),
    /// and a compaction for each provider's `compaction` block its message starts with
    /// (the provider reports a compaction by answering with the block); `None` when it
    /// says nothing.
    pub fn from_response(response: &ChatResponse) -> Option<Self> {
        let blocks = match &response.message.content {
            Content::Parts(parts) => parts.iter().filter(|p| is_compaction(p)).count(),
            Content::Text(_) => 0,
        };
        let mut out = Self::from_fields(&response.provider_fields);
        if blocks > 0 {
            out.get_or_insert_with(Self::default).compactions += blocks;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_response_without_the_fields_says_nothing_and_dropped_blocks_are_counted() {
        assert_eq!(AppliedEdits::from_fields(&BTreeMap::new()), None);
        let fields = [(
            "input_transformations".to_owned(),
            json!([{"type": "thinking_dropped", "path": "messages.1.content.0",
                    "reason": "prefix_binding_mismatch"},
                   {"type": "thinking_mismatch_allowed", "path": "messages.3.content.0",
                    "reason": "model_binding_mismatch"}]),
        )]
        .into_iter()
        .collect();
        let applied = AppliedEdits::from_fields(&fields).unwrap();
        assert_eq!(applied.dropped_thinking, 1);
        assert_eq!(applied.cleared_tool_uses, 0);
    }
}
