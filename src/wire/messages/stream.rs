//! Reading Anthropic's streamed Messages (`stream: true`): `message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`, `ping`
//! and `error` events.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use eventsource_stream::Event;
use llm_context_layers::FinishReason;
use llm_context_layers::stream::{ReasoningDelta, StreamEvent, ToolCallDelta};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::convert::{finish_reason, usage};
use super::types::{CacheCreation, MessageResponse, ResponseUsage};
use crate::catalog::Provider;
use crate::client::Reading;
use crate::error::{ProviderError, ProviderErrorKind};
use crate::sse::{Decoder, Ending, bad_event, error_event};

/// Every event's fields, flat: each event fills the ones it has. Its `type` and a
/// delta's are borrowed, so a `content_block_delta` (the event of every token) costs no
/// allocation beyond its text.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: Option<usize>,
    /// `message_start`: the message as a non-streamed answer begins.
    message: Option<MessageResponse>,
    /// `content_block_start` (one per block: read as a value, so that a kind this client
    /// does not model is kept whole).
    content_block: Option<Value>,
    /// `content_block_delta` and `message_delta`.
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    /// `message_delta`: cumulative figures, the input side perhaps left out.
    usage: Option<UsagePatch>,
    /// `message_delta`: the provider's context edits, reported at the end of a stream.
    context_management: Option<Value>,
}

#[derive(Deserialize)]
struct StartBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    thinking: Option<String>,
    data: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    text: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
    /// A `compaction_delta`'s summary, or its encrypted form.
    content: Option<String>,
    encrypted_content: Option<String>,
}

/// The usage figures an event gives; those present override what came before.
#[derive(Default, Deserialize)]
struct UsagePatch {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation: Option<CacheCreation>,
}

impl UsagePatch {
    fn apply(self, u: &mut ResponseUsage) {
        u.input_tokens = self.input_tokens.unwrap_or(u.input_tokens);
        u.output_tokens = self.output_tokens.unwrap_or(u.output_tokens);
        u.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .or(u.cache_creation_input_tokens);
        u.cache_read_input_tokens = self.cache_read_input_tokens.or(u.cache_read_input_tokens);
        u.cache_creation = self.cache_creation.or(u.cache_creation);
    }
}

/// What a content block of the answer is, by its index on the wire.
#[derive(Clone, Copy)]
enum Block {
    Text,
    /// The block's position among the message's reasoning blocks.
    Reasoning(usize),
    /// The block's position among the message's tool calls.
    Tool(usize),
    /// A block this client does not model (server tools' results, …), kept whole at
    /// this position of the unmodelled blocks; its deltas are skipped, but a
    /// compaction's, which complete it.
    Unmodelled(usize),
    /// A position no block started at.
    Other,
}

/// The state of one streamed answer.
#[derive(Default)]
pub(crate) struct AnthropicDecoder {
    blocks: Vec<Block>,
    reasoning: usize,
    tools: usize,
    usage: ResponseUsage,
    finish: Option<FinishReason>,
    fields: BTreeMap<String, Value>,
    /// Blocks of kinds the neutral message has no place for, as they started.
    unmodelled: Vec<Value>,
}

fn invalid(what: impl Into<String>) -> ProviderError {
    ProviderError::new(
        Provider::Anthropic,
        ProviderErrorKind::InvalidResponse,
        what,
    )
}

