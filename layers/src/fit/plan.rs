//! The linear planner: which messages stay, which are cleared, which go.

use crate::clear::{is_stub, stub_text};
use crate::error::{ContextLimitError, LimitBreakdown};
use crate::fit::turns::Layout;
use crate::message::{Content, Message};
use crate::offload::preview_chars;
use crate::offload::{
    Displaced, READ_ARTIFACT_TOOL, artifact_id, is_preview, preview_info, read_artifact_tool_tokens,
};
use crate::policy::ContextPolicy;
use crate::report::PreparationReport;
use crate::request::ChatRequest;
use crate::store::Artifact;
use crate::tokens::{MessageSize, char_count, estimate_tool_tokens, estimate_with_text};

/// Which reductions a planner may make, and whether it must make the request fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stages {
    /// Drop whole old turns.
    pub(crate) prune: bool,
    /// Clear old tool results in place.
    pub(crate) clear: bool,
    /// Drop old tool rounds inside kept turns (only after clearing, when clearing is on).
    pub(crate) rounds: bool,
    /// Size tool results as the offload layer will send them.
    pub(crate) offload_sizing: bool,
    /// Fail with `ContextLimitError` when the request still does not fit.
    pub(crate) enforce: bool,
    /// Clear stubs name an artifact holding the content (a store keeps it).
    pub(crate) clear_artifacts: bool,
}

/// What happens to one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Keep,
    Drop,
    /// Replace the content with this stub; `store` is the id under which the replaced
    /// content must be stored (`None` when no store is used, or the content is a preview
    /// whose artifact is already stored).
    Clear {
        stub: String,
        store: Option<String>,
    },
}

/// The outcome of planning.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) actions: Vec<Action>,
    pub(crate) report: PreparationReport,
    /// Whether the read tool's tokens were counted (it may be added by offloading).
    pub(crate) reserved_tool: bool,
    /// Whether a kept message refers to an artifact (before offloading adds more).
    pub(crate) refers: bool,
}

impl Plan {
    /// Applies the plan to the messages it was made for, moving kept messages (no clone).
    /// Returns the kept messages and the cleared contents to store.
    pub(crate) fn apply(
        self,
        messages: Vec<Message>,
        artifact_max_chars: usize,
    ) -> (Vec<Message>, Vec<Displaced>) {
        debug_assert_eq!(messages.len(), self.actions.len());
        let kept = self.actions.iter().filter(|a| **a != Action::Drop).count();
        let mut out = Vec::with_capacity(kept);
        let mut displaced = Vec::new();
        for (mut m, action) in messages.into_iter().zip(self.actions) {
            match action {
                Action::Keep => out.push(m),
                Action::Drop => {}
                Action::Clear { stub, store } => {
                    if let Some(id) = store {
                        let artifact = Artifact::new(&m.content.text(), artifact_max_chars);
                        displaced.push(Displaced { id, artifact });
                    }
                    m.content = Content::Text(stub);
                    out.push(m);
                }
            }
        }
        (out, displaced)
    }
}

/// What planning needs to know about a request, measured once.
struct Measured<'a> {
    req: &'a ChatRequest,
    stages: Stages,
    layout: Layout,
    allowance: usize,
    prefix_tokens: usize,
    tool_tokens: usize,
    /// Each message's estimate as received.
    original: Vec<usize>,
    /// Each message's estimate as it will be sent (after offloading, when it runs).
    sent: Vec<usize>,
    /// What each message's content already is ([`PREVIEW`], [`STUB`], [`REFERS`]), read
    /// once while measuring: later passes over 10,000 messages must not touch every
    /// content again.
    marks: Vec<u8>,
    clear_order: Vec<usize>,
}

/// The content is an offload preview.
const PREVIEW: u8 = 1;
/// The content is a clear stub.
const STUB: u8 = 2;
/// The content refers to an artifact (a preview, or a stub naming one).
const REFERS: u8 = 4;

/// Whether a message points at an artifact (a preview, or a stub naming one).
pub(crate) fn refers_to_artifact(m: &Message) -> bool {
    mark(m) & REFERS != 0
}

fn mark(m: &Message) -> u8 {
    if !m.is_tool_result() {
        return 0;
    }
    match m.content.as_str() {
        Some(t) if is_preview(t) => PREVIEW | REFERS,
        Some(t) if is_artifact_stub(t) => STUB | REFERS,
        Some(t) if is_stub(t) => STUB,
        _ => 0,
    }
}

