//! Calibration through `ContextPolicyLayer`: a provider that counts more tokens than the
//! estimate stops being sent more than fits once the layer has seen one response.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use llm_context_layers::tokens::{estimate_message_tokens, estimate_tool_tokens};
use llm_context_layers::{
    Calibration, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message,
};
use tower::{Layer, Service, ServiceExt, service_fn};

/// What a provider whose tokenizer counts twice the estimate answers: the prompt tokens it
/// counted, recorded in `counted`.
fn provider(
    counted: Arc<Mutex<Vec<u64>>>,
) -> impl Service<ChatRequest, Response = ChatResponse, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(move |req: ChatRequest| {
        let estimate = estimate_message_tokens(&req.messages) + estimate_tool_tokens(&req.tools);
        let prompt = (estimate as u64) * 2;
        counted.lock().unwrap().push(prompt);
        let mut reply = ChatResponse::new(Message::assistant(format!(
            "answer: {}",
            "because ".repeat(40)
        )));
        reply.usage.input_tokens = prompt;
        reply.usage.output_tokens = 90;
        std::future::ready(Ok(reply))
    })
}

/// allowance 2,800; each turn is about 170 estimated tokens.
fn policy() -> ContextPolicy {
    ContextPolicy::default()
        .with_max_context_tokens(3_000)
        .with_reserve_tokens(200)
}

/// Runs a 40-turn conversation; returns what the provider counted for each request.
async fn converse(layer: ContextPolicyLayer) -> Vec<u64> {
    let counted = Arc::default();
    let mut agent = layer.layer(provider(Arc::clone(&counted)));
    let mut history = Vec::new();
    for turn in 0..40 {
        history.push(Message::user(format!(
            "question {turn}: {}",
            "why? ".repeat(60)
        )));
        let req = ChatRequest::new("m", history.clone());
        let reply = ServiceExt::<ChatRequest>::ready(&mut agent)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap();
        history.push(reply.message);
    }
    counted.lock().unwrap().clone()
}

#[tokio::test]
async fn without_calibration_the_provider_counts_more_than_the_allowance() {
    let counted = converse(ContextPolicyLayer::new(policy()).unwrap()).await;
    assert!(counted.iter().any(|&c| c > 2_800), "{counted:?}");
}

#[tokio::test]
async fn with_calibration_what_the_provider_counts_fits_after_the_first_lesson() {
    let calibration = Calibration::new();
    let layer = ContextPolicyLayer::new(policy())
        .unwrap()
        .with_calibration(calibration.clone());
    let counted = converse(layer).await;
    assert_eq!(calibration.factor("m"), 2.0);
    assert_eq!(calibration.factor("other-model"), 1.0);
    // The first request over the minimum sample taught the ratio; every request after
    // it fits as the provider counts.
    let first_lesson = counted.iter().position(|&c| c >= 512).unwrap();
    assert!(
        counted[first_lesson + 1..].iter().all(|&c| c <= 2_800),
        "{counted:?}"
    );
    assert!(
        counted.iter().any(|&c| c > 2_400),
        "the budget is used: {counted:?}"
    );
}

#[tokio::test]
async fn the_report_and_the_limit_error_speak_in_calibrated_tokens() {
    let calibration = Calibration::new();
    calibration.observe_tokens("m", 1_000, 2_000);
    let counted = Arc::default();
    let mut agent = ContextPolicyLayer::new(policy())
        .unwrap()
        .with_calibration(calibration)
        .layer(provider(counted));
    let req = ChatRequest::new("m", vec![Message::user("hello")]);
    let reply = ServiceExt::<ChatRequest>::ready(&mut agent)
        .await
        .unwrap()
        .call(req)
        .await
        .unwrap();
    assert_eq!(reply.report.prompt_allowance, 1_400);
    // 1,500 estimated tokens fit 2,800 but not 2,800 / 2.
    let req = ChatRequest::new("m", vec![Message::user("word ".repeat(1_200))]);
    let err = ServiceExt::<ChatRequest>::ready(&mut agent)
        .await
        .unwrap()
        .call(req)
        .await
        .unwrap_err();
    let limit = err
        .downcast_ref::<llm_context_layers::ContextLimitError>()
        .unwrap();
    assert_eq!(limit.allowance, 1_400);
}
