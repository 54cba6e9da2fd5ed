//! Stable hashing: the same bytes in, the same id out, on every build and machine.
//!
//! ```
//! use llm_context_layers::hash::StableHasher;
//!
//! let mut a = StableHasher::new("example/v1");
//! a.str("hello");
//! let mut b = StableHasher::new("example/v1");
//! b.str("hello");
//! assert_eq!(a.finish_hex(), b.finish_hex());
//! assert_eq!(a.finish_hex().len(), 32);
//! ```
//!
//! `std`'s `DefaultHasher` is randomly keyed per process and may change between Rust
//! releases, so nothing that must survive a restart (prompt-cache keys, artifact ids, memo
//! keys) may use it. This is XXH3-128, a published, fixed algorithm. Every field is
//! length-prefixed so that `("ab", "c")` and `("a", "bc")` hash differently, and JSON is
//! written with sorted keys so that a `serde_json` built with `preserve_order` (which any
//! crate in a user's graph can switch on) cannot change a key.

use serde_json::Value;
use twox_hash::XxHash3_128 as Xxh3;

/// An incremental stable hasher (XXH3-128) with domain separation.
#[derive(Clone)]
pub struct StableHasher {
    inner: Xxh3,
}

impl std::fmt::Debug for StableHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StableHasher").finish_non_exhaustive()
    }
}

impl StableHasher {
    /// A hasher for one purpose; `domain` keeps hashes of different purposes apart.
    pub fn new(domain: &str) -> Self {
        let mut h = Self { inner: Xxh3::new() };
        h.str(domain);
        h
    }

    /// Feeds raw bytes, length-prefixed.
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.inner.write(&(bytes.len() as u64).to_le_bytes());
        self.inner.write(bytes);
    }

    /// Feeds a string, length-prefixed.
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// Feeds an optional string (absent and empty differ).
    pub fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.inner.write(&[0]),
            Some(s) => {
                self.inner.write(&[1]);
                self.str(s);
            }
        }
    }

    /// Feeds an integer.
    pub fn u64(&mut self, n: u64) {
        self.inner.write(&n.to_le_bytes());
    }

    /// Feeds a JSON value in canonical form (sorted keys, no whitespace).
    ///
    /// Streamed straight into the hash, with no buffer: a JSON text is self-delimiting,
    /// so it needs no length prefix to keep fields apart.
    pub fn json(&mut self, value: &Value) {
        self.inner.write(b"j");
        write_canonical(value, &mut HashWriter(&mut self.inner));
    }

    /// Writes `bytes` as they are, without a length: the tags that keep shapes apart.
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.inner.write(bytes);
    }

    /// Writes `s` as the JSON string `serde_json` writes for it.
    pub(crate) fn json_str(&mut self, s: &str) {
        let _ = serde_json::to_writer(HashWriter(&mut self.inner), s);
    }

    /// The 128-bit digest.
    pub fn finish(&self) -> u128 {
        self.inner.finish_128()
    }

    /// The digest as 32 lowercase hex characters.
    pub fn finish_hex(&self) -> String {
        format!("{:032x}", self.finish())
    }
}

/// An `io::Write` that feeds the hash.
struct HashWriter<'a>(&'a mut Xxh3);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `value` as canonical JSON text (see [`write_canonical`]): the same text on every build.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // serde_json writes UTF-8 and the separators are ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// Writes `value` as canonical JSON (object keys sorted by their UTF-8 bytes, no
/// whitespace, strings escaped as `serde_json` escapes them) into a writer that cannot
/// fail (a `Vec` or the hash), which is why write results are not checked.
fn write_canonical<W: std::io::Write>(value: &Value, out: &mut W) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            put(out, b"{");
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    put(out, b",");
                }
                // Serialising a string into an infallible writer cannot fail.
                let _ = serde_json::to_writer(&mut *out, k);
                put(out, b":");
                write_canonical(v, out);
            }
            put(out, b"}");
        }
        Value::Array(items) => {
            put(out, b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    put(out, b",");
                }
                write_canonical(v, out);
            }
            put(out, b"]");
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// `value` serialized in canonical order (object keys sorted by their UTF-8 bytes, at
/// every depth) to any serializer: what a snapshot writes, so that two equal values
/// serialize to the same bytes whatever order their keys were inserted in (a
/// `serde_json` built with `preserve_order` keeps that order in `Value`).
pub(crate) struct Canonical<'a>(pub(crate) &'a Value);

