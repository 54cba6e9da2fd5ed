//! The prepare pass of the default `ContextPolicyLayer` over a ready inner service.
//!
//! The benchmarks of record run on transcripts from the project's seeded generator
//! (`benches/support/gen_transcript.py --seed 1 --tool-ratio 0.6 --big-result-chars 8000
//! --format messages`, see `support/gen_transcript.rs`), whose tool results are JSON, logs
//! and code with newlines, quotes and non-ASCII, about one in seven over the default
//! offload threshold of 6,000 characters:
//!
//! - `tight` / `loose`: 1,000 and 10,000 messages, with `max_tokens` 12,000 (prunes to the
//!   floor, clears, offloads what is kept) and 100,000,000 (nothing to prune; every large
//!   result is still offloaded at the default threshold);
//! - `estimate_only`: the floor under both, the token estimate of every message;
//! - `agent_loop_tight` / `agent_loop_loose`: one call at user turn 200 and at turn 2,000 of
//!   one agent's session, after the service has prepared every earlier request of it.
//!
//! The `ascii_*` benchmarks are the earlier generator's variant (`support/transcript.rs`:
//! one ASCII line a tool result, no newline, no quote; its loose policy raises the
//! offload threshold to 100,000 so that nothing is offloaded), kept to compare with the
//! earlier figures.
//!
//! ```text
//! cargo bench --bench prepare -- --sample-count 100
//! ```
//!
//! Python 3 (standard library) must be on the `PATH`; the generated transcripts are
//! cached under the target directory.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use llm_context::tokens::estimate_message_tokens;
use llm_context::{
    ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, PreparationReport,
    Scope, ToolSpec,
};
use serde_json::json;
use tower::{Layer, Service, service_fn};

#[path = "support/transcript.rs"]
mod transcript;

#[path = "support/gen_transcript.rs"]
mod gen_transcript;

fn main() {
    divan::main();
}

/// Sizes of the generated transcripts: the reference run (10,000) and a tenth of it.
const SIZES: [usize; 2] = [1_000, 10_000];

/// Sizes of the ASCII-only variant, as before.
const ASCII_SIZES: [usize; 3] = [100, 1_000, 10_000];

/// The user turns at which the agent loop is timed: requests of 1,160 and 11,366 messages.
const TURNS: [usize; 2] = [200, 2_000];

/// The default policy (offload on, `tool_result_max_chars` 6,000) with a `max_tokens`
/// that prunes to the floor, or one that prunes nothing.
fn policy(tight: bool) -> ContextPolicy {
    ContextPolicy::default().with_max_context_tokens(if tight { 12_000 } else { 100_000_000 })
}

/// The ASCII variant's policies, unchanged: its loose one does not offload either.
fn ascii_policy(tight: bool) -> ContextPolicy {
    if tight {
        ContextPolicy::default().with_max_context_tokens(12_000)
    } else {
        ContextPolicy::default()
            .with_max_context_tokens(100_000_000)
            .with_tool_result_max_chars(100_000)
    }
}

/// The ASCII-only transcript with the tool it calls.
fn ascii_transcript(messages: usize) -> ChatRequest {
    ChatRequest::new("bench", transcript::tool_heavy(messages)).with_tools(vec![ToolSpec::new(
        "read_log",
        "Read one page of a service log.",
        json!({"type": "object", "properties": {"service": {"type": "string"}, "page": {"type": "integer"}}}),
    )])
}

fn poll_now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the stack is synchronous over a ready inner service"),
    }
}

/// The slot where the inner service leaves the prepared request.
type Sent = Arc<Mutex<Option<ChatRequest>>>;

/// A ready inner service that hands the prepared request back through its slot, so that
/// freeing a 7 MB transcript (the model's business, not preparation's) happens after the
/// timer stops.
fn handing_back() -> (
    Sent,
    impl Service<ChatRequest, Response = ChatResponse, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static,
) {
    let sent: Sent = Arc::default();
    let slot = sent.clone();
    let inner = service_fn(move |req: ChatRequest| {
        *slot.lock().unwrap() = Some(req);
        std::future::ready(Ok::<_, Infallible>(ChatResponse::new(Message::assistant(
            "ok",
        ))))
    });
    (sent, inner)
}

