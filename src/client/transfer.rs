//! The HTTP side every client shares: settings from the environment, base URLs, building
//! a JSON request, and reading a response into a typed body or a [`ProviderError`]
//! (every string of which goes through the client's [`Redactor`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;

use super::ConfigError;
use crate::catalog::Provider;
use crate::error::{ProviderError, ProviderErrorKind};
use crate::redact::{Redactor, TEXT_LIMIT};
use crate::transport::{
    DEFAULT_MAX_RESPONSE_BYTES, HttpRequest, HttpResponse, RequestBody, ReqwestTransport,
    TransportError, TransportErrorKind,
};
use llm_context_layers::{ChatRequest, ChatResponse};

/// The response future of a provider client's `Service<ChatRequest>`: the neutral
/// response, or a [`ProviderError`].
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<ChatResponse, ProviderError>> + Send>>;

/// The settings every builder has.
pub(crate) struct Settings {
    pub(crate) base_url: Option<String>,
    pub(crate) api_key: Option<SecretString>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) max_response_bytes: usize,
    /// Extra headers sent with every request, checked when the client is built.
    pub(crate) headers: Vec<(String, SecretString)>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            timeout: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            headers: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redactor = self.redactor("");
        f.debug_struct("Settings")
            .field(
                "base_url",
                &self.base_url.as_deref().map(|u| redactor.url(u)),
            )
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            // Names only: a gateway's header may carry a credential.
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
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
            ..Self::default()
        }
    }

    /// The redactor of a client with these settings, calling the base URL set or else
    /// `default_url`.
    pub(crate) fn redactor(&self, default_url: &str) -> Redactor {
        Redactor::new(
            self.api_key.as_ref(),
            self.base_url.as_deref().unwrap_or(default_url),
        )
    }

    /// The extra headers, checked: a valid name and value, and not one of `reserved`
    /// (the headers the client sets itself, lowercase). Values are marked sensitive, so
    /// `http`'s `Debug` output leaves them out.
    pub(crate) fn header_map(&self, reserved: &[&str]) -> Result<http::HeaderMap, ConfigError> {
        let mut map = http::HeaderMap::new();
        for (name, value) in &self.headers {
            let invalid = |reason: &str| ConfigError::InvalidHeader {
                name: name.clone(),
                reason: reason.to_owned(),
            };
            let n = http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| invalid("not a valid header name"))?;
            if reserved.contains(&n.as_str()) || n == http::header::CONTENT_TYPE {
                return Err(invalid("the client sets this header itself"));
            }
            let mut v = http::HeaderValue::from_str(value.expose_secret())
                .map_err(|_| invalid("the value is not a valid header value"))?;
            v.set_sensitive(true);
            map.append(n, v);
        }
        Ok(map)
    }

    /// The default transport for these settings: their timeout and body limit.
    pub(crate) fn transport(&self) -> Result<ReqwestTransport, ConfigError> {
        Ok(ReqwestTransport::with_timeout(self.timeout)?
            .with_max_body_bytes(self.max_response_bytes))
    }
}

/// What a client needs to read its answers: its redactor and its body limit.
#[derive(Clone, Debug)]
pub(crate) struct Reading {
    pub(crate) redactor: Redactor,
    pub(crate) max_response_bytes: usize,
}

/// Reads an environment variable, treating an empty value as unset.
pub(crate) fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// Checks a base URL and drops trailing slashes, so `{base}/path` has exactly one. An
/// error shows the URL as `redactor` does.
pub(crate) fn base_url(url: &str, redactor: &Redactor) -> Result<String, ConfigError> {
    let invalid = |reason: &str| ConfigError::InvalidBaseUrl {
        url: redactor.url(url),
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

/// The headers of one request, by who set them.
pub(crate) struct Headers<'a, I> {
    /// The client's own, `(name, value, sensitive)`: credentials (sensitive; never
    /// replaced) and settings such as `anthropic-version` (a caller's value replaces).
    pub(crate) own: &'a [(&'static str, String, bool)],
    /// Set on the client by its builder (`organization`, `header`): never replaced.
    pub(crate) configured: &'a http::HeaderMap,
    /// A caller's, passed on (a proxy's client): after the others, each line as it came,
    /// except those naming a header above that may not be replaced, the hop-by-hop ones
    /// and those describing the body (this request has its own).
    pub(crate) forwarded: I,
}

/// Headers a caller's request had that describe its connection or its body, never
/// passed on: the credentials are the client's own, and `accept` and `accept-encoding`
/// are this client's to set (a forwarded `accept-encoding` would ask for a body it does
/// not decompress).
pub(crate) const NOT_FORWARDED: &[&str] = &[
    "authorization",
    "x-api-key",
    "host",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "content-type",
    "content-encoding",
    "accept",
    "accept-encoding",
    "expect",
    "cookie",
];

