//! The provider clients' one shape: a [`Client`] of an [`Api`], built by a [`Builder`].
//!
//! ```
//! # fn main() -> Result<(), llm_context::ConfigError> {
//! use llm_context::anthropic::Anthropic;
//! use llm_context::client::Client;
//! use llm_context::openai::{ChatCompletionsApi, OpenAi};
//!
//! // `OpenAi` is `Client<ChatCompletionsApi>`; the builder settings are every API's.
//! let openai: Client<ChatCompletionsApi> = OpenAi::builder()
//!     .base_url("http://127.0.0.1:11434/v1/")
//!     .build()?;
//! assert_eq!(openai.base_url(), "http://127.0.0.1:11434/v1");
//!
//! let anthropic = Anthropic::builder().api_key("sk-ant-example").build()?;
//! assert_eq!(anthropic.base_url(), "https://api.anthropic.com");
//! assert!(!format!("{anthropic:?}").contains("sk-ant-example"));
//! # Ok(()) }
//! ```
//!
//! What tells the APIs apart (base URL, environment variables, credential headers, the
//! body written and read, the stream decoder) is the [`Api`] implementation, as
//! async-openai's `Config` is; the builder, the accessors, `Debug` and both `Service`
//! impls are written once, here.

mod api;
mod builder;
#[cfg(feature = "serve")]
mod relay;
mod transfer;

use std::sync::Arc;
use std::task::{Context, Poll};

use secrecy::SecretString;
use tower::Service;

pub use api::Api;
pub(crate) use api::Speaks;
pub use builder::{Builder, ConfigError};
#[cfg(feature = "serve")]
pub(crate) use relay::Relay;
pub use transfer::ResponseFuture;
#[cfg(feature = "serve")]
pub(crate) use transfer::{BodyHeaders, NOT_FORWARDED, request};
pub(crate) use transfer::{
    Headers, Reading, Settings, base_url, cannot_cross, env, exchange, log_request, poll_transport,
    post_json, provider_fields, transport_error, unsupported,
};

use crate::error::ProviderError;
use crate::sse;
pub use crate::sse::StreamFuture;
use crate::transport::{
    HttpRequest, HttpResponse, HttpStreamResponse, RequestBody, ReqwestTransport, TransportError,
};
use llm_context_layers::stream::{ChatStream, Streaming};
use llm_context_layers::{ChatRequest, ChatResponse};

/// A provider client: a `Service<ChatRequest>` (and `Service<Streaming>`) speaking the
/// API `A` over the transport `T` (reqwest by default). Use it by its API's name:
/// [`OpenAi`](crate::openai::OpenAi), [`Anthropic`](crate::anthropic::Anthropic). See the
/// [module docs](self).
///
/// Cloning is cheap: the settings are shared, the transport cloned.
pub struct Client<A: Api, T = ReqwestTransport> {
    pub(crate) transport: T,
    pub(crate) state: Arc<State<A>>,
}

/// A built client's settings, shared by its clones.
pub(crate) struct State<A: Api> {
    base_url: String,
    /// `base_url` as it may be shown (its password masked).
    shown_url: String,
    /// `{base_url}{A::PATH}`.
    endpoint: String,
    api_key: Option<SecretString>,
    /// Extra headers (organization, project, `anthropic-beta`, a gateway's own).
    headers: http::HeaderMap,
    pub(crate) options: A::Options,
    pub(crate) reading: Reading,
}

impl<A: Api> AsRef<Reading> for State<A> {
    fn as_ref(&self) -> &Reading {
        &self.reading
    }
}

impl<A: Api, T: Clone> Clone for Client<A, T> {
    fn clone(&self) -> Self {
        Self {
            transport: self.transport.clone(),
            state: self.state.clone(),
        }
    }
}

impl<A: Api, T> std::fmt::Debug for Client<A, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(A::NAME)
            .field("base_url", &self.state.shown_url)
            .field(
                "api_key",
                &self.state.api_key.as_ref().map(|_| "[REDACTED]"),
            )
            .field("options", &self.state.options)
            .field("max_response_bytes", &self.state.reading.max_response_bytes)
            .finish_non_exhaustive()
    }
}

impl<A: Api> Client<A> {
    /// A client configured from the API's environment variables:
    /// [`Builder::from_env`], built.
    pub fn from_env() -> Result<Self, ConfigError> {
        Builder::from_env().build()
    }

    /// A builder.
    pub fn builder() -> Builder<A> {
        Builder::default()
    }
}

