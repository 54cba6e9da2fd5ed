//! A message's plain text: owned, or shared with whatever else holds the same text.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::{Content, Message, Text};
//!
//! // Text read from the wire or written by the caller is owned, as a `String` is.
//! let mut owned = Text::from("GET /api/orders 500");
//! assert!(!owned.is_shared());
//! owned.make_mut().push_str(" (retried)");
//! assert_eq!(owned, "GET /api/orders 500 (retried)");
//!
//! // A preview the stack made once and sends on every turn is shared: cloning the
//! // message does not copy it.
//! let preview: Arc<str> = Arc::from("{\"context_artifact\": \"art_…\"}");
//! let m = Message::tool_result("c1", "read_log", Text::from(preview.clone()));
//! let again = m.clone();
//! assert!(again.content.as_str().is_some_and(|t| std::ptr::eq(t, &*preview)));
//! assert_eq!(m.content, Content::from("{\"context_artifact\": \"art_…\"}"));
//! ```
//!
//! The two forms are one value: they compare, hash, print and serialize as the `str`
//! they hold, and a JSON string always reads as owned text.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Plain text, owned (`String`) or shared (`Arc<str>`); it dereferences to `str`.
///
/// The layers share the text they send unchanged on every turn, such as an offloaded
/// result's preview, so that a request of ten thousand messages is not a copy of every
/// preview its session made. Anything else is owned, and costs what a `String` costs.
#[derive(Clone)]
pub struct Text(Repr);

#[derive(Clone)]
enum Repr {
    Owned(String),
    Shared(Arc<str>),
}

impl Text {
    /// Empty text.
    pub const fn new() -> Self {
        Text(Repr::Owned(String::new()))
    }

    /// The text as a `str`.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Owned(s) => s,
            Repr::Shared(s) => s,
        }
    }

    /// Whether the text is shared (cloning it copies no bytes).
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Repr::Shared(_))
    }

    /// The text as a `String` to edit in place; shared text is copied into one first.
    pub fn make_mut(&mut self) -> &mut String {
        if let Repr::Shared(s) = &self.0 {
            self.0 = Repr::Owned(String::from(&**s));
        }
        match &mut self.0 {
            Repr::Owned(s) => s,
            Repr::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// Makes the text shared, so that cloning it copies no bytes: owned text is copied
    /// once into an `Arc<str>` (and its `String` freed).
    pub fn share(&mut self) {
        if let Repr::Owned(s) = &mut self.0 {
            self.0 = Repr::Shared(Arc::from(std::mem::take(s)));
        }
    }

    /// The text as a `String`: owned text is moved, shared text copied.
    pub fn into_string(self) -> String {
        match self.0 {
            Repr::Owned(s) => s,
            Repr::Shared(s) => String::from(&*s),
        }
    }
}

impl Default for Text {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(Repr::Owned(s))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(Repr::Owned(s.to_owned()))
    }
}

impl From<Arc<str>> for Text {
    fn from(s: Arc<str>) -> Self {
        Text(Repr::Shared(s))
    }
}

impl From<Text> for String {
    fn from(t: Text) -> Self {
        t.into_string()
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Text {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the `str`, so that both forms of one text hash alike (and `Borrow<str>` holds).
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Text::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of(t: &impl Hash) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn both_forms_of_one_text_are_one_value() {
        let owned = Text::from("línea\n\"uno\"");
        let shared = Text::from(Arc::<str>::from("línea\n\"uno\""));
        assert_eq!(owned, shared);
        assert_eq!(hash_of(&owned), hash_of(&shared));
        assert_eq!(hash_of(&owned), hash_of(&"línea\n\"uno\""));
        assert_eq!(
            serde_json::to_string(&owned).unwrap(),
            serde_json::to_string(&shared).unwrap()
        );
        assert_eq!(format!("{shared:?}"), format!("{:?}", "línea\n\"uno\""));
        assert_ne!(owned, Text::from("línea"));
    }

    #[test]
    fn a_shared_clone_copies_nothing_and_an_edit_copies_once() {
        let arc: Arc<str> = Arc::from("preview");
        let shared = Text::from(arc.clone());
        let clone = shared.clone();
        assert!(clone.is_shared());
        assert!(std::ptr::eq(clone.as_str(), &*arc));
        let mut edited = clone;
        edited.make_mut().push('!');
        assert!(!edited.is_shared());
        assert_eq!(edited, "preview!");
        assert_eq!(&*arc, "preview", "the shared text is left alone");
        assert_eq!(shared.into_string(), "preview");
    }

    #[test]
    fn json_reads_as_owned_text() {
        let t: Text = serde_json::from_str(r#""caf\u00e9\n""#).unwrap();
        assert!(!t.is_shared());
        assert_eq!(t, "café\n");
    }

    #[test]
    fn text_is_as_small_as_a_string() {
        assert_eq!(size_of::<Text>(), size_of::<String>());
    }
}
