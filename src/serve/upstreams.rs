//! The providers the proxy calls, as a table keyed by [`Provider`]: which one serves a
//! model, and the stack in front of each.

use std::collections::BTreeMap;
use std::task::{Context, Poll};

use tower::util::BoxCloneSyncService;

use crate::catalog::Provider;
use crate::stream::{ChatStream, Streaming};
use crate::{BoxError, Catalog, ChatRequest, ChatResponse};

type Plain = BoxCloneSyncService<ChatRequest, ChatResponse, BoxError>;
type Streamed = BoxCloneSyncService<Streaming, ChatStream, BoxError>;

/// One service for both kinds of call, boxed once for each: a provider's client as
/// given to the builder, and the stack built in front of it for each policy.
#[derive(Clone)]
pub(crate) struct Upstream {
    plain: Plain,
    streamed: Streamed,
}

impl Upstream {
    pub(crate) fn new<S>(service: S) -> Self
    where
        S: tower::Service<ChatRequest, Response = ChatResponse, Error = BoxError>
            + tower::Service<Streaming, Response = ChatStream, Error = BoxError>
            + Clone
            + Send
            + Sync
            + 'static,
        <S as tower::Service<ChatRequest>>::Future: Send + 'static,
        <S as tower::Service<Streaming>>::Future: Send + 'static,
    {
        Self {
            plain: BoxCloneSyncService::new(service.clone()),
            streamed: BoxCloneSyncService::new(service),
        }
    }
}

impl tower::Service<ChatRequest> for Upstream {
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = <Plain as tower::Service<ChatRequest>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.plain.poll_ready(cx)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        self.plain.call(req)
    }
}

impl tower::Service<Streaming> for Upstream {
    type Response = ChatStream;
    type Error = BoxError;
    type Future = <Streamed as tower::Service<Streaming>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.streamed.poll_ready(cx)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        self.streamed.call(req)
    }
}

/// Services keyed by the provider they call.
pub(crate) type Table<T> = BTreeMap<Provider, T>;

/// Which provider serves `model`: the first of `routes` (longest first) that prefixes
/// its name, else the catalog's provider, else Anthropic for a `claude-…` name and
/// OpenAI for any other (an OpenAI-compatible server serves whatever names it knows).
pub(crate) fn provider_of(
    routes: &[(String, Provider)],
    catalog: &Catalog,
    model: &str,
) -> Provider {
    routes
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix.as_str()))
        .map(|(_, p)| *p)
        .or_else(|| catalog.get(model).and_then(|m| m.provider))
        .unwrap_or(if model.starts_with("claude-") {
            Provider::Anthropic
        } else {
            Provider::OpenAi
        })
}

/// The 400 message for a model whose provider has no upstream here.
pub(crate) fn no_upstream(model: &str, provider: Provider) -> String {
    format!(
        "the model {model:?} is served by the provider {provider}, which this server has no \
         upstream for (its API key is not set in the server's environment)"
    )
}
