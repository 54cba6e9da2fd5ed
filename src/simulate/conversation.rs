//! The conversation a simulation replays: the agent's whole transcript, its tools, and
//! where in it the agent calls the model.

use fastrand::Rng;

use llm_context_layers::{Message, Role, ToolCall, ToolSpec};

use super::content;

/// The most tool rounds in one generated turn.
pub const MAX_ROUNDS: usize = 8;

/// The chance that another tool round follows one (or the user's request), so that turns
/// have 0 to [`MAX_ROUNDS`] rounds, about 2.6 on average: with the call after the request,
/// about 3.6 calls a turn in per-round mode, as tool-heavy as the agent runs this
/// simulator was made for (200 turns, 715 calls).
pub const ANOTHER_ROUND: f64 = 0.74;

/// The most parallel tool calls in one round (each round has 1 to this many).
pub const MAX_PARALLEL_CALLS: usize = 4;

/// An agent's conversation: the transcript the agent keeps (all of it, whatever the stack
/// sends) and, per user turn, the points where it calls the model.
///
/// ```
/// use llm_context::simulate::Conversation;
///
/// let a = Conversation::generate(5, 7);
/// assert_eq!(a.turns(), 5);
/// assert_eq!(a.messages(), Conversation::generate(5, 7).messages()); // seeded
/// assert_ne!(a.messages(), Conversation::generate(5, 8).messages());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    /// Per turn, the length of the transcript at each of its calls in per-round mode, in
    /// order; the turn's last one is its call in per-turn mode.
    steps: Vec<Vec<usize>>,
}

impl Conversation {
    /// A realistic, tool-heavy agent conversation of `turns` user turns, the same for the
    /// same `seed`.
    ///
    /// A system prompt of about 6,000 tokens, seven tools, then per turn: the user's
    /// request; 0 to [`MAX_ROUNDS`] tool rounds (another follows with probability
    /// [`ANOTHER_ROUND`]), each an assistant message with 1 to [`MAX_PARALLEL_CALLS`]
    /// calls (JSON arguments, sometimes a sentence before them) and their results
    /// (source code, logs, grep output and JSON, with non-ASCII text; heavy-tailed sizes
    /// from a few hundred characters to about 30,000); then the final answer. The agent
    /// calls the model after the request and after each round's results.
    pub fn generate(turns: usize, seed: u64) -> Self {
        let mut rng = Rng::with_seed(seed);
        let mut messages = vec![Message::system(content::system_prompt())];
        let mut steps = Vec::with_capacity(turns);
        for _ in 0..turns {
            let mut turn = Vec::new();
            messages.push(Message::user(content::user_request(&mut rng)));
            turn.push(messages.len());
            let mut rounds = 0;
            while rounds < MAX_ROUNDS && rng.f64() < ANOTHER_ROUND {
                round(&mut rng, &mut messages);
                turn.push(messages.len());
                rounds += 1;
            }
            messages.push(Message::assistant(content::answer(&mut rng)));
            steps.push(turn);
        }
        Self {
            messages,
            tools: content::tools(),
            steps,
        }
    }

