//! Reading a Codex session's next request by what is new in it.
//!
//! A Responses request from an agent is its previous request plus a few items, byte for
//! byte. The full read ([`request`](super::read::request)) parses the whole body into a
//! JSON tree and scans it twice more for where its members and items lie, so its cost
//! grows with the transcript. Here the body is scanned for its members, then `input` for
//! its items (no tree of either), and each item is looked up by a digest of its bytes
//! among the items read before, in a two-generation cache of the Messages reader's kind
//! ([`Reuse`], an instance of its own; the digest salted with the tenant): one seen
//! before gives what it gave then ([`Piece`]), and only the others are parsed. An item's piece depends on no other item (a call's output is named by its
//! call when the pieces are grouped into messages, for every request anew), so what
//! comes out is the full read's, which the tests check on generated sessions. A body this
//! path does not expect (a repeated member, `input` that is not a list, an item that
//! does not read, a member or item nested deeper than [`DEEPEST`](crate::wire::messages::reuse::DEEPEST)) goes the full way,
//! which says what is wrong with it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use llm_context_layers::ChatRequest;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::read::{Input, Kept, Piece, assemble, piece};
use crate::wire::messages::reuse::{DEEPEST, Reuse, Weighed, depth, key_in};

/// The shortest item kept, in bytes: a shorter one costs little to read again.
const SMALLEST_KEPT: usize = 256;

impl Weighed for Piece {
    fn weight(&self) -> usize {
        self.size
    }
}

/// A body's top-level members in order, each's value as it lies in the body: one scan,
/// no tree.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Each)
    }
}

/// The fast read of `body` for `tenant` (see the module docs), or `None` where the full
/// read must say what is wrong with it (or reads it as well).
pub(crate) fn read(
    body: &Bytes,
    reuse: &Reuse<Piece>,
    tenant: &str,
) -> Option<(ChatRequest, Kept)> {
    let text = simdutf8::basic::from_utf8(body).ok()?;
    let Members(members) = serde_json::from_str(text).ok()?;
    let mut obj = Map::new();
    let mut raw_members: HashMap<String, &RawValue> = HashMap::with_capacity(members.len());
    let mut input = None;
    for (k, raw) in members {
        // A repeated member: the full read takes the last, as a tree does.
        if raw_members.insert(k.clone().into_owned(), raw).is_some() {
            return None;
        }
        if k == "input" {
            input = Some(raw);
        } else {
            let value: Value = serde_json::from_str(raw.get()).ok()?;
            if depth(&value) > DEEPEST {
                return None;
            }
            obj.insert(k.into_owned(), value);
        }
    }
    // Only a list of items is read by its items; a string or nothing the full way.
    let raw_items: Vec<&RawValue> = serde_json::from_str(input?.get()).ok()?;

    // A body larger than a generation would only push every session out of the cache:
    // read this way, but nothing of it kept.
    let keeping = text.len() <= reuse.budget();
    let keys: Vec<u128> = raw_items
        .iter()
        .map(|r| key_in("llm-context.responses.reuse", tenant, r.get()))
        .collect();
    let found = reuse.get(tenant, &keys);
    let mut pieces = Vec::with_capacity(raw_items.len());
    let mut read_now = Vec::new();
    for ((raw, key), found) in raw_items.iter().zip(&keys).zip(found) {
        let piece = match found {
            Some(p) => p,
            None => {
                let item: Value = serde_json::from_str(raw.get()).ok()?;
                // (A cached item was checked when it was read.)
                if depth(&item) > DEEPEST {
                    return None;
                }
                let mut p = piece(&item).ok()?;
                p.size += raw.get().len();
                let p = Arc::new(p);
                // An item repeated in the body is kept (and weighed) once.
                if keeping
                    && raw.get().len() >= SMALLEST_KEPT
                    && !read_now.iter().any(|(k, _)| k == key)
                {
                    read_now.push((*key, p.clone()));
                }
                p
            }
        };
        pieces.push(piece);
    }
    reuse.put(tenant, read_now);
    assemble(
        body,
        text,
        &obj,
        raw_members,
        Ok(Input::Items(raw_items, pieces)),
    )
    .ok()
}

#[cfg(test)]
mod tests;
