//! Reading a body: each message straight into the model, what it does not hold kept beside.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::super::params::tool_choice_from_wire;
use super::WireError;
use super::residue::{BodyContext, CallKept, ContentAs, Digests, Kept, Members, PartKept};
use super::write::write_content;
use llm_context_layers::prefix::leading_system_end;
use llm_context_layers::{
    ChatRequest, Content, ContentPart, GenerationParams, Message, Role, ToolCall, ToolSpec,
    WireFormat,
};

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
            // A form only Chat Completions has stays among the fields, as written.
            "tool_choice" => match tool_choice_from_wire(v) {
                Some(choice) => params.tool_choice = Some(choice),
                None => {
                    params.extra.insert(k.clone(), v.clone());
                }
            },
            _ => {
                params.extra.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(ChatRequest::new(model, messages)
        .with_tools(tools)
        .with_params(params))
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

/// The content part types a user message may hold that the neutral model does not
/// represent: read as [`ContentPart::Opaque`] parts of this format.
const OPAQUE_PARTS: &[&str] = &["input_audio", "file"];

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
        // Audio and files (`input_audio`, `file`): kept whole as written, sent back to
        // OpenAI as they came; across formats a PDF file becomes a document where it maps
        // and anything else is refused by name (never dropped).
        Some(Value::String(kind)) if OPAQUE_PARTS.contains(&kind.as_str()) => {
            let mut whole = serde_json::Map::with_capacity(obj.len() + 1);
            whole.insert("type".to_owned(), Value::String(kind.clone()));
            whole.extend(obj);
            let json = Value::Object(whole).to_string();
            return Ok((
                ContentPart::Opaque {
                    format: WireFormat::ChatCompletions,
                    kind,
                    json,
                },
                kept,
            ));
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
    let mut tool = ToolSpec::new(name, description, parameters);
    tool.strict = f.get("strict").and_then(Value::as_bool);
    Ok(tool)
}
