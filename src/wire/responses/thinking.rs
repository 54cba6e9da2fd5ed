//! Claude's thinking carried through a Responses caller: a `thinking` (or
//! `redacted_thinking`) block of a Claude answer is written as a `reasoning` item whose
//! `encrypted_content` is the block itself, as Anthropic wrote it, and whose summary is
//! its text. The caller resends the item as it got it (the Responses API asks clients
//! to resend reasoning items whole), and the reader turns it back into the block, so a
//! Claude model in a tool loop gets its signed thinking back, first in its turn, as
//! Anthropic requires.
//!
//! The block's JSON text never looks like OpenAI's own encrypted content (base64), so
//! the two cannot be taken for each other: an OpenAI reasoning item still has no
//! counterpart in the Messages API, and one of these is never sent to OpenAI.

use llm_context_layers::Reasoning;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A Messages thinking block, as the item's `encrypted_content` holds it.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Block {
    Thinking { thinking: String, signature: String },
    RedactedThinking { data: String },
}

/// The `reasoning` output item for `r`, with id `id`; `None` for reasoning that is
/// never sent back (an OpenAI-compatible server's plain text).
pub(crate) fn item(r: &Reasoning, id: &str) -> Option<Value> {
    let (block, summary) = match r {
        Reasoning::Thinking {
            thinking,
            signature,
        } => (
            Block::Thinking {
                thinking: thinking.clone(),
                signature: signature.clone(),
            },
            vec![json!({"type": "summary_text", "text": thinking})],
        ),
        Reasoning::RedactedThinking { data } => {
            (Block::RedactedThinking { data: data.clone() }, Vec::new())
        }
        _ => return None,
    };
    let encrypted = serde_json::to_string(&block).ok()?;
    Some(json!({"type": "reasoning", "id": id, "summary": summary,
                "encrypted_content": encrypted, "status": "completed"}))
}

/// The Claude thinking a `reasoning` item carries, when it is one [`item`] wrote.
pub(crate) fn read(item: &serde_json::Map<String, Value>) -> Option<Reasoning> {
    let encrypted = item.get("encrypted_content")?.as_str()?;
    if !encrypted.starts_with('{') {
        return None;
    }
    Some(match serde_json::from_str(encrypted).ok()? {
        Block::Thinking {
            thinking,
            signature,
        } => Reasoning::Thinking {
            thinking,
            signature,
        },
        Block::RedactedThinking { data } => Reasoning::RedactedThinking { data },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_goes_out_as_an_item_and_comes_back_the_same() {
        let thinking = Reasoning::Thinking {
            thinking: "Die Liste zuerst. 先看列表 \"quoted\"".into(),
            signature: "EqQBCkYIBxgCKkD…sig==".into(),
        };
        let redacted = Reasoning::RedactedThinking {
            data: "EmwKAhgBEgy…".into(),
        };
        for r in [thinking, redacted] {
            let v = item(&r, "rs_0").unwrap();
            assert_eq!(v["type"], "reasoning");
            // What a client resends: the item as it came, through its own JSON.
            let resent: Value = serde_json::from_str(&v.to_string()).unwrap();
            assert_eq!(read(resent.as_object().unwrap()), Some(r));
        }
        let t = item(
            &Reasoning::Thinking {
                thinking: "x".into(),
                signature: "s".into(),
            },
            "rs_1",
        )
        .unwrap();
        assert_eq!(t["summary"][0]["text"], "x");
        assert_eq!(
            t["encrypted_content"],
            r#"{"type":"thinking","thinking":"x","signature":"s"}"#
        );
    }

    #[test]
    fn openai_reasoning_and_text_reasoning_are_not_taken_for_thinking() {
        let openai = json!({"type": "reasoning", "id": "rs_1", "summary": [],
                            "encrypted_content": "gAAAAABo…"});
        assert_eq!(read(openai.as_object().unwrap()), None);
        let odd = json!({"type": "reasoning", "encrypted_content": "{\"type\":\"other\"}"});
        assert_eq!(read(odd.as_object().unwrap()), None);
        assert_eq!(item(&Reasoning::Text { text: "t".into() }, "rs_0"), None);
    }
}
