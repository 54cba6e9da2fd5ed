//! Reading OpenAI's streamed Chat Completions (`stream: true` with
//! `stream_options.include_usage`): `chat.completion.chunk` events, then `[DONE]`.

use std::collections::VecDeque;

use eventsource_stream::Event;
use llm_context_layers::FinishReason;
use llm_context_layers::stream::{Accumulator, ReasoningDelta, StreamEvent, ToolCallDelta};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::convert::{finish_reason, usage};
use super::types::CompletionUsage;
use crate::client::Reading;
use crate::error::{Provider, ProviderError, ProviderErrorKind};
use crate::sse::{Decoder, bad_event, error_event};

/// One `chat.completion.chunk` (the fields this client reads; the others of the first
/// chunk are kept as the response's provider fields).
#[derive(Deserialize)]
struct Chunk {
    id: Option<String>,
    model: Option<String>,
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<CompletionUsage>,
    error: Option<Value>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Delta,
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct Delta {
    content: Option<String>,
    refusal: Option<String>,
    reasoning_content: Option<String>,
    tool_calls: Option<Vec<ToolCallChunk>>,
}

#[derive(Deserialize)]
struct ToolCallChunk {
    #[serde(default)]
    index: usize,
    id: Option<String>,
    function: Option<FunctionChunk>,
}

#[derive(Deserialize)]
struct FunctionChunk {
    name: Option<String>,
    arguments: Option<String>,
}

/// The first chunk's `id`, `model` and unmodelled fields.
type Fields = (Option<String>, Option<String>, Map<String, Value>);

/// The state of one streamed answer.
pub(crate) struct OpenAiDecoder {
    reading: std::sync::Arc<super::client::ClientState>,
    acc: Accumulator,
    finish: Option<FinishReason>,
    fields: Option<Fields>,
}

impl OpenAiDecoder {
    pub(crate) fn new(reading: std::sync::Arc<super::client::ClientState>) -> Self {
        Self {
            reading,
            acc: Accumulator::new(),
            finish: None,
            fields: None,
        }
    }

    fn reading(&self) -> &Reading {
        &self.reading.reading
    }

    fn emit(
        &mut self,
        event: StreamEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError> {
        self.acc.push(&event).map_err(|e| {
            ProviderError::new(
                Provider::OpenAi,
                ProviderErrorKind::InvalidResponse,
                e.to_string(),
            )
        })?;
        out.push_back(event);
        Ok(())
    }

    fn done(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError> {
        let acc = std::mem::take(&mut self.acc);
        let finish = self.finish.take().unwrap_or(if acc.has_tool_calls() {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        });
        let response = acc.finish(finish).map_err(|e| {
            ProviderError::new(
                Provider::OpenAi,
                ProviderErrorKind::InvalidResponse,
                e.to_string(),
            )
        })?;
        let (id, model, extra) = self.fields.take().unwrap_or_default();
        let response =
            response.with_provider_fields(crate::client::provider_fields(id, model, extra));
        out.push_back(StreamEvent::Done(Box::new(response)));
        Ok(())
    }
}

impl Decoder for OpenAiDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<bool, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done(out)?;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| bad_event(Provider::OpenAi, &e, self.reading()))?;
        if chunk.error.is_some() {
            return Err(error_event(Provider::OpenAi, data, self.reading()));
        }
        if self.fields.is_none() {
            self.fields = Some((chunk.id, chunk.model, chunk.extra));
        }
        // Only the first choice is read, as for a non-streamed answer.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let d = choice.delta;
            if let Some(r) = d.reasoning_content.filter(|r| !r.is_empty()) {
                let delta = ReasoningDelta::Text(r);
                self.emit(StreamEvent::Reasoning { index: 0, delta }, out)?;
            }
            for text in [d.content, d.refusal].into_iter().flatten() {
                if !text.is_empty() {
                    self.emit(StreamEvent::Text(text), out)?;
                }
            }
            for call in d.tool_calls.into_iter().flatten() {
                let (name, arguments) = match call.function {
                    Some(f) => (f.name, f.arguments.unwrap_or_default()),
                    None => (None, String::new()),
                };
                let mut delta = ToolCallDelta::new(call.index).with_arguments(arguments);
                delta.id = call.id;
                delta.name = name;
                self.emit(StreamEvent::ToolCall(delta), out)?;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(Some(&reason)));
            }
        }
        if let Some(u) = chunk.usage {
            self.emit(StreamEvent::Usage(usage(u)), out)?;
        }
        Ok(false)
    }
}
