//! Helpers shared by the Redis tests. Each test binary uses a different subset.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_context::redis::{RedisOptions, RedisStores};

const HOW_TO_RUN: &str = "the Redis tests need a real redis-server: run scripts/test.sh, \
which installs one where it is missing, starts it and sets REDIS_URL";

/// The Redis the test script started. Never skips: without it the test fails, saying how
/// to run it.
pub(crate) fn redis_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("REDIS_URL is not set: {HOW_TO_RUN}"),
    }
}

/// A key prefix no other test (or earlier run) uses, so tests share one server safely.
pub(crate) fn unique_prefix(test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "test:{test}:{}:{nanos}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Sends `ask()` through `model` until a reply comes from the memo, failing with `what`
/// after `within`: for tests where a Redis comes back and the memo must follow.
pub(crate) async fn until_memo_hit<S>(
    model: &S,
    ask: impl Fn() -> llm_context::ChatRequest,
    within: Duration,
    what: &str,
) where
    S: tower::Service<llm_context::ChatRequest, Response = llm_context::ChatResponse> + Clone,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    let deadline = Instant::now() + within;
    loop {
        let reply = model.clone().oneshot(ask()).await.unwrap();
        if reply.report.memo_hit {
            return;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stores on the test Redis, under a fresh prefix.
pub(crate) async fn stores(test: &str, options: RedisOptions) -> RedisStores {
    RedisStores::connect_with(&redis_url(), options.with_key_prefix(unique_prefix(test)))
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test Redis ({e}): {HOW_TO_RUN}"))
}

/// A redis-server of the test's own, which the test may stop.
pub(crate) struct OwnRedis {
    child: Child,
    pub(crate) port: u16,
}

impl OwnRedis {
    pub(crate) fn start() -> Self {
        let port = free_port();
        Self::start_on(port)
    }

    pub(crate) fn start_on(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    /// A server on `port` with more configuration, e.g. `["--requirepass", "s3cret"]`.
    pub(crate) fn start_with(port: u16, config: &[&str]) -> Self {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): {HOW_TO_RUN}"));
        let server = Self { child, port };
        server.wait_until_up();
        server
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server and waits until it is gone.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not come up on port {}", self.port);
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Warnings emitted on this thread while the guard lives (use a current-thread runtime).
pub(crate) fn capture_warnings() -> (Arc<Mutex<Vec<String>>>, tracing::subscriber::DefaultGuard) {
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
        self.0.lock().unwrap().push(super::event_line(event));
    }
}
