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
use serde::de;
use serde_json::Value;

use crate::BoxError;
use crate::json::escapes;
use crate::model::{ChatRequest, Content, ContentPart, Message, PrefixContext, ToolSpec};

mod plain;

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
    /// Characters of everything else sent as text: `name`, `tool_call_id`, tool calls,
    /// reasoning ([`Reasoning::counted_text`](crate::Reasoning::counted_text)).
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
        Self {
            content_chars,
            images,
            ..Self::without_content(message)
        }
    }

    /// Measures `message`, whose text content is known to have `content_chars` characters:
    /// only the other fields are read.
    pub(crate) fn with_content_chars(message: &Message, content_chars: usize) -> Self {
        Self {
            content_chars,
            ..Self::without_content(message)
        }
    }

    fn without_content(message: &Message) -> Self {
        let mut other_chars = message.name().map_or(0, char_count)
            + message.tool_call_id.as_deref().map_or(0, char_count);
        for call in &message.tool_calls {
            other_chars +=
                char_count(&call.id) + char_count(&call.name) + arguments_chars(&call.arguments);
        }
        for r in message.reasoning() {
            other_chars += char_count(r.counted_text());
        }
        Self {
            content_chars: 0,
            other_chars,
            images: 0,
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
            ContentPart::Opaque { json, .. } => (c + char_count(json), i),
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
    &text[..char_boundary(text.as_bytes(), max_chars)]
}

/// The byte offset where character `n` of `bytes` (UTF-8) starts, or its length when it
/// has `n` characters or fewer.
///
/// Character `n` starts at the `left`-th lead byte (any byte but a continuation byte)
/// from `at`, counting from 0, and each lead byte is a byte: so it is at least `left`
/// bytes further on. Counting the lead bytes of those `left` bytes (SIMD) and moving past
/// them keeps that true with a smaller `left`, until few enough are left to walk. ASCII
/// ends in one count; each count of other text shrinks `left` by at least a quarter (a
/// character is at most four bytes). Every byte before the cut is counted once.
fn char_boundary(bytes: &[u8], n: usize) -> usize {
    /// Below this many, walking bytes is cheaper than another call into the counter.
    const WALK: usize = 32;
    let (mut at, mut left) = (0, n);
    while left >= WALK {
        let end = at + left;
        if end >= bytes.len() {
            // At most `left` bytes remain, so at most `left` lead bytes, and character
            // `n` would be lead byte `left` (from 0): there is none.
            return bytes.len();
        }
        left -= bytecount::num_chars(&bytes[at..end]);
        at = end;
    }
    for (i, &b) in bytes[at..].iter().enumerate() {
        if is_lead(b) {
            if left == 0 {
                return at + i;
            }
            left -= 1;
        }
    }
    bytes.len()
}

/// Whether `b` starts a character in UTF-8 (it is not a `10xxxxxx` continuation byte).
#[inline]
fn is_lead(b: u8) -> bool {
    (b as i8) >= -0x40
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

/// The characters [`json_chars`] gives for the value that tool-call arguments' text holds
/// (see [`ToolCall::arguments_value`](crate::ToolCall::arguments_value)), counted as the
/// text is read, without building the value: text that holds no JSON value, or holds a
/// JSON string, counts as the string it is kept as.
///
/// ```
/// use llm_context_layers::tokens::{arguments_chars, json_chars};
/// use serde_json::json;
///
/// let text = r#"{"path":"src/lib.rs","lines":[1,20],"why":"caf\u00e9"}"#;
/// assert_eq!(arguments_chars(text), json_chars(&serde_json::from_str(text).unwrap()));
/// assert_eq!(arguments_chars("{oops"), json_chars(&json!("{oops")));
/// ```
pub fn arguments_chars(text: &str) -> usize {
    if !text.trim_start().starts_with('"')
        && let Some(n) = plain::value_chars(text.as_bytes()).or_else(|| parsed_value_chars(text))
    {
        return n;
    }
    json_string_chars(text)
}

/// [`json_chars`] of the JSON value `text` holds, read by `serde_json`; `None` when the
/// text is not one JSON value.
fn parsed_value_chars(text: &str) -> Option<usize> {
    let mut de = serde_json::Deserializer::from_str(text);
    let n = de::DeserializeSeed::deserialize(JsonChars, &mut de).ok()?;
    de.end().ok()?;
    Some(n)
}

/// Counts [`json_chars`] of the JSON value being read.
struct JsonChars;

impl<'de> de::DeserializeSeed<'de> for JsonChars {
    type Value = usize;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for JsonChars {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<usize, E> {
        Ok(4)
    }

    fn visit_bool<E>(self, v: bool) -> Result<usize, E> {
        Ok(if v { 4 } else { 5 })
    }

    fn visit_u64<E>(self, v: u64) -> Result<usize, E> {
        Ok(decimal_digits(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<usize, E> {
        Ok(usize::from(v < 0) + decimal_digits(v.unsigned_abs()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<usize, E> {
        // As the value's number would be written.
        Ok(serde_json::Number::from_f64(v).map_or(4, |n| number_chars(&n)))
    }

    fn visit_str<E>(self, v: &str) -> Result<usize, E> {
        Ok(json_string_chars(v))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        // "[" + items joined by ", " + "]"
        let (mut n, mut items) = (2, 0usize);
        while let Some(c) = seq.next_element_seed(JsonChars)? {
            n += c;
            items += 1;
        }
        Ok(n + 2 * items.saturating_sub(1))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        // "{" + `"k": v` joined by ", " + "}"
        let (mut n, mut entries) = (2, 0usize);
        while let Some(k) = map.next_key_seed(JsonChars)? {
            n += k + 2 + map.next_value_seed(JsonChars)?;
            entries += 1;
        }
        Ok(n + 2 * entries.saturating_sub(1))
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
    let (short, long) = escape_counts(s.as_bytes());
    // Quotes, then each character as itself, one more for each two-character escape and
    // five more for each `\u00XX`.
    2 + char_count(s) + short + 5 * long
}

/// Bytes of a block whose flags are summed in `u8` lanes: the loop over a block's lanes
/// vectorises (four SSE2 registers per counter, two AVX2), and 64 measured faster than
/// 32 on the benchmark's tool output.
const LANES: usize = 64;

/// Blocks summed before the `u8` lanes are widened: each lane gains at most 1 a block.
const BLOCKS: usize = u8::MAX as usize;

/// In one pass over `bytes`: the bytes `serde_json` writes as a two-character escape
/// (`"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`), and the other control bytes, which it
/// writes as the six characters of `\u00XX`. Every byte that is escaped is ASCII, so a
/// byte of UTF-8 is never mistaken for one; `/`, DEL and non-ASCII are written as
/// themselves.
///
/// Tool output (JSON, logs, code) always holds some of these bytes, so past a quick test
/// for none ([`any_escape`]) both are counted: the flags are summed branch-free in `u8`
/// lanes, a block at a time, and the compiler vectorises the lanes.
fn escape_counts(bytes: &[u8]) -> (usize, usize) {
    if !any_escape(bytes) {
        return (0, 0);
    }
    let (mut short, mut long) = (0, 0);
    let mut groups = bytes.chunks_exact(LANES * BLOCKS);
    for group in groups.by_ref() {
        let (s, l) = lane_counts(group);
        (short, long) = (short + s, long + l);
    }
    let rest = groups.remainder();
    let (blocks, tail) = rest.split_at(rest.len() / LANES * LANES);
    // Fewer bytes than a block skip the lanes, whose zeroing and sums cost more.
    if !blocks.is_empty() {
        let (s, l) = lane_counts(blocks);
        (short, long) = (short + s, long + l);
    }
    for &b in tail {
        let (s, l) = escapes(b);
        (short, long) = (short + usize::from(s), long + usize::from(l));
    }
    (short, long)
}

/// Whether any byte of `bytes` is escaped (see [`escapes`]): one flag a byte, summed a
/// chunk of 255 at a time, stopping at the first chunk that has one.
///
/// Most strings sized are short (tool-call argument keys and values) and need no escape;
/// so does ASCII-only tool output without newlines. For them this is the whole test, for
/// less than the two counts and the lanes' zeroing and sums. Real tool output has a
/// newline or a quote in its first chunk, so there it costs 255 bytes more.
fn any_escape(bytes: &[u8]) -> bool {
    bytes.chunks(usize::from(u8::MAX)).any(|chunk| {
        chunk
            .iter()
            .map(|&b| u8::from((b < 0x20) | (b == b'"') | (b == b'\\')))
            .sum::<u8>()
            > 0
    })
}

/// [`escape_counts`] over at most [`BLOCKS`] whole blocks of [`LANES`] bytes.
fn lane_counts(blocks: &[u8]) -> (usize, usize) {
    debug_assert!(blocks.len().is_multiple_of(LANES) && blocks.len() <= LANES * BLOCKS);
    let (mut short, mut long) = ([0u8; LANES], [0u8; LANES]);
    for block in blocks.chunks_exact(LANES) {
        for (i, &b) in block.iter().enumerate() {
            let (s, l) = escapes(b);
            short[i] += s;
            long[i] += l;
        }
    }
    let sum = |lanes: [u8; LANES]| lanes.iter().map(|&n| usize::from(n)).sum::<usize>();
    (sum(short), sum(long))
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
                            ContentPart::Opaque { json, .. } => tok.count(json),
                        };
                    }
                }
            }
            n += m.name().map_or(0, |s| tok.count(s));
            n += m.tool_call_id.as_deref().map_or(0, |s| tok.count(s));
            for call in &m.tool_calls {
                n += OVERHEAD_TOKENS
                    + tok.count(&call.id)
                    + tok.count(&call.name)
                    + tok.count(&call.arguments);
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

// The estimate of the model's composite types lives here, with the estimate itself, so
// that the model depends on no measure of it.
impl PrefixContext {
    /// The estimated tokens of the rendered prefix: the estimate of
    /// [`as_messages`](Self::as_messages), computed without rendering (copying) it, since
    /// every request through the stack asks.
    pub fn estimated_tokens(&self) -> usize {
        let system = self
            .system_prompt()
            .map_or(0, |p| OVERHEAD_TOKENS + char_count(p) / 4);
        // The schema block is a system message named "schema".
        let schema = self.schema_block().map_or(0, |s| {
            OVERHEAD_TOKENS + (char_count(s) + "schema".len()) / 4
        });
        system + estimate_message_tokens(self.grounding()) + schema
    }
}

impl ChatRequest {
    /// The estimated prompt tokens of the whole request: its prefix, tool schemas and
    /// messages, by the one estimate every step uses
    /// ([`estimate_message_tokens`]).
    pub fn estimate_tokens(&self) -> usize {
        self.prefix.as_ref().map_or(0, |p| p.estimated_tokens())
            + estimate_tool_tokens(&self.tools)
            + estimate_message_tokens(&self.messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use proptest::prelude::*;
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
        let small = Message::user(Content::from(vec![ContentPart::image_url(
            "data:image/png;base64,AAAA",
        )]));
        let big_data = format!("data:image/png;base64,{}", "A".repeat(400_000));
        let big = Message::user(Content::from(vec![ContentPart::image_url(big_data)]));
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

    /// What `serde_json` writes for `s`, counted in characters: the reference the fast
    /// scan must agree with.
    fn serde_json_chars(s: &str) -> usize {
        serde_json::to_string(s).unwrap().chars().count()
    }

    /// The first `n` characters by walking them: the reference for `truncate_chars`.
    fn first_chars(s: &str, n: usize) -> &str {
        match s.char_indices().nth(n) {
            Some((i, _)) => &s[..i],
            None => s,
        }
    }

    /// Byte lengths where the scans change regime: the lane width, 255/256 (the chunks
    /// of `any_escape`), 1024 and 4096, the widening of the `u8` lanes, and the walk
    /// threshold of `char_boundary` (31–33).
    fn boundary_lengths() -> Vec<usize> {
        let mut out = vec![0, 1, 2];
        for edge in [
            31,
            32,
            LANES,
            255,
            256,
            1024,
            4096,
            LANES * BLOCKS,
            2 * LANES * BLOCKS,
            2 * LANES * BLOCKS + LANES,
        ] {
            out.extend([edge - 1, edge, edge + 1]);
        }
        out
    }

    /// Characters weighted towards what the scans treat specially: every control
    /// character, the escaped and the unescaped ASCII punctuation, DEL, and UTF-8 of
    /// every length (a continuation byte must never be read as one of them).
    fn text_char() -> impl Strategy<Value = char> {
        prop_oneof![
            4 => proptest::char::range('\0', '\u{1f}'),
            2 => proptest::sample::select(vec!['"', '\\', '/', '\u{7f}', 'u']),
            4 => proptest::char::range(' ', '~'),
            3 => proptest::sample::select(vec![
                '\u{80}', 'é', '\u{7ff}', '\u{800}', '中', '\u{2028}', '\u{ffff}',
                '\u{10000}', '🎉', '\u{10ffff}',
            ]),
            1 => any::<char>(),
        ]
    }

    /// A string of exactly `len` bytes, with `len` on a boundary or anywhere up to a few
    /// lane groups: a random run of [`text_char`]s repeated (generating every character
    /// of a 40 KB string is slow in a debug build). A run's length is not a multiple of
    /// the lane width in general, so each lane sees every kind of byte. A character
    /// that would overrun `len` is replaced by an ASCII byte (controls included), so
    /// every boundary is reached with multi-byte characters around it.
    fn text() -> impl Strategy<Value = String> {
        let len = prop_oneof![
            proptest::sample::select(boundary_lengths()),
            0..3 * LANES * BLOCKS,
        ];
        (len, proptest::collection::vec(text_char(), 1..200)).prop_map(|(len, run)| {
            let mut s = String::with_capacity(len);
            for &c in run.iter().cycle() {
                if s.len() == len {
                    break;
                }
                if s.len() + c.len_utf8() <= len {
                    s.push(c);
                } else {
                    s.push(char::from((c as u32 % 0x80) as u8));
                }
            }
            s
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn json_string_chars_agrees_with_serde_json(s in text()) {
            prop_assert_eq!(json_string_chars(&s), serde_json_chars(&s));
        }

        #[test]
        fn truncate_chars_agrees_with_a_walk(s in text(), at in any::<proptest::sample::Index>()) {
            let chars = s.chars().count();
            let mut cuts = vec![0, 1, 31, 32, 33, chars, chars + 1, s.len(), s.len() + 1];
            cuts.push(at.index(chars + 2));
            for n in cuts {
                let cut = truncate_chars(&s, n);
                prop_assert_eq!(cut, first_chars(&s, n), "n = {}", n);
            }
        }
    }

    #[test]
    fn json_string_chars_of_every_ascii_byte_and_runs_of_it() {
        // Runs of one byte fill every lane counter at each block: the `u8` lanes must
        // widen before they overflow.
        for b in 0..=0x7fu8 {
            let c = char::from(b);
            for len in boundary_lengths() {
                let s: String = std::iter::repeat_n(c, len).collect();
                assert_eq!(
                    json_string_chars(&s),
                    serde_json_chars(&s),
                    "{b:#04x} × {len}"
                );
            }
        }
        for c in ['é', '中', '🎉', '\u{2028}'] {
            let s = format!("a{c}\"{c}\u{1}");
            assert_eq!(json_string_chars(&s), serde_json_chars(&s), "{s:?}");
        }
    }

    /// Any JSON value, strings with escapes, non-ASCII and control characters included.
    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-z\"\\\n\t\u{1}é中🎉 ]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"é]{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn arguments_chars_count_the_value_the_text_holds(v in any_json()) {
            // However the text is spelt (compact, pretty), the count is that of the value
            // the text parses to (what was counted when the arguments were a `Value`;
            // `serde_json` does not read every float back to the same bits).
            let compact = v.to_string();
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            for text in [&compact, &pretty] {
                let read: Value = serde_json::from_str(text).unwrap();
                let want = if read.is_string() { json_string_chars(text) } else { json_chars(&read) };
                proptest::prop_assert_eq!(arguments_chars(text), want, "{}", text);
            }
        }
    }

    /// JSON of the plain shape (strings without escapes, integers, literals) with the
    /// whitespace of any spelling, and small edits of it that leave the shape or JSON.
    fn plain_json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            2 => Just("null".to_owned()),
            2 => Just("true".to_owned()),
            2 => Just("false".to_owned()),
            4 => (-1_000_000i64..1_000_000).prop_map(|n| n.to_string()),
            1 => any::<i64>().prop_map(|n| n.to_string()),
            1 => any::<u64>().prop_map(|n| n.to_string()),
            1 => "-?(0|[1-9][0-9]{0,20})([.][0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            8 => "\"[a-zé中🎉 /:'%\u{7f}]{0,12}\"",
        ];
        let value = leaf.prop_recursive(5, 64, 6, |inner| {
            let ws = "[ \t\n\r]{0,2}";
            prop_oneof![
                proptest::collection::vec((ws, inner.clone(), ws), 0..6).prop_map(|items| {
                    let items: Vec<String> = items
                        .into_iter()
                        .map(|(a, v, b)| format!("{a}{v}{b}"))
                        .collect();
                    format!("[{}]", items.join(","))
                }),
                proptest::collection::vec(("[a-zé]{0,5}", ws, inner, ws), 0..6).prop_map(
                    |entries| {
                        let entries: Vec<String> = entries
                            .into_iter()
                            .map(|(k, a, v, b)| format!("{a}\"{k}\"{b}:{a}{v}{b}"))
                            .collect();
                        format!("{{{}}}", entries.join(", "))
                    }
                ),
            ]
        });
        // Some texts cut short or with a byte spliced in: no longer JSON, or not plain.
        (value, any::<proptest::sample::Index>(), 0..16u8).prop_map(|(text, at, edit)| {
            let mut at = at.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match edit {
                0 => text[..at].to_owned(),
                1 => format!("{}\\{}", &text[..at], &text[at..]),
                2 => format!("{}\u{1}{}", &text[..at], &text[at..]),
                3 => format!("{}]{}", &text[..at], &text[at..]),
                _ => text,
            }
        })
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn the_plain_scan_agrees_with_serde_json_or_defers_to_it(text in plain_json_text()) {
            // Whatever the scan counts, `serde_json` reads as one value of the same count.
            if let Some(n) = plain::value_chars(text.as_bytes()) {
                prop_assert_eq!(Some(n), parsed_value_chars(&text), "{}", text);
            }
        }
    }

    #[test]
    fn the_property_above_mostly_checks_counts_not_deferrals() {
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = plain_json_text();
        let counted = (0..1_000)
            .filter(|_| {
                let text = strategy.new_tree(&mut runner).unwrap().current();
                plain::value_chars(text.as_bytes()).is_some()
            })
            .count();
        assert!(counted > 300, "{counted} of 1,000 counted by the scan");
    }

    #[test]
    fn the_plain_scan_counts_what_models_write_and_defers_the_rest() {
        let plain = [
            r#"{"path": "src/lib.rs", "start_line": 52}"#,
            r#"{"query":"SELECT id FROM events WHERE note LIKE '%é%'","top_k":5}"#,
            "{\n  \"ids\": [1, -2, 0, 999999999999999999],\n  \"ok\": true, \"x\": null\n}",
            "[]",
            "{}",
            " [ [ ] , { } ] ",
            "-12",
        ];
        for text in plain {
            let n = plain::value_chars(text.as_bytes());
            assert!(n.is_some(), "{text}");
            assert_eq!(n, parsed_value_chars(text), "{text}");
            assert_eq!(arguments_chars(text), n.unwrap(), "{text}");
        }
        let deferred = [
            r#"{"a": "caf\u00e9"}"#,
            r#"{"a": 1.5}"#,
            r#"{"a": 1e3}"#,
            "-0",
            "1234567890123456789",
            "007",
            r#"{"a": 1,}"#,
            r#"{"a" 1}"#,
            r#"{"a": tru}"#,
            "[1] [2]",
            "{oops",
            "",
        ];
        for text in deferred {
            assert_eq!(plain::value_chars(text.as_bytes()), None, "{text}");
        }
        // Deeper than the scan goes: `serde_json` counts it.
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(plain::value_chars(deep.as_bytes()), None);
        assert_eq!(arguments_chars(&deep), 2 * 100);
    }

    #[tokio::test]
    async fn approx_counter_agrees() {
        assert_eq!(
            ApproxTokenCounter.count_messages(&seed()).await.unwrap(),
            37
        );
    }
}
