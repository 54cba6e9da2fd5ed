//! Who edits the context of a request: the stack ([`Executor::Local`]), the provider
//! ([`Executor::Delegate`]), or nobody ([`Executor::Off`]); chosen per request, named
//! in the report.
//!
//! ```
//! use llm_context_layers::executor::choose;
//! use llm_context_layers::{Catalog, ChatRequest, Executor, Message};
//!
//! let catalog = Catalog::builtin();
//! let mut req = ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")]);
//! // A model that binds thinking, with thinking on: the provider clears, so no signed
//! // thinking block is ever invalidated.
//! req.params.extra.insert("thinking".into(), serde_json::json!({"type": "enabled", "budget_tokens": 2048}));
//! assert_eq!(choose(Executor::Auto, &req, &catalog), Executor::Delegate);
//! // Without thinking, or on a model whose provider does not edit context: the stack does.
//! let plain = ChatRequest::new("gpt-5.5", vec![Message::user("hi")]);
//! assert_eq!(choose(Executor::Auto, &plain, &catalog), Executor::Local);
//! assert_eq!(choose(Executor::Delegate, &plain, &catalog), Executor::Local);
//! assert_eq!(choose(Executor::Off, &req, &catalog), Executor::Off);
//! ```
//!
//! The choice, in order:
//!
//! 1. `off` in the policy: nothing is edited.
//! 2. A request that chains server-side state (a Messages `thread`, a Responses
//!    `previous_response_id`, `conversation` or `item_reference`) carries only its
//!    newest turn; the history it extends is the provider's: `Off`, unless the policy
//!    says `local`.
//! 3. A client that asks the provider to clear or compact (its own
//!    `context_management` with `clear_tool_uses_…` or `compact_…`, or a top-level
//!    `compaction`): `Delegate`, whatever the policy, so the stack never clears the
//!    span the provider clears (both clearing over-clears: the provider's `keep` would
//!    count the stack's stubs).
//! 4. `delegate` in the policy, on a model whose provider edits context
//!    ([`Catalog::edits_context`]), for a request written in that provider's format or
//!    built by hand (a Chat Completions body's provider headers are never sent to
//!    Anthropic, so the edit's beta could not be): `Delegate`; `auto`, on such a model that also binds
//!    thinking ([`Catalog::binds_thinking`]) with thinking in play: `Delegate`, since
//!    the provider's edits never invalidate a signed thinking block and the stack's
//!    would.
//! 5. Otherwise `Local`.
//!
//! What `Delegate` sends is in [`edits`]: the policy's clearing as the provider's
//! `clear_tool_uses_20250919` edit, merged into the client's own edits, with its beta.
//! A Responses API request is delegated to OpenAI's server compaction instead
//! ([`edits::delegate_responses`]: `context_management: [{"type": "compaction",
//! "compact_threshold"}]` at the prompt allowance): results are sent unchanged, and the
//! stack prunes only what would not fit the window; reasoning items go only with their
//! turn, and a chained request is `Off`.
//! The stack still offloads, prunes when even the provider's clearing would not make the
//! request fit, and refuses one that cannot fit; what the provider did comes back in the
//! response ([`AppliedEdits`]).
//!
//! Summary compaction is delegated the same way, by the
//! [`SummarizeLayer`](crate::summarize::SummarizeLayer) under its own
//! [`executor`](crate::summarize::SummarizeConfig::executor): the provider's compaction
//! edit instead of a local fold ([`compaction`]); the signed block it answers with is
//! kept in the answer's message, and everything before it is left out of the requests
//! that carry it back.

mod applied;
pub mod compaction;
pub mod edits;

pub use applied::AppliedEdits;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::model::{ChatRequest, Reasoning, WireFormat};

/// Who edits a request's context: the policy's setting
/// ([`ContextPolicy::executor`](crate::ContextPolicy::executor)) and, resolved per request, the
/// report's ([`PreparationReport::executor`](crate::PreparationReport::executor), never `Auto`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Executor {
    /// Chosen per request (see the [module docs](self)).
    #[default]
    Auto,
    /// The stack's own steps: prune, clear, offload, thinking-safe on binding models.
    Local,
    /// The provider clears (its context-editing edits); the stack offloads, and prunes
    /// only when the provider's clearing would not be enough.
    Delegate,
    /// Nothing is edited: the request passes through as it came.
    Off,
}

