//! OpenAI Chat Completions request bodies ↔ [`ChatRequest`].
//!
//! ```
//! use llm_context::wire::chat_completions::body::{body_from_request, request_from_body};
//! use serde_json::json;
//!
//! let body = json!({
//!     "model": "gpt-5.4",
//!     "temperature": 0,
//!     "messages": [
//!         {"role": "developer", "content": "Be terse."},
//!         {"role": "user", "content": "hi", "x_trace": {"id": 7}},
//!         {"role": "assistant", "content": "hello", "refusal": null}
//!     ]
//! });
//! let (request, ctx) = request_from_body(&body).unwrap();
//! assert_eq!(request.messages.len(), 3);
//! // Unchanged messages come back equal as JSON: unknown fields and the `developer`
//! // role included.
//! assert_eq!(body_from_request(&request, &ctx), body);
//! ```
//!
//! The mapping keeps what it does not model, and only that. Every top-level field other
//! than `model`, `messages` and `tools` is carried in [`GenerationParams`] (the common ones
//! typed, the rest in `extra`). Each message is read once, straight into the neutral
//! [`Message`]; a [`BodyContext`] keeps beside the messages what the model has no place
//! for — fields it does not know (`refusal`, `audio`, vendor `x_*` fields, fields added
//! after this crate was written) as their JSON text, a `developer` role, an explicit
//! `null`, tool-call arguments that came as something other than text —
//! and, when any message has such a field, two digests a message to recognise it among
//! the sent messages. It keeps no copy of any content.
//!
//! A message the layers did not change is written from the model with those fields put
//! back, so it comes back equal as JSON to what came (the same members with the same
//! values; an unknown field's value byte for byte), though not with the same key order or
//! whitespace. A changed message (a cleared or offloaded tool result) keeps its other
//! fields and gets the new content.
//!
//! Tool-call arguments are held as the text that came ([`ToolCall::arguments`]), so they
//! are written back byte for byte, broken JSON too; the client (`OpenAi`, feature
//! `openai`) sends and reads them as that same text. This module is compiled with the `openai` feature or the
//! `cli` feature: the command-line tool reads and writes request bodies with it, with or
//! without the client.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::io::{self, Write};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::params::{tool_choice_from_wire, tool_choice_to_wire};
use llm_context_layers::prefix::leading_system_end;
use llm_context_layers::{
    ChatRequest, Content, ContentPart, GenerationParams, Message, Role, ToolCall, ToolSpec,
    WireFormat,
};

/// A request body that does not have the shape the provider defines.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
#[non_exhaustive]
pub struct WireError {
    /// Where in the body, as a JSON path (`messages[3].role`).
    pub path: String,
    /// What is wrong.
    pub reason: String,
    /// The text is not JSON at all (from [`request_from_str`]).
    syntax: bool,
}

impl WireError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
            syntax: false,
        }
    }

    /// Whether the body is not JSON at all, rather than JSON of the wrong shape.
    pub fn is_syntax(&self) -> bool {
        self.syntax
    }

    /// A `serde_json` error from reading `path`: a syntax error, or the wrong shape.
    fn json(path: &str, e: &serde_json::Error, shape: &str) -> Self {
        match e.classify() {
            serde_json::error::Category::Data => Self::new(path, shape),
            _ => Self {
                syntax: true,
                ..Self::new(path, format!("not valid JSON: {e}"))
            },
        }
    }
}

/// What [`request_from_str`] keeps beside the messages so that [`write_body`] loses
/// nothing: for every message two digests that recognise it among the sent messages, and
/// for the messages that have any, what the model does not represent (see the [module
/// documentation](self)). No content is kept: the context of a transcript of 10 MB of
/// tool results is tens of kilobytes plus its unknown fields.
#[derive(Clone, Debug, Default)]
pub struct BodyContext {
    /// The digests' keys, random for each context, so that no transcript can be written to
    /// make two different messages look the same.
    keys: RandomState,
    /// One for each message received, in order, when any message has something kept
    /// (nothing to put back needs no matching, so most bodies have none).
    digests: Vec<Digests>,
    /// How many leading system messages were received (the head is matched in place).
    head: usize,
    /// What the model does not represent, for the messages that have any, by index
    /// (ascending).
    kept: Vec<(usize, Kept)>,
}

/// What identifies a message for the mapping back: its head (role, name, tool-call id,
/// tool calls) and its content, each a keyed SipHash-1-3 (`RandomState`). In-process
/// only, never stored; a message must match on both (128 bits) to be taken as unchanged,
/// and a rewritten tool result on its head and the stack's own preview or stub format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Digests {
    head: u64,
    content: u64,
}

impl Digests {
    fn of(keys: &RandomState, m: &Message) -> Self {
        Self {
            head: keys.hash_one((m.role, m.name(), &m.tool_call_id, &m.tool_calls)),
            content: keys.hash_one(&m.content),
        }
    }
}

impl BodyContext {
    /// What message `i` had beside the model.
    fn kept(&self, i: usize) -> Option<&Kept> {
        self.kept
            .binary_search_by_key(&i, |(j, _)| *j)
            .ok()
            .map(|k| &self.kept[k].1)
    }
}

/// What one message had that the model does not represent.
#[derive(Clone, Debug, Default)]
struct Kept {
    /// Its role was spelt `developer` (read as `system`).
    developer: bool,
    /// How its content came, when the model would write it otherwise.
    content: ContentAs,
    /// The fields the model has no place for, and known fields the model writes otherwise
    /// (`"name": null`, `"tool_calls": []`).
    members: Members,
    /// One for each content part when any part has something of its own, else empty.
    parts: Vec<PartKept>,
    /// One for each tool call when any call has something of its own, else empty.
    calls: Vec<CallKept>,
}

/// No message's kept fields.
static NOTHING: Kept = Kept {
    developer: false,
    content: ContentAs::Model,
    members: Members(Vec::new()),
    parts: Vec::new(),
    calls: Vec::new(),
};

impl Kept {
    fn is_empty(&self) -> bool {
        !self.developer
            && self.content == ContentAs::Model
            && self.members.is_empty()
            && self.parts.is_empty()
            && self.calls.is_empty()
    }
}

/// How a message's content came.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum ContentAs {
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
struct PartKept {
    /// The part's own other fields (`cache_control`, …).
    members: Members,
    /// An image part's `image_url` fields other than `url` and a string `detail`.
    image: Members,
}

impl PartKept {
    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.image.is_empty()
    }
}

/// What one tool call had beside the model.
#[derive(Clone, Debug, Default)]
struct CallKept {
    /// `"type": "function"` is not written: it was absent, or another value (in
    /// `members`).
    no_type: bool,
    /// The model's `arguments` are not written: they were absent, or came as text the
    /// model writes otherwise (in `function`).
    no_arguments: bool,
    /// The call's other fields.
    members: Members,
    /// The `function` object's other fields.
    function: Members,
}

