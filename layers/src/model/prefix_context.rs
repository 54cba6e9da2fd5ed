//! The frozen, cache-stable head of every request.
//!
//! ```
//! use llm_context_layers::{Message, PrefixContext, Role};
//!
//! let prefix = PrefixContext::new("You are a careful research assistant.")
//!     .with_grounding(vec![Message::system("Q3 pricing: input $3/Mtok, output $15/Mtok.")])
//!     .with_schema_block("{\"type\":\"object\"}");
//! let rendered = prefix.as_messages();
//! assert_eq!(rendered.len(), 3);
//! assert_eq!(rendered[2].name(), Some("schema"));
//! // Structural equality and a stable hash: two prefixes built alike are one cache key.
//! let again = prefix.clone();
//! assert_eq!(prefix, again);
//! assert_eq!(prefix.stable_hash(), again.stable_hash());
//! ```
//!
//! A `PrefixContext` has no mutators: to change it you build a new one, which is exactly
//! the moment a prompt-cache miss is expected. Requests hold it in an `Arc`, so forks and
//! turns share one allocation and one hash.

use serde::{Deserialize, Serialize};

use super::message::{Message, Role};
use crate::hash::StableHasher;

/// The frozen prefix: system prompt, grounding messages and an optional schema block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixContext {
    system_prompt: Option<String>,
    #[serde(default)]
    grounding: Vec<Message>,
    #[serde(default)]
    schema_block: Option<String>,
}

impl PrefixContext {
    /// A prefix with a system prompt.
    pub fn new(system_prompt: impl Into<String>) -> Self {
        Self {
            system_prompt: Some(system_prompt.into()),
            ..Self::default()
        }
    }

    /// An empty prefix.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Adds grounding messages, rendered after the system prompt in order.
    #[must_use]
    pub fn with_grounding(mut self, grounding: Vec<Message>) -> Self {
        self.grounding = grounding;
        self
    }

    /// Sets the schema block, rendered last as a system message named `schema`.
    #[must_use]
    pub fn with_schema_block(mut self, schema: impl Into<String>) -> Self {
        self.schema_block = Some(schema.into());
        self
    }

    /// The system prompt.
    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    /// The grounding messages.
    pub fn grounding(&self) -> &[Message] {
        &self.grounding
    }

    /// The schema block.
    pub fn schema_block(&self) -> Option<&str> {
        self.schema_block.as_deref()
    }

    /// Whether the prefix renders to no message.
    pub fn is_empty(&self) -> bool {
        self.system_prompt.is_none() && self.grounding.is_empty() && self.schema_block.is_none()
    }

    /// Renders the prefix in its fixed order: system prompt, grounding in order, then the
    /// schema block as a system message named `schema`. A fresh `Vec` every call, so a
    /// caller cannot alias the frozen data.
    pub fn as_messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.grounding.len() + 2);
        if let Some(prompt) = &self.system_prompt {
            out.push(Message::system(prompt.as_str()));
        }
        out.extend(self.grounding.iter().cloned());
        if let Some(schema) = &self.schema_block {
            out.push(Message::new(Role::System, schema.as_str()).with_name("schema"));
        }
        out
    }

    /// A stable 128-bit hash of the prefix (the same on every build and machine), as 32
    /// lowercase hex characters. Used as a prompt-cache key.
    pub fn stable_hash(&self) -> String {
        let mut h = StableHasher::new("llm-context/prefix/v1");
        self.hash_into(&mut h);
        h.finish_hex()
    }

    /// Feeds the prefix's content (system prompt, grounding, schema block) into `h`, as
    /// every stable hash of a prefix sees it. Digests are pinned: keep the order.
    pub(crate) fn hash_into(&self, h: &mut StableHasher) {
        h.opt_str(self.system_prompt.as_deref());
        h.messages(&self.grounding);
        h.opt_str(self.schema_block.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::estimate_message_tokens;

    #[test]
    fn estimated_tokens_is_the_estimate_of_the_rendering() {
        let prefixes = [
            PrefixContext::empty(),
            PrefixContext::new("You are a careful research assistant."),
            PrefixContext::new("p".repeat(40_001))
                .with_grounding(vec![
                    Message::system("Q3 pricing"),
                    Message::user("ctx").with_name("doc"),
                ])
                .with_schema_block("{\"type\": \"object\", \"é\": 1}"),
            PrefixContext::empty().with_schema_block("s"),
        ];
        for p in prefixes {
            assert_eq!(
                p.estimated_tokens(),
                estimate_message_tokens(&p.as_messages()),
                "{p:?}"
            );
        }
    }
}
