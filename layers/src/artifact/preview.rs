//! The preview that replaces an offloaded tool result, and the artifact id it names.

use serde::Serialize;

use crate::hash::StableHasher;
use crate::model::Scope;
use crate::tokens::{decimal_digits, json_string_chars, truncate_chars};

/// Every artifact id starts with this.
pub const ARTIFACT_ID_PREFIX: &str = "art_";

/// The length of every artifact id in characters.
pub const ARTIFACT_ID_LEN: usize = ARTIFACT_ID_PREFIX.len() + 32;

/// What the model is told about an offloaded result.
pub const OFFLOAD_INSTRUCTIONS: &str = "This tool result was too long to include in full. The preview above is its beginning. \
Call read_context_artifact with this artifact_id (and offset/max_chars, in characters) to read the rest.";

/// The stable, content-addressed id of an artifact holding `content` for one tenant and
/// session: `art_` and 32 hex characters of XXH3-128 over (scope key, session, content).
///
/// ```
/// use llm_context_layers::artifact::artifact_id;
/// use llm_context_layers::Scope;
///
/// let a = artifact_id(&Scope::org(1), "s1", "big result");
/// assert_eq!(a, artifact_id(&Scope::org(1), "s1", "big result"));
/// assert_ne!(a, artifact_id(&Scope::org(2), "s1", "big result"));
/// assert!(a.starts_with("art_") && a.len() == 36);
/// ```
pub fn artifact_id(scope: &Scope, session: &str, content: &str) -> String {
    let mut h = StableHasher::new("llm-context/artifact/v1");
    h.str(&scope.key());
    h.str(session);
    h.str(content);
    format!("{ARTIFACT_ID_PREFIX}{}", h.finish_hex())
}

#[derive(Serialize)]
struct PreviewJson<'a> {
    context_artifact: &'a str,
    preview: &'a str,
    preview_truncated: bool,
    original_chars: usize,
    stored_chars: usize,
    artifact_truncated: bool,
    instructions: &'static str,
}

/// Whether `text` is already a preview written by the offload step (so preparing a
/// prepared request leaves it alone).
pub fn is_preview(text: &str) -> bool {
    text.starts_with("{\"context_artifact\":\"art_")
}

/// The artifact id and original length named by a preview, when `text` is one.
pub(crate) fn preview_info(text: &str) -> Option<(String, usize)> {
    if !is_preview(text) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let id = v.get("context_artifact")?.as_str()?.to_owned();
    let original = v.get("original_chars")?.as_u64()? as usize;
    Some((id, original))
}

/// The preview JSON for an offloaded `text` with artifact `id`.
#[cfg(test)]
fn render_preview(id: &str, text: &str, preview_chars: usize, artifact_max_chars: usize) -> String {
    render_counted(
        id,
        text,
        crate::tokens::char_count(text),
        preview_chars,
        artifact_max_chars,
    )
}

/// [`render_preview`] for a `text` of `original` characters, counted already.
pub(crate) fn render_counted(
    id: &str,
    text: &str,
    original: usize,
    preview_chars: usize,
    artifact_max_chars: usize,
) -> String {
    let json = PreviewJson {
        context_artifact: id,
        preview: truncate_chars(text, preview_chars),
        preview_truncated: original > preview_chars,
        original_chars: original,
        stored_chars: original.min(artifact_max_chars),
        artifact_truncated: original > artifact_max_chars,
        instructions: OFFLOAD_INSTRUCTIONS,
    };
    serde_json::to_string(&json).expect("preview serialises")
}

/// The characters [`render_preview`] would produce, without building it.
pub(crate) fn preview_chars(
    text: &str,
    original_chars: usize,
    preview_chars: usize,
    artifact_max_chars: usize,
) -> usize {
    let preview = truncate_chars(text, preview_chars);
    let truncated = original_chars > preview_chars;
    let art_truncated = original_chars > artifact_max_chars;
    // {"context_artifact":"<id>","preview":<s>,"preview_truncated":<b>,"original_chars":<n>,
    //  "stored_chars":<n>,"artifact_truncated":<b>,"instructions":<s>}
    FIXED_CHARS
        + ARTIFACT_ID_LEN
        + json_string_chars(preview)
        + bool_len(truncated)
        + decimal_digits(original_chars as u64)
        + decimal_digits(original_chars.min(artifact_max_chars) as u64)
        + bool_len(art_truncated)
        + json_string_chars(OFFLOAD_INSTRUCTIONS)
}

const FIXED_CHARS: usize = r#"{"context_artifact":"","preview":,"preview_truncated":,"original_chars":,"stored_chars":,"artifact_truncated":,"instructions":}"#.len();

fn bool_len(b: bool) -> usize {
    if b { 4 } else { 5 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::char_count;

    #[test]
    fn predicted_length_matches_rendering() {
        let id = artifact_id(&Scope::org(1), "s", "x");
        for text in [
            "",
            "short",
            "quote\"and\\slash\nnewline\u{1}",
            &"é🎉中".repeat(50),
        ] {
            for max in [1, 3, 10, 1000] {
                let original = char_count(text);
                let rendered = render_preview(&id, text, max, 120);
                assert_eq!(
                    char_count(&rendered),
                    preview_chars(text, original, max, 120),
                    "{text:?} {max}"
                );
                assert!(is_preview(&rendered));
            }
        }
    }
}