/// No tool call's kept fields.
static NO_CALL: CallKept = CallKept {
    no_type: false,
    no_arguments: false,
    members: Members(Vec::new()),
    function: Members(Vec::new()),
};

/// No content part's kept fields.
static NO_PART: PartKept = PartKept {
    members: Members(Vec::new()),
    image: Members(Vec::new()),
};

impl CallKept {
    fn is_empty(&self) -> bool {
        !self.no_type && !self.no_arguments && self.members.is_empty() && self.function.is_empty()
    }
}

/// Members of a JSON object as text, `"key":value` joined by commas: written after the
/// members the model writes.
#[derive(Clone, Default, PartialEq, Eq)]
struct Members(Vec<u8>);

impl fmt::Debug for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Members")
            .field(&String::from_utf8_lossy(&self.0))
            .finish()
    }
}

impl Members {
    fn is_empty(&self) -> bool {
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
    fn push_raw(&mut self, key: &str, raw: &RawValue) {
        self.key(key);
        self.0.extend_from_slice(raw.get().as_bytes());
    }

    /// Adds a member.
    fn push(&mut self, key: &str, value: &Value) {
        self.key(key);
        let _ = serde_json::to_writer(&mut self.0, value);
    }

    /// Adds every member of `obj`.
    fn extend(&mut self, obj: &Map<String, Value>) {
        for (k, v) in obj {
            self.push(k, v);
        }
    }

    /// Writes `,` and the members, when there are any (every object the model writes has
    /// a member before them).
    fn write_after(&self, out: &mut impl Write) -> io::Result<()> {
        if !self.0.is_empty() {
            out.write_all(b",")?;
            out.write_all(&self.0)?;
        }
        Ok(())
    }
}

/// Reads an OpenAI Chat Completions request body. The same reading as
/// [`request_from_str`], which a caller holding the body's text should prefer: the tree is
/// written to text here and read from it.
pub fn request_from_body(body: &Value) -> Result<(ChatRequest, BodyContext), WireError> {
    request_from_str(&body.to_string())
}

/// Reads an OpenAI Chat Completions request body from its text in one pass, each message
/// straight into the model (no JSON tree of the body or of a message), with what the model
/// does not represent kept beside it: the command-line tool reads transcripts of hundreds
/// of megabytes this way, at about twice their size in memory.
///
/// ```
/// use llm_context::wire::chat_completions::body::{request_from_str, write_body};
///
/// let text = r#"{"model": "m", "messages": [{"role": "user", "content": "hi", "x_note": 1}]}"#;
/// let (request, ctx) = request_from_str(text).unwrap();
/// let mut out = Vec::new();
/// write_body(&request, &ctx, &mut out).unwrap();
/// let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// assert_eq!(out["messages"][0]["x_note"], 1);
/// assert!(request_from_str("{not json").unwrap_err().is_syntax());
/// ```
pub fn request_from_str(text: &str) -> Result<(ChatRequest, BodyContext), WireError> {
    let slot = Slot::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let read = BodySeed { slot: &slot }
        .deserialize(&mut de)
        .and_then(|body| de.end().map(|()| body));
    let (obj, messages) = read.map_err(|e| {
        slot.take()
            .unwrap_or_else(|| WireError::json("$", &e, "the request body must be a JSON object"))
    })?;
    model_of(&obj)?;
    let Some((messages, ctx)) = messages else {
        return Err(WireError::new("messages", "is required"));
    };
    Ok((from_parts(&obj, messages)?, ctx))
}

/// Where a reading error with a path is put: serde carries only a message.
type Slot = RefCell<Option<WireError>>;

/// Puts `e` in `slot` and returns a serde error that ends the reading.
fn fail<E: de::Error>(slot: &Slot, e: WireError) -> E {
    let message = e.to_string();
    *slot.borrow_mut() = Some(e);
    E::custom(message)
}

/// A visitor that refuses the JSON types it was not written for with one [`WireError`].
trait Refuse {
    fn slot(&self) -> &Slot;
    fn refusal(&self) -> WireError;
    fn refuse<E: de::Error>(&self) -> E {
        fail(self.slot(), self.refusal())
    }
}

/// The visitor methods of the scalar JSON types, each refusing.
macro_rules! refuse_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(self.refuse())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(self.refuse())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(self.refuse())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(self.refuse())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(self.refuse())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(self.refuse())
        }
    };
}

/// The body's top-level object: its fields but `messages` as values, and the messages.
struct BodySeed<'s> {
    slot: &'s Slot,
}

type Messages = (Vec<Message>, BodyContext);

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = (Map<String, Value>, Option<Messages>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = (Map<String, Value>, Option<Messages>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut obj = Map::new();
        let mut messages = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "messages" {
                messages = Some(map.next_value_seed(MessagesSeed { slot: self.slot })?);
            } else {
                // The other fields are small: values, as `request_from_body` had them.
                let value = map.next_value()?;
                obj.insert(key, value);
            }
        }
        Ok((obj, messages))
    }
}

/// The `messages` array.
#[derive(Clone, Copy)]
struct MessagesSeed<'s> {
    slot: &'s Slot,
}

impl Refuse for MessagesSeed<'_> {
    fn slot(&self) -> &Slot {
        self.slot
    }
    fn refusal(&self) -> WireError {
        WireError::new("messages", "must be an array")
    }
}

impl<'de> DeserializeSeed<'de> for MessagesSeed<'_> {
    type Value = Messages;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Messages, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MessagesSeed<'_> {
    type Value = Messages;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of messages")
    }

    refuse_scalars!();

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Messages, A::Error> {
        Err(self.refuse())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
        let mut messages = Vec::new();
        let mut ctx = BodyContext::default();
        while let Some((m, kept)) = seq.next_element_seed(MessageSeed {
            slot: self.slot,
            index: messages.len(),
        })? {
            if let Some(kept) = kept {
                ctx.kept.push((messages.len(), kept));
            }
            messages.push(m);
        }
        ctx.head = leading_system_end(&messages);
        messages.shrink_to_fit();
        // The digests only serve to put kept fields back: a body whose messages had
        // nothing beside the model (most do) needs none, and saves hashing its content
        // and 16 bytes a message.
        if !ctx.kept.is_empty() {
            ctx.digests = messages.iter().map(|m| Digests::of(&ctx.keys, m)).collect();
        }
        ctx.kept.shrink_to_fit();
        Ok((messages, ctx))
    }
}

/// One message of the array, read into the model and what it had beside.
#[derive(Clone, Copy)]
struct MessageSeed<'s> {
    slot: &'s Slot,
    index: usize,
}

impl Refuse for MessageSeed<'_> {
    fn slot(&self) -> &Slot {
        self.slot
    }
    fn refusal(&self) -> WireError {
        at_message(
            self.index,
            WireError::new("", "a message must be an object"),
        )
    }
}

