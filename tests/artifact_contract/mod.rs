//! The contract every `ArtifactStore` backend keeps, written once and run against each
//! backend by `artifact_contract!`: round trips, tenant and session isolation, the
//! per-session count and byte bounds (least recently used out first, a read counting as
//! a use), one copy per id, and refusing an artifact larger than the byte bound.
#![allow(dead_code, unreachable_pub)]

pub mod agent_loop;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use llm_context::store::system_now_ms;
use llm_context::{Artifact, ArtifactStore, Scope, StoreErrorKind};

/// A store under test; `guard` keeps whatever it lives in (a temporary directory).
pub struct ArtifactBackend {
    pub store: Arc<dyn ArtifactStore>,
    pub guard: Box<dyn Any + Send + Sync>,
}

/// Makes a backend that keeps at most `count` artifacts and about `bytes` bytes per
/// session.
pub type MakeArtifacts =
    fn(count: usize, bytes: usize) -> Pin<Box<dyn Future<Output = ArtifactBackend> + Send>>;

/// Bounds roomy enough not to matter.
pub const ROOMY: (usize, usize) = (1_000, 64 << 20);

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

fn artifact(text: &str) -> Artifact {
    Artifact::new(text, 1_000_000)
}

async fn kept(store: &dyn ArtifactStore, scope: &Scope, ids: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        if store.get(scope, "s1", id).await.unwrap().is_some() {
            out.push((*id).to_owned());
        }
    }
    out
}

pub async fn an_artifact_reads_back_exactly(make: MakeArtifacts) {
    let b = make(ROOMY.0, ROOMY.1).await;
    let scope = tenant("art-roundtrip");
    let whole = artifact("GET /api/orders 500 é🎉\n\"quoted\"\t");
    let cut = Artifact::new(&"ab".repeat(50), 7);
    assert!(cut.truncated);
    b.store
        .put(&scope, "s1", "art_a", whole.clone())
        .await
        .unwrap();
    b.store
        .put(&scope, "s1", "art_b", cut.clone())
        .await
        .unwrap();
    assert_eq!(
        b.store.get(&scope, "s1", "art_a").await.unwrap(),
        Some(whole)
    );
    assert_eq!(b.store.get(&scope, "s1", "art_b").await.unwrap(), Some(cut));
    assert_eq!(b.store.get(&scope, "s1", "art_nope").await.unwrap(), None);
}

pub async fn tenants_and_sessions_never_see_each_other(make: MakeArtifacts) {
    let b = make(ROOMY.0, ROOMY.1).await;
    let org = tenant("art-isolation");
    b.store
        .put(&org, "s1", "art_1", artifact("org's tool output"))
        .await
        .unwrap();
    let elsewhere = [
        (tenant("art-isolation-other"), "s1"),
        (org.clone(), "s2"),
        (org.clone().with_domain("billing"), "s1"),
        (Scope::shared(), "s1"),
    ];
    for (scope, session) in elsewhere {
        assert_eq!(
            b.store.get(&scope, session, "art_1").await.unwrap(),
            None,
            "{scope:?} / {session} must not see it"
        );
    }
    // The same id in another session is another artifact.
    b.store
        .put(&org, "s2", "art_1", artifact("s2's"))
        .await
        .unwrap();
    assert_eq!(
        b.store.get(&org, "s1", "art_1").await.unwrap(),
        Some(artifact("org's tool output"))
    );
}

pub async fn the_least_recently_used_goes_first_and_a_read_is_a_use(make: MakeArtifacts) {
    let b = make(3, ROOMY.1).await;
    let scope = tenant("art-lru");
    for id in ["a", "b", "c"] {
        b.store.put(&scope, "s1", id, artifact(id)).await.unwrap();
    }
    // Reading "a" makes "b" the least recently used.
    assert!(b.store.get(&scope, "s1", "a").await.unwrap().is_some());
    b.store.put(&scope, "s1", "d", artifact("d")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b", "c", "d"]).await,
        ["a", "c", "d"]
    );
    // Other sessions are bounded on their own.
    for id in ["x", "y", "z"] {
        b.store.put(&scope, "s2", id, artifact(id)).await.unwrap();
    }
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "c", "d"]).await,
        ["a", "c", "d"]
    );
}

