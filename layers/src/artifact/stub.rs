//! The stub that replaces a cleared tool result.

use serde::Serialize;

const STUB_INSTRUCTIONS: &str =
    "Older tool result cleared to fit the context window. Call the tool again if you need it.";
const STUB_INSTRUCTIONS_ARTIFACT: &str = "Older tool result cleared to fit the context window. \
Call read_context_artifact with this artifact_id to read it back.";

#[derive(Serialize)]
struct Stub<'a> {
    context_cleared: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    original_chars: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    context_artifact: Option<&'a str>,
    instructions: &'static str,
}

/// Whether `text` is a stub written by this layer.
pub fn is_stub(text: &str) -> bool {
    text.starts_with("{\"context_cleared\":true")
}

/// The stub for a result of `tool` that had `original_chars` characters.
pub(crate) fn stub_text(
    tool: Option<&str>,
    original_chars: usize,
    artifact: Option<&str>,
) -> String {
    let stub = Stub {
        context_cleared: true,
        tool,
        original_chars,
        context_artifact: artifact,
        instructions: if artifact.is_some() {
            STUB_INSTRUCTIONS_ARTIFACT
        } else {
            STUB_INSTRUCTIONS
        },
    };
    serde_json::to_string(&stub).expect("stub serialises")
}

/// Whether `text` is a clear stub that names an artifact.
pub(crate) fn is_artifact_stub(text: &str) -> bool {
    is_stub(text) && text.contains("\"context_artifact\":")
}
