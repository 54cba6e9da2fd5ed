//! The contract every `ContextStore` and `MemoryStore` backend keeps, written once and
//! run against each backend by `store_contract!`.
#![allow(dead_code, unreachable_pub)]

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use llm_context::durable::{
    ContextRecord, ContextStore, Memory, MemoryEntry, MemoryLimits, MemoryStore,
};
use llm_context::store::system_now_ms;
use llm_context::summarize::SummaryBlock;
use llm_context::{Message, PrefixContext, Scope, StoreErrorKind, ToolCall};
use serde_json::json;

/// A backend under test; `guard` keeps whatever it lives in (a temporary directory).
pub struct Backend {
    pub contexts: Arc<dyn ContextStore>,
    pub memory: Arc<dyn MemoryStore>,
    pub guard: Box<dyn Any + Send + Sync>,
}

/// A tenant no other test uses, so tests can share one Redis.
pub fn tenant(test: &str) -> Scope {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    Scope::org(format!(
        "{test}-{}-{}-{}",
        std::process::id(),
        system_now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

fn sample_record() -> ContextRecord {
    let mut record = ContextRecord::new();
    record.prefix = Arc::new(PrefixContext::new("You are an SRE agent."));
    record.messages = vec![
        Message::system("tenant rules"),
        Message::user("why is checkout failing? é🎉"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "c1",
                "read_log",
                json!({"page": 1, "q": "500"}),
            )],
        ),
        Message::tool_result("c1", "read_log", "GET /api/orders 500 12ms"),
        Message::assistant("The deploy broke it."),
    ];
    let mut summary = SummaryBlock::default();
    summary.goals.push("fix checkout".into());
    summary.folded_messages = 7;
    record.summary = Some(summary);
    record
        .scratchpad
        .insert("plan".into(), json!({"steps": ["a", "b"]}));
    record.journal.push(json!({"kind": "row_written", "id": 1}));
    record.refresh_estimate();
    record
}

pub async fn absent_context_loads_none(b: &Backend) {
    let scope = tenant("absent");
    assert_eq!(b.contexts.load(&scope, "nope").await.unwrap(), None);
}

pub async fn a_saved_record_loads_back_whole(b: &Backend) {
    let scope = tenant("roundtrip");
    let record = sample_record();
    let version = b.contexts.save(&scope, "root", &record).await.unwrap();
    assert_eq!(version, 1);
    let loaded = b.contexts.load(&scope, "root").await.unwrap().unwrap();
    let mut expected = record;
    expected.version = 1;
    assert_eq!(loaded, expected);
}

pub async fn each_write_bumps_the_version_by_one(b: &Backend) {
    let scope = tenant("versions");
    let mut record = ContextRecord::new();
    for expected in 1..=3u64 {
        record
            .messages
            .push(Message::user(format!("turn {expected}")));
        record.version = b.contexts.save(&scope, "root", &record).await.unwrap();
        assert_eq!(record.version, expected);
    }
    let loaded = b.contexts.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.messages.len()), (3, 3));
}

pub async fn a_stale_write_is_refused_and_changes_nothing(b: &Backend) {
    let scope = tenant("stale");
    let mut record = ContextRecord::new();
    record.messages.push(Message::user("one"));
    record.version = b.contexts.save(&scope, "root", &record).await.unwrap();
    let stale = record.clone();
    record.messages.push(Message::user("two"));
    record.version = b.contexts.save(&scope, "root", &record).await.unwrap();

    let mut late = stale.clone();
    late.messages.push(Message::user("written over?"));
    let err = b.contexts.save(&scope, "root", &late).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Conflict);
    assert!(
        err.message.contains("version 2") && err.message.contains("not 1"),
        "{err}"
    );
    // A new record (version 0) over an existing one, and a version from the future.
    let mut fresh = ContextRecord::new();
    assert_eq!(
        b.contexts
            .save(&scope, "root", &fresh)
            .await
            .unwrap_err()
            .kind,
        StoreErrorKind::Conflict
    );
    fresh.version = 9;
    assert_eq!(
        b.contexts
            .save(&scope, "other", &fresh)
            .await
            .unwrap_err()
            .kind,
        StoreErrorKind::Conflict
    );
    assert_eq!(b.contexts.load(&scope, "other").await.unwrap(), None);

    let loaded = b.contexts.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!(loaded.version, 2);
    assert_eq!(loaded.messages, record.messages);
}

