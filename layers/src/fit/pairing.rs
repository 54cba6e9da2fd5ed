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
    let mut pairs = Pairs::default();
    for i in 0..messages.len() {
        if !pairs.step(messages, i, &mut flaw) {
            return;
        }
    }
    pairs.end_run(messages, messages.len(), &mut flaw);
}

/// The pairing check fed one message at a time, in order: [`walk`] is made of it, and the
/// planner feeds it each message while it measures it ([`Pairs::feed`]): the ids are
/// loaded then anyway, where a pass of its own over 10,000 messages loaded each of them
/// again.
#[derive(Default)]
pub(crate) struct Pairs {
    /// The assistant message whose results are being read, and which of its calls have
    /// one so far.
    run: Option<(usize, Answered)>,
    /// Whether [`Pairs::feed`] found a flaw (it then stops looking).
    flawed: bool,
}

impl Pairs {
    /// Feeds message `i` of `messages` (every message before it was fed); `false` when
    /// `flaw` asked to stop.
    #[inline]
    fn step(
        &mut self,
        messages: &[Message],
        i: usize,
        flaw: &mut impl FnMut(Flaw) -> bool,
    ) -> bool {
        let m = &messages[i];
        if m.is_tool_result() {
            let answers = self.run.as_mut().and_then(|(assistant, answered)| {
                let id = m.tool_call_id.as_deref()?;
                let calls = &messages[*assistant].tool_calls;
                let call = calls.iter().position(|c| c.id == id)?;
                // A second answer to one call is an orphan too.
                (!answered.get(call)).then(|| answered.set(call))
            });
            // No id, no assistant message right before its run, or another message's call.
            return answers.is_some() || flaw(Flaw::Orphan(i));
        }
        if !self.end_run(messages, i, flaw) {
            return false;
        }
        if m.has_tool_calls() {
            self.run = Some((i, Answered::new(m.tool_calls.len())));
        }
        true
    }

    /// Ends the run of results being read, if any, before message `before` (the length of
    /// `messages` at the end): its calls without a result are flaws. `false` when `flaw`
    /// asked to stop.
    fn end_run(
        &mut self,
        messages: &[Message],
        before: usize,
        flaw: &mut impl FnMut(Flaw) -> bool,
    ) -> bool {
        let Some((assistant, answered)) = self.run.take() else {
            return true;
        };
        (0..messages[assistant].tool_calls.len())
            .filter(|&call| !answered.get(call))
            .all(|call| {
                flaw(Flaw::Unanswered {
                    before,
                    assistant,
                    call,
                })
            })
    }

    /// Feeds message `i` (every message before it was fed), noting only whether anything
    /// is wrong; after the first flaw it does nothing.
    #[inline]
    pub(crate) fn feed(&mut self, messages: &[Message], i: usize) {
        if !self.flawed {
            self.flawed = !self.step(messages, i, &mut |_| false);
        }
    }

    /// Whether the `messages` fed pair up.
    pub(crate) fn pair_up(mut self, messages: &[Message]) -> bool {
        !self.flawed && self.end_run(messages, messages.len(), &mut |_| false)
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

    /// Transcripts of users, assistants making zero to three calls, and results, with ids
    /// from a small pool: most pair up by chance only now and then.
    fn transcript() -> impl proptest::strategy::Strategy<Value = Vec<Message>> {
        use proptest::prelude::*;
        let id = proptest::sample::select(vec!["a", "b", "c"]);
        let message = prop_oneof![
            1 => Just(Message::user("u")),
            1 => Just(Message::assistant("done")),
            2 => proptest::collection::vec(id.clone(), 1..4).prop_map(|ids| {
                Message::assistant_tool_calls("", ids.into_iter().map(call).collect())
            }),
            4 => id.prop_map(result),
            1 => Just(Message::new(Role::Tool, "no id")),
        ];
        proptest::collection::vec(message, 0..12)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn the_planners_check_agrees_with_the_walk(t in transcript()) {
            // What the planner feeds message by message says what `check` and `repair` say.
            let mut pairs = Pairs::default();
            for i in 0..t.len() {
                pairs.feed(&t, i);
            }
            let fed = pairs.pair_up(&t);
            proptest::prop_assert_eq!(fed, check(&t).is_ok());
            proptest::prop_assert_eq!(fed, repair(&mut t.clone()).is_none());
        }
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