impl<'de> DeserializeSeed<'de> for MessageSeed<'_> {
    type Value = (Message, Option<Kept>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed<'_> {
    type Value = (Message, Option<Kept>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }

    refuse_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.refuse())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut f = Fields::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key {
                Key::Role => f.role = Some(role_of(map.next_value::<&'de RawValue>()?)),
                Key::Content => f.content = Some(map.next_value()?),
                Key::Name => f.name = Some(map.next_value()?),
                Key::ToolCallId => f.tool_call_id = Some(map.next_value()?),
                Key::ToolCalls => f.tool_calls = Some(map.next_value()?),
                Key::Other(key) => {
                    // As it came, byte for byte.
                    let raw = map.next_value::<&'de RawValue>()?;
                    f.members.push_raw(&key, raw);
                }
            }
        }
        match message_from_fields(f) {
            Ok((m, mut kept)) => {
                let kept = (!kept.is_empty()).then(|| {
                    kept.members.0.shrink_to_fit();
                    kept
                });
                Ok((m, kept))
            }
            Err(e) => Err(fail(self.slot, at_message(self.index, e))),
        }
    }
}

/// A message's key: the fields the model represents, or another.
enum Key<'de> {
    Role,
    Content,
    Name,
    ToolCallId,
    ToolCalls,
    Other(Cow<'de, str>),
}