impl Executor {
    /// Its name, as policies, headers and metrics write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Executor::Auto => "auto",
            Executor::Local => "local",
            Executor::Delegate => "delegate",
            Executor::Off => "off",
        }
    }
}

impl std::str::FromStr for Executor {
    type Err = String;

    /// Its name, as [`as_str`](Self::as_str) writes it: `"delegate".parse()`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Executor::Auto,
            Executor::Local,
            Executor::Delegate,
            Executor::Off,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
        .ok_or_else(|| format!("`{s}` is not an executor: use auto, local, delegate or off"))
    }
}

impl std::fmt::Display for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The executor for `req` under the policy's `setting` (see the [module docs](self)).
pub fn choose(setting: Executor, req: &ChatRequest, catalog: &Catalog) -> Executor {
    if setting == Executor::Off {
        return Executor::Off;
    }
    if chains_server_state(req) && setting != Executor::Local {
        return Executor::Off;
    }
    if edits::client_owns_clearing(req) {
        return Executor::Delegate;
    }
    // Anthropic's edits need their beta header, which a client of another format never
    // sends on (its provider headers are held back): such a request stays local. A
    // Responses request is compacted by OpenAI's server where its model allows it.
    let edits = match req.params.extra_format {
        None | Some(WireFormat::Messages) => catalog.edits_context(&req.model),
        Some(WireFormat::Responses) => catalog.compacts_responses(&req.model),
        _ => false,
    };
    match setting {
        Executor::Delegate if edits => Executor::Delegate,
        Executor::Auto if edits && catalog.binds_thinking(&req.model) && thinks(req) => {
            Executor::Delegate
        }
        _ => Executor::Local,
    }
}

/// Whether the request extends a history the provider keeps: it then carries only its
/// newest turn, or items by reference (a Responses `item_reference`, which names a
/// stored item the stack cannot see).
pub fn chains_server_state(req: &ChatRequest) -> bool {
    let extra = &req.params.extra;
    let set = |k: &str| extra.get(k).is_some_and(|v| !v.is_null());
    set("thread")
        || set("previous_response_id")
        || set("conversation")
        || req.messages.iter().any(|m| match &m.content {
            crate::model::Content::Parts(parts) => parts.iter().any(|p| {
                matches!(p, crate::model::ContentPart::Opaque { kind, .. } if kind == "item_reference")
            }),
            crate::model::Content::Text(_) => false,
        })
}

