//! Tool-call pairing: every call answered right after it, every result answering a call.
//!
//! Providers refuse a transcript where an assistant's tool call has no result before the
//! next message, or where a result answers no call (OpenAI and Anthropic both answer
//! 400). Agents produce such transcripts after a crash, an interrupted tool or a
//! hand-edited history. The stack repairs them before planning, by default, and says so
//! in [`PreparationReport::repaired`](crate::PreparationReport::repaired):
//!
//! - a call with no result gets a synthetic result saying that none was recorded, placed
//!   with the call's other results;
//! - a result that answers no call of the assistant message right before it (an orphan, a
//!   duplicate, or one separated from its call by another message) is dropped.
//!
//! Nothing else is moved or rewritten. With `repair_pairing = false` in the
//! [`ContextPolicy`](crate::ContextPolicy) the request is refused instead with a
//! [`PairingError`], before anything is sent.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicyLayer, ContextPolicy, Message, ToolCall};
//! use serde_json::json;
//! use tower::{Layer, ServiceExt};
//!
//! # tokio_test::block_on(async {
//! let interrupted = vec![
//!     Message::user("list the files"),
//!     Message::assistant_tool_calls("", vec![ToolCall::new("c1", "ls", json!({}))]),
//!     // The tool never answered; the user asked again.
//!     Message::user("hello?"),
//! ];
//! let model = MockModel::echo();
//! let stack = ContextPolicyLayer::new(ContextPolicy::default()).unwrap().layer(model.clone());
//! let reply = stack.oneshot(ChatRequest::new("m", interrupted)).await.unwrap();
//! assert_eq!(reply.report.repaired, 1);
//! let sent = model.last_request().unwrap();
//! assert_eq!(sent.messages[2].tool_call_id.as_deref(), Some("c1"));
//! assert_eq!(sent.messages.len(), 4);
//! # });
//! ```

use crate::model::Message;
use crate::tokens::MessageSize;

/// What a synthetic result for a call without one says.
pub const NO_RESULT_RECORDED: &str = "No result was recorded for this tool call: the call was \
interrupted or its result was lost. Call the tool again if you need its result.";

/// A request whose tool calls and results do not pair up, refused because the policy
/// says `repair_pairing = false`. Returned before the inner service is called.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PairingError {
    /// An assistant's tool call has no result before the next message.
    #[error(
        "tool pairing: call `{call_id}` of the assistant message at index {index} has no result \
         right after it (set repair_pairing = true to add one saying none was recorded)"
    )]
    Unanswered {
        /// The assistant message's index in the request's messages.
        index: usize,
        /// The call's id.
        call_id: String,
    },
    /// A tool result answers no call of the assistant message right before it.
    #[error(
        "tool pairing: the tool result at index {index} (tool_call_id {call_id:?}) answers no call \
         right before it (set repair_pairing = true to drop it)"
    )]
    Orphan {
        /// The result's index in the request's messages.
        index: usize,
        /// The id it names, if any.
        call_id: Option<String>,
    },
}

/// One thing wrong, as found in order.
enum Flaw {
    /// Drop the result at this index.
    Orphan(usize),
    /// Before the message at `before` (or at the end), add a result for call `call` of
    /// the assistant message at `assistant`.
    Unanswered {
        before: usize,
        assistant: usize,
        call: usize,
    },
}

/// Walks the transcript once and calls `flaw` for each thing wrong, in order; stops early
/// when `flaw` returns `false`. Allocates nothing unless an assistant message makes more
/// than 64 calls.
fn walk(messages: &[Message], mut flaw: impl FnMut(Flaw) -> bool) {
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m.is_tool_result() {
            // A result with no assistant message right before its run.
            if !flaw(Flaw::Orphan(i)) {
                return;
            }
            i += 1;
            continue;
        }
        i += 1;
        if !m.has_tool_calls() {
            continue;
        }
        let assistant = i - 1;
        let calls = &m.tool_calls;
        let mut answered = Answered::new(calls.len());
        while i < messages.len() && messages[i].is_tool_result() {
            let id = messages[i].tool_call_id.as_deref();
            let call = id.and_then(|id| calls.iter().position(|c| c.id == id));
            match call {
                Some(c) if !answered.get(c) => answered.set(c),
                // No id, another message's call, or a second answer to one call.
                _ => {
                    if !flaw(Flaw::Orphan(i)) {
                        return;
                    }
                }
            }
            i += 1;
        }
        for call in 0..calls.len() {
            if !answered.get(call)
                && !flaw(Flaw::Unanswered {
                    before: i,
                    assistant,
                    call,
                })
            {
                return;
            }
        }
    }
}

