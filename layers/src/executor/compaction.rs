//! Summary compaction delegated: the provider's `compact_20260112` edit, triggered where
//! the stack would fold, with the summarizer's instructions; and the signed `compaction`
//! block it answers with, which stands in for everything before it.
//!
//! ```
//! use llm_context_layers::executor::compaction::{delegate_compaction, leave_out_compacted};
//! use llm_context_layers::{ChatRequest, ContentPart, Message, WireFormat};
//! use serde_json::json;
//!
//! let mut req = ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")]);
//! delegate_compaction(&mut req, 89_600, "Keep every file path.");
//! assert_eq!(req.params.extra["context_management"]["edits"][0], json!({
//!     "type": "compact_20260112",
//!     "trigger": {"type": "input_tokens", "value": 89_600},
//!     "instructions": "Keep every file path.",
//! }));
//! assert_eq!(req.params.headers[0].1, "compact-2026-01-12");
//!
//! // The provider compacted: its block came back first in an answer, and the client
//! // sends its transcript again. What is before the block is not shown to the model.
//! let block = ContentPart::Opaque {
//!     format: WireFormat::Messages,
//!     kind: "compaction".into(),
//!     json: r#"{"type":"compaction","content":"We fixed the build."}"#.into(),
//! };
//! let mut req = ChatRequest::new("claude-fable-5-1", vec![
//!     Message::system("You are terse."),
//!     Message::user("fix the build"),
//!     Message::assistant(vec![block, ContentPart::text("Done.")]),
//!     Message::user("and now the tests"),
//! ]);
//! assert_eq!(leave_out_compacted(&mut req), 1);
//! assert_eq!(req.messages.len(), 3); // the system message, the block's answer, the new turn
//! ```

use serde_json::{Map, Value, json};

use super::edits::{add_beta, add_edit};
use crate::model::{ChatRequest, ChatResponse, Content, ContentPart, Message, Role, WireFormat};

/// The provider's edit that compacts a conversation over its trigger.
pub const COMPACT: &str = "compact_20260112";

/// The beta the compaction edit needs.
pub const COMPACT_BETA: &str = "compact-2026-01-12";

/// The `type` of the block the provider answers a compaction with.
pub const COMPACTION_BLOCK: &str = "compaction";

/// What the provider's summarizer is told when the configuration gives no instructions
/// of its own: what the stack's own summary keeps, in prose (the provider writes its
/// summary as text, not the stack's JSON).
pub const COMPACTION_INSTRUCTIONS: &str = "Summarize the conversation so far so that \
the work can go on from the summary alone. Keep: what the user wants; what was decided \
and why; unanswered questions and unfinished work; concrete findings, with every \
identifier exactly as written (file paths, URLs, ids, numbers with units); and a few \
sentences of what happened.";

/// The compaction edit: over `trigger` input tokens, the provider summarizes the
/// conversation with `instructions` (its own prompt when they are empty).
pub fn compact_edit(trigger: usize, instructions: &str) -> Value {
    let mut edit = Map::new();
    edit.insert("type".into(), json!(COMPACT));
    edit.insert(
        "trigger".into(),
        json!({"type": "input_tokens", "value": trigger}),
    );
    if !instructions.trim().is_empty() {
        edit.insert("instructions".into(), json!(instructions));
    }
    Value::Object(edit)
}

/// Whether the request already asks the provider to compact: a `compact_…` edit of its
/// own, a top-level `compaction` (which no `context_management` may be combined with), or
/// a Responses API `compaction` entry.
pub fn compacts(req: &ChatRequest) -> bool {
    super::edits::client_compacts(req)
        || super::edits::client_edits(req)
            .iter()
            .any(super::edits::compacts)
}