/// Plans the preparation of `req` under `policy`. Linear in the transcript: every
/// message's cost is computed once, and each stage walks the list once with a running
/// total.
///
/// The read tool that offloading adds costs tokens too. It is counted when the request
/// will refer to an artifact: when a tool result is already a preview or will be
/// offloaded, or when clearing (with artifact ids) turns out to be needed, in which case
/// the plan is decided again with the tool counted. Measuring is not repeated.
pub(crate) fn plan(
    req: &ChatRequest,
    policy: &ContextPolicy,
    stages: Stages,
    model_window: Option<usize>,
) -> Result<Plan, ContextLimitError> {
    let msgs = &req.messages;
    // One pass over every message's text; the offloaded size follows from it.
    let mut original = Vec::with_capacity(msgs.len());
    let mut sent = Vec::with_capacity(msgs.len());
    let mut marks = Vec::with_capacity(msgs.len());
    let mut refers_already = false;
    for m in msgs {
        let size = MessageSize::of(m);
        let cost = size.tokens();
        let mark = mark(m);
        original.push(cost);
        marks.push(mark);
        if !stages.offload_sizing {
            sent.push(cost);
            continue;
        }
        match offloaded_cost(m, &size, policy) {
            Some(offloaded) => {
                refers_already = true;
                sent.push(offloaded);
            }
            None => {
                refers_already |= mark & REFERS != 0;
                sent.push(cost);
            }
        }
    }
    let measured = Measured {
        req,
        stages,
        layout: Layout::of(msgs),
        allowance: policy.prompt_allowance(model_window),
        prefix_tokens: req.prefix.as_ref().map_or(0, |p| p.estimated_tokens()),
        tool_tokens: estimate_tool_tokens(&req.tools),
        original,
        sent,
        clear_order: if stages.clear {
            clearable(msgs, policy, &marks)
        } else {
            Vec::new()
        },
        marks,
    };
    let may_add_tool =
        stages.offload_sizing && !req.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL);
    let tool_cost = read_artifact_tool_tokens();
    if may_add_tool && refers_already {
        return decide(&measured, policy, tool_cost);
    }
    let plan = decide(&measured, policy, 0)?;
    if may_add_tool && stages.clear_artifacts && plan.report.cleared_observations > 0 {
        return decide(&measured, policy, tool_cost);
    }
    Ok(plan)
}

/// Runs the stages over measured costs, with `reserved` tokens counted for the read tool.
fn decide(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    reserved: usize,
) -> Result<Plan, ContextLimitError> {
    let (req, stages, layout, allowance) = (m.req, m.stages, &m.layout, m.allowance);
    let mut cost = m.sent.clone();
    let tool_tokens = m.tool_tokens + reserved;
    let system_tokens: usize = cost[..layout.head_end].iter().sum();
    let fixed = m.prefix_tokens + tool_tokens;
    let mut total = fixed + cost.iter().sum::<usize>();
    let mut actions = vec![Action::Keep; cost.len()];

    let mut report = PreparationReport {
        before_tokens: m.prefix_tokens + m.tool_tokens + m.original.iter().sum::<usize>(),
        prompt_allowance: allowance,
        ..PreparationReport::default()
    };

    if total > allowance {
        let protected_turns = policy.preserve_recent.min(layout.turns.len());
        let prunable_turns = layout.turns.len() - protected_turns;
        let clear = |actions: &mut [Action], cost: &mut [usize], total: &mut usize| {
            if stages.clear {
                clear_until_fit(req, stages, &m.clear_order, actions, cost, total, allowance);
            }
        };
        if policy.clear_before_prune {
            clear(&mut actions, &mut cost, &mut total);
        }
        if stages.prune {
            for turn in &layout.turns[..prunable_turns] {
                if total <= allowance {
                    break;
                }
                for i in turn.range.clone() {
                    total -= cost[i];
                    actions[i] = Action::Drop;
                }
                report.pruned_turns += 1;
            }
        }
        if !policy.clear_before_prune {
            clear(&mut actions, &mut cost, &mut total);
        }
        if stages.rounds && total > allowance {
            let rounds: Vec<_> = layout
                .turns
                .iter()
                .flat_map(|t| t.units.iter())
                .filter(|u| u.is_round && actions[u.range.start] != Action::Drop)
                .collect();
            let droppable = rounds.len().saturating_sub(policy.preserve_recent);
            for unit in &rounds[..droppable] {
                if total <= allowance {
                    break;
                }
                for i in unit.range.clone() {
                    total -= cost[i];
                    actions[i] = Action::Drop;
                }
                report.dropped_rounds += 1;
            }
        }
        if stages.enforce && total > allowance {
            let kept_turns = &layout.turns[prunable_turns..];
            let turn_cost = |t: &crate::fit::turns::Turn| -> usize {
                t.range
                    .clone()
                    .filter(|&i| actions[i] != Action::Drop)
                    .map(|i| cost[i])
                    .sum()
            };
            let current = kept_turns.last().map_or(0, turn_cost);
            let earlier: usize = kept_turns
                .iter()
                .take(kept_turns.len().saturating_sub(1))
                .map(turn_cost)
                .sum();
            // Any turn the prune stage could not reach (prune off) counts as protected.
            let unreachable: usize = layout.turns[..prunable_turns].iter().map(turn_cost).sum();
            return Err(ContextLimitError::new(
                total,
                allowance,
                LimitBreakdown {
                    prefix_tokens: m.prefix_tokens,
                    system_tokens,
                    tool_tokens,
                    protected_turn_tokens: earlier + unreachable,
                    current_turn_tokens: current,
                },
            ));
        }
    }

    report.after_tokens = total;
    let mut refers = false;
    for (a, mark) in actions.iter().zip(&m.marks) {
        match a {
            Action::Keep => refers |= mark & REFERS != 0,
            Action::Drop => report.removed_messages += 1,
            Action::Clear { stub, .. } => {
                report.cleared_observations += 1;
                refers |= is_artifact_stub(stub);
            }
        }
    }
    if report.removed_messages > 0 {
        report.cut = (layout.head_end..cost.len()).find(|&i| actions[i] != Action::Drop);
    }
    Ok(Plan {
        actions,
        report,
        reserved_tool: reserved > 0,
        refers,
    })
}

