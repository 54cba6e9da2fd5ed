//! What both clients' streamed calls share: sending the request, reading an error
//! status, framing server-sent events (with `eventsource-stream`), and turning a
//! provider's events into a [`ChatStream`] that has already produced its first event.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::BytesMut;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use llm_context_layers::stream::Streaming;
use llm_context_layers::stream::{Accumulator, ChatStream, StreamError, StreamEvent, WireEvent};
use llm_context_layers::{ChatRequest, FinishReason, WireFormat};
use serde_json::Value;
use tower::Service;

use crate::catalog::Provider;
use crate::client::{Reading, log_request, transport_error};
use crate::error::{ProviderError, ProviderErrorKind};
use crate::redact::TEXT_LIMIT;
use crate::transport::{HttpRequest, HttpStreamResponse, TransportError};

/// The future of a client's streamed call: the stream, once its first event is read.
pub type StreamFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<ChatStream, ProviderError>> + Send>>;

/// A provider's reading of its stream events: it only translates. [`open`] feeds what
/// it pushes through the one [`Accumulator`] and builds the final `Done`.
pub(crate) trait Decoder: Send + 'static {
    /// Reads one server-sent event, pushing the neutral events it means onto `out`.
    /// Returns how the answer ended once it is complete.
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
        reading: &Reading,
    ) -> Result<Option<Ending>, ProviderError>;
}

/// What a provider says at the end of an answer, beyond its deltas.
pub(crate) struct Ending {
    /// Its finish reason (`None`: the one its tool calls imply).
    pub(crate) finish: Option<FinishReason>,
    /// Its top-level fields, for [`ChatResponse::provider_fields`](llm_context_layers::ChatResponse::provider_fields).
    pub(crate) fields: BTreeMap<String, Value>,
    /// The whole message, when the provider's last event gives it (the Responses API's
    /// `response.completed`): it then stands for what the deltas add up to, with what
    /// they cannot carry (reasoning items, kept whole).
    pub(crate) message: Option<Box<llm_context_layers::Message>>,
}

/// Awaits the response to a streamed request and reads its events with `decoder`. The
/// future resolves once the first neutral event has been read, so that everything that
/// fails before the caller has seen anything (an error status, a connection cut before
/// the first event) is the future's error, which a retry layer may retry. After that,
/// an error is an item of the stream and ends it; a cut is
/// [`ProviderErrorKind::StreamInterrupted`].
async fn open<D, C>(
    provider: Provider,
    relay: Option<WireFormat>,
    sent: impl Future<Output = Result<HttpStreamResponse, TransportError>>,
    client: Arc<C>,
    decoder: D,
) -> Result<ChatStream, ProviderError>
where
    D: Decoder,
    C: AsRef<Reading> + Send + Sync + 'static,
{
    let reading = (*client).as_ref();
    let resp = sent
        .await
        .map_err(|e| transport_error(provider, e, &reading.redactor))?;
    if !resp.status().is_success() {
        return Err(error_status(provider, resp, reading).await);
    }
    let mut state = State {
        provider,
        relay,
        closing: false,
        client,
        events: Box::pin(resp.into_body().eventsource()),
        decoder,
        acc: Accumulator::new(),
        queue: VecDeque::new(),
        delivered: false,
        ended: false,
    };
    // The first event, before the caller sees anything (`next` yields an error rather
    // than end before the answer is complete).
    if let Some(first) = state.next().await {
        state.queue.push_front(first?);
    }
    state.delivered = true;
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let item = s.next().await?;
        Some((item.map_err(Into::into), s))
    });
    Ok(ChatStream::new(stream))
}

/// A client's streamed call: `http` (the request built, or why it could not be) sent
/// through `transport` and read with `decoder`, as [`open`] does.
pub(crate) fn call<T, D, C>(
    (provider, format): (Provider, WireFormat),
    transport: &mut T,
    req: &ChatRequest,
    http: Result<HttpRequest, ProviderError>,
    client: Arc<C>,
    decoder: D,
) -> StreamFuture
where
    T: Service<Streaming<HttpRequest>, Response = HttpStreamResponse, Error = TransportError>,
    T::Future: Send + 'static,
    D: Decoder,
    C: AsRef<Reading> + Send + Sync + 'static,
{
    let http = match http {
        Ok(h) => h,
        Err(e) => return Box::pin(std::future::ready(Err(e))),
    };
    log_request(provider, req, true);
    // A proxy relaying a caller of this format gets the stream's own events too.
    let relay =
        (req.params.origin.is_some() && req.params.extra_format == Some(format)).then_some(format);
    let sent = transport.call(Streaming(http));
    Box::pin(open(provider, relay, sent, client, decoder))
}

type Events =
    std::pin::Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<TransportError>>> + Send>>;

struct State<D, C> {
    provider: Provider,
    /// The format whose events are passed on as they came ([`StreamEvent::Wire`]), ahead
    /// of the neutral events each decodes to.
    relay: Option<WireFormat>,
    /// Whether the relayed events have reached the stream's closing part.
    closing: bool,
    client: Arc<C>,
    events: Events,
    decoder: D,
    acc: Accumulator,
    queue: VecDeque<StreamEvent>,
    /// Whether the caller has been given an event (a cut is then no longer retryable).
    delivered: bool,
    ended: bool,
}

