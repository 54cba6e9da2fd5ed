//! The policy's clearing as the provider's context-editing edit, merged into the
//! client's own `context_management`, with the beta each edit needs.
//!
//! ```
//! use llm_context_layers::executor::edits::delegate;
//! use llm_context_layers::{ChatRequest, ContextPolicy, Message};
//! use serde_json::json;
//!
//! let policy = ContextPolicy::default().with_clear_at_least_tokens(8_000).with_never_clear("plan");
//! let mut req = ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")]);
//! // Claude Code's own edit, and its betas.
//! req.params.extra.insert("context_management".into(),
//!     json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}));
//! req.params.headers.push(("anthropic-beta".into(), "interleaved-thinking-2025-05-14".into()));
//! delegate(&mut req, &policy, 27_952);
//! let edits = &req.params.extra["context_management"]["edits"];
//! // The client's edit stays first; the policy's clearing follows it.
//! assert_eq!(edits[0], json!({"type": "clear_thinking_20251015", "keep": "all"}));
//! assert_eq!(edits[1], json!({
//!     "type": "clear_tool_uses_20250919",
//!     "trigger": {"type": "input_tokens", "value": 27_952},
//!     "keep": {"type": "tool_uses", "value": 2},
//!     "clear_at_least": {"type": "input_tokens", "value": 8_000},
//!     "exclude_tools": ["plan"],
//! }));
//! assert_eq!(req.params.headers[0].1, "interleaved-thinking-2025-05-14,context-management-2025-06-27");
//! ```

use serde_json::{Map, Value, json};

use crate::model::ChatRequest;
use crate::policy::ContextPolicy;

/// The provider's edit that clears old tool uses.
pub const CLEAR_TOOL_USES: &str = "clear_tool_uses_20250919";

/// The beta the context-editing edits need (`clear_tool_uses_…`, `clear_thinking_…`).
pub const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";

/// The header that lists a request's betas.
const BETA_HEADER: &str = "anthropic-beta";

/// Whether the client asked the provider to clear or compact this request itself: a
/// `clear_tool_uses_…` or `compact_…` edit of its own, or a top-level `compaction`.
pub fn client_owns_clearing(req: &ChatRequest) -> bool {
    client_compacts(req) || client_edits(req).iter().any(|e| clears(e) || compacts(e))
}

/// A top-level `compaction` (which no `context_management` may be combined with).
pub(crate) fn client_compacts(req: &ChatRequest) -> bool {
    req.params
        .extra
        .get("compaction")
        .is_some_and(|v| !v.is_null())
}

fn edit_type(edit: &Value) -> &str {
    edit.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn clears(edit: &Value) -> bool {
    edit_type(edit).starts_with("clear_tool_uses_")
}

pub(crate) fn compacts(edit: &Value) -> bool {
    let kind = edit_type(edit);
    kind.starts_with("compact_") || kind == "compaction"
}

/// What the stack may count on from a client's own clearing when it plans a request
/// (see [`client_owns_clearing`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClientClearing {
    /// The provider will clear every tool result but the newest `keep` and those of
    /// `exclude` once the request is over the allowance: its trigger is at or below it.
    Counted { keep: usize, exclude: Vec<String> },
    /// Its clearing may not happen by the time the request is over the allowance (a
    /// trigger above it, one counted in tool uses, a compaction): the plan counts on
    /// none of it, and prunes what does not fit.
    Uncounted,
}