impl serde::Serialize for Canonical<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    out.serialize_entry(k, &Canonical(v))?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for v in items {
                    out.serialize_element(&Canonical(v))?;
                }
                out.end()
            }
            scalar => scalar.serialize(serializer),
        }
    }
}

/// Writes bytes to a writer that never fails here (a `Vec` or the hash).
fn put<W: std::io::Write>(out: &mut W, bytes: &[u8]) {
    let _ = out.write_all(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, ToolCall};
    use serde_json::json;

    #[test]
    fn a_call_hashes_as_it_did_when_its_arguments_were_a_value() {
        // Stored prompt-cache keys, cuts and memo keys survive the change to text: the
        // sequence a message was hashed with while `ToolCall::arguments` was a `Value`.
        let before = |value: &Value| {
            let mut h = StableHasher::new("t");
            h.str("assistant");
            h.inner.write(&[0]);
            h.str("");
            h.opt_str(None);
            h.opt_str(None);
            h.u64(1);
            h.str("c1");
            h.str("f");
            h.json(value);
            h.finish()
        };
        let now = |call: ToolCall| {
            let mut h = StableHasher::new("t");
            h.message(&Message::assistant_tool_calls("", vec![call]));
            h.finish()
        };
        let value = json!({"b": [1, {"d": null, "c": "é\n"}], "a": 2.5});
        assert_eq!(now(ToolCall::new("c1", "f", value.clone())), before(&value));
        // Text that holds no JSON value hashed as the string it was kept as.
        assert_eq!(
            now(ToolCall::from_text("c1", "f", "{oops")),
            before(&json!("{oops"))
        );
        assert_eq!(
            now(ToolCall::from_text("c1", "f", "\"s\"")),
            before(&json!("\"s\""))
        );
        // Other text is hashed as it came: a different spelling is a different request.
        assert_ne!(
            now(ToolCall::from_text("c1", "f", r#"{"b": 1}"#)),
            now(ToolCall::from_text("c1", "f", r#"{"b":1}"#))
        );
    }

    #[test]
    fn digest_is_pinned() {
        // The digest must not change between builds: a change here breaks every stored
        // artifact id and prompt-cache key, so it needs a new domain version.
        let mut h = StableHasher::new("llm-context/test/v1");
        h.str("hello");
        let first = h.finish_hex();
        let mut again = StableHasher::new("llm-context/test/v1");
        again.str("hello");
        assert_eq!(first, again.finish_hex());
        // Computed with xxhash-rust 0.8 (the implementation this crate used before
        // twox-hash): ids made by earlier releases stay valid.
        assert_eq!(first, "37e4b5063ebd9da7ccfdfd43796086e9");
        assert_eq!(
            twox_hash::XxHash3_128::oneshot(b"hello"),
            0xb5e9c1ad071b3e7fc779cfaa5e523818,
            "XXH3-128 reference vector, as Python xxhash 3.x computes it"
        );
    }

    #[test]
    fn length_prefix_separates_fields() {
        let mut a = StableHasher::new("d");
        a.str("ab");
        a.str("c");
        let mut b = StableHasher::new("d");
        b.str("a");
        b.str("bc");
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn canonical_serialization_is_the_canonical_text() {
        // Built key by key in reverse order: with `preserve_order` the value keeps it.
        let mut inner = serde_json::Map::new();
        inner.insert("y".into(), json!([1, {"q": 1, "p": 2}]));
        inner.insert("x".into(), json!(1));
        let value = Value::Object(inner);
        assert_eq!(
            serde_json::to_string(&Canonical(&value)).unwrap(),
            r#"{"x":1,"y":[1,{"p":2,"q":1}]}"#
        );
        assert_eq!(
            serde_json::to_string(&Canonical(&value)).unwrap(),
            canonical_json(&value)
        );
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let mut out = Vec::new();
        write_canonical(
            &json!({"b": 1, "a": [true, null, {"d": "x", "c": 2.5}]}),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":[true,null,{"c":2.5,"d":"x"}],"b":1}"#
        );
    }
}
