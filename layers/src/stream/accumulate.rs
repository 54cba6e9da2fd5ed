//! Assembling the complete response from a stream's deltas.

use std::borrow::Cow;

use super::error::StreamError;
use super::event::{ReasoningDelta, StreamEvent, ToolCallDelta};
use crate::model::{ChatResponse, FinishReason, Message, Reasoning, ToolCall, Usage};

/// Builds the [`ChatResponse`] a stream's events add up to: the one place deltas become
/// a message, shared by both clients, the mock model and the stack.
///
/// ```
/// use llm_context_layers::stream::{Accumulator, StreamEvent, ToolCallDelta};
/// use llm_context_layers::FinishReason;
///
/// let mut acc = Accumulator::new();
/// acc.push(&StreamEvent::Text("Let me ".into())).unwrap();
/// acc.push(&StreamEvent::Text("look.".into())).unwrap();
/// acc.push(&StreamEvent::ToolCall(ToolCallDelta::new(0).with_id("c1").with_name("search"))).unwrap();
/// acc.push(&StreamEvent::ToolCall(ToolCallDelta::new(0).with_arguments(r#"{"q": "#))).unwrap();
/// acc.push(&StreamEvent::ToolCall(ToolCallDelta::new(0).with_arguments(r#""cert"}"#))).unwrap();
/// let response = acc.finish(Some(FinishReason::ToolCalls)).unwrap();
/// assert_eq!(response.message.text(), "Let me look.");
/// assert_eq!(response.message.tool_calls[0].arguments_value()["q"], "cert");
/// ```
#[derive(Clone, Debug, Default)]
pub struct Accumulator {
    text: String,
    reasoning: Vec<Block>,
    calls: Vec<Partial>,
    usage: Option<Usage>,
}

#[derive(Clone, Debug, Default)]
struct Block {
    kind: Option<Kind>,
    text: String,
    signature: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Thinking,
    Redacted,
    Text,
}

