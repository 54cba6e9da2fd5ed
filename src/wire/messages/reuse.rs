//! Reading a session's next request by what is new in it.
//!
//! An agent's request is its previous request plus a few messages (and a cache marker
//! moved), byte for byte. Parsing the whole body into a JSON tree on every request made
//! the proxy's cost grow with the transcript (issue 46). Here the body is scanned once
//! for where its members and messages lie (no tree), and each wire message is looked up
//! by a digest of its bytes among the messages read before ([`Reuse`]): one seen
//! before is taken as it was read then (its neutral messages, its role, the calls it
//! made and answered, its markers), and only the others are parsed and read. What comes
//! out is what the full read ([`Messages::read`](super::serve)) gives for the same
//! bytes, which the tests check on generated sessions; a body this path does not expect
//! (a member of the wrong type, a message that does not read) goes the full way, which
//! says what is wrong with it.
//!
//! A message's reading depends on the messages before it only through the tool names
//! of the calls its results answer: an entry records the names it was given, and is
//! taken only where the same names apply. Entries are kept per tenant (the digest is
//! salted with the tenant, and each tenant has its own two generations), bounded by the
//! bytes they were read from, all tenants together: when the newer generations are full,
//! the heaviest tenant's newer becomes its older and its older is dropped (then the
//! heaviest older generations go until they weigh no more than the newer may), so a
//! session's messages stay while it is active, a finished session's go, and one tenant's
//! large bodies age its own entries before another's. A message
//! under 256 bytes is not kept (its entry would cost more than reading it again), nor
//! is anything of a body larger than a generation. A member or message nested deeper
//! than [`DEEPEST`] goes the full way, which meets serde_json's depth limit where a value
//! read on its own would not.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use llm_context_layers::hash::StableHasher;
use llm_context_layers::{Content, Message};
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::faithful::{Parts, has_markers, marked, rest_of, role_of};
use super::types::InputRole;

/// The wire messages read before, by a digest of their bytes (see the module docs); the
/// same for the Responses reader's items (`E`, what one was read into).
pub(crate) struct Reuse<E = Entry> {
    generations: Mutex<Generations<E>>,
    /// The bytes of wire messages each generation holds at most.
    budget: usize,
}

/// What an entry costs to keep: the bytes it was read from and its structures.
pub(crate) trait Weighed {
    /// Its cost, in bytes.
    fn weight(&self) -> usize;
}

impl<E> fmt::Debug for Reuse<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reuse")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// Every tenant's entries.
struct Generations<E> {
    tenants: HashMap<String, Shelf<E>>,
}

impl<E> Default for Generations<E> {
    fn default() -> Self {
        Self {
            tenants: HashMap::new(),
        }
    }
}

/// One tenant's two generations, and what each weighs.
struct Shelf<E> {
    newer: HashMap<u128, Arc<E>>,
    older: HashMap<u128, Arc<E>>,
    newer_bytes: usize,
    older_bytes: usize,
}

impl<E> Default for Shelf<E> {
    fn default() -> Self {
        Self {
            newer: HashMap::new(),
            older: HashMap::new(),
            newer_bytes: 0,
            older_bytes: 0,
        }
    }
}

impl<E> Generations<E> {
    /// What `weight` of every tenant weighs together.
    fn total(&self, weight: impl Fn(&Shelf<E>) -> usize) -> usize {
        self.tenants.values().map(weight).sum()
    }

    /// The tenant whose `weight` is the largest, if any weighs anything.
    fn heaviest(&mut self, weight: impl Fn(&Shelf<E>) -> usize) -> Option<&mut Shelf<E>> {
        self.tenants
            .values_mut()
            .max_by_key(|s| weight(s))
            .filter(|s| weight(s) > 0)
    }

    /// Room for `size` more bytes in the newer generations: the heaviest tenant's newer
    /// becomes its older (its older dropped), then the heaviest older generations are
    /// dropped until they weigh no more than `budget`. So one tenant's traffic ages its own
    /// entries first, and another's only once it holds more.
    fn make_room(&mut self, size: usize, budget: usize) {
        while self.total(|s| s.newer_bytes) + size > budget {
            let Some(shelf) = self.heaviest(|s| s.newer_bytes) else {
                break;
            };
            shelf.older = std::mem::take(&mut shelf.newer);
            shelf.older_bytes = std::mem::take(&mut shelf.newer_bytes);
        }
        while self.total(|s| s.older_bytes) > budget {
            let Some(shelf) = self.heaviest(|s| s.older_bytes) else {
                break;
            };
            shelf.older.clear();
            shelf.older_bytes = 0;
        }
        self.tenants
            .retain(|_, s| !s.newer.is_empty() || !s.older.is_empty());
    }
}

/// One wire message as it was read.
pub(crate) struct Entry {
    /// The neutral messages it was read into, their text shared.
    messages: Vec<Message>,
    role: InputRole,
    /// The calls it made: id and tool name.
    calls: Vec<(String, String)>,
    /// The calls its results answer, each with the tool name its result was given.
    answered: Vec<(String, Option<String>)>,
    /// It carries a `cache_control` marker.
    marked: bool,
    /// What it costs to keep: its bytes and an estimate of its structures.
    size: usize,
}

