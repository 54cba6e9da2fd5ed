//! Retrying provider calls that may succeed later, with bounded backoff that honours
//! `retry-after`.
//!
//! ```no_run
//! use std::time::Duration;
//! use llm_context::openai::OpenAi;
//! use llm_context::retry::RetryPolicy;
//! use llm_context::{ChatRequest, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
//! let model = ServiceBuilder::new()
//!     .retry(RetryPolicy::default().with_max_retries(3))
//!     .timeout(Duration::from_secs(120))   // per attempt; an elapsed attempt is retried
//!     .service(OpenAi::from_env()?);
//! let reply = model.oneshot(ChatRequest::new("gpt-5.4-mini", vec![Message::user("hi")])).await?;
//! # Ok(()) }
//! ```
//!
//! Retried: 429 rate limits, 5xx and Anthropic's 529 overloaded, timeouts (the client's
//! own and `tower::timeout`'s `Elapsed`), connection failures and resets, and bodies cut
//! short. Never retried: 4xx request errors (a context-length rejection included), 401,
//! exhausted quota, a malformed success body, and any error that is not a
//! [`ProviderError`] or `Elapsed` (so a [`ContextLimitError`](crate::ContextLimitError)
//! from the layers above is returned at once).
//!
//! The wait is the provider's `retry-after` when it gives one (a wait longer than
//! [`RetryPolicy::with_max_retry_after`] is not worth it: the error is returned), else
//! exponential backoff from `base_delay`, doubled per attempt and capped at `max_delay`,
//! with jitter (each wait between half and all of it) so that many clients do not retry
//! in step.

use std::collections::hash_map::RandomState;
use std::error::Error;
use std::hash::BuildHasher;
use std::time::Duration;

use tower::retry::Policy;

use crate::BoxError;
use crate::error::ProviderError;
use llm_context_layers::stream::{ChatStream, Streaming};
use llm_context_layers::{ChatRequest, ChatResponse};

/// A `tower::retry::Policy` for provider calls. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    max_retries: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
    attempts: u32,
}

impl Default for RetryPolicy {
    /// Two retries (as OpenAI's and Anthropic's SDKs), 0.5 s base delay, 8 s cap,
    /// `retry-after` honoured up to 60 s.
    fn default() -> Self {
        Self {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
            attempts: 0,
        }
    }
}

impl RetryPolicy {
    /// How many times a call is retried (0: never).
    #[must_use]
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The first backoff delay, doubled per attempt.
    #[must_use]
    pub fn with_base_delay(mut self, d: Duration) -> Self {
        self.base_delay = d;
        self
    }

    /// The longest backoff delay.
    #[must_use]
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// The longest `retry-after` honoured; a longer one returns the error at once.
    #[must_use]
    pub fn with_max_retry_after(mut self, d: Duration) -> Self {
        self.max_retry_after = d;
        self
    }

    /// How long to wait before retrying after `err`, or `None` not to retry.
    pub fn delay_for(&self, err: &(dyn Error + 'static)) -> Option<Duration> {
        if self.attempts >= self.max_retries {
            return None;
        }
        let retry_after = classify(err)?;
        match retry_after {
            Some(d) if d > self.max_retry_after => None,
            Some(d) => Some(d),
            None => Some(self.backoff()),
        }
    }

    fn backoff(&self) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << self.attempts.min(16))
            .min(self.max_delay);
        // Jitter from the process's random hasher keys: no RNG dependency, and it is
        // only spreading retries, not a secret.
        let r = RandomState::new().hash_one(self.attempts);
        let fraction = 0.5 + (r % 1_000) as f64 / 2_000.0;
        exp.mul_f64(fraction)
    }

    /// A copy of `req` for a retry after the attempt about to be made, or `None` when
    /// the retries are used up. `tower::retry` calls `clone_request` before each attempt
    /// (after `retry` counted the previous one) and never retries a request it has no
    /// copy of, so the last attempt's transcript is not deep-copied for nothing.
    fn keep_for_retry<R: Clone>(&self, req: &R) -> Option<R> {
        (self.attempts < self.max_retries).then(|| req.clone())
    }

    fn decide(&mut self, err: &(dyn Error + 'static)) -> Option<tokio::time::Sleep> {
        let delay = self.delay_for(err)?;
        self.attempts += 1;
        tracing::warn!(
            event = "provider_retry",
            attempt = self.attempts,
            delay_ms = delay.as_millis() as u64,
            error = %err,
            "retrying provider call"
        );
        Some(tokio::time::sleep(delay))
    }
}

