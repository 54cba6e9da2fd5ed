//! Reading Anthropic's streamed Messages (`stream: true`): `message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`, `ping`
//! and `error` events.

use std::collections::VecDeque;
use std::sync::Arc;

use eventsource_stream::Event;
use llm_context_layers::stream::{Accumulator, ReasoningDelta, StreamEvent, ToolCallDelta};
use llm_context_layers::{FinishReason, Usage};
use serde_json::{Map, Value};

use super::client::ClientState;
use super::convert::finish_reason;
use super::types::ResponseUsage;
use crate::error::{Provider, ProviderError, ProviderErrorKind};
use crate::sse::{Decoder, bad_event, error_event};

/// What a content block of the answer is, by its index on the wire.
#[derive(Clone, Copy)]
enum Block {
    Text,
    /// The block's position among the message's reasoning blocks.
    Reasoning(usize),
    /// The block's position among the message's tool calls.
    Tool(usize),
    /// A block this client does not model (server tools' results, …): skipped.
    Other,
}

/// The state of one streamed answer.
pub(crate) struct AnthropicDecoder {
    shared: Arc<ClientState>,
    acc: Accumulator,
    blocks: Vec<Block>,
    reasoning: usize,
    tools: usize,
    usage: ResponseUsage,
    finish: Option<FinishReason>,
    fields: (Option<String>, Option<String>, Map<String, Value>),
}

impl AnthropicDecoder {
    pub(crate) fn new(shared: Arc<ClientState>) -> Self {
        Self {
            shared,
            acc: Accumulator::new(),
            blocks: Vec::new(),
            reasoning: 0,
            tools: 0,
            usage: ResponseUsage::default(),
            finish: None,
            fields: Default::default(),
        }
    }

    fn invalid(&self, what: impl Into<String>) -> ProviderError {
        ProviderError::new(
            Provider::Anthropic,
            ProviderErrorKind::InvalidResponse,
            what,
        )
    }

    fn emit(
        &mut self,
        event: StreamEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        self.acc
            .push(&event)
            .map_err(|e| self.invalid(e.to_string()))?;
        out.push_back(event);
        Ok(())
    }

    fn block(&self, v: &Value) -> Result<Block, ProviderError> {
        let index = v["index"]
            .as_u64()
            .ok_or_else(|| self.invalid("a content block event has no index"))?;
        self.blocks
            .get(index as usize)
            .copied()
            .ok_or_else(|| self.invalid(format!("content block {index} was never started")))
    }

    fn start_block(
        &mut self,
        v: &Value,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        let b = &v["content_block"];
        let block = match b["type"].as_str() {
            Some("text") => {
                let text = b["text"].as_str().unwrap_or_default().to_owned();
                if !text.is_empty() {
                    self.emit(StreamEvent::Text(text), out)?;
                }
                Block::Text
            }
            Some(kind @ ("thinking" | "redacted_thinking")) => {
                let index = self.reasoning;
                self.reasoning += 1;
                let delta = if kind == "thinking" {
                    ReasoningDelta::Thinking(b["thinking"].as_str().unwrap_or_default().to_owned())
                } else {
                    ReasoningDelta::Redacted(b["data"].as_str().unwrap_or_default().to_owned())
                };
                self.emit(StreamEvent::Reasoning { index, delta }, out)?;
                Block::Reasoning(index)
            }
            Some("tool_use") => {
                let index = self.tools;
                self.tools += 1;
                let mut delta = ToolCallDelta::new(index);
                delta.id = b["id"].as_str().map(str::to_owned);
                delta.name = b["name"].as_str().map(str::to_owned);
                // The input arrives as `input_json_delta`s; a non-empty start input is
                // the whole of it.
                if let Some(input) = b["input"].as_object().filter(|o| !o.is_empty()) {
                    delta.arguments = Value::Object(input.clone()).to_string();
                }
                self.emit(StreamEvent::ToolCall(delta), out)?;
                Block::Tool(index)
            }
            _ => Block::Other,
        };
        let index = v["index"].as_u64().unwrap_or(self.blocks.len() as u64) as usize;
        if self.blocks.len() <= index {
            self.blocks.resize(index + 1, Block::Other);
        }
        self.blocks[index] = block;
        Ok(())
    }

