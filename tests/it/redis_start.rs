//! Start-up against a Redis that is not there, and against one that refuses the
//! credentials. An unreachable server is an outage: the stores start degraded and
//! connect when it is back. Refused credentials are a configuration error: the
//! constructor fails, typed. Each test runs a redis-server of its own (the one
//! scripts/test.sh installs) on a free loopback port, and stops it by its pid.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use llm_context::durable::{ContextRecord, ContextStore};
use llm_context::memo::MemoLayer;
use llm_context::mock::MockModel;
use llm_context::redis::{RedisDurableStore, RedisOptions, RedisStores};
use llm_context::{Artifact, ArtifactStore, ChatRequest, Message, Scope, StoreErrorKind};
use tower::{Layer, ServiceExt};

fn question() -> ChatRequest {
    ChatRequest::new("fake-model", vec![Message::user("what is the number?")])
        .with_scope(Scope::org(1))
        .with_temperature(0.0)
}

const RECOVERY: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "current_thread")]
async fn stores_built_while_redis_is_down_serve_degraded_and_recover() {
    let port = crate::support::redis::free_port();
    let url = format!("redis://:hunter2@127.0.0.1:{port}/");
    let (warnings, guard) = crate::support::redis::capture_warnings();
    let stores = RedisStores::connect_with(
        &url,
        RedisOptions::default()
            .with_key_prefix(crate::support::redis::unique_prefix("down-at-start")),
    )
    .await
    .expect("an unreachable Redis is an outage, not an error");
    let provider = MockModel::echo();
    let model = MemoLayer::new(Arc::new(stores.memo.clone()))
        .store_timeout(Duration::from_millis(200))
        .store_backoff(Duration::from_millis(100))
        .layer(provider.clone());

    // Down: the request is answered by the provider, with warnings saying why.
    let reply = model.clone().oneshot(question()).await.unwrap();
    assert!(!reply.report.memo_hit);
    assert_eq!(provider.calls(), 1);
    assert!(stores.ping().await.is_err());
    let scope = Scope::org(1);
    let artifact = Artifact::new("a large tool result", 1_000);
    let err = stores
        .artifacts
        .put(&scope, "s", "a1", artifact.clone())
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    {
        let warnings = warnings.lock().unwrap();
        let all = warnings.join("\n");
        assert!(all.contains("redis_unreachable"), "{all}");
        assert!(all.contains("memo_store_degraded"), "{all}");
        assert!(all.contains("redis://:***@127.0.0.1"), "{all}");
        assert!(!all.contains("hunter2"), "{all}");
    }
    drop(guard);

    // Redis comes up on that port: the same stores connect, and the memo works.
    let _redis = crate::support::redis::OwnRedis::start_with(port, &["--requirepass", "hunter2"]);
    crate::support::redis::until_memo_hit(
        &model,
        question,
        RECOVERY,
        "the memo did not come back once Redis was up",
    )
    .await;
    stores.ping().await.unwrap();
    stores
        .artifacts
        .put(&scope, "s", "a1", artifact.clone())
        .await
        .unwrap();
    assert_eq!(
        stores.artifacts.get(&scope, "s", "a1").await.unwrap(),
        Some(artifact)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_durable_store_built_while_redis_is_down_connects_when_it_is_back() {
    let port = crate::support::redis::free_port();
    let store = RedisDurableStore::connect(&format!("redis://127.0.0.1:{port}/"))
        .await
        .expect("an unreachable Redis is an outage, not an error")
        .with_namespace(crate::support::redis::unique_prefix("durable-down"));
    let scope = Scope::org("acme");
    let err = store
        .save(&scope, "root", &ContextRecord::new())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.kind,
            StoreErrorKind::Unavailable | StoreErrorKind::Timeout
        ),
        "{err}"
    );

    let _redis = crate::support::redis::OwnRedis::start_on(port);
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let version = loop {
        match store.save(&scope, "root", &ContextRecord::new()).await {
            Ok(version) => break version,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "the store did not connect once Redis was up: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(version, 1);
    assert_eq!(
        store.load(&scope, "root").await.unwrap().unwrap().version,
        1
    );
}

#[tokio::test(flavor = "current_thread")]
async fn refused_credentials_fail_at_connect_typed_and_without_the_password() {
    let port = crate::support::redis::free_port();
    let _redis = crate::support::redis::OwnRedis::start_with(
        port,
        &[
            "--requirepass",
            "s3cret-pass",
            // An ACL user: redis-server reads the words after `--user` as its rules.
            "--user",
            "alice",
            "on",
            ">alice-pass",
            "~*",
            "&*",
            "+@all",
        ],
    );
    let refused = [
        // A wrong password for the default user.
        format!("redis://:wrong-pass@127.0.0.1:{port}/"),
        // None at all: the connection opens, and every command would fail with NOAUTH.
        format!("redis://127.0.0.1:{port}/"),
        // An ACL user with a wrong password, and a user that does not exist.
        format!("redis://alice:wrong-pass@127.0.0.1:{port}/"),
        format!("redis://mallory:alice-pass@127.0.0.1:{port}/"),
    ];
    for url in &refused {
        let err = match RedisStores::connect(url).await {
            Ok(_) => panic!("{url} was accepted"),
            Err(err) => err,
        };
        assert_eq!(err.kind, StoreErrorKind::Authentication, "{url}: {err}");
        assert!(err.to_string().contains("refused the credentials"), "{err}");
        assert!(!err.to_string().contains("wrong-pass"), "{err}");
        assert!(!err.to_string().contains("alice-pass"), "{err}");
        let err = match RedisDurableStore::connect(url).await {
            Ok(_) => panic!("{url} was accepted"),
            Err(err) => err,
        };
        assert_eq!(err.kind, StoreErrorKind::Authentication, "{url}: {err}");
    }

    for url in [
        format!("redis://:s3cret-pass@127.0.0.1:{port}/"),
        format!("redis://alice:alice-pass@127.0.0.1:{port}/"),
    ] {
        let stores = RedisStores::connect(&url).await.unwrap();
        stores.ping().await.unwrap();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn settings_the_server_refuses_are_invalid() {
    let redis = crate::support::redis::OwnRedis::start();
    // Redis has 16 databases by default.
    let err = RedisStores::connect(&format!("redis://127.0.0.1:{}/99", redis.port))
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Invalid, "{err}");
    let err = RedisStores::connect("redis://127.0.0.1:notaport/")
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Invalid, "{err}");
}
