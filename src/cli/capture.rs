//! A terminal service that keeps the request it receives, so the CLI can show what the
//! real stack would send without calling a model.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use llm_context::{ChatRequest, ChatResponse, Message};
use tower::Service;

#[derive(Clone, Default)]
pub(crate) struct Capture {
    seen: Arc<Mutex<Option<ChatRequest>>>,
}

impl Capture {
    pub(crate) fn take(&self) -> Option<ChatRequest> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Service<ChatRequest> for Capture {
    type Response = ChatResponse;
    type Error = Infallible;
    type Future = std::future::Ready<Result<ChatResponse, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(req);
        std::future::ready(Ok(ChatResponse::new(Message::assistant(""))))
    }
}
