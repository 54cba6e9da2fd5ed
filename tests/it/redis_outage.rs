//! Redis stopped mid-test: requests still succeed through the provider, with a warning,
//! and the memo comes back when Redis does. The test runs a redis-server of its own (the
//! one scripts/test.sh installs) so that it can stop it.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use llm_context::memo::MemoLayer;
use llm_context::mock::MockModel;
use llm_context::redis::{RedisOptions, RedisStores};
use llm_context::{ChatRequest, Message, Scope};
use tower::{Layer, ServiceExt};

fn question() -> ChatRequest {
    ChatRequest::new("fake-model", vec![Message::user("what is the number?")])
        .with_scope(Scope::org(1))
        .with_temperature(0.0)
}

#[tokio::test(flavor = "current_thread")]
async fn redis_stopped_mid_test_requests_still_succeed_through_the_provider() {
    let mut redis = crate::support::redis::OwnRedis::start();
    let stores = RedisStores::connect_with(
        &redis.url(),
        RedisOptions::default().with_key_prefix(crate::support::redis::unique_prefix("outage")),
    )
    .await
    .unwrap();
    let provider = MockModel::echo();
    let model = MemoLayer::new(Arc::new(stores.memo))
        .store_timeout(Duration::from_millis(200))
        .layer(provider.clone());

    model.clone().oneshot(question()).await.unwrap();
    assert!(
        model
            .clone()
            .oneshot(question())
            .await
            .unwrap()
            .report
            .memo_hit
    );
    assert_eq!(provider.calls(), 1);

    let (warnings, guard) = crate::support::redis::capture_warnings();
    redis.stop();
    for _ in 0..3 {
        let reply = model.clone().oneshot(question()).await.unwrap();
        assert!(!reply.report.memo_hit);
        assert_eq!(
            reply.message.text(),
            "saw 1 messages; last: what is the number?"
        );
    }
    assert_eq!(provider.calls(), 4, "every request went to the provider");
    {
        let warnings = warnings.lock().unwrap();
        assert!(!warnings.is_empty(), "a warning says why");
        for w in warnings.iter() {
            assert!(w.contains("memo store get failed"), "{w}");
            assert!(w.contains("org1:domNone"), "{w}");
        }
    }
    drop(guard);

    // Redis comes back on the same port: the connection manager reconnects and the memo
    // works again, without a new store or a restart.
    let _redis = crate::support::redis::OwnRedis::start_on(redis.port);
    crate::support::redis::until_memo_hit(
        &model,
        question,
        Duration::from_secs(20),
        "the memo did not come back after Redis restarted",
    )
    .await;
}
