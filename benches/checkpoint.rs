//! A checkpoint of a 1,000-message tool-heavy context (665,230 bytes of JSON) to SQLite:
//! the compare-and-set write as an agent makes it after every turn, at both durability
//! settings, next to the JSON encoding alone and the load that resumes it.
//!
//! ```text
//! cargo bench --bench checkpoint
//! ```

use std::cell::Cell;

use llm_context::durable::{ContextRecord, ContextStore, SqliteOptions, SqliteStore, Synchronous};
use llm_context::{Message, Scope, ToolCall};
use serde_json::json;

fn main() {
    divan::main();
}

/// Turns of a request, four tool rounds and an answer, as in the prepare benchmark:
/// ~730 characters a message on average, one tool result in eight ~8,000 characters.
fn record(messages: usize) -> ContextRecord {
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
                    json!({"service": "orders", "page": r}),
                )],
            ));
            let len = if next() % 8 == 0 { 8_000 } else { 600 };
            let line = "2026-11-29T12:00:00Z GET /api/orders/4412 500 12ms trace=4f2a ";
            out.push(Message::tool_result(
                &id,
                "read_log",
                line.chars().cycle().take(len).collect::<String>(),
            ));
        }
        out.push(Message::assistant(
            "The deploy at 12:00 broke the orders service. ".repeat(9),
        ));
        turn += 1;
    }
    out.truncate(messages);
    let mut record = ContextRecord::new();
    record.messages = out;
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
    let dir = tempfile::tempdir().unwrap();
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
    let dir = tempfile::tempdir().unwrap();
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
