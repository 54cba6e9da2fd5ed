//! Identifiers a summary must not lose, found without the model.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use crate::model::Message;

// One alternation, leftmost-first: at any position a URL wins over the path inside it,
// and a path over the words inside it.
static IDENTIFIER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        // URLs.
        r"(?P<url>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s<>`'\x22)\]}]+)",
        // E-mail addresses.
        r"|(?P<email>\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+)",
        // Absolute, home and relative paths with at least one slash.
        r"|(?P<path>(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]+)*|\b[\w.@+-]+(?:/[\w.@+-]+)+)",
        // Windows paths.
        r"|(?P<winpath>\b[A-Za-z]:\\[^\s<>`'\x22]+)",
        // Money, then numbers with units.
        r"|(?P<money>[$€£]\d+(?:[.,]\d+)*(?:/[A-Za-z]+)?)",
        r"|(?P<quantity>\b\d+(?:[.,]\d+)*\s?(?:%|(?:ns|µs|us|ms|s|sec|secs|seconds|min|mins|minutes|h|hours|d|days|B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|bytes|tokens|tok|req/s|rps|qps|Hz|kHz|MHz|GHz|°C|°F|USD|EUR|px|k|M)\b))",
        // ISO dates and times.
        r"|(?P<date>\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?)?)",
        // UUIDs, then words joined by _ or - that carry a digit (ENG-4412, call_7f3a),
        // then long hex (commits, hashes), then #123.
        r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)",
        r"|(?P<joined>\b[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+\b)",
        r"|(?P<hex>\b[0-9a-f]{7,64}\b)",
        r"|(?P<issue>#\d+\b)",
    ))
    .expect("the identifier pattern compiles")
});

/// Identifiers in `text`, in order of first appearance, without duplicates: URLs,
/// e-mail addresses, file paths, money and numbers with units, ISO dates, UUIDs, ids
/// such as `ENG-4412` or `call_7f3a`, hex digests and `#123` references.
///
/// ```
/// use llm_context_layers::summarize::extract_identifiers;
///
/// let found = extract_identifiers(
///     "ENG-4412: GET https://api.example.com/v1/orders took 1200 ms; see /var/log/orders.log",
/// );
/// assert_eq!(found, ["ENG-4412", "https://api.example.com/v1/orders", "1200 ms", "/var/log/orders.log"]);
/// ```
pub fn extract_identifiers(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    push_identifiers(text, &mut seen, &mut out);
    out
}

/// The identifiers of a span of messages: their text and their tool calls' arguments.
pub(crate) fn span_identifiers(messages: &[Message], max: usize) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for m in messages {
        push_identifiers(&m.text(), &mut seen, &mut out);
        for call in &m.tool_calls {
            push_identifiers(&call.arguments, &mut seen, &mut out);
        }
        if out.len() >= max {
            out.truncate(max);
            break;
        }
    }
    out
}

fn push_identifiers(text: &str, seen: &mut HashSet<String>, out: &mut Vec<String>) {
    for caps in IDENTIFIER.captures_iter(text) {
        let Some(m) = caps.get(0) else { continue };
        let mut found = m.as_str();
        if caps.name("url").is_some()
            || caps.name("path").is_some()
            || caps.name("winpath").is_some()
        {
            // Sentence punctuation is rarely part of a path or a URL.
            found = found.trim_end_matches(['.', ',', ';', ':', '!', '?']);
        }
        let keep = if caps.name("joined").is_some() {
            found.bytes().any(|b| b.is_ascii_digit())
                && found.bytes().any(|b| b.is_ascii_alphabetic())
        } else if caps.name("hex").is_some() {
            found.bytes().any(|b| b.is_ascii_digit())
                && found.bytes().any(|b| b.is_ascii_alphabetic())
        } else if caps.name("path").is_some() {
            // "and/or" is not a path; one with a leading slash or a dotted file name is.
            found.starts_with(['/', '~', '.'])
                || found.rsplit('/').next().is_some_and(|f| f.contains('.'))
        } else {
            true
        };
        if keep && found.len() > 1 && seen.insert(found.to_owned()) {
            out.push(found.to_owned());
        }
    }
}

/// `old` then `new`, without duplicates, keeping the newest `max`.
pub(crate) fn merge_facts(old: &[String], new: &[String], max: usize) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out: Vec<String> = Vec::with_capacity(old.len() + new.len());
    for f in old.iter().chain(new) {
        let f = f.trim();
        if !f.is_empty() && seen.insert(f.to_owned()) {
            out.push(f.to_owned());
        }
    }
    if out.len() > max {
        out.drain(..out.len() - max);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_kind() {
        let text = "Deploy 4f2a9c1 on 2026-11-29T12:00:00Z broke /api/orders (see src/orders/handler.rs \
                    and ./scripts/run.sh); p99 went to 1.5 s, disk at 93% on C:\\data\\db, \
                    cost $3.50/Mtok, mail oncall@example.com, ticket ENG-4412, #812, \
                    request 123e4567-e89b-12d3-a456-426614174000.";
        let found = extract_identifiers(text);
        for expected in [
            "4f2a9c1",
            "2026-11-29T12:00:00Z",
            "/api/orders",
            "src/orders/handler.rs",
            "./scripts/run.sh",
            "1.5 s",
            "93%",
            "C:\\data\\db",
            "$3.50/Mtok",
            "oncall@example.com",
            "ENG-4412",
            "#812",
            "123e4567-e89b-12d3-a456-426614174000",
        ] {
            assert!(
                found.iter().any(|f| f == expected),
                "{expected} not in {found:?}"
            );
        }
    }

    #[test]
    fn ordinary_words_are_not_identifiers() {
        assert!(
            extract_identifiers("read the log and/or ask the on-call person, well-known")
                .is_empty()
        );
    }

    #[test]
    fn merge_keeps_the_newest() {
        let old = vec!["a".to_owned(), "b".to_owned()];
        let new = vec!["b".to_owned(), "c".to_owned(), "d".to_owned()];
        assert_eq!(merge_facts(&old, &new, 3), ["b", "c", "d"]);
    }
}
