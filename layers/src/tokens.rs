//! Token estimates: one additive estimator that every part of the stack uses.
//!
//! ```
//! use llm_context_layers::tokens::estimate_message_tokens;
//! use llm_context_layers::{Message, ToolCall};
//! use serde_json::json;
//!
//! let transcript = vec![
//!     Message::user("check the cert"),
//!     Message::assistant_tool_calls(
//!         "",
//!         vec![ToolCall::new("c1", "openssl", json!({"host": "example.com", "port": 443}))],
//!     ),
//!     Message::tool_result("c1", "openssl", "notAfter=2026-08-01"),
//! ];
//! assert_eq!(estimate_message_tokens(&transcript), 37);
//! assert_eq!(estimate_message_tokens(&transcript[1..2]), 19);
//! assert_eq!(estimate_message_tokens(&[]), 0);
//! ```
//!
//! Per message: `4 + ⌊chars / 4⌋ + 4 × tool calls + IMAGE_TOKENS × images`, where `chars`
//! counts the Unicode scalar values of what is sent: the text content, `name`,
//! `tool_call_id`, and each tool call's id, name and JSON arguments written with `", "`
//! and `": "` separators. The four tokens per message and per call are the role markers and
//! delimiters every provider adds; an empty transcript is exactly 0. Bookkeeping that is
//! never sent (ids of our own, timestamps) is not counted.
//!
//! The estimate is within a few percent of o200k on English prose, code and pretty JSON,
//! and undercounts compact JSON, non-Latin scripts and base64. Set a conservative
//! `max_tokens`, or use an exact counter where one exists (feature `exact-tokens`).

use async_trait::async_trait;
use serde_json::Value;

use crate::BoxError;
use crate::model::{Content, ContentPart, Message, ToolSpec};

/// The fixed estimate for one image part, in tokens.
///
/// Images are billed by their pixel size, not by the length of their base64, which this
/// crate does not decode. 1,600 is about what the largest image a provider accepts without
/// downscaling costs (Anthropic: ~1,590 for 1092×1092; OpenAI high detail: 765–1,105), so
/// it errs on the safe side.
pub const IMAGE_TOKENS: usize = 1_600;

/// The structural overhead of one message or one tool call, in tokens.
pub const OVERHEAD_TOKENS: usize = 4;

/// The estimated tokens of a transcript: the sum of [`estimate_one`] over the messages.
pub fn estimate_message_tokens(messages: &[Message]) -> usize {
    messages.iter().map(estimate_one).sum()
}

/// The estimated tokens of one message.
pub fn estimate_one(message: &Message) -> usize {
    MessageSize::of(message).tokens()
}

/// One measurement of a message, from which its estimate, and its estimate with other
/// content (a preview, a stub), follow without reading the content again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageSize {
    /// Characters of the text content.
    pub content_chars: usize,
    /// Characters of everything else sent as text: `name`, `tool_call_id`, tool calls.
    pub other_chars: usize,
    /// Image parts.
    pub images: usize,
    /// Tool calls.
    pub calls: usize,
}

impl MessageSize {
    /// Measures `message` (one pass over its text).
    pub fn of(message: &Message) -> Self {
        let (content_chars, images) = content_chars_of(&message.content);
        let mut other_chars = message.name.as_deref().map_or(0, char_count)
            + message.tool_call_id.as_deref().map_or(0, char_count);
        for call in &message.tool_calls {
            other_chars +=
                char_count(&call.id) + char_count(&call.name) + json_chars(&call.arguments);
        }
        Self {
            content_chars,
            other_chars,
            images,
            calls: message.tool_calls.len(),
        }
    }

    /// The message's estimate ([`estimate_one`]).
    pub fn tokens(&self) -> usize {
        OVERHEAD_TOKENS
            + (self.content_chars + self.other_chars) / 4
            + OVERHEAD_TOKENS * self.calls
            + IMAGE_TOKENS * self.images
    }