/// A POST of `body` (JSON, serialized once by the caller) to `url`: [`request`] with the
/// JSON content type, and `encoding` when the bytes are sent compressed as a caller
/// compressed them.
pub(crate) fn post_json<'a>(
    provider: Provider,
    url: &str,
    headers: Headers<'_, impl Iterator<Item = (&'a str, &'a str)>>,
    body: RequestBody,
    encoding: Option<http::HeaderValue>,
) -> Result<HttpRequest, ProviderError> {
    let json = http::HeaderValue::from_static("application/json");
    request(
        provider,
        http::Method::POST,
        url,
        headers,
        BodyHeaders {
            kind: Some(json),
            encoding,
        },
        body,
    )
}

/// The headers that describe a request body, set by the sender, never forwarded from a
/// caller's (`content-type` and `content-encoding` are in [`NOT_FORWARDED`]).
#[derive(Debug, Default)]
pub(crate) struct BodyHeaders {
    /// `content-type`.
    pub(crate) kind: Option<http::HeaderValue>,
    /// `content-encoding`: only for bytes sent as the caller encoded them.
    pub(crate) encoding: Option<http::HeaderValue>,
}

/// A `method` request of `body` to `url`, with the body's own headers (`content`: its
/// type, and its encoding when it is sent compressed as a caller compressed it). Each of
/// the client's own headers is `(name,
/// value, sensitive)`; values built from a key are marked sensitive, so `http`'s and
/// hyper's `Debug` output leave them out. A request or header of the client's own that
/// cannot be sent is an [`unsupported`] error (nothing was sent), whose message names the
/// header, never its value; a forwarded header that cannot be sent is left out.
pub(crate) fn request<'a>(
    provider: Provider,
    method: http::Method,
    url: &str,
    headers: Headers<'_, impl Iterator<Item = (&'a str, &'a str)>>,
    content: BodyHeaders,
    body: RequestBody,
) -> Result<HttpRequest, ProviderError> {
    let mut map = http::HeaderMap::new();
    for (name, value) in [
        (http::header::CONTENT_TYPE, content.kind),
        (http::header::CONTENT_ENCODING, content.encoding),
    ] {
        if let Some(value) = value {
            map.insert(name, value);
        }
    }
    // Never replaced by a caller's: the builder's headers and the credentials.
    let kept = |n: &http::HeaderName| {
        headers.configured.contains_key(n)
            || headers
                .own
                .iter()
                .any(|(own, _, secret)| *secret && n.as_str() == *own)
    };
    let mut forwarded: Vec<(http::HeaderName, http::HeaderValue)> = Vec::new();
    for (name, value) in headers.forwarded {
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) else {
            continue;
        };
        // The proxy's reader leaves these out already; a caller setting
        // `GenerationParams::headers` by hand is held to the same rule here.
        if !NOT_FORWARDED.contains(&name.as_str()) && !kept(&name) {
            forwarded.push((name, value));
        }
    }
    for (name, value, sensitive) in headers.own {
        let replaced = forwarded.iter().any(|(n, _)| n.as_str() == *name);
        if replaced {
            continue;
        }
        let mut v = http::HeaderValue::from_str(value)
            .map_err(|_| unsupported(provider, format!("the {name} header value is not valid")))?;
        v.set_sensitive(*sensitive);
        map.append(*name, v);
    }
    for (name, value) in headers.configured {
        map.append(name, value.clone());
    }
    for (name, value) in forwarded {
        map.append(name, value);
    }
    let mut out = http::Request::builder()
        .method(method)
        .uri(url)
        .body(body)
        .map_err(|e| unsupported(provider, e.to_string()))?;
    *out.headers_mut() = map;
    Ok(out)
}

/// Awaits a request the transport is sending (`sent`), then reads the response into
/// `T` as [`read_response`] does; a transport failure becomes a [`ProviderError`].
pub(crate) async fn exchange<T: DeserializeOwned>(
    provider: Provider,
    sent: impl Future<Output = Result<HttpResponse, TransportError>>,
    reading: &Reading,
) -> Result<T, ProviderError> {
    let resp = sent
        .await
        .map_err(|e| transport_error(provider, e, &reading.redactor))?;
    read_response(provider, resp, reading)
}

/// A transport failure as a provider error, its text redacted (it may name the URL).
pub(crate) fn transport_error(
    provider: Provider,
    e: TransportError,
    redactor: &Redactor,
) -> ProviderError {
    let kind = match e.kind {
        TransportErrorKind::Timeout => ProviderErrorKind::Timeout,
        TransportErrorKind::Connect | TransportErrorKind::Body => ProviderErrorKind::Connection,
        TransportErrorKind::TooLarge => ProviderErrorKind::ResponseTooLarge,
        TransportErrorKind::Redirected => ProviderErrorKind::Redirect,
        _ => ProviderErrorKind::Other,
    };
    ProviderError::new(provider, kind, redactor.text(&e.to_string(), TEXT_LIMIT))
}

