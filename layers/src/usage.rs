//! Per-tenant usage and cost totals, read through a cloneable handle.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::usage::{UsageLayer, UsageMeter};
//! use llm_context_layers::{ChatRequest, Message, Scope};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let meter = UsageMeter::new();
//! let model = UsageLayer::new(meter.clone()).layer(MockModel::echo());
//! let request = ChatRequest::new("claude-sonnet-4-6", vec![Message::user("hello")])
//!     .with_scope(Scope::org("acme"));
//! model.oneshot(request).await.unwrap();
//!
//! let acme = meter.get(&Scope::org("acme"));
//! assert_eq!(acme.requests, 1);
//! assert!(acme.usage.input_tokens > 0);
//! assert!(acme.cost_usd > 0.0);
//! assert_eq!(meter.get(&Scope::org("other")).requests, 0);
//! # }
//! ```
//!
//! Each successful response's [`Usage`] is added to its request's [`Scope`], with its
//! cost from the [`Catalog`] (a model the catalog does not price adds no cost and is
//! counted in `unpriced_requests`). Failed calls add nothing, and neither do memo hits
//! (`report.memo_hit`): no provider call was made for them, and their usage is the call
//! that produced the answer, already counted. The lock is taken only to add a response,
//! never across a model call.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use serde::{Deserialize, Serialize};
use tower::{Layer, Service};

use crate::BoxError;
use crate::catalog::Catalog;
use crate::model::Scope;
use crate::model::{ChatRequest, ChatResponse, Usage};
use crate::stream::{ChatStream, StreamFuture, Streaming};

/// Totals for one scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScopeUsage {
    /// Successful calls.
    pub requests: u64,
    /// Tokens, summed.
    pub usage: Usage,
    /// Cost in USD, summed over the priced calls.
    pub cost_usd: f64,
    /// Calls whose model has no price in the catalog.
    pub unpriced_requests: u64,
}

impl ScopeUsage {
    fn add(&mut self, usage: &Usage, cost: Option<f64>) {
        self.requests += 1;
        self.usage += *usage;
        match cost {
            Some(c) => self.cost_usd += c,
            None => self.unpriced_requests += 1,
        }
    }
}

impl std::ops::AddAssign for ScopeUsage {
    fn add_assign(&mut self, o: Self) {
        self.requests += o.requests;
        self.usage += o.usage;
        self.cost_usd += o.cost_usd;
        self.unpriced_requests += o.unpriced_requests;
    }
}

/// The shared totals. Clones read and write the same totals.
#[derive(Clone, Debug)]
pub struct UsageMeter {
    totals: Arc<Mutex<BTreeMap<Scope, ScopeUsage>>>,
    catalog: Arc<Catalog>,
}

impl Default for UsageMeter {
    fn default() -> Self {
        Self::new()
    }
}

impl UsageMeter {
    /// A meter pricing with the built-in catalog.
    pub fn new() -> Self {
        Self::with_catalog(Catalog::builtin())
    }

    /// A meter pricing with `catalog`.
    pub fn with_catalog(catalog: Arc<Catalog>) -> Self {
        Self {
            totals: Arc::default(),
            catalog,
        }
    }

    /// Adds one response's usage for `model` in `scope`.
    pub fn record(&self, scope: &Scope, model: &str, usage: &Usage) {
        let cost = self.catalog.cost(model, usage);
        let mut totals = self.lock();
        // Look up before inserting so the common case does not clone the scope.
        match totals.get_mut(scope) {
            Some(t) => t.add(usage, cost),
            None => totals.entry(scope.clone()).or_default().add(usage, cost),
        }
    }

    /// The totals of one scope (zero when it made no call).
    pub fn get(&self, scope: &Scope) -> ScopeUsage {
        self.lock().get(scope).copied().unwrap_or_default()
    }

    /// The totals of every scope, ordered by scope.
    pub fn snapshot(&self) -> BTreeMap<Scope, ScopeUsage> {
        self.lock().clone()
    }

    /// The totals over all scopes.
    pub fn total(&self) -> ScopeUsage {
        let mut sum = ScopeUsage::default();
        for t in self.lock().values() {
            sum += *t;
        }
        sum
    }

    /// Clears every total.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Scope, ScopeUsage>> {
        // Totals stay consistent whatever panicked while holding the lock: each update
        // is a handful of additions on one entry.
        self.totals.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Records usage per scope into a [`UsageMeter`]. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct UsageLayer {
    meter: UsageMeter,
}

impl UsageLayer {
    /// A layer recording into `meter`.
    pub fn new(meter: UsageMeter) -> Self {
        Self { meter }
    }

    /// The meter.
    pub fn meter(&self) -> &UsageMeter {
        &self.meter
    }
}

impl<S> Layer<S> for UsageLayer {
    type Service = UsageService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        UsageService {
            inner,
            meter: self.meter.clone(),
        }
    }
}

/// The service of [`UsageLayer`].
#[derive(Clone, Debug)]
pub struct UsageService<S> {
    inner: S,
    meter: UsageMeter,
}

impl<S> UsageService<S> {
    /// Wraps `inner`, recording into `meter`.
    pub fn new(inner: S, meter: UsageMeter) -> Self {
        Self { inner, meter }
    }

    /// The meter.
    pub fn meter(&self) -> &UsageMeter {
        &self.meter
    }

    inner_accessors!(inner);
}

