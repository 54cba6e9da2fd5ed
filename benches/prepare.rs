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
    ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, ToolCall, ToolSpec,
};
use serde_json::json;
use tower::{Layer, Service, service_fn};

fn main() {
    divan::main();
}

/// A deterministic transcript: turns of a request, four tool rounds and an answer.
fn transcript(messages: usize) -> ChatRequest {
    let mut out = vec![Message::system("You are a careful SRE agent. ".repeat(8))];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut turn = 0;
    while out.len() < messages {
        out.push(Message::user(format!(
            "Incident {turn}: {}",
            "what failed and why? ".repeat(14)
        )));
        for r in 0..4 {
            let id = format!("call_{turn}_{r}");
            out.push(Message::assistant_tool_calls(
                "Checking the logs.",
                vec![ToolCall::new(
                    &id,
                    "read_log",
                    json!({"service": "orders", "page": r, "q": "status:500"}),
                )],
            ));
            let len = if next() % 8 == 0 { 8_000 } else { 600 };
            let line = "2026-11-29T12:00:00Z GET /api/orders/4412 500 12ms trace=4f2a ";
            let body: String = line.chars().cycle().take(len).collect();
            out.push(Message::tool_result(&id, "read_log", body));
        }
        out.push(Message::assistant(
            "The deploy at 12:00 broke the orders service. ".repeat(9),
        ));
        turn += 1;
    }
    out.truncate(messages);
    ChatRequest::new("bench", out).with_tools(vec![ToolSpec::new(
        "read_log",
        "Read one page of a service log.",
        json!({"type": "object", "properties": {"service": {"type": "string"}, "page": {"type": "integer"}}}),
    )])
}

fn policy(tight: bool) -> ContextPolicy {
    if tight {
        ContextPolicy::default().with_max_tokens(12_000)
    } else {
        ContextPolicy::default().with_max_tokens(100_000_000)
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
    // The stack needs a `Send` inner service; the lock is uncontended.
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
