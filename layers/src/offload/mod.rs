//! Offloading large tool results into retrievable artifacts.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::artifact::{is_preview, READ_ARTIFACT_TOOL};
//! use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message, Scope, ToolCall};
//! use serde_json::{json, Value};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let log = "GET /api/orders 500\n".repeat(1_000); // 20,000 characters
//! let request = ChatRequest::new("mock", vec![
//!     Message::user("why is checkout failing?"),
//!     Message::assistant_tool_calls("", vec![ToolCall::new("c1", "read_log", json!({}))]),
//!     Message::tool_result("c1", "read_log", log.as_str()),
//! ])
//! .with_scope(Scope::org("acme"))
//! .with_session("ticket-42");
//!
//! let layer = ContextPolicyLayer::new(ContextPolicy::default()).unwrap();
//! let reader = layer.artifact_reader();
//! let model = MockModel::echo();
//! let reply = layer.layer(model.clone()).oneshot(request).await.unwrap();
//! assert_eq!(reply.report.offloaded_results, 1);
//!
//! // The model saw a 6,000-character preview and the tool to read the rest.
//! let sent = model.last_request().unwrap();
//! let preview: Value = serde_json::from_str(sent.messages[2].content.as_str().unwrap()).unwrap();
//! assert!(is_preview(sent.messages[2].content.as_str().unwrap()));
//! assert!(sent.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL));
//!
//! // When the model calls read_context_artifact, the agent loop answers with the reader.
//! let page = reader
//!     .read(&sent.scope, &sent.session, &json!({
//!         "artifact_id": preview["context_artifact"], "offset": 19_980, "max_chars": 100
//!     }))
//!     .await;
//! assert_eq!(page["text"], "GET /api/orders 500\n");
//! assert_eq!(page["next_offset"], Value::Null);
//! # }
//! ```
//!
//! A tool result longer than `tool_result_max_chars` (in characters) is replaced by a JSON
//! preview: `context_artifact` (the id), `preview` (its first `tool_result_max_chars`
//! characters, cut on a character boundary), `preview_truncated`, `original_chars`,
//! `stored_chars`, `artifact_truncated` and `instructions`. The full text, cut to
//! `artifact_max_chars`, goes to an [`ArtifactStore`](crate::artifact::ArtifactStore) under the
//! (tenant, session). Results at or under the threshold pass through byte for byte.
//!
//! Ids are content-addressed ([`artifact_id`](crate::artifact::artifact_id)): the same transcript sent again, as an agent
//! loop does every turn, gives the same bytes (the provider's prompt cache survives) and
//! stores one copy. The layer remembers what each session offloaded, so the
//! work of a request grows with what is new in it, not with the transcript: a result seen
//! before costs one hash of its text. The planner sizes every tool result as it will be
//! sent, so a result that offloading shrinks is never the reason a turn is pruned; it
//! reads a new result's text to size its preview only once the plan keeps it.
//!
//! Nothing sent points at nothing. Every artifact id a prepared request names (its
//! previews, and the stubs naming an artifact) goes to the store with the request's new
//! artifacts in one [`ArtifactStore::commit`](crate::artifact::ArtifactStore::commit), as
//! the session's live set, which the store's bounds never evict. An id the store no longer
//! holds is stored again from the request's text, or the result is sent as a stub that
//! says its artifact is not kept. What one request may name is bounded by
//! [`ContextPolicy::max_artifact_bytes`](crate::ContextPolicy::max_artifact_bytes): past
//! it, the composite clears the oldest such results with that stub instead.
//!
//! The model reads artifacts back with the `read_context_artifact` tool
//! ([`read_artifact_tool`](crate::artifact::read_artifact_tool)), which the stack adds to a request whenever something in it
//! refers to an artifact. An agent loop answers those calls with an [`ArtifactReader`](crate::artifact::ArtifactReader), or
//! lets the stack answer them itself
//! ([`ContextPolicyLayer::with_auto_resolve`](crate::ContextPolicyLayer::with_auto_resolve)).
//! An unknown, evicted or other tenant's id is an error *result* the model can read,
//! never a failed run. A store that is down is logged and the preview is sent anyway.

mod commit;
mod layer;
mod prepare;
mod rewrite;

pub(crate) use crate::artifact::{
    ContentKey, Preview, PreviewCache, Remembered, SessionMemory, content_key,
};
pub(crate) use commit::commit;
pub use layer::{Offload, OffloadLayer};
pub(crate) use prepare::{Prepared, offload_request};