impl Weighed for Entry {
    fn weight(&self) -> usize {
        self.size
    }
}

impl<E: Weighed> Reuse<E> {
    /// Keeps up to `budget` bytes of wire messages in the newer generations of all
    /// tenants together, and as many in the older ones.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            generations: Mutex::new(Generations::default()),
            budget,
        }
    }

    /// The most bytes of one body whose entries are kept: a generation's.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// `tenant`'s entries of `keys`, where there are (a newer generation's first).
    pub(crate) fn get(&self, tenant: &str, keys: &[u128]) -> Vec<Option<Arc<E>>> {
        let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        let Some(shelf) = g.tenants.get_mut(tenant) else {
            return vec![None; keys.len()];
        };
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let found = match shelf.newer.get(k) {
                Some(e) => Some(e.clone()),
                // Used again: into the newer generation, so an active session stays.
                None => shelf.older.remove(k).inspect(|e| {
                    shelf.older_bytes -= e.weight();
                    shelf.newer_bytes += e.weight();
                    shelf.newer.insert(*k, e.clone());
                }),
            };
            out.push(found);
        }
        out
    }

    /// Keeps `entries` for `tenant`.
    pub(crate) fn put(&self, tenant: &str, entries: Vec<(u128, Arc<E>)>) {
        let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        for (k, e) in entries {
            let size = e.weight();
            if size > self.budget {
                continue;
            }
            g.make_room(size, self.budget);
            let shelf = g.tenants.entry(tenant.to_owned()).or_default();
            // Kept already (a message repeated in a body): counted once.
            let old = shelf.newer.insert(k, e).map_or(0, |old| old.weight());
            shelf.newer_bytes = shelf.newer_bytes - old + size;
        }
    }

    /// What all the entries kept weigh (the tests' bound).
    #[cfg(test)]
    pub(crate) fn kept_bytes(&self) -> usize {
        let g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        g.total(|s| s.newer_bytes + s.older_bytes)
    }
}

/// The digest a wire message is kept by: its bytes, salted by `tenant`.
fn key(tenant: &str, raw: &str) -> u128 {
    key_in("llm-context.messages.reuse", tenant, raw)
}

/// The digest an entry of `domain` (one per format) is kept by: its bytes, salted by
/// `tenant`.
pub(crate) fn key_in(domain: &str, tenant: &str, raw: &str) -> u128 {
    let mut h = StableHasher::new(domain);
    h.str(tenant);
    h.str(raw);
    h.finish()
}

/// A body's top-level members in order, each's value as it lies in the body, the
/// messages already split into theirs: one scan, no tree.
struct Top<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
    messages: Option<Vec<&'a RawValue>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Top<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
                let mut top = Top {
                    members: Vec::new(),
                    messages: None,
                };
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "messages" && top.messages.is_none() {
                        // (A second `messages` is kept as a member: the fast read then
                        // leaves the body to the full one, which takes the last.)
                        // Not an array: the full read says what it is.
                        top.messages = Some(map.next_value::<Vec<&'de RawValue>>()?);
                    } else {
                        let value = map.next_value::<&'de RawValue>()?;
                        top.members.push((key, value));
                    }
                }
                Ok(top)
            }
        }
        d.deserialize_map(Members)
    }
}

/// What the fast read gives: the body as a tree without its messages (an empty array
/// in their place), the messages read, the wire message of each, and where the body's
/// parts lie.
pub(crate) struct Fast {
    pub(crate) body: Value,
    pub(crate) messages: Vec<Message>,
    pub(crate) owners: Vec<usize>,
    pub(crate) parts: Parts,
}