    fn delta(&mut self, v: &Value, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        let block = self.block(v)?;
        let d = &v["delta"];
        let text = |key: &str| d[key].as_str().unwrap_or_default().to_owned();
        let event = match (d["type"].as_str(), block) {
            (Some("text_delta"), Block::Text) => StreamEvent::Text(text("text")),
            (Some("thinking_delta"), Block::Reasoning(index)) => StreamEvent::Reasoning {
                index,
                delta: ReasoningDelta::Thinking(text("thinking")),
            },
            (Some("signature_delta"), Block::Reasoning(index)) => StreamEvent::Reasoning {
                index,
                delta: ReasoningDelta::Signature(text("signature")),
            },
            (Some("input_json_delta"), Block::Tool(index)) => StreamEvent::ToolCall(
                ToolCallDelta::new(index).with_arguments(text("partial_json")),
            ),
            (_, Block::Other) => return Ok(()),
            (kind, _) => {
                return Err(self.invalid(format!(
                    "a {} delta does not belong to its content block",
                    kind.unwrap_or("typeless")
                )));
            }
        };
        self.emit(event, out)
    }

    fn usage(&self) -> Usage {
        super::convert::usage(&self.usage)
    }

    fn done(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        let acc = std::mem::take(&mut self.acc);
        let finish = self.finish.take().unwrap_or(FinishReason::Stop);
        let response = acc
            .finish(finish)
            .map_err(|e| self.invalid(e.to_string()))?;
        let (id, model, extra) = std::mem::take(&mut self.fields);
        let response = response
            .with_usage(self.usage())
            .with_provider_fields(crate::client::provider_fields(id, model, extra));
        out.push_back(StreamEvent::Done(Box::new(response)));
        Ok(())
    }
}

/// Usage figures present in `v` override those of `usage` (a `message_delta`'s usage is
/// cumulative, and may omit the input side).
fn merge_usage(usage: &mut ResponseUsage, v: &Value) {
    let get = |key: &str| v[key].as_u64();
    if let Some(n) = get("input_tokens") {
        usage.input_tokens = n;
    }
    if let Some(n) = get("output_tokens") {
        usage.output_tokens = n;
    }
    if let Some(n) = get("cache_creation_input_tokens") {
        usage.cache_creation_input_tokens = Some(n);
    }
    if let Some(n) = get("cache_read_input_tokens") {
        usage.cache_read_input_tokens = Some(n);
    }
    if v.get("cache_creation").is_some_and(Value::is_object)
        && let Ok(c) = serde_json::from_value(v["cache_creation"].clone())
    {
        usage.cache_creation = Some(c);
    }
}

impl Decoder for AnthropicDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(&event.data)
            .map_err(|e| bad_event(Provider::Anthropic, &e, &self.shared.reading))?;
        // The data's own `type` names the event; the SSE `event:` line says the same.
        let kind = v["type"]
            .as_str()
            .unwrap_or(event.event.as_str())
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                let m = &v["message"];
                merge_usage(&mut self.usage, &m["usage"]);
                let mut extra: Map<String, Value> = m.as_object().cloned().unwrap_or_default();
                for key in [
                    "id",
                    "model",
                    "content",
                    "usage",
                    "stop_reason",
                    "stop_sequence",
                    "role",
                    "type",
                ] {
                    extra.remove(key);
                }
                self.fields = (
                    m["id"].as_str().map(str::to_owned),
                    m["model"].as_str().map(str::to_owned),
                    extra,
                );
            }
            "content_block_start" => self.start_block(&v, out)?,
            "content_block_delta" => self.delta(&v, out)?,
            "content_block_stop" | "ping" => {}
            "message_delta" => {
                merge_usage(&mut self.usage, &v["usage"]);
                if let Some(reason) = v["delta"]["stop_reason"].as_str() {
                    self.finish = Some(finish_reason(Some(reason)));
                }
                let usage = self.usage();
                self.emit(StreamEvent::Usage(usage), out)?;
            }
            "message_stop" => {
                self.done(out)?;
                return Ok(true);
            }
            "error" => {
                return Err(error_event(
                    Provider::Anthropic,
                    &event.data,
                    &self.shared.reading,
                ));
            }
            // Event types newer than this client are ignored, as Anthropic asks.
            _ => {}
        }
        Ok(false)
    }
}