/// `Some(retry_after)` when `err` (or an error it wraps) is retryable.
fn classify(err: &(dyn Error + 'static)) -> Option<Option<Duration>> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(p) = e.downcast_ref::<ProviderError>() {
            return p.is_retryable().then_some(p.retry_after);
        }
        if e.is::<tower::timeout::error::Elapsed>() {
            return Some(None);
        }
        cur = e.source();
    }
    None
}

/// The same policy for both request types and both error types. A streamed call is
/// retried only while nothing has reached the caller: the clients' futures resolve once
/// the first event is read, so every error a retry sees (an error status, a connection
/// cut before the first event) came before it; an error inside the stream, after, is
/// never retried.
macro_rules! policy {
    ($req:ty, $res:ty, $error:ty, $as_error:expr) => {
        impl Policy<$req, $res, $error> for RetryPolicy {
            type Future = tokio::time::Sleep;

            fn retry(
                &mut self,
                _req: &mut $req,
                result: &mut Result<$res, $error>,
            ) -> Option<Self::Future> {
                match result {
                    Ok(_) => None,
                    Err(e) => self.decide($as_error(e)),
                }
            }

            fn clone_request(&mut self, req: &$req) -> Option<$req> {
                self.keep_for_retry(req)
            }
        }
    };
}

fn boxed(e: &BoxError) -> &(dyn Error + 'static) {
    &**e
}

fn provider(e: &ProviderError) -> &(dyn Error + 'static) {
    e
}

policy!(ChatRequest, ChatResponse, BoxError, boxed);
policy!(ChatRequest, ChatResponse, ProviderError, provider);
policy!(Streaming, ChatStream, BoxError, boxed);
policy!(Streaming, ChatStream, ProviderError, provider);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Provider;
    use crate::error::ProviderErrorKind;
    use llm_context_layers::Message;

    fn err(kind: ProviderErrorKind, retry_after: Option<u64>) -> ProviderError {
        let mut e = ProviderError::new(Provider::Anthropic, kind, "x");
        e.retry_after = retry_after.map(Duration::from_secs);
        e
    }

    #[test]
    fn only_retryable_errors() {
        let p = RetryPolicy::default();
        assert!(
            p.delay_for(&err(ProviderErrorKind::RateLimited, None))
                .is_some()
        );
        assert!(
            p.delay_for(&err(ProviderErrorKind::Overloaded, None))
                .is_some()
        );
        assert!(
            p.delay_for(&err(ProviderErrorKind::Connection, None))
                .is_some()
        );
        assert!(
            p.delay_for(&err(ProviderErrorKind::ContextLength, None))
                .is_none()
        );
        assert!(
            p.delay_for(&err(ProviderErrorKind::Authentication, None))
                .is_none()
        );
        assert!(
            p.delay_for(&err(ProviderErrorKind::QuotaExceeded, None))
                .is_none()
        );
        assert!(
            p.delay_for(&err(ProviderErrorKind::InvalidResponse, None))
                .is_none()
        );
        let other: BoxError = "something else".into();
        assert!(p.delay_for(&*other).is_none());
    }

    #[test]
    fn retry_after_is_honoured_and_bounded() {
        let p = RetryPolicy::default().with_max_retry_after(Duration::from_secs(10));
        assert_eq!(
            p.delay_for(&err(ProviderErrorKind::RateLimited, Some(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            p.delay_for(&err(ProviderErrorKind::RateLimited, Some(11))),
            None
        );
    }

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let mut p = RetryPolicy::default()
            .with_max_retries(10)
            .with_base_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_millis(800));
        for attempt in 0..10u32 {
            p.attempts = attempt;
            let full = Duration::from_millis(100 * (1u64 << attempt.min(3)));
            let d = p.backoff();
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
    }

    #[test]
    fn the_last_attempt_keeps_no_copy() {
        let req = ChatRequest::new("m", vec![Message::user("hi")]);
        let mut p = RetryPolicy::default().with_max_retries(1);
        assert!(p.keep_for_retry(&req).is_some());
        p.attempts = 1;
        assert!(p.keep_for_retry(&req).is_none());
        let mut never = RetryPolicy::default().with_max_retries(0);
        assert!(
            Policy::<ChatRequest, ChatResponse, ProviderError>::clone_request(&mut never, &req)
                .is_none()
        );
    }

    #[test]
    fn gives_up_after_max_retries() {
        let mut p = RetryPolicy::default().with_max_retries(1);
        let e = err(ProviderErrorKind::Server, None);
        assert!(p.delay_for(&e).is_some());
        p.attempts = 1;
        assert!(p.delay_for(&e).is_none());
    }
}
