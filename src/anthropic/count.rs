//! Anthropic's token-counting endpoint as a [`TokenCounter`].

use async_trait::async_trait;
use tower::{Service, ServiceExt};

use super::client::Anthropic;
use crate::BoxError;
use crate::catalog::Provider;
use crate::client::exchange;
use crate::transport::{HttpRequest, HttpResponse, ReqwestTransport, TransportError};
use crate::wire::messages::convert::{Rendered, render};
use crate::wire::messages::types::{CountTokensRequest, CountTokensResponse};
use llm_context_layers::tokens::TokenCounter;
use llm_context_layers::{CacheHints, Message, ToolSpec};

/// Counts tokens exactly with `POST /v1/messages/count_tokens` for one model. There is
/// no offline tokenizer for Claude 3 and later, so this is the exact count; each call is
/// an HTTP request (free of charge, but rate-limited).
///
/// ```no_run
/// use llm_context::anthropic::{Anthropic, AnthropicTokenCounter};
/// use llm_context::tokens::TokenCounter;
/// use llm_context::Message;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
/// let counter = AnthropicTokenCounter::new(Anthropic::from_env()?, "claude-sonnet-4-6");
/// let n = counter.count_messages(&[Message::user("How long is this?")]).await?;
/// println!("{n} tokens");
/// # Ok(()) }
/// ```
///
/// Leading system messages are counted as the system prompt, as the client sends them.
/// An empty transcript is 0 without a call. Tool definitions are counted as the
/// difference between a one-message request with and without them.
#[derive(Clone, Debug)]
pub struct AnthropicTokenCounter<T = ReqwestTransport> {
    client: Anthropic<T>,
    model: String,
}

impl<T> AnthropicTokenCounter<T> {
    /// A counter for `model` through `client`.
    pub fn new(client: Anthropic<T>, model: impl Into<String>) -> Self {
        Self {
            client,
            model: model.into(),
        }
    }
}

impl<T> AnthropicTokenCounter<T>
where
    T: Service<HttpRequest, Response = HttpResponse, Error = TransportError> + Clone + Send + Sync,
    T::Future: Send,
{
    async fn count(&self, messages: &[Message], tools: &[ToolSpec]) -> Result<usize, BoxError> {
        let Rendered {
            system,
            messages,
            tools,
        } = render(None, messages, tools, CacheHints::NONE, false)?;
        let body = CountTokensRequest {
            model: self.model.clone(),
            messages,
            system,
            tools,
        };
        let http = self.client.post("/v1/messages/count_tokens", &body)?;
        let sent = self.client.transport.clone().oneshot(http);
        let counted: CountTokensResponse =
            exchange(Provider::Anthropic, sent, &self.client.state.reading).await?;
        Ok(usize::try_from(counted.input_tokens).unwrap_or(usize::MAX))
    }
}

#[async_trait]
impl<T> TokenCounter for AnthropicTokenCounter<T>
where
    T: Service<HttpRequest, Response = HttpResponse, Error = TransportError> + Clone + Send + Sync,
    T::Future: Send,
{
    async fn count_messages(&self, messages: &[Message]) -> Result<usize, BoxError> {
        if messages.is_empty() {
            return Ok(0);
        }
        self.count(messages, &[]).await
    }

    async fn count_tools(&self, tools: &[ToolSpec]) -> Result<usize, BoxError> {
        if tools.is_empty() {
            return Ok(0);
        }
        // The endpoint counts whole requests, and a request needs a message.
        let probe = [Message::user("x")];
        let with = self.count(&probe, tools).await?;
        let without = self.count(&probe, &[]).await?;
        Ok(with.saturating_sub(without))
    }
}
