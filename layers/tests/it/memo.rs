//! The memo layer's promises, through the public API: tenant isolation, what is memoized, single flight, and degrading when the store fails.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use llm_context_layers::memo::{FlightError, LocalMemoStore, MemoKey, MemoLayer, MemoStore};
use llm_context_layers::mock::MockModel;
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, MemoHint, Message,
    Scope, StoreError, StoreErrorKind,
};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

fn memory() -> Arc<dyn MemoStore> {
    Arc::new(LocalMemoStore::default())
}

fn question(scope: Scope) -> ChatRequest {
    ChatRequest::new("fake-model", vec![Message::user("what is the number?")])
        .with_scope(scope)
        .with_temperature(0.0)
}

/// The whole stack a user builds: the composite policy, then the memo, then the model.
fn stack(
    model: MockModel,
    store: Arc<dyn MemoStore>,
) -> impl Service<ChatRequest, Response = ChatResponse, Error = BoxError> + Clone {
    ServiceBuilder::new()
        .layer(
            ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(8_000))
                .unwrap(),
        )
        .layer(MemoLayer::new(store))
        .service(model)
}

#[tokio::test]
async fn seed_two_tenants_make_two_provider_calls() {
    // ONE store, deliberately shared, and the same question from org 1 and
    // org 999 — one provider call per tenant.
    let llm = MockModel::from_fn(|_| llm_context_layers::mock::MockReply::text("tenant-1 secret"));
    let store = memory();
    for scope in [Scope::org(1), Scope::org(999)] {
        stack(llm.clone(), Arc::clone(&store))
            .oneshot(question(scope))
            .await
            .unwrap();
    }
    assert_eq!(llm.calls(), 2);
    assert_eq!(Scope::org(1).key(), "org1:domNone");
}

#[tokio::test]
async fn seed_one_tenant_asking_twice_makes_one_call() {
    let llm = MockModel::echo();
    let model = stack(llm.clone(), memory());
    let first = model
        .clone()
        .oneshot(question(Scope::org(1)))
        .await
        .unwrap();
    let second = model.oneshot(question(Scope::org(1))).await.unwrap();
    assert_eq!(llm.calls(), 1);
    assert!(!first.report.memo_hit);
    assert!(second.report.memo_hit);
    assert_eq!(first.message, second.message);
    // The hit keeps the usage of the call that produced it, flagged for cost accounting.
    assert_eq!(first.usage, second.usage);
    assert!(second.usage.output_tokens > 0);
}

#[tokio::test]
async fn the_hit_report_keeps_the_outer_layers_figures() {
    let llm = MockModel::echo();
    let model = stack(llm.clone(), memory());
    let first = model
        .clone()
        .oneshot(question(Scope::org(1)))
        .await
        .unwrap();
    let second = model.oneshot(question(Scope::org(1))).await.unwrap();
    assert!(first.report.after_tokens > 0);
    assert_eq!(second.report.after_tokens, first.report.after_tokens);
    assert_eq!(
        second.report.prompt_allowance,
        first.report.prompt_allowance
    );
}

#[tokio::test]
async fn an_explicit_shared_scope_is_shared() {
    let llm = MockModel::echo();
    let model = stack(llm.clone(), memory());
    model
        .clone()
        .oneshot(question(Scope::shared()))
        .await
        .unwrap();
    let again = model.oneshot(question(Scope::shared())).await.unwrap();
    assert!(again.report.memo_hit);
    assert_eq!(llm.calls(), 1);
}

#[tokio::test]
async fn sampled_requests_are_not_memoized_by_default_but_can_opt_in() {
    let llm = MockModel::echo();
    let model = stack(llm.clone(), memory());
    let sampled = question(Scope::org(1)).with_temperature(0.7);
    for _ in 0..2 {
        let r = model.clone().oneshot(sampled.clone()).await.unwrap();
        assert!(!r.report.memo_hit);
    }
    assert_eq!(llm.calls(), 2);

    let no_temperature = {
        let mut r = question(Scope::org(1));
        r.params.temperature = None;
        r
    };
    for _ in 0..2 {
        model.clone().oneshot(no_temperature.clone()).await.unwrap();
    }
    assert_eq!(llm.calls(), 4);

    let opted_in = sampled.with_memo(MemoHint::Always);
    model.clone().oneshot(opted_in.clone()).await.unwrap();
    let hit = model.oneshot(opted_in).await.unwrap();
    assert!(hit.report.memo_hit);
    assert_eq!(llm.calls(), 5);
}

