//! The prepare pass on generated tool-heavy transcripts of 100, 1,000 and 10,000 messages
//! (~730 characters a message on average, one tool result in eight ~8,000 characters),
//! with a tight policy (prunes to the floor and clears) and a loose one (nothing to do).
//!
//! ```text
//! cargo bench --bench prepare
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use llm_context::{
    ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, ToolSpec,
};
use serde_json::json;
use tower::{Layer, Service, service_fn};

#[path = "support/transcript.rs"]
mod transcript;

fn main() {
    divan::main();
}

/// The generated transcript with the tool it calls.
fn transcript(messages: usize) -> ChatRequest {
    ChatRequest::new("bench", transcript::tool_heavy(messages)).with_tools(vec![ToolSpec::new(
        "read_log",
        "Read one page of a service log.",
        json!({"type": "object", "properties": {"service": {"type": "string"}, "page": {"type": "integer"}}}),
    )])
}

fn policy(tight: bool) -> ContextPolicy {
    if tight {
        ContextPolicy::default().with_max_tokens(12_000)
    } else {
        ContextPolicy::default()
            .with_max_tokens(100_000_000)
            .with_tool_result_max_chars(100_000)
    }
}

fn poll_now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the stack is synchronous over a ready inner service"),
    }
}

const SIZES: [usize; 3] = [100, 1_000, 10_000];

#[divan::bench(args = SIZES)]
fn tight(bencher: divan::Bencher<'_, '_>, n: usize) {
    run(bencher, n, true);
}

#[divan::bench(args = SIZES)]
fn loose(bencher: divan::Bencher<'_, '_>, n: usize) {
    run(bencher, n, false);
}

fn run(bencher: divan::Bencher<'_, '_>, n: usize, tight: bool) {
    let req = transcript(n);
    // The inner service hands the prepared request back, so that freeing a 7 MB transcript
    // (the model's business, not preparation's) happens after the timer stops.
    let sent: Arc<Mutex<Option<ChatRequest>>> = Arc::default();
    let slot = sent.clone();
    let inner = service_fn(move |req: ChatRequest| {
        *slot.lock().unwrap() = Some(req);
        std::future::ready(Ok::<_, Infallible>(ChatResponse::new(Message::assistant(
            "ok",
        ))))
    });
    let mut stack = ContextPolicyLayer::new(policy(tight)).unwrap().layer(inner);
    // Check the case is what it claims before timing it.
    let report = poll_now(stack.call(req.clone())).unwrap().report;
    assert_eq!(report.changed(), tight, "{report:?}");
    bencher
        .with_inputs(|| req.clone())
        .bench_local_values(|req| {
            let response = poll_now(stack.call(req));
            (response, sent.lock().unwrap().take())
        });
}
