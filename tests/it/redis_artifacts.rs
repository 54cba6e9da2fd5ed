//! The Redis artifact store against a real redis-server (run through scripts/test.sh):
//! replicas read each other's artifacts within a tenant and session only; sessions
//! expire, their live sets with them; the per-session bounds hold under 1,000 concurrent
//! writers; commits at once from two replicas each keep their live set.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use llm_context::redis::{RedisArtifactStore, RedisOptions, RedisStores};
use llm_context::{Artifact, ArtifactStore, Scope, StoreErrorKind};

fn contract_store(
    count: usize,
    bytes: usize,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = crate::artifact_contract::ArtifactBackend> + Send>,
> {
    Box::pin(async move {
        let options = RedisOptions::default()
            .with_max_artifacts_per_session(count)
            .with_max_session_bytes(bytes);
        let stores = replica(
            &crate::support::redis::unique_prefix("art-contract"),
            options,
        )
        .await;
        crate::artifact_contract::ArtifactBackend {
            store: Arc::new(stores.artifacts),
            guard: Box::new(()),
        }
    })
}

artifact_contract!(contract_store);
no_dangling_contract!(contract_store, 24);

fn artifact(text: &str) -> Artifact {
    Artifact::new(text, 1_000_000)
}

/// A replica's stores: its own connection, under `prefix`.
async fn replica(prefix: &str, options: RedisOptions) -> RedisStores {
    RedisStores::connect_with(
        &crate::support::redis::redis_url(),
        options.with_key_prefix(prefix),
    )
    .await
    .expect("the test Redis is reachable (run scripts/test.sh)")
}

#[tokio::test]
async fn replicas_read_each_others_artifacts_within_a_tenant_and_session_only() {
    let prefix = crate::support::redis::unique_prefix("art-replicas");
    let a = replica(&prefix, RedisOptions::default()).await;
    let b = replica(&prefix, RedisOptions::default()).await;

    let org1 = Scope::org(1);
    a.artifacts
        .put(&org1, "s1", "art_1", artifact("the full tool output"))
        .await
        .unwrap();

    let read = b.artifacts.get(&org1, "s1", "art_1").await.unwrap();
    assert_eq!(read, Some(artifact("the full tool output")));
    let elsewhere = [
        (Scope::org(999), "s1"),
        (org1.clone(), "s2"),
        (org1.clone().with_domain("billing"), "s1"),
        (Scope::shared(), "s1"),
    ];
    for (scope, session) in elsewhere {
        assert_eq!(
            b.artifacts.get(&scope, session, "art_1").await.unwrap(),
            None,
            "{scope:?} / {session} must not see org 1's artifact"
        );
    }
}

#[tokio::test]
async fn a_session_expires_after_its_last_use() {
    let stores = replica(
        &crate::support::redis::unique_prefix("art-ttl"),
        RedisOptions::default().with_artifact_ttl(Duration::from_millis(400)),
    )
    .await;
    let (scope, s) = (Scope::org(1), "s1");
    stores
        .artifacts
        .put(&scope, s, "a", artifact("x"))
        .await
        .unwrap();
    // Reads keep the session alive…
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            stores
                .artifacts
                .get(&scope, s, "a")
                .await
                .unwrap()
                .is_some()
        );
    }
    // …and without use it goes, every key of it.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(stores.artifacts.get(&scope, s, "a").await.unwrap(), None);
    let usage = stores.artifacts.session_usage(&scope, s).await.unwrap();
    assert_eq!((usage.artifacts, usage.bytes), (0, 0));
}

