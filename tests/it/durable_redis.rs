//! The store contract against Redis, and what only a shared server can show: the
//! server's own expiry cleaning the listing index, namespaces, listing without SCAN.
//! Needs `REDIS_URL`: `bash scripts/test.sh` starts a server and sets it.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::contract::{Backend, tenant};
use llm_context::durable::{ContextRecord, ContextStore, Memory};
use llm_context::redis::RedisDurableStore;
use serde_json::json;

fn redis_url() -> String {
    std::env::var("REDIS_URL").expect("REDIS_URL is not set: run `bash scripts/test.sh`")
}

async fn store() -> RedisDurableStore {
    RedisDurableStore::connect(&redis_url())
        .await
        .expect("cannot reach the Redis at REDIS_URL")
}

async fn backend() -> Backend {
    let store = Arc::new(store().await);
    Backend {
        contexts: store.clone(),
        memory: store,
        guard: Box::new(()),
    }
}

store_contract!(backend());

async fn raw() -> redis_client::aio::MultiplexedConnection {
    redis_client::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn expired_entries_leave_the_index_without_scan() {
    let store = store().await;
    let memory = Memory::new(Arc::new(store.clone()));
    let scope = tenant("redis-expiry");
    memory
        .put(&scope, "tmp/a", json!(1), Some(Duration::from_millis(100)))
        .await
        .unwrap();
    memory.put(&scope, "tmp/b", json!(2), None).await.unwrap();
    let index = format!("{}:memidx:{}", store.namespace(), scope.key());
    let mut conn = raw().await;
    let members: u64 = redis_client::cmd("ZCARD")
        .arg(&index)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(members, 2);
    // Redis itself removes the expired hash; the next listing drops its index member.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let listed = memory.list(&scope, "tmp/", 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "tmp/b");
    let members: u64 = redis_client::cmd("ZCARD")
        .arg(&index)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(members, 1);
}

#[tokio::test]
async fn namespaces_keep_applications_apart() {
    let a = store().await.with_namespace("app-a");
    let b = store().await.with_namespace("app-b");
    let scope = tenant("redis-ns");
    a.save(&scope, "root", &ContextRecord::new()).await.unwrap();
    assert!(b.load(&scope, "root").await.unwrap().is_none());
    assert_eq!(a.load(&scope, "root").await.unwrap().unwrap().version, 1);
}
