//! [`RedisOptions`]: key prefix, TTLs, bounds and timeouts.

use std::time::Duration;

/// How the Redis stores name, bound and expire what they keep. By-value setters:
///
/// ```
/// use std::time::Duration;
/// use llm_context::redis::RedisOptions;
///
/// let options = RedisOptions::default()
///     .with_key_prefix("agents-prod")
///     .with_memo_ttl(Duration::from_secs(600))
///     .with_max_artifacts_per_session(64);
/// assert_eq!(options.key_prefix(), "agents-prod");
/// ```
#[derive(Clone, Debug)]
pub struct RedisOptions {
    key_prefix: String,
    memo_ttl: Duration,
    max_memo_bytes: usize,
    artifact_ttl: Duration,
    max_artifacts_per_session: usize,
    max_session_bytes: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    flight_lease: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            key_prefix: "llm-context".to_owned(),
            memo_ttl: Duration::from_secs(60 * 60),
            max_memo_bytes: 1024 * 1024,
            artifact_ttl: Duration::from_secs(24 * 60 * 60),
            // As many as the default `ContextPolicy::max_artifacts`.
            max_artifacts_per_session: 32,
            // Twice the default `ContextPolicy::max_artifact_bytes` (32 MiB of text).
            max_session_bytes: 64 * 1024 * 1024,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(1),
            flight_lease: Duration::from_secs(5),
        }
    }
}

impl RedisOptions {
    /// The first part of every key (default `llm-context`), so that several deployments
    /// can share one Redis.
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How long a memoized response is kept (default one hour).
    #[must_use]
    pub fn with_memo_ttl(mut self, ttl: Duration) -> Self {
        self.memo_ttl = ttl;
        self
    }

    /// The largest response memoized, as JSON bytes (default 1 MiB); larger ones are not
    /// stored.
    #[must_use]
    pub fn with_max_memo_bytes(mut self, bytes: usize) -> Self {
        self.max_memo_bytes = bytes;
        self
    }

    /// How long a session's artifacts are kept after the session's last use (default
    /// 24 hours). Every write or read of an artifact restarts the clock for the session.
    #[must_use]
    pub fn with_artifact_ttl(mut self, ttl: Duration) -> Self {
        self.artifact_ttl = ttl;
        self
    }

    /// The most artifacts kept per session besides those its latest request refers to
    /// (its live set, see [`ArtifactStore::commit`], kept even past this); the least
    /// recently used of the others go. Default 32, as many as the default
    /// `ContextPolicy::max_artifacts`, which bounds what one request refers to.
    ///
    /// [`ArtifactStore::commit`]: llm_context_layers::ArtifactStore::commit
    #[must_use]
    pub fn with_max_artifacts_per_session(mut self, n: usize) -> Self {
        self.max_artifacts_per_session = n;
        self
    }

    /// The most bytes of artifacts (as JSON) kept per session besides its live set; the
    /// least recently used of the others go. One artifact larger than this is refused.
    ///
    /// Default 64 MiB: twice the default `ContextPolicy::max_artifact_bytes` (32 MiB of
    /// text per request), so a whole live set fits with room for JSON escaping and for
    /// older artifacts the model may still read back. Keep it above the policy's bound:
    /// under it, an artifact the policy lets a request refer to may be refused as too
    /// large, and little room is left beside the live set.
    #[must_use]
    pub fn with_max_session_bytes(mut self, bytes: usize) -> Self {
        self.max_session_bytes = bytes;
        self
    }

    /// How long to wait for a connection (default 2 s).
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for an answer to one command (default 1 s).
    #[must_use]
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long the lock of a memoized call in flight holds without renewal (default
    /// 5 s): the longest that requests waiting in other processes wait for a process
    /// that died mid-call. Its holder renews it every third of this while the call runs,
    /// so a call may take any time.
    #[must_use]
    pub fn with_flight_lease(mut self, lease: Duration) -> Self {
        self.flight_lease = lease;
        self
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The memo TTL.
    pub fn memo_ttl(&self) -> Duration {
        self.memo_ttl
    }

    /// The largest response memoized, in bytes.
    pub fn max_memo_bytes(&self) -> usize {
        self.max_memo_bytes
    }

    /// The artifact TTL (per session, from its last use).
    pub fn artifact_ttl(&self) -> Duration {
        self.artifact_ttl
    }

    /// The most artifacts per session.
    pub fn max_artifacts_per_session(&self) -> usize {
        self.max_artifacts_per_session
    }

    /// The most artifact bytes per session.
    pub fn max_session_bytes(&self) -> usize {
        self.max_session_bytes
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The per-command timeout.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The lease of a memoized call in flight.
    pub fn flight_lease(&self) -> Duration {
        self.flight_lease
    }
}

/// Milliseconds for `PX` / `PEXPIRE`: at least 1, since Redis refuses 0.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
