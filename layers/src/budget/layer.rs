//! [`BudgetLayer`]: checks each call against its budget before it is sent, and settles
//! it from what the provider counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use tower::{Layer, Service};

use super::limits::{Amounts, Budget, Limit};
use super::store::{BudgetKey, BudgetStore, LocalBudgetStore, Reserved};
use crate::BoxError;
use crate::catalog::Catalog;
use crate::future::take_ready;
use crate::model::{ChatRequest, ChatResponse, Scope, Usage};
use crate::stream::{ChatStream, Streaming};

/// The output reserve of a request that sets no output limit.
pub const DEFAULT_OUTPUT_RESERVE: u32 = 4_096;

/// Enforces budgets: see the [module documentation](super).
#[derive(Clone)]
pub struct BudgetLayer {
    shared: Arc<Shared>,
}

#[derive(Clone)]
struct Shared {
    default: Vec<Limit>,
    tenants: HashMap<String, Vec<Limit>>,
    store: Arc<dyn BudgetStore>,
    catalog: Arc<Catalog>,
    output_reserve: u32,
    fail_closed: bool,
}

impl std::fmt::Debug for BudgetLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("default", &self.shared.default)
            .field("tenants", &self.shared.tenants.len())
            .field("store", &self.shared.store)
            .field("output_reserve", &self.shared.output_reserve)
            .field("fail_closed", &self.shared.fail_closed)
            .finish()
    }
}

