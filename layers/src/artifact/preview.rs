//! The preview that replaces an offloaded tool result, and the artifact id it names.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::json;
use crate::model::Scope;
use crate::tokens::{char_count, decimal_digits, json_string_chars, truncate_chars};

/// Every artifact id starts with this.
pub const ARTIFACT_ID_PREFIX: &str = "art_";

/// Hex digits of the digest in an id: all 256 bits of BLAKE3, so finding two contents with
/// one id is as hard as breaking the hash.
const ID_HEX: usize = 64;

/// The length of every artifact id in characters.
pub const ARTIFACT_ID_LEN: usize = ARTIFACT_ID_PREFIX.len() + ID_HEX;

/// What the model is told about an offloaded result.
pub const OFFLOAD_INSTRUCTIONS: &str = "This tool result was too long to include in full. The preview above is its beginning. \
Call read_context_artifact with this artifact_id (and offset/max_chars, in characters) to read the rest.";

/// The stable, content-addressed id of an artifact holding `content` for one tenant and
/// session: `art_` and the 64 hex characters of BLAKE3 over (scope key, session,
/// content), each length-prefixed.
///
/// The hash is cryptographic because tool output is untrusted: a result crafted to share
/// another result's id would shadow it in the store, which keeps the first text.
///
/// ```
/// use llm_context_layers::artifact::{artifact_id, ARTIFACT_ID_LEN};
/// use llm_context_layers::Scope;
///
/// let a = artifact_id(&Scope::org(1), "s1", "big result");
/// assert_eq!(a, artifact_id(&Scope::org(1), "s1", "big result"));
/// assert_ne!(a, artifact_id(&Scope::org(2), "s1", "big result"));
/// assert!(a.starts_with("art_") && a.len() == ARTIFACT_ID_LEN);
/// ```
pub fn artifact_id(scope: &Scope, session: &str, content: &str) -> String {
    let mut h = blake3::Hasher::new_derive_key("llm-context artifact id v2");
    for part in [scope.key().as_str(), session, content] {
        // Length prefixes: ("ab", "c") and ("a", "bc") must not hash alike.
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let mut id = String::with_capacity(ARTIFACT_ID_LEN);
    id.push_str(ARTIFACT_ID_PREFIX);
    id.push_str(h.finalize().to_hex().as_str());
    id
}

/// Whether `id` has the form of an artifact id (it says nothing of whether one is stored).
pub(crate) fn is_artifact_id(id: &str) -> bool {
    id.len() == ARTIFACT_ID_LEN
        && id.starts_with(ARTIFACT_ID_PREFIX)
        && id[ARTIFACT_ID_PREFIX.len()..]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewJson<'a> {
    #[serde(borrow)]
    context_artifact: Cow<'a, str>,
    #[serde(borrow)]
    preview: Cow<'a, str>,
    preview_truncated: bool,
    original_chars: usize,
    stored_chars: usize,
    artifact_truncated: bool,
    #[serde(borrow)]
    instructions: Cow<'a, str>,
}

/// Whether `text` is exactly a preview the offload step writes: the JSON it renders, field
/// for field and byte for byte, with a well-formed id and figures that agree with each
/// other. A tool result that merely starts like one is not a preview, so it is offloaded
/// (or cleared) like any other text. Whether the id is stored is a further question, for
/// the layers that hold the store.
pub fn is_preview(text: &str) -> bool {
    parse_preview(text).is_some()
}

/// What a genuine preview says (see [`is_preview`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreviewInfo<'a> {
    pub(crate) id: Cow<'a, str>,
    pub(crate) original_chars: usize,
    /// The characters of the preview text.
    pub(crate) preview_chars: usize,
}

/// Parses `text` when it is exactly a preview the stack renders (see [`is_preview`]).
pub(crate) fn parse_preview(text: &str) -> Option<PreviewInfo<'_>> {
    if !text.starts_with("{\"context_artifact\":\"art_") {
        return None;
    }
    let p: PreviewJson<'_> = serde_json::from_str(text).ok()?;
    let preview_chars = char_count(&p.preview);
    let consistent = is_artifact_id(&p.context_artifact)
        && p.instructions == OFFLOAD_INSTRUCTIONS
        && p.preview_truncated == (p.original_chars > preview_chars)
        && p.stored_chars <= p.original_chars
        && p.artifact_truncated == (p.original_chars > p.stored_chars);
    // Byte for byte what rendering these fields gives: no extra whitespace, no reordered
    // or re-escaped fields.
    if !consistent || serde_json::to_string(&p).ok()? != text {
        return None;
    }
    Some(PreviewInfo {
        id: p.context_artifact,
        original_chars: p.original_chars,
        preview_chars,
    })
}