pub async fn tenants_never_see_each_other(b: &Backend) {
    let (acme, other) = (tenant("acme"), tenant("other"));
    let mut record = ContextRecord::new();
    record.messages.push(Message::user("acme's secret"));
    b.contexts.save(&acme, "root", &record).await.unwrap();
    assert_eq!(b.contexts.load(&other, "root").await.unwrap(), None);
    // The other tenant starts its own history at version 1 under the same id.
    let mut theirs = ContextRecord::new();
    theirs.messages.push(Message::user("theirs"));
    assert_eq!(b.contexts.save(&other, "root", &theirs).await.unwrap(), 1);
    assert!(b.contexts.delete(&other, "root").await.unwrap());
    let still = b.contexts.load(&acme, "root").await.unwrap().unwrap();
    assert_eq!(still.messages[0].text(), "acme's secret");
}

pub async fn delete_removes_and_a_new_history_starts_at_one(b: &Backend) {
    let scope = tenant("delete");
    let record = ContextRecord::new();
    b.contexts.save(&scope, "root", &record).await.unwrap();
    assert!(b.contexts.delete(&scope, "root").await.unwrap());
    assert!(!b.contexts.delete(&scope, "root").await.unwrap());
    assert_eq!(b.contexts.load(&scope, "root").await.unwrap(), None);
    assert_eq!(b.contexts.save(&scope, "root", &record).await.unwrap(), 1);
}

pub async fn bad_context_ids_are_refused(b: &Backend) {
    let scope = tenant("ids");
    for id in ["", "a\nb", &"x".repeat(513)] {
        let err = b.contexts.load(&scope, id).await.unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::Invalid, "{id:?}");
        let err = b
            .contexts
            .save(&scope, id, &ContextRecord::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::Invalid, "{id:?}");
    }
}

/// Writers that all read the same version before any writes: exactly one commits, the
/// 49 others get `Conflict`, and the version moved by one.
pub async fn racing_writers_one_wins_the_rest_conflict(b: &Backend) {
    let scope = tenant("race");
    let base = b
        .contexts
        .save(&scope, "root", &ContextRecord::new())
        .await
        .unwrap();
    const WRITERS: usize = 50;
    let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, scope, barrier) = (b.contexts.clone(), scope.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut record = store.load(&scope, "root").await.unwrap().unwrap();
            barrier.wait().await; // everyone holds version `base` now
            record.messages.push(Message::user(format!("writer {w}")));
            store.save(&scope, "root", &record).await
        }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(v) => {
                assert_eq!(v, base + 1);
                wins += 1;
            }
            Err(e) => assert_eq!(e.kind, StoreErrorKind::Conflict, "{e}"),
        }
    }
    assert_eq!(wins, 1);
    let loaded = b.contexts.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.messages.len()), (base + 1, 1));
}