#[tokio::test]
async fn a_request_can_opt_out() {
    let llm = MockModel::echo();
    let model = stack(llm.clone(), memory());
    // Stored by an ordinary deterministic request…
    model
        .clone()
        .oneshot(question(Scope::org(1)))
        .await
        .unwrap();
    // …but a request that opts out neither reads nor writes the memo.
    let opted_out = question(Scope::org(1)).with_memo(MemoHint::Never);
    for _ in 0..2 {
        let r = model.clone().oneshot(opted_out.clone()).await.unwrap();
        assert!(!r.report.memo_hit);
    }
    assert_eq!(llm.calls(), 3);
}

#[tokio::test]
async fn a_custom_predicate_decides() {
    let llm = MockModel::echo();
    let model = MemoLayer::new(memory())
        .predicate(|r: &ChatRequest| r.model == "cheap")
        .layer(llm.clone());
    let mut cheap = question(Scope::org(1)).with_temperature(1.0);
    cheap.model = "cheap".into();
    model.clone().oneshot(cheap.clone()).await.unwrap();
    assert!(
        model
            .clone()
            .oneshot(cheap.clone())
            .await
            .unwrap()
            .report
            .memo_hit
    );
    // Opting out still wins over a predicate that says yes.
    let out = cheap.with_memo(MemoHint::Never);
    assert!(!model.clone().oneshot(out).await.unwrap().report.memo_hit);
    // A deterministic request for another model is refused by this predicate.
    model
        .clone()
        .oneshot(question(Scope::org(1)))
        .await
        .unwrap();
    model.oneshot(question(Scope::org(1))).await.unwrap();
    assert_eq!(llm.calls(), 4);
}

/// A provider that takes `delay` to answer and counts its calls.
#[derive(Clone)]
struct Slow {
    calls: Arc<AtomicUsize>,
    delay: Duration,
    fail: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("provider overloaded")]
struct Overloaded;

impl Slow {
    fn new(delay: Duration, fail: bool) -> Self {
        Self {
            calls: Arc::new(AtomicUsize::new(0)),
            delay,
            fail,
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn service(
        &self,
    ) -> impl Service<
        ChatRequest,
        Response = ChatResponse,
        Error = BoxError,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        let this = self.clone();
        tower::service_fn(move |req: ChatRequest| {
            let this = this.clone();
            async move {
                let n = this.calls.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(this.delay).await;
                if this.fail {
                    return Err::<ChatResponse, BoxError>(Box::new(Overloaded));
                }
                Ok(ChatResponse::new(Message::assistant(format!(
                    "answer #{n} to {}",
                    req.messages[0].text()
                ))))
            }
        })
    }
}

// The single-flight tests run on paused time: it moves only when every task is parked,
// so all callers have joined the flight before the provider answers (ordering by the
// clock, not by wall-clock luck).
#[tokio::test(start_paused = true)]
async fn single_flight_one_inner_call_for_100_concurrent_requests() {
    let provider = Slow::new(Duration::from_millis(300), false);
    let model = MemoLayer::new(memory()).layer(provider.service());
    let tasks: Vec<_> = (0..100)
        .map(|_| tokio::spawn(model.clone().oneshot(question(Scope::org(7)))))
        .collect();
    let mut hits = 0;
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        assert_eq!(r.message.text(), "answer #1 to what is the number?");
        hits += usize::from(r.report.memo_hit);
    }
    assert_eq!(provider.calls(), 1);
    assert_eq!(hits, 99, "every request but the one that called is flagged");
}

