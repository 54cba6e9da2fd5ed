//! The `read_context_artifact` tool: its definition and the handler an agent loop calls.

use std::sync::Arc;

use serde_json::{Value, json};

use super::store::ArtifactStore;
use crate::error::ToolConflictError;
use crate::model::Scope;
use crate::model::{ChatRequest, Message, ToolCall, ToolSpec};
use crate::tokens::{char_count, truncate_chars};

/// The tool's name.
pub const READ_ARTIFACT_TOOL: &str = "read_context_artifact";
/// The largest page a call may ask for, in characters.
pub const MAX_PAGE_CHARS: u64 = 20_000;
/// The page size when a call names none.
pub const DEFAULT_PAGE_CHARS: u64 = 6_000;

/// The tool's definition, added to a request's tools when it refers to artifacts.
pub fn read_artifact_tool() -> ToolSpec {
    read_artifact_tool_ref().clone()
}

/// The definition, built once: every request through the composite compares against it.
pub(crate) fn read_artifact_tool_ref() -> &'static ToolSpec {
    static TOOL: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
    TOOL.get_or_init(build_read_artifact_tool)
}

/// The definition's estimated tokens, measured once.
pub(crate) fn read_artifact_tool_tokens() -> usize {
    static TOKENS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *TOKENS.get_or_init(|| {
        crate::tokens::estimate_tool_tokens(std::slice::from_ref(read_artifact_tool_ref()))
    })
}

fn build_read_artifact_tool() -> ToolSpec {
    ToolSpec::new(
        READ_ARTIFACT_TOOL,
        // Every request that refers to an artifact carries this: keep it short.
        "Read a page (offsets in characters) of a tool result stored as a context_artifact.",
        json!({
            "type": "object",
            "properties": {
                "artifact_id": {"type": "string"},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "max_chars": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_CHARS,
                              "default": DEFAULT_PAGE_CHARS}
            },
            "required": ["artifact_id"],
            "additionalProperties": false
        }),
    )
}

/// Whether the stack gives `req` the read tool whatever it refers to: when it declares
/// tools of its own (an agent's request), so the tools of a session, first in a provider's
/// cache order, never change because of the stack. Other requests get it only when they
/// refer to an artifact. The planner counts the tool by this rule and offloading adds it.
pub(crate) fn always_gets_read_tool(req: &ChatRequest) -> bool {
    !req.tools.is_empty()
}

/// Fails when the request defines a different tool under the read tool's name; tells
/// whether it already has the stack's own definition.
pub(crate) fn check_read_tool(req: &ChatRequest) -> Result<bool, ToolConflictError> {
    match req.tools.iter().find(|t| t.name == READ_ARTIFACT_TOOL) {
        None => Ok(false),
        Some(t) if t == read_artifact_tool_ref() => Ok(true),
        Some(_) => Err(ToolConflictError {
            name: READ_ARTIFACT_TOOL.to_owned(),
        }),
    }
}

/// Answers `read_context_artifact` calls from a store, for one tenant and session.
///
/// ```
/// use std::sync::Arc;
/// use llm_context_layers::artifact::{ArtifactReader, LocalArtifactStore};
/// use llm_context_layers::{Artifact, ArtifactStore, Scope};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = Arc::new(LocalArtifactStore::default());
/// let scope = Scope::org("acme");
/// store.put(&scope, "s1", "art_1", Artifact::new("0123456789", 100)).await.unwrap();
/// let reader = ArtifactReader::new(store);
/// let page = reader.read(&scope, "s1", &json!({"artifact_id": "art_1", "offset": 4, "max_chars": 3})).await;
/// assert_eq!(page, json!({"text": "456", "next_offset": 7, "untrusted_content": true}));
/// // Mistakes come back as results the model can read, never as a failed run.
/// let err = reader.read(&Scope::org("other"), "s1", &json!({"artifact_id": "art_1"})).await;
/// assert_eq!(err["error"], "unknown_artifact");
/// # }
/// ```
#[derive(Clone)]
pub struct ArtifactReader {
    store: Arc<dyn ArtifactStore>,
}

impl std::fmt::Debug for ArtifactReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactReader").finish_non_exhaustive()
    }
}

fn error(kind: &str, message: impl Into<String>) -> Value {
    json!({"error": kind, "message": message.into()})
}

struct Args {
    id: String,
    offset: u64,
    max_chars: u64,
}

/// The longest id read: the ids the stack gives are `art_` and 64 hex digits; a longer one
/// is an unknown artifact without a store lookup.
const MAX_ID_BYTES: usize = 128;

