//! Where a fold may end: right before a real user request, with every tool call of the
//! folded span answered inside it.

use std::collections::HashMap;
use std::ops::Range;

use crate::model::Message;

/// Where foldable history starts: after the leading system messages (the prefix part of
/// the tail, and any summary block already there).
pub fn fold_start(messages: &[Message]) -> usize {
    crate::model::leading_system_end(messages)
}

/// Every index `end` at which `messages[start..end]` may be folded, ascending.
///
/// `end` is a fold point when `messages[end]` is a real user request
/// ([`Message::is_user_request`]) and the cut separates no tool call from any of its
/// results, in either direction, and the span holds no call that was never answered.
/// One linear pass: each call id's first and last appearance is a range the cut may not
/// fall inside.
///
/// ```
/// use llm_context_layers::summarize::fold_points;
/// use llm_context_layers::{Message, ToolCall};
/// use serde_json::json;
///
/// let call = |id: &str| Message::assistant_tool_calls("", vec![ToolCall::new(id, "t", json!({}))]);
/// let messages = vec![
///     Message::user("a"), call("c1"), Message::tool_result("c1", "t", "ok"),
///     Message::user("b"), call("c2"),            // c2 is never answered
///     Message::user("c"), Message::assistant("done"),
/// ];
/// assert_eq!(fold_points(&messages, 0), vec![3]);
/// ```
pub fn fold_points(messages: &[Message], start: usize) -> Vec<usize> {
    let start = start.min(messages.len());
    // For each id: first and last index it appears at (call or result), whether it was
    // called in the span and whether it was answered.
    struct Seen {
        first: usize,
        last: usize,
        called: bool,
        answered: bool,
    }
    let unseen = |i: usize| Seen {
        first: i,
        last: i,
        called: false,
        answered: false,
    };
    let mut ids: HashMap<&str, Seen> = HashMap::new();
    for (i, m) in messages.iter().enumerate().skip(start) {
        for call in &m.tool_calls {
            let seen = ids.entry(call.id.as_str()).or_insert_with(|| unseen(i));
            seen.last = i;
            seen.called = true;
        }
        if m.is_tool_result()
            && let Some(id) = m.tool_call_id.as_deref()
        {
            let seen = ids.entry(id).or_insert_with(|| unseen(i));
            seen.last = i;
            seen.answered = true;
        }
    }
    // blocked[b] > 0: some id appears both before b and at or after b.
    let mut delta = vec![0i64; messages.len() + 2];
    // No cut may pass the first call that is never answered.
    let mut first_unanswered = usize::MAX;
    for seen in ids.values() {
        if seen.last > seen.first {
            delta[seen.first + 1] += 1;
            delta[seen.last + 1] -= 1;
        }
        if seen.called && !seen.answered {
            first_unanswered = first_unanswered.min(seen.first);
        }
    }
    let mut out = Vec::new();
    let mut blocked = 0i64;
    for (b, d) in delta.iter().enumerate().take(messages.len()) {
        blocked += d;
        if b > start && b <= first_unanswered && blocked == 0 && messages[b].is_user_request() {
            out.push(b);
        }
    }
    out
}

/// The fold `keep_last` asks for: from [`fold_start`] to the latest fold point that
/// leaves at least `keep_last` messages verbatim (so the kept part is rounded up to whole
/// turns), or `None` when no such point exists.
pub fn plan_fold(messages: &[Message], keep_last: usize) -> Option<Range<usize>> {
    let start = fold_start(messages);
    let latest = messages.len().checked_sub(keep_last)?;
    fold_points(messages, start)
        .into_iter()
        .rev()
        .find(|&end| end <= latest)
        .map(|end| start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use serde_json::json;

    fn call(id: &str) -> Message {
        Message::assistant_tool_calls("", vec![ToolCall::new(id, "t", json!({}))])
    }

    #[test]
    fn a_result_sent_after_a_user_request_blocks_the_cut_between() {
        let messages = vec![
            Message::user("a"),
            call("c1"),
            Message::user("b"),
            Message::tool_result("c1", "t", "late"),
            Message::user("c"),
        ];
        // Cutting at 2 would separate c1 from its late result.
        assert_eq!(fold_points(&messages, 0), vec![4]);
    }

    #[test]
    fn keep_last_rounds_up_to_whole_turns() {
        let messages = vec![
            Message::system("rules"),
            Message::user("1"),
            Message::assistant("a"),
            Message::user("2"),
            Message::assistant("b"),
            Message::user("3"),
            Message::assistant("c"),
        ];
        // keep_last 3 lands inside turn 2 (index 4): the whole turn 2 stays.
        assert_eq!(plan_fold(&messages, 3), Some(1..3));
        assert_eq!(plan_fold(&messages, 2), Some(1..5));
        assert_eq!(plan_fold(&messages, 6), None);
        assert_eq!(plan_fold(&messages, 0), Some(1..5));
    }
}
