//! A deterministic, offline model for examples, tests and the quick start.
//!
//! ```
//! use llm_context_layers::mock::{MockModel, MockReply};
//! use llm_context_layers::{ChatRequest, Message, ToolCall};
//! use serde_json::json;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let model = MockModel::scripted([
//!     MockReply::tool_calls([ToolCall::new("c1", "search", json!({"q": "cert"}))]),
//!     MockReply::text("The certificate expires on 2026-08-01."),
//! ]);
//! let first = model.clone().oneshot(ChatRequest::new("mock", vec![Message::user("check")])).await.unwrap();
//! assert_eq!(first.message.tool_calls[0].name, "search");
//! let second = model.clone().oneshot(ChatRequest::new("mock", vec![Message::user("check")])).await.unwrap();
//! assert_eq!(second.message.text(), "The certificate expires on 2026-08-01.");
//! assert_eq!(model.calls(), 2);
//! # }
//! ```
//!
//! Replies come from a script, in order, or from a function of the request. Usage is the
//! estimate of what the model was sent, so reports and costs have real numbers offline.
//! Clones share the script and the record of what was seen.
//!
//! [`Capture`] is the other terminal service here: it keeps only the last request and
//! answers with an empty message, for tools that show what the stack would send (the
//! CLI's `prepare`, `simulate`) without holding every prompt of a long run.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tower::Service;

use crate::model::{ChatRequest, ChatResponse, Usage};
use crate::model::{Message, ToolCall};
use crate::stream::{ChatStream, Streaming};
use crate::tokens::estimate_message_tokens;

/// One scripted reply.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MockReply {
    /// A text answer.
    Text(String),
    /// Tool calls (with optional text).
    ToolCalls(String, Vec<ToolCall>),
    /// A failed call with this message.
    Error(String),
}

impl MockReply {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        MockReply::Text(text.into())
    }

    /// Tool calls.
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        MockReply::ToolCalls(String::new(), calls.into_iter().collect())
    }
}

/// The error of a mock call: a scripted error, or an exhausted script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("mock model: {0}")]
pub struct MockError(pub String);

type ReplyFn = dyn Fn(&ChatRequest) -> MockReply + Send + Sync;

enum Source {
    Script(Mutex<VecDeque<MockReply>>),
    Function(Box<ReplyFn>),
}

struct State {
    source: Source,
    seen: Mutex<Vec<ChatRequest>>,
}

/// A deterministic offline model. See the [module docs](self).
#[derive(Clone)]
pub struct MockModel {
    state: Arc<State>,
}

impl fmt::Debug for MockModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockModel")
            .field("calls", &self.calls())
            .finish()
    }
}

impl MockModel {
    fn from_source(source: Source) -> Self {
        Self {
            state: Arc::new(State {
                source,
                seen: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Replies from a script, in order; a call past its end fails with [`MockError`].
    pub fn scripted(replies: impl IntoIterator<Item = MockReply>) -> Self {
        Self::from_source(Source::Script(Mutex::new(replies.into_iter().collect())))
    }

    /// Replies with `f(request)`.
    pub fn from_fn(f: impl Fn(&ChatRequest) -> MockReply + Send + Sync + 'static) -> Self {
        Self::from_source(Source::Function(Box::new(f)))
    }

    /// Replies with a line describing what it was sent:
    /// `saw N messages; last: <text of the last message>`.
    pub fn echo() -> Self {
        Self::from_fn(|req| {
            let last = req
                .messages
                .last()
                .map(|m| m.text().into_owned())
                .unwrap_or_default();
            MockReply::Text(format!("saw {} messages; last: {last}", req.messages.len()))
        })
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.lock_seen().len()
    }

    /// The requests received, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock_seen().clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<ChatRequest> {
        self.lock_seen().last().cloned()
    }

    fn lock_seen(&self) -> std::sync::MutexGuard<'_, Vec<ChatRequest>> {
        // A panic elsewhere while holding the lock leaves the Vec valid; keep going.
        self.state
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn reply(&self, req: &ChatRequest) -> MockReply {
        match &self.state.source {
            Source::Script(script) => script
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
                .unwrap_or_else(|| MockReply::Error("the script has no more replies".into())),
            Source::Function(f) => f(req),
        }
    }
}

impl Service<ChatRequest> for MockModel {
    type Response = ChatResponse;
    type Error = MockError;
    type Future = std::future::Ready<Result<ChatResponse, MockError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        std::future::ready(self.respond(req))
    }
}

/// Streams the reply it would have given: its text in pieces, its tool calls, its usage,
/// then the response (see [`ChatStream::replay`]).
impl Service<Streaming> for MockModel {
    type Response = ChatStream;
    type Error = MockError;
    type Future = std::future::Ready<Result<ChatStream, MockError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        std::future::ready(self.respond(req.0).map(ChatStream::replay))
    }
}

impl MockModel {
    fn respond(&self, req: ChatRequest) -> Result<ChatResponse, MockError> {
        let reply = self.reply(&req);
        let input = req.estimate_tokens();
        self.lock_seen().push(req);
        let message = match reply {
            MockReply::Text(text) => Message::assistant(text),
            MockReply::ToolCalls(text, calls) => Message::assistant_tool_calls(text, calls),
            MockReply::Error(e) => return Err(MockError(e)),
        };
        let output = estimate_message_tokens(std::slice::from_ref(&message));
        let usage = Usage::new(input as u64, output as u64, 0, 0);
        Ok(ChatResponse::new(message).with_usage(usage))
    }
}

/// A terminal service that keeps the last request it was sent and answers every call
/// with an empty assistant message: what the stack would send, without a model and
/// without keeping every earlier request ([`MockModel`] keeps them all).
///
/// ```
/// use llm_context_layers::mock::Capture;
/// use llm_context_layers::{ChatRequest, Message};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let capture = Capture::default();
/// let req = ChatRequest::new("m", vec![Message::user("hi")]);
/// capture.clone().oneshot(req.clone()).await.unwrap();
/// assert_eq!(capture.take(), Some(req));
/// assert_eq!(capture.take(), None);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Capture {
    last: Arc<Mutex<Option<ChatRequest>>>,
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture").finish_non_exhaustive()
    }
}

impl Capture {
    /// The last request received, taken out (`None` until the next call).
    pub fn take(&self) -> Option<ChatRequest> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Service<ChatRequest> for Capture {
    type Response = ChatResponse;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<ChatResponse, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(req);
        std::future::ready(Ok(ChatResponse::new(Message::assistant(""))))
    }
}
