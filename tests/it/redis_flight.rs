//! Single flight across replicas: several memo stacks, each with its own Redis memo
//! store (its own connection, standing for a replica), share one redis-server (run
//! through scripts/test.sh) and one OpenAI-compatible HTTP server on 127.0.0.1 that
//! counts the calls it gets.
#![cfg(all(feature = "redis", feature = "openai"))]

use std::sync::Arc;
use std::time::Duration;

use llm_context::memo::MemoLayer;
use llm_context::openai::OpenAi;
use llm_context::redis::{RedisOptions, RedisStores};
use llm_context::{BoxError, ChatRequest, ChatResponse, Message, Scope};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

type Replica = BoxCloneSyncService<ChatRequest, ChatResponse, BoxError>;

const ANSWER: &str = "Hikes start at 08:00 sharp.";

fn answer() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    )
}

/// A provider whose first call takes `first` and every later one `later`.
async fn provider(first: Duration, later: Duration) -> MockServer {
    provider_first(answer().set_delay(first), later).await
}

/// A provider that answers its first call with `first`, and every later one with the
/// answer after `later`.
async fn provider_first(first: ResponseTemplate, later: Duration) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(first)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(answer().set_delay(later))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

async fn calls(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

/// One replica: its own connection to the test Redis, under the test's prefix, in front
/// of the real OpenAI client.
async fn replica(server: &MockServer, prefix: &str, lease: Duration) -> Replica {
    replica_limited(server, prefix, lease, 1_000).await
}

/// A replica whose client takes at most `limit` requests at once.
async fn replica_limited(
    server: &MockServer,
    prefix: &str,
    lease: Duration,
    limit: usize,
) -> Replica {
    let stores = RedisStores::connect_with(
        &crate::support::redis::redis_url(),
        RedisOptions::default()
            .with_key_prefix(prefix)
            .with_flight_lease(lease),
    )
    .await
    .unwrap();
    stores.ping().await.expect("the test Redis answers");
    let client = OpenAi::builder()
        .base_url(format!("{}/v1", server.uri()))
        .api_key("sk-test-flight")
        .build()
        .unwrap();
    let stack = MemoLayer::new(Arc::new(stores.memo))
        // Generous: on a loaded test machine a Redis round trip may pass the 100 ms
        // default, and a timed-out claim rightly makes its own call.
        .store_timeout(Duration::from_secs(2))
        .layer(tower::limit::ConcurrencyLimit::new(client, limit));
    BoxCloneSyncService::new(ServiceExt::<ChatRequest>::map_err(
        stack,
        Into::<BoxError>::into,
    ))
}

fn question(tenant: &str) -> ChatRequest {
    ChatRequest::new("gpt-5.4", vec![Message::user("When do hikes start?")])
        .with_scope(Scope::org(tenant))
        .with_temperature(0.0)
}

/// Waits until the provider has received `n` calls; fails the test after 10 s.
async fn until_calls(server: &MockServer, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while calls(server).await < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the provider never got call {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_on_many_replicas_make_one_provider_call() {
    const REPLICAS: usize = 4;
    const REQUESTS: usize = 24;
    let server = provider(Duration::from_millis(500), Duration::from_millis(500)).await;
    let prefix = crate::support::redis::unique_prefix("flight-many");
    let mut replicas = Vec::new();
    for _ in 0..REPLICAS {
        replicas.push(replica(&server, &prefix, Duration::from_secs(5)).await);
    }

    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let replica = replicas[i % REPLICAS].clone();
            tokio::spawn(replica.oneshot(question("acme")))
        })
        .collect();
    let mut hits = 0;
    for task in tasks {
        let reply = task.await.unwrap().unwrap();
        assert_eq!(reply.message.text(), ANSWER);
        hits += usize::from(reply.report.memo_hit);
    }
    assert_eq!(
        calls(&server).await,
        1,
        "one provider call for every replica"
    );
    assert_eq!(hits, REQUESTS - 1, "every other request was answered by it");

    // Another tenant asking the same makes its own call.
    let other = replicas[0]
        .clone()
        .oneshot(question("globex"))
        .await
        .unwrap();
    assert!(!other.report.memo_hit);
    assert_eq!(calls(&server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_at_once_when_the_leader_is_aborted() {
    let lease = Duration::from_secs(1);
    // The first call never ends within the test; the next one answers at once.
    let server = provider(Duration::from_secs(600), Duration::ZERO).await;
    let prefix = crate::support::redis::unique_prefix("flight-abort");
    let a = replica(&server, &prefix, lease).await;
    let b = replica(&server, &prefix, lease).await;

    let leader = tokio::spawn(a.oneshot(question("acme")));
    until_calls(&server, 1).await;
    let waiter = tokio::spawn(b.oneshot(question("acme")));

    // Longer than two leases: the leader renews its lease, so the waiter keeps waiting.
    tokio::time::sleep(lease * 5 / 2).await;
    assert!(!waiter.is_finished(), "the waiter waits for the leader");
    assert_eq!(
        calls(&server).await,
        1,
        "no second call while the leader lives"
    );

    leader.abort();
    let aborted = tokio::time::Instant::now();
    let reply = tokio::time::timeout(lease * 3, waiter)
        .await
        .expect("the waiter proceeds")
        .unwrap()
        .unwrap();
    let took = aborted.elapsed();
    assert!(
        took < lease,
        "the aborted leader released its lock: {took:?}"
    );
    assert_eq!(reply.message.text(), ANSWER);
    assert!(!reply.report.memo_hit, "the waiter made the call itself");
    assert_eq!(calls(&server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_within_the_lease_when_the_leader_dies() {
    let lease = Duration::from_secs(1);
    let server = provider(Duration::from_secs(600), Duration::ZERO).await;
    let prefix = crate::support::redis::unique_prefix("flight-dead");
    let a = replica(&server, &prefix, lease).await;
    let b = replica(&server, &prefix, lease).await;

    // The leader runs until its call reaches the provider, then stops dead: never polled
    // again and never dropped, as a process killed mid-call renews and releases nothing.
    let mut leader = Box::pin(a.oneshot(question("acme")));
    tokio::select! {
        _ = &mut leader => panic!("the leader's call cannot end"),
        () = until_calls(&server, 1) => {}
    }
    std::mem::forget(leader);
    let died = tokio::time::Instant::now();

    let reply = tokio::time::timeout(lease * 4, b.oneshot(question("acme")))
        .await
        .expect("the waiter proceeds once the lease lapses")
        .unwrap();
    let took = died.elapsed();
    // The lease had at least two thirds of its time left (renewed every third).
    assert!(
        took >= lease / 2,
        "the waiter waited for the lease: {took:?}"
    );
    assert!(
        took < lease * 2,
        "it took over within about the lease: {took:?}"
    );
    assert_eq!(reply.message.text(), ANSWER);
    assert!(!reply.report.memo_hit);
    assert_eq!(calls(&server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_call_fails_lets_the_waiters_proceed_at_once() {
    let lease = Duration::from_secs(5);
    let fails_after = Duration::from_millis(1500);
    let server = provider_first(
        ResponseTemplate::new(500)
            .set_body_raw("overloaded", "text/plain")
            .set_delay(fails_after),
        Duration::ZERO,
    )
    .await;
    let prefix = crate::support::redis::unique_prefix("flight-fail");
    let a = replica(&server, &prefix, lease).await;
    let b = replica(&server, &prefix, lease).await;

    let started = tokio::time::Instant::now();
    let leader = tokio::spawn(a.oneshot(question("acme")));
    until_calls(&server, 1).await;
    let waiter = tokio::spawn(b.oneshot(question("acme")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the waiter waits for the leader");

    assert!(
        leader.await.unwrap().is_err(),
        "the provider failed the leader"
    );
    let reply = waiter.await.unwrap().unwrap();
    let took = started.elapsed();
    // Without the release the waiter would wait out the lease after the failure.
    assert!(
        took < fails_after + lease / 2,
        "the waiter did not wait out the lease: {took:?}"
    );
    assert_eq!(reply.message.text(), ANSWER);
    assert_eq!(calls(&server).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gives_back_its_readiness_while_another_process_makes_the_call() {
    let lease = Duration::from_secs(1);
    let server = provider(Duration::from_secs(600), Duration::ZERO).await;
    let prefix = crate::support::redis::unique_prefix("flight-ready");
    let a = replica(&server, &prefix, lease).await;
    // One request at a time through B's client: a waiter that kept its permit would
    // stop every other request of B until the call elsewhere ends.
    let b = replica_limited(&server, &prefix, lease, 1).await;

    let _leader = tokio::spawn(a.oneshot(question("acme")));
    until_calls(&server, 1).await;
    let waiter = tokio::spawn(b.clone().oneshot(question("acme")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter waits for the leader");

    let other = ChatRequest::new("gpt-5.4", vec![Message::user("Where do hikes start?")])
        .with_scope(Scope::org("acme"))
        .with_temperature(0.0);
    let reply = tokio::time::timeout(Duration::from_secs(5), b.oneshot(other))
        .await
        .expect("another request of B is not held up by the waiter")
        .unwrap();
    assert_eq!(reply.message.text(), ANSWER);
    assert!(!waiter.is_finished(), "the waiter still waits");
    assert_eq!(calls(&server).await, 2);
}
