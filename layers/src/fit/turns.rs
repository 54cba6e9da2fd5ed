//! Segmenting a transcript into turns and rounds, by meaning rather than by role alone.

use std::ops::Range;

use crate::model::Message;

/// A range of indices kept in 8 bytes rather than 16: a layout holds one [`Turn`] for
/// every user request, and a transcript of a million short messages would spend 40 MB
/// on turns of `usize` ranges against 20 MB of these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// The span of `range`.
    ///
    /// A transcript's indices always fit: 2³² messages would take over 400 GiB as
    /// [`Message`]s before any layout was made of them.
    pub(crate) fn new(range: Range<usize>) -> Self {
        let index = |i: usize| u32::try_from(i).expect("a transcript of under 2^32 messages");
        Self {
            start: index(range.start),
            end: index(range.end),
        }
    }

    /// The first index.
    pub(crate) fn start(self) -> usize {
        self.start as usize
    }

    /// The indices, as a `Range`.
    pub(crate) fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// A unit of a turn that moves as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unit {
    /// The messages of the unit.
    pub(crate) range: Span,
    /// An assistant tool-call message and the results that follow it.
    pub(crate) is_round: bool,
}

/// A turn: a real user request (absent for a preamble before the first one) and the units
/// up to the next real user request. System messages right before a request (Claude
/// Code's mid-conversation reminders) lead into it: they open its turn, so that they are
/// kept, and pruned, with the request they speak to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Turn {
    /// The turn's messages.
    pub(crate) range: Span,
    /// Whether the turn holds a real user request: at `range.start`, or after the system
    /// messages that lead into it.
    pub(crate) has_request: bool,
    /// The turn's units, as a range of [`Layout::units`].
    pub(crate) units: Span,
}

/// The layout of a transcript.
///
/// Units live in one flat list that turns index into, rather than a list per turn: a
/// 10,000-message transcript has thousands of turns, and a separate allocation for each
/// would be made and freed on every request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `messages[..head_end]` are the system messages before anything else.
    pub(crate) head_end: usize,
    pub(crate) turns: Vec<Turn>,
    /// Every turn's units, in order.
    pub(crate) units: Vec<Unit>,
}

impl Layout {
    /// One pass over the messages.
    ///
    /// A turn starts only at a real user request ([`Message::is_user_request`]): tool
    /// results sent with role `user` do not open one. Inside a turn, an assistant message
    /// with tool calls and every tool result right after it form one round, so a call and
    /// its results always move together.
    pub(crate) fn of(messages: &[Message]) -> Self {
        let mut layout = Layout::default();
        layout.fill(messages);
        layout
    }

    /// [`Layout::of`] into this layout's lists, reusing their memory.
    pub(crate) fn fill(&mut self, messages: &[Message]) {
        let (turns, units) = (&mut self.turns, &mut self.units);
        turns.clear();
        units.clear();
        self.head_end = crate::model::leading_system_end(messages);
        let mut i = self.head_end;
        while i < messages.len() {
            let start = i;
            let lead = leading_into_request(&messages[i..]);
            let has_request = lead.is_some();
            if let Some(lead) = lead {
                i += lead + 1;
            }
            let first_unit = units.len();
            // The end of a run of system messages known to lead into no request: each is
            // looked at once, however long the run.
            let mut leads_nowhere = i;
            while i < messages.len() && !messages[i].is_user_request() {
                if i >= leads_nowhere && messages[i].role == crate::model::Role::System {
                    match leading_into_request(&messages[i..]) {
                        // System messages that lead into the next request open its turn.
                        Some(_) => break,
                        None => leads_nowhere = i + system_run(&messages[i..]),
                    }
                }
                let unit_start = i;
                let is_round = messages[i].has_tool_calls();
                i += 1;
                if is_round {
                    while i < messages.len() && messages[i].is_tool_result() {
                        i += 1;
                    }
                }
                units.push(Unit {
                    range: Span::new(unit_start..i),
                    is_round,
                });
            }
            turns.push(Turn {
                range: Span::new(start..i),
                has_request,
                units: Span::new(first_unit..units.len()),
            });
        }
    }
}

/// When `messages` opens with a real user request after system messages only, how many
/// system messages come before it.
fn leading_into_request(messages: &[Message]) -> Option<usize> {
    let lead = system_run(messages);
    messages
        .get(lead)
        .is_some_and(Message::is_user_request)
        .then_some(lead)
}