#[tokio::test]
async fn the_least_recently_used_artifact_is_evicted_first() {
    let stores = replica(
        &crate::support::redis::unique_prefix("art-lru"),
        RedisOptions::default().with_max_artifacts_per_session(3),
    )
    .await;
    let (scope, s) = (Scope::org(1), "s1");
    for id in ["a", "b", "c"] {
        stores
            .artifacts
            .put(&scope, s, id, artifact(id))
            .await
            .unwrap();
    }
    // Reading "a" makes "b" the least recently used.
    assert!(
        stores
            .artifacts
            .get(&scope, s, "a")
            .await
            .unwrap()
            .is_some()
    );
    stores
        .artifacts
        .put(&scope, s, "d", artifact("d"))
        .await
        .unwrap();
    let mut kept = Vec::new();
    for id in ["a", "b", "c", "d"] {
        if stores.artifacts.get(&scope, s, id).await.unwrap().is_some() {
            kept.push(id);
        }
    }
    assert_eq!(kept, ["a", "c", "d"]);
    // Storing an id again keeps one copy.
    stores
        .artifacts
        .put(&scope, s, "d", artifact("d"))
        .await
        .unwrap();
    assert_eq!(
        stores
            .artifacts
            .session_usage(&scope, s)
            .await
            .unwrap()
            .artifacts,
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_bound_holds_under_1000_concurrent_writers() {
    const MAX: usize = 10;
    let prefix = crate::support::redis::unique_prefix("art-writers");
    let options = RedisOptions::default().with_max_artifacts_per_session(MAX);
    // Two replicas writing to the same session at once.
    let replicas = [
        replica(&prefix, options.clone()).await,
        replica(&prefix, options).await,
    ];
    let scope = Scope::org(1);
    let other_session_store = replicas[0].artifacts.clone();
    other_session_store
        .put(&scope, "untouched", "keep-me", artifact("kept"))
        .await
        .unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let store = replicas[1].artifacts.clone();
        let (scope, done) = (scope.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let (mut samples, mut most) = (0, 0);
            while !done.load(Ordering::SeqCst) {
                let usage = store.session_usage(&scope, "busy").await.unwrap();
                most = most.max(usage.artifacts);
                samples += 1;
                tokio::task::yield_now().await;
            }
            (samples, most)
        })
    };

    let writers: Vec<_> = (0..1000)
        .map(|i| {
            let store = replicas[i % 2].artifacts.clone();
            let scope = scope.clone();
            tokio::spawn(async move {
                store
                    .put(
                        &scope,
                        "busy",
                        &format!("art_{i}"),
                        artifact(&format!("result {i}")),
                    )
                    .await
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let (samples, most) = watcher.await.unwrap();

    assert!(samples > 0);
    assert!(
        most <= MAX,
        "the session held {most} artifacts at one point"
    );
    let usage = replicas[0]
        .artifacts
        .session_usage(&scope, "busy")
        .await
        .unwrap();
    assert_eq!(usage.artifacts, MAX);
    let mut readable = 0;
    for i in 0..1000 {
        let id = format!("art_{i}");
        if let Some(a) = replicas[0]
            .artifacts
            .get(&scope, "busy", &id)
            .await
            .unwrap()
        {
            assert_eq!(&*a.text, format!("result {i}"));
            readable += 1;
        }
    }
    assert_eq!(readable, MAX, "the index and the data agree");
    // Another session of the same tenant is not touched by the evictions.
    assert!(
        other_session_store
            .get(&scope, "untouched", "keep-me")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_byte_bound_holds_under_concurrent_writers() {
    let one = serde_json::to_vec(&artifact(&"x".repeat(1_000)))
        .unwrap()
        .len();
    let max_bytes = one * 5 + one / 2;
    let stores = replica(
        &crate::support::redis::unique_prefix("art-bytes"),
        RedisOptions::default().with_max_session_bytes(max_bytes),
    )
    .await;
    let scope = Scope::org(1);
    let writers: Vec<_> = (0..200)
        .map(|i| {
            let store = stores.artifacts.clone();
            let scope = scope.clone();
            tokio::spawn(async move {
                store
                    .put(
                        &scope,
                        "s",
                        &format!("{i:04}"),
                        artifact(&"x".repeat(1_000)),
                    )
                    .await
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let usage = stores.artifacts.session_usage(&scope, "s").await.unwrap();
    assert_eq!(usage.artifacts, 5);
    assert_eq!(usage.bytes, 5 * one);

    let err = stores
        .artifacts
        .put(&scope, "s", "huge", artifact(&"y".repeat(max_bytes)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::TooLarge);
    assert_eq!(
        stores
            .artifacts
            .session_usage(&scope, "s")
            .await
            .unwrap()
            .artifacts,
        5
    );
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|k| format!("{prefix}-{k}")).collect()
}

/// Commits `refs` (all new) to `session` and asserts the store reports none missing.
async fn commit_all(store: &RedisArtifactStore, scope: &Scope, session: &str, refs: &[String]) {
    let new = refs.iter().map(|id| (id.clone(), artifact(id))).collect();
    let missing = store.commit(scope, session, new, refs).await.unwrap();
    assert!(missing.is_empty(), "{session}: {missing:?} missing");
}

async fn held(store: &RedisArtifactStore, scope: &Scope, session: &str, refs: &[String]) -> usize {
    let mut n = 0;
    for id in refs {
        if let Some(a) = store.get(scope, session, id).await.unwrap() {
            assert_eq!(&*a.text, id.as_str());
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_committing_at_once_keep_both_live_sets() {
    let prefix = crate::support::redis::unique_prefix("art-commit-sessions");
    let options = RedisOptions::default().with_max_artifacts_per_session(2);
    let one = replica(&prefix, options.clone()).await.artifacts;
    let two = replica(&prefix, options).await.artifacts;
    let scope = Scope::org(1);
    for round in 0..50 {
        let (a, b) = (ids(&format!("a{round}"), 5), ids(&format!("b{round}"), 5));
        let first = {
            let (store, scope, a) = (one.clone(), scope.clone(), a.clone());
            tokio::spawn(async move { commit_all(&store, &scope, "sa", &a).await })
        };
        let second = {
            let (store, scope, b) = (two.clone(), scope.clone(), b.clone());
            tokio::spawn(async move { commit_all(&store, &scope, "sb", &b).await })
        };
        first.await.unwrap();
        second.await.unwrap();
        // Five live over a bound of two, and the previous round's five evicted.
        for (session, refs) in [("sa", &a), ("sb", &b)] {
            let usage = one.session_usage(&scope, session).await.unwrap();
            assert_eq!(usage.artifacts, 5, "round {round}, {session}");
            assert_eq!(held(&two, &scope, session, refs).await, 5, "round {round}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_commits_to_one_session_at_once_each_hold_their_references() {
    let prefix = crate::support::redis::unique_prefix("art-commit-race");
    let options = RedisOptions::default().with_max_artifacts_per_session(2);
    let one = replica(&prefix, options.clone()).await.artifacts;
    let two = replica(&prefix, options).await.artifacts;
    let scope = Scope::org(1);
    for round in 0..50 {
        let (a, b) = (ids(&format!("a{round}"), 5), ids(&format!("b{round}"), 5));
        // Each commit finds every one of its references stored, whichever runs first.
        let first = {
            let (store, scope, a) = (one.clone(), scope.clone(), a.clone());
            tokio::spawn(async move { commit_all(&store, &scope, "s", &a).await })
        };
        let second = {
            let (store, scope, b) = (two.clone(), scope.clone(), b.clone());
            tokio::spawn(async move { commit_all(&store, &scope, "s", &b).await })
        };
        first.await.unwrap();
        second.await.unwrap();
        // The later commit's live set is the session's: all of it held, the other set
        // evicted down to the bound around it.
        let (held_a, held_b) = (
            held(&one, &scope, "s", &a).await,
            held(&one, &scope, "s", &b).await,
        );
        assert!(
            (held_a, held_b) == (5, 0) || (held_a, held_b) == (0, 5),
            "round {round}: {held_a} of a, {held_b} of b"
        );
    }
}

#[tokio::test]
async fn the_live_set_expires_with_its_session() {
    let prefix = crate::support::redis::unique_prefix("art-commit-ttl");
    let stores = replica(
        &prefix,
        RedisOptions::default()
            .with_artifact_ttl(Duration::from_millis(400))
            .with_max_artifacts_per_session(1),
    )
    .await;
    let store = &stores.artifacts;
    let (scope, s) = (Scope::org(1), "s1");
    let refs = ids("live", 2);
    commit_all(store, &scope, s, &refs).await;
    // The keys as `keys.rs` lays them out, all there now.
    let base = format!("{prefix}:art:{}:{s}", scope.key());
    let mut raw = redis_client::Client::open(crate::support::redis::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let parts = ["data", "idx", "meta", "live"];
    for part in parts {
        let exists: u64 = redis_client::cmd("EXISTS")
            .arg(format!("{base}:{part}"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(exists, 1, "{base}:{part}");
    }
    // Reads keep the session alive, its live set too: past the first TTL, a put still
    // evicts around both live artifacts (its own goes, over a bound of one).
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(store.get(&scope, s, &refs[0]).await.unwrap().is_some());
    }
    store.put(&scope, s, "x", artifact("x")).await.unwrap();
    assert_eq!(held(store, &scope, s, &refs).await, 2);
    assert_eq!(store.get(&scope, s, "x").await.unwrap(), None);

    // Without use every key of the session goes, the live set with the artifacts.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for part in parts {
        let exists: u64 = redis_client::cmd("EXISTS")
            .arg(format!("{base}:{part}"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{base}:{part} outlived the session");
    }
    let missing = store.commit(&scope, s, Vec::new(), &refs).await.unwrap();
    assert_eq!(missing, refs);
}