    /// A recorded transcript (an OpenAI Chat Completions body's `messages` and `tools`),
    /// replayed as the agent made it: a turn starts at each real user request (see
    /// [`Message::is_user_request`]); in per-round mode the agent calls the model before
    /// each assistant message (the call that produced it), in per-turn mode before each
    /// turn's last assistant message. A turn that ends without an answer (the end of the
    /// transcript, or a user request after another) gets one call at its end: the call
    /// the agent would make next.
    pub fn from_transcript(messages: Vec<Message>, tools: Vec<ToolSpec>) -> Self {
        let mut steps: Vec<Vec<usize>> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if m.is_user_request() {
                close_turn(&messages, i, &mut steps);
                steps.push(Vec::new());
            } else if m.role == Role::Assistant
                && let Some(turn) = steps.last_mut()
            {
                turn.push(i);
            }
        }
        close_turn(&messages, messages.len(), &mut steps);
        Self {
            messages,
            tools,
            steps,
        }
    }

    /// The whole transcript.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The tools the agent sends with every call.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The user turns.
    pub fn turns(&self) -> usize {
        self.steps.len()
    }

    /// The calls the agent makes, in order, as [`Simulation::run`](super::Simulation::run)
    /// makes them: each one's transcript length (it sends `messages()[..end]`) and when
    /// it is made, from the conversation's start. What replays the conversation against
    /// something else (a proxy, a provider) with the simulation's timing.
    ///
    /// ```
    /// use llm_context::simulate::{Calls, Conversation};
    ///
    /// let c = Conversation::generate(3, 1);
    /// let per_turn = c.calls(Calls::PerTurn);
    /// assert_eq!(per_turn.len(), 3);
    /// assert!(c.calls(Calls::PerRound).len() >= 3);
    /// assert!(per_turn.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    /// ```
    pub fn calls(&self, calls: super::Calls) -> Vec<(usize, std::time::Duration)> {
        super::run::schedule(self, calls)
    }

    /// Per turn, the transcript lengths of its calls in per-round mode.
    pub(super) fn steps(&self) -> &[Vec<usize>] {
        &self.steps
    }
}

/// Ends the open turn at `end` (the next turn's request, or the transcript's end): a turn
/// whose last message is not an assistant's has not been answered, so the agent's next
/// call is there.
fn close_turn(messages: &[Message], end: usize, steps: &mut [Vec<usize>]) {
    if let Some(turn) = steps.last_mut()
        && messages[end - 1].role != Role::Assistant
    {
        turn.push(end);
    }
}

/// One tool round: the assistant's calls, then their results.
fn round(rng: &mut Rng, messages: &mut Vec<Message>) {
    let calls: Vec<ToolCall> = (0..rng.usize(1..=MAX_PARALLEL_CALLS))
        .map(|_| {
            let name = content::TOOL_NAMES[rng.usize(..content::TOOL_NAMES.len())];
            ToolCall::new(content::call_id(rng), name, content::tool_args(rng, name))
        })
        .collect();
    let text = if rng.f64() < 0.3 {
        content::thought(rng)
    } else {
        ""
    };
    messages.push(Message::assistant_tool_calls(text, calls.clone()));
    for call in calls {
        let size = content::result_size(rng);
        let result = content::tool_result(rng, &call.name, size);
        messages.push(Message::tool_result(call.id, call.name, result));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_calls_before_each_answer() {
        let c = ToolCall::new("c1", "grep", serde_json::json!({}));
        let messages = vec![
            Message::system("be brief"),
            Message::user("one"),                             // 1
            Message::assistant_tool_calls("", vec![c]),       // 2
            Message::tool_result("c1", "grep", "found"),      // 3
            Message::assistant("done"),                       // 4
            Message::user("two"),                             // 5
            Message::user("unanswered, then answered later"), // 6
            Message::assistant("ok"),                         // 7
            Message::user("three"),                           // 8
        ];
        let conv = Conversation::from_transcript(messages, Vec::new());
        // Before each assistant message; a turn with none calls at its end.
        assert_eq!(conv.steps(), [vec![2, 4], vec![6], vec![7], vec![9]]);
        assert_eq!(conv.turns(), 4);
    }

    #[test]
    fn generated_turns_call_after_the_request_and_each_round() {
        let conv = Conversation::generate(30, 3);
        let m = conv.messages();
        for turn in conv.steps() {
            // After the request.
            assert!(m[turn[0] - 1].is_user_request());
            // After each round: the next message is a new round or the final answer.
            for &end in turn {
                assert_eq!(m[end].role, Role::Assistant);
            }
            assert!(turn.len() <= MAX_ROUNDS + 1);
        }
        let last = conv.steps().last().unwrap().last().unwrap();
        assert_eq!(*last, m.len() - 1, "the last answer ends the transcript");
    }
}
