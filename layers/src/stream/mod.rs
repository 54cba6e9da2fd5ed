//! Streaming through the same stack.
//!
//! ```
//! use futures_util::StreamExt;
//! use llm_context_layers::mock::{MockModel, MockReply};
//! use llm_context_layers::stream::{StreamEvent, Streaming};
//! use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let model = ServiceBuilder::new()
//!     .layer(ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(8_000)).unwrap())
//!     .service(MockModel::scripted([MockReply::text("The certificate expires on 2026-08-01.")]));
//!
//! let req = ChatRequest::new("mock", vec![Message::user("When does the cert expire?")]);
//! let mut stream = model.oneshot(Streaming(req)).await.unwrap();
//! let mut text = String::new();
//! while let Some(event) = stream.next().await {
//!     match event.unwrap() {
//!         StreamEvent::Text(delta) => text.push_str(&delta),
//!         StreamEvent::Done(response) => {
//!             assert_eq!(response.message.text(), text);
//!             assert!(!response.report.memo_hit);
//!         }
//!         _ => {}
//!     }
//! }
//! # }
//! ```
//!
//! **The tower shape.** A streamed call is a second *request type*, not a second stack:
//! every service here implements both `Service<ChatRequest>` (answered with a
//! [`ChatResponse`](crate::ChatResponse)) and `Service<Streaming<ChatRequest>>`
//! (answered with a [`ChatStream`]). The non-streamed API is unchanged, one stack built
//! once serves both, and a layer of your own that only knows `ChatRequest` still
//! composes for non-streamed calls. A flag on the request with a body type would have
//! made every non-streamed caller handle a stream; a response enum would have made every
//! caller match on something they asked not to get.
//!
//! **What happens before dispatch is the same**: prune, clear, offload, prefix, memo
//! lookup; a request that cannot fit fails with
//! [`ContextLimitError`](crate::ContextLimitError) before anything is sent, as the
//! future's error. The future resolves once the provider has begun to answer; its
//! events then arrive as the model writes them.
//!
//! **The stream** yields [`StreamEvent`]s (text, reasoning and tool-call deltas, usage)
//! and ends with [`StreamEvent::Done`]: the complete response (message, usage, finish
//! reason, report), assembled by one [`Accumulator`]. An `Err` item ends it.
//!
//! **Across the stack**: the memo stores a stream only once it has completed, and
//! replays a hit as a stream (the same deltas and the same final response, with
//! `memo_hit` set); identical requests in flight share one upstream call, waiters
//! receiving the answer as a replay once the first completes. A stream dropped by the
//! caller cancels the upstream request and stores nothing. With auto-resolve, text and
//! reasoning stream through as they arrive, the round's tool calls are held back until
//! the round ends, and a round that only reads artifacts is answered inside the stack
//! while the next round streams on, in the same stream.

mod accumulate;
mod chat_stream;
mod error;
mod event;

pub use accumulate::Accumulator;
pub(crate) use chat_stream::on_end;
pub use chat_stream::{ChatStream, StreamFuture, Streaming};
pub use error::StreamError;
pub use event::{ReasoningDelta, StreamEvent, ToolCallDelta, WireEvent};
