//! Errors of the provider clients: typed, and never carrying an API key.
//!
//! ```
//! use llm_context::error::{ProviderError, ProviderErrorKind};
//!
//! # fn check(err: llm_context::BoxError) {
//! if let Some(e) = err.downcast_ref::<ProviderError>() {
//!     match e.kind {
//!         ProviderErrorKind::ContextLength => println!("shorten the prompt: {}", e.message),
//!         _ if e.is_retryable() => println!("retry after {:?}", e.retry_after),
//!         _ => println!("{e}"),
//!     }
//! }
//! # }
//! ```
//!
//! A provider's error body is parsed for its error type, code and message (both OpenAI's
//! `{"error": {"type", "code", "message"}}` and Anthropic's `{"type": "error", "error":
//! {"type", "message"}}`); a body that does not parse is kept, truncated to
//! [`RAW_BODY_LIMIT`] characters.
//!
//! Everything an error keeps from the server or the network (message, type, code,
//! request id, redirect target, body, a transport failure's text) is redacted when the
//! error is made, since some servers echo what they were given: the client's key and its
//! base URL's password are removed however they are written (plainly, `\u`-escaped,
//! percent-encoded), anything shaped like an OpenAI or Anthropic key (`sk-…`) is masked,
//! control characters are written as escapes, and each value is bounded in length.
//!
//! A redirect is never followed: the key and the prompt would go to another address. A
//! 3xx answer is a [`ProviderErrorKind::Redirect`] naming its target
//! ([`ProviderError::location`]).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::redact::{Redactor, SHORT_LIMIT, TEXT_LIMIT};

/// The most characters of an unparsed error body kept in a [`ProviderError`].
pub const RAW_BODY_LIMIT: usize = TEXT_LIMIT;

use crate::catalog::Provider;

/// What went wrong, by what the caller can do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProviderErrorKind {
    /// 400: the request was refused as malformed or invalid (not for its length).
    InvalidRequest,
    /// The prompt is longer than the model's context window (a 400 saying so).
    ContextLength,
    /// 401: the API key is missing or wrong.
    Authentication,
    /// 403: the key may not use this model or endpoint.
    PermissionDenied,
    /// 404: unknown model or endpoint (often a base URL without, or with a second, `/v1`).
    NotFound,
    /// 413: the request body is larger than the provider accepts.
    PayloadTooLarge,
    /// 429: rate limit. Retryable after `retry_after`.
    RateLimited,
    /// 429 with OpenAI's `insufficient_quota`: the account is out of credit. Waiting
    /// does not help, so it is not retried.
    QuotaExceeded,
    /// 529 (Anthropic `overloaded_error`) or 503: the provider is overloaded. Retryable.
    Overloaded,
    /// Any other 5xx. Retryable.
    Server,
    /// No answer in time. Retryable.
    Timeout,
    /// The connection failed, was reset, or the body was cut short. Retryable.
    Connection,
    /// A success status with a body that is not the expected JSON.
    InvalidResponse,
    /// 3xx: the server redirected the call. It was not followed (the key and the prompt
    /// would have gone to the other address); the message and
    /// [`ProviderError::location`] name the target. Fix the base URL.
    Redirect,
    /// The response body is larger than the client's `max_response_bytes`; reading
    /// stopped there.
    ResponseTooLarge,
    /// The request cannot be expressed in this provider's format (nothing was sent).
    Unsupported,
    /// A streamed answer was cut off (the connection closed, or the body failed) after
    /// part of it had reached the caller. Not retryable: the caller already holds part of
    /// an answer. A stream cut off before its first event is a retryable
    /// [`Connection`](Self::Connection) error instead.
    StreamInterrupted,
    /// Any other status.
    Other,
}