/// The typed body of a success, or the provider's error (redacted). A body over the
/// limit is refused here too, for transports that do not enforce it themselves.
fn read_response<T: DeserializeOwned>(
    provider: Provider,
    resp: HttpResponse,
    reading: &Reading,
) -> Result<T, ProviderError> {
    let redactor = &reading.redactor;
    if resp.body().len() > reading.max_response_bytes {
        let e = TransportError::too_large(reading.max_response_bytes);
        return Err(transport_error(provider, e, redactor));
    }
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        return Err(ProviderError::from_response(
            provider,
            status,
            resp.headers(),
            resp.body(),
            redactor,
        ));
    }
    serde_json::from_slice(resp.body()).map_err(|e| {
        // serde's message quotes the value it could not use.
        let message = format!("the response body is not the expected JSON: {e}");
        let mut err = ProviderError::new(
            provider,
            ProviderErrorKind::InvalidResponse,
            redactor.text(&message, TEXT_LIMIT),
        )
        .with_raw_body(crate::error::raw_body(resp.body(), redactor));
        err.status = Some(status);
        err
    })
}

/// Logs a request the client is about to send (no content: the model and the size).
pub(crate) fn log_request(provider: Provider, req: &ChatRequest, stream: bool) {
    tracing::debug!(
        event = "provider_request",
        provider = %provider,
        model = %req.model,
        messages = req.messages.len(),
        stream,
        "sending"
    );
}

/// A client's readiness: its transport's, a transport failure redacted.
pub(crate) fn poll_transport<T, R>(
    transport: &mut T,
    cx: &mut std::task::Context<'_>,
    provider: Provider,
    redactor: &Redactor,
) -> std::task::Poll<Result<(), ProviderError>>
where
    T: tower::Service<R, Error = TransportError>,
{
    transport
        .poll_ready(cx)
        .map_err(|e| transport_error(provider, e, redactor))
}

/// A request that could not be converted; nothing was sent.
pub(crate) fn unsupported(provider: Provider, message: impl Into<String>) -> ProviderError {
    ProviderError::new(provider, ProviderErrorKind::Unsupported, message)
}

/// The response's `id` and `model` with its unmodelled fields, for
/// [`ChatResponse::provider_fields`](llm_context_layers::ChatResponse::provider_fields).
pub(crate) fn provider_fields(
    id: Option<String>,
    model: Option<String>,
    extra: serde_json::Map<String, serde_json::Value>,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let mut out: std::collections::BTreeMap<String, serde_json::Value> =
        extra.into_iter().collect();
    for (key, value) in [("id", id), ("model", model)] {
        if let Some(v) = value {
            out.insert(key.to_owned(), serde_json::Value::String(v));
        }
    }
    out
}

/// The refusal of a request holding a part kept whole in another format than `format`
/// (an Anthropic `document` bound for OpenAI) that `crosses` does not map: it cannot
/// cross, and is never dropped.
pub(crate) fn cannot_cross(
    req: &llm_context_layers::ChatRequest,
    format: llm_context_layers::WireFormat,
    provider: Provider,
    crosses: impl Fn(&llm_context_layers::ContentPart) -> bool,
) -> Result<(), ProviderError> {
    use llm_context_layers::{Content, ContentPart};
    if let Some(t) = req.tools.iter().find(|t| {
        // A Responses namespace of functions is sent to Anthropic as its functions.
        let expanded = format == llm_context_layers::WireFormat::Messages
            && crate::wire::namespaces::crosses(t);
        t.opaque.as_ref().is_some_and(|o| o.format != format) && !expanded
    }) {
        let kind = t.opaque.as_ref().map_or("", |o| o.kind.as_str());
        return Err(unsupported(
            provider,
            format!(
                "the tool {:?} is a server tool of type {kind:?}, which {provider}'s API does \
                 not have: the request cannot be sent there as it is",
                t.name
            ),
        ));
    }
    for m in &req.messages {
        let Content::Parts(parts) = &m.content else {
            continue;
        };
        for p in parts {
            if let ContentPart::Opaque {
                format: came, kind, ..
            } = p
                && *came != format
                && !crosses(p)
            {
                return Err(unsupported(
                    provider,
                    format!(
                        "a {kind:?} part (of the {came:?} format) has no counterpart in \
                         {provider}'s API: the request cannot be sent there as it is"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let r = Redactor::default();
        assert_eq!(
            base_url("https://api.openai.com/v1/", &r).unwrap(),
            "https://api.openai.com/v1"
        );
        assert_eq!(
            base_url("http://127.0.0.1:8080", &r).unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(base_url("api.openai.com", &r).is_err());
        assert!(base_url("ftp://x", &r).is_err());
        assert!(base_url("https://x/v1?a=b", &r).is_err());
    }
}
