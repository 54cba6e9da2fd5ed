//! Reading OpenAI's streamed Chat Completions (`stream: true` with
//! `stream_options.include_usage`): `chat.completion.chunk` events, then `[DONE]`.

use std::collections::{BTreeMap, VecDeque};

use eventsource_stream::Event;
use llm_context_layers::FinishReason;
use llm_context_layers::stream::{ReasoningDelta, StreamEvent, ToolCallDelta};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::convert::{finish_reason, usage};
use super::types::CompletionUsage;
use crate::catalog::Provider;
use crate::client::Reading;
use crate::error::ProviderError;
use crate::sse::{Decoder, Ending, bad_event, error_event};

/// What every chunk carries that this client reads: nothing else of it is kept, so a
/// chunk costs no allocation beyond its deltas' text.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<CompletionUsage>,
    error: Option<serde::de::IgnoredAny>,
}

/// The top-level fields of the first chunk, read once: the response's provider fields.
#[derive(Deserialize)]
struct Head {
    id: Option<String>,
    model: Option<String>,
    // Read by `Chunk`; named here so that they are not kept as provider fields.
    #[serde(rename = "choices")]
    _choices: Option<serde::de::IgnoredAny>,
    #[serde(rename = "usage")]
    _usage: Option<serde::de::IgnoredAny>,
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

/// The state of one streamed answer: its finish reason and its first chunk's fields.
#[derive(Default)]
pub(crate) struct OpenAiDecoder {
    finish: Option<FinishReason>,
    fields: Option<BTreeMap<String, Value>>,
}

impl Decoder for OpenAiDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
        reading: &Reading,
    ) -> Result<Option<Ending>, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Some(Ending {
                finish: self.finish.take(),
                fields: self.fields.take().unwrap_or_default(),
                message: None,
            }));
        }
        if data.is_empty() {
            return Ok(None);
        }
        let bad = |e| bad_event(Provider::OpenAi, &e, reading);
        let chunk: Chunk = serde_json::from_str(data).map_err(bad)?;
        if chunk.error.is_some() {
            return Err(error_event(Provider::OpenAi, data, reading));
        }
        if self.fields.is_none() {
            let head: Head = serde_json::from_str(data).map_err(bad)?;
            let fields = crate::client::provider_fields(head.id, head.model, head.extra);
            // A relay opens its own stream with them (the id, `system_fingerprint`).
            out.push_back(StreamEvent::Started(Box::new(fields.clone())));
            self.fields = Some(fields);
        }
        // Only the first choice is read, as for a non-streamed answer.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            let d = choice.delta;
            if let Some(r) = d.reasoning_content.filter(|r| !r.is_empty()) {
                let delta = ReasoningDelta::Text(r);
                out.push_back(StreamEvent::Reasoning { index: 0, delta });
            }
            for text in [d.content, d.refusal].into_iter().flatten() {
                if !text.is_empty() {
                    out.push_back(StreamEvent::Text(text));
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
                out.push_back(StreamEvent::ToolCall(delta));
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(Some(&reason)));
            }
        }
        if let Some(u) = chunk.usage {
            out.push_back(StreamEvent::Usage(usage(u)));
        }
        Ok(None)
    }
}
