//! The one way a string from outside (a server's body, header or message, a transport
//! error, a configured URL) reaches an error, a log line or `Debug` output.
//!
//! [`Redactor::text`] removes the client's secrets (its API key, and the password of its
//! base URL) wherever they appear, written plainly or escaped: each character may be a
//! JSON `\uXXXX` escape (behind any number of backslashes, so a JSON document inside a
//! JSON string is covered too), `\/`, or percent-encoded. It masks anything shaped like
//! an OpenAI or Anthropic key (`sk-` and 16 or more key characters, escaped or not),
//! since a server may echo a key it was given by someone else. It writes control and
//! bidirectional-override characters as escapes (`\u{1b}`), so a server cannot drive the
//! terminal an error is printed on, and it bounds the length of what it returns.

use secrecy::{ExposeSecret, SecretString};

/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[REDACTED]";
/// What a key-shaped run is replaced with.
const KEY_SHAPE_REDACTED: &str = "sk-[REDACTED]";
/// What a URL's password is replaced with (as the Redis stores write it).
const URL_PASSWORD: &str = "***";
/// The fewest key characters after `sk-` that make a key shape. Real keys have far more;
/// server-masked ones (`sk-abc***xyz`) break the run before it.
const KEY_SHAPE_MIN: usize = 16;

/// The most backslashes looked at before an escape: each level of JSON inside a JSON
/// string doubles them. Bounded so that a body of backslashes costs the same at every
/// position; a longer run still matches from its last backslashes.
const MAX_BACKSLASHES: usize = 64;

/// The most characters kept of a provider's message or an unparsed body.
pub(crate) const TEXT_LIMIT: usize = 2_048;
/// The most characters kept of a short value: a request id, an error type or code.
pub(crate) const SHORT_LIMIT: usize = 256;

/// The secrets of one client, and the rules above. See the [module docs](self).
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<SecretString>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor for a client with `api_key` calling `base_url`: the key, and the
    /// password of the URL (or its user, when it has no password: then the user part is
    /// the credential), percent-decoded.
    pub(crate) fn new(api_key: Option<&SecretString>, base_url: &str) -> Self {
        let mut secrets: Vec<SecretString> = api_key
            .filter(|k| !k.expose_secret().is_empty())
            .cloned()
            .into_iter()
            .collect();
        if let Some(credential) = userinfo_credential(base_url) {
            secrets.push(credential);
        }
        Self { secrets }
    }

    /// The same redactor, removing `secret` too (a second credential: Anthropic's
    /// gateway token).
    pub(crate) fn with_secret(mut self, secret: Option<&SecretString>) -> Self {
        if let Some(s) = secret.filter(|s| !s.expose_secret().is_empty()) {
            self.secrets.push(s.clone());
        }
        self
    }

    /// `text` with the secrets removed, key shapes masked, control characters escaped,
    /// and at most `limit` characters of it kept (then `… (N bytes in all)`).
    pub(crate) fn text(&self, text: &str, limit: usize) -> String {
        let mut out = String::with_capacity(text.len().min(limit.saturating_mul(2)));
        let mut shown = 0;
        let mut pos = 0;
        while let Some(c) = text[pos..].chars().next() {
            if shown >= limit {
                out.push_str(&format!("… ({} bytes in all)", text.len()));
                break;
            }
            // A secret starting before the limit is replaced whole, never cut in two.
            if let Some(end) = self.secret_at(text, pos) {
                out.push_str(REDACTED);
                shown += REDACTED.len();
                pos = end;
            } else if let Some(end) = key_shape_at(text, pos) {
                out.push_str(KEY_SHAPE_REDACTED);
                shown += KEY_SHAPE_REDACTED.len();
                pos = end;
            } else {
                if is_unsafe_to_show(c) {
                    out.extend(c.escape_default());
                } else {
                    out.push(c);
                }
                shown += 1;
                pos += c.len_utf8();
            }
        }
        out
    }

    /// A URL as it may be shown: its password masked (`user:***@`), then as [`text`].
    ///
    /// [`text`]: Redactor::text
    pub(crate) fn url(&self, url: &str) -> String {
        self.text(&mask_userinfo(url), TEXT_LIMIT)
    }

    fn secret_at(&self, text: &str, pos: usize) -> Option<usize> {
        self.secrets
            .iter()
            .find_map(|s| match_at(text, pos, s.expose_secret()))
    }
}

/// `url` with the password of its userinfo replaced by `***` (a userinfo without a
/// password is the credential itself, and is replaced whole). Anything else is left as
/// written.
pub(crate) fn mask_userinfo(url: &str) -> String {
    let Some((start, userinfo)) = split_userinfo(url) else {
        return url.to_owned();
    };
    let masked = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:{URL_PASSWORD}"),
        None => URL_PASSWORD.to_owned(),
    };
    format!(
        "{}{masked}{}",
        &url[..start],
        &url[start + userinfo.len()..]
    )
}

