//! The Responses stream: read from an upstream ([`ResponsesDecoder`]), and written to a
//! caller from the neutral answer ([`Events`]).
//!
//! A stream from a Responses upstream reaches a Responses caller event for event, as
//! the upstream sent it, its last event's usage summed with the rounds answered inside
//! (a hidden round's events never reach it). A stream from anything else (another
//! format's upstream, a memo entry replayed) is written from the neutral answer once it
//! is whole: `response.created`, each output item added and done, then
//! `response.completed` (or `response.incomplete`).

use std::collections::{BTreeMap, VecDeque};

use axum::body::Bytes;
use axum::http::StatusCode;
use eventsource_stream::Event;
use llm_context_layers::stream::{StreamEvent, ToolCallDelta};
use llm_context_layers::{BoxError, FinishReason};
use serde_json::{Value, json};

use super::answer::{finish_reason, response, usage, usage_of, written};
use crate::catalog::Provider;
use crate::client::Reading;
use crate::error::ProviderError;
use crate::sse::{Decoder, Ending, bad_event, error_event};
use crate::wire::served::{EventWriter, Relay, amend_usage};

/// The state of one streamed answer read from a Responses upstream: which output item
/// each tool call is.
#[derive(Default)]
pub(crate) struct ResponsesDecoder {
    /// The output index of each tool call, in the order they started.
    calls: Vec<u64>,
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
            "response.output_item.added" if e["item"]["type"] == "function_call" => {
                let mut delta = ToolCallDelta::new(self.calls.len());
                delta.id = e["item"]["call_id"].as_str().map(str::to_owned);
                delta.name = e["item"]["name"].as_str().map(str::to_owned);
                self.calls
                    .push(e["output_index"].as_u64().unwrap_or_default());
                out.push_back(StreamEvent::ToolCall(delta));
            }
            "response.function_call_arguments.delta" => {
                let at = e["output_index"].as_u64().unwrap_or_default();
                if let Some(index) = self.calls.iter().position(|&o| o == at) {
                    let text = e["delta"].as_str().unwrap_or_default();
                    out.push_back(StreamEvent::ToolCall(
                        ToolCallDelta::new(index).with_arguments(text),
                    ));
                }
            }
            "response.completed" | "response.incomplete" => {
                let r = &e["response"];
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

/// A stream written to a Responses caller: the upstream's own events, or ones written
/// from the neutral answer once it is whole.
pub(crate) struct Events {
    pub(super) model: String,
    pub(super) created: u64,
    pub(super) sequence: u64,
    /// OpenAI's own events, relayed as they came when they are.
    pub(super) relay: Relay,
}

impl Events {
    pub(super) fn new(model: String, created: u64) -> Self {
        Self {
            model,
            created,
            sequence: 0,
            relay: Relay::new(llm_context_layers::WireFormat::Responses),
        }
    }

    fn frame(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    }
}

impl EventWriter for Events {
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        // OpenAI's own events, the usage of rounds answered inside added to the last.
        let relayed = self.relay.event(event, false, |data, r| {
            if matches!(
                data["type"].as_str(),
                Some("response.completed" | "response.incomplete")
            ) {
                amend_usage(&mut data["response"]["usage"], &usage(&r.usage));
            }
            true
        });
        if let Some(frames) = relayed {
            return frames;
        }
        let StreamEvent::Done(r) = event else {
            return Vec::new();
        };
        let whole = written(r, &self.model, self.created);
        let mut opening = whole.clone();
        opening["status"] = json!("in_progress");
        opening["output"] = json!([]);
        if let Some(o) = opening.as_object_mut() {
            o.remove("usage");
        }
        let mut out = vec![self.frame("response.created", json!({"response": opening}))];
        for (i, item) in whole["output"].as_array().into_iter().flatten().enumerate() {
            out.push(self.frame(
                "response.output_item.added",
                json!({"output_index": i, "item": item}),
            ));
            out.push(self.frame(
                "response.output_item.done",
                json!({"output_index": i, "item": item}),
            ));
        }
        let end = match r.finish_reason {
            FinishReason::Length | FinishReason::ContentFilter => "response.incomplete",
            _ => "response.completed",
        };
        out.push(self.frame(end, json!({"response": whole})));
        out
    }

    fn failed(&mut self, error: &BoxError, status: StatusCode) -> Bytes {
        let body = super::serve::failure_body(error, status);
        let e = &body["error"];
        self.frame(
            "error",
            json!({"code": e["code"], "message": e["message"], "param": e["param"]}),
        )
    }
}
