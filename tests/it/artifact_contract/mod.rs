//! The contract every `ArtifactStore` backend keeps, written once and run against each
//! backend by `artifact_contract!`: round trips, tenant and session isolation, the
//! per-session count and byte bounds (least recently used out first, a read counting as
//! a use), one copy per id, refusing an artifact larger than the byte bound, and
//! `commit`: the live set outlasts both bounds until the next commit replaces it, a plain
//! put evicts around it, missing references are reported in order, and live sets are
//! per tenant and session.
#![allow(dead_code, unreachable_pub)]

#[macro_use]
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

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

fn new(names: &[&str]) -> Vec<(String, Artifact)> {
    names
        .iter()
        .map(|id| ((*id).to_owned(), artifact(id)))
        .collect()
}

/// About 1,000 bytes, as text or as JSON, distinct per `i`.
fn kilo(i: usize) -> Artifact {
    artifact(&format!("{i:04}{}", "x".repeat(996)))
}

pub async fn the_live_set_outlasts_the_count_bound_until_the_next_commit(make: MakeArtifacts) {
    let b = make(2, ROOMY.1).await;
    let scope = tenant("commit-count");
    let missing = b
        .store
        .commit(&scope, "s1", new(&["a", "b", "c"]), &ids(&["a", "b", "c"]))
        .await
        .unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    // Three over a bound of two, all kept: the request refers to each.
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b", "c"]).await,
        ["a", "b", "c"]
    );
    // The next request refers to "c" and a new "d": "a" and "b" are no longer live.
    let missing = b
        .store
        .commit(&scope, "s1", new(&["d"]), &ids(&["c", "d"]))
        .await
        .unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b", "c", "d"]).await,
        ["c", "d"]
    );
    // A commit that refers to nothing leaves nothing live: the bound holds again.
    b.store
        .commit(&scope, "s1", new(&["e", "f"]), &ids(&["c", "d", "e", "f"]))
        .await
        .unwrap();
    let missing = b.store.commit(&scope, "s1", Vec::new(), &[]).await.unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["c", "d", "e", "f"]).await,
        ["e", "f"]
    );
}

pub async fn the_live_set_outlasts_the_byte_bound_until_the_next_commit(make: MakeArtifacts) {
    // Three of about 1,000 bytes fit under 3,500, four do not.
    let b = make(ROOMY.0, 3_500).await;
    let scope = tenant("commit-bytes");
    b.store.put(&scope, "s1", "old", kilo(0)).await.unwrap();
    let four: Vec<(String, Artifact)> = (1..=4).map(|i| (format!("l{i}"), kilo(i))).collect();
    let missing = b
        .store
        .commit(&scope, "s1", four, &ids(&["l1", "l2", "l3", "l4"]))
        .await
        .unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    // The one artifact outside the live set went; the live ones stay over the bound.
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["old", "l1", "l2", "l3", "l4"]).await,
        ["l1", "l2", "l3", "l4"]
    );
    // The next request refers to "l4" and a new "l5": the oldest of the others go until
    // three fit.
    let missing = b
        .store
        .commit(
            &scope,
            "s1",
            vec![("l5".to_owned(), kilo(5))],
            &ids(&["l4", "l5"]),
        )
        .await
        .unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["l1", "l2", "l3", "l4", "l5"]).await,
        ["l3", "l4", "l5"]
    );
}

pub async fn a_put_evicts_around_the_live_set(make: MakeArtifacts) {
    let b = make(2, ROOMY.1).await;
    let scope = tenant("commit-put");
    b.store
        .commit(&scope, "s1", new(&["live"]), &ids(&["live"]))
        .await
        .unwrap();
    // "live" is the least recently used, yet "x" goes for "y".
    b.store.put(&scope, "s1", "x", artifact("x")).await.unwrap();
    b.store.put(&scope, "s1", "y", artifact("y")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["live", "x", "y"]).await,
        ["live", "y"]
    );
    // When the live set fills the bound, a put has no room but its own artifact's: it
    // goes, the live ones stay.
    b.store
        .commit(&scope, "s1", new(&["p", "q"]), &ids(&["p", "q"]))
        .await
        .unwrap();
    b.store.put(&scope, "s1", "r", artifact("r")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["p", "q", "r"]).await,
        ["p", "q"]
    );
}