/// Hands the request's summary compaction to the provider: [`compact_edit`] appended
/// after the client's own edits (a client's `clear_thinking_…` stays first), and its
/// beta added to the `anthropic-beta` list; for a Responses API request, OpenAI's server
/// compaction at `trigger` ([`delegate_responses`](super::edits::delegate_responses),
/// which takes no instructions). A request that asks for compaction itself
/// is left as it is; so is a `context_management` that is not an object with an
/// `edits` list (the provider reports the client's error).
pub fn delegate_compaction(req: &mut ChatRequest, trigger: usize, instructions: &str) {
    if compacts(req) {
        return;
    }
    // OpenAI's server compaction takes a threshold and no instructions.
    if req.params.extra_format == Some(WireFormat::Responses) {
        super::edits::delegate_responses(req, trigger);
        return;
    }
    if add_edit(req, compact_edit(trigger, instructions)) {
        add_beta(&mut req.params.headers, COMPACT_BETA);
    }
}

/// Whether `m` holds a provider's compaction block.
fn holds_compaction(m: &Message) -> bool {
    match &m.content {
        Content::Parts(parts) => parts.iter().any(is_compaction),
        Content::Text(_) => false,
    }
}

/// Whether `part` is a provider's compaction block.
pub fn is_compaction(part: &ContentPart) -> bool {
    matches!(part, ContentPart::Opaque { kind, .. } if kind == COMPACTION_BLOCK)
}

/// Moves the provider's compaction blocks from among the blocks a response keeps for
/// its caller (`provider_fields["content"]`, what the neutral message has no place for)
/// to the front of its message, where a transcript that appends the message carries
/// them back as the provider asks (first, in place of what they summarize).
pub fn keep_in_message(response: &mut ChatResponse) {
    let Some(Value::Array(kept)) = response.provider_fields.get_mut("content") else {
        return;
    };
    let is_block = |b: &Value| b.get("type").and_then(Value::as_str) == Some(COMPACTION_BLOCK);
    if !kept.iter().any(is_block) {
        return;
    }
    let (blocks, rest): (Vec<Value>, Vec<Value>) =
        std::mem::take(kept).into_iter().partition(is_block);
    if rest.is_empty() {
        response.provider_fields.remove("content");
    } else {
        *kept = rest;
    }
    let mut parts: Vec<ContentPart> = blocks
        .into_iter()
        .map(|b| ContentPart::Opaque {
            format: WireFormat::Messages,
            kind: COMPACTION_BLOCK.into(),
            json: b.to_string(),
        })
        .collect();
    match std::mem::take(&mut response.message.content) {
        Content::Text(t) if t.as_str().is_empty() => {}
        Content::Text(t) => parts.push(ContentPart::text(t.as_str())),
        Content::Parts(more) => parts.extend(more),
    }
    response.message.content = Content::from(parts);
}

