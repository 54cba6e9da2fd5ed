//! What the proxy ([`serve`](crate::serve)) asks of a wire format: each format implements
//! [`Format`] in its own module, and one generic handler serves them all, so that a
//! format is one module and one route, no handler matches on which format it serves, and
//! the proxy depends on the formats, never the other way round.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::checks::Invalid;
use crate::stream::{StreamEvent, WireEvent};
use crate::{BoxError, ChatRequest, ChatResponse, WireFormat};

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

/// What was read of earlier requests, for the formats read by what is new in them: the
/// Messages reader's wire messages and the Responses reader's items, each in a cache of
/// its own, of two generations each weighing at most `budget` (the entries' bytes and an
/// estimate of their structures).
#[derive(Debug)]
pub(crate) struct Reuses {
    pub(crate) messages: super::messages::reuse::Reuse,
    pub(crate) responses: super::messages::reuse::Reuse<super::responses::read::Piece>,
}

impl Reuses {
    /// Caches of `budget` bytes a generation, each.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            messages: super::messages::reuse::Reuse::new(budget),
            responses: super::messages::reuse::Reuse::new(budget),
        }
    }
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

    /// [`read`](Self::read) for `tenant` (its label), taking what was read of the
    /// requests before from `reuse` where the format can (a session's next request
    /// repeats them); the same result.
    fn read_reusing(body: &Bytes, _reuse: &Reuses, _tenant: &str) -> Result<Read, Invalid> {
        Self::read(body)
    }

    /// A whole answer to a request for `model` that declared `tools`.
    fn answer(response: &ChatResponse, model: &str, tools: &Namespaced) -> Value;

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

    /// Why a request read from this format is not managed, when it is not: its history
    /// is not all in the body (a chained request). It is then sent as it came, through
    /// the stack's `off` executor (counted, metered, budgeted, never from the memo), and
    /// the answer says why in `x-llm-context-managed`; a count of it is passed on.
    /// `None` (the default): the stack manages it.
    fn unmanaged(_read: &Read) -> Option<&'static str> {
        None
    }
}

/// What a stream's writer needs to know of the request.
#[derive(Clone, Debug)]
pub(crate) struct StreamOptions {
    /// See [`Read::include_usage`].
    pub(crate) include_usage: bool,
    /// The answer's `created` time, in seconds since the epoch.
    pub(crate) created: u64,
    /// The request's namespaced tools.
    pub(crate) tools: Namespaced,
}

/// The Responses API's namespaced tools a request declared, by the name each was sent
/// under: its namespace and its own name (see [`namespaces`](super::namespaces)), so
/// that an answer's calls are written back as the caller declared them.
pub(crate) type Namespaced = std::collections::HashMap<String, (String, String)>;

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

/// A stream relayed as the upstream sent it, when it came in the caller's format (see
/// [`StreamEvent::Wire`]): each event written as it came, and the neutral events beside
/// them written by nobody. The stream's closing part is held until `Done`, to add the
/// usage of the rounds answered inside, or to be replaced by an error event when the
/// answer fails a check. A stream without the provider's events (a memo entry replayed,
/// the mock model, another format's upstream) is written from its neutral events.
pub(crate) struct Relay {
    format: WireFormat,
    /// Whether the stream is relayed: decided by its first event.
    relayed: Option<bool>,
    tail: Vec<WireEvent>,
}

impl Relay {
    /// A relay of streams in `format`.
    pub(crate) fn new(format: WireFormat) -> Self {
        Self {
            format,
            relayed: None,
            tail: Vec::new(),
        }
    }

    /// The frames for `event` when the stream is relayed; `None` when the writer writes
    /// it. At `Done`, when the answer covers rounds answered inside or `always`, each held
    /// event whose data is JSON is given to `amend` with the answer, which edits it and
    /// says whether to write it at all.
    pub(crate) fn event(
        &mut self,
        event: &StreamEvent,
        always: bool,
        amend: impl Fn(&mut Value, &ChatResponse) -> bool,
    ) -> Option<Vec<Bytes>> {
        let relayed = *self.relayed.get_or_insert_with(
            || matches!(event, StreamEvent::Wire(e) if e.format == self.format),
        );
        if !relayed {
            return None;
        }
        Some(match event {
            StreamEvent::Wire(e) if e.format != self.format => Vec::new(),
            StreamEvent::Wire(e) if e.closing => {
                self.tail.push(e.clone());
                Vec::new()
            }
            StreamEvent::Wire(e) => vec![Bytes::from(e.frame())],
            StreamEvent::Done(r) => {
                let look = always || hidden_rounds(r);
                std::mem::take(&mut self.tail)
                    .into_iter()
                    .filter_map(|mut e| {
                        if look && let Ok(mut data) = serde_json::from_str::<Value>(&e.data) {
                            if !amend(&mut data, r) {
                                return None;
                            }
                            e.data = data.to_string();
                        }
                        Some(Bytes::from(e.frame()))
                    })
                    .collect()
            }
            // What the provider's events said already.
            _ => Vec::new(),
        })
    }
}

