//! Preserved thinking: never send a signed thinking block whose prefix the stack changed.
//!
//! Anthropic's newest models bind each `thinking` (and `redacted_thinking`) block to
//! everything before it: the system prompt, the tools and every earlier message, as they
//! were when the block was made. A request carrying a block whose prefix changed is
//! answered 400. Removing thinking blocks from the start of the history (or all of them),
//! moving cache markers and changing parameters keep the others valid. Every local step
//! of this stack (pruning a turn, clearing or offloading a result, folding a summary)
//! changes what comes before the blocks after it.
//!
//! So on a model that binds thinking ([`Catalog::binds_thinking`](crate::Catalog::binds_thinking)),
//! [`ContextPolicyLayer`](crate::ContextPolicyLayer) remembers, with the session's cuts, a
//! digest of what it sent (prefix, tools and messages, thinking left out) and the last
//! block it dropped. A block the model made since was bound to what was sent. On the next
//! request, when what is sent starts with what was sent before (the history only grew),
//! every block is still bound as it was made; when it does not (the cut moved, the
//! cleared region grew, a result was offloaded late), every block present was made
//! against what changed, so all of them are left out, from the start, the allowed form.
//! The blocks the model makes afterwards are kept until the next change, so with
//! cache-aware pruning ([`low_water_tokens`](crate::ContextPolicy::low_water_tokens)) thinking is
//! dropped in steps, when the cut moves, not on every call. A block is never edited: it
//! is sent byte for byte or not at all. The report counts what was left out
//! ([`thinking_dropped`](crate::PreparationReport::thinking_dropped)).
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Executor, Message, Reasoning, ToolCall};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let model = MockModel::echo();
//! // The stack's own steps (`auto` would have the provider clear: see `executor`).
//! let policy = ContextPolicy::default()
//!     .with_max_context_tokens(3_000)
//!     .with_reserve_tokens(200)
//!     .with_executor(Executor::Local);
//! let mut agent = ServiceBuilder::new()
//!     .layer(ContextPolicyLayer::new(policy).unwrap())
//!     .service(model.clone());
//! let mut history = vec![Message::user("Why does the build fail?")];
//! let mut dropped = Vec::new();
//! for call in 0..12 {
//!     // The model thinks, signed, then calls a tool; its 2 KB result is sent back.
//!     let thinking = Reasoning::Thinking { thinking: format!("step {call}"), signature: format!("sig-{call}") };
//!     let call_it = ToolCall::new(format!("c{call}"), "run", serde_json::json!({}));
//!     history.push(Message::assistant_tool_calls("", vec![call_it]).with_reasoning(vec![thinking]));
//!     history.push(Message::tool_result(format!("c{call}"), "run", "log line\n".repeat(220)));
//!     let req = ChatRequest::new("claude-fable-5-1", history.clone()).with_session("s1");
//!     let reply = ServiceExt::<ChatRequest>::ready(&mut agent).await.unwrap().call(req).await.unwrap();
//!     dropped.push(reply.report.thinking_dropped);
//! }
//! // Nothing is dropped while the history only grows; once turns are pruned, the blocks
//! // made against the pruned turns go, from the start.
//! assert_eq!(dropped[0], 0);
//! assert!(dropped.iter().any(|&n| n > 0));
//! # }
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::hash::StableHasher;
use crate::model::{ChatRequest, Reasoning};

/// Who leaves out a signed thinking block whose prefix the stack changed
/// ([`ContextPolicy::thinking_mismatch`](crate::ContextPolicy::thinking_mismatch)).
///
/// ```
/// use llm_context_layers::thinking::{ThinkingMismatch, ask_provider_to_drop};
/// use llm_context_layers::{ChatRequest, Message};
/// use serde_json::json;
///
/// let mut req = ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")]);
/// req.params.extra.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 2048}));
/// assert!(ask_provider_to_drop(&mut req));
/// assert_eq!(req.params.extra["thinking"]["block_binding"],
///            json!({"prefix_mismatch_behavior": "drop_block"}));
/// assert_eq!(req.params.headers[0].1, "thinking-binding-controls-2026-08-01");
/// assert_eq!(serde_json::to_value(ThinkingMismatch::DropBlock).unwrap(), "drop_block");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ThinkingMismatch {
    /// The stack leaves them out, from the start of the history, and counts them
    /// ([`PreparationReport::thinking_dropped`](crate::PreparationReport::thinking_dropped)).
    #[default]
    Omit,
    /// Every block is sent, with `thinking.block_binding.prefix_mismatch_behavior:
    /// "drop_block"` and its beta: the provider drops the blocks whose prefix changed,
    /// and reports them (`input_transformations`, read into
    /// [`AppliedEdits::dropped_thinking`](crate::AppliedEdits::dropped_thinking)). Only
    /// for a request whose own `thinking` object enables thinking (the field lives
    /// there); for any other the stack leaves them out.
    DropBlock,
}