/// What the client's own clearing guarantees a request `allowance` tokens long; `None`
/// when the client asks for none ([`client_owns_clearing`] is false).
pub(crate) fn client_clearing(req: &ChatRequest, allowance: usize) -> Option<ClientClearing> {
    let edits = client_edits(req);
    let edit = edits.iter().find(|e| clears(e));
    if client_compacts(req) || (edit.is_none() && edits.iter().any(compacts)) {
        return Some(ClientClearing::Uncounted);
    }
    let edit = edit?;
    let number = |field: &str, kind: &str, default: u64| -> Option<u64> {
        match edit.get(field) {
            None | Some(Value::Null) => Some(default),
            Some(v) if v.get("type").and_then(Value::as_str) == Some(kind) => {
                v.get("value").and_then(Value::as_u64)
            }
            Some(_) => None,
        }
    };
    // The provider's defaults: over 100,000 input tokens, keep 3 tool uses.
    let trigger = number("trigger", "input_tokens", 100_000);
    let keep = number("keep", "tool_uses", 3);
    let at_least = number("clear_at_least", "input_tokens", 0);
    Some(match (trigger, keep, at_least) {
        // A `clear_at_least` the clearing may fall short of leaves it undone.
        (Some(trigger), Some(keep), Some(0)) if trigger <= allowance as u64 => {
            ClientClearing::Counted {
                keep: usize::try_from(keep).unwrap_or(usize::MAX),
                exclude: edit
                    .get("exclude_tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            }
        }
        _ => ClientClearing::Uncounted,
    })
}

/// The client's own edits, as it sent them: Anthropic's `context_management.edits`, or
/// the Responses API's `context_management` list (its entries, `compaction` ones, read
/// as `compact_…` edits).
pub(crate) fn client_edits(req: &ChatRequest) -> &[Value] {
    let cm = req.params.extra.get("context_management");
    match cm {
        Some(Value::Array(entries)) => entries,
        _ => cm
            .and_then(|cm| cm.get("edits"))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice),
    }
}

/// Hands a Responses API request's compaction to OpenAI's server: `context_management:
/// [{"type": "compaction", "compact_threshold": allowance}]` (at least 1,000, the API's
/// floor), unless the client manages its context itself (its own `context_management`,
/// which stands as written). Results are not cleared server-side: the plan counts on
/// none of it.
pub fn delegate_responses(req: &mut ChatRequest, allowance: usize) {
    if req.params.extra.contains_key("context_management") {
        return;
    }
    req.params.extra.insert(
        "context_management".into(),
        json!([{"type": "compaction", "compact_threshold": allowance.max(1_000)}]),
    );
}

/// The policy's clearing as the provider's edit: triggered over `allowance` input
/// tokens (the prompt allowance, in the provider's count), keeping the newest
/// `preserve_tool_results`, clearing at least `clear_at_least_tokens`, never the
/// results of `never_clear` tools, and the calls' inputs too with `clear_tool_inputs`.
pub fn clear_tool_uses(policy: &ContextPolicy, allowance: usize) -> Value {
    let mut edit = Map::new();
    edit.insert("type".into(), json!(CLEAR_TOOL_USES));
    edit.insert(
        "trigger".into(),
        json!({"type": "input_tokens", "value": allowance}),
    );
    edit.insert(
        "keep".into(),
        json!({"type": "tool_uses", "value": policy.protected_tool_results()}),
    );
    if let Some(n) = policy.clear_at_least_tokens {
        edit.insert(
            "clear_at_least".into(),
            json!({"type": "input_tokens", "value": n}),
        );
    }
    if !policy.never_clear.is_empty() {
        edit.insert("exclude_tools".into(), json!(policy.never_clear));
    }
    if policy.clear_tool_inputs {
        edit.insert("clear_tool_inputs".into(), json!(true));
    }
    Value::Object(edit)
}

/// Hands the request's clearing to the provider: when the client asked for clearing or
/// compaction itself, its edits stand as written and nothing is added; otherwise the
/// policy's [`clear_tool_uses`] edit is appended after the client's own edits (so a
/// client's `clear_thinking_…`, which must come first, stays first; none is ever
/// added) and its beta is added to the request's `anthropic-beta` list (kept in order,
/// each beta once). Every other field of the client's `context_management` is kept.
pub fn delegate(req: &mut ChatRequest, policy: &ContextPolicy, allowance: usize) {
    if client_owns_clearing(req) {
        return;
    }
    if add_edit(req, clear_tool_uses(policy, allowance)) {
        add_beta(&mut req.params.headers, CONTEXT_MANAGEMENT_BETA);
    }
}

/// Appends `edit` after the client's own `context_management` edits; `false`, with
/// nothing added, when the client's `context_management` is not an object with an
/// `edits` list (the client's error, which the provider reports; the stack adds
/// nothing to it).
pub(crate) fn add_edit(req: &mut ChatRequest, edit: Value) -> bool {
    let cm = req
        .params
        .extra
        .entry("context_management".to_owned())
        .or_insert_with(|| json!({}));
    let Some(cm) = cm.as_object_mut() else {
        return false;
    };
    match cm.entry("edits").or_insert_with(|| json!([])) {
        Value::Array(edits) => {
            edits.push(edit);
            true
        }
        _ => false,
    }
}

/// Adds `beta` to the `anthropic-beta` list unless a header lists it already: to the
/// end of the first such header, or as a header of its own.
pub fn add_beta(headers: &mut Vec<(String, String)>, beta: &str) {
    let listed = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(BETA_HEADER))
        .flat_map(|(_, v)| v.split(','))
        .any(|b| b.trim() == beta);
    if listed {
        return;
    }
    match headers
        .iter_mut()
        .find(|(n, v)| n.eq_ignore_ascii_case(BETA_HEADER) && !v.trim().is_empty())
    {
        Some((_, v)) => {
            v.push(',');
            v.push_str(beta);
        }
        None => headers.push((BETA_HEADER.into(), beta.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    fn req() -> ChatRequest {
        ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")])
    }

    #[test]
    fn without_edits_of_its_own_the_request_gets_the_policys_and_its_beta() {
        let mut r = req();
        delegate(&mut r, &ContextPolicy::default(), 30_000);
        assert_eq!(
            r.params.extra["context_management"],
            json!({"edits": [{"type": "clear_tool_uses_20250919",
                              "trigger": {"type": "input_tokens", "value": 30_000},
                              "keep": {"type": "tool_uses", "value": 2}}]})
        );
        assert_eq!(
            r.params.headers,
            vec![(
                "anthropic-beta".to_owned(),
                CONTEXT_MANAGEMENT_BETA.to_owned()
            )]
        );
    }

    #[test]
    fn a_clients_clearing_is_kept_as_written_and_nothing_is_added() {
        let mut r = req();
        let own = json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"},
                                   {"type": "clear_tool_uses_20250919",
                                    "keep": {"type": "tool_uses", "value": 5}}]});
        r.params.extra.insert("context_management".into(), own);
        r.params
            .headers
            .push(("anthropic-beta".into(), CONTEXT_MANAGEMENT_BETA.into()));
        let before = r.params.clone();
        delegate(&mut r, &ContextPolicy::default(), 30_000);
        assert_eq!(r.params, before);
        assert_eq!(r.params.headers, before.headers);
        // Top-level compaction: the provider compacts; nothing is combined with it.
        let mut r = req();
        r.params
            .extra
            .insert("compaction".into(), json!({"type": "auto"}));
        delegate(&mut r, &ContextPolicy::default(), 30_000);
        assert!(!r.params.extra.contains_key("context_management"));
        assert!(r.params.headers.is_empty());
    }

    #[test]
    fn a_clients_clearing_is_counted_on_only_when_it_triggers_within_the_allowance() {
        let with = |edit: Value| {
            let mut r = req();
            r.params
                .extra
                .insert("context_management".into(), json!({"edits": [edit]}));
            client_clearing(&r, 30_000).unwrap()
        };
        assert_eq!(
            with(json!({"type": "clear_tool_uses_20250919",
                        "trigger": {"type": "input_tokens", "value": 20_000},
                        "keep": {"type": "tool_uses", "value": 5},
                        "exclude_tools": ["plan"]})),
            ClientClearing::Counted {
                keep: 5,
                exclude: vec!["plan".into()]
            }
        );
        // The provider's default trigger, 100,000, is past a 30,000 allowance.
        let late = with(json!({"type": "clear_tool_uses_20250919"}));
        assert_eq!(late, ClientClearing::Uncounted);
        let by_uses = with(json!({"type": "clear_tool_uses_20250919",
                                  "trigger": {"type": "tool_uses", "value": 10}}));
        assert_eq!(by_uses, ClientClearing::Uncounted);
        let at_least = with(json!({"type": "clear_tool_uses_20250919",
                                   "trigger": {"type": "input_tokens", "value": 20_000},
                                   "clear_at_least": {"type": "input_tokens", "value": 5_000}}));
        assert_eq!(at_least, ClientClearing::Uncounted);
        assert_eq!(
            with(json!({"type": "compact_20260112"})),
            ClientClearing::Uncounted
        );
    }

    #[test]
    fn a_client_that_asks_for_no_clearing_has_none_to_count_on() {
        let mut r = req();
        assert_eq!(client_clearing(&r, 30_000), None);
        r.params.extra.insert(
            "context_management".into(),
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
        );
        assert_eq!(client_clearing(&r, 30_000), None);
        assert!(!client_owns_clearing(&r));
    }

    #[test]
    fn betas_are_a_union_in_order_each_once() {
        let mut h = vec![
            ("Anthropic-Beta".to_owned(), "a-1, b-2".to_owned()),
            ("x-other".to_owned(), "1".to_owned()),
        ];
        add_beta(&mut h, "c-3");
        assert_eq!(h[0].1, "a-1, b-2,c-3");
        add_beta(&mut h, "b-2");
        add_beta(&mut h, "c-3");
        assert_eq!(h[0].1, "a-1, b-2,c-3");
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn the_other_fields_of_the_clients_context_management_are_kept() {
        let mut r = req();
        r.params.extra.insert(
            "context_management".into(),
            json!({"edits": [], "future_field": 1}),
        );
        let policy = ContextPolicy::default()
            .with_clear_tool_inputs(true)
            .with_preserve_tool_results(4);
        delegate(&mut r, &policy, 10_000);
        let cm = &r.params.extra["context_management"];
        assert_eq!(cm["future_field"], 1);
        assert_eq!(cm["edits"][0]["keep"]["value"], 4);
        assert_eq!(cm["edits"][0]["clear_tool_inputs"], true);
    }
}
