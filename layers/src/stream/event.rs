//! The provider-neutral events of a streamed call.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{ChatResponse, Usage, WireFormat};

/// What a streamed call yields, in order: deltas as the model writes, usage, and last
/// the complete response ([`StreamEvent::Done`]). Nothing follows `Done`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// The answer's top-level fields as the provider opened its stream (`id`, `model`,
    /// `system_fingerprint`, …, as in [`ChatResponse::provider_fields`]), before any
    /// delta: what a server relaying the stream puts in its own first event. A provider
    /// that opens with none sends no `Started`.
    Started(Box<BTreeMap<String, Value>>),
    /// Text the model wrote, in order.
    Text(String),
    /// A piece of reasoning (thinking). `index` is the reasoning block's position in the
    /// message's [`reasoning`](crate::Message::reasoning), counted from 0.
    Reasoning {
        /// The block's position among the message's reasoning blocks.
        index: usize,
        /// What arrived.
        delta: ReasoningDelta,
    },
    /// A piece of a tool call.
    ToolCall(ToolCallDelta),
    /// Token usage so far; the last one is the call's total (also in `Done`).
    Usage(Usage),
    /// The end: the complete response, as a non-streamed call would have returned it
    /// (message, usage, finish reason, report).
    Done(Box<ChatResponse>),
    /// One of the provider's own events, as it came, beside the neutral events it decodes
    /// to (which follow it). Sent only for a request a proxy read in the provider's own
    /// format ([`GenerationParams::origin`](crate::GenerationParams::origin)), so that the
    /// proxy relays the provider's stream byte for byte (ids, fields and event types no
    /// neutral event holds). Everything else passes it by: it adds nothing to the answer.
    Wire(WireEvent),
}

/// A provider's server-sent event as it came: see [`StreamEvent::Wire`].
///
/// ```
/// use llm_context_layers::WireFormat;
/// use llm_context_layers::stream::WireEvent;
///
/// let e = WireEvent::new(WireFormat::Messages, "message_stop", r#"{"type":"message_stop"}"#);
/// assert_eq!(e.frame(), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WireEvent {
    /// The format of the stream it came in.
    pub format: WireFormat,
    /// Its `event:` name (`message` when the stream names none, as the SSE standard has it).
    pub event: String,
    /// Its data, its lines joined by `\n`.
    pub data: String,
    /// Whether it is of the stream's closing part: the event that gives the final usage
    /// and nothing else (Anthropic's `message_delta`, OpenAI's usage chunk), the one that
    /// ends the stream, or any after them. A relay holds these until [`StreamEvent::Done`]:
    /// they are what it amends when the answer's figures cover rounds the client never
    /// saw, and what it replaces with an error when the answer fails a check.
    pub closing: bool,
}

impl WireEvent {
    /// An event of a `format` stream.
    pub fn new(format: WireFormat, event: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            format,
            event: event.into(),
            data: data.into(),
            closing: false,
        }
    }

    /// Marks it as of the stream's closing part (see [`closing`](Self::closing)).
    #[must_use]
    pub fn closing(mut self, closing: bool) -> Self {
        self.closing = closing;
        self
    }

    /// The event written back as one server-sent event frame: its name unless it is the
    /// default `message`, then a `data:` line for each of its data's lines.
    pub fn frame(&self) -> String {
        let mut out = String::with_capacity(self.data.len() + self.event.len() + 16);
        if self.event != "message" {
            out.push_str("event: ");
            out.push_str(&self.event);
            out.push('\n');
        }
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        out
    }
}

impl StreamEvent {
    /// The response, when this is the last event.
    pub fn as_done(&self) -> Option<&ChatResponse> {
        match self {
            StreamEvent::Done(r) => Some(r),
            _ => None,
        }
    }
}

/// A piece of a reasoning block.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReasoningDelta {
    /// Anthropic thinking text.
    Thinking(String),
    /// The signature of an Anthropic thinking block (it arrives whole, after the text).
    Signature(String),
    /// An Anthropic `redacted_thinking` block's data (it arrives whole).
    Redacted(String),
    /// An OpenAI-compatible server's `reasoning_content` text.
    Text(String),
}

/// A piece of a tool call. The first piece of a call carries its `id` and `name`; the
/// following ones append to its `arguments` (JSON text, complete only at the end).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCallDelta {
    /// The call's position among the message's tool calls, counted from 0.
    pub index: usize,
    /// The provider's call id, on the call's first piece.
    pub id: Option<String>,
    /// The tool's name, on the call's first piece.
    pub name: Option<String>,
    /// More of the arguments' JSON text.
    pub arguments: String,
}

impl ToolCallDelta {
    /// A piece of the call at `index`.
    pub fn new(index: usize) -> Self {
        Self {
            index,
            ..Self::default()
        }
    }

    /// Sets the call's id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the tool's name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the arguments' text.
    #[must_use]
    pub fn with_arguments(mut self, arguments: impl Into<String>) -> Self {
        self.arguments = arguments.into();
        self
    }
}
