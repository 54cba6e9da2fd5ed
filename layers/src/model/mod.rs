//! The plain data every step reads and writes: messages, requests and responses, the
//! preparation report, the tenant scope and the frozen prefix. Nothing here decides
//! anything; the types are re-exported at the crate root.

mod hashing;
mod message;
mod params;
mod prefix_context;
mod report;
mod request;
mod scope;
mod summary;
mod text;

pub use message::leading_system_end;
pub use message::{Content, ContentPart, Message, OpaqueTool, Reasoning, Role, ToolCall, ToolSpec};
pub use params::{GenerationParams, Origin, ToolChoice, WireFormat};
pub use prefix_context::PrefixContext;
pub use report::PreparationReport;
pub(crate) use request::infer_session;
pub use request::{
    CacheHints, CacheTtl, ChatRequest, ChatResponse, DEFAULT_SESSION, FinishReason,
    INFERRED_SESSION_PREFIX, MemoHint, Usage,
};
pub use scope::Scope;
pub use summary::{SUMMARY_MARKER, SUMMARY_NAME, SummaryBlock, is_summary_message};
pub use text::Text;