/// What a case must do, checked on one untimed call before it is timed.
fn check(report: &PreparationReport, tight: bool, offloads: bool) {
    if tight {
        assert!(report.removed_messages > 0, "tight must prune: {report:?}");
    } else {
        assert_eq!(
            report.removed_messages, 0,
            "loose must not prune: {report:?}"
        );
    }
    assert_eq!(
        report.offloaded_results > 0,
        offloads,
        "offloads expected: {offloads}: {report:?}"
    );
}

// Every benchmark here times one input per sample (`sample_size = 1`): divan makes all of
// a sample's inputs before timing it, so with several the first timed would have been
// made longest ago, and "just cloned" or "evicted" would not hold for it.

/// The generated transcript, pruned to the floor: the newest turns are kept, and their
/// large results offloaded.
#[divan::bench(args = SIZES, sample_size = 1)]
fn tight(bencher: divan::Bencher<'_, '_>, n: usize) {
    let req = gen_transcript::with_messages(n);
    run_with(bencher, req, policy(true), Expect::new(true, None), false);
}

/// The generated transcript with nothing to prune: every result over 6,000 characters
/// is offloaded (an id, an artifact and a preview each).
#[divan::bench(args = SIZES, sample_size = 1)]
fn loose(bencher: divan::Bencher<'_, '_>, n: usize) {
    let req = gen_transcript::with_messages(n);
    run_with(
        bencher,
        req,
        policy(false),
        Expect::new(false, Some(true)),
        false,
    );
}

/// The floor under `tight` and `loose` on the generated transcript (see
/// `ascii_estimate_only`).
#[divan::bench(args = SIZES, sample_size = 1)]
fn estimate_only(bencher: divan::Bencher<'_, '_>, n: usize) {
    floor(bencher, gen_transcript::with_messages(n), false);
}

/// The ASCII-only transcript under its own policies, as the earlier benchmark ran it.
fn ascii(bencher: divan::Bencher<'_, '_>, n: usize, tight: bool, cold: bool) {
    // Tight prunes and may offload; loose (threshold 100,000) offloads nothing.
    let expect = Expect::new(tight, (!tight).then_some(false));
    run_with(
        bencher,
        ascii_transcript(n),
        ascii_policy(tight),
        expect,
        cold,
    );
}

/// The ASCII-only variant, pruned to the floor (`tight` before the generated transcripts).
#[divan::bench(args = ASCII_SIZES, sample_size = 1)]
fn ascii_tight(bencher: divan::Bencher<'_, '_>, n: usize) {
    ascii(bencher, n, true, false);
}

/// The ASCII-only variant with nothing to do, offload off (`loose` before).
#[divan::bench(args = ASCII_SIZES, sample_size = 1)]
fn ascii_loose(bencher: divan::Bencher<'_, '_>, n: usize) {
    ascii(bencher, n, false, false);
}

/// `ascii_tight` with the input evicted from the core's private caches before each call:
/// a 730 KB transcript just cloned sits in L2 while a 7.3 MB one cannot, so growth across
/// sizes is compared here, with every size read from the shared cache.
#[divan::bench(args = ASCII_SIZES, sample_size = 1)]
fn ascii_tight_cold(bencher: divan::Bencher<'_, '_>, n: usize) {
    ascii(bencher, n, true, true);
}

/// `ascii_loose` with the input evicted from the core's private caches (see
/// `ascii_tight_cold`).
#[divan::bench(args = ASCII_SIZES, sample_size = 1)]
fn ascii_loose_cold(bencher: divan::Bencher<'_, '_>, n: usize) {
    ascii(bencher, n, false, true);
}

/// The floor under `ascii_tight` and `ascii_loose`: the token estimate of every message
/// (each message's text read once, nothing else), over the same inputs. Any preparation
/// that reports `before_tokens` must do at least this, so its growth from 1,000 to 10,000
/// messages is what reading the transcript alone costs on this machine.
#[divan::bench(args = ASCII_SIZES, sample_size = 1)]
fn ascii_estimate_only(bencher: divan::Bencher<'_, '_>, n: usize) {
    floor(bencher, ascii_transcript(n), false);
}

/// `ascii_estimate_only` with the input evicted from the core's private caches (see
/// `ascii_tight_cold`).
#[divan::bench(args = ASCII_SIZES, sample_size = 1)]
fn ascii_estimate_only_cold(bencher: divan::Bencher<'_, '_>, n: usize) {
    floor(bencher, ascii_transcript(n), true);
}