/// The beta `thinking.block_binding` needs.
pub const BINDING_BETA: &str = "thinking-binding-controls-2026-08-01";

/// Asks the provider to drop the thinking blocks whose prefix changed instead of refusing
/// the request: `block_binding` set in the request's `thinking` (a client's own
/// `block_binding` is kept as it is), its beta added. `false`, and nothing changed, when
/// the request carries no `thinking` object that enables thinking.
pub fn ask_provider_to_drop(req: &mut ChatRequest) -> bool {
    let Some(Value::Object(thinking)) = req.params.extra.get_mut("thinking") else {
        return false;
    };
    if !matches!(
        thinking.get("type").and_then(Value::as_str),
        Some("enabled" | "adaptive")
    ) {
        return false;
    }
    thinking
        .entry("block_binding")
        .or_insert_with(|| json!({"prefix_mismatch_behavior": "drop_block"}));
    crate::executor::edits::add_beta(&mut req.params.headers, BINDING_BETA);
    true
}

/// What the stack remembers of the last request it sent for a session, on a model that
/// binds thinking: enough to tell, on the next request, which thinking blocks are still
/// bound to what is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    /// A digest of what was sent: the stack's prefix, the tools and every message, its
    /// thinking left out.
    pub sent: u128,
    /// How many messages were sent.
    pub messages: usize,
    /// The last thinking block left out (a digest of its signature): it and every block
    /// before it stay out, for they were bound to a prefix that is gone.
    pub dropped_through: Option<u128>,
}

/// What [`keep_bound`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kept {
    /// What to remember for the session's next request.
    pub(crate) binding: Binding,
    /// Thinking blocks left out of this request.
    pub(crate) dropped: usize,
}

/// Leaves out of `req` (prepared, about to be sent) every thinking block that may be bound
/// to a prefix that is no longer sent, from the start of the history: with the session's
/// `previous` binding, the blocks up to the last one present when what is sent stopped
/// starting with what was sent; without one, every block when the stack `edited` the
/// request (the blocks were bound to the client's history as it came), none otherwise.
pub(crate) fn keep_bound(req: &mut ChatRequest, previous: Option<Binding>, edited: bool) -> Kept {
    let mut h = StableHasher::new("llm-context/binding/v1");
    if let Some(prefix) = &req.prefix {
        prefix.hash_into(&mut h);
    }
    h.tools(&req.tools);
    let mut grew = previous.is_some_and(|p| p.messages == 0 && h.finish() == p.sent);
    for (i, m) in req.messages.iter().enumerate() {
        h.message_without_reasoning(m);
        if let Some(p) = previous
            && p.messages == i + 1
        {
            grew = h.finish() == p.sent;
        }
    }
    let sent = h.finish();
    let last = || {
        req.messages
            .iter()
            .rev()
            .flat_map(|m| m.reasoning().iter().rev())
            .find_map(block_id)
    };
    let through = match previous {
        Some(p) if grew => p.dropped_through,
        // What was sent changed (or shrank): every block present was bound to it.
        Some(_) => last(),
        None if edited => last(),
        None => None,
    };
    let dropped = through.map_or(0, |id| drop_through(req, id));
    Kept {
        binding: Binding {
            sent,
            messages: req.messages.len(),
            // A block no longer sent (pruned with its turn, or dropped by the client) needs
            // no remembering: every block present came after it.
            dropped_through: through.filter(|_| dropped > 0),
        },
        dropped,
    }
}

/// A thinking block's identity: a digest of its signature (or encrypted data).
fn block_id(r: &Reasoning) -> Option<u128> {
    let (kind, text) = match r {
        Reasoning::Thinking { signature, .. } => ("thinking", signature),
        Reasoning::RedactedThinking { data } => ("redacted", data),
        Reasoning::Text { .. } => return None,
    };
    let mut h = StableHasher::new("llm-context/thinking-block/v1");
    h.str(kind);
    h.str(text);
    Some(h.finish())
}