impl AnthropicDecoder {
    fn start_block(
        &mut self,
        index: usize,
        raw: Value,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        let modelled = matches!(
            raw["type"].as_str(),
            Some("text" | "thinking" | "redacted_thinking" | "tool_use")
        );
        if !modelled {
            self.unmodelled.push(raw);
            self.set_block(index, Block::Unmodelled(self.unmodelled.len() - 1));
            return Ok(());
        }
        let b =
            StartBlock::deserialize(&raw).map_err(|e| invalid(format!("a block start: {e}")))?;
        let block = match b.kind.as_str() {
            "text" => {
                if let Some(text) = b.text.filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::Text(text));
                }
                Block::Text
            }
            kind @ ("thinking" | "redacted_thinking") => {
                let at = self.reasoning;
                self.reasoning += 1;
                // A thinking block starts empty; its text and signature follow as deltas.
                let delta = if kind == "thinking" {
                    b.thinking
                        .filter(|t| !t.is_empty())
                        .map(ReasoningDelta::Thinking)
                } else {
                    Some(ReasoningDelta::Redacted(b.data.unwrap_or_default()))
                };
                if let Some(delta) = delta {
                    out.push_back(StreamEvent::Reasoning { index: at, delta });
                }
                Block::Reasoning(at)
            }
            "tool_use" => {
                let at = self.tools;
                self.tools += 1;
                let mut delta = ToolCallDelta::new(at);
                delta.id = b.id;
                delta.name = b.name;
                // The input arrives as `input_json_delta`s; a non-empty start input is
                // the whole of it.
                if let Some(input) = b.input.filter(|o| !o.is_empty()) {
                    delta.arguments = Value::Object(input).to_string();
                }
                out.push_back(StreamEvent::ToolCall(delta));
                Block::Tool(at)
            }
            _ => Block::Other,
        };
        self.set_block(index, block);
        Ok(())
    }

    fn set_block(&mut self, index: usize, block: Block) {
        if self.blocks.len() <= index {
            self.blocks.resize(index + 1, Block::Other);
        }
        self.blocks[index] = block;
    }

    fn delta(
        &mut self,
        index: usize,
        d: Delta<'_>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        let block = *self
            .blocks
            .get(index)
            .ok_or_else(|| invalid(format!("content block {index} was never started")))?;
        let event = match (d.kind.as_deref(), block) {
            (Some("text_delta"), Block::Text) => StreamEvent::Text(d.text.unwrap_or_default()),
            (Some("thinking_delta"), Block::Reasoning(index)) => StreamEvent::Reasoning {
                index,
                delta: ReasoningDelta::Thinking(d.thinking.unwrap_or_default()),
            },
            (Some("signature_delta"), Block::Reasoning(index)) => StreamEvent::Reasoning {
                index,
                delta: ReasoningDelta::Signature(d.signature.unwrap_or_default()),
            },
            (Some("input_json_delta"), Block::Tool(index)) => StreamEvent::ToolCall(
                ToolCallDelta::new(index).with_arguments(d.partial_json.unwrap_or_default()),
            ),
            // A compaction's summary arrives in deltas: the block is kept whole, so that
            // it can be sent back.
            (Some("compaction_delta"), Block::Unmodelled(at)) => {
                let Some(block) = self.unmodelled[at].as_object_mut() else {
                    return Err(invalid("a compaction block is not an object"));
                };
                for (field, more) in [
                    ("content", d.content),
                    ("encrypted_content", d.encrypted_content),
                ] {
                    if let Some(more) = more {
                        let so_far = block.get(field).and_then(Value::as_str).unwrap_or("");
                        let joined = format!("{so_far}{more}");
                        block.insert(field.into(), Value::String(joined));
                    }
                }
                return Ok(());
            }
            (_, Block::Other | Block::Unmodelled(_)) => return Ok(()),
            // A delta this client does not model (a text block's `citations_delta`, kinds
            // newer than it): nothing of the neutral answer. A relay passes it on.
            (Some(kind), _)
                if !matches!(
                    kind,
                    "text_delta" | "thinking_delta" | "signature_delta" | "input_json_delta"
                ) =>
            {
                return Ok(());
            }
            (kind, _) => {
                return Err(invalid(format!(
                    "a {} delta does not belong to its content block",
                    kind.unwrap_or("typeless")
                )));
            }
        };
        out.push_back(event);
        Ok(())
    }
}

impl Decoder for AnthropicDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
        reading: &Reading,
    ) -> Result<Option<Ending>, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(None);
        }
        let e: Envelope<'_> = serde_json::from_str(&event.data)
            .map_err(|e| bad_event(Provider::Anthropic, &e, reading))?;
        let index = || {
            e.index
                .ok_or_else(|| invalid("a content block event has no index"))
        };
        match e.kind.as_ref() {
            "message_start" => {
                let m = e
                    .message
                    .ok_or_else(|| invalid("message_start has no message"))?;
                self.usage = m.usage;
                // The same fields as a non-streamed answer's.
                self.fields = crate::client::provider_fields(m.id, m.model, m.extra);
                // A relay opens its own stream with them (the message's id above all).
                out.push_back(StreamEvent::Started(Box::new(self.fields.clone())));
            }
            "content_block_start" => {
                let at = index()?;
                let block = e
                    .content_block
                    .ok_or_else(|| invalid("a block start has no block"))?;
                self.start_block(at, block, out)?;
            }
            "content_block_delta" => {
                let at = index()?;
                let delta = e
                    .delta
                    .ok_or_else(|| invalid("a block delta has no delta"))?;
                self.delta(at, delta, out)?;
            }
            "message_delta" => {
                if let Some(patch) = e.usage {
                    patch.apply(&mut self.usage);
                }
                if let Some(reason) = e.delta.and_then(|d| d.stop_reason) {
                    self.finish = Some(finish_reason(Some(&reason)));
                }
                // The edits applied, as a non-streamed answer has them.
                if let Some(cm) = e.context_management.filter(|v| !v.is_null()) {
                    self.fields.insert("context_management".into(), cm);
                }
                out.push_back(StreamEvent::Usage(usage(&self.usage)));
            }
            "message_stop" => {
                let mut fields = std::mem::take(&mut self.fields);
                if !self.unmodelled.is_empty() {
                    let blocks = std::mem::take(&mut self.unmodelled);
                    fields.insert("content".into(), Value::Array(blocks));
                }
                return Ok(Some(Ending {
                    finish: Some(self.finish.take().unwrap_or(FinishReason::Stop)),
                    fields,
                    message: None,
                }));
            }
            "error" => return Err(error_event(Provider::Anthropic, &event.data, reading)),
            // `content_block_stop`, `ping`, and event types newer than this client,
            // which Anthropic asks clients to ignore.
            _ => {}
        }
        Ok(None)
    }
}
