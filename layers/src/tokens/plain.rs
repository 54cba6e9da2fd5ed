//! The common shape of tool-call arguments, counted in one pass over the bytes with no
//! parser: objects and arrays of strings without escapes, integers, `true`, `false` and
//! `null`, spelt compact or pretty.
//!
//! Models write arguments such as `{"path": "src/lib.rs", "start_line": 52}`: nothing in
//! them is spelt differently when the value is written again, so the count of the value
//! (see [`json_chars`](super::json_chars)) follows from the text alone. Anything else (an
//! escape, a fraction or exponent, an integer that might not fit in 64 bits, `-0`, deep
//! nesting, invalid JSON) answers `None`, and the caller reads the text with `serde_json`,
//! which decides what it is; so this is only ever a shortcut to the same figure.

/// Nesting deeper than this is left to `serde_json` (whose own limit is 128).
const MAX_DEPTH: usize = 64;

/// [`json_chars`](super::json_chars) of the one JSON value `text` holds, when it is of the
/// plain shape; `None` otherwise (including when it is not JSON at all).
pub(super) fn value_chars(text: &[u8]) -> Option<usize> {
    let mut scan = Scan { text, at: 0 };
    scan.space();
    let n = scan.value(0)?;
    scan.space();
    (scan.at == text.len()).then_some(n)
}

struct Scan<'a> {
    text: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    /// Skips JSON whitespace, which the written value does not have (separators are
    /// counted as `", "` and `": "` whatever the text spells).
    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<usize> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<usize> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| {
            self.at = end;
            word.len()
        })
    }

    /// `-?(0|[1-9][0-9]*)` of at most 18 digits (it fits in an `i64` and a `u64`, so
    /// `serde_json` writes it back as spelt), not followed by a fraction or an exponent.
    fn integer(&mut self) -> Option<usize> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let digits_start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let digits = &self.text[digits_start..self.at];
        let plain = match digits {
            [] => false,
            // `0` alone; `-0` is read as a float by `serde_json`.
            [b'0'] => !negative,
            [b'0', ..] => false,
            _ => digits.len() <= 18,
        };
        if !plain || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(self.at - start)
    }

    /// A string with no escape: its characters and two quotes. A control character or a
    /// backslash answers `None` (invalid, or spelt otherwise when written again).
    fn string(&mut self) -> Option<usize> {
        let start = self.at + 1;
        // The first byte JSON writes escaped, found eight at a time: it must be the quote
        // that closes the string.
        let end = crate::json::next_escape(self.text, start)?;
        if self.text[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // Continuation bytes of UTF-8 start no character (the text is a `str`).
        Some(2 + bytecount::num_chars(&self.text[start..end]))
    }

    /// `[` items `]`: the brackets, each item, and `", "` between items.
    fn array(&mut self, depth: usize) -> Option<usize> {
        self.items(depth, b']', |scan| scan.value(depth))
    }

    /// `{` entries `}`: the braces, each key, `": "` and value, and `", "` between entries.
    fn object(&mut self, depth: usize) -> Option<usize> {
        self.items(depth, b'}', |scan| {
            if scan.peek()? != b'"' {
                return None;
            }
            let key = scan.string()?;
            scan.space();
            if scan.peek()? != b':' {
                return None;
            }
            scan.at += 1;
            scan.space();
            Some(key + 2 + scan.value(depth)?)
        })
    }

    /// A container at its opening byte, closed by `close`, whose items `item` reads: its
    /// two delimiters, each item, and `", "` between items.
    fn items(
        &mut self,
        depth: usize,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<usize>,
    ) -> Option<usize> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.space();
        let mut n = 2;
        if self.peek()? == close {
            self.at += 1;
            return Some(n);
        }
        loop {
            n += item(self)?;
            self.space();
            let more = match self.peek()? {
                b',' => true,
                b if b == close => false,
                _ => return None,
            };
            self.at += 1;
            if !more {
                return Some(n);
            }
            n += 2;
            self.space();
        }
    }
}
