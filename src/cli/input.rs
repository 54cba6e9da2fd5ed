//! Reading the request body and the policy file, shared by the commands.

use std::io::Read;
use std::path::Path;

use llm_context::wire::chat_completions::body::{BodyContext, request_from_str};
use llm_context::{ChatRequest, ContextPolicy, load_policy};

use super::Exit;

/// The largest request body the commands read: 256 MiB. A transcript that size is
/// hundreds of times any model's window, and reading it takes several times its size in
/// memory; past it the command stops reading and exits 2 instead of exhausting memory.
pub(crate) const MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// Reads the request body from a file, or from stdin for `-` or no argument, and says
/// where it came from. The bytes are checked to be UTF-8 by [`text_of`].
fn read_body(path: Option<&Path>) -> Result<(Vec<u8>, String), Exit> {
    let (bytes, source) = match path.filter(|p| *p != Path::new("-")) {
        None => (
            read_bounded(std::io::stdin().lock(), "stdin", MAX_INPUT_BYTES, 0)?,
            "stdin".to_owned(),
        ),
        Some(p) => {
            let source = p.display().to_string();
            let cannot = |e: std::io::Error| Exit::bad_input(format!("cannot read {source}: {e}"));
            let file = std::fs::File::open(p).map_err(cannot)?;
            // A file says its size: refuse it before reading any of it, and read it into
            // a buffer of that size (grown by doubling, it would be copied as it grows).
            let len = file.metadata().map_err(cannot)?.len();
            if len > MAX_INPUT_BYTES {
                return Err(over_limit(&source));
            }
            (read_bounded(file, &source, MAX_INPUT_BYTES, len)?, source)
        }
    };
    Ok((bytes, source))
}

/// All of `input`, or an error once it passes `limit` bytes (nothing past the limit is
/// read); `size` is what it is expected to hold.
fn read_bounded(input: impl Read, source: &str, limit: u64, size: u64) -> Result<Vec<u8>, Exit> {
    // One byte more than expected, so that reading to the end does not grow the buffer
    // only to find there is nothing more.
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(limit)).unwrap_or(0) + 1);
    input
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Exit::bad_input(format!("cannot read {source}: {e}")))?;
    if bytes.len() as u64 > limit {
        return Err(over_limit(source));
    }
    Ok(bytes)
}

/// The body's bytes as text, checked by `simdutf8` at memory speed (`std`'s check, which
/// `read_to_string` made, was a twelfth of a 10 MB `prepare`); its `compat` flavour says
/// where the first bad byte is.
fn text_of<'a>(bytes: &'a [u8], source: &str) -> Result<&'a str, Exit> {
    simdutf8::compat::from_utf8(bytes).map_err(|e| {
        Exit::bad_input(format!(
            "cannot read {source}: it is not UTF-8 (byte {} is not valid)",
            e.valid_up_to()
        ))
    })
}

fn over_limit(source: &str) -> Exit {
    Exit::bad_input(format!(
        "{source} is over the {} MiB limit of a request body",
        MAX_INPUT_BYTES / (1024 * 1024)
    ))
}

/// The policy of `--policy FILE`, or the default.
pub(crate) fn policy(path: Option<&Path>) -> Result<ContextPolicy, Exit> {
    match path {
        Some(path) => load_policy(path).map_err(|e| Exit::bad_input(e.to_string())),
        None => Ok(ContextPolicy::default()),
    }
}

/// A request body as read, with what is needed to write the prepared request back in
/// its format.
pub(crate) enum Body {
    /// OpenAI Chat Completions.
    Chat(BodyContext),
    /// OpenAI's Responses API.
    #[cfg(feature = "serve")]
    Responses(Box<llm_context::wire::responses::body::ResponsesBody>),
}

/// The request of a Chat Completions or (with `serve`) Responses body read from `path`
/// (or stdin): a body with `input` or `instructions` and no `messages` is a Responses one.
pub(crate) fn any_request(path: Option<&Path>) -> Result<(ChatRequest, Body), Exit> {
    let (bytes, source) = read_body(path)?;
    let text = text_of(&bytes, &source)?;
    #[cfg(feature = "serve")]
    if is_responses(text) {
        use llm_context::wire::responses::body::read_body;
        let (req, kept) = read_body(text.as_bytes())
            .map_err(|e| Exit::bad_input(format!("bad request body: {e}")))?;
        return Ok((req, Body::Responses(Box::new(kept))));
    }
    chat(text, &source).map(|(req, ctx)| (req, Body::Chat(ctx)))
}

/// Whether `text` is a Responses body: its top-level keys, read without building them.
#[cfg(feature = "serve")]
fn is_responses(text: &str) -> bool {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Keys {
        messages: Option<IgnoredAny>,
        input: Option<IgnoredAny>,
        instructions: Option<IgnoredAny>,
    }
    serde_json::from_str::<Keys>(text)
        .is_ok_and(|k| k.messages.is_none() && (k.input.is_some() || k.instructions.is_some()))
}

/// The request of a Chat Completions body read from `path` (or stdin), with what is
/// needed to write the prepared request back as a body.
#[cfg(any(feature = "openai", feature = "anthropic", feature = "simulate"))]
pub(crate) fn request(path: Option<&Path>) -> Result<(ChatRequest, BodyContext), Exit> {
    let (bytes, source) = read_body(path)?;
    let text = text_of(&bytes, &source)?;
    chat(text, &source)
}

fn chat(text: &str, source: &str) -> Result<(ChatRequest, BodyContext), Exit> {
    // From the text, one message at a time: no JSON tree of the whole transcript.
    request_from_str(text).map_err(|e| {
        Exit::bad_input(if e.is_syntax() {
            format!("{source} is {}", e.reason)
        } else {
            format!("bad request body: {e}")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_stops_at_the_limit() {
        assert_eq!(
            read_bounded(&b"0123456789"[..], "stdin", 10, 10)
                .ok()
                .as_deref(),
            Some(&b"0123456789"[..])
        );
        // One byte over: an error, and no more than limit + 1 bytes were asked for.
        let mut endless = std::io::repeat(b'x');
        assert!(read_bounded(&mut endless, "stdin", 10, 0).is_err());
    }

    #[test]
    fn text_is_checked_and_a_bad_byte_named() {
        let bad_byte = |bytes: &[u8]| text_of(bytes, "stdin").err().map(|e| e.message);
        assert_eq!(text_of("café".as_bytes(), "stdin").ok(), Some("café"));
        assert!(
            bad_byte(b"ab\xffcd")
                .unwrap()
                .contains("(byte 2 is not valid)")
        );
        let cut_short = bad_byte(b"caf\xc3").unwrap();
        assert!(cut_short.contains("(byte 3 is not valid)"), "{cut_short}");
    }
}
