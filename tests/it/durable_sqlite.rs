//! The store contract against SQLite, and what only a file can show: reopening, several
//! handles on one file, WAL mode.
#![cfg(feature = "sqlite")]

use std::sync::Arc;

use crate::artifact_contract::ArtifactBackend;
use crate::contract::{Backend, tenant};
use llm_context::durable::{ContextRecord, ContextStore};
use llm_context::sqlite::{SqliteOptions, SqliteStore, Synchronous};
use llm_context::{Message, StoreErrorKind};

async fn backend() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("store.db")).unwrap());
    Backend {
        contexts: store.clone(),
        memory: store,
        guard: Box::new(dir),
    }
}

store_contract!(backend());

fn artifacts(
    count: usize,
    bytes: usize,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ArtifactBackend> + Send>> {
    Box::pin(async move {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions::default()
            .with_max_artifacts_per_session(count)
            .with_max_session_bytes(bytes);
        let store = SqliteStore::open_with(dir.path().join("artifacts.db"), options).unwrap();
        ArtifactBackend {
            store: Arc::new(store),
            guard: Box::new(dir),
        }
    })
}

artifact_contract!(artifacts);
no_dangling_contract!(artifacts, 32);

#[tokio::test]
async fn a_reopened_file_has_the_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let scope = tenant("reopen");
    {
        let store = SqliteStore::open(&path).unwrap();
        let mut record = ContextRecord::new();
        for turn in 0..3 {
            record.messages.push(Message::user(format!("turn {turn}")));
            record.version = store.save(&scope, "root", &record).await.unwrap();
        }
    }
    let store = SqliteStore::open_with(
        &path,
        SqliteOptions::default().with_synchronous(Synchronous::Full),
    )
    .unwrap();
    let record = store.load(&scope, "root").await.unwrap().unwrap();
    assert_eq!((record.version, record.messages.len()), (3, 3));
    assert!(
        dir.path().join("agent.db-wal").exists(),
        "WAL mode keeps a -wal file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_file_still_compare_and_set() {
    // Two handles are two connections, as two processes would have.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let (a, b) = (
        SqliteStore::open(&path).unwrap(),
        SqliteStore::open(&path).unwrap(),
    );
    let scope = tenant("two-handles");
    let mut record = ContextRecord::new();
    record.version = a.save(&scope, "root", &record).await.unwrap();
    let from_b = b.load(&scope, "root").await.unwrap().unwrap();
    record.messages.push(Message::user("a wins"));
    a.save(&scope, "root", &record).await.unwrap();
    let err = b.save(&scope, "root", &from_b).await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Conflict);
    assert_eq!(
        b.load(&scope, "root").await.unwrap().unwrap().messages[0].text(),
        "a wins"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not.db");
    std::fs::write(
        &path,
        b"this is not sqlite, just some text that is long enough",
    )
    .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(err.message.starts_with("sqlite:"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_survive_a_reopen_and_two_handles_share_one_bound() {
    use llm_context::{Artifact, ArtifactStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("artifacts.db");
    let options = SqliteOptions::default().with_max_artifacts_per_session(3);
    let scope = tenant("artifact-reopen");
    {
        let store = SqliteStore::open_with(&path, options).unwrap();
        for id in ["a", "b", "c"] {
            ArtifactStore::put(&store, &scope, "s1", id, Artifact::new(id, 100))
                .await
                .unwrap();
        }
    }
    // Two handles, as two processes would have: the bound and the order are the file's.
    let (one, two) = (
        SqliteStore::open_with(&path, options).unwrap(),
        SqliteStore::open_with(&path, options).unwrap(),
    );
    let read = ArtifactStore::get(&two, &scope, "s1", "a").await.unwrap();
    assert_eq!(
        read,
        Some(Artifact::new("a", 100)),
        "kept across the reopen"
    );
    ArtifactStore::put(&one, &scope, "s1", "d", Artifact::new("d", 100))
        .await
        .unwrap();
    let mut kept = Vec::new();
    for id in ["a", "b", "c", "d"] {
        if ArtifactStore::get(&two, &scope, "s1", id)
            .await
            .unwrap()
            .is_some()
        {
            kept.push(id);
        }
    }
    assert_eq!(
        kept,
        ["a", "c", "d"],
        "the read through the other handle was a use"
    );
    let usage = one.artifact_usage(&scope, "s1").await.unwrap();
    assert_eq!(usage.artifacts, 3);
}
