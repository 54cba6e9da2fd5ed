//! Diffs between two contexts, as values.
//!
//! ```
//! use llm_context_layers::{Message, WorkingContext};
//! use serde_json::json;
//!
//! let mut before = WorkingContext::new();
//! before.append(Message::user("q1")).note("stage", "plan");
//! let mut after = before.fork();
//! after.append(Message::assistant("a1")).note("stage", "act");
//!
//! let d = after.diff(&before);
//! assert_eq!((d.messages_added().len(), d.messages_removed().len()), (1, 0));
//! assert_eq!(d.scratchpad_changes()["stage"], json!("act"));
//! assert!(!d.prefix_changed());
//!
//! // A diff owns its values: later writes to either context cannot rewrite it.
//! after.note("stage", "done");
//! assert_eq!(d.scratchpad_changes()["stage"], json!("act"));
//! ```
//!
//! A diff is reported and logged after it is computed, so it must not change
//! afterwards. It owns copies of everything it mentions, and lends them out only by
//! shared reference; there is nothing to edit in place:
//!
//! ```compile_fail
//! # use llm_context_layers::WorkingContext;
//! let (mut a, b) = (WorkingContext::new(), WorkingContext::new());
//! a.note("stage", "act");
//! let d = a.diff(&b);
//! d.scratchpad_changes().insert("stage".into(), "tampered".into()); // error: `&` reference
//! ```
//!
//! The journal is deliberately absent: its own watermark-based
//! [`MutationJournal::diff`](crate::MutationJournal::diff) is the right view for
//! streaming.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Message;
use crate::model::PrefixContext;

/// What one context has that another lacks: `self - other`.
///
/// Messages are compared by value and counted as a multiset, so a message that appears
/// twice here and once there is added once; order follows the side it comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextDiff {
    messages_added: Vec<Message>,
    messages_removed: Vec<Message>,
    scratchpad_changes: BTreeMap<String, Value>,
    scratchpad_removed: BTreeSet<String>,
    prefix_changed: bool,
}

/// The parts of a context a diff reads.
pub(super) type Side<'a> = (
    &'a Arc<PrefixContext>,
    &'a [Message],
    &'a BTreeMap<String, Value>,
);

impl ContextDiff {
    pub(super) fn between(this: Side<'_>, other: Side<'_>) -> Self {
        let (prefix, messages, pad) = this;
        let (other_prefix, other_messages, other_pad) = other;
        Self {
            messages_added: multiset_minus(messages, other_messages),
            messages_removed: multiset_minus(other_messages, messages),
            scratchpad_changes: pad
                .iter()
                .filter(|(k, v)| other_pad.get(k.as_str()) != Some(v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            scratchpad_removed: other_pad
                .keys()
                .filter(|k| !pad.contains_key(k.as_str()))
                .cloned()
                .collect(),
            prefix_changed: !Arc::ptr_eq(prefix, other_prefix) && prefix != other_prefix,
        }
    }

    /// Messages here and not there.
    pub fn messages_added(&self) -> &[Message] {
        &self.messages_added
    }

    /// Messages there and not here.
    pub fn messages_removed(&self) -> &[Message] {
        &self.messages_removed
    }

    /// Scratchpad entries here that are new or hold a different value there, with the
    /// value they hold here.
    pub fn scratchpad_changes(&self) -> &BTreeMap<String, Value> {
        &self.scratchpad_changes
    }

    /// Scratchpad keys there and not here.
    pub fn scratchpad_removed(&self) -> &BTreeSet<String> {
        &self.scratchpad_removed
    }

    /// Whether the prefixes differ (structurally: two prefixes built alike are equal).
    pub fn prefix_changed(&self) -> bool {
        self.prefix_changed
    }

    /// Whether the two sides had the same prefix, tail (as multisets) and scratchpad.
    pub fn is_empty(&self) -> bool {
        self.messages_added.is_empty()
            && self.messages_removed.is_empty()
            && self.scratchpad_changes.is_empty()
            && self.scratchpad_removed.is_empty()
            && !self.prefix_changed
    }
}

fn multiset_minus(from: &[Message], minus: &[Message]) -> Vec<Message> {
    let mut counts: HashMap<&Message, usize> = HashMap::with_capacity(minus.len());
    for m in minus {
        *counts.entry(m).or_default() += 1;
    }
    from.iter()
        .filter(|m| match counts.get_mut(m) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::{Message, PrefixContext, WorkingContext};
    use serde_json::json;

    #[test]
    fn later_writes_do_not_alter_a_diff_already_taken() {
        let mut before = WorkingContext::new();
        before.note("plan", json!({"steps": ["a"]}));
        let mut after = before.fork();
        after.note("plan", json!({"steps": ["a", "b"]}));
        let d = after.diff(&before);
        let reported = d.clone();

        after.get_mut("plan").unwrap()["steps"] = json!(["rewritten"]);
        after.update_scratchpad([("plan", json!(null)), ("new", json!(1))]);
        assert_eq!(d, reported);
        assert_eq!(d.scratchpad_changes()["plan"], json!({"steps": ["a", "b"]}));
    }

    #[test]
    fn removed_messages_keys_and_prefix() {
        let mut before = WorkingContext::new().with_prefix(PrefixContext::new("v1"));
        before
            .extend([Message::user("q"), Message::user("q"), Message::user("x")])
            .note("gone", 1)
            .note("kept", 2);
        let mut after = WorkingContext::new().with_prefix(PrefixContext::new("v2"));
        after
            .extend([Message::user("q"), Message::user("y")])
            .note("kept", 2);

        let d = after.diff(&before);
        assert_eq!(d.messages_added(), [Message::user("y")]);
        assert_eq!(
            d.messages_removed(),
            [Message::user("q"), Message::user("x")]
        );
        assert!(d.scratchpad_changes().is_empty());
        assert_eq!(d.scratchpad_removed().iter().collect::<Vec<_>>(), ["gone"]);
        assert!(d.prefix_changed());
        assert!(!d.is_empty());
    }

    #[test]
    fn prefixes_built_alike_are_unchanged() {
        let a = WorkingContext::new().with_prefix(PrefixContext::new("same"));
        let b = WorkingContext::new().with_prefix(PrefixContext::new("same"));
        let d = a.diff(&b);
        assert!(!d.prefix_changed());
        assert!(d.is_empty());
    }

    #[test]
    fn snapshots_diff_like_live_contexts() {
        let mut ctx = WorkingContext::new();
        ctx.append(Message::user("q1"));
        let before = ctx.freeze();
        ctx.append(Message::assistant("a1"));
        let after = ctx.freeze();
        assert_eq!(
            after.diff(&before).messages_added(),
            [Message::assistant("a1")]
        );
        assert_eq!(
            before.diff(&after).messages_removed(),
            [Message::assistant("a1")]
        );
    }

    #[test]
    fn diff_round_trips_through_serde() {
        let mut a = WorkingContext::new();
        a.append(Message::user("q")).note("k", json!([1, 2]));
        let d = a.diff(&WorkingContext::new());
        let back: super::ContextDiff =
            serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }
}
