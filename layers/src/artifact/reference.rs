//! Which messages refer to an artifact, and which may be offloaded into one.

use super::preview::is_preview;
use super::stub::{is_artifact_stub, is_stub};
use crate::model::Message;
use crate::policy::ContextPolicy;

/// The content is an offload preview.
pub(crate) const PREVIEW: u8 = 1;
/// The content is a clear stub.
pub(crate) const STUB: u8 = 2;
/// The content refers to an artifact (a preview, or a stub naming one).
pub(crate) const REFERS: u8 = 4;

/// Whether a message points at an artifact (a preview, or a stub naming one).
pub(crate) fn refers_to_artifact(m: &Message) -> bool {
    mark(m) & REFERS != 0
}

pub(crate) fn mark(m: &Message) -> u8 {
    if !m.is_tool_result() {
        return 0;
    }
    match m.content.as_str() {
        Some(t) if is_preview(t) => PREVIEW | REFERS,
        Some(t) if is_artifact_stub(t) => STUB | REFERS,
        Some(t) if is_stub(t) => STUB,
        _ => 0,
    }
}

/// The text of a tool result that offloading may replace: plain text that is not already
/// a preview or a stub.
pub(crate) fn offloadable_text<'a>(m: &'a Message, policy: &ContextPolicy) -> Option<&'a str> {
    if !m.is_tool_result() {
        return None;
    }
    let text = m.content.as_str()?;
    // A byte length at or under the limit is a char count at or under it: skip counting.
    if text.len() <= policy.tool_result_max_chars || is_preview(text) || is_stub(text) {
        return None;
    }
    Some(text)
}