    /// The estimate if the content were plain text of `content_chars` characters.
    pub fn tokens_with_content(&self, content_chars: usize) -> usize {
        OVERHEAD_TOKENS + (self.other_chars + content_chars) / 4 + OVERHEAD_TOKENS * self.calls
    }
}

/// The estimated tokens of text on its own: `⌊chars / 4⌋`, no overhead.
pub fn estimate_text_tokens(text: &str) -> usize {
    char_count(text) / 4
}

/// The estimated tokens of tool definitions: per tool, 4 + ⌊chars / 4⌋ over its name,
/// description and JSON schema (written as for tool-call arguments).
pub fn estimate_tool_tokens(tools: &[ToolSpec]) -> usize {
    tools
        .iter()
        .map(|t| {
            let chars =
                char_count(&t.name) + char_count(&t.description) + json_chars(&t.parameters);
            OVERHEAD_TOKENS + chars / 4
        })
        .sum()
}

fn content_chars_of(content: &Content) -> (usize, usize) {
    match content {
        Content::Text(t) => (char_count(t), 0),
        Content::Parts(parts) => parts.iter().fold((0, 0), |(c, i), p| match p {
            ContentPart::Text { text } => (c + char_count(text), i),
            ContentPart::Image { .. } => (c, i + 1),
        }),
    }
}

/// Unicode scalar values in `s`.
#[inline]
pub fn char_count(s: &str) -> usize {
    // Every byte of the transcript passes through here once per request: count the
    // non-continuation bytes with SIMD where the CPU has it.
    bytecount::num_chars(s.as_bytes())
}

/// The first `max_chars` characters of `text`, cut on a character boundary (all of
/// `text` when it has no more).
///
/// ```
/// use llm_context_layers::tokens::truncate_chars;
///
/// assert_eq!(truncate_chars("a🎉b中", 2), "a🎉");
/// assert_eq!(truncate_chars("a🎉b中", 9), "a🎉b中");
/// ```
pub fn truncate_chars(text: &str, max_chars: usize) -> &str {
    // Tool output is mostly ASCII, where characters are bytes: no walk needed.
    let head = &text.as_bytes()[..max_chars.min(text.len())];
    if head.is_ascii() {
        return &text[..head.len()];
    }
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => &text[..byte],
        None => text,
    }
}

/// The Unicode scalar values of `value` written as JSON with `", "` and `": "` separators
/// (the form Python's `json.dumps` produces, which the estimate is defined over).
pub fn json_chars(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => number_chars(n),
        Value::String(s) => json_string_chars(s),
        Value::Array(items) => {
            // "[" + items joined by ", " + "]"
            2 + items.iter().map(json_chars).sum::<usize>() + 2 * items.len().saturating_sub(1)
        }
        Value::Object(map) => {
            // "{" + `"k": v` joined by ", " + "}"
            2 + map
                .iter()
                .map(|(k, v)| json_string_chars(k) + 2 + json_chars(v))
                .sum::<usize>()
                + 2 * map.len().saturating_sub(1)
        }
    }
}

/// The characters of a JSON number as `serde_json` writes it; integers without
/// formatting them into a new string (they are most numbers in tool arguments).
fn number_chars(n: &serde_json::Number) -> usize {
    if let Some(u) = n.as_u64() {
        decimal_digits(u)
    } else if let Some(i) = n.as_i64() {
        1 + decimal_digits(i.unsigned_abs())
    } else {
        n.to_string().len()
    }
}

pub(crate) fn decimal_digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The characters of `s` written as a JSON string literal, quotes included, with the
/// escapes `serde_json` uses (`\"`, `\\`, `\n`, … and `\u00XX` for other control
/// characters; everything else is written as itself).
pub fn json_string_chars(s: &str) -> usize {
    let bytes = s.as_bytes();
    // Branch-free byte flags summed in u8 lanes, 255 bytes at a time, vectorise; most text
    // needs no escape, and then ASCII is one character a byte.
    let needs_escape: usize = bytes
        .chunks(255)
        .map(|chunk| {
            chunk
                .iter()
                .map(|&b| u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\'))
                .sum::<u8>() as usize
        })
        .sum();
    if needs_escape == 0 {
        return 2 + char_count(s);
    }
    let mut n = 2;
    for c in s.chars() {
        n += match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
            c if (c as u32) < 0x20 => 6,
            _ => 1,
        };
    }
    n
}