impl Key<'static> {
    fn known(key: &str) -> Option<Self> {
        Some(match key {
            "role" => Key::Role,
            "content" => Key::Content,
            "name" => Key::Name,
            "tool_call_id" => Key::ToolCallId,
            "tool_calls" => Key::ToolCalls,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::known(key).unwrap_or(Key::Other(Cow::Borrowed(key))))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key::known(key).unwrap_or_else(|| Key::Other(Cow::Owned(key.to_owned()))))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// A role's text, or `None` when it is not a string.
fn role_of(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    match serde_json::from_str::<&str>(text) {
        Ok(role) => Some(Cow::Borrowed(role)),
        // Escaped: owned.
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// The fields of one message as read, before they are checked.
#[derive(Default)]
struct Fields<'a> {
    /// `Some(None)`: present, but not a string.
    role: Option<Option<Cow<'a, str>>>,
    content: Option<Value>,
    name: Option<Value>,
    tool_call_id: Option<Value>,
    tool_calls: Option<Value>,
    /// The fields the model has no place for, as they came.
    members: Members,
}

/// The message of `f`, and what it has that the model does not represent. The checks and
/// their order are those of [`message_from_wire`].
fn message_from_fields(f: Fields<'_>) -> Result<(Message, Kept), WireError> {
    let mut kept = Kept {
        members: f.members,
        ..Kept::default()
    };
    let role = match f.role.flatten().as_deref() {
        Some("system") => Role::System,
        Some("developer") => {
            kept.developer = true;
            Role::System
        }
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some(other) => {
            return Err(WireError::new(
                ".role",
                format!(
                    "unknown role {other:?} (expected system, developer, user, assistant or tool)"
                ),
            ));
        }
        None => return Err(WireError::new(".role", "is required and must be a string")),
    };
    let content = match f.content {
        None => {
            kept.content = ContentAs::Absent;
            Content::default()
        }
        Some(Value::Null) => {
            kept.content = ContentAs::Null;
            Content::default()
        }
        Some(Value::String(s)) => Content::Text(s.into()),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            let mut parts_kept = Vec::with_capacity(parts.len());
            for (i, p) in parts.into_iter().enumerate() {
                let (part, part_kept) = part_from_value(p)
                    .map_err(|e| WireError::new(format!(".content[{i}]{}", e.path), e.reason))?;
                out.push(part);
                parts_kept.push(part_kept);
            }
            if parts_kept.iter().any(|k| !k.is_empty()) {
                kept.parts = parts_kept;
            }
            Content::from(out)
        }
        Some(_) => {
            return Err(WireError::new(
                ".content",
                "must be a string, an array of parts or null",
            ));
        }
    };
    let name = opt_string(f.name, "name", &mut kept.members)?;
    let tool_call_id = opt_string(f.tool_call_id, "tool_call_id", &mut kept.members)?;
    if role == Role::Tool && tool_call_id.is_none() {
        return Err(WireError::new(
            ".tool_call_id",
            "is required on a tool message",
        ));
    }
    let tool_calls = match f.tool_calls {
        None => Vec::new(),
        Some(Value::Null) => {
            kept.members.push("tool_calls", &Value::Null);
            Vec::new()
        }
        Some(Value::Array(calls)) => {
            if calls.is_empty() {
                kept.members.push("tool_calls", &json!([]));
            }
            let mut out = Vec::with_capacity(calls.len());
            let mut calls_kept = Vec::with_capacity(calls.len());
            for (i, c) in calls.into_iter().enumerate() {
                let (call, call_kept) = call_from_value(c)
                    .map_err(|e| WireError::new(format!(".tool_calls[{i}]{}", e.path), e.reason))?;
                out.push(call);
                calls_kept.push(call_kept);
            }
            if calls_kept.iter().any(|k| !k.is_empty()) {
                kept.calls = calls_kept;
            }
            out
        }
        Some(_) => return Err(WireError::new(".tool_calls", "must be an array")),
    };
    // `reasoning_content`, where a server sent one, stays among the kept fields and is
    // written back as it came: it is not modelled on the way in.
    let mut message = Message::new(role, content);
    message.set_name(name);
    message.tool_call_id = tool_call_id.map(String::into_boxed_str);
    message.tool_calls = tool_calls.into_boxed_slice();
    // The model writes empty content as `null` on a message that calls tools, as `""`
    // elsewhere.
    let writes_null = message.has_tool_calls() && message.content.is_empty();
    kept.content = match kept.content {
        ContentAs::Null if writes_null => ContentAs::Model,
        ContentAs::Model if writes_null => {
            let mut text = Vec::new();
            let _ = write_content(&mut text, &message.content, &kept.parts);
            kept.parts = Vec::new();
            ContentAs::Given(text.into())
        }
        other => other,
    };
    Ok((message, kept))
}

/// An optional string field: `null` is kept as a member, since the model writes nothing.
fn opt_string(
    v: Option<Value>,
    key: &str,
    members: &mut Members,
) -> Result<Option<String>, WireError> {
    match v {
        None => Ok(None),
        Some(Value::Null) => {
            members.push(key, &Value::Null);
            Ok(None)
        }
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(WireError::new(format!(".{key}"), "must be a string")),
    }
}

/// The body's `model`, which must be a string.
fn model_of(obj: &Map<String, Value>) -> Result<&str, WireError> {
    match obj.get("model") {
        Some(Value::String(m)) => Ok(m),
        Some(_) => Err(WireError::new("model", "must be a string")),
        None => Err(WireError::new("model", "is required")),
    }
}

fn at_message(i: usize, e: WireError) -> WireError {
    WireError::new(format!("messages[{i}]{}", e.path), e.reason)
}

/// The request of a body's top-level fields and its messages, read already.
fn from_parts(obj: &Map<String, Value>, messages: Vec<Message>) -> Result<ChatRequest, WireError> {
    let model = model_of(obj)?.to_owned();
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| {
                tool_from_wire(t)
                    .map_err(|e| WireError::new(format!("tools[{i}]{}", e.path), e.reason))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(WireError::new("tools", "must be an array")),
    };
    let mut params = GenerationParams::default();
    // What is not typed is kept as written, tagged with its format: a client of another
    // format sends on only the fields its own format has.
    params.extra_format = Some(WireFormat::ChatCompletions);
    for (k, v) in obj {
        match k.as_str() {
            "model" | "messages" | "tools" => {}
            "temperature" if v.is_number() => params.temperature = v.as_f64(),
            "top_p" if v.is_number() => params.top_p = v.as_f64(),
            "seed" if v.is_i64() => params.seed = v.as_i64(),
            "parallel_tool_calls" if v.is_boolean() => params.parallel_tool_calls = v.as_bool(),
            "tool_choice" if tool_choice_from_wire(v).is_some() => {
                params.tool_choice = tool_choice_from_wire(v);
            }
            _ => {
                params.extra.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(ChatRequest::new(model, messages)
        .with_tools(tools)
        .with_params(params))
}

/// Writes a request back as an OpenAI Chat Completions body: each message from the model,
/// with what `ctx` kept beside it when it is one of the messages received (see the
/// [module documentation](self)).
pub fn body_from_request(req: &ChatRequest, ctx: &BodyContext) -> Value {
    let mut out = top_level(req);
    let mut text = Vec::new();
    let mut messages = Vec::new();
    for_each_message(req, ctx, |m, kept, changed| {
        text.clear();
        write_message(&mut text, m, kept, changed)?;
        // Read back from text this module wrote: it is JSON.
        messages.push(serde_json::from_slice(&text).unwrap_or(Value::Null));
        Ok(())
    })
    // Writing to a `Vec` cannot fail.
    .unwrap_or(());
    out.insert("messages".into(), Value::Array(messages));
    Value::Object(out)
}

/// [`body_from_request`] written to `out` as JSON text, without building the body or any
/// message as a JSON tree.
pub fn write_body(req: &ChatRequest, ctx: &BodyContext, mut out: impl Write) -> io::Result<()> {
    out.write_all(b"{\"messages\":[")?;
    let mut first = true;
    for_each_message(req, ctx, |m, kept, changed| {
        if !std::mem::take(&mut first) {
            out.write_all(b",")?;
        }
        write_message(&mut out, m, kept, changed)
    })?;
    out.write_all(b"]")?;
    for (k, v) in top_level(req) {
        out.write_all(b",")?;
        serde_json::to_writer(&mut out, &k)?;
        out.write_all(b":")?;
        serde_json::to_writer(&mut out, &v)?;
    }
    out.write_all(b"}")
}

/// Calls `write` with each message of the body and what to write with it: the prefix's
/// (from the model), then each of `req.messages` — with what it had beside when it is
/// one of the messages received, and whether a layer rewrote its content.
fn for_each_message(
    req: &ChatRequest,
    ctx: &BodyContext,
    mut write: impl FnMut(&Message, Option<&Kept>, bool) -> io::Result<()>,
) -> io::Result<()> {
    for m in req.prefix.iter().flat_map(|p| p.as_messages()) {
        write(&m, None, false)?;
    }
    if ctx.kept.is_empty() {
        // Nothing to put back: every message is written from the model as it is.
        for m in &req.messages {
            write(m, None, false)?;
        }
        return Ok(());
    }
    let digests: Vec<Digests> = req
        .messages
        .iter()
        .map(|m| Digests::of(&ctx.keys, m))
        .collect();
    let found = counterparts(ctx, &req.messages, &digests);
    for ((m, digests), found) in req.messages.iter().zip(&digests).zip(found) {
        match found {
            Some(i) => write(m, ctx.kept(i), ctx.digests[i] != *digests)?,
            None => write(m, None, false)?,
        }
    }
    Ok(())
}

/// Every top-level field of the body but `messages`.
fn top_level(req: &ChatRequest) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("model".into(), Value::String(req.model.clone()));
    if !req.tools.is_empty() {
        out.insert(
            "tools".into(),
            Value::Array(req.tools.iter().map(tool_to_wire).collect()),
        );
    }
    let p = &req.params;
    if let Some(t) = p.temperature {
        out.insert("temperature".into(), number(t));
    }
    if let Some(t) = p.top_p {
        out.insert("top_p".into(), number(t));
    }
    if let Some(s) = p.seed {
        out.insert("seed".into(), json!(s));
    }
    if let Some(n) = p.max_output_tokens {
        out.insert("max_completion_tokens".into(), json!(n));
    }
    if !p.stop.is_empty() {
        out.insert("stop".into(), json!(p.stop));
    }
    if let Some(tc) = &p.tool_choice {
        out.insert("tool_choice".into(), tool_choice_to_wire(tc));
    }
    if let Some(parallel) = p.parallel_tool_calls {
        out.insert("parallel_tool_calls".into(), Value::Bool(parallel));
    }
    for (k, v) in &p.extra {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// For each sent message, the index of the message it came from among the messages
/// received, or `None` for one the stack added.
///
/// The layers keep order and only drop or rewrite, so the sent messages are a subsequence
/// of the originals. Which copy of two identical messages survived follows from what the
/// layers drop: never the leading system messages, which are matched in place; otherwise
/// the oldest turns and the oldest rounds of a turn, so the rest is matched from the
/// newest end, each message to the newest original before the one matched after it.
fn counterparts(ctx: &BodyContext, sent: &[Message], digests: &[Digests]) -> Vec<Option<usize>> {
    let originals = &ctx.digests;
    let mut out = vec![None; sent.len()];
    let in_head = ctx.head.min(originals.len());
    let out_head = leading_system_end(sent).min(in_head);
    let mut head_matched = 0;
    for i in 0..out_head {
        if same_message(&originals[i], &sent[i], &digests[i]) {
            out[i] = Some(i);
            head_matched = i + 1;
        }
    }
    let mut end = originals.len();
    for i in (out_head..sent.len()).rev() {
        let found = originals[head_matched..end]
            .iter()
            .rposition(|orig| same_message(orig, &sent[i], &digests[i]));
        if let Some(j) = found {
            end = head_matched + j;
            out[i] = Some(end);
        }
    }
    out
}

/// Whether `new` (with `digests`) is the original with digests `orig`, possibly with its
/// content rewritten by a layer. The layers rewrite only tool results, and a tool result
/// is known by its `tool_call_id`: any other message must be unchanged to be the same,
/// whatever its content looks like (a user message can quote a preview).
fn same_message(orig: &Digests, new: &Message, digests: &Digests) -> bool {
    orig.head == digests.head
        && (orig.content == digests.content
            || (new.is_tool_result()
                && new.tool_call_id.is_some()
                && new.content.as_str().is_some_and(|t| {
                    llm_context_layers::artifact::is_stub(t)
                        || llm_context_layers::artifact::is_preview(t)
                })))
}

/// A float written as an integer when it is one (`0`, not `0.0`), as users write it.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// Reads one OpenAI message. `developer` is read as `system`.
pub fn message_from_wire(v: &Value) -> Result<Message, WireError> {
    let obj = v
        .as_object()
        .ok_or_else(|| WireError::new("", "a message must be an object"))?;
    let fields = Fields {
        role: obj.get("role").map(|r| r.as_str().map(Cow::Borrowed)),
        content: obj.get("content").cloned(),
        name: obj.get("name").cloned(),
        tool_call_id: obj.get("tool_call_id").cloned(),
        tool_calls: obj.get("tool_calls").cloned(),
        members: Members::default(),
    };
    message_from_fields(fields).map(|(m, _)| m)
}

/// One content part, and what it has beside the model.
fn part_from_value(v: Value) -> Result<(ContentPart, PartKept), WireError> {
    let needs_type = || WireError::new(".type", "a content part needs a string `type`");
    let Value::Object(mut obj) = v else {
        return Err(needs_type());
    };
    let mut kept = PartKept::default();
    let part = match obj.remove("type") {
        Some(Value::String(t)) if t == "text" => match obj.remove("text") {
            Some(Value::String(text)) => ContentPart::Text { text },
            _ => return Err(WireError::new(".text", "a text part needs a string `text`")),
        },
        Some(Value::String(t)) if t == "image_url" => {
            let no_url = || WireError::new(".image_url.url", "an image part needs a string url");
            let Some(Value::Object(mut image)) = obj.remove("image_url") else {
                return Err(no_url());
            };
            let Some(Value::String(url)) = image.remove("url") else {
                return Err(no_url());
            };
            let detail = match image.remove("detail") {
                None => None,
                Some(Value::String(d)) => Some(d),
                Some(other) => {
                    kept.image.push("detail", &other);
                    None
                }
            };
            kept.image.extend(&image);
            ContentPart::Image { url, detail }
        }
        Some(Value::String(other)) => {
            return Err(WireError::new(
                ".type",
                format!("unsupported content part type {other:?}"),
            ));
        }
        _ => return Err(needs_type()),
    };
    kept.members.extend(&obj);
    Ok((part, kept))
}

/// One tool call, and what it has beside the model.
fn call_from_value(v: Value) -> Result<(ToolCall, CallKept), WireError> {
    let no_id = || WireError::new(".id", "a tool call needs a string id");
    let Value::Object(mut obj) = v else {
        return Err(no_id());
    };
    let Some(Value::String(id)) = obj.remove("id") else {
        return Err(no_id());
    };
    let Some(function) = obj.remove("function") else {
        return Err(WireError::new(".function", "a tool call needs a function"));
    };
    let no_name = || WireError::new(".function.name", "is required and must be a string");
    let Value::Object(mut function) = function else {
        return Err(no_name());
    };
    let Some(Value::String(name)) = function.remove("name") else {
        return Err(no_name());
    };
    let mut kept = CallKept::default();
    // The model holds arguments as the text that came (spaces, key order, broken JSON):
    // only arguments that came as something else are kept beside it.
    let arguments = match function.remove("arguments") {
        Some(Value::String(text)) => text,
        Some(other) => {
            kept.no_arguments = true;
            kept.function.push("arguments", &other);
            other.to_string()
        }
        None => {
            kept.no_arguments = true;
            "{}".to_owned()
        }
    };
    match obj.remove("type") {
        Some(Value::String(t)) if t == "function" => {}
        None => kept.no_type = true,
        Some(other) => {
            kept.no_type = true;
            kept.members.push("type", &other);
        }
    }
    kept.function.extend(&function);
    kept.members.extend(&obj);
    Ok((ToolCall::from_text(id, name, arguments), kept))
}

fn tool_from_wire(v: &Value) -> Result<ToolSpec, WireError> {
    let f = v
        .get("function")
        .ok_or_else(|| WireError::new(".function", "only function tools are supported"))?;
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| WireError::new(".function.name", "is required and must be a string"))?;
    let description = f
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let parameters = f
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    Ok(ToolSpec::new(name, description, parameters))
}

/// Writes one tool definition.
pub fn tool_to_wire(t: &ToolSpec) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        f.insert("description".into(), Value::String(t.description.clone()));
    }
    f.insert("parameters".into(), t.parameters.clone());
    json!({"type": "function", "function": f})
}

/// Writes a message's content.
pub fn content_to_wire(c: &Content) -> Value {
    let mut text = Vec::new();
    // Writing to a `Vec` cannot fail, and what is written is JSON.
    let _ = write_content(&mut text, c, &[]);
    serde_json::from_slice(&text).unwrap_or(Value::Null)
}

/// Writes one message from the neutral model.
pub fn message_to_wire(m: &Message) -> Value {
    let mut text = Vec::new();
    let _ = write_message(&mut text, m, None, false);
    serde_json::from_slice(&text).unwrap_or(Value::Null)
}

/// A text as a JSON string to `out`: a long one (a tool result, a file) escaped into one
/// buffer and written whole, rather than a write for each run between its escapes; the
/// bytes are `serde_json`'s either way.
fn write_text(out: &mut impl Write, s: &str) -> io::Result<()> {
    if s.len() < 256 {
        return write_json(out, s);
    }
    out.write_all(llm_context_layers::json::to_string(s).as_bytes())
}

/// A JSON value to `out`.
fn write_json(out: &mut impl Write, value: &(impl Serialize + ?Sized)) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

/// Writes one message as JSON text: from the model, with what `kept` says it had beside;
/// with the model's content and not the form it came in when `changed` (a layer rewrote
/// it).
fn write_message(
    out: &mut impl Write,
    m: &Message,
    kept: Option<&Kept>,
    changed: bool,
) -> io::Result<()> {
    let kept = kept.unwrap_or(&NOTHING);
    out.write_all(b"{\"role\":")?;
    if kept.developer {
        out.write_all(b"\"developer\"")?;
    } else {
        write_json(out, m.role.as_str())?;
    }
    if changed {
        out.write_all(b",\"content\":")?;
        write_content(out, &m.content, &[])?;
    } else {
        match &kept.content {
            ContentAs::Model if m.has_tool_calls() && m.content.is_empty() => {
                out.write_all(b",\"content\":null")?;
            }
            ContentAs::Model => {
                out.write_all(b",\"content\":")?;
                write_content(out, &m.content, &kept.parts)?;
            }
            ContentAs::Absent => {}
            ContentAs::Null => out.write_all(b",\"content\":null")?,
            ContentAs::Given(text) => {
                out.write_all(b",\"content\":")?;
                out.write_all(text)?;
            }
        }
    }
    if let Some(n) = m.name() {
        out.write_all(b",\"name\":")?;
        write_json(out, n)?;
    }
    if let Some(id) = &m.tool_call_id {
        out.write_all(b",\"tool_call_id\":")?;
        write_json(out, id)?;
    }
    if m.has_tool_calls() {
        out.write_all(b",\"tool_calls\":[")?;
        for (i, c) in m.tool_calls.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write_call(out, c, kept.calls.get(i).unwrap_or(&NO_CALL))?;
        }
        out.write_all(b"]")?;
    }
    kept.members.write_after(out)?;
    out.write_all(b"}")
}

/// Writes a message's content, with what each part had beside (`parts`, one a part, or
/// empty).
fn write_content(out: &mut impl Write, c: &Content, parts: &[PartKept]) -> io::Result<()> {
    let parts_of = match c {
        Content::Text(t) => return write_text(out, t),
        Content::Parts(p) => p,
    };
    out.write_all(b"[")?;
    for (i, p) in parts_of.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let kept = parts.get(i).unwrap_or(&NO_PART);
        match p {
            ContentPart::Text { text } => {
                out.write_all(b"{\"type\":\"text\",\"text\":")?;
                write_text(out, text)?;
            }
            ContentPart::Image { url, detail } => {
                out.write_all(b"{\"type\":\"image_url\",\"image_url\":{\"url\":")?;
                write_json(out, url.as_str())?;
                if let Some(d) = detail {
                    out.write_all(b",\"detail\":")?;
                    write_json(out, d.as_str())?;
                }
                kept.image.write_after(out)?;
                out.write_all(b"}")?;
            }
            _ => out.write_all(b"{\"type\":\"text\",\"text\":\"\"")?,
        }
        kept.members.write_after(out)?;
        out.write_all(b"}")?;
    }
    out.write_all(b"]")
}