/// Which calls of one assistant message have a result.
enum Answered {
    Few(u64),
    Many(Vec<bool>),
}

impl Answered {
    fn new(calls: usize) -> Self {
        if calls <= 64 {
            Self::Few(0)
        } else {
            Self::Many(vec![false; calls])
        }
    }

    fn get(&self, call: usize) -> bool {
        match self {
            Self::Few(bits) => bits & (1 << call) != 0,
            Self::Many(v) => v[call],
        }
    }

    fn set(&mut self, call: usize) {
        match self {
            Self::Few(bits) => *bits |= 1 << call,
            Self::Many(v) => v[call] = true,
        }
    }
}

/// `Ok` when every call and result pair up, else the first [`PairingError`].
pub(crate) fn check(messages: &[Message]) -> Result<(), PairingError> {
    let mut first = None;
    walk(messages, |flaw| {
        first = Some(match flaw {
            Flaw::Orphan(index) => PairingError::Orphan {
                index,
                call_id: messages[index].tool_call_id.as_deref().map(str::to_owned),
            },
            Flaw::Unanswered {
                assistant, call, ..
            } => PairingError::Unanswered {
                index: assistant,
                call_id: messages[assistant].tool_calls[call].id.clone(),
            },
        });
        false
    });
    first.map_or(Ok(()), Err)
}

/// What a repair changed.
#[derive(Debug, Default)]
pub(crate) struct Repaired {
    /// Results added plus results dropped.
    pub(crate) count: usize,
    /// The estimated tokens of the dropped results, and of the added ones.
    pub(crate) dropped_tokens: usize,
    pub(crate) added_tokens: usize,
    /// For each repaired message, its index in the messages as received (`None` for an
    /// added one).
    pub(crate) origin: Vec<Option<usize>>,
    /// How many messages were received.
    pub(crate) received: usize,
}

impl Repaired {
    /// The index in the messages as received of repaired message `index`, or of the next
    /// received message when it is an added one.
    pub(crate) fn received_index(&self, index: usize) -> usize {
        self.origin[index..]
            .iter()
            .find_map(|o| *o)
            .unwrap_or(self.received)
    }
}