impl<S> Service<ChatRequest> for UsageService<S>
where
    S: Service<ChatRequest, Response = ChatResponse>,
{
    type Response = ChatResponse;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let record = Record::new(&req, &self.meter);
        ResponseFuture {
            inner: self.inner.call(req),
            record: Some(record),
        }
    }
}

/// A streamed call: recorded from its final event (its usage is the call's total), once
/// it completes; a stream that fails or is dropped records nothing.
impl<S> Service<Streaming> for UsageService<S>
where
    S: Service<Streaming, Response = ChatStream>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let record = Record::new(&req.0, &self.meter);
        let call = self.inner.call(req);
        Box::pin(async move {
            let stream = call.await.map_err(Into::into)?;
            Ok(stream.map_response(move |response| record.record(response)))
        })
    }
}

#[derive(Debug)]
struct Record {
    scope: Scope,
    model: String,
    meter: UsageMeter,
}

impl Record {
    fn new(req: &ChatRequest, meter: &UsageMeter) -> Self {
        Self {
            scope: req.scope.clone(),
            model: req.model.clone(),
            meter: meter.clone(),
        }
    }

    /// Records what the provider counted for `response`; a memo hit cost nothing.
    fn record(self, response: &ChatResponse) {
        if response.report.memo_hit {
            return;
        }
        self.meter.record(&self.scope, &self.model, &response.usage);
        tracing::debug!(
            event = "usage",
            scope = %self.scope.key(),
            model = %self.model,
            input_tokens = response.usage.input_tokens,
            output_tokens = response.usage.output_tokens,
            cache_read_tokens = response.usage.cache_read_tokens,
            cache_write_tokens = response.usage.cache_write_tokens,
            "usage"
        );
    }
}

pin_project! {
    /// The response future of [`UsageService`]: the inner call, recorded when it succeeds.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        record: Option<Record>,
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ChatResponse, E>>,
{
    type Output = Result<ChatResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let (Ok(response), Some(record)) = (&result, this.record.take()) {
            record.record(response);
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::model::PreparationReport;
    use tower_test::{assert_request_eq, mock};

    #[tokio::test]
    async fn records_successes_per_scope_and_passes_errors() {
        let meter = UsageMeter::new();
        let (mut svc, mut handle) =
            mock::spawn_layer::<ChatRequest, ChatResponse, _>(UsageLayer::new(meter.clone()));

        handle.allow(0);
        assert!(svc.poll_ready().is_pending());
        handle.allow(3);

        let acme = Scope::org("acme");
        let req = ChatRequest::new("claude-sonnet-4-6", vec![Message::user("hi")])
            .with_scope(acme.clone());
        for _ in 0..2 {
            assert!(svc.poll_ready().is_ready());
            let fut = svc.call(req.clone());
            // $3/Mtok in, $15 out, $0.30 read, $3.75 5m write: 1.0 + 0.5 + 0.15 + 0.375.
            let usage = Usage::new(333_333, 33_334, 500_000, 100_000);
            assert_request_eq!(handle, req.clone())
                .send_response(ChatResponse::new(Message::assistant("ok")).with_usage(usage));
            fut.await.unwrap();
        }
        assert!(svc.poll_ready().is_ready());
        let fut = svc.call(req.clone());
        let (_, send) = handle.next_request().await.unwrap();
        send.send_error("down");
        assert_eq!(fut.await.unwrap_err().to_string(), "down");

        let t = meter.get(&acme);
        assert_eq!(t.requests, 2);
        assert_eq!(t.usage.cache_read_tokens, 1_000_000);
        let expected =
            2.0 * (333_333.0 * 3.0 + 33_334.0 * 15.0 + 500_000.0 * 0.3 + 100_000.0 * 3.75) / 1e6;
        assert!((t.cost_usd - expected).abs() < 1e-9, "{}", t.cost_usd);
        assert_eq!(meter.get(&Scope::shared()).requests, 0);
        assert_eq!(meter.total().requests, 2);
    }

    #[tokio::test]
    async fn memo_hits_are_not_counted_again() {
        let meter = UsageMeter::new();
        let (mut svc, mut handle) =
            mock::spawn_layer::<ChatRequest, ChatResponse, _>(UsageLayer::new(meter.clone()));
        handle.allow(2);
        let req = ChatRequest::new("claude-sonnet-4-6", vec![Message::user("hi")]);
        for hit in [false, true] {
            assert!(svc.poll_ready().is_ready());
            let fut = svc.call(req.clone());
            let mut reply =
                ChatResponse::new(Message::assistant("ok")).with_usage(Usage::new(1_000, 10, 0, 0));
            if hit {
                reply.report = PreparationReport::memo_hit();
            }
            assert_request_eq!(handle, req.clone()).send_response(reply);
            fut.await.unwrap();
        }
        let t = meter.total();
        assert_eq!(t.requests, 1);
        assert_eq!(t.usage.input_tokens, 1_000);
    }

    #[test]
    fn unpriced_models_are_counted_apart() {
        let meter = UsageMeter::new();
        meter.record(
            &Scope::shared(),
            "my-local-model",
            &Usage::new(10, 10, 0, 0),
        );
        let t = meter.get(&Scope::shared());
        assert_eq!((t.requests, t.unpriced_requests, t.cost_usd), (1, 1, 0.0));
        meter.reset();
        assert!(meter.snapshot().is_empty());
    }
}