#[derive(Clone, Debug, Default)]
struct Partial {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

impl Accumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an event. A `Started`, `Wire` or `Done` event adds nothing (it is already the whole response). A
    /// reasoning delta of another kind than its block's is an error.
    pub fn push(&mut self, event: &StreamEvent) -> Result<(), StreamError> {
        match event {
            StreamEvent::Text(t) => self.text.push_str(t),
            StreamEvent::Reasoning { index, delta } => self.reason(*index, delta)?,
            StreamEvent::ToolCall(d) => self.call(d),
            StreamEvent::Usage(u) => self.usage = Some(*u),
            // The opening fields come again in the response; `Done` is the whole response;
            // a provider's own event is what the neutral ones beside it say.
            StreamEvent::Started(_) | StreamEvent::Done(_) | StreamEvent::Wire(_) => {}
        }
        Ok(())
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether any tool call has begun.
    pub fn has_tool_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    fn reason(&mut self, index: usize, delta: &ReasoningDelta) -> Result<(), StreamError> {
        if self.reasoning.len() <= index {
            self.reasoning.resize_with(index + 1, Block::default);
        }
        let block = &mut self.reasoning[index];
        let (kind, text, field) = match delta {
            ReasoningDelta::Thinking(t) => (Kind::Thinking, t, &mut block.text),
            ReasoningDelta::Signature(s) => (Kind::Thinking, s, &mut block.signature),
            ReasoningDelta::Redacted(d) => (Kind::Redacted, d, &mut block.text),
            ReasoningDelta::Text(t) => (Kind::Text, t, &mut block.text),
        };
        if block.kind.is_some_and(|k| k != kind) {
            return Err(StreamError::Inconsistent {
                what: format!("reasoning block {index} changed kind"),
            });
        }
        block.kind = Some(kind);
        field.push_str(text);
        Ok(())
    }

    fn call(&mut self, d: &ToolCallDelta) {
        if self.calls.len() <= d.index {
            self.calls.resize_with(d.index + 1, Partial::default);
        }
        let call = &mut self.calls[d.index];
        if let Some(id) = &d.id
            && !id.is_empty()
        {
            call.id = Some(id.clone());
        }
        if let Some(name) = &d.name
            && !name.is_empty()
        {
            call.name = Some(name.clone());
        }
        call.arguments.push_str(&d.arguments);
    }

    /// The response the events add up to, ending for `finish` (`None`: the reason its
    /// tool calls imply, as [`ChatResponse::new`] gives), with the last usage seen.
    /// Tool-call arguments are the text as it streamed (no text at all is `{}`), as the
    /// clients keep it. A tool call without an id or a
    /// name is an error: it could not be answered.
    pub fn finish(self, finish: Option<FinishReason>) -> Result<ChatResponse, StreamError> {
        let mut calls = Vec::with_capacity(self.calls.len());
        for (index, p) in self.calls.into_iter().enumerate() {
            let (Some(id), Some(name)) = (p.id, p.name) else {
                return Err(StreamError::Inconsistent {
                    what: format!("tool call {index} has no id or no name"),
                });
            };
            calls.push(ToolCall::from_text(id, name, arguments(p.arguments)));
        }
        let reasoning = self
            .reasoning
            .into_iter()
            .filter_map(|b| match b.kind? {
                Kind::Thinking => Some(Reasoning::Thinking {
                    thinking: b.text,
                    signature: b.signature,
                }),
                Kind::Redacted => Some(Reasoning::RedactedThinking { data: b.text }),
                Kind::Text => Some(Reasoning::Text { text: b.text }),
            })
            .collect();
        let message = if calls.is_empty() {
            Message::assistant(self.text)
        } else {
            Message::assistant_tool_calls(self.text, calls)
        }
        .with_reasoning(reasoning);
        let response = ChatResponse::new(message).with_usage(self.usage.unwrap_or_default());
        Ok(match finish {
            Some(finish) => response.with_finish_reason(finish),
            None => response,
        })
    }
}

/// Tool-call arguments from their streamed text, as the clients read them whole: the
/// text as it came, and a call streamed without arguments as an empty object.
fn arguments(text: String) -> String {
    if text.trim().is_empty() {
        "{}".to_owned()
    } else {
        text
    }
}

/// The events that stream `response` as deltas, in the order a provider sends them
/// (reasoning, text, tool calls, usage), without the final `Done`: what the mock model
/// and the memo's replay yield before it. Text is split at about `chunk` bytes (on
/// character boundaries), so a replay looks like a stream.
pub(crate) fn deltas(response: &ChatResponse, chunk: usize) -> Vec<StreamEvent> {
    let m = &response.message;
    let mut out = Vec::new();
    for (index, r) in m.reasoning().iter().enumerate() {
        let mut push = |delta| out.push(StreamEvent::Reasoning { index, delta });
        match r {
            Reasoning::Thinking {
                thinking,
                signature,
            } => {
                for piece in pieces(thinking, chunk) {
                    push(ReasoningDelta::Thinking(piece.to_owned()));
                }
                push(ReasoningDelta::Signature(signature.clone()));
            }
            Reasoning::RedactedThinking { data } => push(ReasoningDelta::Redacted(data.clone())),
            Reasoning::Text { text } => {
                for piece in pieces(text, chunk) {
                    push(ReasoningDelta::Text(piece.to_owned()));
                }
            }
        }
    }
    let text: Cow<'_, str> = m.text();
    for piece in pieces(&text, chunk) {
        out.push(StreamEvent::Text(piece.to_owned()));
    }
    for (index, call) in m.tool_calls.iter().enumerate() {
        out.push(StreamEvent::ToolCall(
            ToolCallDelta::new(index)
                .with_id(call.id.clone())
                .with_name(call.name.clone()),
        ));
        out.push(StreamEvent::ToolCall(
            ToolCallDelta::new(index).with_arguments(call.arguments.clone()),
        ));
    }
    out.push(StreamEvent::Usage(response.usage));
    out
}

/// `text` in pieces of about `chunk` bytes, each ending on a character boundary.
fn pieces(text: &str, chunk: usize) -> impl Iterator<Item = &str> {
    let chunk = chunk.max(1);
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = chunk.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assembled(response: &ChatResponse, chunk: usize) -> ChatResponse {
        let mut acc = Accumulator::new();
        for e in deltas(response, chunk) {
            acc.push(&e).unwrap();
        }
        acc.finish(Some(response.finish_reason.clone())).unwrap()
    }

    #[test]
    fn a_response_streamed_as_deltas_assembles_back_to_itself() {
        let message = Message::assistant_tool_calls(
            "Prüfe das Zertifikat — 証明書を確認します",
            vec![
                ToolCall::new("c1", "search", json!({"q": "cert", "n": [1, 2]})),
                ToolCall::new("c2", "noop", json!({})),
                ToolCall::from_text("c3", "raw", "not json"),
            ],
        )
        .with_reasoning(vec![
            Reasoning::Thinking {
                thinking: "Der Nutzer will… 考え中".into(),
                signature: "sig==".into(),
            },
            Reasoning::RedactedThinking {
                data: "EncryptedBlob".into(),
            },
        ]);
        let response = ChatResponse::new(message).with_usage(Usage::new(10, 5, 3, 2));
        for chunk in [1, 3, 7, 1000] {
            assert_eq!(assembled(&response, chunk), response, "chunk {chunk}");
        }
    }

    #[test]
    fn pieces_never_split_a_character() {
        let text = "aé証🦀b";
        for chunk in 1..8 {
            let parts: Vec<&str> = pieces(text, chunk).collect();
            assert_eq!(parts.concat(), text);
            assert!(parts.iter().all(|p| !p.is_empty()));
        }
    }

    #[test]
    fn a_tool_call_without_a_name_is_an_error() {
        let mut acc = Accumulator::new();
        acc.push(&StreamEvent::ToolCall(ToolCallDelta::new(0).with_id("c1")))
            .unwrap();
        let err = acc.finish(None).unwrap_err();
        assert!(err.to_string().contains("tool call 0"), "{err}");
    }

    #[test]
    fn a_reasoning_block_cannot_change_kind() {
        let mut acc = Accumulator::new();
        let thinking = ReasoningDelta::Thinking("a".into());
        acc.push(&StreamEvent::Reasoning {
            index: 0,
            delta: thinking,
        })
        .unwrap();
        let text = ReasoningDelta::Text("b".into());
        assert!(
            acc.push(&StreamEvent::Reasoning {
                index: 0,
                delta: text
            })
            .is_err()
        );
    }

    #[test]
    fn arguments_split_anywhere_parse_once_whole() {
        let args = r#"{"path": "src/main.rs", "lines": [1, 20]}"#;
        for split in 0..args.len() {
            let mut acc = Accumulator::new();
            let first = ToolCallDelta::new(0).with_id("c").with_name("read");
            acc.push(&StreamEvent::ToolCall(first.with_arguments(&args[..split])))
                .unwrap();
            acc.push(&StreamEvent::ToolCall(
                ToolCallDelta::new(0).with_arguments(&args[split..]),
            ))
            .unwrap();
            let r = acc.finish(None).unwrap();
            assert_eq!(
                r.finish_reason,
                FinishReason::ToolCalls,
                "implied by the call"
            );
            assert_eq!(r.message.tool_calls[0].arguments_value()["lines"][1], 20);
        }
    }

    #[test]
    fn the_last_usage_is_the_total() {
        let mut acc = Accumulator::new();
        acc.push(&StreamEvent::Usage(Usage::new(100, 1, 0, 0)))
            .unwrap();
        acc.push(&StreamEvent::Usage(Usage::new(100, 42, 0, 0)))
            .unwrap();
        let r = acc.finish(None).unwrap();
        assert_eq!(r.usage.output_tokens, 42);
    }
}
