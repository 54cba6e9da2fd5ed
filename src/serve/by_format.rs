//! The OpenAI upstream as the proxy calls it: a caller of the Responses API is sent on
//! over the Responses API (its body back as it came), and so is any caller of a model the
//! catalog says is served there only ([`Catalog::responses_only`]); every other caller
//! over Chat Completions.

use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tower::Service;

use crate::client::{ResponseFuture, StreamFuture};
use crate::error::ProviderError;
use crate::openai::OpenAi;
use crate::openai::responses::{ResponsesApi, responses_of};
use crate::stream::{ChatStream, Streaming};
use crate::{Catalog, ChatRequest, ChatResponse, WireFormat};

/// The catalog the proxy is built with, set once it is (the upstream is given first).
pub(crate) type CatalogCell = Arc<OnceLock<Arc<Catalog>>>;

/// One OpenAI client's settings, as both of its APIs.
#[derive(Clone, Debug)]
pub(crate) struct OpenAiByFormat {
    chat: OpenAi,
    responses: crate::client::Client<ResponsesApi>,
    catalog: CatalogCell,
}

impl OpenAiByFormat {
    pub(crate) fn new(chat: OpenAi, catalog: CatalogCell) -> Self {
        let responses = responses_of(&chat);
        Self {
            chat,
            responses,
            catalog,
        }
    }

    /// Whether `req` goes over the Responses API: it came in that format, or its model
    /// is served there only.
    fn responses(&self, req: &ChatRequest) -> bool {
        req.params.extra_format == Some(WireFormat::Responses)
            || self
                .catalog
                .get_or_init(Catalog::builtin)
                .responses_only(&req.model)
    }
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
        if self.responses(&req) {
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
        if self.responses(&req.0) {
            self.responses.call(req)
        } else {
            self.chat.call(req)
        }
    }
}
