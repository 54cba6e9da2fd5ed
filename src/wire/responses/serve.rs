//! The Responses API on the proxy's side: `POST /v1/responses` read into the neutral
//! request, and answered as a `Response` object (the provider's own, when it gave one)
//! or its stream's events, with OpenAI's error shape.

use axum::body::Bytes;
use axum::http::StatusCode;
use llm_context_layers::{ChatResponse, WireFormat};
use serde_json::Value;

use super::answer::{usage, written};
use super::read::request;
use super::stream::Events;
use crate::BoxError;
use crate::wire::chat_completions::serve::ChatCompletions;
use crate::wire::checks::Invalid;
use crate::wire::served::{AsGiven, Format, Read, StreamOptions};

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

impl Format for Responses {
    const ROUTE: &'static str = "/v1/responses";
    type Events = Events;

    fn read(body: &Bytes) -> Result<Read, Invalid> {
        let (mut request, kept) = request(body)?;
        let stream = kept.asks_stream();
        // Kept for the Responses client, which writes the body back with it.
        request.params.origin = Some(llm_context_layers::Origin::new(kept));
        Ok(Read {
            request,
            stream,
            // The Responses stream always ends with the usage.
            include_usage: true,
        })
    }

    /// OpenAI's answer as it came when it gave one, with the usage of the rounds
    /// answered inside added; else written from the neutral response.
    fn answer(response: &ChatResponse, model: &str) -> Value {
        AsGiven::of(response, WireFormat::Responses, &usage(&response.usage))
            .unwrap_or_else(|| written(response, model, crate::wire::served::created()))
    }

    fn events(model: String, options: &StreamOptions) -> Events {
        Events::new(model, options.created)
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

    /// A chained request: its history is the provider's (`previous_response_id`,
    /// `conversation`, or items given by reference).
    fn unmanaged(read: &Read) -> Option<&'static str> {
        let extra = &read.request.params.extra;
        let set = |k: &str| extra.get(k).is_some_and(|v| !v.is_null());
        let referenced = read.request.messages.iter().any(|m| {
            matches!(&m.content, llm_context_layers::Content::Parts(parts)
                if parts.iter().any(|p| matches!(p,
                    llm_context_layers::ContentPart::Opaque { kind, .. } if kind == "item_reference")))
        });
        (set("previous_response_id") || set("conversation") || referenced).then_some("stateful")
    }
}