/// Where the userinfo of `url` starts, and the userinfo, when it has a non-empty one.
fn split_userinfo(url: &str) -> Option<(usize, &str)> {
    let start = url.find("://")? + 3;
    let authority_len = url[start..]
        .find(['/', '?', '#'])
        .unwrap_or(url.len() - start);
    let at = url[start..start + authority_len].rfind('@')?;
    let userinfo = &url[start..start + at];
    (!userinfo.is_empty()).then_some((start, userinfo))
}

/// The credential in a URL's userinfo, percent-decoded: the password, or the user when
/// there is no password.
fn userinfo_credential(url: &str) -> Option<SecretString> {
    let (_, userinfo) = split_userinfo(url)?;
    let raw = match userinfo.split_once(':') {
        Some((_, password)) => password,
        None => userinfo,
    };
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
    (!decoded.is_empty()).then(|| SecretString::from(decoded.into_owned()))
}

/// Control characters, and the bidirectional overrides that reorder what a terminal
/// shows (the "trojan source" characters).
fn is_unsafe_to_show(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Where `secret` written at `pos` (each character plainly or escaped) ends.
fn match_at(text: &str, pos: usize, secret: &str) -> Option<usize> {
    let mut at = pos;
    for want in secret.chars() {
        let plain = text[at..].chars().next()?;
        if plain == want {
            at += plain.len_utf8();
            continue;
        }
        match decode_at(text, at) {
            Some((c, end)) if c == want => at = end,
            _ => return None,
        }
    }
    Some(at)
}

/// Where a key shape (`sk-` and at least [`KEY_SHAPE_MIN`] key characters, each plainly
/// or escaped) written at `pos` ends.
fn key_shape_at(text: &str, pos: usize) -> Option<usize> {
    let mut at = match_at(text, pos, "sk-")?;
    let mut run = 0;
    while let Some((c, end)) = char_at(text, at) {
        if !(c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            break;
        }
        run += 1;
        at = end;
    }
    (run >= KEY_SHAPE_MIN).then_some(at)
}

/// The character written at `pos`, escaped or plainly, and where it ends.
fn char_at(text: &str, pos: usize) -> Option<(char, usize)> {
    decode_at(text, pos).or_else(|| {
        let c = text[pos..].chars().next()?;
        Some((c, pos + c.len_utf8()))
    })
}

/// The character an escape at `pos` stands for, and where the escape ends: backslashes
/// then `uXXXX` (a surrogate pair as two such escapes), backslashes then `/`, `"` or
/// `'`, or a percent-encoded UTF-8 sequence. `None` when there is no escape at `pos`.
fn decode_at(text: &str, pos: usize) -> Option<(char, usize)> {
    let bytes = text.as_bytes();
    match bytes.get(pos)? {
        b'\\' => {
            let (unit, end) = backslash_u(bytes, pos)?;
            match unit {
                Unit::Char(c) => Some((c, end)),
                Unit::High(high) => {
                    let (Unit::Low(low), end) = backslash_u(bytes, end)? else {
                        return None;
                    };
                    let c =
                        0x10000 + ((u32::from(high) - 0xd800) << 10) + (u32::from(low) - 0xdc00);
                    Some((char::from_u32(c)?, end))
                }
                Unit::Low(_) => None,
            }
        }
        b'%' => {
            let first = hex(bytes, pos + 1, 2)? as u8;
            let len = utf8_len(first)?;
            let mut buf = [first, 0, 0, 0];
            for (i, slot) in buf.iter_mut().enumerate().take(len).skip(1) {
                let at = pos + 3 * i;
                if bytes.get(at) != Some(&b'%') {
                    return None;
                }
                *slot = hex(bytes, at + 1, 2)? as u8;
            }
            let c = std::str::from_utf8(&buf[..len]).ok()?.chars().next()?;
            Some((c, pos + 3 * len))
        }
        _ => None,
    }
}

/// One escaped UTF-16 unit.
enum Unit {
    Char(char),
    High(u16),
    Low(u16),
}

/// A run of backslashes at `pos` followed by `uXXXX`, `/`, `"` or `'`.
fn backslash_u(bytes: &[u8], pos: usize) -> Option<(Unit, usize)> {
    // Bounded, so that a body of backslashes costs the same at every position.
    let run = bytes[pos..]
        .iter()
        .take(MAX_BACKSLASHES + 1)
        .take_while(|b| **b == b'\\')
        .count();
    if run == 0 || run > MAX_BACKSLASHES {
        return None;
    }
    let after = pos + run;
    match bytes.get(after)? {
        b'u' => {
            let unit = u16::try_from(hex(bytes, after + 1, 4)?).ok()?;
            let end = after + 5;
            Some(match unit {
                0xd800..=0xdbff => (Unit::High(unit), end),
                0xdc00..=0xdfff => (Unit::Low(unit), end),
                _ => (Unit::Char(char::from_u32(u32::from(unit))?), end),
            })
        }
        &b @ (b'/' | b'"' | b'\'') => Some((Unit::Char(char::from(b)), after + 1)),
        _ => None,
    }
}

/// `digits` hexadecimal digits at `pos`.
fn hex(bytes: &[u8], pos: usize, digits: usize) -> Option<u32> {
    let s = bytes.get(pos..pos + digits)?;
    if !s.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // ASCII hex digits only, so this is valid UTF-8 and a valid number.
    u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

/// The length of the UTF-8 sequence a byte starts, if it starts one.
fn utf8_len(first: u8) -> Option<usize> {
    match first {
        0x00..=0x7f => Some(1),
        0xc2..=0xdf => Some(2),
        0xe0..=0xef => Some(3),
        0xf0..=0xf4 => Some(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "lk-local-9f8e7d6c5b4a39281706";

    fn redactor() -> Redactor {
        Redactor::new(
            Some(&SecretString::from(KEY)),
            "http://me:p%40ss@127.0.0.1/v1",
        )
    }

    fn clean(text: &str) -> String {
        redactor().text(text, TEXT_LIMIT)
    }

    #[test]
    fn the_key_in_every_form() {
        for written in [
            KEY.to_owned(),
            "\\u006ck-local-9f8e7d6c5b4a39281706".to_owned(),
            "\\\\u006Ck\\u002Dlocal-9f8e7d6c5b4a39281706".to_owned(),
            "lk%2Dlocal%2d9f8e7d6c5b4a39281706".to_owned(),
            KEY.chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect(),
        ] {
            assert_eq!(
                clean(&format!("key <{written}> refused")),
                "key <[REDACTED]> refused",
                "{written}"
            );
        }
        // A near miss stays as it is.
        assert_eq!(
            clean("lk-local-9f8e7d6c5b4a3928170"),
            "lk-local-9f8e7d6c5b4a3928170"
        );
    }

    #[test]
    fn the_url_password_in_every_form() {
        assert_eq!(
            clean("p@ss and p%40ss and p\\u0040ss"),
            "[REDACTED] and [REDACTED] and [REDACTED]"
        );
        assert_eq!(
            redactor().url("http://me:p%40ss@127.0.0.1/v1"),
            "http://me:***@127.0.0.1/v1"
        );
    }

    #[test]
    fn key_shapes_are_masked_escaped_or_not() {
        let none = Redactor::default();
        assert_eq!(
            none.text("key sk-ant-api03-AAAAAAAAAAAAAAAAAAAA is bad", TEXT_LIMIT),
            "key sk-[REDACTED] is bad"
        );
        assert_eq!(
            none.text("key \\u0073k-ant-api03-AAAAAAAAAAAAAAAAAAAA", TEXT_LIMIT),
            "key sk-[REDACTED]"
        );
        // Already masked by the server, and short runs: left alone.
        assert_eq!(none.text("sk-abc***wxyz", TEXT_LIMIT), "sk-abc***wxyz");
        assert_eq!(none.text("task-list sk-", TEXT_LIMIT), "task-list sk-");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            clean("a\u{1b}[2Jb\r\nc\u{202e}d"),
            "a\\u{1b}[2Jb\\r\\nc\\u{202e}d"
        );
    }

    #[test]
    fn long_text_is_cut_but_never_inside_a_secret() {
        let text = format!("{}{KEY}{}", "x".repeat(10), "y".repeat(100));
        let shown = redactor().text(&text, 12);
        assert_eq!(
            shown,
            format!("xxxxxxxxxx[REDACTED]… ({} bytes in all)", text.len())
        );
        assert_eq!(redactor().text("short", 5), "short");
    }

    #[test]
    fn urls_without_a_password() {
        assert_eq!(mask_userinfo("http://token@h/v1"), "http://***@h/v1");
        assert_eq!(mask_userinfo("http://h/v1?a=b@c"), "http://h/v1?a=b@c");
        assert_eq!(mask_userinfo("http://h:8080/v1"), "http://h:8080/v1");
        assert_eq!(mask_userinfo("not a url"), "not a url");
        // The user part alone is the credential.
        let r = Redactor::new(None, "http://token-abc@h/v1");
        assert_eq!(r.text("token-abc", TEXT_LIMIT), REDACTED);
    }

    #[test]
    fn broken_escapes_are_text() {
        let none = Redactor::default();
        for text in ["\\u12", "\\ud800x", "\\udc00", "%e2%82", "%zz", "\\", "%"] {
            assert_eq!(none.text(text, TEXT_LIMIT), text, "{text}");
        }
        // However many backslashes (each level of nesting doubles them).
        let deep = format!(
            "{}u0073k-ant-api03-AAAAAAAAAAAAAAAAAAAA",
            "\\".repeat(1_000)
        );
        assert_eq!(
            none.text(&deep, 10_000),
            format!("{}sk-[REDACTED]", "\\".repeat(1_000 - MAX_BACKSLASHES))
        );
    }
}