impl ProviderErrorKind {
    /// A stable snake_case name (`rate_limited`, `context_length`, …) for logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderErrorKind::InvalidRequest => "invalid_request",
            ProviderErrorKind::ContextLength => "context_length",
            ProviderErrorKind::Authentication => "authentication",
            ProviderErrorKind::PermissionDenied => "permission_denied",
            ProviderErrorKind::NotFound => "not_found",
            ProviderErrorKind::PayloadTooLarge => "payload_too_large",
            ProviderErrorKind::RateLimited => "rate_limited",
            ProviderErrorKind::QuotaExceeded => "quota_exceeded",
            ProviderErrorKind::Overloaded => "overloaded",
            ProviderErrorKind::Server => "server",
            ProviderErrorKind::Timeout => "timeout",
            ProviderErrorKind::Connection => "connection",
            ProviderErrorKind::InvalidResponse => "invalid_response",
            ProviderErrorKind::Redirect => "redirect",
            ProviderErrorKind::ResponseTooLarge => "response_too_large",
            ProviderErrorKind::Unsupported => "unsupported",
            ProviderErrorKind::StreamInterrupted => "stream_interrupted",
            ProviderErrorKind::Other => "other",
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ProviderErrorKind::RateLimited
                | ProviderErrorKind::Overloaded
                | ProviderErrorKind::Server
                | ProviderErrorKind::Timeout
                | ProviderErrorKind::Connection
        )
    }

    /// The kind for an HTTP status (without looking at the body).
    pub fn from_status(status: u16) -> Self {
        match status {
            400 | 422 => ProviderErrorKind::InvalidRequest,
            401 => ProviderErrorKind::Authentication,
            403 => ProviderErrorKind::PermissionDenied,
            404 => ProviderErrorKind::NotFound,
            408 => ProviderErrorKind::Timeout,
            413 => ProviderErrorKind::PayloadTooLarge,
            300..=399 => ProviderErrorKind::Redirect,
            429 => ProviderErrorKind::RateLimited,
            503 | 529 => ProviderErrorKind::Overloaded,
            500..=599 => ProviderErrorKind::Server,
            _ => ProviderErrorKind::Other,
        }
    }
}

/// A failed provider call. See the [module docs](self).
///
/// The provider's own details (error type, code, request id, unparsed body) sit behind
/// accessors so that the error stays small on the `Result` path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProviderError {
    /// Which API.
    pub provider: Provider,
    /// What went wrong.
    pub kind: ProviderErrorKind,
    /// The HTTP status, when there was a response.
    pub status: Option<u16>,
    /// The provider's message, or a description of the failure.
    pub message: String,
    /// How long the provider asked to wait (`retry-after`, `retry-after-ms`).
    pub retry_after: Option<Duration>,
    detail: Box<Detail>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Detail {
    error_type: Option<String>,
    code: Option<String>,
    request_id: Option<String>,
    location: Option<String>,
    raw_body: Option<String>,
}

impl ProviderError {
    /// An error of `kind` with a message and no response.
    pub fn new(provider: Provider, kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self {
            provider,
            kind,
            status: None,
            message: message.into(),
            retry_after: None,
            detail: Box::default(),
        }
    }

    /// The provider's error type (`invalid_request_error`, `rate_limit_error`,
    /// `overloaded_error`, …).
    pub fn error_type(&self) -> Option<&str> {
        self.detail.error_type.as_deref()
    }

    /// The provider's error code, when it gives one (OpenAI: `context_length_exceeded`,
    /// `invalid_api_key`, `insufficient_quota`, …).
    pub fn code(&self) -> Option<&str> {
        self.detail.code.as_deref()
    }

    /// The provider's request id (`x-request-id` / `request-id`), for support tickets.
    pub fn request_id(&self) -> Option<&str> {
        self.detail.request_id.as_deref()
    }

    /// Where a [`Redirect`](ProviderErrorKind::Redirect) pointed (the `Location` header,
    /// redacted), when it said.
    pub fn location(&self) -> Option<&str> {
        self.detail.location.as_deref()
    }

    /// The body, truncated to [`RAW_BODY_LIMIT`] characters and redacted, when it could
    /// not be parsed.
    pub fn raw_body(&self) -> Option<&str> {
        self.detail.raw_body.as_deref()
    }

    pub(crate) fn with_raw_body(mut self, raw: String) -> Self {
        self.detail.raw_body = Some(raw);
        self
    }

    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// Whether the provider refused the prompt as longer than the model's window.
    pub fn is_context_length(&self) -> bool {
        self.kind == ProviderErrorKind::ContextLength
    }