impl BudgetLayer {
    /// A layer applying `budget` to every tenant, counting in this process
    /// ([`LocalBudgetStore`]) and pricing with the built-in catalog.
    pub fn new(budget: &Budget) -> Self {
        Self {
            shared: Arc::new(Shared {
                default: budget.limits(),
                tenants: HashMap::new(),
                store: Arc::new(LocalBudgetStore::default()),
                catalog: Catalog::builtin(),
                output_reserve: DEFAULT_OUTPUT_RESERVE,
                fail_closed: false,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared)) -> Self {
        f(Arc::make_mut(&mut self.shared));
        self
    }

    /// `scope`'s own budget, in place of the default one.
    #[must_use]
    pub fn for_tenant(self, scope: &Scope, budget: &Budget) -> Self {
        self.edit(|s| {
            s.tenants.insert(scope.key(), budget.limits());
        })
    }

    /// Counters in `store` (a shared one, for replicas).
    #[must_use]
    pub fn with_store(self, store: Arc<dyn BudgetStore>) -> Self {
        self.edit(|s| s.store = store)
    }

    /// Prices with `catalog`. A model it does not price adds no cost.
    #[must_use]
    pub fn with_catalog(self, catalog: Arc<Catalog>) -> Self {
        self.edit(|s| s.catalog = catalog)
    }

    /// The output tokens reserved for a request that sets no output limit
    /// (`max_output_tokens`, or `max_completion_tokens` / `max_tokens` among its extra
    /// fields); default [`DEFAULT_OUTPUT_RESERVE`].
    #[must_use]
    pub fn with_output_reserve(self, tokens: u32) -> Self {
        self.edit(|s| s.output_reserve = tokens)
    }

    /// What a call does when the store does not answer: sent anyway with a warning (the
    /// default, `false`), or refused with the store's error (`true`).
    #[must_use]
    pub fn fail_closed(self, closed: bool) -> Self {
        self.edit(|s| s.fail_closed = closed)
    }

    /// The counters' store.
    pub fn store(&self) -> &Arc<dyn BudgetStore> {
        &self.shared.store
    }

    /// The limits that apply to `scope`.
    pub fn limits_for(&self, scope: &Scope) -> &[Limit] {
        self.shared.limits_for(&scope.key())
    }
}

impl Shared {
    fn limits_for(&self, scope_key: &str) -> &[Limit] {
        self.tenants.get(scope_key).unwrap_or(&self.default)
    }

    /// What `req` is expected to use: one call, its estimated prompt, its output reserve,
    /// and their price.
    fn expected(&self, req: &ChatRequest) -> Amounts {
        let input = req.estimate_tokens();
        // The neutral limit, else the wire's own (a Chat Completions body read into the
        // model keeps `max_completion_tokens` among its extra fields).
        let output = req
            .params
            .max_output_tokens
            .map(u64::from)
            .or_else(|| {
                ["max_completion_tokens", "max_tokens"]
                    .iter()
                    .find_map(|k| req.params.extra.get(*k).and_then(serde_json::Value::as_u64))
            })
            .unwrap_or(u64::from(self.output_reserve));
        let usage = Usage::new(input as u64, output, 0, 0);
        Amounts {
            calls: 1.0,
            input_tokens: input as f64,
            output_tokens: output as f64,
            cost_usd: self.catalog.cost(&req.model, &usage).unwrap_or(0.0),
        }
    }

    /// What a call that answered `response` used: nothing for a memo hit.
    fn used(&self, model: &str, response: &ChatResponse) -> Amounts {
        if response.report.memo_hit {
            return Amounts::default();
        }
        let u = &response.usage;
        Amounts {
            calls: 1.0,
            input_tokens: (u.input_tokens + u.cache_read_tokens + u.cache_write_tokens) as f64,
            output_tokens: u.output_tokens as f64,
            cost_usd: self.catalog.cost(model, u).unwrap_or(0.0),
        }
    }

    /// Reserves what `req` is expected to use; `Ok(None)` when no limit applies or the
    /// store is away and the layer fails open.
    async fn reserve(&self, req: &ChatRequest) -> Result<Option<(Reserved, String)>, BoxError> {
        let key = BudgetKey::new(&req.scope, &req.session);
        let limits = self.limits_for(&key.scope);
        if limits.is_empty() {
            return Ok(None);
        }
        let expected = self.expected(req);
        match self
            .store
            .reserve(&key, limits, expected, SystemTime::now())
            .await
        {
            Ok(Ok(reserved)) => Ok(Some((reserved, req.model.clone()))),
            Ok(Err(exceeded)) => {
                tracing::info!(
                    event = "budget_exceeded",
                    scope = %key.scope,
                    limit = exceeded.limit,
                    used = exceeded.used,
                    requested = exceeded.requested,
                    max = exceeded.max,
                    "a call that would cross its budget was not sent"
                );
                Err(exceeded.into())
            }
            Err(e) if self.fail_closed => Err(e.into()),
            Err(e) => {
                tracing::warn!(
                    event = "budget_store_unavailable",
                    error = %e,
                    "the budget store did not answer: the call is sent unchecked"
                );
                Ok(None)
            }
        }
    }

    /// Replaces the reservation by what the call used (`None`: it failed, and used its
    /// call only).
    async fn settle(&self, reserved: &Reserved, model: &str, response: Option<&ChatResponse>) {
        let used = match response {
            Some(r) => self.used(model, r),
            None => Amounts {
                calls: 1.0,
                ..Amounts::default()
            },
        };
        if let Err(e) = self
            .store
            .settle(reserved, used.minus(&reserved.amounts))
            .await
        {
            tracing::warn!(event = "budget_not_settled", error = %e, "the reservation stays counted");
        }
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = BudgetService<S>;

    fn layer(&self, inner: S) -> BudgetService<S> {
        BudgetService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service of [`BudgetLayer`].
#[derive(Clone)]
pub struct BudgetService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for BudgetService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Service<ChatRequest> for BudgetService<S>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<ChatResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let shared = self.shared.clone();
        let mut inner = take_ready(&mut self.inner);
        Box::pin(async move {
            let reserved = shared.reserve(&req).await?;
            let result = inner.call(req).await.map_err(Into::into);
            if let Some((reserved, model)) = &reserved {
                shared.settle(reserved, model, result.as_ref().ok()).await;
            }
            result
        })
    }
}

/// A streamed call is settled from its final event; one that fails or is dropped before
/// it keeps what was reserved counted (the provider may have billed part of it).
impl<S> Service<Streaming> for BudgetService<S>
where
    S: Service<Streaming, Response = ChatStream> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<ChatStream, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let shared = self.shared.clone();
        let mut inner = take_ready(&mut self.inner);
        Box::pin(async move {
            let reserved = shared.reserve(&req.0).await?;
            let stream = match inner.call(req).await.map_err(Into::into) {
                Ok(stream) => stream,
                Err(e) => {
                    if let Some((reserved, model)) = &reserved {
                        shared.settle(reserved, model, None).await;
                    }
                    return Err(e);
                }
            };
            let Some((reserved, model)) = reserved else {
                return Ok(stream);
            };
            Ok(stream.then_response(move |response| async move {
                shared.settle(&reserved, &model, Some(&response)).await;
                Ok(response)
            }))
        })
    }
}
