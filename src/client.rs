//! What the provider clients share: configuration errors, settings from the environment,
//! base URLs, building a JSON request, and reading a response into a typed body or a
//! [`ProviderError`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Provider, ProviderError, ProviderErrorKind};
use crate::transport::{HttpRequest, HttpResponse, TransportError, TransportErrorKind};
use llm_context_layers::ChatResponse;

/// The response future of a provider client's `Service<ChatRequest>`: the neutral
/// response, or a [`ProviderError`].
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<ChatResponse, ProviderError>> + Send>>;

/// A client that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The API key is not set.
    #[error("no API key: set {var} or pass one to the builder")]
    MissingApiKey {
        /// The environment variable that would have held it.
        var: &'static str,
    },
    /// The base URL is not an absolute `http(s)://` URL.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL given.
        url: String,
        /// Why it does not work.
        reason: String,
    },
    /// The HTTP client could not be set up.
    #[error("cannot set up the HTTP client: {0}")]
    Transport(#[from] TransportError),
}

/// The settings every builder has.
#[derive(Default)]
pub(crate) struct Settings {
    pub(crate) base_url: Option<String>,
    pub(crate) api_key: Option<SecretString>,
    pub(crate) timeout: Option<Duration>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Settings {
    /// The base URL and API key from the environment variables `base_url_var` and
    /// `api_key_var` (an unset or blank variable leaves the setting unset); no timeout.
    pub(crate) fn from_env(base_url_var: &str, api_key_var: &str) -> Self {
        Self {
            base_url: env(base_url_var),
            api_key: env(api_key_var).map(SecretString::from),
            timeout: None,
        }
    }
}

/// Reads an environment variable, treating an empty value as unset.
fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// Checks a base URL and drops trailing slashes, so `{base}/path` has exactly one.
pub(crate) fn base_url(url: &str) -> Result<String, ConfigError> {
    let invalid = |reason: &str| ConfigError::InvalidBaseUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = url.trim().trim_end_matches('/');
    let uri: http::Uri = trimmed.parse().map_err(|_| invalid("not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(invalid("the scheme must be http or https")),
    }
    if uri.authority().is_none() {
        return Err(invalid("no host"));
    }
    if uri.query().is_some() {
        return Err(invalid("a base URL takes no query"));
    }
    Ok(trimmed.to_owned())
}

/// A JSON POST of `body` to `url`, serialized once. Each header is `(name, value,
/// sensitive)`; values built from a key are marked sensitive, so `http`'s and hyper's
/// `Debug` output leave them out. A body or header that cannot be sent is an
/// [`unsupported`] error (nothing was sent), whose message names the header, never its
/// value.
pub(crate) fn post_json(
    provider: Provider,
    url: &str,
    headers: &[(&'static str, String, bool)],
    body: &impl Serialize,
) -> Result<HttpRequest, ProviderError> {
    let bytes = serde_json::to_vec(body).map_err(|e| unsupported(provider, e.to_string()))?;
    let mut builder =
        http::Request::post(url).header(http::header::CONTENT_TYPE, "application/json");
    for (name, value, sensitive) in headers {
        let mut v = http::HeaderValue::from_str(value)
            .map_err(|_| unsupported(provider, format!("the {name} header value is not valid")))?;
        v.set_sensitive(*sensitive);
        builder = builder.header(*name, v);
    }
    builder
        .body(Bytes::from(bytes))
        .map_err(|e| unsupported(provider, e.to_string()))
}

/// Awaits a request the transport is sending (`sent`), then reads the response into
/// `T` as [`read_response`] does; a transport failure becomes a [`ProviderError`].
pub(crate) async fn exchange<T: DeserializeOwned>(
    provider: Provider,
    sent: impl Future<Output = Result<HttpResponse, TransportError>>,
    key: Option<&SecretString>,
) -> Result<T, ProviderError> {
    let resp = sent.await.map_err(|e| transport_error(provider, e))?;
    read_response(provider, resp, key)
}

/// A transport failure as a provider error.
pub(crate) fn transport_error(provider: Provider, e: TransportError) -> ProviderError {
    let kind = match e.kind {
        TransportErrorKind::Timeout => ProviderErrorKind::Timeout,
        TransportErrorKind::Connect | TransportErrorKind::Body => ProviderErrorKind::Connection,
        _ => ProviderErrorKind::Other,
    };
    ProviderError::new(provider, kind, e.to_string())
}

/// The typed body of a success, or the provider's error (with `key` redacted from it).
fn read_response<T: DeserializeOwned>(
    provider: Provider,
    resp: HttpResponse,
    key: Option<&SecretString>,
) -> Result<T, ProviderError> {
    let secret = key.map(|k| k.expose_secret());
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        return Err(ProviderError::from_response(
            provider,
            status,
            resp.headers(),
            resp.body(),
            secret,
        ));
    }
    serde_json::from_slice(resp.body()).map_err(|e| {
        let mut err = ProviderError::new(
            provider,
            ProviderErrorKind::InvalidResponse,
            format!("the response body is not the expected JSON: {e}"),
        )
        .with_raw_body(crate::error::raw_body(resp.body(), secret));
        err.status = Some(status);
        err
    })
}

/// A request that could not be converted; nothing was sent.
pub(crate) fn unsupported(provider: Provider, message: impl Into<String>) -> ProviderError {
    ProviderError::new(provider, ProviderErrorKind::Unsupported, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(
            base_url("https://api.openai.com/v1/").unwrap(),
            "https://api.openai.com/v1"
        );
        assert_eq!(
            base_url("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(base_url("api.openai.com").is_err());
        assert!(base_url("ftp://x").is_err());
        assert!(base_url("https://x/v1?a=b").is_err());
    }
}