/// Whether thinking is in play: asked for, or signed blocks in the history.
fn thinks(req: &ChatRequest) -> bool {
    let asked = req.params.extra.get("thinking").and_then(|t| t.get("type"));
    if matches!(asked.and_then(Value::as_str), Some("enabled" | "adaptive")) {
        return true;
    }
    req.messages.iter().any(|m| {
        m.reasoning().iter().any(|r| {
            matches!(
                r,
                Reasoning::Thinking { .. } | Reasoning::RedactedThinking { .. }
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, ToolCall};
    use serde_json::json;

    fn req(model: &str) -> ChatRequest {
        ChatRequest::new(model, vec![Message::user("hi")])
    }

    #[test]
    fn a_responses_request_is_delegated_to_server_compaction_where_the_model_has_it() {
        let catalog = Catalog::builtin();
        let responses = |model: &str| {
            let mut r = req(model);
            r.params.extra_format = Some(WireFormat::Responses);
            r
        };
        assert_eq!(
            choose(Executor::Delegate, &responses("gpt-5.5"), &catalog),
            Executor::Delegate
        );
        // No thinking to bind: auto stays local.
        assert_eq!(
            choose(Executor::Auto, &responses("gpt-5.5"), &catalog),
            Executor::Local
        );
        assert_eq!(
            choose(Executor::Delegate, &responses("gpt-4.1"), &catalog),
            Executor::Local
        );
        // A Chat Completions request to the same model has no server compaction.
        let mut chat = req("gpt-5.5");
        chat.params.extra_format = Some(WireFormat::ChatCompletions);
        assert_eq!(choose(Executor::Delegate, &chat, &catalog), Executor::Local);
        // A client that asks for server compaction itself is delegated, whatever the policy.
        let mut own = responses("gpt-4.1");
        own.params.extra.insert(
            "context_management".into(),
            json!([{"type": "compaction", "compact_threshold": 200_000}]),
        );
        assert_eq!(choose(Executor::Local, &own, &catalog), Executor::Delegate);
    }

    #[test]
    fn a_chained_request_is_off_unless_the_policy_says_local() {
        let mut r = req("claude-sonnet-4-6");
        r.params.extra.insert(
            "thread".into(),
            json!({"type": "continue", "previous_message_id": "msg_1"}),
        );
        let catalog = Catalog::builtin();
        assert_eq!(choose(Executor::Auto, &r, &catalog), Executor::Off);
        assert_eq!(choose(Executor::Delegate, &r, &catalog), Executor::Off);
        assert_eq!(choose(Executor::Local, &r, &catalog), Executor::Local);
        // The Responses API's chains (the seam its format will read into): the same.
        for (field, value) in [
            ("previous_response_id", json!("resp_1")),
            ("conversation", json!({"id": "conv_1"})),
        ] {
            let mut r = req("gpt-5.5");
            r.params.extra.insert(field.into(), value);
            assert_eq!(
                choose(Executor::Auto, &r, &catalog),
                Executor::Off,
                "{field}"
            );
        }
        // A null field chains nothing.
        let mut r = req("gpt-5.5");
        r.params
            .extra
            .insert("previous_response_id".into(), Value::Null);
        assert_eq!(choose(Executor::Auto, &r, &catalog), Executor::Local);
    }

    #[test]
    fn a_client_that_asks_the_provider_to_clear_is_delegated_even_under_local() {
        let mut r = req("claude-sonnet-4-6");
        r.params.extra.insert(
            "context_management".into(),
            json!({"edits": [{"type": "clear_tool_uses_20250919"}]}),
        );
        let catalog = Catalog::builtin();
        assert_eq!(choose(Executor::Local, &r, &catalog), Executor::Delegate);
        assert_eq!(choose(Executor::Auto, &r, &catalog), Executor::Delegate);
        assert_eq!(choose(Executor::Off, &r, &catalog), Executor::Off);
        // Clearing thinking alone leaves tool results to the stack.
        r.params.extra.insert(
            "context_management".into(),
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
        );
        assert_eq!(choose(Executor::Local, &r, &catalog), Executor::Local);
    }

    #[test]
    fn auto_delegates_on_a_binding_model_only_with_thinking_in_play() {
        let catalog = Catalog::builtin();
        let mut r = req("claude-opus-5-5");
        assert_eq!(choose(Executor::Auto, &r, &catalog), Executor::Local);
        // A signed block in the history is thinking in play, asked for or not.
        let signed = Reasoning::Thinking {
            thinking: "t".into(),
            signature: "s".into(),
        };
        r.messages.push(
            Message::assistant_tool_calls("", vec![ToolCall::new("c1", "run", json!({}))])
                .with_reasoning(vec![signed]),
        );
        assert_eq!(choose(Executor::Auto, &r, &catalog), Executor::Delegate);
        // A model that does not bind thinking stays local under auto.
        r.model = "claude-sonnet-4-6".into();
        assert_eq!(choose(Executor::Auto, &r, &catalog), Executor::Local);
        assert_eq!(choose(Executor::Delegate, &r, &catalog), Executor::Delegate);
    }

    #[test]
    fn names_read_back_from_policy_files() {
        assert!("remote".parse::<Executor>().unwrap_err().contains("remote"));
        for e in [
            Executor::Auto,
            Executor::Local,
            Executor::Delegate,
            Executor::Off,
        ] {
            let json = serde_json::to_value(e).unwrap();
            assert_eq!(json, json!(e.as_str()));
            assert_eq!(serde_json::from_value::<Executor>(json).unwrap(), e);
            assert_eq!(e.as_str().parse::<Executor>(), Ok(e));
        }
    }
}
