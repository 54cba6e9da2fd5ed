//! Snapshots are canonical while the wire keeps its writer's key order: this crate builds
//! `serde_json` with `preserve_order` (so a body goes upstream with the client's keys in
//! the client's order), and every `serde_json::Value` in the program then keeps insertion
//! order, a snapshot's scratchpad included.

use std::hash::{DefaultHasher, Hash, Hasher};

use llm_context::{Message, WorkingContext};
use serde_json::{Map, Value, json};

/// `{"x": 1, "y": [1, {"p": true, "q": null}]}`, its keys inserted in `order` at both
/// depths.
fn note(reversed: bool) -> Value {
    let mut inner = Map::new();
    let mut outer = Map::new();
    if reversed {
        inner.insert("q".into(), Value::Null);
        inner.insert("p".into(), json!(true));
        outer.insert("y".into(), json!([1, Value::Object(inner)]));
        outer.insert("x".into(), json!(1));
    } else {
        inner.insert("p".into(), json!(true));
        inner.insert("q".into(), Value::Null);
        outer.insert("x".into(), json!(1));
        outer.insert("y".into(), json!([1, Value::Object(inner)]));
    }
    Value::Object(outer)
}

fn hash_of<T: Hash>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

#[test]
fn the_wire_keeps_insertion_order() {
    // What makes the next test meaningful: with `preserve_order` a value written y-then-x
    // serializes y-then-x.
    assert_eq!(
        serde_json::to_string(&note(true)).unwrap(),
        r#"{"y":[1,{"q":null,"p":true}],"x":1}"#
    );
}

#[test]
fn equal_snapshots_serialize_to_the_same_bytes_whatever_the_notes_insertion_order() {
    let context = |reversed: bool| {
        let mut ctx = WorkingContext::new();
        ctx.append(Message::user("hello"));
        if reversed {
            ctx.note("plan", note(true));
            ctx.note("owner", json!({"team": "sre", "id": 7}));
        } else {
            ctx.note("owner", json!({"id": 7, "team": "sre"}));
            ctx.note("plan", note(false));
        }
        ctx.freeze()
    };
    let (a, b) = (context(false), context(true));
    assert_eq!(a, b);
    assert_eq!(a.stable_hash(), b.stable_hash());
    assert_eq!(hash_of(&a), hash_of(&b));
    let (text_a, text_b) = (
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap(),
    );
    assert_eq!(text_a, text_b);
    // Canonical: every object's keys sorted, at every depth.
    assert!(
        text_a.contains(
            r#""scratchpad":{"owner":{"id":7,"team":"sre"},"plan":{"x":1,"y":[1,{"p":true,"q":null}]}}"#
        ),
        "{text_a}"
    );
    // And it reads back equal.
    let back: llm_context::FrozenContext = serde_json::from_str(&text_b).unwrap();
    assert_eq!(back, a);
}
