//! Which messages refer to an artifact, and which may be offloaded into one.

use super::preview::{PreviewInfo, parse_preview};
use super::stub::parse_stub;
use super::verify::Untrusted;
use crate::model::Message;
use crate::policy::ContextPolicy;

/// The content is an offload preview.
pub(crate) const PREVIEW: u8 = 1;
/// The content is a clear stub.
pub(crate) const STUB: u8 = 2;
/// The content refers to an artifact (a preview, or a stub naming one).
pub(crate) const REFERS: u8 = 4;

/// The start of both the preview and the stub JSON.
const FORMATS_START: &str = "{\"context_";

/// What a tool result's content is to the stack: a preview, a stub, a reference to an
/// artifact, or (0) plain text. Only the stack's own formats, exactly as it writes them,
/// count: tool output that imitates them is plain text.
pub(crate) fn mark(m: &Message, policy: &ContextPolicy, untrusted: &Untrusted) -> u8 {
    if !m.is_tool_result() {
        return 0;
    }
    let Some(text) = m.content.as_str() else {
        return 0;
    };
    // What both formats open with: most results are neither, and are told by this alone.
    if !text.starts_with(FORMATS_START) {
        return 0;
    }
    if genuine_preview(text, policy, untrusted).is_some() {
        return PREVIEW | REFERS;
    }
    match parse_stub(text) {
        Some(Some(_)) if !untrusted.contains(text) => STUB | REFERS,
        // A stub naming no artifact this session holds is still a small stub: leave it.
        Some(_) => STUB,
        None => 0,
    }
}

/// The preview `text` is, when it is one this policy could have written: exactly the
/// stack's format, and no longer than the policy's previews (a crafted "preview" holding
/// 100,000 characters is text to offload, not a preview to keep).
pub(crate) fn genuine_preview<'a>(
    text: &'a str,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
) -> Option<PreviewInfo<'a>> {
    parse_preview(text)
        .filter(|p| p.preview_chars <= policy.tool_result_max_chars && !untrusted.contains(text))
}

/// The text of a tool result that offloading may replace: longer than the threshold,
/// and plain text rather than a preview or a stub.
pub(crate) fn offloadable_text<'a>(
    m: &'a Message,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
) -> Option<&'a str> {
    // The length first: only a long result is worth parsing as a preview or a stub.
    let text = long_tool_text(m, policy)?;
    plain(mark(m, policy, untrusted)).then_some(text)
}

/// [`offloadable_text`] for a message whose [`mark`] is known already (the planner reads
/// every content once).
pub(crate) fn offloadable_marked<'a>(
    m: &'a Message,
    policy: &ContextPolicy,
    mark: u8,
) -> Option<&'a str> {
    long_tool_text(m, policy).filter(|_| plain(mark))
}

fn plain(mark: u8) -> bool {
    mark & (PREVIEW | STUB) == 0
}

fn long_tool_text<'a>(m: &'a Message, policy: &ContextPolicy) -> Option<&'a str> {
    // A page of an artifact is what the model asked to read: offloading it again would
    // answer the read with another preview, and the model would read on until its rounds
    // ran out. It is as long as the offload threshold by default, and its JSON longer.
    if !m.is_tool_result() || m.name() == Some(super::READ_ARTIFACT_TOOL) {
        return None;
    }
    let text = m.content.as_str()?;
    // A byte length at or under the limit is a char count at or under it: skip counting.
    (text.len() > policy.tool_result_max_chars).then_some(text)
}

/// The artifact a tool result marked `mark` names as received, with the characters of the
/// result it stands for (0 for a stub, whose count is not needed). `None` unless the mark
/// says it refers to one.
pub(crate) fn named_artifact(
    m: &Message,
    mark: u8,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
) -> Option<(String, usize)> {
    if mark & REFERS == 0 {
        return None;
    }
    let text = m.content.as_str()?;
    if mark & PREVIEW != 0 {
        genuine_preview(text, policy, untrusted).map(|p| (p.id.into_owned(), p.original_chars))
    } else {
        parse_stub(text).flatten().map(|id| (id, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::preview::render_counted;
    use crate::artifact::stub::{stub_text, unkept_stub_text};

    #[test]
    fn every_format_the_stack_writes_opens_as_the_mark_expects() {
        let id = "art_0123456789abcdef0123456789abcdef";
        let written = [
            render_counted(id, "some long text", 14, 4, 100),
            stub_text(Some("tool"), 14, Some(id)),
            stub_text(None, 14, None),
            unkept_stub_text(Some("tool"), 14),
        ];
        for text in written {
            assert!(text.starts_with(FORMATS_START), "{text}");
        }
        // And what opens otherwise is plain text, told without parsing.
        let m = Message::tool_result("c", "t", "{\"context\":1}");
        assert_eq!(
            mark(&m, &ContextPolicy::default(), &Untrusted::default()),
            0
        );
    }
}
