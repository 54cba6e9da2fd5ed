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
/// up to the next real user request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Turn {
    /// The turn's messages.
    pub(crate) range: Span,
    /// Whether `range.start` is a real user request.
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
        let mut filling = Filling::new(self);
        for (i, m) in messages.iter().enumerate() {
            filling.feed(self, i, m);
        }
        filling.finish(self, messages.len());
    }
}

/// A [`Layout`] made one message at a time, in order ([`Layout::fill`] is made of it): one
/// state and a step, rather than nested walks, so that it can be fed from another pass.
struct Filling {
    /// Still among the leading system messages.
    head: bool,
    /// The open turn: where it starts, whether it opens with a request, its first unit.
    turn: Option<(usize, bool, usize)>,
    /// The open unit: where it starts, and whether it is a round (a call and its results).
    unit: Option<(usize, bool)>,
}

impl Filling {
    /// Starts `layout` again, empty.
    fn new(layout: &mut Layout) -> Self {
        layout.head_end = 0;
        layout.turns.clear();
        layout.units.clear();
        Self {
            head: true,
            turn: None,
            unit: None,
        }
    }

    /// Message `i` (every message before it was fed).
    #[inline]
    fn feed(&mut self, layout: &mut Layout, i: usize, m: &Message) {
        if self.head {
            if m.role == crate::Role::System {
                layout.head_end = i + 1;
                return;
            }
            self.head = false;
        }
        if m.is_user_request() {
            self.close_turn(layout, i);
            self.turn = Some((i, true, layout.units.len()));
            return;
        }
        // A round goes on while its results follow it.
        if matches!(self.unit, Some((_, true))) && m.is_tool_result() {
            return;
        }
        self.close_unit(layout, i);
        if self.turn.is_none() {
            self.turn = Some((i, false, layout.units.len()));
        }
        self.unit = Some((i, m.has_tool_calls()));
    }

    /// Ends the layout of `len` messages.
    fn finish(mut self, layout: &mut Layout, len: usize) {
        self.close_turn(layout, len);
    }

    #[inline]
    fn close_unit(&mut self, layout: &mut Layout, end: usize) {
        if let Some((start, is_round)) = self.unit.take() {
            layout.units.push(Unit {
                range: Span::new(start..end),
                is_round,
            });
        }
    }

    fn close_turn(&mut self, layout: &mut Layout, end: usize) {
        self.close_unit(layout, end);
        if let Some((start, has_request, first_unit)) = self.turn.take() {
            layout.turns.push(Turn {
                range: Span::new(start..end),
                has_request,
                units: Span::new(first_unit..layout.units.len()),
            });
        }
    }
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
    fn preamble_without_request_is_a_turn() {
        let msgs = vec![Message::assistant("hello"), Message::user("hi")];
        let layout = Layout::of(&msgs);
        assert_eq!(layout.head_end, 0);
        assert_eq!(layout.turns.len(), 2);
        assert!(!layout.turns[0].has_request);
    }

    /// The layout as it was made before it could be fed: nested walks over the messages.
    fn walked(messages: &[Message]) -> Layout {
        let mut layout = Layout {
            head_end: crate::model::leading_system_end(messages),
            ..Layout::default()
        };
        let (turns, units) = (&mut layout.turns, &mut layout.units);
        let mut i = layout.head_end;
        while i < messages.len() {
            let start = i;
            let has_request = messages[i].is_user_request();
            if has_request {
                i += 1;
            }
            let first_unit = units.len();
            while i < messages.len() && !messages[i].is_user_request() {
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
        layout
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
        fn the_fed_layout_is_the_walked_one(t in transcript()) {
            proptest::prop_assert_eq!(Layout::of(&t), walked(&t));
            // Filled again over an earlier layout, nothing of it is left.
            let mut again = walked(&[Message::user("old"), Message::assistant("old")]);
            again.fill(&t);
            proptest::prop_assert_eq!(again, walked(&t));
        }
    }

    #[test]
    fn a_turn_takes_twenty_bytes() {
        assert_eq!(size_of::<Turn>(), 20);
        assert_eq!(size_of::<Unit>(), 12);
    }
}
