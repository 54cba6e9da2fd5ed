//! What an artifact id costs: BLAKE3 (the id since tool output became untrusted) against
//! the XXH3-128 stable hash it replaced, over tool results of the sizes that get
//! offloaded (the default threshold is 6,000 characters; generated transcripts have
//! 8,000-character results, real ones reach megabytes).
//!
//! Hashing reads bytes without looking at them, so the content does not change the
//! figures: the text is JSON-ish lines with non-ASCII, as tool output is.
//!
//! Run with `cargo bench -p llm-context-layers --bench artifact_id`.

use divan::{Bencher, black_box};
use llm_context_layers::Scope;
use llm_context_layers::artifact::artifact_id;
use llm_context_layers::hash::StableHasher;

fn main() {
    divan::main();
}

const SIZES: [usize; 4] = [8_000, 64_000, 1_000_000, 8_000_000];

fn tool_output(chars: usize) -> String {
    let line = "{\"ts\":\"2026-11-30T12:00:00Z\",\"level\":\"warn\",\"msg\":\"réessai — 接続\"}\n";
    line.chars().cycle().take(chars).collect()
}

#[divan::bench(args = SIZES)]
fn blake3_artifact_id(bencher: Bencher<'_, '_>, chars: usize) {
    let text = tool_output(chars);
    let scope = Scope::org("acme");
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| artifact_id(black_box(&scope), black_box("session-1"), black_box(&text)));
}

#[divan::bench(args = SIZES)]
fn xxh3_128_stable_hash(bencher: Bencher<'_, '_>, chars: usize) {
    let text = tool_output(chars);
    let scope = Scope::org("acme");
    bencher
        .counter(divan::counter::BytesCount::new(text.len()))
        .bench(|| {
            let mut h = StableHasher::new("llm-context/artifact/v1");
            h.str(&black_box(&scope).key());
            h.str(black_box("session-1"));
            h.str(black_box(&text));
            h.finish_hex()
        });
}
