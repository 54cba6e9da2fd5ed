//! `BudgetLayer`: every limit kind, per session and per tenant, checked before the call is
//! sent and settled from what the provider counted; memo hits free; calls in flight at
//! once never overspend; a store that is away fails open or closed as chosen.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use llm_context_layers::budget::{
    Amounts, Budget, BudgetExceeded, BudgetKey, BudgetLayer, BudgetStore, Limit, LocalBudgetStore,
    Reserved,
};
use llm_context_layers::memo::{LocalMemoStore, MemoLayer};
use llm_context_layers::mock::MockModel;
use llm_context_layers::stream::Streaming;
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, Message, Scope, StoreError, StoreErrorKind, Usage,
};
use tower::{Layer, ServiceExt};

fn budget(toml: &str) -> Budget {
    toml::from_str(toml).unwrap()
}

/// A turn of a real-looking conversation: non-ASCII, a log excerpt, ~`chars` long.
fn ask(scope: &Scope, session: &str, chars: usize) -> ChatRequest {
    let line = "ERROR db: connexion refusée (接続拒否) at pool.rs:88\n";
    let text: String = line.chars().cycle().take(chars).collect();
    ChatRequest::new("claude-sonnet-4-6", vec![Message::user(text)])
        .with_scope(scope.clone())
        .with_session(session)
}

fn exceeded(e: &BoxError) -> &BudgetExceeded {
    e.downcast_ref::<BudgetExceeded>()
        .unwrap_or_else(|| panic!("not a budget error: {e}"))
}

#[tokio::test]
async fn each_kind_of_limit_refuses_the_call_that_would_cross_it_before_it_is_sent() {
    let acme = Scope::org("acme");
    let cases = [
        ("calls_per_day = 3", None, "calls_per_day"),
        (
            "input_tokens_per_hour = 10000",
            None,
            "input_tokens_per_hour",
        ),
        (
            "output_tokens_per_month = 1500",
            Some(1_000),
            "output_tokens_per_month",
        ),
        ("cost_usd_per_day = 0.05", Some(100), "cost_usd_per_day"),
    ];
    for (limits, max_output, name) in cases {
        let model = MockModel::echo();
        let layer = BudgetLayer::new(&budget(limits));
        let agent = layer.layer(model.clone());
        let mut req = ask(&acme, "s1", 4_000);
        req.params.max_output_tokens = max_output;
        let mut sent = 0;
        let err = loop {
            match agent.clone().oneshot(req.clone()).await {
                Ok(_) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 100, "{name} never refused a call");
        };
        assert!(sent >= 1, "{name}: the first call fits");
        let e = exceeded(&err);
        assert_eq!(e.limit, name);
        assert!(e.used + e.requested > e.max, "{e}");
        assert!(e.resets_at.unwrap() > SystemTime::now(), "{e}");
        assert_eq!(model.calls(), sent, "{name}: the refused call was not sent");
        // What the store holds is what the refusal said was used. (It may pass the limit
        // by what the provider counted over an estimate: the mock ignores the output
        // limit, as a provider's count may differ from the estimate.)
        let limits = layer.limits_for(&acme).to_vec();
        let used = layer
            .store()
            .used(&BudgetKey::new(&acme, "s1"), &limits, SystemTime::now())
            .await
            .unwrap()[0];
        assert_eq!(used, e.used, "{name}");
        if name == "calls_per_day" {
            assert_eq!(used, e.max, "calls are counted exactly");
        }
    }
}

#[tokio::test]
async fn a_session_limit_counts_per_session_and_a_tenant_limit_per_tenant() {
    let model = MockModel::echo();
    let layer = BudgetLayer::new(&budget("calls_per_session = 1\ncalls_per_hour = 3"))
        .for_tenant(&Scope::org("big"), &budget("calls_per_hour = 100"));
    let agent = layer.layer(model.clone());
    let (acme, other, big) = (Scope::org("acme"), Scope::org("other"), Scope::org("big"));
    let call = |scope: &Scope, session: &str| agent.clone().oneshot(ask(scope, session, 50));
    call(&acme, "a").await.unwrap();
    let e = call(&acme, "a").await.unwrap_err();
    assert_eq!(exceeded(&e).limit, "calls_per_session");
    assert_eq!(
        exceeded(&e).resets_at,
        None,
        "a session's window never resets"
    );
    call(&acme, "b").await.unwrap();
    call(&acme, "c").await.unwrap();
    // Three sessions of one tenant: its hour is spent, whatever the session.
    let e = call(&acme, "d").await.unwrap_err();
    assert_eq!(exceeded(&e).limit, "calls_per_hour");
    // Another tenant has its own counters; one with its own budget has its own limits.
    call(&other, "a").await.unwrap();
    for session in ["a", "a", "a", "a"] {
        call(&big, session).await.unwrap();
    }
    assert_eq!(model.calls(), 8);
}