/// Counts tokens for a transcript. Async because a real counter may call a provider's
/// counting endpoint or load an encoder lazily; object-safe so it can be chosen at run
/// time (`Arc<dyn TokenCounter>`).
#[async_trait]
pub trait TokenCounter: Send + Sync {
    /// Tokens of the messages.
    async fn count_messages(&self, messages: &[Message]) -> Result<usize, BoxError>;

    /// Tokens of tool definitions. Defaults to [`estimate_tool_tokens`].
    async fn count_tools(&self, tools: &[ToolSpec]) -> Result<usize, BoxError> {
        Ok(estimate_tool_tokens(tools))
    }
}

/// The default counter: [`estimate_message_tokens`]. Free, offline, never fails.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApproxTokenCounter;

#[async_trait]
impl TokenCounter for ApproxTokenCounter {
    async fn count_messages(&self, messages: &[Message]) -> Result<usize, BoxError> {
        Ok(estimate_message_tokens(messages))
    }
}

#[cfg(feature = "exact-tokens")]
pub use exact::{BpeTokenCounter, Encoding};

#[cfg(feature = "exact-tokens")]
mod exact {
    use super::*;

    /// An OpenAI encoding.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum Encoding {
        /// `o200k_base` (GPT-4o, GPT-4.1, GPT-5 families).
        O200k,
        /// `cl100k_base` (GPT-4, GPT-3.5).
        Cl100k,
    }

    /// An exact, offline counter for OpenAI encodings (feature `exact-tokens`).
    ///
    /// It counts the same things as [`estimate_message_tokens`], with the same overheads,
    /// and differs only in the text → tokens step. It uses `bpe-openai` rather than
    /// `tiktoken-rs`, which panics on long whitespace runs (common in tool output) and is
    /// superlinear on long letter runs.
    #[derive(Clone, Copy, Debug)]
    pub struct BpeTokenCounter {
        encoding: Encoding,
    }

    impl BpeTokenCounter {
        /// A counter for `encoding`.
        pub fn new(encoding: Encoding) -> Self {
            Self { encoding }
        }

        fn tokenizer(&self) -> &'static bpe_openai::Tokenizer {
            match self.encoding {
                Encoding::O200k => bpe_openai::o200k_base(),
                Encoding::Cl100k => bpe_openai::cl100k_base(),
            }
        }

        /// Exact tokens of one text.
        pub fn count_text(&self, text: &str) -> usize {
            self.tokenizer().count(text)
        }

        /// Exact tokens of one message, with the estimate's structural overheads.
        pub fn count_message(&self, m: &Message) -> usize {
            let tok = self.tokenizer();
            let mut n = OVERHEAD_TOKENS;
            match &m.content {
                Content::Text(t) => n += tok.count(t),
                Content::Parts(parts) => {
                    for p in parts {
                        n += match p {
                            ContentPart::Text { text } => tok.count(text),
                            ContentPart::Image { .. } => IMAGE_TOKENS,
                        };
                    }
                }
            }
            n += m.name.as_deref().map_or(0, |s| tok.count(s));
            n += m.tool_call_id.as_deref().map_or(0, |s| tok.count(s));
            for call in &m.tool_calls {
                let args = serde_json::to_string(&call.arguments).unwrap_or_default();
                n += OVERHEAD_TOKENS
                    + tok.count(&call.id)
                    + tok.count(&call.name)
                    + tok.count(&args);
            }
            n
        }
    }

    #[async_trait]
    impl TokenCounter for BpeTokenCounter {
        async fn count_messages(&self, messages: &[Message]) -> Result<usize, BoxError> {
            Ok(messages.iter().map(|m| self.count_message(m)).sum())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use serde_json::json;

    fn seed() -> Vec<Message> {
        vec![
            Message::user("check the cert"),
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(
                    "c1",
                    "openssl",
                    json!({"host": "example.com", "port": 443}),
                )],
            ),
            Message::tool_result("c1", "openssl", "notAfter=2026-08-01"),
        ]
    }

    #[test]
    fn cut_never_splits_a_character() {
        let text = "a🎉b中e\u{301}";
        assert_eq!(truncate_chars(text, 2), "a🎉");
        assert_eq!(truncate_chars(text, 5), "a🎉b中e");
        assert_eq!(truncate_chars(text, 99), text);
    }

    #[test]
    fn seed_figures() {
        let t = seed();
        assert_eq!(estimate_message_tokens(&t), 37);
        assert_eq!(estimate_message_tokens(&t[1..2]), 19);
        assert_eq!(estimate_message_tokens(&[]), 0);
        let ctx = [
            Message::system("You are a careful research assistant."),
            Message::user("What changed in the pricing table?"),
        ];
        assert_eq!(estimate_message_tokens(&ctx), 25);
    }

    #[test]
    fn additive() {
        let t = seed();
        let sum: usize = t
            .iter()
            .map(|m| estimate_message_tokens(std::slice::from_ref(m)))
            .sum();
        assert_eq!(sum, estimate_message_tokens(&t));
    }

    #[test]
    fn json_chars_matches_python_separators() {
        // What Python's json.dumps(v, ensure_ascii=False) writes, counted by hand.
        let v = json!({"host": "example.com", "port": 443});
        assert_eq!(
            json_chars(&v),
            r#"{"host": "example.com", "port": 443}"#.len()
        );
        let v = json!({"a": [1, "x\"y", null, false, {}], "b": "é\n"});
        assert_eq!(
            json_chars(&v),
            r#"{"a": [1, "x\"y", null, false, {}], "b": "é\n"}"#.chars().count()
        );
        assert_eq!(json_chars(&json!("\u{1}")), 8);
        for n in [
            json!(0),
            json!(9),
            json!(10),
            json!(-1),
            json!(-10),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(2.5),
            json!(-0.001),
        ] {
            assert_eq!(json_chars(&n), n.to_string().len(), "{n}");
        }
        assert_eq!(json_chars(&json!([])), 2);
    }

    #[test]
    fn image_costs_a_fixed_estimate() {
        let small = Message::user(Content::Parts(vec![ContentPart::image_url(
            "data:image/png;base64,AAAA",
        )]));
        let big_data = format!("data:image/png;base64,{}", "A".repeat(400_000));
        let big = Message::user(Content::Parts(vec![ContentPart::image_url(big_data)]));
        assert_eq!(estimate_one(&small), OVERHEAD_TOKENS + IMAGE_TOKENS);
        assert_eq!(estimate_one(&small), estimate_one(&big));
    }

    #[cfg(feature = "exact-tokens")]
    #[tokio::test]
    async fn exact_counter_matches_published_counts() {
        // OpenAI cookbook, "How to count tokens with tiktoken": "tiktoken is great!" is
        // six cl100k_base tokens.
        let cl100k = BpeTokenCounter::new(Encoding::Cl100k);
        assert_eq!(cl100k.count_text("tiktoken is great!"), 6);
        // Same overheads as the estimate: 4 per message, 4 per call.
        let m = Message::user("tiktoken is great!");
        assert_eq!(
            cl100k.count_messages(&[m.clone(), m]).await.unwrap(),
            2 * (4 + 6)
        );
        // Long whitespace runs (which make tiktoken-rs panic) are fine.
        let spaces = " ".repeat(1_000_000);
        assert!(BpeTokenCounter::new(Encoding::O200k).count_text(&spaces) > 0);
    }

    #[tokio::test]
    async fn approx_counter_agrees() {
        assert_eq!(
            ApproxTokenCounter.count_messages(&seed()).await.unwrap(),
            37
        );
    }
}
