//! Clearing old tool results in place.
//!
//! ```
//! use llm_context_layers::clear::ClearLayer;
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, Message, ToolCall};
//! use serde_json::json;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = ContextPolicy::default()
//!     .with_max_tokens(500)
//!     .with_reserve_tokens(100)
//!     .with_preserve_tool_results(1);
//! let mut messages = vec![Message::user("audit the logs")];
//! for i in 0..3 {
//!     let id = format!("c{i}");
//!     messages.push(Message::assistant_tool_calls("", vec![ToolCall::new(&id, "read_log", json!({"n": i}))]));
//!     messages.push(Message::tool_result(&id, "read_log", "log line ".repeat(100)));
//! }
//! let model = ClearLayer::new(policy).unwrap().layer(MockModel::echo());
//! let reply = model.oneshot(ChatRequest::new("mock", messages)).await.unwrap();
//! assert_eq!(reply.report.cleared_observations, 2);
//! assert_eq!(reply.report.removed_messages, 0);
//! # }
//! ```
//!
//! A cleared result keeps its role, `tool_call_id` and `name`, so the model still sees what
//! it called and the provider's call/result pairing holds; only the content becomes a
//! small JSON stub saying what was there and, when an artifact store is configured, the id
//! of the artifact that holds it. Used alone, this layer clears what it may until the
//! request fits and never fails; [`ContextPolicyLayer`](crate::ContextPolicyLayer) combines
//! it with pruning and enforces the limit.

use std::task::{Context, Poll};

use serde::Serialize;
use tower::{Layer, Service};

use crate::BoxError;
use crate::fit::{Fit, Stages};
pub use crate::future::ResponseFuture;
use crate::message::Message;
use crate::policy::{ContextPolicy, PolicyError};
use crate::request::{ChatRequest, ChatResponse};
use crate::tokens::char_count;

const STUB_INSTRUCTIONS: &str =
    "Older tool result cleared to fit the context window. Call the tool again if you need it.";
const STUB_INSTRUCTIONS_ARTIFACT: &str = "Older tool result cleared to fit the context window. \
Call read_context_artifact with this artifact_id to read it back.";

#[derive(Serialize)]
struct Stub<'a> {
    context_cleared: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    original_chars: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    context_artifact: Option<&'a str>,
    instructions: &'static str,
}

/// Whether `text` is a stub written by this layer.
pub fn is_stub(text: &str) -> bool {
    text.starts_with("{\"context_cleared\":true")
}

/// The stub that replaces `message`'s content; `artifact` is the id of an artifact that
/// holds the full content, when there is one.
pub fn render_stub(message: &Message, artifact: Option<&str>) -> String {
    stub_text(
        message.name.as_deref(),
        char_count(&message.content.text()),
        artifact,
    )
}

/// The stub for a result of `tool` that had `original_chars` characters.
pub(crate) fn stub_text(
    tool: Option<&str>,
    original_chars: usize,
    artifact: Option<&str>,
) -> String {
    let stub = Stub {
        context_cleared: true,
        tool,
        original_chars,
        context_artifact: artifact,
        instructions: if artifact.is_some() {
            STUB_INSTRUCTIONS_ARTIFACT
        } else {
            STUB_INSTRUCTIONS
        },
    };
    serde_json::to_string(&stub).expect("stub serialises")
}

/// Clears old tool results until the request fits. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ClearLayer {
    policy: ContextPolicy,
}

impl ClearLayer {
    /// A layer for a policy; fails when the policy does not validate.
    pub fn new(policy: ContextPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(Self { policy })
    }
}

impl<S> Layer<S> for ClearLayer {
    type Service = Clear<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Clear {
            fit: Fit::new(inner, self.policy.clone(), Stages::CLEAR),
        }
    }
}

/// The service of [`ClearLayer`].
#[derive(Clone, Debug)]
pub struct Clear<S> {
    fit: Fit<S>,
}

impl<S> Clear<S> {
    /// Wraps `inner`; fails when the policy does not validate.
    pub fn new(inner: S, policy: ContextPolicy) -> Result<Self, PolicyError> {
        Ok(ClearLayer::new(policy)?.layer(inner))
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.fit.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.fit.get_mut()
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.fit.into_inner()
    }
}

impl<S> Service<ChatRequest> for Clear<S>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.fit.poll_ready(cx)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        self.fit.call(req)
    }
}
