//! The prepare pass on generated tool-heavy transcripts of 100, 1,000 and 10,000 messages
//! (~730 characters a message on average, one tool result in eight ~8,000 characters),
//! with a tight policy (prunes to the floor and clears) and a loose one (nothing to do),
//! beside the floor under both: the token estimate of every message and nothing else.
//!
//! ```text
//! cargo bench --bench prepare
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use llm_context::tokens::estimate_message_tokens;
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

// Every benchmark here times one input per sample (`sample_size = 1`): divan makes all of
// a sample's inputs before timing it, so with several the first timed would have been
// made longest ago, and "just cloned" or "evicted" would not hold for it.

#[divan::bench(args = SIZES, sample_size = 1)]
fn tight(bencher: divan::Bencher<'_, '_>, n: usize) {
    run(bencher, n, true);
}

#[divan::bench(args = SIZES, sample_size = 1)]
fn loose(bencher: divan::Bencher<'_, '_>, n: usize) {
    run(bencher, n, false);
}

/// `tight` with the input evicted from the core's private caches before each call: a
/// 730 KB transcript just cloned sits in L2 while a 7.3 MB one cannot, so growth across
/// sizes is compared here, with every size read from the shared cache.
#[divan::bench(args = SIZES, sample_size = 1)]
fn tight_cold(bencher: divan::Bencher<'_, '_>, n: usize) {
    run_with(bencher, n, true, true);
}

/// `loose` with the input evicted from the core's private caches (see `tight_cold`).
#[divan::bench(args = SIZES, sample_size = 1)]
fn loose_cold(bencher: divan::Bencher<'_, '_>, n: usize) {
    run_with(bencher, n, false, true);
}

/// Walks a buffer larger than any core's private caches (L1 and L2 here are at most a few
/// MiB), so that what was touched before is no longer in them. Untimed: it runs while the
/// input is made.
fn evict_private_caches() {
    const BYTES: usize = 16 << 20;
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![1; BYTES]);
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let mut acc = 0u8;
        for chunk in s.chunks_mut(64) {
            chunk[0] = chunk[0].wrapping_add(1);
            acc ^= chunk[0];
        }
        std::hint::black_box(acc);
    });
}

/// A fresh copy of `req` to time, with the core's private caches evicted when `cold`.
fn input(req: &ChatRequest, cold: bool) -> ChatRequest {
    let input = req.clone();
    if cold {
        evict_private_caches();
    }
    input
}

fn run(bencher: divan::Bencher<'_, '_>, n: usize, tight: bool) {
    run_with(bencher, n, tight, false);
}

fn run_with(bencher: divan::Bencher<'_, '_>, n: usize, tight: bool, cold: bool) {
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
        .with_inputs(|| input(&req, cold))
        .bench_local_values(|req| {
            let response = poll_now(stack.call(req));
            (response, sent.lock().unwrap().take())
        });
}

/// The floor under `tight` and `loose`: the token estimate of every message (each
/// message's text read once, nothing else), over the same inputs. Any preparation that
/// reports `before_tokens` must do at least this, so its growth from 1,000 to 10,000
/// messages is what reading the transcript alone costs on this machine.
#[divan::bench(args = SIZES, sample_size = 1)]
fn estimate_only(bencher: divan::Bencher<'_, '_>, n: usize) {
    floor(bencher, n, false);
}

/// `estimate_only` with the input evicted from the core's private caches (see
/// `tight_cold`).
#[divan::bench(args = SIZES, sample_size = 1)]
fn estimate_only_cold(bencher: divan::Bencher<'_, '_>, n: usize) {
    floor(bencher, n, true);
}

fn floor(bencher: divan::Bencher<'_, '_>, n: usize, cold: bool) {
    let req = transcript(n);
    bencher
        .with_inputs(|| input(&req, cold))
        .bench_local_values(|req| {
            let tokens = estimate_message_tokens(&req.messages);
            (tokens, req)
        });
}