pub async fn a_live_id_not_stored_yet_is_kept_once_put(make: MakeArtifacts) {
    let b = make(1, ROOMY.1).await;
    let scope = tenant("commit-later");
    let missing = b
        .store
        .commit(&scope, "s1", new(&["a"]), &ids(&["a", "b"]))
        .await
        .unwrap();
    assert_eq!(missing, ["b"]);
    // The request refers to "b", so storing it later keeps both over a bound of one.
    b.store.put(&scope, "s1", "b", artifact("b")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b"]).await,
        ["a", "b"]
    );
}

pub async fn a_commit_is_a_use_of_every_reference(make: MakeArtifacts) {
    let b = make(2, ROOMY.1).await;
    let scope = tenant("commit-use");
    b.store.put(&scope, "s1", "a", artifact("a")).await.unwrap();
    b.store.put(&scope, "s1", "b", artifact("b")).await.unwrap();
    // A request refers to "a" only, then a later one to nothing: "a" was used last.
    b.store
        .commit(&scope, "s1", Vec::new(), &ids(&["a"]))
        .await
        .unwrap();
    b.store.commit(&scope, "s1", Vec::new(), &[]).await.unwrap();
    b.store.put(&scope, "s1", "c", artifact("c")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &scope, &["a", "b", "c"]).await,
        ["a", "c"]
    );
}

pub async fn commit_reports_the_references_it_does_not_hold_in_order(make: MakeArtifacts) {
    let b = make(ROOMY.0, 3_500).await;
    let scope = tenant("commit-missing");
    b.store
        .put(&scope, "s1", "earlier", artifact("earlier"))
        .await
        .unwrap();
    b.store
        .put(&scope, "s2", "elsewhere", artifact("elsewhere"))
        .await
        .unwrap();
    let new = vec![
        ("ok".to_owned(), artifact("ok")),
        ("huge".to_owned(), artifact(&"x".repeat(10_000))),
    ];
    let referenced = ids(&["ghost", "ok", "earlier", "huge", "elsewhere", "zombie"]);
    let missing = b
        .store
        .commit(&scope, "s1", new, &referenced)
        .await
        .unwrap();
    // Never stored, too large for the store, another session's: missing, in order.
    assert_eq!(missing, ["ghost", "huge", "elsewhere", "zombie"]);
    assert_eq!(
        kept(
            b.store.as_ref(),
            &scope,
            &["ok", "earlier", "huge", "ghost"]
        )
        .await,
        ["ok", "earlier"]
    );
    assert_eq!(
        b.store.get(&scope, "s2", "elsewhere").await.unwrap(),
        Some(artifact("elsewhere"))
    );
}

pub async fn live_sets_are_per_tenant_and_session(make: MakeArtifacts) {
    let b = make(1, ROOMY.1).await;
    let org = tenant("commit-isolation");
    let missing = b
        .store
        .commit(&org, "s1", new(&["a", "b"]), &ids(&["a", "b"]))
        .await
        .unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    let elsewhere = [
        (tenant("commit-isolation-other"), "s1"),
        (org.clone(), "s2"),
        (org.clone().with_domain("billing"), "s1"),
    ];
    for (scope, session) in &elsewhere {
        // Another tenant or session holds none of them, and its own commit (the same
        // ids, referring to nothing stored) replaces its own live set only.
        let missing = b
            .store
            .commit(scope, session, Vec::new(), &ids(&["a", "b"]))
            .await
            .unwrap();
        assert_eq!(missing, ["a", "b"], "{scope:?} / {session}");
        assert_eq!(
            b.store.get(scope, session, "a").await.unwrap(),
            None,
            "{scope:?} / {session} must not see it"
        );
        b.store
            .commit(scope, session, new(&["c"]), &ids(&["c"]))
            .await
            .unwrap();
    }
    // s1's live set still holds: a put there evicts its own artifact, not "a" or "b".
    b.store.put(&org, "s1", "x", artifact("x")).await.unwrap();
    assert_eq!(
        kept(b.store.as_ref(), &org, &["a", "b", "x"]).await,
        ["a", "b"]
    );
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
            the_live_set_outlasts_the_count_bound_until_the_next_commit,
            the_live_set_outlasts_the_byte_bound_until_the_next_commit,
            a_put_evicts_around_the_live_set,
            a_live_id_not_stored_yet_is_kept_once_put,
            a_commit_is_a_use_of_every_reference,
            commit_reports_the_references_it_does_not_hold_in_order,
            live_sets_are_per_tenant_and_session,
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