impl<A: Api, T> Client<A, T> {
    /// The base URL requests go to, as configured: with its password, if it has one.
    /// `Debug` output and errors show it masked.
    pub fn base_url(&self) -> &str {
        &self.state.base_url
    }

    /// A client of the API `B` with this one's settings (base URL, key, headers, body
    /// limit, transport): the same provider's other API.
    #[cfg(feature = "serve")]
    pub(crate) fn sibling<B>(&self) -> Client<B, T>
    where
        B: Api<Options = A::Options>,
        A::Options: Clone,
        T: Clone,
    {
        let s = &self.state;
        Client {
            transport: self.transport.clone(),
            state: Arc::new(State {
                base_url: s.base_url.clone(),
                shown_url: s.shown_url.clone(),
                endpoint: format!("{}{}", s.base_url, B::PATH),
                api_key: s.api_key.clone(),
                headers: s.headers.clone(),
                options: s.options.clone(),
                reading: s.reading.clone(),
            }),
        }
    }

    /// The same client over another transport.
    pub fn with_transport<U>(self, transport: U) -> Client<A, U> {
        Client {
            transport,
            state: self.state,
        }
    }

    /// The transport.
    pub fn get_ref(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The transport, consuming the client.
    pub fn into_inner(self) -> T {
        self.transport
    }

    /// A JSON POST of `body` to `url` with the credentials and extra headers, and a
    /// caller's headers passed on after the client's own (see [`post_json`]); with its
    /// `content-encoding` when it is sent compressed as a caller compressed it.
    pub(crate) fn post_with<'a>(
        &self,
        url: &str,
        (body, encoding): (RequestBody, Option<http::HeaderValue>),
        forwarded: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<HttpRequest, ProviderError> {
        let credentials = A::credentials(self.state.api_key.as_ref(), &self.state.options);
        let headers = Headers {
            own: &credentials,
            configured: &self.state.headers,
            forwarded,
        };
        post_json(A::PROVIDER, url, headers, body, encoding)
    }

    /// The API's call of `req`, asking for a stream when `stream`: to the endpoint with
    /// the caller's query when it came in this API's format, with the caller's headers
    /// this API may be sent.
    fn http_request(&self, req: &ChatRequest, stream: bool) -> Result<HttpRequest, ProviderError> {
        let body = A::body(req, &self.state.options, stream)?;
        let body = A::encode(body).map_err(|e| unsupported(A::PROVIDER, e.to_string()))?;
        // A proxied body the stack left as the client sent it goes as the client's
        // compressed bytes, if it came compressed.
        #[cfg(feature = "serve")]
        let body = crate::wire::served::Encoded::choose(req.params.origin.as_ref(), body);
        #[cfg(not(feature = "serve"))]
        let body = (body, None);
        let forwarded = req.params.headers_for(A::FORMAT);
        match req.params.query_for(A::FORMAT) {
            Some(query) => {
                let url = format!("{}?{query}", self.state.endpoint);
                self.post_with(&url, body, forwarded)
            }
            None => self.post_with(&self.state.endpoint, body, forwarded),
        }
    }
}

impl<A: Api, T> Service<ChatRequest> for Client<A, T>
where
    T: Service<HttpRequest, Response = HttpResponse, Error = TransportError>,
    T::Future: Send + 'static,
{
    type Response = ChatResponse;
    type Error = ProviderError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        poll_transport(
            &mut self.transport,
            cx,
            A::PROVIDER,
            &self.state.reading.redactor,
        )
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let http = match self.http_request(&req, false) {
            Ok(h) => h,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        log_request(A::PROVIDER, &req, false);
        let sent = self.transport.call(http);
        let state = self.state.clone();
        Box::pin(async move {
            let body: A::Response = exchange(A::PROVIDER, sent, &state.reading).await?;
            A::response(body)
        })
    }
}

/// A streamed call: see [`stream`](llm_context_layers::stream). The future resolves once
/// the first event has been read; what fails before that (an error status, a cut
/// connection) is its error, so a retry layer retries only before anything reached the
/// caller. An error event of the provider's is a typed error item.
impl<A: Api, T> Service<Streaming> for Client<A, T>
where
    T: Service<Streaming<HttpRequest>, Response = HttpStreamResponse, Error = TransportError>,
    T::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ProviderError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        poll_transport(
            &mut self.transport,
            cx,
            A::PROVIDER,
            &self.state.reading.redactor,
        )
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let http = self.http_request(&req.0, true);
        sse::call(
            (A::PROVIDER, A::FORMAT),
            &mut self.transport,
            &req.0,
            http,
            self.state.clone(),
            A::Decoder::default(),
        )
    }
}
