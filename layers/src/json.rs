//! Writing text as a JSON string literal, byte for byte as `serde_json` writes it, eight
//! bytes a step.
//!
//! ```
//! use llm_context_layers::json::{push_str, to_string};
//!
//! let mut out = String::from("[");
//! push_str(&mut out, "line \"1\"\n\tcafé\u{1}");
//! assert_eq!(out, r#"["line \"1\"\n\tcafé\u0001""#);
//! assert_eq!(to_string("a\\b"), serde_json::to_string("a\\b").unwrap());
//! ```
//!
//! Tool output is JSON, logs and code: a quote or a newline every few dozen bytes.
//! `serde_json` looks at each byte in turn and hands each run between escapes to its
//! writer; here the next byte to escape is found a word at a time (bit tricks on a
//! `u64`, no `unsafe`), and the runs go into one string. What is written is the
//! same: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00XX` (lowercase hex) for the other
//! control characters, everything else as itself.

/// Appends `s` to `out` as a JSON string literal, quotes included, exactly as
/// `serde_json::to_string(s)` would write it. Every escaped byte is ASCII, so the runs
/// between escapes are whole characters of `s`: nothing is checked to be UTF-8 again.
pub fn push_str(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    // Room for the text, its quotes and a few escapes: most texts need no second growth.
    out.reserve(bytes.len() + bytes.len() / 16 + 2);
    out.push('"');
    let mut start = 0;
    while let Some(at) = next_escape(bytes, start) {
        out.push_str(&s[start..at]);
        push_escape(out, bytes[at]);
        start = at + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// `s` as a JSON string literal (see [`push_str`]).
pub fn to_string(s: &str) -> String {
    let mut out = String::new();
    push_str(&mut out, s);
    out
}

/// A byte repeated in every lane of a word.
const fn lanes(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// One high bit in each lane of `word` whose byte is written escaped (below 0x20, `"`,
/// `\`), exact at the lowest such lane: the subtractions borrow only into lanes above a
/// lane that matched, so the lanes above the first may be marked wrongly, never below.
#[inline]
fn escape_lanes(word: u64) -> u64 {
    const HIGH: u64 = lanes(0x80);
    // Below 0x20: subtracting 0x20 sets the high bit of a lane that had it clear.
    let control = word.wrapping_sub(lanes(0x20)) & !word;
    let quote = word ^ lanes(b'"');
    let quote = quote.wrapping_sub(lanes(1)) & !quote;
    let backslash = word ^ lanes(b'\\');
    let backslash = backslash.wrapping_sub(lanes(1)) & !backslash;
    (control | quote | backslash) & HIGH
}

/// Whether `serde_json` escapes byte `b` with two characters, and whether with six.
/// Comparisons only, no branch and no table, so that it vectorises.
#[inline(always)]
pub(crate) fn escapes(b: u8) -> (u8, u8) {
    let control = b < 0x20;
    // \b \t \n \f \r are 0x08, 0x09, 0x0a, 0x0c, 0x0d: 0x08..=0x0d but the vertical tab.
    let named = (b.wrapping_sub(0x08) < 6) & (b != 0x0b);
    let short = named | (b == b'"') | (b == b'\\');
    (u8::from(short), u8::from(control & !named))
}

/// The index of the first byte at or after `from` that is written escaped.
#[inline]
pub(crate) fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let mut words = rest.chunks_exact(8);
    let mut at = from;
    for word in words.by_ref() {
        let mut lane = [0; 8];
        lane.copy_from_slice(word);
        let found = escape_lanes(u64::from_le_bytes(lane));
        if found != 0 {
            // Little-endian: the lowest set bit is in the first byte that matched.
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| written_escaped(b))
        .map(|i| at + i)
}

/// Whether byte `b` is written escaped, as the estimate counts it ([`escapes`]).
#[inline]
fn written_escaped(b: u8) -> bool {
    let (short, long) = escapes(b);
    short | long != 0
}

/// Writes the escape of byte `b` (one that [`written_escaped`] says is written escaped).
fn push_escape(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match b {
        b'"' => '"',
        b'\\' => '\\',
        0x08 => 'b',
        0x0c => 'f',
        b'\n' => 'n',
        b'\r' => 'r',
        b'\t' => 't',
        _ => {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
            return;
        }
    };
    out.push('\\');
    out.push(short);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_json_of(s: &str) -> String {
        serde_json::to_string(s).unwrap()
    }

    #[test]
    fn every_byte_below_0x80_at_every_lane_and_in_the_tail() {
        for b in 0..0x80u8 {
            let c = char::from(b);
            for len in 0..20 {
                for at in 0..len {
                    let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    assert_eq!(
                        to_string(&s),
                        serde_json_of(&s),
                        "{b:#04x} at {at} of {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn runs_of_escapes_and_non_ascii_next_to_them() {
        for s in [
            "",
            "\"\"\"\"\"\"\"\"\"",
            "\\\\\\\\\\\\\\\\\\",
            "\u{1}\u{1f}\u{7f}\u{80}é中🎉\n",
            "{\"id\": 1, \"name\": \"caf\\u00e9\"}\n{\"id\": 2}",
            "\u{2028}\u{2029}",
        ] {
            let mut out = String::from("prefix");
            push_str(&mut out, s);
            assert_eq!(&out[..6], "prefix", "appends");
            assert_eq!(&out[6..], serde_json_of(s), "{s:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn writes_what_serde_json_writes(s in "[a-z \"\\\\\n\t\r\u{1}\u{8}\u{c}\u{1f}\u{7f}é中🎉/]{0,200}") {
            prop_assert_eq!(to_string(&s), serde_json_of(&s));
        }

        #[test]
        fn any_string_at_all(s in any::<String>()) {
            prop_assert_eq!(to_string(&s), serde_json_of(&s));
        }
    }
}