/// Leaves out what the newest compaction block stands in for: the messages before the
/// one that holds it (the leading system messages stay, as the prefix), and the parts
/// before it in its own message. The provider shows the model none of them (it drops
/// everything before the block), so they are neither counted nor sent. Returns the
/// messages left out.
pub fn leave_out_compacted(req: &mut ChatRequest) -> usize {
    let Some(at) = req.messages.iter().rposition(holds_compaction) else {
        return 0;
    };
    let prefix = req
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count()
        .min(at);
    if let Content::Parts(parts) = &mut req.messages[at].content
        && let Some(first) = parts.iter().rposition(is_compaction)
    {
        let mut kept = std::mem::take(parts).into_vec();
        kept.drain(..first);
        *parts = kept.into();
    }
    req.messages.drain(prefix..at);
    at - prefix
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WireFormat;

    fn block(text: &str) -> ContentPart {
        ContentPart::Opaque {
            format: WireFormat::Messages,
            kind: COMPACTION_BLOCK.into(),
            json: json!({"type": "compaction", "content": text}).to_string(),
        }
    }

    #[test]
    fn the_edit_goes_after_the_clients_own_and_a_clients_compaction_stands() {
        let mut r = ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")]);
        r.params.extra.insert(
            "context_management".into(),
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
        );
        r.params.headers.push((
            "anthropic-beta".into(),
            "context-management-2025-06-27".into(),
        ));
        delegate_compaction(&mut r, 1_000, "");
        let edits = &r.params.extra["context_management"]["edits"];
        assert_eq!(edits[0]["type"], "clear_thinking_20251015");
        // Empty instructions: the provider's own prompt.
        assert_eq!(
            edits[1],
            json!({"type": COMPACT, "trigger": {"type": "input_tokens", "value": 1_000}})
        );
        assert_eq!(
            r.params.headers[0].1,
            "context-management-2025-06-27,compact-2026-01-12"
        );
        // Asked again (a retry of the same request): nothing added twice.
        let before = r.params.clone();
        delegate_compaction(&mut r, 1_000, "");
        assert_eq!(r.params, before);
        // A client's top-level compaction: nothing is combined with it.
        let mut r = ChatRequest::new("claude-fable-5-1", vec![Message::user("hi")]);
        r.params
            .extra
            .insert("compaction".into(), json!({"type": "summarize"}));
        delegate_compaction(&mut r, 1_000, "x");
        assert!(!r.params.extra.contains_key("context_management"));
        assert!(r.params.headers.is_empty());
    }

    #[test]
    fn a_responses_request_gets_openais_server_compaction_and_a_clients_own_stands() {
        let mut r = ChatRequest::new("gpt-5.5", vec![Message::user("hi")]);
        r.params.extra_format = Some(WireFormat::Responses);
        delegate_compaction(&mut r, 89_600, "ignored: the API takes none");
        assert_eq!(
            r.params.extra["context_management"],
            json!([{"type": "compaction", "compact_threshold": 89_600}])
        );
        assert!(r.params.headers.is_empty());
        assert!(compacts(&r));
        // The client's own entry stands as written.
        let mut own = ChatRequest::new("gpt-5.5", vec![Message::user("hi")]);
        own.params.extra_format = Some(WireFormat::Responses);
        let theirs = json!([{"type": "compaction", "compact_threshold": 50_000}]);
        own.params
            .extra
            .insert("context_management".into(), theirs.clone());
        delegate_compaction(&mut own, 89_600, "");
        assert_eq!(own.params.extra["context_management"], theirs);
    }

    #[test]
    fn a_responses_compaction_block_goes_first_in_its_message() {
        let mut r = ChatResponse::new(Message::assistant("Next."));
        r.provider_fields.insert(
            "content".into(),
            json!([{"type": "server_tool_use", "id": "s1"},
                   {"type": "compaction", "content": "sum"}]),
        );
        keep_in_message(&mut r);
        let Content::Parts(parts) = &r.message.content else {
            panic!("parts")
        };
        assert_eq!(parts[0], block("sum"));
        assert_eq!(parts[1], ContentPart::text("Next."));
        // The block it does not concern stays where it was.
        assert_eq!(
            r.provider_fields["content"],
            json!([{"type": "server_tool_use", "id": "s1"}])
        );
        // Alone, it leaves no empty list behind; an empty text is not kept.
        let mut r = ChatResponse::new(Message::assistant(""));
        r.provider_fields.insert(
            "content".into(),
            json!([{"type": "compaction", "content": "sum"}]),
        );
        keep_in_message(&mut r);
        assert!(!r.provider_fields.contains_key("content"));
        assert_eq!(r.message.content, Content::from(vec![block("sum")]));
    }

    #[test]
    fn only_the_newest_block_counts_and_what_follows_it_is_kept_whole() {
        let mut r = ChatRequest::new(
            "claude-fable-5-1",
            vec![
                Message::system("s"),
                Message::user("one"),
                Message::assistant(vec![block("first"), ContentPart::text("a")]),
                Message::user("two"),
                Message::assistant(vec![
                    ContentPart::text("lead-in"),
                    block("second"),
                    ContentPart::text("b"),
                ]),
                Message::user("three"),
            ],
        );
        assert_eq!(leave_out_compacted(&mut r), 3);
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[0].role, Role::System);
        let Content::Parts(parts) = &r.messages[1].content else {
            panic!("parts")
        };
        assert!(is_compaction(&parts[0]) && parts[0] == block("second"));
        assert_eq!(parts.len(), 2);
        assert_eq!(r.messages[2].text(), "three");
        // Nothing before the block any more: nothing left out.
        assert_eq!(leave_out_compacted(&mut r), 0);
        // No block: nothing.
        let mut plain = ChatRequest::new("m", vec![Message::user("x"), Message::user("y")]);
        assert_eq!(leave_out_compacted(&mut plain), 0);
        assert_eq!(plain.messages.len(), 2);
    }
}
