//! Snapshots: an immutable, hashable, serialisable copy of a working context.
//!
//! ```
//! use llm_context_layers::{FrozenContext, Message, WorkingContext};
//! use serde_json::json;
//!
//! let mut ctx = WorkingContext::new();
//! ctx.append(Message::user("hello"));
//! ctx.note("plan", json!({"steps": ["a", "b"]})); // a nested value: the ordinary case
//!
//! let snap = ctx.freeze();
//! assert_eq!(snap, ctx.freeze());
//! assert_eq!(snap.stable_hash(), ctx.freeze().stable_hash());
//! let back: FrozenContext = serde_json::from_str(&serde_json::to_string(&snap)?)?;
//! assert_eq!(back, snap);
//!
//! ctx.append(Message::assistant("hi"));
//! assert_eq!((snap.messages().len(), ctx.messages().len()), (1, 2));
//! # Ok::<(), serde_json::Error>(())
//! ```
//!
//! A snapshot owns its copy of everything, and has no method that takes `&mut self`, so
//! nothing written to the live context afterwards — however deeply nested — can reach
//! it, and nothing can be written through it:
//!
//! ```compile_fail
//! # use llm_context_layers::WorkingContext;
//! # use serde_json::json;
//! let mut ctx = WorkingContext::new();
//! ctx.note("plan", json!({"steps": ["a"]}));
//! let snap = ctx.freeze();
//! snap.scratchpad().get_mut("plan"); // error: the snapshot lends only shared references
//! ```
//!
//! Equality, [`Hash`] and serialization do not depend on the order the scratchpad's notes
//! (or the objects nested in them) were written in: the scratchpad is serialized with
//! every object's keys sorted.
//!
//! [`Hash`] covers the prefix, the messages and the scratchpad *keys*; equality covers
//! every field. Leaving the values and the journal out of the hash is sound (equal
//! snapshots still hash equally) and means the journal's entry type need not be hashable.
//! The hash is linear in the transcript: if a memoizer hashes the same snapshot in a
//! loop, hold the key instead of recomputing it.
//!
//! A snapshot copies the journal's entries along with everything else. For a long
//! journal snapshotted often, make the entry type an `Arc` (`WorkingContext<Arc<M>>`):
//! every snapshot then shares the entries, which stay immutable through it.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::diff::ContextDiff;
use crate::hash::{Canonical, StableHasher};
use crate::model::Message;
use crate::model::PrefixContext;

/// An immutable snapshot of a [`WorkingContext`](super::WorkingContext): its prefix, tail, scratchpad (ordered
/// by key) and journal entries. Hand one across an agent boundary to brief a child
/// without letting its writes leak back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenContext<J = Value> {
    prefix: Arc<PrefixContext>,
    messages: Vec<Message>,
    #[serde(serialize_with = "canonical_scratchpad")]
    scratchpad: BTreeMap<String, Value>,
    journal: Vec<J>,
}

/// The scratchpad written with every nested object's keys sorted: equality and the hash
/// ignore the order notes were built in, so the serialization must too (a `serde_json`
/// with `preserve_order`, which any crate in the graph can switch on, keeps it in a
/// `Value`). Keys are already sorted by the `BTreeMap`.
fn canonical_scratchpad<S: serde::Serializer>(
    scratchpad: &BTreeMap<String, Value>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(scratchpad.iter().map(|(k, v)| (k, Canonical(v))))
}

impl<J> FrozenContext<J> {
    pub(super) fn new(
        prefix: Arc<PrefixContext>,
        messages: Vec<Message>,
        scratchpad: BTreeMap<String, Value>,
        journal: Vec<J>,
    ) -> Self {
        Self {
            prefix,
            messages,
            scratchpad,
            journal,
        }
    }

    pub(super) fn into_parts(
        self,
    ) -> (
        Arc<PrefixContext>,
        Vec<Message>,
        BTreeMap<String, Value>,
        Vec<J>,
    ) {
        (self.prefix, self.messages, self.scratchpad, self.journal)
    }

    /// The prefix.
    pub fn prefix(&self) -> &Arc<PrefixContext> {
        &self.prefix
    }

    /// The tail.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The scratchpad, ordered by key.
    pub fn scratchpad(&self) -> &BTreeMap<String, Value> {
        &self.scratchpad
    }