/// What the untimed check call must report.
#[derive(Clone, Copy)]
struct Expect {
    tight: bool,
    /// Whether results are offloaded; `None` when it depends on what the newest turns
    /// hold.
    offloads: Option<bool>,
}

impl Expect {
    fn new(tight: bool, offloads: Option<bool>) -> Self {
        Self { tight, offloads }
    }

    fn check(self, report: &PreparationReport) {
        let offloads = self.offloads.unwrap_or(report.offloaded_results > 0);
        check(report, self.tight, offloads);
    }
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

fn run_with(
    bencher: divan::Bencher<'_, '_>,
    req: ChatRequest,
    policy: ContextPolicy,
    expect: Expect,
    cold: bool,
) {
    let (sent, inner) = handing_back();
    let mut stack = ContextPolicyLayer::new(policy).unwrap().layer(inner);
    // Check the case is what it claims before timing it.
    expect.check(&poll_now(stack.call(req.clone())).unwrap().report);
    sent.lock().unwrap().take();
    bencher
        .with_inputs(|| input(&req, cold))
        .bench_local_values(|req| {
            let response = poll_now(stack.call(req));
            (response, sent.lock().unwrap().take())
        });
}

fn floor(bencher: divan::Bencher<'_, '_>, req: ChatRequest, cold: bool) {
    bencher
        .with_inputs(|| input(&req, cold))
        .bench_local_values(|req| {
            let tokens = estimate_message_tokens(&req.messages);
            (tokens, req)
        });
}

/// One call of an agent loop at user turn `turn`, tight (see `agent_loop`).
#[divan::bench(args = TURNS, sample_size = 1, max_time = 120)]
fn agent_loop_tight(bencher: divan::Bencher<'_, '_>, turn: usize) {
    agent_loop(bencher, turn, true);
}

/// One call of an agent loop at user turn `turn`, loose (see `agent_loop`).
#[divan::bench(args = TURNS, sample_size = 1, max_time = 120)]
fn agent_loop_loose(bencher: divan::Bencher<'_, '_>, turn: usize) {
    agent_loop(bencher, turn, false);
}

/// One agent's session: its requests grow turn by turn, each the generated transcript up
/// to and including the user message that opens a turn (the newest user request with the
/// whole history before it, as an agent sends it), all with one scope and one session.
///
/// Each sample gets a service of its own, fed every earlier request of the loop (turns 1
/// to `turn - 1`, untimed, while the input is made) and then timed on the request of
/// `turn`: the cost of one call once the session has seen everything but the newest
/// turn. Set against `tight` / `loose` at about the same size (1,000 and 10,000 messages
/// are turns 166 and 1,751), it shows whether a call costs what the whole transcript costs
/// or what is new in it. Only the public API is used, so whatever the stack keeps per
/// session is warmed the way an agent warms it.
///
/// Warming a sample at turn 2,000 prepares 1,999 requests of up to 11,400 messages, so
/// `max_time` bounds the benchmark's wall time (input making included) rather than the
/// sample count.
fn agent_loop(bencher: divan::Bencher<'_, '_>, turn: usize, tight: bool) {
    let full = gen_transcript::with_turns(TURNS[TURNS.len() - 1]);
    let starts = gen_transcript::user_turns(&full);
    assert!(
        starts.len() >= turn,
        "the transcript has {} turns",
        starts.len()
    );
    let scope = Scope::org("bench");
    let request_of = |t: usize| {
        let end = starts[t - 1] + 1;
        ChatRequest::new(full.model.clone(), full.messages[..end].to_vec())
            .with_tools(full.tools.clone())
            .with_scope(scope.clone())
            .with_session("agent-loop")
    };
    let (sent, inner) = handing_back();
    bencher
        .with_inputs(|| {
            // A new layer, not a clone: clones share the artifact store (and whatever else
            // the stack keeps per session), and the previous sample has seen `turn`.
            let layer = ContextPolicyLayer::new(policy(tight)).unwrap();
            let mut stack = layer.layer(inner.clone());
            for t in 1..turn {
                let report = poll_now(stack.call(request_of(t))).unwrap().report;
                if t == turn - 1 {
                    Expect::new(tight, None).check(&report);
                }
                sent.lock().unwrap().take();
            }
            (stack, request_of(turn))
        })
        .bench_local_values(|(mut stack, req)| {
            let response = poll_now(stack.call(req));
            (response, sent.lock().unwrap().take(), stack)
        });
}
