//! The retry policy in a stack: under `tower::timeout`, with the context layers above
//! it, and with usage counted once per successful call.

use std::time::{Duration, Instant};

use llm_context::mock::MockModel;
use llm_context::openai::OpenAi;
use llm_context::prefix::PrefixLayer;
use llm_context::retry::RetryPolicy;
use llm_context::usage::{UsageLayer, UsageMeter};
use llm_context::{
    BoxError, ChatRequest, ContextLimitError, ContextPolicy, ContextPolicyLayer, Message, Scope,
};
use tower::retry::Policy;
use tower::{ServiceBuilder, ServiceExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

fn ok() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    )
}

fn client(server: &MockServer) -> OpenAi {
    OpenAi::builder()
        .base_url(format!("{}/v1", server.uri()))
        .api_key("k")
        .build()
        .unwrap()
}

fn quick() -> RetryPolicy {
    RetryPolicy::default().with_base_delay(Duration::from_millis(1))
}

#[tokio::test]
async fn an_elapsed_attempt_under_tower_timeout_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok().set_delay(Duration::from_secs(5)))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok())
        .mount(&server)
        .await;

    let started = Instant::now();
    let reply = ServiceBuilder::new()
        .retry(quick())
        .timeout(Duration::from_millis(300))
        .service(client(&server))
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(reply.message.text(), "Hikes start at 08:00 sharp.");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the slow attempt was not cut"
    );
}

#[tokio::test]
async fn the_last_elapsed_error_comes_back_after_the_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok().set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let err: BoxError = ServiceBuilder::new()
        .retry(quick().with_max_retries(2))
        .timeout(Duration::from_millis(100))
        .service(client(&server))
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(err.is::<tower::timeout::error::Elapsed>(), "{err}");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_context_limit_is_not_retried() {
    let model = MockModel::echo();
    let policy = ContextPolicy::default()
        .with_max_context_tokens(1_000)
        .with_reserve_tokens(100);
    let mut req = ChatRequest::new("m", vec![Message::user("word ".repeat(5_000))]);
    let err = ServiceBuilder::new()
        .retry(quick())
        .layer(ContextPolicyLayer::new(policy).unwrap())
        .service(model.clone())
        .oneshot(req.clone())
        .await
        .unwrap_err();
    assert!(err.is::<ContextLimitError>(), "{err}");
    assert_eq!(model.calls(), 0);
    // The policy itself declines it (a retry would only fail the same way again).
    let mut result: Result<llm_context::ChatResponse, BoxError> = Err(err);
    assert!(Policy::retry(&mut quick(), &mut req, &mut result).is_none());
}

#[tokio::test]
async fn the_whole_stack_retries_below_the_context_layers_and_counts_usage_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_raw("busy", "text/plain"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok())
        .mount(&server)
        .await;

    let meter = UsageMeter::new();
    let stack = ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(ContextPolicy::default()).unwrap())
        .layer(PrefixLayer::new())
        .layer(UsageLayer::new(meter.clone()))
        .retry(quick())
        .timeout(Duration::from_secs(10))
        .service(client(&server));
    let req = ChatRequest::new("gpt-5.4", vec![Message::user("hi")]).with_scope(Scope::org("acme"));
    let reply = stack.oneshot(req).await.unwrap();
    // No max_tokens in the policy: the model's window from the built-in catalog (272k for
    // the GPT-5 family) less the default reserve.
    assert_eq!(reply.report.prompt_allowance, 272_000 - 2_048);
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
    let acme = meter.get(&Scope::org("acme"));
    assert_eq!(acme.requests, 1);
    assert_eq!(acme.usage.cache_read_tokens, 1_920);
}