/// The fast read of `text` (see the module docs), or `None` where the full read must
/// say what is wrong with the body.
pub(crate) fn read(text: &str, reuse: &Reuse, tenant: &str) -> Option<Fast> {
    let top: Top<'_> = serde_json::from_str(text).ok()?;
    let raw_messages = top.messages?;
    if top.members.iter().any(|(k, _)| k == "messages") {
        return None;
    }
    let base = text.as_ptr() as usize;
    let range = |raw: &RawValue| {
        let start = raw.get().as_ptr() as usize - base;
        start..start + raw.get().len()
    };
    let mut body = Map::new();
    let mut system = None;
    let mut raw_tools = None;
    for (k, raw) in &top.members {
        match k.as_ref() {
            "system" => system = Some(range(raw)),
            "tools" => raw_tools = Some(*raw),
            _ => {}
        }
        let value: Value = serde_json::from_str(raw.get()).ok()?;
        if depth(&value) > DEEPEST {
            return None;
        }
        body.insert(k.clone().into_owned(), value);
    }
    body.insert("messages".into(), Value::Array(Vec::new()));
    let body = Value::Object(body);
    let tools = match (raw_tools, body["tools"].as_array()) {
        (Some(raw), Some(tools)) => {
            let raw: Vec<&RawValue> = serde_json::from_str(raw.get()).ok()?;
            raw.iter()
                .zip(tools)
                .map(|(r, t)| (t["name"].as_str().unwrap_or_default().to_owned(), range(r)))
                .collect()
        }
        _ => Vec::new(),
    };

    // A body larger than a generation would only push every session out of the cache,
    // and its entries would be held beside its request until it is answered: it is read
    // the fast way, but nothing of it is kept.
    let keeping = text.len() <= reuse.budget;
    let keys: Vec<u128> = raw_messages.iter().map(|r| key(tenant, r.get())).collect();
    let found = reuse.get(tenant, &keys);
    let mut tool_names: HashMap<String, String> = HashMap::new();
    let mut messages = Vec::with_capacity(raw_messages.len());
    let mut owners = Vec::with_capacity(raw_messages.len());
    let mut roles = Vec::with_capacity(raw_messages.len());
    let mut results: HashMap<String, Vec<usize>> = HashMap::new();
    let mut markers = has_markers(&body);
    let mut read_now = Vec::new();
    for (w, raw) in raw_messages.iter().enumerate() {
        let reused = found[w].as_ref().filter(|e| {
            e.answered
                .iter()
                .all(|(id, name)| tool_names.get(id) == name.as_ref())
        });
        let entry = match reused {
            Some(e) => e.clone(),
            None => {
                let keep = keeping && raw.get().len() >= SMALLEST_KEPT;
                let e = Arc::new(read_one(raw.get(), &tool_names, keep)?);
                if keep {
                    read_now.push((keys[w], e.clone()));
                }
                e
            }
        };
        for (id, name) in &entry.calls {
            tool_names.insert(id.clone(), name.clone());
        }
        for (id, _) in &entry.answered {
            results.entry(id.clone()).or_default().push(w);
        }
        markers |= entry.marked;
        roles.push((range(raw), entry.role));
        owners.extend(std::iter::repeat_n(w, entry.messages.len()));
        // One read now and not kept is this request's alone: its messages are moved.
        match Arc::try_unwrap(entry) {
            Ok(e) => messages.extend(e.messages),
            Err(kept) => messages.extend(kept.messages.iter().cloned()),
        }
    }
    reuse.put(tenant, read_now);
    let rest = rest_of(&body)?;
    Some(Fast {
        body,
        messages,
        owners,
        parts: Parts {
            messages: roles,
            tools,
            system,
            rest,
            markers,
            results,
        },
    })
}

/// The deepest nesting of a member or a message this path reads: read on its own, a
/// value is not held to the depth limit the full read meets for it inside the body
/// (serde_json stops at 128 levels), so anything near it is left to the full read.
pub(crate) const DEEPEST: usize = 100;

/// How deeply `v` nests (a scalar 0, `[]` 1).
pub(crate) fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The shortest wire message kept, in bytes: a shorter one costs little to read again,
/// and its entry would cost more than its bytes (100,000 one-word messages would hold
/// several times the body).
const SMALLEST_KEPT: usize = 256;

/// What an entry costs beside its bytes, by its neutral messages: a conservative
/// estimate of the entry, its map slot and the messages' own structures.
const ENTRY_OVERHEAD: usize = 256;
const MESSAGE_OVERHEAD: usize = 160;

/// One wire message read on its own, `tool_names` naming the calls before it, its text
/// shared when it is to be `kept`; `None` when it does not read (the full read says
/// why).
fn read_one(raw: &str, tool_names: &HashMap<String, String>, kept: bool) -> Option<Entry> {
    let mut m: Value = serde_json::from_str(raw).ok()?;
    // (A message taken from the cache was checked when it was read.)
    if depth(&m) > DEEPEST {
        return None;
    }
    // The names its results are given, and the calls it makes: the reader adds those
    // to the map it is given, so it reads a copy holding only what it looks up.
    let blocks = m["content"].as_array();
    let answered: Vec<(String, Option<String>)> = blocks
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["tool_use_id"].as_str())
        .map(|id| (id.to_owned(), tool_names.get(id).cloned()))
        .collect();
    let mut names: HashMap<String, String> = answered
        .iter()
        .filter_map(|(id, name)| Some((id.clone(), name.clone()?)))
        .collect();
    let mut out = Vec::new();
    super::serve::read_message(&mut m, &mut out, &mut names).ok()?;
    let calls: Vec<(String, String)> = m["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| Some((b["id"].as_str()?.to_owned(), b["name"].as_str()?.to_owned())))
        .collect();
    if kept {
        for message in &mut out {
            share(message);
        }
    }
    let size = raw.len() + ENTRY_OVERHEAD + MESSAGE_OVERHEAD * out.len();
    Some(Entry {
        messages: out,
        role: role_of(m["role"].as_str().unwrap_or_default()),
        calls,
        answered,
        marked: marked(&m["content"]),
        size,
    })
}

/// `m` with its text shared, so that each request taking it copies no bytes of it.
fn share(m: &mut Message) {
    if let Content::Text(text) = &mut m.content {
        text.share();
    }
}

#[cfg(test)]
pub(crate) mod tests;
