//! The proxy's checks of a body's typed fields: a field of the wrong JSON type is refused
//! with its path and the type it must have, before anything is sent, rather than read as
//! absent and the request answered as if the client had not sent it. `{"stream": "true"}`
//! is refused as "`stream`: must be a boolean, not a string".

use std::fmt;

use serde_json::Value;

/// What is wrong with a body, and where: answered 400 in the route's error shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    /// Where, as a JSON path (`messages[2].content[1].text`); empty for the whole body.
    pub(crate) path: String,
    /// What is wrong, to follow the path (`must be a string, not a number`).
    pub(crate) reason: String,
}

impl Invalid {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// A reason about the whole body.
    pub(crate) fn body(reason: impl Into<String>) -> Self {
        Self::new("", reason)
    }

    /// The same error, found inside `outer` (`messages[2]`).
    pub(crate) fn within(mut self, outer: &str) -> Self {
        self.path = match self.path.chars().next() {
            None => outer.to_owned(),
            Some('[') => format!("{outer}{}", self.path),
            Some(_) => format!("{outer}.{}", self.path),
        };
        self
    }

    /// The same error, found in item `i` of the array `name`.
    pub(crate) fn item(self, name: &str, i: usize) -> Self {
        self.within(&format!("{name}[{i}]"))
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "`{}`: {}", self.path, self.reason)
        }
    }
}

/// The JSON type a field must have.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Bool,
    Number,
    /// An integer that fits an `i64` (a seed).
    Integer,
    /// A token count: an integer from 0 to `u32::MAX`.
    Count,
    Object,
    /// An array of strings.
    Strings,
    /// A string or an array of strings (Chat Completions' `stop`).
    StringOrStrings,
}

impl Kind {
    fn expected(self) -> &'static str {
        match self {
            Kind::Bool => "a boolean",
            Kind::Number => "a number",
            Kind::Integer => "an integer",
            Kind::Count => "an integer from 0 to 4294967295",
            Kind::Object => "an object",
            Kind::Strings => "an array of strings",
            Kind::StringOrStrings => "a string or an array of strings",
        }
    }

    fn holds(self, v: &Value) -> bool {
        match self {
            Kind::Bool => v.is_boolean(),
            Kind::Number => v.is_number(),
            Kind::Integer => v.is_i64(),
            Kind::Count => v.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
            Kind::Object => v.is_object(),
            Kind::Strings => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Kind::StringOrStrings => v.is_string() || Kind::Strings.holds(v),
        }
    }
}

/// How a value is named in a refusal: its JSON type, and the number itself (a count of
/// `1.8e19` or `-1` is wrong by its value, not its type).
pub(crate) fn what(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// `v` (at `path`) as `kind` requires, or the refusal naming both. An array of strings
/// with one item wrong is refused at that item.
pub(crate) fn value(path: &str, v: &Value, kind: Kind) -> Result<(), Invalid> {
    if kind.holds(v) {
        return Ok(());
    }
    if let (Kind::Strings | Kind::StringOrStrings, Value::Array(items)) = (kind, v)
        && let Some((i, bad)) = items.iter().enumerate().find(|(_, s)| !s.is_string())
    {
        return Err(Invalid::new(
            format!("{path}[{i}]"),
            format!("must be a string, not {}", what(bad)),
        ));
    }
    Err(Invalid::new(
        path,
        format!("must be {}, not {}", kind.expected(), what(v)),
    ))
}

/// The top-level field `name` (`found` in the body), when present and not `null`, as
/// `kind` requires.
pub(crate) fn field(found: Option<&Value>, name: &str, kind: Kind) -> Result<(), Invalid> {
    match found {
        None | Some(Value::Null) => Ok(()),
        Some(v) => value(name, v, kind),
    }
}

/// The string at `key` of a block or object: required, and a string (the error's path
/// is `key`, for the caller to put [`within`](Invalid::within) the block's).
pub(crate) fn string<'v>(obj: &'v Value, key: &str) -> Result<&'v str, Invalid> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(Invalid::new(key, "is required (a string)")),
        Some(other) => Err(Invalid::new(
            key,
            format!("must be a string, not {}", what(other)),
        )),
    }
}

/// A tool choice naming a tool the request does not declare is refused: the provider
/// would refuse it, or call a tool the client cannot run.
pub(crate) fn declared<'n>(
    path: &str,
    name: &str,
    mut tools: impl Iterator<Item = &'n str>,
) -> Result<(), Invalid> {
    if tools.any(|t| t == name) {
        Ok(())
    } else {
        Err(Invalid::new(
            path,
            format!("names the tool {name:?}, which is not among `tools`"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refusal_names_the_path_the_type_wanted_and_the_type_given() {
        let e = value("stream", &json!("true"), Kind::Bool).unwrap_err();
        assert_eq!(e.to_string(), "`stream`: must be a boolean, not a string");
        let e = value(
            "max_tokens",
            &json!(18_446_744_073_709_551_615u64),
            Kind::Count,
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "`max_tokens`: must be an integer from 0 to 4294967295, not the number \
             18446744073709551615"
        );
        let e = value("stop_sequences", &json!(["a", 1]), Kind::Strings).unwrap_err();
        assert_eq!(e.path, "stop_sequences[1]");
        assert_eq!(
            Invalid::new("text", "must be a string")
                .item("content", 1)
                .item("messages", 2)
                .path,
            "messages[2].content[1].text"
        );
    }

    #[test]
    fn each_kind_takes_its_values_and_absence() {
        for (v, kind) in [
            (json!(true), Kind::Bool),
            (json!(0.2), Kind::Number),
            (json!(-7), Kind::Integer),
            (json!(4_294_967_295u32), Kind::Count),
            (json!({}), Kind::Object),
            (json!([]), Kind::Strings),
            (json!("END"), Kind::StringOrStrings),
        ] {
            assert_eq!(value("f", &v, kind), Ok(()), "{v}");
        }
        for (v, kind) in [
            (json!(1), Kind::Bool),
            (json!("1"), Kind::Number),
            (json!(1.5), Kind::Integer),
            (json!(u64::MAX), Kind::Integer),
            (json!(4_294_967_296u64), Kind::Count),
            (json!(-1), Kind::Count),
            (json!([]), Kind::Object),
            (json!("END"), Kind::Strings),
        ] {
            assert!(value("f", &v, kind).is_err(), "{v}");
        }
        assert_eq!(field(Some(&Value::Null), "a", Kind::Bool), Ok(()));
        assert_eq!(field(None, "b", Kind::Bool), Ok(()));
    }
}
