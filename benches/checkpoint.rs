//! A checkpoint of a 1,000-message tool-heavy context (about 665 KB of JSON) to SQLite:
//! the compare-and-set write as an agent makes it after every turn, at both durability
//! settings, next to the JSON encoding alone and the load that resumes it.
//!
//! ```text
//! cargo bench --bench checkpoint
//! ```

use std::cell::Cell;

use llm_context::Scope;
use llm_context::durable::{ContextRecord, ContextStore};
use llm_context::sqlite::{SqliteOptions, SqliteStore, Synchronous};

#[path = "support/transcript.rs"]
mod transcript;

fn main() {
    divan::main();
}

/// The prepare benchmark's transcript as a durable record.
fn record(messages: usize) -> ContextRecord {
    let mut record = ContextRecord::new();
    record.messages = transcript::tool_heavy(messages);
    record.refresh_estimate();
    record
}

const MESSAGES: usize = 1_000;

#[divan::bench]
fn encode_only(bencher: divan::Bencher<'_, '_>) {
    let record = record(MESSAGES);
    bencher.bench_local(|| record.encode());
}

#[divan::bench(args = ["normal", "full"])]
fn save(bencher: divan::Bencher<'_, '_>, sync: &str) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let synchronous = if sync == "full" {
        Synchronous::Full
    } else {
        Synchronous::Normal
    };
    let store = SqliteStore::open_with(
        dir.path().join("bench.db"),
        SqliteOptions::default().with_synchronous(synchronous),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scope = Scope::org("bench");
    let mut record = record(MESSAGES);
    record.version = rt.block_on(store.save(&scope, "root", &record)).unwrap();
    let version = Cell::new(record.version);
    bencher.bench_local(|| {
        record.version = version.get();
        let v = rt.block_on(store.save(&scope, "root", &record)).unwrap();
        version.set(v);
    });
}

#[divan::bench]
fn load(bencher: divan::Bencher<'_, '_>) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scope = Scope::org("bench");
    rt.block_on(store.save(&scope, "root", &record(MESSAGES)))
        .unwrap();
    bencher.bench_local(|| rt.block_on(store.load(&scope, "root")).unwrap());
}
