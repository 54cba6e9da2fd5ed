//! What the GenAI span costs a call when no subscriber listens (the default for a library
//! user), and when one does: the same ready provider called bare and through
//! `GenAiSpanLayer`, so the difference is the span alone. The request is the first 20
//! messages of an agent transcript (JSON and logs with non-ASCII), built outside the timing.
//!
//! Run with `cargo bench -p llm-context-layers --bench trace`.

use divan::{Bencher, black_box};
use futures_util::FutureExt;
use llm_context_layers::trace::GenAiSpanLayer;
use llm_context_layers::{BoxError, ChatRequest, ChatResponse, Message, Usage};
use tower::{Layer, Service, ServiceExt};

fn main() {
    divan::main();
}

fn request() -> ChatRequest {
    let mut messages = vec![Message::system(
        "You are Atlas, a careful engineering agent. Répondez en français si on vous écrit en français.",
    )];
    for i in 0..19 {
        let text = format!(
            "{{\"level\":\"error\",\"i\":{i},\"msg\":\"connexion refusée — 接続拒否\",\"at\":\"src/db/pool.rs:88\"}}\n"
        )
        .repeat(20);
        messages.push(if i % 2 == 0 {
            Message::user(text)
        } else {
            Message::assistant(text)
        });
    }
    ChatRequest::new("claude-sonnet-4-6", messages)
}

fn provider()
-> impl Service<ChatRequest, Response = ChatResponse, Error = BoxError, Future: Send> + Clone {
    tower::service_fn(|_req: ChatRequest| {
        std::future::ready(Ok::<_, BoxError>(
            ChatResponse::new(Message::assistant("ok")).with_usage(Usage::new(900, 20, 4_000, 0)),
        ))
    })
}

/// One call, polled to its end on this thread (the provider is ready at once).
fn call<S>(svc: &mut S, req: ChatRequest) -> ChatResponse
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    svc.ready().now_or_never().unwrap().unwrap();
    svc.call(req).now_or_never().unwrap().unwrap()
}

#[divan::bench]
fn bare(bencher: Bencher<'_, '_>) {
    let mut svc = provider();
    bencher
        .with_inputs(request)
        .bench_local_values(|req| black_box(call(&mut svc, req)));
}

#[divan::bench]
fn traced_no_subscriber(bencher: Bencher<'_, '_>) {
    let mut svc = GenAiSpanLayer::new().layer(provider());
    bencher
        .with_inputs(request)
        .bench_local_values(|req| black_box(call(&mut svc, req)));
}

/// With a subscriber that takes every span (the registry, as under an OpenTelemetry
/// exporter, without the export).
#[divan::bench]
fn traced_with_registry(bencher: Bencher<'_, '_>) {
    let subscriber = tracing_subscriber::registry();
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut svc = GenAiSpanLayer::new().layer(provider());
    bencher
        .with_inputs(request)
        .bench_local_values(|req| black_box(call(&mut svc, req)));
}