    /// The error for a non-success response; everything kept goes through `redactor`.
    pub(crate) fn from_response(
        provider: Provider,
        status: u16,
        headers: &http::HeaderMap,
        body: &[u8],
        redactor: &Redactor,
    ) -> Self {
        let mut err = Self::new(provider, ProviderErrorKind::from_status(status), "");
        err.status = Some(status);
        err.retry_after = retry_after(headers);
        let d = &mut err.detail;
        d.request_id = ["x-request-id", "request-id"]
            .iter()
            .find_map(|h| headers.get(*h)?.to_str().ok())
            .map(|id| redactor.text(id, SHORT_LIMIT));
        if err.kind == ProviderErrorKind::Redirect {
            return err.redirected(headers, redactor);
        }
        match serde_json::from_slice::<ErrorEnvelope>(body) {
            Ok(ErrorEnvelope {
                error: Some(detail),
            }) => {
                d.error_type = detail.kind.map(|t| redactor.text(&t, SHORT_LIMIT));
                d.code = detail.code.and_then(|c| match c {
                    serde_json::Value::String(s) => Some(redactor.text(&s, SHORT_LIMIT)),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    _ => None,
                });
                err.message = redactor.text(detail.message.as_deref().unwrap_or(""), TEXT_LIMIT);
            }
            _ => d.raw_body = Some(raw_body(body, redactor)),
        }
        if err.message.is_empty() {
            err.message = format!("HTTP {status}");
        }
        if err.error_type() == Some("overloaded_error") {
            err.kind = ProviderErrorKind::Overloaded;
        }
        if err.code() == Some("insufficient_quota") {
            err.kind = ProviderErrorKind::QuotaExceeded;
        }
        if is_context_length(status, &err) {
            err.kind = ProviderErrorKind::ContextLength;
        }
        err
    }

