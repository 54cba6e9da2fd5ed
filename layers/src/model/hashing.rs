//! The stable hash of the message model: how [`StableHasher`] reads messages and tools.
//! Digests are pinned: keep the order of every field.

use super::{Content, ContentPart, Message, Reasoning, ToolSpec};
use crate::hash::StableHasher;

impl StableHasher {
    /// Feeds one message: role, content, name, call id and tool calls.
    pub fn message(&mut self, m: &Message) {
        self.message_without_reasoning(m);
        self.reasoning(m.reasoning());
    }

    /// Feeds one message as [`message`](Self::message) does, but for its reasoning: what a
    /// provider that binds thinking to its prefix compares (removing thinking keeps the
    /// other blocks' binding valid).
    pub fn message_without_reasoning(&mut self, m: &Message) {
        self.str(m.role.as_str());
        match &m.content {
            Content::Text(t) => {
                self.raw(&[0]);
                self.str(t);
            }
            Content::Parts(parts) => {
                self.raw(&[1]);
                self.u64(parts.len() as u64);
                for part in parts {
                    match part {
                        ContentPart::Text { text } => {
                            self.raw(&[0]);
                            self.str(text);
                        }
                        ContentPart::Image { url, detail } => {
                            self.raw(&[1]);
                            self.str(url);
                            self.opt_str(detail.as_deref());
                        }
                        ContentPart::Opaque { format, kind, json } => {
                            self.raw(&[2]);
                            self.str(&format!("{format:?}"));
                            self.str(kind);
                            self.str(json);
                        }
                    }
                }
            }
        }
        self.opt_str(m.name());
        self.opt_str(m.tool_call_id.as_deref());
        self.u64(m.tool_calls.len() as u64);
        for call in &m.tool_calls {
            self.str(&call.id);
            self.str(&call.name);
            // As the value used to be hashed: canonical arguments (all that
            // `ToolCall::new` writes) hash as before the text was kept, and text that
            // holds no JSON value as the string it is.
            self.raw(b"j");
            if call.arguments_are_json() {
                self.raw(call.arguments.trim().as_bytes());
            } else {
                self.json_str(&call.arguments);
            }
        }
    }

    /// Feeds a message's reasoning: nothing when it has none, so a message without
    /// reasoning hashes as it always did.
    fn reasoning(&mut self, reasoning: &[Reasoning]) {
        if !reasoning.is_empty() {
            self.raw(&[0xFE]);
            self.u64(reasoning.len() as u64);
            for r in reasoning.iter() {
                match r {
                    Reasoning::Thinking {
                        thinking,
                        signature,
                    } => {
                        self.raw(&[0]);
                        self.str(thinking);
                        self.str(signature);
                    }
                    Reasoning::RedactedThinking { data } => {
                        self.raw(&[1]);
                        self.str(data);
                    }
                    Reasoning::Text { text } => {
                        self.raw(&[2]);
                        self.str(text);
                    }
                }
            }
        }
    }

    /// Feeds a list of tool definitions: name, description and JSON schema of each.
    pub fn tools(&mut self, tools: &[ToolSpec]) {
        self.u64(tools.len() as u64);
        for tool in tools {
            self.str(&tool.name);
            self.str(&tool.description);
            self.json(&tool.parameters);
            // Absent and unset hash alike, so keys made before the field stay valid.
            if let Some(strict) = tool.strict {
                self.str(if strict { "strict" } else { "not strict" });
            }
            if let Some(opaque) = &tool.opaque {
                self.str("opaque");
                self.str(&opaque.json);
            }
        }
    }

    /// Feeds a list of messages.
    pub fn messages(&mut self, messages: &[Message]) {
        self.u64(messages.len() as u64);
        for m in messages {
            self.message(m);
        }
    }
}