/// How many system messages `messages` opens with.
fn system_run(messages: &[Message]) -> usize {
    messages
        .iter()
        .take_while(|m| m.role == crate::model::Role::System)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, ToolCall};
    use serde_json::json;

    #[test]
    fn user_role_tool_results_do_not_open_turns() {
        let call = ToolCall::new("c1", "search", json!({}));
        let msgs = vec![
            Message::system("rules"),
            Message::user("find it"),
            Message::assistant_tool_calls("", vec![call]),
            // Anthropic sends results with role user.
            Message::user("result").with_tool_call_id("c1"),
            Message::assistant("found"),
            Message::user("thanks"),
        ];
        let layout = Layout::of(&msgs);
        assert_eq!(layout.head_end, 1);
        assert_eq!(layout.turns.len(), 2);
        assert_eq!(layout.turns[0].range.range(), 1..5);
        assert_eq!(
            layout.units[layout.turns[0].units.range()],
            [
                Unit {
                    range: Span::new(2..4),
                    is_round: true
                },
                Unit {
                    range: Span::new(4..5),
                    is_round: false
                }
            ]
        );
        assert_eq!(layout.turns[1].range.range(), 5..6);
    }

    #[test]
    fn system_messages_right_before_a_request_open_its_turn() {
        // Claude Code's shape: a reminder before the request it speaks to.
        let msgs = vec![
            Message::system("You are Claude Code."),
            Message::user("Fix the test."),
            Message::assistant("Done."),
            Message::system("<system-reminder>Todo list is empty.</system-reminder>"),
            Message::system("<system-reminder>A file changed.</system-reminder>"),
            Message::user("Und schnell."),
            Message::assistant("Gut."),
            // One that leads into no request stays in its turn.
            Message::system("<system-reminder>Nothing follows.</system-reminder>"),
        ];
        let layout = Layout::of(&msgs);
        assert_eq!(layout.head_end, 1);
        let ranges: Vec<_> = layout.turns.iter().map(|t| t.range.range()).collect();
        assert_eq!(ranges, [1..3, 3..8]);
        assert!(layout.turns.iter().all(|t| t.has_request));
        assert_eq!(
            layout.units[layout.turns[1].units.range()]
                .iter()
                .map(|u| u.range.range())
                .collect::<Vec<_>>(),
            [6..7, 7..8]
        );
    }

    #[test]
    fn preamble_without_request_is_a_turn() {
        let msgs = vec![Message::assistant("hello"), Message::user("hi")];
        let layout = Layout::of(&msgs);
        assert_eq!(layout.head_end, 0);
        assert_eq!(layout.turns.len(), 2);
        assert!(!layout.turns[0].has_request);
    }

    /// Any sequence of the roles and shapes that lay a transcript out.
    fn transcript() -> impl proptest::strategy::Strategy<Value = Vec<Message>> {
        use proptest::prelude::*;
        let message = prop_oneof![
            Just(Message::system("s")),
            Just(Message::user("u")),
            Just(Message::assistant("a")),
            Just(Message::assistant_tool_calls(
                "",
                vec![ToolCall::new("c", "t", json!({}))]
            )),
            Just(Message::tool_result("c", "t", "r")),
            Just(Message::new(crate::Role::Tool, "no id")),
            // Anthropic's results come with role user.
            Just(Message::user("r").with_tool_call_id("c")),
        ];
        proptest::collection::vec(message, 0..16)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        #[test]
        fn the_layout_is_what_its_rules_say(t in transcript()) {
            let layout = Layout::of(&t);
            proptest::prop_assert_eq!(layout.head_end, crate::model::leading_system_end(&t));
            // The turns cover everything after the head, in order, with no gap.
            let mut next = layout.head_end;
            let mut next_unit = 0;
            for turn in &layout.turns {
                let range = turn.range.range();
                proptest::prop_assert_eq!(range.start, next);
                proptest::prop_assert!(range.start < range.end);
                next = range.end;
                // A turn opens with a request when it has one, after the system messages
                // leading into it, and holds no other.
                let lead = t[range.clone()]
                    .iter()
                    .take_while(|m| m.role == crate::model::Role::System)
                    .count();
                let request = range.start + lead;
                proptest::prop_assert_eq!(
                    turn.has_request,
                    request < range.end && t[request].is_user_request()
                );
                if !turn.has_request {
                    proptest::prop_assert_eq!(lead, 0);
                }
                // No system message leading into the next request is left behind.
                if range.end < t.len() && t[range.end].is_user_request() {
                    proptest::prop_assert!(t[range.end - 1].role != crate::model::Role::System);
                }
                let body = if turn.has_request { request + 1 } else { range.start }..range.end;
                proptest::prop_assert!(t[body.clone()].iter().all(|m| !m.is_user_request()));
                // Its units cover the rest of it, in order, with no gap.
                let units = turn.units.range();
                proptest::prop_assert_eq!(units.start, next_unit);
                next_unit = units.end;
                let mut at = body.start;
                for unit in &layout.units[units] {
                    let r = unit.range.range();
                    proptest::prop_assert_eq!(r.start, at);
                    at = r.end;
                    // A round is a call and every result right after it; anything else
                    // is one message.
                    proptest::prop_assert_eq!(unit.is_round, t[r.start].has_tool_calls());
                    if unit.is_round {
                        proptest::prop_assert!(t[r.start + 1..r.end].iter().all(Message::is_tool_result));
                        proptest::prop_assert!(r.end == body.end || !t[r.end].is_tool_result());
                    } else {
                        proptest::prop_assert_eq!(r.len(), 1);
                    }
                }
                proptest::prop_assert_eq!(at, body.end);
            }
            proptest::prop_assert_eq!(next, t.len());
            proptest::prop_assert_eq!(next_unit, layout.units.len());
            // Filled again over an earlier layout, nothing of it is left.
            let mut again = Layout::of(&[Message::user("old"), Message::assistant("old")]);
            again.fill(&t);
            proptest::prop_assert_eq!(again, layout);
        }
    }

    #[test]
    fn a_turn_takes_twenty_bytes() {
        assert_eq!(size_of::<Turn>(), 20);
        assert_eq!(size_of::<Unit>(), 12);
    }
}
