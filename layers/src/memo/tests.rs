//! The memo layer driven by tower-test's mock: readiness and inner errors pass through,
//! the inner service sees the request unchanged, and a hit never reaches it.

use std::sync::Arc;

use tower_test::mock;

use super::*;
use crate::{ChatRequest, ChatResponse, Message, Scope};

type Handle = mock::Handle<ChatRequest, ChatResponse>;

fn layer() -> MemoLayer {
    MemoLayer::new(Arc::new(LocalMemoStore::default()))
}

fn request(text: &str) -> ChatRequest {
    ChatRequest::new("m", vec![Message::user(text)])
        .with_scope(Scope::org("acme"))
        .with_temperature(0.0)
}

#[derive(Debug, thiserror::Error)]
#[error("provider said no")]
struct ProviderSaidNo;

type Pending = mock::SendResponse<ChatResponse>;

/// The next request the mock receives; fails the test rather than hang when none comes.
async fn next(handle: &mut Handle) -> (ChatRequest, Pending) {
    tokio::time::timeout(std::time::Duration::from_secs(5), handle.next_request())
        .await
        .expect("a request reached the mock in time")
        .expect("the mock is open")
}

/// Answers the next request the mock receives with `reply`, returning the request.
async fn answer(handle: &mut Handle, reply: &str) -> ChatRequest {
    let (req, send) = next(handle).await;
    send.send_response(ChatResponse::new(Message::assistant(reply)));
    req
}

#[tokio::test]
async fn readiness_passes_through() {
    let (mut service, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer());
    handle.allow(0);
    assert!(service.poll_ready().is_pending());
    handle.allow(1);
    assert!(service.poll_ready().is_ready());
}

#[tokio::test]
async fn readiness_errors_pass_through() {
    let (mut service, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer());
    handle.send_error(ProviderSaidNo);
    let err = match service.poll_ready() {
        std::task::Poll::Ready(Err(e)) => e,
        other => panic!("expected a readiness error, got {other:?}"),
    };
    assert!(err.downcast_ref::<ProviderSaidNo>().is_some());
}

#[tokio::test]
async fn inner_errors_pass_through_typed_and_are_not_memoized() {
    let (mut service, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer());
    for _ in 0..2 {
        handle.allow(1);
        assert!(service.poll_ready().is_ready());
        let call = tokio::spawn(service.call(request("q")));
        let (_, send) = next(&mut handle).await;
        send.send_error(ProviderSaidNo);
        let err = call.await.unwrap().unwrap_err();
        assert!(err.downcast_ref::<ProviderSaidNo>().is_some(), "{err}");
    }
    // Both identical requests reached the provider: the error was not stored.
}

#[tokio::test]
async fn the_inner_service_sees_the_request_unchanged_and_a_hit_skips_it() {
    let (mut service, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer());
    handle.allow(2);
    assert!(service.poll_ready().is_ready());
    let call = tokio::spawn(service.call(request("q")));
    assert_eq!(answer(&mut handle, "a").await, request("q"));
    let first = call.await.unwrap().unwrap();
    assert!(!first.report.memo_hit);

    assert!(service.poll_ready().is_ready());
    let second = service.call(request("q")).await.unwrap();
    assert!(second.report.memo_hit);
    assert_eq!(second.message.text(), "a");
    assert!(
        handle.poll_request().is_pending(),
        "a memo hit must not reach the inner service"
    );
}

#[tokio::test]
async fn requests_that_may_not_be_memoized_pass_straight_through() {
    let (mut service, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer());
    let sampled = request("q").with_temperature(0.9);
    for _ in 0..2 {
        handle.allow(1);
        assert!(service.poll_ready().is_ready());
        let call = tokio::spawn(service.call(sampled.clone()));
        assert_eq!(answer(&mut handle, "a").await, sampled);
        assert!(!call.await.unwrap().unwrap().report.memo_hit);
    }
}

#[tokio::test]
async fn a_disabled_layer_memoizes_nothing() {
    let (mut service, mut handle) =
        mock::spawn_layer::<ChatRequest, ChatResponse, _>(MemoLayer::disabled());
    for _ in 0..2 {
        handle.allow(1);
        assert!(service.poll_ready().is_ready());
        let call = tokio::spawn(service.call(request("q")));
        answer(&mut handle, "a").await;
        assert!(!call.await.unwrap().unwrap().report.memo_hit);
    }
}

#[tokio::test]
async fn finished_flights_leave_nothing_behind() {
    let layer = layer();
    let flights = Arc::clone(&layer.shared.as_ref().unwrap().flights);
    let (mut service, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer);
    handle.allow(2);
    assert!(service.poll_ready().is_ready());
    let ok = tokio::spawn(service.call(request("ok")));
    answer(&mut handle, "a").await;
    ok.await.unwrap().unwrap();
    assert!(service.poll_ready().is_ready());
    let failed = tokio::spawn(service.call(request("fails")));
    let (_, send) = next(&mut handle).await;
    send.send_error(ProviderSaidNo);
    failed.await.unwrap().unwrap_err();
    assert_eq!(flights.in_flight(), 0);
}
