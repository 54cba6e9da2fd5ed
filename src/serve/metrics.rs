//! The server's Prometheus metrics, in a registry it owns (no global registry): what
//! `GET /metrics` answers, in the OpenMetrics text format.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// What one answered request tells the metrics, put in the response's extensions by the
/// handler and read when the request is counted.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    /// The report's figures: tokens before and after preparation, and a memo hit.
    pub(crate) report: Option<(usize, usize, bool)>,
    /// The kind of the upstream's error, when the upstream failed.
    pub(crate) upstream_error: Option<String>,
    /// Who edited the request's context.
    pub(crate) executor: Option<llm_context_layers::Executor>,
    /// What the provider reported it edited (a non-streamed answer's).
    pub(crate) provider_edits: Option<llm_context_layers::AppliedEdits>,
}

pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    preparation: Family<Labels, Histogram, fn() -> Histogram>,
    upstream: Family<Labels, Histogram, fn() -> Histogram>,
    tokens_before: Family<Labels, Counter>,
    tokens_after: Family<Labels, Counter>,
    memo_hits: Family<Labels, Counter>,
    upstream_errors: Family<Labels, Counter>,
    budget_used: Family<Labels, Gauge<f64, AtomicU64>>,
    budget_max: Family<Labels, Gauge<f64, AtomicU64>>,
    executors: Family<Labels, Counter>,
    provider_cleared_tool_uses: Family<Labels, Counter>,
    provider_cleared_tokens: Family<Labels, Counter>,
    ledger: super::ledger::Counters,
}