/// Repairs the pairing in place and says what changed, or `None` when the transcript
/// pairs up (then it is only read).
pub(crate) fn repair(messages: &mut Vec<Message>) -> Option<Repaired> {
    // In the order found, which is the order of positions: a run's orphans, then the
    // results its calls lack, which go where the run ends.
    let mut orphans = Vec::new();
    let mut added: Vec<(usize, Message)> = Vec::new();
    walk(messages, |flaw| {
        match flaw {
            Flaw::Orphan(at) => orphans.push(at),
            Flaw::Unanswered {
                before,
                assistant,
                call,
            } => {
                let c = &messages[assistant].tool_calls[call];
                let result =
                    Message::tool_result(c.id.as_str(), c.name.as_str(), NO_RESULT_RECORDED);
                added.push((before, result));
            }
        }
        true
    });
    if orphans.is_empty() && added.is_empty() {
        return None;
    }
    let tokens = |m: &Message| MessageSize::of(m).tokens();
    let mut repaired = Repaired {
        count: orphans.len() + added.len(),
        dropped_tokens: orphans.iter().map(|&i| tokens(&messages[i])).sum(),
        added_tokens: added.iter().map(|(_, m)| tokens(m)).sum(),
        origin: Vec::with_capacity(messages.len() + added.len()),
        received: messages.len(),
    };
    let old = std::mem::take(messages);
    let mut out = Vec::with_capacity(old.len() + added.len());
    let mut orphans = orphans.into_iter().peekable();
    let mut added = added.into_iter().peekable();
    for (i, m) in old.into_iter().enumerate() {
        while let Some((_, result)) = added.next_if(|(before, _)| *before == i) {
            out.push(result);
            repaired.origin.push(None);
        }
        if orphans.next_if_eq(&i).is_none() {
            out.push(m);
            repaired.origin.push(Some(i));
        }
    }
    for (_, result) in added {
        out.push(result);
        repaired.origin.push(None);
    }
    *messages = out;
    Some(repaired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Role, ToolCall};
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "t", json!({}))
    }

    fn result(id: &str) -> Message {
        Message::tool_result(id, "t", "r")
    }

    fn ids(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match (&m.tool_call_id, m.has_tool_calls()) {
                (Some(id), _) if m.content.as_str() == Some(NO_RESULT_RECORDED) => {
                    format!("synthetic:{id}")
                }
                (Some(id), _) => format!("result:{id}"),
                (None, true) => "calls".into(),
                (None, false) => format!("{:?}", m.role).to_lowercase(),
            })
            .collect()
    }

    #[test]
    fn a_paired_transcript_is_left_alone() {
        let mut t = vec![
            Message::user("u"),
            Message::assistant_tool_calls("", vec![call("a"), call("b")]),
            result("b"),
            result("a"),
            Message::assistant("done"),
        ];
        let before = t.clone();
        assert!(repair(&mut t).is_none());
        assert_eq!(t, before);
        assert_eq!(check(&t), Ok(()));
    }

    #[test]
    fn unanswered_calls_get_a_result_where_their_run_ends() {
        let mut t = vec![
            Message::user("u"),
            Message::assistant_tool_calls("", vec![call("a"), call("b"), call("c")]),
            result("b"),
            Message::user("again"),
            Message::assistant_tool_calls("", vec![call("d")]),
        ];
        assert!(matches!(
            check(&t),
            Err(PairingError::Unanswered { index: 1, ref call_id }) if call_id == "a"
        ));
        let r = repair(&mut t).unwrap();
        assert_eq!(r.count, 3);
        assert_eq!(
            r.origin,
            [
                Some(0),
                Some(1),
                Some(2),
                None,
                None,
                Some(3),
                Some(4),
                None
            ]
        );
        assert_eq!(r.received_index(3), 3);
        assert_eq!(
            ids(&t),
            [
                "user",
                "calls",
                "result:b",
                "synthetic:a",
                "synthetic:c",
                "user",
                "calls",
                "synthetic:d"
            ]
        );
        assert_eq!(t[3].name(), Some("t"));
        assert_eq!(check(&t), Ok(()));
    }

    #[test]
    fn orphans_duplicates_and_strays_are_dropped() {
        let mut t = vec![
            result("before-anything"),
            Message::user("u"),
            Message::assistant_tool_calls("", vec![call("a")]),
            result("a"),
            result("a"),     // a second answer
            result("other"), // another message's call
            Message::assistant("text"),
            result("a"), // separated from its call
            Message::new(Role::Tool, "no id at all"),
        ];
        assert!(matches!(
            check(&t),
            Err(PairingError::Orphan { index: 0, .. })
        ));
        let r = repair(&mut t).unwrap();
        assert_eq!(r.count, 5);
        assert_eq!(r.origin, [Some(1), Some(2), Some(3), Some(6)]);
        assert_eq!(r.received_index(1), 2);
        assert_eq!(ids(&t), ["user", "calls", "result:a", "assistant"]);
    }

    #[test]
    fn more_than_64_calls_are_tracked() {
        let calls: Vec<ToolCall> = (0..70).map(|i| call(&format!("c{i}"))).collect();
        let mut t = vec![Message::user("u"), Message::assistant_tool_calls("", calls)];
        t.extend(
            (0..70)
                .filter(|i| i % 7 != 0)
                .map(|i| result(&format!("c{i}"))),
        );
        assert_eq!(repair(&mut t).unwrap().count, 10);
        assert_eq!(t.len(), 2 + 70);
        assert_eq!(check(&t), Ok(()));
    }
}