/// Writers that retry on `Conflict`: every increment lands exactly once, the final
/// version is the number of successful writes, and every failure was a `Conflict`.
pub async fn retrying_writers_lose_no_update(b: &Backend) {
    let scope = tenant("increments");
    const WRITERS: usize = 50;
    let conflicts = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, scope, conflicts) = (b.contexts.clone(), scope.clone(), conflicts.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let mut record = store
                    .load(&scope, "root")
                    .await
                    .unwrap()
                    .unwrap_or_default();
                tokio::task::yield_now().await; // let the others interleave
                record.messages.push(Message::user(format!("writer {w}")));
                match store.save(&scope, "root", &record).await {
                    Ok(_) => return,
                    Err(e) if e.kind == StoreErrorKind::Conflict => {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("unexpected store error: {e}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let loaded = b.contexts.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!(loaded.version, WRITERS as u64);
    let mut writers: Vec<String> = loaded
        .messages
        .iter()
        .map(|m| m.text().into_owned())
        .collect();
    writers.sort();
    writers.dedup();
    assert_eq!(writers.len(), WRITERS, "each writer's message exactly once");
    assert!(
        conflicts.load(Ordering::Relaxed) > 0,
        "the writers never raced"
    );
}

/// A memory front-end over the backend with a clock the test moves.
pub fn memory_with_clock(b: &Backend) -> (Memory, Arc<AtomicU64>) {
    // Start at the real time so a backend that also expires by the real clock (Redis)
    // agrees with the logical one for every entry a test writes.
    let now = Arc::new(AtomicU64::new(system_now_ms()));
    let clock = now.clone();
    let memory = Memory::new(b.memory.clone()).with_clock(move || clock.load(Ordering::SeqCst));
    (memory, now)
}

fn keys(entries: &[MemoryEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.key.as_str()).collect()
}

pub async fn memory_puts_gets_overwrites_and_deletes(b: &Backend) {
    let (memory, _) = memory_with_clock(b);
    let scope = tenant("mem-basic");
    assert_eq!(memory.get(&scope, "user/lang").await.unwrap(), None);
    memory
        .put(&scope, "user/lang", json!("fr"), None)
        .await
        .unwrap();
    memory
        .put(&scope, "user/lang", json!({"primary": "de"}), None)
        .await
        .unwrap();
    let entry = memory.get(&scope, "user/lang").await.unwrap().unwrap();
    assert_eq!(
        (entry.value, entry.expires_at_ms),
        (json!({"primary": "de"}), None)
    );
    assert!(memory.delete(&scope, "user/lang").await.unwrap());
    assert!(!memory.delete(&scope, "user/lang").await.unwrap());
    assert_eq!(memory.get(&scope, "user/lang").await.unwrap(), None);
}

pub async fn ttl_is_enforced_on_read(b: &Backend) {
    let (memory, now) = memory_with_clock(b);
    let scope = tenant("mem-ttl-read");
    let t0 = now.load(Ordering::SeqCst);
    memory
        .put(
            &scope,
            "session/token",
            json!("abc"),
            Some(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let entry = memory.get(&scope, "session/token").await.unwrap().unwrap();
    assert_eq!(entry.expires_at_ms, Some(t0 + 10_000));
    now.store(t0 + 9_999, Ordering::SeqCst);
    assert!(memory.get(&scope, "session/token").await.unwrap().is_some());
    now.store(t0 + 10_000, Ordering::SeqCst); // gone from its expiry instant on
    assert_eq!(memory.get(&scope, "session/token").await.unwrap(), None);
    assert!(
        !memory.delete(&scope, "session/token").await.unwrap(),
        "an expired entry is not live"
    );
    // Writing again without a TTL makes it permanent.
    memory
        .put(&scope, "session/token", json!("def"), None)
        .await
        .unwrap();
    now.store(t0 + 1_000_000, Ordering::SeqCst);
    assert!(memory.get(&scope, "session/token").await.unwrap().is_some());
}

pub async fn ttl_is_enforced_on_list(b: &Backend) {
    let (memory, now) = memory_with_clock(b);
    let scope = tenant("mem-ttl-list");
    let t0 = now.load(Ordering::SeqCst);
    memory
        .put(&scope, "k/a", json!(1), Some(Duration::from_secs(5)))
        .await
        .unwrap();
    memory.put(&scope, "k/b", json!(2), None).await.unwrap();
    memory
        .put(&scope, "k/c", json!(3), Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(
        keys(&memory.list(&scope, "k/", 10).await.unwrap()),
        ["k/a", "k/b", "k/c"]
    );
    now.store(t0 + 6_000, Ordering::SeqCst);
    assert_eq!(
        keys(&memory.list(&scope, "k/", 10).await.unwrap()),
        ["k/b", "k/c"]
    );
    // An expired entry does not use up the limit.
    assert_eq!(keys(&memory.list(&scope, "k/", 1).await.unwrap()), ["k/b"]);
    now.store(t0 + 21_000, Ordering::SeqCst);
    assert_eq!(keys(&memory.list(&scope, "", 10).await.unwrap()), ["k/b"]);
}

pub async fn prefix_listing_is_ordered_bounded_and_exact(b: &Backend) {
    let (memory, _) = memory_with_clock(b);
    let scope = tenant("mem-list");
    for key in [
        "user/b",
        "team/a",
        "user/a",
        "userx",
        "user/c",
        "user0",
        "user/é",
        "user/z🎉",
    ] {
        memory.put(&scope, key, json!(key), None).await.unwrap();
    }
    assert_eq!(
        keys(&memory.list(&scope, "user/", 2).await.unwrap()),
        ["user/a", "user/b"]
    );
    assert_eq!(
        keys(&memory.list(&scope, "user/", 100).await.unwrap()),
        ["user/a", "user/b", "user/c", "user/z🎉", "user/é"]
    );
    assert_eq!(
        keys(&memory.list(&scope, "user/é", 100).await.unwrap()),
        ["user/é"]
    );
    assert!(
        memory
            .list(&scope, "nothing", 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(memory.list(&scope, "", 100).await.unwrap().len(), 8);
    assert!(memory.list(&scope, "user/", 0).await.unwrap().is_empty());
    // The front-end caps the limit.
    let capped = memory
        .clone()
        .with_limits(MemoryLimits::default().with_max_list(3));
    assert_eq!(capped.list(&scope, "", 100).await.unwrap().len(), 3);
    // Another tenant lists nothing.
    assert!(
        memory
            .list(&tenant("mem-list-other"), "", 100)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn system_keys_are_never_listed_for_users(b: &Backend) {
    let (memory, _) = memory_with_clock(b);
    let scope = tenant("mem-system");
    memory.put(&scope, "a", json!(1), None).await.unwrap();
    memory.put(&scope, "z", json!(2), None).await.unwrap();
    // The system writes its own keys through the backend.
    b.memory
        .put(&scope, MemoryEntry::new("_index", json!(["a", "z"]), None))
        .await
        .unwrap();
    assert_eq!(
        keys(&memory.list(&scope, "", 10).await.unwrap()),
        ["a", "z"]
    );
    let err = memory.list(&scope, "_", 10).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Invalid);
}

pub async fn key_rules_and_value_cap(b: &Backend) {
    let (memory, _) = memory_with_clock(b);
    let memory = memory.with_limits(
        MemoryLimits::default()
            .with_max_key_chars(16)
            .with_max_value_bytes(10),
    );
    let scope = tenant("mem-rules");
    for bad in ["", "_private", "a\tb", "abcdefghijklmnopq"] {
        let err = memory.put(&scope, bad, json!(1), None).await.unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::Invalid, "{bad:?}");
    }
    memory
        .put(&scope, "abcdefghijklmnop", json!(1), None)
        .await
        .unwrap(); // 16 chars
    memory
        .put(&scope, "ééééééééééééééé", json!(1), None)
        .await
        .unwrap(); // 15 chars, 30 bytes
    // "12345678" is 10 bytes of JSON with its quotes: the cap; one more is over.
    memory
        .put(&scope, "v", json!("12345678"), None)
        .await
        .unwrap();
    let err = memory
        .put(&scope, "v", json!("123456789"), None)
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TooLarge);
    assert_eq!(
        memory.get(&scope, "v").await.unwrap().unwrap().value,
        json!("12345678")
    );
    let err = memory
        .put(&scope, "t", json!(1), Some(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Invalid);
}

/// Runs every contract test against the backend `$make` (an async expression giving a
/// `Backend`).
#[macro_export]
macro_rules! store_contract {
    ($make:expr) => {
        $crate::store_contract!(@tests $make;
            absent_context_loads_none,
            a_saved_record_loads_back_whole,
            each_write_bumps_the_version_by_one,
            a_stale_write_is_refused_and_changes_nothing,
            tenants_never_see_each_other,
            delete_removes_and_a_new_history_starts_at_one,
            bad_context_ids_are_refused,
            racing_writers_one_wins_the_rest_conflict,
            retrying_writers_lose_no_update,
            memory_puts_gets_overwrites_and_deletes,
            ttl_is_enforced_on_read,
            ttl_is_enforced_on_list,
            prefix_listing_is_ordered_bounded_and_exact,
            system_keys_are_never_listed_for_users,
            key_rules_and_value_cap,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let backend = $make.await;
                $crate::contract::$name(&backend).await;
            }
        )*
    };
}