#[tokio::test(start_paused = true)]
async fn single_flight_is_per_tenant() {
    let provider = Slow::new(Duration::from_millis(200), false);
    let model = MemoLayer::new(memory()).layer(provider.service());
    let tasks: Vec<_> = (0..40)
        .map(|i| tokio::spawn(model.clone().oneshot(question(Scope::org(i % 2)))))
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_fails_every_waiter_and_is_not_memoized() {
    let provider = Slow::new(Duration::from_millis(300), true);
    let model = MemoLayer::new(memory()).layer(provider.service());
    let tasks: Vec<_> = (0..20)
        .map(|_| tokio::spawn(model.clone().oneshot(question(Scope::org(7)))))
        .collect();
    let (mut typed, mut shared) = (0, 0);
    for t in tasks {
        let err = t.await.unwrap().unwrap_err();
        if err.downcast_ref::<Overloaded>().is_some() {
            typed += 1;
        } else {
            let flight = err
                .downcast_ref::<FlightError>()
                .unwrap_or_else(|| panic!("unexpected error {err}"));
            assert!(flight.message.contains("provider overloaded"));
            shared += 1;
        }
    }
    assert_eq!(provider.calls(), 1);
    assert_eq!((typed, shared), (1, 19));
    // Nothing was stored: the next identical request calls the provider again.
    model.oneshot(question(Scope::org(7))).await.unwrap_err();
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_caller_does_not_strand_the_waiters() {
    let provider = Slow::new(Duration::from_secs(1), false);
    let model = MemoLayer::new(memory()).layer(provider.service());
    let leader = tokio::spawn(model.clone().oneshot(question(Scope::org(7))));
    tokio::task::yield_now().await;
    let followers: Vec<_> = (0..5)
        .map(|_| tokio::spawn(model.clone().oneshot(question(Scope::org(7)))))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    leader.abort();
    for f in followers {
        let r = tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("a follower finished")
            .unwrap()
            .unwrap();
        assert!(r.message.text().starts_with("answer #2"));
    }
    assert_eq!(provider.calls(), 2, "the cancelled call, then one more");
}

/// A store that is down, or that never answers; counts the lookups it is asked for.
#[derive(Default)]
struct BrokenStore {
    hang: bool,
    gets: AtomicUsize,
}

impl BrokenStore {
    fn hanging() -> Self {
        Self {
            hang: true,
            ..Self::default()
        }
    }
}

#[async_trait]
impl MemoStore for BrokenStore {
    async fn get(&self, _: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        if self.hang {
            std::future::pending::<()>().await;
        }
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "connection refused",
        ))
    }

    async fn put(&self, _: &MemoKey, _: &ChatResponse) -> Result<(), StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "connection refused",
        ))
    }
}

/// Warnings emitted on this thread while the guard lives.
fn capture_warnings() -> (Arc<Mutex<Vec<String>>>, tracing::subscriber::DefaultGuard) {
    use tracing_subscriber::layer::SubscriberExt;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&lines)));
    (lines, tracing::subscriber::set_default(subscriber))
}

struct Capture(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        self.0
            .lock()
            .unwrap()
            .push(crate::support::event_line(event));
    }
}

#[tokio::test]
async fn a_store_that_is_down_degrades_to_the_provider_with_a_warning() {
    let (warnings, _guard) = capture_warnings();
    let llm = MockModel::echo();
    let model = stack(llm.clone(), Arc::new(BrokenStore::default()));
    for _ in 0..2 {
        let r = model
            .clone()
            .oneshot(question(Scope::org(1)))
            .await
            .unwrap();
        assert!(!r.report.memo_hit);
    }
    assert_eq!(llm.calls(), 2);
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 2, "one warning per request: {warnings:?}");
    assert!(
        warnings[0].contains("memo store get failed"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("connection refused"), "{warnings:?}");
    assert!(warnings[0].contains("org1:domNone"), "{warnings:?}");
}

#[tokio::test(start_paused = true)]
async fn a_store_that_hangs_is_bounded_by_the_timeout() {
    let (warnings, _guard) = capture_warnings();
    let llm = MockModel::echo();
    let model = MemoLayer::new(Arc::new(BrokenStore::hanging()))
        .store_timeout(Duration::from_millis(50))
        .layer(llm.clone());
    let started = tokio::time::Instant::now();
    let r = model.oneshot(question(Scope::org(1))).await.unwrap();
    assert!(!r.report.memo_hit);
    assert_eq!(llm.calls(), 1);
    assert!(started.elapsed() < Duration::from_millis(60));
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("Timeout"), "{warnings:?}");
    assert!(
        warnings[0].contains("no answer within 50ms"),
        "{warnings:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_store_is_skipped_for_the_backoff() {
    let (warnings, _guard) = capture_warnings();
    let store = Arc::new(BrokenStore::hanging());
    let llm = MockModel::echo();
    let model = MemoLayer::new(Arc::clone(&store) as Arc<dyn MemoStore>)
        .store_timeout(Duration::from_millis(50))
        .store_backoff(Duration::from_secs(1))
        .layer(llm.clone());

    let started = tokio::time::Instant::now();
    for _ in 0..5 {
        model
            .clone()
            .oneshot(question(Scope::org(1)))
            .await
            .unwrap();
    }
    // One wait for the timeout, then straight to the provider.
    assert_eq!(store.gets.load(Ordering::SeqCst), 1);
    assert!(started.elapsed() < Duration::from_millis(60));
    assert_eq!(llm.calls(), 5);
    {
        let warnings = warnings.lock().unwrap();
        assert_eq!(warnings.len(), 5, "every request says why: {warnings:?}");
        assert!(warnings[4].contains("skipped for up to 1s"), "{warnings:?}");
    }

    // After the backoff the store is tried again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    model.oneshot(question(Scope::org(1))).await.unwrap();
    assert_eq!(store.gets.load(Ordering::SeqCst), 2);
}

