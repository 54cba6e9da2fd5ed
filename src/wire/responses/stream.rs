//! The Responses stream read from an upstream ([`ResponsesDecoder`]): text and call
//! deltas as they come, and the last event's `response` as the whole answer.

use std::collections::{BTreeMap, VecDeque};

use eventsource_stream::Event;
use llm_context_layers::stream::{StreamEvent, ToolCallDelta};
use serde_json::{Value, json};

use super::answer::{finish_reason, response, usage_of};
use crate::catalog::Provider;
use crate::client::Reading;
use crate::error::ProviderError;
use crate::sse::{Decoder, Ending, bad_event, error_event};

/// The state of one streamed answer read from a Responses upstream: which output item
/// each tool call is.
#[derive(Default)]
pub(crate) struct ResponsesDecoder {
    /// Each tool call's output index and item id, in the order they started.
    calls: Vec<(Option<u64>, Option<String>)>,
    /// Each output item as `response.output_item.done` gave it: the answer, when the
    /// last event's `response` lists none.
    done: Vec<Value>,
}

impl Decoder for ResponsesDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
        reading: &Reading,
    ) -> Result<Option<Ending>, ProviderError> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(None);
        }
        let e: Value =
            serde_json::from_str(data).map_err(|e| bad_event(Provider::OpenAi, &e, reading))?;
        match e["type"].as_str().unwrap_or(event.event.as_str()) {
            "response.output_text.delta" => {
                if let Some(text) = e["delta"].as_str().filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::Text(text.to_owned()));
                }
            }
            "response.output_item.added"
                if matches!(
                    e["item"]["type"].as_str(),
                    Some("function_call" | "custom_tool_call")
                ) =>
            {
                let mut delta = ToolCallDelta::new(self.calls.len());
                delta.id = e["item"]["call_id"].as_str().map(str::to_owned);
                delta.name = e["item"]["name"].as_str().map(str::to_owned);
                let item_id = e["item"]["id"].as_str().map(str::to_owned);
                self.calls.push((e["output_index"].as_u64(), item_id));
                out.push_back(StreamEvent::ToolCall(delta));
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                // The call by its output index, else by its item's id.
                let at = e["output_index"].as_u64();
                let item = e["item_id"].as_str();
                let index = self.calls.iter().position(|(o, id)| match (at, o) {
                    (Some(at), Some(o)) => at == *o,
                    _ => item.is_some() && id.as_deref() == item,
                });
                if let Some(index) = index {
                    let text = e["delta"].as_str().unwrap_or_default();
                    out.push_back(StreamEvent::ToolCall(
                        ToolCallDelta::new(index).with_arguments(text),
                    ));
                }
            }
            "response.output_item.done" => {
                self.done.push(e["item"].clone());
            }
            "response.completed" | "response.incomplete" => {
                let mut r = e["response"].clone();
                let listed = r["output"].as_array().is_some_and(|o| !o.is_empty());
                if let Some(obj) = r
                    .as_object_mut()
                    .filter(|_| !listed && !self.done.is_empty())
                {
                    obj.insert(
                        "output".into(),
                        Value::Array(std::mem::take(&mut self.done)),
                    );
                }
                let r = &r;
                out.push_back(StreamEvent::Usage(usage_of(&r["usage"])));
                let mut fields = BTreeMap::new();
                for key in ["id", "model"] {
                    if let Some(v) = r.get(key).filter(|v| !v.is_null()) {
                        fields.insert(key.to_owned(), v.clone());
                    }
                }
                // The whole answer, its reasoning items included, as a non-streamed
                // call reads it: what the next round sends back.
                let message = response(r).ok().map(|whole| Box::new(whole.message));
                return Ok(Some(Ending {
                    finish: Some(finish_reason(r, !self.calls.is_empty())),
                    fields,
                    message,
                }));
            }
            // Flat (`{type: "error", message}`) or nested (`{error: {…}}`).
            "error" | "response.failed" => {
                let error = match (&e["error"], &e["response"]["error"]) {
                    (Value::Object(_), _) => e["error"].clone(),
                    (_, Value::Object(_)) => e["response"]["error"].clone(),
                    _ => json!({"type": e["code"], "message": e["message"]}),
                };
                let data = json!({"error": error}).to_string();
                return Err(error_event(Provider::OpenAi, &data, reading));
            }
            _ => {}
        }
        Ok(None)
    }
}