/// Whether `text` is a clear stub that names an artifact.
pub(crate) fn is_artifact_stub(text: &str) -> bool {
    is_stub(text) && text.contains("\"context_artifact\":")
}

/// The cost of a tool result once offloaded, or `None` when offloading leaves it alone.
fn offloaded_cost(m: &Message, size: &MessageSize, policy: &ContextPolicy) -> Option<usize> {
    let text = offloadable_text(m, policy)?;
    // Plain-text content: `content_chars` is the text's length, measured already.
    let original = size.content_chars;
    if original <= policy.tool_result_max_chars {
        return None;
    }
    let preview = preview_chars(
        text,
        original,
        policy.tool_result_max_chars,
        policy.artifact_max_chars,
    );
    Some(size.tokens_with_content(preview))
}

/// The text of a tool result that offloading may replace: plain text that is not already
/// a preview or a stub.
pub(crate) fn offloadable_text<'a>(m: &'a Message, policy: &ContextPolicy) -> Option<&'a str> {
    if !m.is_tool_result() {
        return None;
    }
    let text = m.content.as_str()?;
    // A byte length at or under the limit is a char count at or under it: skip counting.
    if text.len() <= policy.tool_result_max_chars || is_preview(text) || is_stub(text) {
        return None;
    }
    Some(text)
}

/// Tool results that may be cleared, oldest first: not already a stub, not among the
/// newest `preserve_tool_results`, not answering the newest assistant message (the model
/// has not seen those yet), and not from a `never_clear` tool.
fn clearable(msgs: &[Message], policy: &ContextPolicy, marks: &[u8]) -> Vec<usize> {
    let last_assistant = msgs.iter().rposition(|m| m.role == crate::Role::Assistant);
    let results: Vec<usize> = msgs
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_tool_result())
        .map(|(i, _)| i)
        .collect();
    let protected = policy.protected_tool_results().min(results.len());
    let mut call_names: Vec<(&str, &str)> = Vec::new();
    let mut out = Vec::new();
    let mut r = 0;
    for (i, m) in msgs.iter().enumerate() {
        if m.has_tool_calls() {
            call_names.clear();
            call_names.extend(
                m.tool_calls
                    .iter()
                    .map(|c| (c.id.as_str(), c.name.as_str())),
            );
        }
        if !m.is_tool_result() {
            continue;
        }
        r += 1;
        if r > results.len() - protected || last_assistant.is_some_and(|a| i > a) {
            continue;
        }
        if marks[i] & STUB != 0 {
            continue;
        }
        let name = tool_name(m, &call_names);
        if name.is_some_and(|n| policy.never_clear.contains(n)) {
            continue;
        }
        out.push(i);
    }
    out
}

/// The tool a result came from: its `name`, or the name of the call it answers.
pub(crate) fn tool_name<'a>(m: &'a Message, calls: &[(&'a str, &'a str)]) -> Option<&'a str> {
    m.name.as_deref().or_else(|| {
        let id = m.tool_call_id.as_deref()?;
        calls.iter().find(|(cid, _)| *cid == id).map(|(_, n)| *n)
    })
}

fn clear_until_fit(
    req: &ChatRequest,
    stages: Stages,
    order: &[usize],
    actions: &mut [Action],
    cost: &mut [usize],
    total: &mut usize,
    allowance: usize,
) {
    for &i in order {
        if *total <= allowance {
            break;
        }
        if actions[i] != Action::Keep {
            continue;
        }
        let m = &req.messages[i];
        let text = m.content.text();
        // A preview already names a stored artifact: point the stub at it.
        let (id, store, original_chars) = match preview_info(&text) {
            Some((id, original)) => (Some(id), None, original),
            None if stages.clear_artifacts => {
                let id = artifact_id(&req.scope, &req.session, &text);
                (Some(id.clone()), Some(id), char_count(&text))
            }
            None => (None, None, char_count(&text)),
        };
        let stub = stub_text(m.name.as_deref(), original_chars, id.as_deref());
        let new_cost = estimate_with_text(m, &stub);
        if new_cost < cost[i] {
            *total -= cost[i] - new_cost;
            cost[i] = new_cost;
            actions[i] = Action::Clear { stub, store };
        }
    }
}