/// The preview JSON for an offloaded `text` with artifact `id`.
#[cfg(test)]
fn render_preview(id: &str, text: &str, preview_chars: usize, artifact_max_chars: usize) -> String {
    render_counted(
        id,
        text,
        char_count(text),
        preview_chars,
        artifact_max_chars,
    )
}

/// [`render_preview`] for a `text` of `original` characters, counted already.
///
/// Written field by field, in [`PreviewJson`]'s order, with [`json::push_str`] for the
/// strings: the bytes `serde_json` writes for it (a test holds them equal), without a
/// buffer grown from 128 bytes and a write per run between escapes.
pub(crate) fn render_counted(
    id: &str,
    text: &str,
    original: usize,
    preview_chars: usize,
    artifact_max_chars: usize,
) -> String {
    let head = truncate_chars(text, preview_chars);
    let mut out = String::with_capacity(
        FIXED_CHARS
            + ARTIFACT_ID_LEN
            + head.len()
            + head.len() / 8
            + OFFLOAD_INSTRUCTIONS.len()
            + 64,
    );
    let flag = |b: bool| if b { "true" } else { "false" };
    out.push_str("{\"context_artifact\":");
    json::push_str(&mut out, id);
    out.push_str(",\"preview\":");
    json::push_str(&mut out, head);
    out.push_str(",\"preview_truncated\":");
    out.push_str(flag(original > preview_chars));
    // Writing to a `String` cannot fail.
    let _ = write!(
        out,
        ",\"original_chars\":{original},\"stored_chars\":{}",
        original.min(artifact_max_chars)
    );
    out.push_str(",\"artifact_truncated\":");
    out.push_str(flag(original > artifact_max_chars));
    out.push_str(",\"instructions\":");
    json::push_str(&mut out, OFFLOAD_INSTRUCTIONS);
    out.push('}');
    out
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

/// A lower bound of [`preview_chars`] from the figures alone, without reading the text:
/// exact when the preview's head needs no JSON escape. The planner sizes results with it
/// first and reads the text only of those it keeps.
pub(crate) fn preview_chars_unescaped(
    original_chars: usize,
    preview_chars: usize,
    artifact_max_chars: usize,
) -> usize {
    FIXED_CHARS
        + ARTIFACT_ID_LEN
        + 2
        + original_chars.min(preview_chars)
        + bool_len(original_chars > preview_chars)
        + decimal_digits(original_chars as u64)
        + decimal_digits(original_chars.min(artifact_max_chars) as u64)
        + bool_len(original_chars > artifact_max_chars)
        + json_string_chars(OFFLOAD_INSTRUCTIONS)
}

const FIXED_CHARS: usize = r#"{"context_artifact":"","preview":,"preview_truncated":,"original_chars":,"stored_chars":,"artifact_truncated":,"instructions":}"#.len();

fn bool_len(b: bool) -> usize {
    if b { 4 } else { 5 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `serde_json` writes for the preview's fields: what `render_counted` must write.
    fn serde_rendering(
        id: &str,
        text: &str,
        original: usize,
        max: usize,
        art_max: usize,
    ) -> String {
        serde_json::to_string(&PreviewJson {
            context_artifact: Cow::Borrowed(id),
            preview: Cow::Borrowed(truncate_chars(text, max)),
            preview_truncated: original > max,
            original_chars: original,
            stored_chars: original.min(art_max),
            artifact_truncated: original > art_max,
            instructions: Cow::Borrowed(OFFLOAD_INSTRUCTIONS),
        })
        .unwrap()
    }

    proptest::proptest! {
        #[test]
        fn the_rendering_is_what_serde_json_writes(
            text in "[a-z \"\\\n\t\u{1}\u{1f}é中🎉{}:,]{0,300}",
            max in 0usize..400,
            art_max in 0usize..400,
        ) {
            let id = artifact_id(&Scope::org(1), "s", &text);
            let original = char_count(&text);
            proptest::prop_assert_eq!(
                render_counted(&id, &text, original, max, art_max),
                serde_rendering(&id, &text, original, max, art_max)
            );
        }
    }

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
