//! What the proxy ([`serve`](crate::serve)) asks of a wire format: each format implements
//! [`Format`] in its own module, and one generic handler serves them all, so that a
//! format is one module and one route, no handler matches on which format it serves, and
//! the proxy depends on the formats, never the other way round.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::StatusCode;
use serde_json::Value;

use super::checks::Invalid;
use crate::stream::StreamEvent;
use crate::{BoxError, ChatRequest, ChatResponse};

/// A request read from a client's body.
pub(crate) struct Read {
    /// The request, in the neutral model.
    pub(crate) request: ChatRequest,
    /// Whether the client asked for a stream.
    pub(crate) stream: bool,
    /// Whether a stream should end with the usage (Chat Completions'
    /// `stream_options.include_usage`; formats that always send it say `true`).
    pub(crate) include_usage: bool,
}

/// One wire format as the proxy serves it: how a body is read, and how answers, stream
/// events and errors are written back.
pub(crate) trait Format: Send + Sync + 'static {
    /// The route it is served on.
    const ROUTE: &'static str;

    /// The writer of one stream's events.
    type Events: EventWriter;

    /// The request in a body, or what is wrong with it (answered 400, and nothing sent).
    /// A format whose client sends a caller's body back as written keeps `body` (a cheap
    /// clone) in the request.
    fn read(body: &Bytes) -> Result<Read, Invalid>;

    /// A whole answer.
    fn answer(response: &ChatResponse, model: &str) -> Value;

    /// A writer for one stream's events.
    fn events(model: String, read: &StreamOptions) -> Self::Events;

    /// The body of an error the server answers itself (401, 413, 503, …).
    fn error(status: StatusCode, message: &str) -> Value;

    /// The body of a 400 for a body that cannot be read; a format whose errors name the
    /// field apart from the message (OpenAI's `param`) overrides it.
    fn invalid(e: &Invalid) -> Value {
        Self::error(StatusCode::BAD_REQUEST, &e.to_string())
    }

    /// The body of a failure of the stack or the upstream, answered with `status`.
    fn failure(error: &BoxError, status: StatusCode) -> Value;
}

/// What a stream's writer needs to know of the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamOptions {
    /// See [`Read::include_usage`].
    pub(crate) include_usage: bool,
    /// The answer's `created` time, in seconds since the epoch.
    pub(crate) created: u64,
}

/// Writes one stream's events as server-sent event frames.
pub(crate) trait EventWriter: Send + 'static {
    /// The frames for one event (none, one or several).
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes>;

    /// The frame that ends a stream which failed after it began, answered as `status`
    /// would have been.
    fn failed(&mut self, error: &BoxError, status: StatusCode) -> Bytes;
}

/// The first error of type `T` in `e`'s chain of sources.
pub(crate) fn find<T: std::error::Error + 'static>(e: &BoxError) -> Option<&T> {
    crate::error::find_source(&**e)
}

/// Now, in seconds since the epoch (a completion's `created`).
pub(crate) fn created() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An id for an answer no provider named (the mock model, a memo entry without one):
/// `prefix` and 32 hex digits, unique in the process and unlikely across processes, so
/// that a client which groups content by message id never merges two answers.
pub(crate) fn made_up_id(prefix: &str) -> String {
    use std::hash::BuildHasher;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static KEYS: OnceLock<std::hash::RandomState> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let keys = KEYS.get_or_init(std::hash::RandomState::new);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}{:016x}{:016x}",
        keys.hash_one((n, 0u8)),
        keys.hash_one((n, 1u8))
    )
}
