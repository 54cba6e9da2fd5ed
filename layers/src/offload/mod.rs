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

mod preview;

pub use preview::{
    ARTIFACT_ID_LEN, ARTIFACT_ID_PREFIX, OFFLOAD_INSTRUCTIONS, artifact_id, cut_chars, is_preview,
    preview_chars, render_preview,
};
