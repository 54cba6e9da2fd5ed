//! The Responses API on the proxy's side: `POST /v1/responses` read into the neutral
//! request, and answered as a `Response` object (the provider's own, when it gave one)
//! or its stream's events, with OpenAI's error shape.
//!
//! A stream from a Responses upstream reaches a Responses caller event for event, as
//! the upstream sent it, its last event's usage summed with the rounds answered inside
//! (a hidden round's events never reach it). A stream from anything else (another
//! format's upstream, a memo entry replayed) is written from the neutral answer once it
//! is whole: `response.created`, each output item added and done, then
//! `response.completed` (or `response.incomplete`).

use axum::body::Bytes;
use axum::http::StatusCode;
use llm_context_layers::artifact::READ_ARTIFACT_TOOL;
use llm_context_layers::{ChatResponse, WireFormat};
use serde_json::Value;

use super::answer::{usage, written};
use super::read::{Kept, request};
use crate::BoxError;
use crate::wire::chat_completions::serve::ChatCompletions;
use crate::wire::checks::Invalid;
use crate::wire::served::{
    AsGiven, EventWriter, Format, Namespaced, Read, Relay, Reuses, StreamOptions, amend_usage,
};
use llm_context_layers::FinishReason;
use llm_context_layers::stream::StreamEvent;
use serde_json::json;

/// The Responses API as the proxy serves it.
pub(crate) struct Responses;

/// The body of a failure, in OpenAI's shape: a request that cannot fit names `input`.
pub(crate) fn failure_body(e: &BoxError, status: StatusCode) -> Value {
    let mut body = ChatCompletions::failure(e, status);
    if body["error"]["code"] == "context_length_exceeded" {
        body["error"]["param"] = Value::from("input");
    }
    body
}

/// The read of a request, with what was kept of its body.
fn read_as((mut request, kept): (llm_context_layers::ChatRequest, Kept)) -> Read {
    let stream = kept.asks_stream();
    // Kept for the Responses client, which writes the body back with it.
    request.params.origin = Some(llm_context_layers::Origin::new(kept));
    Read {
        request,
        stream,
        // The Responses stream always ends with the usage.
        include_usage: true,
    }
}

impl Format for Responses {
    const ROUTE: &'static str = "/v1/responses";
    type Events = Events;

    fn read(body: &Bytes) -> Result<Read, Invalid> {
        Ok(read_as(request(body)?))
    }

    /// The read of [`reuse`](super::reuse), which parses only the items it has not read
    /// before; the full read where it cannot (and to say what is wrong).
    fn read_reusing(body: &Bytes, reuse: &Reuses, tenant: &str) -> Result<Read, Invalid> {
        match super::reuse::read(body, &reuse.responses, tenant) {
            Some(read) => Ok(read_as(read)),
            None => Self::read(body),
        }
    }

    /// OpenAI's answer as it came when it gave one, with the usage of the rounds
    /// answered inside added; else written from the neutral response.
    fn answer(response: &ChatResponse, model: &str, tools: &Namespaced) -> Value {
        match AsGiven::of(response, WireFormat::Responses, &usage(&response.usage)) {
            Some(mut given) => {
                hide_read_tool(&mut given);
                given
            }
            None => written(response, model, crate::wire::served::created(), tools),
        }
    }

    fn events(model: String, options: &StreamOptions) -> Events {
        let mut events = Events::new(model, options.created);
        events.tools = options.tools.clone();
        events
    }

    fn error(status: StatusCode, message: &str) -> Value {
        ChatCompletions::error(status, message)
    }

    fn invalid(e: &Invalid) -> Value {
        ChatCompletions::invalid(e)
    }

    fn failure(e: &BoxError, status: StatusCode) -> Value {
        failure_body(e, status)
    }

    /// A chained request (its history is the provider's: `previous_response_id`,
    /// `conversation`, or items given by reference) is not managed: it goes through the
    /// stack with nothing edited or added (the `off` executor), counted, metered and
    /// budgeted, never answered from the memo.
    fn unmanaged(read: &Read) -> Option<&'static str> {
        llm_context_layers::executor::chains_server_state(&read.request).then_some("stateful")
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
    /// The request's namespaced tools.
    pub(super) tools: Namespaced,
}

impl Events {
    pub(super) fn new(model: String, created: u64) -> Self {
        Self {
            model,
            created,
            sequence: 0,
            relay: Relay::new(llm_context_layers::WireFormat::Responses),
            tools: Namespaced::new(),
        }
    }

    fn frame(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    }
}

/// `response` without the read tool the stack offered the model in its echo of the
/// request's `tools`: the client never declared it, and never sees it.
fn hide_read_tool(response: &mut Value) {
    if let Some(tools) = response.get_mut("tools").and_then(Value::as_array_mut) {
        tools.retain(|t| t.get("name").and_then(Value::as_str) != Some(READ_ARTIFACT_TOOL));
    }
}

/// An event of OpenAI's stream whose `response` echoes the read tool, without it.
fn without_read_tool(event: &StreamEvent) -> Option<StreamEvent> {
    let StreamEvent::Wire(e) = event else {
        return None;
    };
    if e.format != WireFormat::Responses || e.closing || !e.data.contains(READ_ARTIFACT_TOOL) {
        return None;
    }
    let mut data: Value = serde_json::from_str(&e.data).ok()?;
    hide_read_tool(data.get_mut("response")?);
    let mut e = e.clone();
    e.data = data.to_string();
    Some(StreamEvent::Wire(e))
}

impl EventWriter for Events {
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let stripped = without_read_tool(event);
        let event = stripped.as_ref().unwrap_or(event);
        // OpenAI's own events, the usage of rounds answered inside added to the last,
        // the read tool left out of the request's echo.
        let relayed = self.relay.event(event, true, |data, r| {
            let last = matches!(
                data["type"].as_str(),
                Some("response.completed" | "response.incomplete")
            );
            if let Some(response) = data.get_mut("response").filter(|v| v.is_object()) {
                if last && crate::wire::served::hidden_rounds(r) {
                    amend_usage(&mut response["usage"], &usage(&r.usage));
                }
                hide_read_tool(response);
            }
            true
        });
        if let Some(frames) = relayed {
            return frames;
        }
        let StreamEvent::Done(r) = event else {
            return Vec::new();
        };
        let whole = written(r, &self.model, self.created, &self.tools);
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