    /// A 3xx, named by its target. The body is not kept: the target is what matters.
    fn redirected(mut self, headers: &http::HeaderMap, redactor: &Redactor) -> Self {
        let status = self.status.unwrap_or_default();
        let location = headers
            .get(http::header::LOCATION)
            .map(|v| match v.to_str() {
                Ok(v) => redactor.url(v),
                Err(_) => "(a Location that is not text)".to_owned(),
            });
        let target = location.as_deref().unwrap_or("(no Location given)");
        self.message = format!(
            "HTTP {status} redirects to {target}; redirects are never followed (the key and \
             the prompt would go there too): set the base URL to the address that answers"
        );
        self.detail.location = location;
        self
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.provider)?;
        if let Some(status) = self.status {
            write!(f, " {status}")?;
        }
        if let Some(t) = self.error_type() {
            write!(f, " {t}")?;
        }
        if let Some(c) = self.code() {
            write!(f, " ({c})")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(d) = self.retry_after {
            write!(f, " (retry after {:.3}s)", d.as_secs_f64())?;
        }
        if let Some(raw) = self.raw_body() {
            write!(f, "; body: {raw}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ProviderError {}

/// Both providers' error bodies: OpenAI `{"error": {...}}`, Anthropic
/// `{"type": "error", "error": {...}}`.
#[derive(Deserialize)]
struct ErrorEnvelope {
    error: Option<ErrorDetail>,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<serde_json::Value>,
    message: Option<String>,
}

fn is_context_length(status: u16, err: &ProviderError) -> bool {
    if err.code() == Some("context_length_exceeded") {
        return true;
    }
    if status != 400 && status != 413 {
        return false;
    }
    // Anthropic: "prompt is too long: 201234 tokens > 200000 maximum"; OpenAI and vLLM:
    // "This model's maximum context length is 8192 tokens…"; llama.cpp: "the request
    // exceeds the available context size".
    let m = err.message.to_ascii_lowercase();
    [
        "prompt is too long",
        "maximum context length",
        "context size",
        "context window",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

/// The longest wait a response header can ask for. A server may send any number
/// (`retry-after: 1e30`); a wait is clamped here before it becomes a `Duration`, which
/// panics on values it cannot hold. `RetryPolicy` refuses to wait past its own, smaller
/// bound anyway.
pub(crate) const MAX_HEADER_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// `secs` as a wait, clamped to [`MAX_HEADER_WAIT`]; `None` when it is not a wait at all
/// (negative, NaN).
fn header_wait(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    // `try_from_secs_f64` fails on +inf and on anything past `Duration::MAX`.
    Some(Duration::try_from_secs_f64(secs).map_or(MAX_HEADER_WAIT, |d| d.min(MAX_HEADER_WAIT)))
}

/// `retry-after-ms` (OpenAI), else `retry-after` in seconds or as an HTTP date, never
/// more than [`MAX_HEADER_WAIT`].
/// The first error of type `T` in `e`'s chain of sources, `e` included: what a layer
/// wrapped is still found by its type.
pub(crate) fn find_source<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(Some(e), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

pub(crate) fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(wait) = value("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| header_wait(ms / 1_000.0))
    {
        return Some(wait);
    }
    let v = value("retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return header_wait(secs);
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .min(MAX_HEADER_WAIT),
    )
}

/// A body as kept in an error: lossy UTF-8, redacted, bounded.
pub(crate) fn raw_body(body: &[u8], redactor: &Redactor) -> String {
    redactor.text(&String::from_utf8_lossy(body), RAW_BODY_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn openai_context_length() {
        let body = br#"{"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
        let e = ProviderError::from_response(
            Provider::OpenAi,
            400,
            &headers(&[]),
            body,
            &Redactor::default(),
        );
        assert_eq!(e.kind, ProviderErrorKind::ContextLength);
        assert_eq!(e.code(), Some("context_length_exceeded"));
        assert!(!e.is_retryable());
    }

    #[test]
    fn anthropic_overloaded_and_context_length() {
        let body =
            br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        let e = ProviderError::from_response(
            Provider::Anthropic,
            529,
            &headers(&[]),
            body,
            &Redactor::default(),
        );
        assert_eq!(e.kind, ProviderErrorKind::Overloaded);
        assert!(e.is_retryable());
        let body = br#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 201234 tokens > 200000 maximum"}}"#;
        let e = ProviderError::from_response(
            Provider::Anthropic,
            400,
            &headers(&[]),
            body,
            &Redactor::default(),
        );
        assert_eq!(e.kind, ProviderErrorKind::ContextLength);
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[
                ("retry-after", "3"),
                ("retry-after-ms", "1500")
            ])),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")])), None);
    }

    #[test]
    fn huge_waits_are_clamped_not_a_panic() {
        for (name, value) in [
            ("retry-after", "1e30"),
            ("retry-after", "inf"),
            ("retry-after", "18446744073709551616"),
            ("retry-after-ms", "1e300"),
            ("retry-after-ms", "Infinity"),
            ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
        ] {
            assert_eq!(
                retry_after(&headers(&[(name, value)])),
                Some(MAX_HEADER_WAIT),
                "{name}: {value}"
            );
        }
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "NaN")])), None);
    }

    proptest::proptest! {
        #[test]
        fn any_header_value_is_a_bounded_wait_or_none(
            ms in proptest::option::of("[ -~]{0,40}|[0-9eE+.-]{1,30}"),
            secs in proptest::option::of("[ -~]{0,40}|[0-9eE+.-]{1,30}"),
        ) {
            let mut pairs = Vec::new();
            if let Some(ms) = ms.as_deref() {
                pairs.push(("retry-after-ms", ms));
            }
            if let Some(secs) = secs.as_deref() {
                pairs.push(("retry-after", secs));
            }
            let mut map = http::HeaderMap::new();
            for (name, value) in pairs {
                if let Ok(value) = http::HeaderValue::from_str(value) {
                    map.insert(name, value);
                }
            }
            if let Some(wait) = retry_after(&map) {
                proptest::prop_assert!(wait <= MAX_HEADER_WAIT);
            }
        }
    }

    #[test]
    fn unparsed_bodies_are_truncated_and_redacted() {
        let secret = "sk-test-0123456789abcdefghij";
        let body = format!(
            "<html>bad gateway for key {secret} {}</html>",
            "x".repeat(10_000)
        );
        let e = ProviderError::from_response(
            Provider::OpenAi,
            502,
            &headers(&[]),
            body.as_bytes(),
            &Redactor::new(Some(&secrecy::SecretString::from(secret)), ""),
        );
        assert_eq!(e.kind, ProviderErrorKind::Server);
        let raw = e.raw_body().unwrap();
        assert!(!raw.contains(secret));
        assert!(raw.contains("[REDACTED]"));
        assert!(raw.chars().count() < RAW_BODY_LIMIT + 40);
        assert!(!format!("{e} {e:?}").contains(secret));
    }
}