/// An in-memory store whose first lookup reports a corrupt entry.
struct CorruptOnce {
    inner: LocalMemoStore,
    corrupt: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl MemoStore for CorruptOnce {
    async fn get(&self, key: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        if self.corrupt.swap(false, Ordering::SeqCst) {
            return Err(StoreError::new(StoreErrorKind::Corrupt, "bad entry"));
        }
        self.inner.get(key).await
    }

    async fn put(&self, key: &MemoKey, response: &ChatResponse) -> Result<(), StoreError> {
        self.inner.put(key, response).await
    }
}

#[tokio::test]
async fn a_corrupt_entry_is_replaced_and_does_not_trip_the_backoff() {
    let llm = MockModel::echo();
    let model = MemoLayer::new(Arc::new(CorruptOnce {
        inner: LocalMemoStore::default(),
        corrupt: true.into(),
    }))
    .layer(llm.clone());
    assert!(
        !model
            .clone()
            .oneshot(question(Scope::org(1)))
            .await
            .unwrap()
            .report
            .memo_hit
    );
    assert!(
        model
            .oneshot(question(Scope::org(1)))
            .await
            .unwrap()
            .report
            .memo_hit
    );
    assert_eq!(llm.calls(), 1);
}

#[tokio::test]
async fn builder_extension_adds_the_memo() {
    use llm_context_layers::ServiceBuilderExt;
    let llm = MockModel::echo();
    let model = ServiceBuilder::new().memo(memory()).service(llm.clone());
    model
        .clone()
        .oneshot(question(Scope::org(1)))
        .await
        .unwrap();
    assert!(
        model
            .oneshot(question(Scope::org(1)))
            .await
            .unwrap()
            .report
            .memo_hit
    );
    assert_eq!(llm.calls(), 1);
}

/// The composite's own memo step: the seed's two-tenant check through
/// `ContextPolicyLayer::with_memo`, with the preparation report kept on hits.
#[tokio::test]
async fn the_composite_memoizes_per_tenant() {
    use llm_context_layers::memo::{LocalMemoStore, MemoLayer};
    use llm_context_layers::{ContextPolicy, ContextPolicyLayer};
    use tower::{Layer, ServiceExt};

    let model = llm_context_layers::mock::MockModel::echo();
    let layer = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_memo(MemoLayer::new(std::sync::Arc::new(
            LocalMemoStore::default(),
        )));
    let stack = layer.layer(model.clone());
    let ask = |org: u32| {
        llm_context_layers::ChatRequest::new(
            "m",
            vec![llm_context_layers::Message::user("what is the number?")],
        )
        .with_scope(llm_context_layers::Scope::org(org))
        .with_temperature(0.0)
    };
    let first = stack.clone().oneshot(ask(1)).await.unwrap();
    assert!(!first.report.memo_hit);
    let again = stack.clone().oneshot(ask(1)).await.unwrap();
    assert!(again.report.memo_hit);
    assert_eq!(again.message, first.message);
    assert_eq!(again.report.before_tokens, first.report.before_tokens);
    stack.clone().oneshot(ask(999)).await.unwrap();
    assert_eq!(model.calls(), 2, "one provider call per tenant");
}

/// A store that refuses its credentials on every call; counts what it is asked.
#[derive(Default)]
struct RefusingStore {
    gets: AtomicUsize,
    puts: AtomicUsize,
}

#[async_trait]
impl MemoStore for RefusingStore {
    async fn get(&self, _: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::new(
            StoreErrorKind::Authentication,
            "NOAUTH Authentication required",
        ))
    }

    async fn put(&self, _: &MemoKey, _: &ChatResponse) -> Result<(), StoreError> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        Err(StoreError::new(
            StoreErrorKind::Authentication,
            "NOAUTH Authentication required",
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_refusing_its_credentials_is_skipped_like_an_unreachable_one() {
    let (warnings, _guard) = capture_warnings();
    let store = Arc::new(RefusingStore::default());
    let llm = MockModel::echo();
    let model = MemoLayer::new(Arc::clone(&store) as Arc<dyn MemoStore>)
        .store_backoff(Duration::from_secs(1))
        .layer(llm.clone());
    for _ in 0..5 {
        let r = model
            .clone()
            .oneshot(question(Scope::org(1)))
            .await
            .unwrap();
        assert!(!r.report.memo_hit);
    }
    assert_eq!(llm.calls(), 5);
    // Asked once, not twice per request (a lookup and a write) for as long as it refuses.
    assert_eq!(store.gets.load(Ordering::SeqCst), 1);
    assert_eq!(store.puts.load(Ordering::SeqCst), 0);
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 5, "every request says why: {warnings:?}");
    assert!(warnings[0].contains("NOAUTH"), "{warnings:?}");
}