impl<D: Decoder, C: AsRef<Reading>> State<D, C> {
    async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(Ok(event));
            }
            if self.ended {
                return None;
            }
            let failure = match self.events.next().await {
                Some(Ok(event)) => match self.decoded(&event) {
                    Ok(()) => continue,
                    Err(e) => e,
                },
                Some(Err(EventStreamError::Transport(e))) => {
                    let mut e = transport_error(self.provider, e, &self.reading().redactor);
                    // Once the caller holds part of the answer, nothing can be retried.
                    if self.delivered && e.is_retryable() {
                        e.kind = ProviderErrorKind::StreamInterrupted;
                    }
                    e
                }
                Some(Err(e)) => ProviderError::new(
                    self.provider,
                    ProviderErrorKind::InvalidResponse,
                    self.reading()
                        .redactor
                        .text(&format!("the event stream is malformed: {e}"), TEXT_LIMIT),
                ),
                None => ProviderError::new(
                    self.provider,
                    if self.delivered {
                        ProviderErrorKind::StreamInterrupted
                    } else {
                        ProviderErrorKind::Connection
                    },
                    "the event stream ended before the answer was complete",
                ),
            };
            self.ended = true;
            self.queue.clear();
            return Some(Err(failure));
        }
    }

    fn reading(&self) -> &Reading {
        (*self.client).as_ref()
    }

    /// Decodes one event into the (empty) queue, adds what it pushed to the answer, and
    /// pushes `Done` when the answer is complete.
    fn decoded(&mut self, event: &Event) -> Result<(), ProviderError> {
        let ending = self
            .decoder
            .decode(event, &mut self.queue, (*self.client).as_ref())?;
        let invalid = |e: StreamError| {
            ProviderError::new(
                self.provider,
                ProviderErrorKind::InvalidResponse,
                e.to_string(),
            )
        };
        for e in &self.queue {
            self.acc.push(e).map_err(invalid)?;
        }
        if let Some(format) = self.relay {
            // The closing part begins at the event that gives the usage and nothing else,
            // or at the last one.
            let usage_only = !self.queue.is_empty()
                && self
                    .queue
                    .iter()
                    .all(|e| matches!(e, StreamEvent::Usage(_)));
            self.closing |= usage_only || ending.is_some();
            let raw = WireEvent::new(format, event.event.clone(), event.data.clone())
                .closing(self.closing);
            self.queue.push_front(StreamEvent::Wire(raw));
        }
        if let Some(ending) = ending {
            let mut response = std::mem::take(&mut self.acc)
                .finish(ending.finish)
                .map_err(invalid)?
                .with_provider_fields(ending.fields);
            if let Some(message) = ending.message {
                response.message = *message;
            }
            // A provider's compaction goes back with the message, first.
            llm_context_layers::executor::compaction::keep_in_message(&mut response);
            self.queue.push_back(StreamEvent::Done(Box::new(response)));
            self.ended = true;
        }
        Ok(())
    }
}

/// The provider's error for a non-success status: its body read (up to the limit)
/// and turned into a [`ProviderError`] as for a non-streamed call.
async fn error_status(
    provider: Provider,
    resp: HttpStreamResponse,
    reading: &Reading,
) -> ProviderError {
    let (parts, mut body) = resp.into_parts();
    let mut bytes = BytesMut::new();
    while let Some(piece) = body.next().await {
        match piece {
            Ok(piece) if bytes.len() + piece.len() <= reading.max_response_bytes => {
                bytes.extend_from_slice(&piece);
            }
            // What arrived is enough to say what went wrong.
            _ => break,
        }
    }
    ProviderError::from_response(
        provider,
        parts.status.as_u16(),
        &parts.headers,
        &bytes,
        &reading.redactor,
    )
}

/// An error event inside a stream (`{"error": {...}}` or Anthropic's `{"type":
/// "error", "error": {...}}`): the provider's error, its kind read from its type.
pub(crate) fn error_event(provider: Provider, data: &str, reading: &Reading) -> ProviderError {
    let value: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    let error = &value["error"];
    let kind = match error["type"].as_str().or(error["code"].as_str()) {
        Some("overloaded_error") => ProviderErrorKind::Overloaded,
        Some("rate_limit_error" | "rate_limit_exceeded") => ProviderErrorKind::RateLimited,
        Some("api_error" | "server_error") => ProviderErrorKind::Server,
        Some("invalid_request_error") => ProviderErrorKind::InvalidRequest,
        _ => ProviderErrorKind::Other,
    };
    let message = error["message"]
        .as_str()
        .unwrap_or("the provider sent an error event");
    ProviderError::new(provider, kind, reading.redactor.text(message, TEXT_LIMIT))
        .with_raw_body(crate::error::raw_body(data.as_bytes(), &reading.redactor))
}

/// A stream event whose data is not the JSON expected.
pub(crate) fn bad_event(
    provider: Provider,
    e: &serde_json::Error,
    reading: &Reading,
) -> ProviderError {
    ProviderError::new(
        provider,
        ProviderErrorKind::InvalidResponse,
        reading.redactor.text(
            &format!("a stream event is not the expected JSON: {e}"),
            TEXT_LIMIT,
        ),
    )
}
