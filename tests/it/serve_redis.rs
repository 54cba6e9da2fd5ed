//! Replicas of `llm_context::serve` sharing one real Redis: a memo entry written through
//! one is a hit through the other, and Redis away (at start, or mid-run) degrades without
//! failing a request, then recovers. `scripts/test.sh` starts the shared redis-server;
//! the outage test runs one of its own.

use std::time::{Duration, Instant};

use crate::support::fixture;
use crate::support::proxy::{openai, serving};
use crate::support::redis::{OwnRedis, free_port, redis_url, unique_prefix};
use llm_context::ContextPolicy;
use llm_context::redis::{RedisOptions, RedisStores};
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

async fn upstream() -> wiremock::MockServer {
    crate::support::servers::mock_post(
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

/// A replica of a policy that prunes in large steps (cache-aware: down to a low-water
/// mark, then the same cut for as long as the rest fits), on Redis under `prefix`.
async fn pruning_replica(prefix: String, upstream: &str) -> String {
    let options = RedisOptions::default().with_key_prefix(prefix);
    let stores = RedisStores::connect_with(&redis_url(), options)
        .await
        .unwrap();
    let policy = ContextPolicy::default()
        .with_max_context_tokens(1_300)
        .with_reserve_tokens(100)
        .with_low_water_tokens(400);
    let proxy = Proxy::builder()
        .redis(stores)
        .policy(policy)
        .openai(openai(upstream))
        .build()
        .unwrap();
    serving(proxy).await
}

/// Plays one conversation on replica `a` until it prunes, then sends its next turn to
/// `b`: the first message after the system prompt of the request `a` sent upstream last,
/// and of the one `b` sent.
async fn first_kept_across(a: &str, b: &str, upstream: &wiremock::MockServer) -> (Value, Value) {
    let mut history = vec![json!({"role": "system", "content": "Du bist ein Agent. 日本語も可。"})];
    let ask = |url: &str, history: &[Value]| {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .body(json!({"model": "gpt-5.4", "messages": history}).to_string())
            .send()
    };
    let first_sent = || async {
        let sent = upstream.received_requests().await.unwrap();
        let body: Value = serde_json::from_slice(&sent.last().unwrap().body).unwrap();
        body["messages"][1].clone()
    };
    for turn in 0.. {
        assert!(turn < 40, "replica a never pruned");
        history.push(json!({"role": "user",
            "content": format!("Frage {turn}: warum? {}", "なぜ失敗した? ".repeat(30))}));
        let r = ask(a, &history).await.unwrap();
        assert_eq!(r.status(), 200);
        let removed = r.headers()["x-llm-context-removed-messages"]
            .to_str()
            .unwrap();
        history.push(json!({"role": "assistant", "content": format!("Antwort {turn}.")}));
        if removed != "0" {
            break;
        }
    }
    let on_a = first_sent().await;
    history.push(json!({"role": "user", "content": "Und jetzt? ".repeat(20)}));
    assert_eq!(ask(b, &history).await.unwrap().status(), 200);
    (on_a, first_sent().await)
}

#[tokio::test]
async fn a_sessions_cut_made_by_one_replica_is_kept_by_the_other() {
    let upstream = upstream().await;
    let prefix = unique_prefix("serve-cuts");
    let a = pruning_replica(prefix.clone(), &upstream.uri()).await;
    let b = pruning_replica(prefix, &upstream.uri()).await;
    let (on_a, on_b) = first_kept_across(&a, &b, &upstream).await;
    // The history starts at the same message: the cached prefix is read, not rewritten.
    assert_eq!(on_a, on_b);

    // The control: replicas on different prefixes share nothing, and the second one,
    // pruning without the first one's cut, starts the history elsewhere.
    let upstream = self::upstream().await;
    let a = pruning_replica(unique_prefix("serve-cuts-a"), &upstream.uri()).await;
    let b = pruning_replica(unique_prefix("serve-cuts-b"), &upstream.uri()).await;
    let (on_a, on_b) = first_kept_across(&a, &b, &upstream).await;
    assert_ne!(on_a, on_b);
}
