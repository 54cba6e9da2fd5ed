//! The usage layer and the catalog price the seed's run: 30 turns of a 20,000-token
//! prefix with 200 output tokens on claude-sonnet-4-6 cost $1.89 fresh and $0.27 cached.

use llm_context::usage::{UsageLayer, UsageMeter};
use llm_context::{ChatRequest, ChatResponse, Message, Scope, Usage};
use tower::{Layer, Service, ServiceExt, service_fn};

async fn run(scope: Scope, usage: Usage, meter: &UsageMeter) {
    let model = service_fn(move |_req: ChatRequest| async move {
        Ok::<_, std::convert::Infallible>(
            ChatResponse::new(Message::assistant("ok")).with_usage(usage),
        )
    });
    let mut svc = UsageLayer::new(meter.clone()).layer(model);
    for _ in 0..30 {
        let req = ChatRequest::new("claude-sonnet-4-6", vec![Message::user("q")])
            .with_scope(scope.clone());
        svc.ready().await.unwrap().call(req).await.unwrap();
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[tokio::test]
async fn thirty_turns_fresh_and_cached() {
    let meter = UsageMeter::new();
    run(Scope::org("fresh"), Usage::new(20_000, 200, 0, 0), &meter).await;
    run(Scope::org("cached"), Usage::new(0, 200, 20_000, 0), &meter).await;

    let fresh = meter.get(&Scope::org("fresh"));
    let cached = meter.get(&Scope::org("cached"));
    assert_eq!(round4(fresh.cost_usd), 1.89);
    assert_eq!(round4(cached.cost_usd), 0.27);
    assert_eq!(fresh.requests, 30);
    assert_eq!(cached.usage.cache_read_tokens, 600_000);
    assert_eq!(fresh.usage.input_tokens, 600_000);
    let total = meter.total();
    assert_eq!(total.requests, 60);
    assert_eq!(round4(total.cost_usd), 2.16);
    assert_eq!(meter.snapshot().len(), 2);
}
