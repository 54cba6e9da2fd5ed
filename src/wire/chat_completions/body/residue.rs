//! What is kept beside the model for a faithful write-back of the messages received.

use std::fmt;
use std::hash::BuildHasher;

use foldhash::quality::RandomState;
use std::io::{self, Write};

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use llm_context_layers::Message;

/// What [`request_from_str`](super::request_from_str) keeps beside the messages so that
/// [`write_body`](super::write_body) loses nothing: for every message two digests that
/// recognise it among the sent messages, and for the messages that have any, what the
/// model does not represent (see the [module documentation](super)). No content is kept:
/// the context of a transcript of 10 MB of tool results is tens of kilobytes plus its
/// unknown fields.
#[derive(Clone, Default)]
pub struct BodyContext {
    /// The digests' keys, random for each context, so that no transcript can be written to
    /// make two different messages look the same.
    pub(super) keys: RandomState,
    /// One for each message received, in order, when any message has something kept
    /// (nothing to put back needs no matching, so most bodies have none).
    pub(super) digests: Vec<Digests>,
    /// How many leading system messages were received (the head is matched in place).
    pub(super) head: usize,
    /// What the model does not represent, for the messages that have any, by index
    /// (ascending).
    pub(super) kept: Vec<(usize, Kept)>,
}

/// What identifies a message for the mapping back: its head (role, name, tool-call id,
/// tool calls) and its content, each a 64-bit foldhash seeded at random for each context
/// (as the Messages writer's digests; SipHash was a twentieth of an agent's request on
/// this route). In-process only, never stored or shown, so a transcript cannot be written
/// against the seed; and a collision would only give one message another's kept fields.
/// A message must match on both to be taken as unchanged, and a rewritten tool result on
/// its head and the stack's own preview or stub format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Digests {
    pub(super) head: u64,
    pub(super) content: u64,
}

impl Digests {
    pub(super) fn of(keys: &RandomState, m: &Message) -> Self {
        Self {
            head: keys.hash_one((m.role, m.name(), &m.tool_call_id, &m.tool_calls)),
            content: keys.hash_one(&m.content),
        }
    }
}

/// The digests' seed is left out: it is what keeps them from being chosen.
impl fmt::Debug for BodyContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyContext")
            .field("digests", &self.digests)
            .field("head", &self.head)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl BodyContext {
    /// What message `i` had beside the model.
    pub(super) fn kept(&self, i: usize) -> Option<&Kept> {
        self.kept
            .binary_search_by_key(&i, |(j, _)| *j)
            .ok()
            .map(|k| &self.kept[k].1)
    }
}

/// What one message had that the model does not represent.
#[derive(Clone, Debug, Default)]
pub(super) struct Kept {
    /// Its role was spelt `developer` (read as `system`).
    pub(super) developer: bool,
    /// How its content came, when the model would write it otherwise.
    pub(super) content: ContentAs,
    /// The fields the model has no place for, and known fields the model writes otherwise
    /// (`"name": null`, `"tool_calls": []`).
    pub(super) members: Members,
    /// One for each content part when any part has something of its own, else empty.
    pub(super) parts: Vec<PartKept>,
    /// One for each tool call when any call has something of its own, else empty.
    pub(super) calls: Vec<CallKept>,
}

/// No message's kept fields.
pub(super) static NOTHING: Kept = Kept {
    developer: false,
    content: ContentAs::Model,
    members: Members(Vec::new()),
    parts: Vec::new(),
    calls: Vec::new(),
};

impl Kept {
    pub(super) fn is_empty(&self) -> bool {
        !self.developer
            && self.content == ContentAs::Model
            && self.members.is_empty()
            && self.parts.is_empty()
            && self.calls.is_empty()
    }
}

/// How a message's content came.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum ContentAs {
    /// As the model writes it.
    #[default]
    Model,
    /// Absent (the model has empty text).
    Absent,
    /// `null` where the model writes `""`: on a message without tool calls.
    Null,
    /// This JSON text: empty content the model writes as `null`, on a message with tool
    /// calls (`""`, `[]`).
    Given(Box<[u8]>),
}

/// What one content part had beside the model.
#[derive(Clone, Debug, Default)]
pub(super) struct PartKept {
    /// The part's own other fields (`cache_control`, …).
    pub(super) members: Members,
    /// An image part's `image_url` fields other than `url` and a string `detail`.
    pub(super) image: Members,
}

impl PartKept {
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty() && self.image.is_empty()
    }
}

/// What one tool call had beside the model.
#[derive(Clone, Debug, Default)]
pub(super) struct CallKept {
    /// `"type": "function"` is not written: it was absent, or another value (in
    /// `members`).
    pub(super) no_type: bool,
    /// The model's `arguments` are not written: they were absent, or came as text the
    /// model writes otherwise (in `function`).
    pub(super) no_arguments: bool,
    /// The call's other fields.
    pub(super) members: Members,
    /// The `function` object's other fields.
    pub(super) function: Members,
}

/// No tool call's kept fields.
pub(super) static NO_CALL: CallKept = CallKept {
    no_type: false,
    no_arguments: false,
    members: Members(Vec::new()),
    function: Members(Vec::new()),
};

/// No content part's kept fields.
pub(super) static NO_PART: PartKept = PartKept {
    members: Members(Vec::new()),
    image: Members(Vec::new()),
};

impl CallKept {
    pub(super) fn is_empty(&self) -> bool {
        !self.no_type && !self.no_arguments && self.members.is_empty() && self.function.is_empty()
    }
}

/// Members of a JSON object as text, `"key":value` joined by commas: written after the
/// members the model writes.
#[derive(Clone, Default, PartialEq, Eq)]
pub(super) struct Members(pub(super) Vec<u8>);

impl fmt::Debug for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Members")
            .field(&String::from_utf8_lossy(&self.0))
            .finish()
    }
}

impl Members {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn key(&mut self, key: &str) {
        if !self.0.is_empty() {
            self.0.push(b',');
        }
        // Writing to a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut self.0, key);
        self.0.push(b':');
    }

    /// Adds a member whose value is JSON text as it came.
    pub(super) fn push_raw(&mut self, key: &str, raw: &RawValue) {
        self.key(key);
        self.0.extend_from_slice(raw.get().as_bytes());
    }

    /// Adds a member.
    pub(super) fn push(&mut self, key: &str, value: &Value) {
        self.key(key);
        let _ = serde_json::to_writer(&mut self.0, value);
    }

    /// Adds every member of `obj`.
    pub(super) fn extend(&mut self, obj: &Map<String, Value>) {
        for (k, v) in obj {
            self.push(k, v);
        }
    }

    /// Writes `,` and the members, when there are any (every object the model writes has
    /// a member before them).
    pub(super) fn write_after(&self, out: &mut impl Write) -> io::Result<()> {
        if !self.0.is_empty() {
            out.write_all(b",")?;
            out.write_all(&self.0)?;
        }
        Ok(())
    }
}
