//! What a `FrozenContext` snapshot costs to hash, and to take, at 10, 100 and 1,000
//! messages of a tool-calling transcript, and what a long journal adds to taking one.
//!
//! Run with `cargo bench -p llm-context-layers --bench snapshot`.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use divan::{Bencher, black_box};
use llm_context_layers::{FrozenContext, Message, PrefixContext, ToolCall, WorkingContext};
use serde_json::{Value, json};

fn main() {
    divan::main();
}

const SIZES: [usize; 3] = [10, 100, 1_000];

/// The agentic shape: a request, a tool call with JSON arguments, its result, an answer.
fn transcript(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let round = i / 4;
            let id = format!("call_{round}");
            match i % 4 {
                0 => Message::user(format!("Check the certificate of host-{round}.example.com")),
                1 => Message::assistant_tool_calls(
                    "",
                    vec![ToolCall::new(
                        id,
                        "openssl",
                        json!({"host": format!("host-{round}.example.com"), "port": 443}),
                    )],
                ),
                2 => Message::tool_result(
                    id,
                    "openssl",
                    format!(
                        "subject=CN=host-{round}.example.com\nissuer=CN=R11\n\
                         notBefore=2026-05-03\nnotAfter=2026-08-01\nserial={round:08x}"
                    ),
                ),
                _ => Message::assistant(format!(
                    "host-{round}.example.com: the certificate expires on 2026-08-01."
                )),
            }
        })
        .collect()
}

fn context(n: usize) -> WorkingContext {
    let mut ctx = WorkingContext::new()
        .with_prefix(PrefixContext::new(
            "You are a careful operations assistant.",
        ))
        .with_messages(transcript(n));
    ctx.note("plan", json!({"steps": ["scan", "report"]}))
        .note("ticket", "ENG-4412");
    ctx
}

/// `Hash` through std's SipHash, the counterpart of Python's `hash(snapshot)`.
#[divan::bench(args = SIZES)]
fn hash_std(bencher: Bencher<'_, '_>, n: usize) {
    let snap: FrozenContext = context(n).freeze();
    bencher.bench_local(|| {
        let mut h = DefaultHasher::new();
        black_box(&snap).hash(&mut h);
        h.finish()
    });
}

/// The stable XXH3-128 key, for stores that outlive the process.
#[divan::bench(args = SIZES)]
fn stable_hash(bencher: Bencher<'_, '_>, n: usize) {
    let snap: FrozenContext = context(n).freeze();
    bencher.bench_local(|| black_box(&snap).stable_hash());
}

/// Taking a snapshot of a ten-message context whose journal holds `entries` JSON entries:
/// the journal is copied too, so this is what a run's history adds to every snapshot.
#[divan::bench(args = [0, 500])]
fn freeze_journal(bencher: Bencher<'_, '_>, entries: usize) {
    let mut ctx = context(10);
    for id in 0..entries {
        ctx.journal_mut()
            .record(json!({"kind": "row_written", "id": id, "agent_id": "enricher-a"}));
    }
    bencher.bench_local(|| black_box(&ctx).freeze());
}

/// The same with `Arc` entries: the journal's entry type is generic, and an `Arc` entry
/// is shared by every snapshot instead of copied (it is still immutable through them).
#[divan::bench(args = [0, 500])]
fn freeze_journal_arc(bencher: Bencher<'_, '_>, entries: usize) {
    let mut ctx: WorkingContext<Arc<Value>> = WorkingContext::default()
        .with_prefix(PrefixContext::new(
            "You are a careful operations assistant.",
        ))
        .with_messages(transcript(10));
    ctx.note("plan", json!({"steps": ["scan", "report"]}))
        .note("ticket", "ENG-4412");
    for id in 0..entries {
        ctx.journal_mut().record(Arc::new(
            json!({"kind": "row_written", "id": id, "agent_id": "enricher-a"}),
        ));
    }
    bencher.bench_local(|| black_box(&ctx).freeze());
}

/// Taking the snapshot: a deep copy of the tail and the scratchpad.
#[divan::bench(args = SIZES)]
fn freeze(bencher: Bencher<'_, '_>, n: usize) {
    let ctx = context(n);
    bencher.bench_local(|| black_box(&ctx).freeze());
}
