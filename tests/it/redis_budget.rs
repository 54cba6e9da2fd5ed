//! `RedisBudgetStore` against a real Redis: the same behaviour as the in-process store
//! (every limit checked before the call, settled after), counters shared by every store on
//! the server, no overspend from calls in flight together on different connections, and a
//! window's counter expiring when the window ends. `scripts/test.sh` starts the server.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::redis::{redis_url, unique_prefix};
use llm_context::budget::{Amounts, Budget, BudgetKey, BudgetLayer, BudgetStore};
use llm_context::mock::MockModel;
use llm_context::redis::{RedisOptions, RedisStores};
use llm_context::{ChatRequest, Message, Scope};
use tower::{Layer, ServiceExt};

async fn stores(prefix: &str) -> RedisStores {
    let options = RedisOptions::default().with_key_prefix(prefix);
    RedisStores::connect_with(&redis_url(), options)
        .await
        .unwrap()
}

fn budget(toml: &str) -> Budget {
    toml::from_str(toml).unwrap()
}

fn one_call() -> Amounts {
    Amounts {
        calls: 1.0,
        input_tokens: 1_200.0,
        output_tokens: 300.0,
        cost_usd: 0.0081,
    }
}

#[tokio::test]
async fn limits_are_checked_reserved_and_settled_in_redis() {
    let prefix = unique_prefix("budget-store");
    let store = stores(&prefix).await.budgets;
    let limits =
        budget("calls_per_hour = 2\ninput_tokens_per_session = 3000\ncost_usd_per_day = 1.0")
            .limits();
    let key = BudgetKey::new(&Scope::org("acme").with_domain("support"), "sitzung:1");
    let now = SystemTime::now();
    let first = store
        .reserve(&key, &limits, one_call(), now)
        .await
        .unwrap()
        .unwrap();
    // Settled from what the provider counted: fewer input tokens than estimated.
    let used = Amounts {
        calls: 1.0,
        input_tokens: 1_000.0,
        output_tokens: 120.0,
        cost_usd: 0.0048,
    };
    store.settle(&first, used.minus(&one_call())).await.unwrap();
    let figures = store.used(&key, &limits, now).await.unwrap();
    assert_eq!(figures[0], 1.0);
    assert_eq!(figures[1], 1_000.0);
    assert!((figures[2] - 0.0048).abs() < 1e-12, "{figures:?}");
    store
        .reserve(&key, &limits, one_call(), now)
        .await
        .unwrap()
        .unwrap();
    // A third call would be the hour's third: refused, and nothing added.
    let refused = store
        .reserve(&key, &limits, one_call(), now)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.limit, "calls_per_hour");
    assert_eq!(refused.used, 2.0);
    assert!(refused.resets_at.unwrap() > now);
    assert_eq!(store.used(&key, &limits, now).await.unwrap()[1], 2_200.0);
    // Another session of the tenant has its own session counter, and shares the hour.
    let other = BudgetKey::new(&Scope::org("acme").with_domain("support"), "sitzung:2");
    let e = store
        .reserve(&other, &limits, one_call(), now)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.limit, "calls_per_hour");
    assert_eq!(store.used(&other, &limits, now).await.unwrap()[1], 0.0);
    // The next hour starts again from zero.
    let next_hour = UNIX_EPOCH
        + Duration::from_secs(
            (now.duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600 + 1) * 3600,
        );
    let hourly = budget("calls_per_hour = 2").limits();
    store
        .reserve(&key, &hourly, one_call(), next_hour)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn stores_on_one_redis_share_a_tenants_budget_without_overspending() {
    let prefix = unique_prefix("budget-shared");
    let limits = budget("calls_per_day = 7").limits();
    let key = BudgetKey::new(&Scope::org("globex"), "s");
    // Four replicas' stores, each on its own connection, 40 calls at once.
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(Arc::new(stores(&prefix).await.budgets));
    }
    let calls = (0..40).map(|i| {
        let store = replicas[i % 4].clone();
        let (key, limits) = (key.clone(), limits.clone());
        tokio::spawn(async move {
            store
                .reserve(&key, &limits, one_call(), SystemTime::now())
                .await
                .unwrap()
                .is_ok()
        })
    });
    let mut granted = 0;
    for call in calls {
        granted += usize::from(call.await.unwrap());
    }
    assert_eq!(granted, 7);
}

#[tokio::test]
async fn the_layer_on_redis_refuses_what_another_replica_spent() {
    let prefix = unique_prefix("budget-layer");
    let budget = budget("calls_per_hour = 2");
    let model = MockModel::echo();
    let replica = |store: RedisStores| {
        BudgetLayer::new(&budget)
            .with_store(Arc::new(store.budgets))
            .layer(model.clone())
    };
    let a = replica(stores(&prefix).await);
    let b = replica(stores(&prefix).await);
    let ask = || {
        ChatRequest::new(
            "claude-sonnet-4-6",
            vec![Message::user("Wie viel kostet das? 費用は?")],
        )
        .with_scope(Scope::org("acme"))
    };
    a.clone().oneshot(ask()).await.unwrap();
    b.clone().oneshot(ask()).await.unwrap();
    let err = a.clone().oneshot(ask()).await.unwrap_err();
    assert!(err.to_string().contains("calls_per_hour"), "{err}");
    assert_eq!(model.calls(), 2);
}
