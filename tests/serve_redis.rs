//! Replicas of `llm_context::serve` sharing one real Redis: a memo entry written through
//! one is a hit through the other, and Redis away (at start, or mid-run) degrades without
//! failing a request, then recovers. `scripts/test.sh` starts the shared redis-server;
//! the outage test runs one of its own.

mod common;
mod support;

use std::time::{Duration, Instant};

use common::fixture;
use common::proxy::{openai, serving};
use llm_context::redis::{RedisOptions, RedisStores};
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use support::{OwnRedis, free_port, redis_url, unique_prefix};
use wiremock::ResponseTemplate;

async fn upstream() -> wiremock::MockServer {
    common::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await
}

fn fixed() -> Value {
    json!({"model": "gpt-5.4", "temperature": 0,
           "messages": [{"role": "user", "content": "Warum schlug das Deployment fehl? なぜ?"}]})
}

/// The memo header of one call of `fixed()`, which must be answered 200.
async fn memo_of(url: &str) -> String {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .body(fixed().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "a request is served whatever Redis does");
    r.headers()["x-llm-context-memo"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn readyz(url: &str) -> Value {
    let r = reqwest::get(format!("{url}/readyz")).await.unwrap();
    assert_eq!(r.status(), 200);
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn a_memo_entry_written_through_one_replica_is_a_hit_through_the_other() {
    let upstream = upstream().await;
    let prefix = unique_prefix("serve-replicas");
    let replica = |prefix: String| {
        let upstream = upstream.uri();
        async move {
            let options = RedisOptions::default().with_key_prefix(prefix);
            let stores = RedisStores::connect_with(&redis_url(), options)
                .await
                .unwrap();
            let proxy = Proxy::builder()
                .redis(stores)
                .openai(openai(&upstream))
                .build()
                .unwrap();
            serving(proxy).await
        }
    };
    let a = replica(prefix.clone()).await;
    let b = replica(prefix).await;
    assert_eq!(readyz(&a).await["status"], "ready");
    assert_eq!(memo_of(&a).await, "miss");
    assert_eq!(memo_of(&b).await, "hit");
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn redis_away_at_start_degrades_then_recovers_when_it_returns() {
    let upstream = upstream().await;
    let port = free_port();
    // Nothing listens there yet: the stores start degraded.
    let options = RedisOptions::default()
        .with_key_prefix(unique_prefix("serve-outage"))
        .with_connect_timeout(Duration::from_millis(300));
    let stores = RedisStores::connect_with(&format!("redis://127.0.0.1:{port}/"), options)
        .await
        .unwrap();
    let proxy = Proxy::builder()
        .redis(stores)
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    assert_eq!(readyz(&url).await["status"], "degraded");
    assert_eq!(memo_of(&url).await, "miss");
    assert_eq!(memo_of(&url).await, "miss", "no memo while Redis is away");
    let mut redis = OwnRedis::start_on(port);
    // Back: ready again, and the memo works once an answer has been stored.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ready = readyz(&url).await["status"] == "ready";
        if ready && memo_of(&url).await == "hit" {
            break;
        }
        assert!(Instant::now() < deadline, "the proxy did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Away mid-run: still served, and said.
    redis.stop();
    assert_eq!(readyz(&url).await["status"], "degraded");
    memo_of(&url).await;
}