    /// One scratchpad value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.scratchpad.get(key)
    }

    /// The journal entries, in order.
    pub fn journal(&self) -> &[J] {
        &self.journal
    }

    /// A stable 128-bit hash of what [`Hash`] covers (prefix, messages, scratchpad keys)
    /// as 32 lowercase hex characters: the same on every build and machine, so it can
    /// key a store that outlives the process.
    pub fn stable_hash(&self) -> String {
        let mut h = StableHasher::new("llm-context/frozen/v1");
        h.str(&self.prefix.stable_hash());
        h.messages(&self.messages);
        h.u64(self.scratchpad.len() as u64);
        for key in self.scratchpad.keys() {
            h.str(key);
        }
        h.finish_hex()
    }

    /// `self - other` (see [`ContextDiff`]).
    pub fn diff(&self, other: &Self) -> ContextDiff {
        ContextDiff::between(
            (&self.prefix, &self.messages, &self.scratchpad),
            (&other.prefix, &other.messages, &other.scratchpad),
        )
    }
}

impl<J> Hash for FrozenContext<J> {
    // Values are JSON and the journal is generic; neither needs to be hashable for the
    // snapshot to be. Equal snapshots have equal prefixes, messages and keys, so the
    // contract with `Eq` holds.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.prefix.hash(state);
        self.messages.hash(state);
        state.write_usize(self.scratchpad.len());
        for key in self.scratchpad.keys() {
            key.hash(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use crate::working::WorkingContext;
    use serde_json::json;
    use std::collections::HashSet;
    use std::hash::DefaultHasher;

    fn hash_of<T: Hash>(value: &T) -> u64 {
        // `DefaultHasher::new()` has fixed keys, so two calls are comparable.
        let mut h = DefaultHasher::new();
        value.hash(&mut h);
        h.finish()
    }

    fn nested() -> WorkingContext {
        let mut ctx = WorkingContext::new();
        ctx.append(Message::user("hello"));
        ctx.note("plan", json!({"steps": ["a", "b"]}));
        ctx
    }

    #[test]
    fn nested_writes_to_the_live_context_do_not_reach_the_snapshot() {
        let mut ctx = WorkingContext::new();
        ctx.note("plan", json!({"steps": ["a"]}));
        let snap = ctx.freeze();
        ctx.get_mut("plan").unwrap()["steps"]
            .as_array_mut()
            .unwrap()
            .push(json!("b"));
        assert_eq!(ctx.get("plan"), Some(&json!({"steps": ["a", "b"]})));
        assert_eq!(snap.get("plan"), Some(&json!({"steps": ["a"]})));
    }

    #[test]
    fn rehydrating_gives_a_writable_top_level() {
        let snap = nested().freeze();
        let mut live = snap.clone().thaw();
        live.get_mut("plan").unwrap()["steps"] = json!([]);
        assert_eq!(live.get("plan"), Some(&json!({"steps": []})));
        assert_eq!(snap.get("plan"), Some(&json!({"steps": ["a", "b"]})));
    }

    #[test]
    fn values_change_equality_but_not_the_hash() {
        let mut a = WorkingContext::new();
        a.note("stage", "plan");
        let mut b = WorkingContext::new();
        b.note("stage", "act");
        let (a, b) = (a.freeze(), b.freeze());
        assert_ne!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        assert_eq!(a.stable_hash(), b.stable_hash());
        // One bucket, two members: Eq separates them.
        let set: HashSet<_> = [a, b].into_iter().collect();
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn keys_messages_and_prefix_change_the_hash() {
        let base = nested().freeze();
        let mut other_key = nested();
        other_key.note("extra", 1);
        let mut other_msg = nested();
        other_msg.append(Message::assistant("hi"));
        let other_prefix = nested().with_prefix(PrefixContext::new("rules"));
        for other in [other_key, other_msg, other_prefix] {
            let other = other.freeze();
            assert_ne!(hash_of(&other), hash_of(&base));
            assert_ne!(other.stable_hash(), base.stable_hash());
        }
    }

    #[test]
    fn journal_takes_part_in_equality_only() {
        let mut a = nested();
        a.journal_mut().record(json!({"kind": "x"}));
        let b = nested();
        assert_ne!(a.freeze(), b.freeze());
        assert_eq!(hash_of(&a.freeze()), hash_of(&b.freeze()));
    }

    #[test]
    fn a_journal_of_unhashable_entries_still_hashes() {
        // f64 is neither Eq nor Hash; the snapshot's Hash does not need it to be.
        let mut ctx: WorkingContext<f64> = WorkingContext::default();
        ctx.journal_mut().record(0.5);
        let snap = ctx.freeze();
        let _ = hash_of(&snap);
        assert_eq!(snap.journal(), [0.5]);
    }

    #[test]
    fn stable_hash_survives_clone_and_fork() {
        let mut ctx = WorkingContext::new().with_prefix(PrefixContext::new("rules"));
        ctx.append(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new("c1", "openssl", json!({"port": 443}))],
        ))
        .note("k", 1);
        let once = ctx.freeze().stable_hash();
        assert_eq!(once.len(), 32);
        assert_eq!(once, ctx.clone().freeze().stable_hash());
        assert_eq!(once, ctx.fork().freeze().stable_hash());
    }
}
