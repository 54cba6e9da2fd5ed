//! The OpenAI upstream as the proxy calls it: a caller of the Responses API is sent on
//! over the Responses API (its body back as it came), every other caller over Chat
//! Completions.

use std::task::{Context, Poll};

use tower::Service;

use crate::client::{ResponseFuture, StreamFuture};
use crate::error::ProviderError;
use crate::openai::OpenAi;
use crate::openai::responses::{ResponsesApi, responses_of};
use crate::stream::{ChatStream, Streaming};
use crate::{ChatRequest, ChatResponse, WireFormat};

/// One OpenAI client's settings, as both of its APIs.
#[derive(Clone, Debug)]
pub(crate) struct OpenAiByFormat {
    chat: OpenAi,
    responses: crate::client::Client<ResponsesApi>,
}

impl OpenAiByFormat {
    pub(crate) fn new(chat: OpenAi) -> Self {
        let responses = responses_of(&chat);
        Self { chat, responses }
    }
}

/// Whether `req` came in the Responses format, and goes back in it.
fn responses(req: &ChatRequest) -> bool {
    req.params.extra_format == Some(WireFormat::Responses)
}

impl Service<ChatRequest> for OpenAiByFormat {
    type Response = ChatResponse;
    type Error = ProviderError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProviderError>> {
        // Both share one transport: ready when both are.
        match Service::<ChatRequest>::poll_ready(&mut self.chat, cx) {
            Poll::Ready(Ok(())) => Service::<ChatRequest>::poll_ready(&mut self.responses, cx),
            other => other,
        }
    }

    fn call(&mut self, req: ChatRequest) -> ResponseFuture {
        if responses(&req) {
            self.responses.call(req)
        } else {
            self.chat.call(req)
        }
    }
}

impl Service<Streaming> for OpenAiByFormat {
    type Response = ChatStream;
    type Error = ProviderError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ProviderError>> {
        match Service::<Streaming>::poll_ready(&mut self.chat, cx) {
            Poll::Ready(Ok(())) => Service::<Streaming>::poll_ready(&mut self.responses, cx),
            other => other,
        }
    }

    fn call(&mut self, req: Streaming) -> StreamFuture {
        if responses(&req.0) {
            self.responses.call(req)
        } else {
            self.chat.call(req)
        }
    }
}