pub async fn contains_says_what_get_finds_and_is_a_use(make: MakeArtifacts) {
    let b = make(2, ROOMY.1).await;
    let scope = tenant("art-contains");
    b.store.put(&scope, "s1", "a", artifact("a")).await.unwrap();
    b.store.put(&scope, "s1", "b", artifact("b")).await.unwrap();
    assert!(b.store.contains(&scope, "s1", "a").await.unwrap());
    assert!(!b.store.contains(&scope, "s1", "missing").await.unwrap());
    assert!(
        !b.store.contains(&scope, "s2", "a").await.unwrap(),
        "another session"
    );
    let other = tenant("art-contains-other");
    assert!(
        !b.store.contains(&other, "s1", "a").await.unwrap(),
        "another tenant"
    );
    // Asking about "a" made "b" the least recently used: the next write evicts "b".
    b.store.put(&scope, "s1", "c", artifact("c")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b", "c"]).await,
        ["a", "c"]
    );
}

pub async fn the_same_id_twice_is_one_copy_and_a_use(make: MakeArtifacts) {
    let b = make(3, ROOMY.1).await;
    let scope = tenant("art-once");
    for id in ["a", "b", "c"] {
        b.store.put(&scope, "s1", id, artifact(id)).await.unwrap();
    }
    // Storing "a" again takes no room and makes "b" the oldest.
    b.store.put(&scope, "s1", "a", artifact("a")).await.unwrap();
    b.store.put(&scope, "s1", "d", artifact("d")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b", "c", "d"]).await,
        ["a", "c", "d"]
    );
}

pub async fn the_byte_bound_holds_and_keeps_the_newest(make: MakeArtifacts) {
    // Artifacts of about 1,000 bytes under a 3,500-byte bound: three fit, four do not,
    // whether a backend counts the text or its JSON.
    let b = make(ROOMY.0, 3_500).await;
    let scope = tenant("art-bytes");
    let ids: Vec<String> = (0..10).map(|i| format!("art_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let text = format!("{i:04}{}", "x".repeat(996));
        b.store
            .put(&scope, "s1", id, artifact(&text))
            .await
            .unwrap();
    }
    let all: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &all).await,
        ["art_7", "art_8", "art_9"]
    );
}

pub async fn an_artifact_over_the_byte_bound_is_refused_and_evicts_nothing(make: MakeArtifacts) {
    let b = make(ROOMY.0, 3_500).await;
    let scope = tenant("art-too-large");
    b.store
        .put(&scope, "s1", "small", artifact("small"))
        .await
        .unwrap();
    let err = b
        .store
        .put(&scope, "s1", "huge", artifact(&"x".repeat(10_000)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TooLarge, "{err}");
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["small", "huge"]).await,
        ["small"]
    );
}

pub async fn the_count_bound_holds_under_concurrent_writers(make: MakeArtifacts) {
    const MAX: usize = 10;
    let b = make(MAX, ROOMY.1).await;
    let scope = tenant("art-writers");
    let mut tasks = Vec::new();
    for w in 0..200 {
        let (store, scope) = (b.store.clone(), scope.clone());
        tasks.push(tokio::spawn(async move {
            let id = format!("art_{w}");
            store.put(&scope, "s1", &id, artifact(&id)).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let ids: Vec<String> = (0..200).map(|w| format!("art_{w}")).collect();
    let all: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(kept(b.store.as_ref(), &scope, &all).await.len(), MAX);
}

/// Runs every artifact contract test against `$make`, a [`MakeArtifacts`].
#[macro_export]
macro_rules! artifact_contract {
    ($make:expr) => {
        $crate::artifact_contract!(@tests $make;
            an_artifact_reads_back_exactly,
            tenants_and_sessions_never_see_each_other,
            the_least_recently_used_goes_first_and_a_read_is_a_use,
            contains_says_what_get_finds_and_is_a_use,
            the_same_id_twice_is_one_copy_and_a_use,
            the_byte_bound_holds_and_keeps_the_newest,
            an_artifact_over_the_byte_bound_is_refused_and_evicts_nothing,
            the_count_bound_holds_under_concurrent_writers,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        mod artifact_contract_tests {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    $crate::artifact_contract::$name($make).await;
                }
            )*
        }
    };
}