/// Whether `r` answers after rounds the proxy answered inside (artifact reads), whose
/// usage its figures include.
pub(crate) fn hidden_rounds(r: &ChatResponse) -> bool {
    !r.report.resolved_messages.is_empty()
}

/// `raw`'s usage with the figures of `summed` written over it, nested objects merged
/// (a provider's breakdowns this proxy does not know are kept).
pub(crate) fn amend_usage(raw: &mut Value, summed: &Value) {
    let (Some(raw), Some(summed)) = (raw.as_object_mut(), summed.as_object()) else {
        return;
    };
    for (k, v) in summed {
        match (raw.get_mut(k), v) {
            (Some(old @ Value::Object(_)), Value::Object(_)) => amend_usage(old, v),
            _ => {
                raw.insert(k.clone(), v.clone());
            }
        }
    }
}

/// A provider's whole answer, typed and as it came: read by a client built for a proxy,
/// which answers a caller of the provider's own format with it (see
/// [`ChatResponse::origin`](llm_context_layers::ChatResponse::origin)).
#[derive(Clone, Debug)]
pub(crate) struct Answered<T> {
    pub(crate) typed: T,
    pub(crate) raw: Value,
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Answered<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        let typed = T::deserialize(&raw).map_err(serde::de::Error::custom)?;
        Ok(Self { typed, raw })
    }
}

/// A provider's answer as it came, in `format`, kept in a response's `origin`.
pub(crate) struct AsGiven {
    pub(crate) format: WireFormat,
    pub(crate) body: Value,
}

impl AsGiven {
    /// The neutral response of `typed`, keeping `raw` as it came.
    pub(crate) fn keep(format: WireFormat, response: ChatResponse, raw: Value) -> ChatResponse {
        response.with_origin(llm_context_layers::Origin::new(Self { format, body: raw }))
    }

    /// `r`'s answer as its provider gave it in `format`, if it came so, with the usage of
    /// the rounds answered inside (`usage`, the figures written in `format`) added: the
    /// client is billed for every round.
    pub(crate) fn of(r: &ChatResponse, format: WireFormat, usage: &Value) -> Option<Value> {
        let given = r.origin.as_ref()?.get::<Self>()?;
        if given.format != format || !given.body.is_object() {
            return None;
        }
        let mut out = given.body.clone();
        if hidden_rounds(r) {
            amend_usage(&mut out["usage"], usage);
        }
        Some(out)
    }
}

/// A request body as the client compressed it, kept in the request's `origin` beside
/// what its reader kept: when the body the stack sends is the client's decoded bytes
/// unchanged, the client's compressed bytes are sent instead, with their
/// `content-encoding` (a body the stack edited goes uncompressed).
#[derive(Debug)]
pub(crate) struct Encoded {
    /// The body decoded: what the stack's body is compared with.
    pub(crate) decoded: bytes::Bytes,
    /// The body as it came.
    pub(crate) encoded: bytes::Bytes,
    /// Its `content-encoding`, as the client sent it.
    pub(crate) coding: http::HeaderValue,
}

impl Encoded {
    /// The bytes to send for `body` (a request's body as the stack wrote it) and their
    /// encoding: the client's compressed bytes when `body` is what they decode to.
    pub(crate) fn choose(
        origin: Option<&llm_context_layers::Origin>,
        body: crate::transport::RequestBody,
    ) -> (crate::transport::RequestBody, Option<http::HeaderValue>) {
        match origin.and_then(|o| o.get::<Self>()) {
            Some(e) if body.eq_bytes(&e.decoded) => {
                (e.encoded.clone().into(), Some(e.coding.clone()))
            }
            _ => (body, None),
        }
    }
}