/// Removes every thinking block up to and including the one with identity `id`, when it
/// is present; the count removed.
fn drop_through(req: &mut ChatRequest, id: u128) -> usize {
    let Some(end) = req
        .messages
        .iter()
        .rposition(|m| m.reasoning().iter().any(|r| block_id(r) == Some(id)))
    else {
        return 0;
    };
    let mut dropped = 0;
    for (i, m) in req.messages[..=end].iter_mut().enumerate() {
        // Plain reasoning text binds nothing: a message with no block is left alone.
        if m.reasoning()
            .iter()
            .all(|r| matches!(r, Reasoning::Text { .. }))
        {
            continue;
        }
        let mut seen = false;
        let kept: Vec<Reasoning> = m
            .reasoning()
            .iter()
            .filter(|r| {
                let Some(this) = block_id(r) else {
                    return true;
                };
                // In the last message, the blocks after `id` were made after it.
                let drop = i < end || !seen;
                seen |= this == id;
                if drop {
                    dropped += 1;
                }
                !drop
            })
            .cloned()
            .collect();
        m.set_reasoning(kept);
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, ToolCall};

    fn thinking(sig: &str) -> Reasoning {
        Reasoning::Thinking {
            thinking: format!("thought {sig}"),
            signature: sig.into(),
        }
    }

    fn round(n: usize) -> [Message; 2] {
        [
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(
                    format!("c{n}"),
                    "run",
                    serde_json::json!({"n": n}),
                )],
            )
            .with_reasoning(vec![thinking(&format!("s{n}"))]),
            Message::tool_result(format!("c{n}"), "run", format!("result {n}")),
        ]
    }

    fn history(rounds: std::ops::Range<usize>) -> Vec<Message> {
        let mut m = vec![Message::user("go")];
        m.extend(rounds.flat_map(round));
        m
    }

    fn signatures(req: &ChatRequest) -> Vec<String> {
        req.messages
            .iter()
            .flat_map(|m| m.reasoning())
            .filter_map(|r| match r {
                Reasoning::Thinking { signature, .. } => Some(signature.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_history_that_only_grew_keeps_every_block() {
        let mut first = ChatRequest::new("m", history(0..2));
        let kept = keep_bound(&mut first, None, false);
        assert_eq!(kept.dropped, 0);
        let mut next = ChatRequest::new("m", history(0..3));
        let again = keep_bound(&mut next, Some(kept.binding), false);
        assert_eq!(again.dropped, 0);
        assert_eq!(signatures(&next), ["s0", "s1", "s2"]);
    }

    #[test]
    fn a_changed_prefix_drops_every_block_present_and_later_blocks_are_kept() {
        let mut first = ChatRequest::new("m", history(0..3));
        let kept = keep_bound(&mut first, None, false);
        // The stack pruned the first round: every block present was bound to it.
        let mut pruned = history(0..4);
        pruned.drain(1..3);
        let mut next = ChatRequest::new("m", pruned.clone());
        let after = keep_bound(&mut next, Some(kept.binding), true);
        assert_eq!(after.dropped, 3);
        assert!(signatures(&next).is_empty());
        // The model answers against the pruned history: its new block is kept, the old
        // ones stay out.
        pruned.extend(round(4));
        let mut later = ChatRequest::new("m", pruned);
        let last = keep_bound(&mut later, Some(after.binding), true);
        assert_eq!(last.dropped, 3);
        assert_eq!(signatures(&later), ["s4"]);
    }

    #[test]
    fn without_a_record_an_edited_request_drops_all_and_an_unedited_one_none() {
        let mut edited = ChatRequest::new("m", history(0..2));
        assert_eq!(keep_bound(&mut edited, None, true).dropped, 2);
        let mut unedited = ChatRequest::new("m", history(0..2));
        assert_eq!(keep_bound(&mut unedited, None, false).dropped, 0);
    }

    #[test]
    fn tools_that_change_are_a_changed_prefix() {
        let mut first = ChatRequest::new("m", history(0..2));
        let kept = keep_bound(&mut first, None, false);
        let mut next = ChatRequest::new("m", history(0..3));
        next.tools.push(crate::model::ToolSpec::new(
            "read",
            "reads",
            serde_json::json!({"type": "object"}),
        ));
        assert_eq!(keep_bound(&mut next, Some(kept.binding), false).dropped, 3);
    }

    #[test]
    fn a_dropped_block_no_longer_sent_is_forgotten() {
        let mut first = ChatRequest::new("m", history(0..2));
        let kept = keep_bound(&mut first, None, true);
        assert!(kept.binding.dropped_through.is_some());
        // The client left the dropped blocks out itself: the rest is what was sent.
        let mut next = ChatRequest::new("m", history(0..3));
        for m in &mut next.messages[..5] {
            m.set_reasoning(Vec::new());
        }
        let after = keep_bound(&mut next, Some(kept.binding), false);
        assert_eq!(after.dropped, 0);
        assert_eq!(after.binding.dropped_through, None);
        assert_eq!(signatures(&next), ["s2"]);
    }

    #[test]
    fn only_the_blocks_up_to_the_marked_one_go_in_its_message() {
        let mut m = history(0..1);
        m[1].set_reasoning(vec![thinking("a"), thinking("b")]);
        let mut req = ChatRequest::new("m", m);
        let id = block_id(&thinking("a")).unwrap();
        assert_eq!(drop_through(&mut req, id), 1);
        assert_eq!(signatures(&req), ["b"]);
    }
}
