//! What the stack adds to a streamed call, over a bare streaming model.
//!
//! - `events_bare` / `events_stack`: a whole stream of `n` text deltas, straight from the
//!   model or through the default `ContextPolicyLayer` with the memo on (a miss, stored
//!   at the end), for a short request. divan's allocation profiler counts what each
//!   allocates: the model allocates each delta's text (the event itself); whatever
//!   `events_stack` allocates beyond `events_bare` is the stack's, and it must not grow
//!   with `n`.
//! - `first_event_*`: the time from the call to the first event, for the generated
//!   1,000-message transcript (JSON, logs and code, non-ASCII) on a service that prepared
//!   it before, as an agent's next turn: the bare model, the stack streamed, the stack
//!   non-streamed (until the model has the prepared request), and the floor (the token
//!   estimate of every message, which any preparation must pay).
//!
//! ```text
//! cargo bench --bench stream -- --sample-count 200
//! ```
//!
//! Python 3 (standard library) must be on the `PATH` for the generated transcript.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::{Stream, StreamExt};
use llm_context::memo::{LocalMemoStore, MemoLayer};
use llm_context::stream::{ChatStream, StreamEvent, Streaming};
use llm_context::tokens::estimate_message_tokens;
use llm_context::{ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, Scope};
use tower::{Layer, Service};

// Only `with_messages` is used here.
#[allow(dead_code)]
#[path = "support/gen_transcript.rs"]
mod gen_transcript;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

const EVENTS: [usize; 2] = [100, 1_000];

/// The slot where the model leaves the request it was sent, so that freeing it happens
/// after the timer stops.
type Sent = Arc<Mutex<Option<ChatRequest>>>;

/// A streaming model, ready at once: `deltas` text events (each a new `String`, as a
/// provider client makes one per delta), then `Done`. Plain calls are answered whole.
#[derive(Clone)]
struct Model {
    deltas: usize,
    sent: Sent,
}

impl Model {
    fn new(deltas: usize) -> Self {
        Self {
            deltas,
            sent: Sent::default(),
        }
    }

    fn answer(&self) -> ChatResponse {
        ChatResponse::new(Message::assistant("tok ".repeat(self.deltas)))
    }
}

impl Service<Streaming> for Model {
    type Response = ChatStream;
    type Error = Infallible;
    type Future = std::future::Ready<Result<ChatStream, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        *self.sent.lock().unwrap() = Some(req.0);
        let done = futures_util::stream::once(std::future::ready(Ok(StreamEvent::Done(Box::new(
            self.answer(),
        )))));
        let deltas = futures_util::stream::iter(0..self.deltas)
            .map(|_| Ok(StreamEvent::Text(String::from("tok "))));
        std::future::ready(Ok(ChatStream::new(deltas.chain(done))))
    }
}

impl Service<ChatRequest> for Model {
    type Response = ChatResponse;
    type Error = Infallible;
    type Future = std::future::Ready<Result<ChatResponse, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        *self.sent.lock().unwrap() = Some(req);
        std::future::ready(Ok(self.answer()))
    }
}

fn poll_now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the stack is synchronous over a ready model"),
    }
}

/// The next event of a stream that never waits.
fn next_now<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    poll_now(s.next())
}

/// Drains a stream, checking it ends with `Done`.
fn drain(mut stream: ChatStream) -> usize {
    let mut n = 0;
    while let Some(event) = next_now(&mut stream) {
        n += 1;
        if let StreamEvent::Done(r) = event.unwrap() {
            std::hint::black_box(r);
        }
    }
    n
}

fn short_request(i: u64) -> ChatRequest {
    // A new question each time: every call is a memo miss, stored at its end.
    ChatRequest::new(
        "bench",
        vec![Message::user(format!("Frage {i}: warum? なぜ?"))],
    )
    .with_scope(Scope::org("acme"))
    .with_temperature(0.0)
}

#[divan::bench(args = EVENTS)]
fn events_bare(bencher: divan::Bencher<'_, '_>, n: usize) {
    let mut model = Model::new(n);
    let mut i = 0;
    bencher
        .with_inputs(|| {
            i += 1;
            short_request(i)
        })
        .bench_local_values(|req| {
            let stream = poll_now(model.call(Streaming(req))).unwrap();
            drain(stream)
        });
}

#[divan::bench(args = EVENTS)]
fn events_stack(bencher: divan::Bencher<'_, '_>, n: usize) {
    let model = Model::new(n);
    let memo = MemoLayer::new(Arc::new(LocalMemoStore::default()));
    let mut stack =
        ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(100_000))
            .unwrap()
            .with_memo(memo)
            .layer(model);
    // The memo's store timeouts need tokio's timer; the in-memory store never waits.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let mut i = 0;
    bencher
        .with_inputs(|| {
            i += 1;
            short_request(i)
        })
        .bench_local_values(|req| {
            let stream = poll_now(stack.call(Streaming(req))).unwrap();
            drain(stream)
        });
}

/// The generated 1,000-message transcript, with nothing to prune (its large results are
/// offloaded, as the default policy does).
fn transcript() -> ChatRequest {
    gen_transcript::with_messages(1_000)
}

fn loose() -> ContextPolicy {
    ContextPolicy::default().with_max_context_tokens(100_000_000)
}

#[divan::bench(sample_size = 1)]
fn first_event_bare(bencher: divan::Bencher<'_, '_>) {
    let req = transcript();
    let mut model = Model::new(10);
    bencher
        .with_inputs(|| req.clone())
        .bench_local_values(|req| {
            let mut stream = poll_now(model.call(Streaming(req))).unwrap();
            (
                next_now(&mut stream),
                stream,
                model.sent.lock().unwrap().take(),
            )
        });
}

#[divan::bench(sample_size = 1)]
fn first_event_stack(bencher: divan::Bencher<'_, '_>) {
    let req = transcript();
    let model = Model::new(10);
    let sent = model.sent.clone();
    let mut stack = ContextPolicyLayer::new(loose()).unwrap().layer(model);
    // The session's previews are remembered, as on an agent's next turn.
    let warm = poll_now(stack.call(Streaming(req.clone()))).unwrap();
    assert!(drain(warm) > 0);
    bencher
        .with_inputs(|| req.clone())
        .bench_local_values(|req| {
            let mut stream = poll_now(stack.call(Streaming(req))).unwrap();
            (next_now(&mut stream), stream, sent.lock().unwrap().take())
        });
}

#[divan::bench(sample_size = 1)]
fn first_event_stack_plain(bencher: divan::Bencher<'_, '_>) {
    let req = transcript();
    let model = Model::new(10);
    let sent = model.sent.clone();
    let mut stack = ContextPolicyLayer::new(loose()).unwrap().layer(model);
    let warm = poll_now(Service::<ChatRequest>::call(&mut stack, req.clone())).unwrap();
    assert!(warm.report.offloaded_results + warm.report.reused_previews > 0);
    bencher
        .with_inputs(|| req.clone())
        .bench_local_values(|req| {
            let response = poll_now(Service::<ChatRequest>::call(&mut stack, req));
            (response, sent.lock().unwrap().take())
        });
}

#[divan::bench(sample_size = 1)]
fn first_event_floor(bencher: divan::Bencher<'_, '_>) {
    let req = transcript();
    bencher
        .with_inputs(|| req.clone())
        .bench_local_values(|req| (estimate_message_tokens(&req.messages), req));
}
