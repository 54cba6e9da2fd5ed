//! The Redis memo store against a real redis-server (run through scripts/test.sh): two
//! replicas share a memo within a tenant and never across tenants; entries expire.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use llm_context::memo::{MemoKey, MemoLayer, MemoStore};
use llm_context::mock::MockModel;
use llm_context::redis::{RedisMemoStore, RedisOptions, RedisStores};
use llm_context::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, Scope,
    StoreErrorKind,
};
use tower::{Service, ServiceBuilder, ServiceExt};

/// One replica: its own connection, its own provider, the whole stack.
async fn replica(
    prefix: &str,
) -> (
    impl Service<ChatRequest, Response = ChatResponse, Error = BoxError> + Clone,
    MockModel,
) {
    let stores = RedisStores::connect_with(
        &crate::support::redis::redis_url(),
        RedisOptions::default().with_key_prefix(prefix),
    )
    .await
    .expect("the test Redis is reachable (run scripts/test.sh)");
    let provider = MockModel::echo();
    let stack = ServiceBuilder::new()
        .layer(
            ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(8_000))
                .unwrap(),
        )
        .layer(MemoLayer::new(Arc::new(stores.memo)))
        .service(provider.clone());
    (stack, provider)
}

fn question(scope: Scope) -> ChatRequest {
    ChatRequest::new("fake-model", vec![Message::user("what is the number?")])
        .with_scope(scope)
        .with_session("s1")
        .with_temperature(0.0)
}

#[tokio::test]
async fn two_replicas_share_a_memo_hit_within_a_tenant_and_never_across() {
    let prefix = crate::support::redis::unique_prefix("replicas");
    let (a, provider_a) = replica(&prefix).await;
    let (b, provider_b) = replica(&prefix).await;

    let first = a.oneshot(question(Scope::org(1))).await.unwrap();
    assert!(!first.report.memo_hit);
    assert_eq!(provider_a.calls(), 1);

    let shared = b.clone().oneshot(question(Scope::org(1))).await.unwrap();
    assert!(shared.report.memo_hit, "replica B answered from A's call");
    assert_eq!(shared.message, first.message);
    assert_eq!(shared.usage, first.usage);
    assert_eq!(provider_b.calls(), 0);

    let other_tenant = b.oneshot(question(Scope::org(999))).await.unwrap();
    assert!(!other_tenant.report.memo_hit);
    assert_eq!(provider_b.calls(), 1, "org 999 never gets org 1's answer");
}

#[tokio::test]
async fn memo_entries_expire() {
    let stores = crate::support::redis::stores(
        "memo-ttl",
        RedisOptions::default().with_memo_ttl(Duration::from_millis(300)),
    )
    .await;
    let key = MemoKey::for_request(&question(Scope::org(1)));
    let response = ChatResponse::new(Message::assistant("42"));
    stores.memo.put(&key, &response).await.unwrap();
    assert_eq!(stores.memo.get(&key).await.unwrap(), Some(response));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(stores.memo.get(&key).await.unwrap(), None);
}

#[tokio::test]
async fn responses_over_the_bound_are_refused_as_too_large() {
    let stores = crate::support::redis::stores(
        "memo-bound",
        RedisOptions::default().with_max_memo_bytes(100),
    )
    .await;
    let key = MemoKey::for_request(&question(Scope::org(1)));
    let err = stores
        .memo
        .put(
            &key,
            &ChatResponse::new(Message::assistant("x".repeat(200))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TooLarge);
    assert_eq!(stores.memo.get(&key).await.unwrap(), None);
}

#[tokio::test]
async fn one_store_value_is_usable_behind_a_trait_object() {
    let stores = crate::support::redis::stores("memo-dyn", RedisOptions::default()).await;
    let store: Arc<dyn MemoStore> = Arc::new(RedisMemoStore::clone(&stores.memo));
    let key = MemoKey::for_request(&question(Scope::org(5)));
    store
        .put(&key, &ChatResponse::new(Message::assistant("five")))
        .await
        .unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().message.text(),
        "five"
    );
}

#[tokio::test]
async fn store_errors_never_show_the_password() {
    // Nothing listens on this port: the stores start degraded, and each call fails.
    let url = format!(
        "redis://:hunter2@127.0.0.1:{}/",
        crate::support::redis::free_port()
    );
    let stores = RedisStores::connect(&url).await.unwrap();
    let key = MemoKey::for_request(&question(Scope::org(1)));
    let err = stores.memo.get(&key).await.unwrap_err();
    assert!(
        matches!(
            err.kind,
            StoreErrorKind::Unavailable | StoreErrorKind::Timeout
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = stores.ping().await.unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}