/// From half a millisecond to about 70 s, doubling: the proxy's own work at the low end,
/// a long model call at the top.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("llm_context");
        let requests = Family::default();
        registry.register(
            "requests",
            "Requests answered, by route, status and tenant",
            requests.clone(),
        );
        let latency = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register(
            "request_duration_seconds",
            "Time to the response's headers (preparation and the upstream's answer, or its \
             first byte for a stream), by route",
            latency.clone(),
        );
        let preparation = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register(
            "preparation_duration_seconds",
            "The part of the time to the response's headers not spent waiting on the \
             upstream (reading, preparing, translating, the memo), by route",
            preparation.clone(),
        );
        let upstream = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register(
            "upstream_duration_seconds",
            "Time spent waiting on the upstream, every attempt and artifact read of the \
             request together (to its first byte for a stream), by route; requests that \
             made no upstream call are not counted",
            upstream.clone(),
        );
        let tokens_before = Family::default();
        registry.register(
            "tokens_before",
            "Estimated tokens of the requests as they came, by tenant",
            tokens_before.clone(),
        );
        let tokens_after = Family::default();
        registry.register(
            "tokens_after",
            "Estimated tokens of the requests as they were sent, by tenant",
            tokens_after.clone(),
        );
        let memo_hits = Family::default();
        registry.register(
            "memo_hits",
            "Requests answered from the memo, by tenant",
            memo_hits.clone(),
        );
        let upstream_errors = Family::default();
        registry.register(
            "upstream_errors",
            "Requests the upstream failed, by kind",
            upstream_errors.clone(),
        );
        let budget_used = Family::default();
        registry.register(
            "budget_used",
            "What each tenant's budget limit has used in its current window (calls, tokens \
             or USD, as the limit counts), by tenant and limit",
            budget_used.clone(),
        );
        let budget_max = Family::default();
        registry.register(
            "budget_limit",
            "Each tenant's budget limit, by tenant and limit",
            budget_max.clone(),
        );
        let executors = Family::default();
        registry.register(
            "executor",
            "Prepared requests by who edited their context (local, delegate, off) and tenant",
            executors.clone(),
        );
        let provider_cleared_tool_uses = Family::default();
        registry.register(
            "provider_cleared_tool_uses",
            "Tool uses the provider reported clearing (context_management.applied_edits of \
             non-streamed answers), by tenant",
            provider_cleared_tool_uses.clone(),
        );
        let provider_cleared_tokens = Family::default();
        registry.register(
            "provider_cleared_input_tokens",
            "Input tokens the provider reported its edits freed (non-streamed answers), by \
             tenant",
            provider_cleared_tokens.clone(),
        );
        let ledger = super::ledger::Counters::default();
        registry.register(
            "ledger_write_failures",
            "Requests the ledger did not record (its worker behind, or its store failing); \
             the requests themselves were served",
            ledger.write_failures.clone(),
        );
        registry.register(
            "sessions_costlier_than_passthrough",
            "Sessions whose newest 20 requests cost more, by the provider's usage, than \
             the same requests sent unchanged are modelled to, by tenant",
            ledger.costlier.clone(),
        );
        Self {
            ledger,
            registry,
            executors,
            provider_cleared_tool_uses,
            provider_cleared_tokens,
            budget_used,
            budget_max,
            requests,
            latency,
            preparation,
            upstream,
            tokens_before,
            tokens_after,
            memo_hits,
            upstream_errors,
        }
    }

    /// Counts one answered request, which took `took` to its headers, `upstream` of it
    /// waiting on upstream calls (`None`: it made none).
    pub(crate) fn record(
        &self,
        route: &'static str,
        status: u16,
        tenant: &str,
        took: Duration,
        upstream: Option<Duration>,
        outcome: Option<&Outcome>,
    ) {
        let tenant_label = || vec![("tenant", tenant.to_owned())];
        self.requests
            .get_or_create(&vec![
                ("route", route.to_owned()),
                ("status", status.to_string()),
                ("tenant", tenant.to_owned()),
            ])
            .inc();
        self.latency
            .get_or_create(&vec![("route", route.to_owned())])
            .observe(took.as_secs_f64());
        let route_label = vec![("route", route.to_owned())];
        let waited = upstream.unwrap_or_default();
        self.preparation
            .get_or_create(&route_label)
            .observe(took.saturating_sub(waited).as_secs_f64());
        if let Some(upstream) = upstream {
            self.upstream
                .get_or_create(&route_label)
                .observe(upstream.as_secs_f64());
        }
        let Some(outcome) = outcome else { return };
        if let Some((before, after, hit)) = outcome.report {
            let labels = tenant_label();
            self.tokens_before
                .get_or_create(&labels)
                .inc_by(before as u64);
            self.tokens_after
                .get_or_create(&labels)
                .inc_by(after as u64);
            if hit {
                self.memo_hits.get_or_create(&labels).inc();
            }
        }
        if let Some(executor) = outcome.executor {
            self.executors
                .get_or_create(&vec![
                    ("executor", executor.as_str().to_owned()),
                    ("tenant", tenant.to_owned()),
                ])
                .inc();
        }
        if let Some(applied) = outcome.provider_edits {
            let labels = tenant_label();
            self.provider_cleared_tool_uses
                .get_or_create(&labels)
                .inc_by(applied.cleared_tool_uses as u64);
            self.provider_cleared_tokens
                .get_or_create(&labels)
                .inc_by(applied.cleared_input_tokens as u64);
        }
        if let Some(kind) = &outcome.upstream_error {
            self.upstream_errors
                .get_or_create(&vec![("kind", kind.clone())])
                .inc();
        }
    }

    /// Sets what `tenant`'s `limit` has used of its `max`, read at scrape time.
    pub(crate) fn budget(&self, tenant: &str, limit: &'static str, used: f64, max: f64) {
        let labels = vec![("tenant", tenant.to_owned()), ("limit", limit.to_owned())];
        self.budget_used.get_or_create(&labels).set(used);
        self.budget_max.get_or_create(&labels).set(max);
    }

    /// The counters the ledger reports to.
    pub(crate) fn ledger_counters(&self) -> super::ledger::Counters {
        self.ledger.clone()
    }

    /// The text `/metrics` answers.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
