//! The artifact format every step shares: where offloaded and cleared tool results are
//! kept, the ids and previews that point at them, the stubs clearing leaves, and the
//! `read_context_artifact` tool the model reads them back with.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::artifact::{
//!     artifact_id, Artifact, ArtifactLimits, ArtifactReader, ArtifactStore, LocalArtifactStore,
//! };
//! use llm_context_layers::Scope;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::StoreError> {
//! let store = Arc::new(LocalArtifactStore::new(ArtifactLimits::default()));
//! let acme = Scope::org("acme");
//! let log = "GET /api/orders 500\n".repeat(100);
//! let id = artifact_id(&acme, "ticket-42", &log); // content-addressed: same text, same id
//! store.put(&acme, "ticket-42", &id, Artifact::new(&log, 100_000)).await?;
//!
//! // What the model gets back when it calls read_context_artifact.
//! let reader = ArtifactReader::new(store);
//! let page = reader
//!     .read(&acme, "ticket-42", &json!({"artifact_id": id, "offset": 0, "max_chars": 20}))
//!     .await;
//! assert_eq!(page["text"], "GET /api/orders 500\n");
//! assert_eq!(page["next_offset"], 20);
//! // Another tenant asking for the same id reads nothing.
//! let other = reader.read(&Scope::org("other"), "ticket-42", &json!({"artifact_id": id})).await;
//! assert!(other.get("error").is_some());
//! # Ok(()) }
//! ```
//!
//! The formats, each written by one step and read by the others:
//!
//! | what | written by | looks like |
//! |---|---|---|
//! | artifact id | [`artifact_id`] | `art_` + 64 hex characters (BLAKE3), content-addressed per tenant and session |
//! | preview | [`offload`](crate::offload) | `{"context_artifact": id, "preview", "original_chars", …}` ([`is_preview`]) |
//! | stub | clearing ([`fit`](crate::fit)) | `{"context_cleared": true, "tool", "original_chars", "context_artifact"?, …}` ([`is_stub`]) |
//! | read tool | [`read_artifact_tool`] | `artifact_id`, `offset`, `max_chars` ≤ [`MAX_PAGE_CHARS`] → `text`, `next_offset`, `untrusted_content: true` |
//!
//! Every store method takes the tenant [`Scope`](crate::Scope) and the session: a store
//! never answers for another tenant or session, whatever id it is asked for. An unknown,
//! evicted or other tenant's id is an error *result* the model can read, never a failed run.

mod local;
mod preview;
mod previews;
mod reference;
mod store;
mod stub;
mod tool;
mod verify;

pub use local::{ArtifactLimits, LocalArtifactStore};
pub use preview::{
    ARTIFACT_ID_LEN, ARTIFACT_ID_PREFIX, OFFLOAD_INSTRUCTIONS, artifact_id, is_preview,
};
pub(crate) use preview::{preview_chars, preview_chars_unescaped, render_counted};
pub(crate) use previews::{
    ContentKey, Preview, PreviewCache, Remembered, SessionMemory, content_key,
};
pub(crate) use reference::{
    PREVIEW, REFERS, STUB, genuine_preview, mark, named_artifact, offloadable_marked,
    offloadable_text,
};
pub(crate) use store::Displaced;
pub use store::{Artifact, ArtifactStore};
pub use stub::is_stub;
pub(crate) use stub::{stub_text, unkept_stub_text};
pub use tool::{
    ArtifactReader, DEFAULT_PAGE_CHARS, MAX_PAGE_CHARS, READ_ARTIFACT_TOOL, read_artifact_tool,
};
pub(crate) use tool::{always_gets_read_tool, check_read_tool, read_artifact_tool_tokens};
pub(crate) use verify::{PREVIEW_START, Untrusted, has_claims, verify};
