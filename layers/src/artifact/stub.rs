//! The stub that replaces a cleared tool result.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::preview::is_artifact_id;

const STUB_INSTRUCTIONS: &str =
    "Older tool result cleared to fit the context window. Call the tool again if you need it.";
const STUB_INSTRUCTIONS_UNKEPT: &str = "Older tool result cleared: the session keeps only so \
many tool results for read_context_artifact, and this one is past it. Call the tool again if you need it.";
const STUB_INSTRUCTIONS_ARTIFACT: &str = "Older tool result cleared to fit the context window. \
Call read_context_artifact with this artifact_id to read it back.";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stub<'a> {
    context_cleared: bool,
    #[serde(skip_serializing_if = "Option::is_none", borrow)]
    tool: Option<Cow<'a, str>>,
    original_chars: usize,
    #[serde(skip_serializing_if = "Option::is_none", borrow)]
    context_artifact: Option<Cow<'a, str>>,
    #[serde(borrow)]
    instructions: Cow<'a, str>,
}

/// Whether `text` is exactly a stub the clearing step writes, byte for byte (a tool result
/// that merely starts like one is cleared like any other text).
pub fn is_stub(text: &str) -> bool {
    parse_stub(text).is_some()
}

/// The artifact a genuine stub names, if any: `Some(None)` for a stub naming none, `None`
/// when `text` is not exactly a stub the stack writes.
pub(crate) fn parse_stub(text: &str) -> Option<Option<String>> {
    if !text.starts_with("{\"context_cleared\":true") {
        return None;
    }
    let stub: Stub<'_> = serde_json::from_str(text).ok()?;
    let id = stub.context_artifact.as_deref();
    if !stub.context_cleared || id.is_some_and(|id| !is_artifact_id(id)) {
        return None;
    }
    // Byte for byte what the stack writes for these fields.
    let again = stub_text(stub.tool.as_deref(), stub.original_chars, id);
    let genuine = again == text
        || (id.is_none() && unkept_stub_text(stub.tool.as_deref(), stub.original_chars) == text);
    genuine.then(|| stub.context_artifact.map(Cow::into_owned))
}

/// The stub for a result whose artifact is not kept: the request's references are past
/// the session's bound ([`ContextPolicy::max_artifact_bytes`](crate::ContextPolicy::max_artifact_bytes)),
/// or the store could not keep it.
pub(crate) fn unkept_stub_text(tool: Option<&str>, original_chars: usize) -> String {
    render(tool, original_chars, None, STUB_INSTRUCTIONS_UNKEPT)
}

/// The stub for a result of `tool` that had `original_chars` characters.
pub(crate) fn stub_text(
    tool: Option<&str>,
    original_chars: usize,
    artifact: Option<&str>,
) -> String {
    let instructions = if artifact.is_some() {
        STUB_INSTRUCTIONS_ARTIFACT
    } else {
        STUB_INSTRUCTIONS
    };
    render(tool, original_chars, artifact, instructions)
}

fn render(
    tool: Option<&str>,
    original_chars: usize,
    artifact: Option<&str>,
    instructions: &str,
) -> String {
    let stub = Stub {
        context_cleared: true,
        tool: tool.map(Cow::Borrowed),
        original_chars,
        context_artifact: artifact.map(Cow::Borrowed),
        instructions: Cow::Borrowed(instructions),
    };
    serde_json::to_string(&stub).expect("stub serialises")
}
