//! Offloading large tool results into retrievable artifacts.
//!
//! ```
//! use llm_context_layers::offload::{artifact_id, is_preview, render_preview};
//! use llm_context_layers::Scope;
//!
//! let big = "x".repeat(10_000);
//! let id = artifact_id(&Scope::org("acme"), "session-1", &big);
//! let preview = render_preview(&id, &big, 6_000, 1_000_000);
//! assert!(is_preview(&preview));
//! let json: serde_json::Value = serde_json::from_str(&preview).unwrap();
//! assert_eq!(json["original_chars"], 10_000);
//! assert_eq!(json["preview"].as_str().unwrap().len(), 6_000);
//! ```
//!
//! The planner sizes every tool result as it will be sent, so a result that offloading
//! shrinks is never the reason a turn is pruned.

mod future;
mod layer;
mod memory;
pub(crate) mod prepare;
mod preview;
mod rewrite;
mod tool;

pub use future::ResponseFuture;
pub use layer::{Offload, OffloadLayer};
pub use memory::{ArtifactLimits, InMemoryArtifactStore};
pub use preview::{
    ARTIFACT_ID_LEN, ARTIFACT_ID_PREFIX, OFFLOAD_INSTRUCTIONS, artifact_id, cut_chars, is_preview,
    preview_chars, preview_info, render_preview,
};
pub(crate) use rewrite::Displaced;
pub use tool::{
    ArtifactReader, DEFAULT_PAGE_CHARS, MAX_PAGE_CHARS, READ_ARTIFACT_TOOL, read_artifact_tool,
};
