//! A caller's request passed on to a client's provider unchanged but for the credentials:
//! what the proxy does for the routes it does not manage (`/v1/models`, embeddings,
//! files, batches).

use std::sync::Arc;

use tower::{Service, ServiceExt};

use super::{Api, BodyHeaders, Client, Headers, request, transport_error};
use crate::catalog::Provider;
use crate::error::ProviderError;
use crate::redact::Redactor;
use crate::stream::Streaming;
use crate::transport::{HttpStreamResponse, RequestBody, ReqwestTransport};

/// One provider's relay: its base URL, its credentials and configured headers, and the
/// transport, taken from a client.
#[derive(Clone)]
pub(crate) struct Relay {
    provider: Provider,
    base_url: String,
    /// The head of a caller's path that the base URL holds already (`/v1` for OpenAI,
    /// whose base URL ends with it).
    held: &'static str,
    /// `(name, value, sensitive)`, as the client sends them.
    credentials: Arc<[(&'static str, String, bool)]>,
    configured: http::HeaderMap,
    redactor: Redactor,
    transport: ReqwestTransport,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl<A: Api> Client<A, ReqwestTransport> {
    /// The relay of this client's provider: `held` is the head of a caller's path its
    /// base URL holds already.
    pub(crate) fn relay(&self, held: &'static str) -> Relay {
        let credentials = A::credentials(self.state.api_key.as_ref(), &self.state.options);
        Relay {
            provider: A::PROVIDER,
            base_url: self.state.base_url.clone(),
            held,
            credentials: credentials.into(),
            configured: self.state.headers.clone(),
            redactor: self.state.reading.redactor.clone(),
            transport: self.transport.clone(),
        }
    }
}

impl Relay {
    /// Sends `method path?query` with `body` and the caller's `forwarded` headers (its
    /// content type among them), the credentials replaced by the client's; the answer
    /// as it comes, its body streamed.
    pub(crate) async fn send<'a>(
        &self,
        method: http::Method,
        path_and_query: &str,
        forwarded: impl Iterator<Item = (&'a str, &'a str)>,
        content: BodyHeaders,
        body: RequestBody,
    ) -> Result<HttpStreamResponse, ProviderError> {
        let path = path_and_query
            .strip_prefix(self.held)
            .filter(|rest| rest.starts_with('/'))
            .unwrap_or(path_and_query);
        let url = format!("{}{path}", self.base_url);
        let headers = Headers {
            own: &self.credentials,
            configured: &self.configured,
            forwarded,
        };
        let http = request(self.provider, method, &url, headers, content, body)?;
        let mut transport = self.transport.clone();
        let ready = ServiceExt::<Streaming<_>>::ready(&mut transport)
            .await
            .map_err(|e| transport_error(self.provider, e, &self.redactor))?;
        ready
            .call(Streaming(http))
            .await
            .map_err(|e| transport_error(self.provider, e, &self.redactor))
    }
}