#[tokio::test]
async fn a_call_is_settled_from_what_the_provider_counted() {
    // The provider counts 900 fresh, 4,000 cached and 100 written prompt tokens, and 250
    // output tokens, whatever the estimate said.
    let provider = tower::service_fn(|_req: ChatRequest| async {
        let usage = Usage::new(900, 250, 4_000, 100);
        Ok::<_, BoxError>(ChatResponse::new(Message::assistant("ok")).with_usage(usage))
    });
    let layer = BudgetLayer::new(&budget(
        "input_tokens_per_day = 100000\noutput_tokens_per_day = 100000\ncost_usd_per_day = 10.0",
    ));
    let agent = layer.layer(provider);
    let acme = Scope::org("acme");
    agent.clone().oneshot(ask(&acme, "s", 400)).await.unwrap();
    let limits = layer.limits_for(&acme).to_vec();
    let used = layer
        .store()
        .used(&BudgetKey::new(&acme, "s"), &limits, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(used[0], 5_000.0, "every prompt token, cached or not");
    assert_eq!(used[1], 250.0, "what was output, not the 4,096 reserved");
    let priced =
        llm_context_layers::catalog::cost("claude-sonnet-4-6", &Usage::new(900, 250, 4_000, 100))
            .unwrap();
    assert!((used[2] - priced).abs() < 1e-12, "{} vs {priced}", used[2]);
}

#[tokio::test]
async fn memo_hits_cost_nothing() {
    let model = MockModel::echo();
    let layer = BudgetLayer::new(&budget("calls_per_hour = 2"));
    // Outside the memo, so every hit reaches the layer and is refunded once known.
    let memo = MemoLayer::new(Arc::new(LocalMemoStore::default()));
    let agent = layer.clone().layer(memo.layer(model.clone()));
    let acme = Scope::org("acme");
    let req = ask(&acme, "s", 80).with_temperature(0.0);
    for _ in 0..5 {
        agent.clone().oneshot(req.clone()).await.unwrap();
    }
    let limits = layer.limits_for(&acme).to_vec();
    let counted = layer
        .store()
        .used(&BudgetKey::new(&acme, "s"), &limits, SystemTime::now())
        .await
        .unwrap()[0];
    assert_eq!(counted, 1.0, "one provider call; four hits, free");
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn calls_in_flight_at_once_never_overspend() {
    let started = Arc::new(AtomicUsize::new(0));
    let provider = {
        let started = started.clone();
        tower::service_fn(move |_req: ChatRequest| {
            started.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, BoxError>(ChatResponse::new(Message::assistant("ok")))
            }
        })
    };
    let agent = BudgetLayer::new(&budget("calls_per_hour = 5")).layer(provider);
    let acme = Scope::org("acme");
    let calls: Vec<_> = (0..20)
        .map(|i| agent.clone().oneshot(ask(&acme, &format!("s{i}"), 50)))
        .collect();
    let results = futures_util::future::join_all(calls).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 5);
    assert_eq!(started.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_stream_is_settled_from_its_final_event() {
    let model = MockModel::echo();
    let layer = BudgetLayer::new(&budget("output_tokens_per_day = 100000"));
    let agent = layer.layer(model.clone());
    let acme = Scope::org("acme");
    let stream = agent
        .clone()
        .oneshot(Streaming(ask(&acme, "s", 60)))
        .await
        .unwrap();
    let response = stream.response().await.unwrap();
    let limits = layer.limits_for(&acme).to_vec();
    let used = layer
        .store()
        .used(&BudgetKey::new(&acme, "s"), &limits, SystemTime::now())
        .await
        .unwrap()[0];
    assert_eq!(used, response.usage.output_tokens as f64);
    assert!(used < 4_096.0, "the reserve was given back");
}

/// A store that never answers, as Redis away would.
#[derive(Debug)]
struct Away;

#[async_trait]
impl BudgetStore for Away {
    async fn reserve(
        &self,
        _: &BudgetKey,
        _: &[Limit],
        _: Amounts,
        _: SystemTime,
    ) -> Result<Result<Reserved, BudgetExceeded>, StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "budget store away",
        ))
    }
    async fn settle(&self, _: &Reserved, _: Amounts) -> Result<(), StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "budget store away",
        ))
    }
    async fn used(
        &self,
        _: &BudgetKey,
        _: &[Limit],
        _: SystemTime,
    ) -> Result<Vec<f64>, StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "budget store away",
        ))
    }
}

#[tokio::test]
async fn a_store_that_is_away_fails_open_by_default_or_closed_when_asked() {
    let model = MockModel::echo();
    let open = BudgetLayer::new(&budget("calls_per_hour = 1")).with_store(Arc::new(Away));
    let acme = Scope::org("acme");
    for _ in 0..3 {
        open.layer(model.clone())
            .oneshot(ask(&acme, "s", 50))
            .await
            .unwrap();
    }
    let closed = open.clone().fail_closed(true);
    let err = closed
        .layer(model.clone())
        .oneshot(ask(&acme, "s", 50))
        .await
        .unwrap_err();
    assert!(err.downcast_ref::<StoreError>().is_some(), "{err}");
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn a_new_period_starts_from_zero() {
    let store = LocalBudgetStore::default();
    let limits = budget("calls_per_hour = 1").limits();
    let key = BudgetKey::new(&Scope::org("acme"), "s");
    let one = Amounts {
        calls: 1.0,
        ..Amounts::default()
    };
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    assert!(store.reserve(&key, &limits, one, t).await.unwrap().is_ok());
    let e = store
        .reserve(&key, &limits, one, t)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        e.resets_at,
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 / 3600 * 3600 + 3600))
    );
    let next_hour = e.resets_at.unwrap();
    assert!(
        store
            .reserve(&key, &limits, one, next_hour)
            .await
            .unwrap()
            .is_ok()
    );
}