/// Writes one tool call, with what it had beside.
fn write_call(out: &mut impl Write, c: &ToolCall, kept: &CallKept) -> io::Result<()> {
    out.write_all(b"{\"id\":")?;
    write_json(out, c.id.as_str())?;
    if !kept.no_type {
        out.write_all(b",\"type\":\"function\"")?;
    }
    out.write_all(b",\"function\":{\"name\":")?;
    write_json(out, c.name.as_str())?;
    if !kept.no_arguments {
        out.write_all(b",\"arguments\":")?;
        write_text(out, &c.arguments)?;
    }
    kept.function.write_after(out)?;
    out.write_all(b"}")?;
    kept.members.write_after(out)?;
    out.write_all(b"}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_context_layers::ToolChoice;

    #[test]
    fn round_trips_every_field() {
        let body = json!({
            "model": "gpt-5.4",
            "temperature": 0.2,
            "stream": false,
            "metadata": {"k": "v"},
            "messages": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}]},
                {"role": "assistant", "content": null, "refusal": null,
                 "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                       "parameters": {"type": "object"}}}]
        });
        let (req, ctx) = request_from_body(&body).unwrap();
        assert_eq!(req.messages[0].role, Role::System);
        assert_eq!(
            req.messages[2].tool_calls[0].arguments_value(),
            json!({"a": 2, "b": 1})
        );
        assert_eq!(req.params.temperature, Some(0.2));
        assert_eq!(body_from_request(&req, &ctx), body);
    }

    #[test]
    fn tool_choice_and_parallel_calls_are_typed_and_written_back_as_they_came() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "q"}],
                          "tools": [{"type": "function", "function": {"name": "f"}}],
                          "tool_choice": "required", "parallel_tool_calls": false, "top_k": 5});
        let (req, ctx) = request_from_body(&body).unwrap();
        assert_eq!(req.params.tool_choice, Some(ToolChoice::Required));
        assert_eq!(req.params.parallel_tool_calls, Some(false));
        assert_eq!(req.params.extra_format, Some(WireFormat::ChatCompletions));
        let back = body_from_request(&req, &ctx);
        assert_eq!(back["tool_choice"], "required");
        assert_eq!(back["parallel_tool_calls"], false);
        assert_eq!(back["top_k"], 5);
        // A form only Chat Completions has stays among the fields, as written.
        let allowed = json!({"type": "allowed_tools",
                             "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "f"}}]}});
        let mut body = body;
        body["tool_choice"] = allowed.clone();
        let (req, ctx) = request_from_body(&body).unwrap();
        assert_eq!(req.params.tool_choice, None);
        assert_eq!(req.params.extra["tool_choice"], allowed);
        assert_eq!(body_from_request(&req, &ctx)["tool_choice"], allowed);
    }

    #[test]
    fn errors_name_the_path() {
        let bad = json!({"model": "m", "messages": [{"role": "user"}, {"role": "wizard"}]});
        let err = request_from_body(&bad).unwrap_err();
        assert_eq!(err.path, "messages[1].role");
        let bad = json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]});
        assert_eq!(
            request_from_body(&bad).unwrap_err().path,
            "messages[0].tool_call_id"
        );
        assert_eq!(request_from_body(&json!([])).unwrap_err().path, "$");
    }
    /// What `write_body` writes, read back as a value.
    fn written(req: &ChatRequest, ctx: &BodyContext) -> Value {
        let mut out = Vec::new();
        write_body(req, ctx, &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    /// A body read from `text` and written back, by both writers, equals `text` as JSON.
    fn assert_round_trip(text: &str) {
        let (req, ctx) = request_from_str(text).unwrap();
        let body: Value = serde_json::from_str(text).unwrap();
        assert_eq!(body_from_request(&req, &ctx), body);
        assert_eq!(written(&req, &ctx), body);
    }

    #[test]
    fn every_field_the_model_does_not_represent_comes_back() {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "developer", "content": "rules", "x_vendor": {"deep": [1, 2.5, null]}},
                {"role": "user", "content": [
                    {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": null, "x_px": 4}},
                    {"type": "image_url", "image_url": {"url": "https://x/z.png", "detail": 3}}
                ], "name": null},
                {"role": "assistant", "content": "", "refusal": null, "audio": {"id": "a1"},
                 "tool_calls": [
                    {"id": "c1", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}, "index": 0},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"k": 1}, "strict": true}},
                    {"id": "c3", "type": "custom", "function": {"name": "h"}},
                    {"id": "c4", "type": "function", "function": {"name": "i", "arguments": "{oops"}}
                 ]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok", "observation": true},
                {"role": "tool", "tool_call_id": "c2", "content": null},
                {"role": "tool", "tool_call_id": "c3"},
                {"role": "tool", "tool_call_id": "c4", "content": [], "tool_calls": []},
                {"role": "assistant", "content": [], "tool_calls": [
                    {"id": "c5", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "assistant", "tool_calls": null, "tool_call_id": null}
            ]
        });
        let text = body.to_string();
        assert_round_trip(&text);
        let (req, ctx) = request_from_str(&text).unwrap();
        assert_eq!(req.messages[0].role, Role::System);
        assert_eq!(
            req.messages[2].tool_calls[0].arguments_value(),
            json!({"a": 2, "b": 1})
        );
        assert_eq!(
            req.messages[2].tool_calls[1].arguments_value(),
            json!({"k": 1})
        );
        assert_eq!(
            req.messages[2].tool_calls[3].arguments_value(),
            json!("{oops")
        );
        // Only what the model does not represent is kept: not the content.
        let kept: Vec<usize> = ctx.kept.iter().map(|(i, _)| *i).collect();
        assert_eq!(kept, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            String::from_utf8_lossy(&ctx.kept(3).unwrap().members.0),
            r#""observation":true"#
        );
    }

    #[test]
    fn a_message_the_model_writes_as_it_came_keeps_nothing() {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"},
                {"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "r"}
        ]});
        let (req, ctx) = request_from_body(&body).unwrap();
        assert!(ctx.kept.is_empty(), "{:?}", ctx.kept);
        assert_eq!(body_from_request(&req, &ctx), body);
    }

    #[test]
    fn fields_in_an_unusual_order_are_read_and_written_back() {
        // Keys in reverse order, the messages before the model, an escaped key and role.
        let text = r#"{"messages": [
            {"x_first": [1, {"b": 2}], "content": "hi", "role": "user"},
            {"tool_calls": [{"function": {"arguments": "{}", "name": "f"}, "type": "function", "id": "c1"}],
             "content": null, "role": "assistant"},
            {"content": "r", "tool_call_id": "c1", "role": "tool", "x_\u00e9": 1},
            {"role": "\u0075ser", "content": "again"}
        ], "temperature": 0, "model": "m"}"#;
        assert_round_trip(text);
        let (req, ctx) = request_from_str(text).unwrap();
        assert_eq!(req.model, "m");
        assert_eq!(req.messages[0].content.as_str(), Some("hi"));
        assert_eq!(req.messages[1].tool_calls[0].name, "f");
        assert_eq!(req.messages[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(req.messages[3].role, Role::User);
        assert_eq!(ctx.kept.len(), 2);
    }

    /// A transcript of `turns` identical turns, each message marked with its own `x_n`.
    fn repeated_turns(turns: usize) -> Value {
        let mut messages = vec![json!({"role": "system", "content": "s", "x_n": "system"})];
        for n in 0..turns {
            messages.push(json!({"role": "user", "content": "continue", "x_n": n}));
            messages.push(json!({"role": "assistant", "content": "ok", "x_n": n}));
        }
        json!({"model": "m", "messages": messages})
    }

    #[test]
    fn of_identical_messages_each_kept_one_gets_its_own_fields() {
        let (mut req, ctx) = request_from_body(&repeated_turns(4)).unwrap();
        // What pruning leaves: the head, and the newest two turns.
        req.messages.drain(1..5);
        let sent = body_from_request(&req, &ctx);
        let marks: Vec<&Value> = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["x_n"])
            .collect();
        assert_eq!(
            marks,
            [&json!("system"), &json!(2), &json!(2), &json!(3), &json!(3)]
        );
        // And a message the stack added matches nothing.
        req.messages.push(Message::user("and now?"));
        let sent = written(&req, &ctx);
        assert_eq!(
            sent["messages"][5],
            json!({"role": "user", "content": "and now?"})
        );
        assert_eq!(sent["messages"][4]["x_n"], 3);
    }

    #[test]
    fn a_rewritten_tool_result_keeps_its_fields_and_gets_the_new_content() {
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "logs", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": null, "x_meta": 1},
            {"role": "user", "content": [{"type": "text", "text": "and?", "x_part": 2}]}
        ]});
        let (mut req, ctx) = request_from_body(&body).unwrap();
        let stub = "{\"context_cleared\":true,\"tool\":\"logs\",\"original_chars\":5,\
                    \"instructions\":\"Older tool result cleared to fit the context window. \
                    Call the tool again if you need it.\"}";
        assert!(llm_context_layers::artifact::is_stub(stub));
        req.messages[2].content = Content::Text(stub.into());
        let sent = written(&req, &ctx);
        assert_eq!(
            sent["messages"][2],
            json!({"role": "tool", "tool_call_id": "c1", "content": stub, "x_meta": 1})
        );
        assert_eq!(sent["messages"][1], body["messages"][1]);
        assert_eq!(sent["messages"][3], body["messages"][3]);
        // A user message is never taken for a rewrite of another.
        req.messages[3].content = Content::Text(stub.into());
        let sent = written(&req, &ctx);
        assert_eq!(
            sent["messages"][3],
            json!({"role": "user", "content": stub})
        );
    }

    #[test]
    fn the_context_holds_no_content() {
        // 2,000 messages of 10 kB each, a tenth with an unknown field.
        let messages: Vec<Value> = (0..2_000)
            .map(|i| {
                let mut m =
                    json!({"role": "user", "content": format!("{i} {}", "é".repeat(5_000))});
                if i % 10 == 0 {
                    m["x_trace"] = json!(i);
                }
                m
            })
            .collect();
        let text = json!({"model": "m", "messages": messages}).to_string();
        let (req, ctx) = request_from_str(&text).unwrap();
        let contents: usize = req.messages.iter().map(|m| m.text().len()).sum();
        // What the context owns on the heap, counted from its parts.
        let kept_heap: usize = ctx
            .kept
            .iter()
            .map(|(_, k)| {
                k.members.0.capacity()
                    + k.parts.capacity() * size_of::<PartKept>()
                    + k.calls.capacity() * size_of::<CallKept>()
            })
            .sum();
        let heap = ctx.digests.capacity() * size_of::<Digests>()
            + ctx.kept.capacity() * size_of::<(usize, Kept)>()
            + kept_heap;
        assert_eq!(ctx.kept.len(), 200);
        assert!(kept_heap <= 200 * 16, "{kept_heap}");
        // 16 bytes of digests a message, and the entries of the 200 with a field.
        assert!(
            heap <= 2_000 * 16 + 200 * (size_of::<(usize, Kept)>() + 16),
            "{heap}"
        );
        assert!(
            heap * 300 < contents,
            "{heap} bytes for {contents} of content"
        );
        assert_eq!(
            written(&req, &ctx),
            serde_json::from_str::<Value>(&text).unwrap()
        );
    }

    #[test]
    fn a_body_with_nothing_beside_the_model_keeps_no_digests() {
        let messages: Vec<Value> = (0..1_000)
            .map(|i| json!({"role": "user", "content": format!("m{i}")}))
            .collect();
        let text = json!({"model": "m", "messages": messages}).to_string();
        let (mut req, ctx) = request_from_str(&text).unwrap();
        assert!(ctx.kept.is_empty());
        assert_eq!(ctx.digests.capacity(), 0);
        assert_eq!(
            written(&req, &ctx),
            serde_json::from_str::<Value>(&text).unwrap()
        );
        // The layers' drops and rewrites are written as they are, still without a match.
        req.messages.drain(..990);
        req.messages[0].content = "rewritten".into();
        let sent = written(&req, &ctx);
        assert_eq!(sent["messages"].as_array().unwrap().len(), 10);
        assert_eq!(
            sent["messages"][0],
            json!({"role": "user", "content": "rewritten"})
        );
        assert_eq!(
            sent["messages"][9],
            json!({"role": "user", "content": "m999"})
        );
    }

    #[test]
    fn reading_a_message_from_a_value_agrees_with_reading_the_text() {
        let body = json!({"model": "m", "messages": [
            {"role": "developer", "content": null, "name": "n"},
            {"role": "user", "content": [{"type": "text", "text": "t"}]},
            {"role": "assistant", "tool_calls": [
                {"id": "c", "function": {"name": "f", "arguments": "{\"x\": [1]}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"}
        ]});
        let (req, _) = request_from_body(&body).unwrap();
        let one_by_one: Vec<Message> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| message_from_wire(m).unwrap())
            .collect();
        assert_eq!(req.messages, one_by_one);
        for m in &req.messages {
            assert_eq!(message_from_wire(&message_to_wire(m)).unwrap(), *m);
        }
    }

    #[test]
    fn every_shape_error_names_its_path() {
        let cases = [
            (json!({"model": "m", "messages": 5}), "messages"),
            (
                json!({"model": "m", "messages": {"role": "user"}}),
                "messages",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}, "hi"]}),
                "messages[1]",
            ),
            (
                json!({"model": "m", "messages": [{"role": 1}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "audio"}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "messages[0].content[0].text",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "a"}, {"type": "image_url", "image_url": "u"}]}]}),
                "messages[0].content[1].image_url.url",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "name": 3}]}),
                "messages[0].name",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]}),
                "messages[0].tool_calls",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": 1}]}]}),
                "messages[0].tool_calls[0].id",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]}),
                "messages[0].tool_calls[0].function",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
                {"id": "c", "function": {}}]}]}),
                "messages[0].tool_calls[0].function.name",
            ),
            (json!({"messages": []}), "model"),
            (json!({"model": 1, "messages": []}), "model"),
            (json!({"model": "m", "messages": [], "tools": 1}), "tools"),
        ];
        for (body, path) in cases {
            let err = request_from_body(&body).unwrap_err();
            assert_eq!(err.path, path, "{body}: {err}");
            assert!(!err.is_syntax(), "{body}");
        }
        // JSON that breaks off inside a message is a syntax error, of the body.
        let err =
            request_from_str(r#"{"model": "m", "messages": [{"role": "user", "content": "x}]}"#)
                .unwrap_err();
        assert!(err.is_syntax() && err.path == "$", "{err}");
        let err = request_from_str(r#"{"model": "m", "messages": []} trailing"#).unwrap_err();
        assert!(err.is_syntax(), "{err}");
    }

    proptest::proptest! {
        /// Any message the model represents, with any unknown fields, in any key order,
        /// comes back equal as JSON from both writers.
        #[test]
        fn random_messages_come_back_equal(
            messages in proptest::collection::vec(message_text(), 0..8),
        ) {
            let text = format!("{{\"model\":\"m\",\"messages\":[{}]}}", messages.join(","));
            let (req, ctx) = request_from_str(&text).unwrap();
            let body: Value = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(&body_from_request(&req, &ctx), &body);
            proptest::prop_assert_eq!(written(&req, &ctx), body);
        }
    }

    /// Any JSON value, small.
    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z\"\\\\é\n]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// One message's JSON text: members in a random order, some known fields in forms the
    /// model writes otherwise, unknown fields of any value.
    fn message_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let role = prop_oneof![
            Just("system"),
            Just("developer"),
            Just("user"),
            Just("assistant")
        ];
        let content = prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            "[ -~é]{0,12}".prop_map(|t| Some(Value::from(t))),
            proptest::collection::vec(
                (
                    "[ -~]{0,6}",
                    proptest::option::of(("x_[a-z]{1,3}", any_json()))
                )
                    .prop_map(|(t, extra)| {
                        let mut part = json!({"type": "text", "text": t});
                        if let Some((k, v)) = extra {
                            part[k] = v;
                        }
                        part
                    }),
                0..3
            )
            .prop_map(|p| Some(Value::from(p))),
        ];
        let args = prop_oneof![
            Just(None),
            any_json().prop_map(|v| Some(Value::from(v.to_string()))),
            any_json().prop_map(|v| Some(Value::from(format!("{v:#}")))),
            any_json().prop_map(Some),
        ];
        let calls = proptest::option::of(proptest::collection::vec(
            ("[a-z0-9]{1,4}", args, any::<bool>()),
            0..3,
        ));
        let extras =
            proptest::collection::btree_map("x_[a-z]{1,4}|refusal|audio", any_json(), 0..3);
        (
            role,
            content,
            proptest::option::of(proptest::option::of("[a-z]{1,5}")),
            calls,
            extras,
            any::<u64>(),
        )
            .prop_map(|(role, content, name, calls, extras, order)| {
                let mut members: Vec<(String, Value)> = vec![("role".into(), Value::from(role))];
                if let Some(c) = content {
                    members.push(("content".into(), c));
                }
                if let Some(n) = name {
                    members.push(("name".into(), n.map_or(Value::Null, Value::from)));
                }
                if let Some(calls) = calls {
                    let calls: Vec<Value> = calls
                        .into_iter()
                        .map(|(id, args, typed)| {
                            let mut f = json!({"name": "f"});
                            if let Some(a) = args {
                                f["arguments"] = a;
                            }
                            let mut c = json!({"id": id, "function": f});
                            if typed {
                                c["type"] = json!("function");
                            }
                            c
                        })
                        .collect();
                    members.push(("tool_calls".into(), Value::from(calls)));
                }
                members.extend(extras);
                // A random order of the members.
                let mut order = order;
                for i in (1..members.len()).rev() {
                    members.swap(i, (order % (i as u64 + 1)) as usize);
                    order /= i as u64 + 1;
                }
                let members: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("{}: {v}", Value::from(k.as_str())))
                    .collect();
                format!("{{{}}}", members.join(", "))
            })
    }
}