fn parse_args(arguments: &Value) -> Result<Args, Value> {
    // Arguments kept as raw text (a model's broken JSON) get one more chance here.
    let parsed;
    let arguments = match arguments {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                error(
                    "invalid_arguments",
                    format!("arguments are not a JSON object: {e}"),
                )
            })?;
            &parsed
        }
        other => other,
    };
    let obj = arguments
        .as_object()
        .ok_or_else(|| error("invalid_arguments", "arguments must be a JSON object"))?;
    let id = match obj.get("artifact_id") {
        Some(Value::String(s)) if s.len() > MAX_ID_BYTES => {
            // No store gives such an id: not looked up, and not echoed back (a model's
            // 100 KB id would otherwise go upstream again in the result).
            return Err(error(
                "unknown_artifact",
                format!(
                    "no artifact has an id of {} bytes (ids are at most {MAX_ID_BYTES}): call \
                     the original tool again if you need the data",
                    s.len()
                ),
            ));
        }
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err(error(
                "invalid_arguments",
                "artifact_id must be a non-empty string",
            ));
        }
    };
    let int = |key: &str, default: u64, min: u64, max: u64| -> Result<u64, Value> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v.as_u64() {
                Some(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(error(
                    "invalid_arguments",
                    format!("{key} must be an integer from {min} to {max}, got {v}"),
                )),
            },
        }
    };
    Ok(Args {
        id,
        offset: int("offset", 0, 0, u64::MAX)?,
        max_chars: int("max_chars", DEFAULT_PAGE_CHARS, 1, MAX_PAGE_CHARS)?,
    })
}

impl ArtifactReader {
    /// A reader over `store`.
    pub fn new(store: Arc<dyn ArtifactStore>) -> Self {
        Self { store }
    }

    /// The result of one call: `{"text", "next_offset", "untrusted_content": true}`, with
    /// `next_offset` null at the end; or `{"error", "message"}` for an unknown, evicted or
    /// other tenant's id, bad arguments, an offset past the end, or a store failure.
    pub async fn read(&self, scope: &Scope, session: &str, arguments: &Value) -> Value {
        let args = match parse_args(arguments) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let artifact = match self.store.get(scope, session, &args.id).await {
            Ok(Some(a)) => a,
            Ok(None) => {
                return error(
                    "unknown_artifact",
                    format!(
                        "no artifact {:?} in this conversation: it may have been evicted. \
                         Call the original tool again if you need the data.",
                        args.id
                    ),
                );
            }
            Err(e) => {
                tracing::warn!(event = "artifact_read_failed", error = %e, "artifact store failed during a read");
                return error(
                    "store_unavailable",
                    "the artifact store is unavailable; try again later",
                );
            }
        };
        let total = char_count(&artifact.text) as u64;
        if args.offset > total {
            return error(
                "offset_out_of_range",
                format!(
                    "offset {} is past the end of the artifact ({total} characters)",
                    args.offset
                ),
            );
        }
        let text = &artifact.text;
        let start = byte_at(text, args.offset as usize);
        let rest = &text[start..];
        let end = byte_at(rest, args.max_chars as usize);
        let page = &rest[..end];
        let taken = char_count(page) as u64;
        let next = args.offset + taken;
        json!({
            "text": page,
            "next_offset": if next < total { Value::from(next) } else { Value::Null },
            "untrusted_content": true,
        })
    }

    /// The tool-result message answering `call`.
    pub async fn answer(&self, scope: &Scope, session: &str, call: &ToolCall) -> Message {
        let result = self.read(scope, session, &call.arguments_value()).await;
        Message::tool_result(call.id.as_str(), READ_ARTIFACT_TOOL, result.to_string())
    }
}

/// The byte index of character `n` of `s` (its length when `n` is the count or more):
/// an artifact is up to a million characters, and paging through it should not walk
/// them one by one.
fn byte_at(s: &str, n: usize) -> usize {
    truncate_chars(s, n).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::LocalArtifactStore;

    #[tokio::test]
    async fn an_id_no_store_gives_is_unknown_and_not_echoed() {
        let reader = ArtifactReader::new(Arc::new(LocalArtifactStore::default()));
        let long = "é".repeat(50_000);
        let page = reader
            .read(
                &Scope::org("acme"),
                "s1",
                &serde_json::json!({"artifact_id": long}),
            )
            .await;
        assert_eq!(page["error"], "unknown_artifact");
        let message = page["message"].as_str().unwrap();
        assert!(
            message.contains("100000 bytes") && message.len() < 200,
            "{message}"
        );
        // An id of a plausible length is looked up, and named in the answer.
        let page = reader
            .read(
                &Scope::org("acme"),
                "s1",
                &serde_json::json!({"artifact_id": "art_1"}),
            )
            .await;
        assert_eq!(page["error"], "unknown_artifact");
        assert!(page["message"].as_str().unwrap().contains("art_1"));
    }
}
