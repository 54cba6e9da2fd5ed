//! The linear planner: which messages stay, which are cleared, which go.

use crate::artifact::{
    Artifact, Displaced, PREVIEW, READ_ARTIFACT_TOOL, REFERS, STUB, Untrusted, artifact_id,
    genuine_preview, is_artifact_stub, mark, offloadable_marked, preview_chars,
    read_artifact_tool_tokens, stub_text,
};
use crate::error::{ContextLimitError, LimitBreakdown};
use crate::fit::Cut;
use crate::fit::turns::Layout;
use crate::model::ChatRequest;
use crate::model::PreparationReport;
use crate::model::{Content, Message};
use crate::policy::ContextPolicy;
use crate::tokens::{MessageSize, char_count, estimate_tool_tokens};

/// Which reductions a planner may make, and whether it must make the request fit: one
/// variant per layer that plans, since only these combinations are meaningful.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stages {
    /// [`PruneLayer`](super::PruneLayer): drop old turns, then old rounds of kept turns;
    /// fail with `ContextLimitError` when that is not enough.
    Prune,
    /// [`ClearLayer`](super::ClearLayer): clear old tool results in place; never fail.
    Clear,
    /// The composite: everything, sized as offloading will send it, with cleared
    /// contents kept as artifacts.
    All,
}

impl Stages {
    /// Drops whole old turns.
    fn prunes(self) -> bool {
        matches!(self, Self::Prune | Self::All)
    }

    /// Clears old tool results in place.
    fn clears(self) -> bool {
        matches!(self, Self::Clear | Self::All)
    }

    /// Drops old tool rounds inside kept turns (after clearing, when clearing is on).
    fn drops_rounds(self) -> bool {
        self.prunes()
    }

    /// Fails with `ContextLimitError` when the request still does not fit.
    fn enforces(self) -> bool {
        self.prunes()
    }

    /// Sizes tool results as the offload step will send them, and names an artifact
    /// holding each cleared content in its stub (a store keeps it).
    fn offloads(self) -> bool {
        self == Self::All
    }
}

/// What planning takes besides the request, the policy and the stages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Budget {
    /// The model's context window, from a catalog.
    pub(crate) model_window: Option<usize>,
    /// The session's previous cut (cache-aware pruning).
    pub(crate) previous_cut: Option<Cut>,
    /// What the allowance is divided by ([`Calibration::factor`](crate::calibration::Calibration::factor)); 1 without calibration.
    pub(crate) factor: f64,
}

impl Budget {
    /// `tokens` of the provider's counting in estimated tokens.
    fn calibrate(&self, tokens: usize) -> usize {
        crate::calibration::divide(tokens, self.factor)
    }
}

/// What happens to one message. One byte: the planner keeps one per message, and the
/// details of the few cleared ones live in [`Plan::clears`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Keep,
    Drop,
    /// Replace the content with the stub recorded for this message in [`Plan::clears`].
    Clear,
}

/// A cleared message's replacement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cleared {
    /// The message's index.
    pub(crate) index: usize,
    /// The stub that replaces its content.
    pub(crate) stub: String,
    /// The id under which the replaced content must be stored (`None` when no store is
    /// used, or the content is a preview whose artifact is already stored).
    pub(crate) store: Option<String>,
    /// The characters of the replaced content, counted while planning.
    pub(crate) chars: usize,
}

/// The outcome of planning.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The messages whose action is [`Action::Clear`] (one cleared and then dropped by a
    /// later stage is not here).
    pub(crate) clears: Vec<Cleared>,
    /// Where whole turns were cut, to remember for the session's next request.
    pub(crate) cut: Option<Cut>,
    pub(crate) report: PreparationReport,
    /// Whether the read tool's tokens were counted (it may be added by offloading).
    pub(crate) reserved_tool: bool,
    /// Whether a kept message refers to an artifact (before offloading adds more).
    pub(crate) refers: bool,
}

impl Plan {
    /// Applies the plan to the messages it was made for, in place: kept messages move
    /// down over dropped ones, and the list's buffer is reused rather than a new one
    /// made. `actions` are the plan's, left in the [`Scratch`] it was made with.
    /// Returns the kept messages and the cleared contents to store.
    pub(crate) fn apply(
        self,
        mut messages: Vec<Message>,
        actions: &[Action],
        artifact_max_chars: usize,
    ) -> (Vec<Message>, Vec<Displaced>) {
        debug_assert_eq!(messages.len(), actions.len());
        let mut displaced = Vec::new();
        for Cleared {
            index,
            stub,
            store,
            chars,
        } in self.clears
        {
            let Some(m) = messages.get_mut(index) else {
                continue;
            };
            if let Some(id) = store {
                let artifact = Artifact::counted(&m.content.text(), chars, artifact_max_chars);
                displaced.push(Displaced { id, artifact });
            }
            m.content = Content::Text(stub);
        }
        let mut actions = actions.iter();
        messages.retain(|_| actions.next() != Some(&Action::Drop));
        (messages, displaced)
    }
}

/// The per-message lists the planner fills on every request.
///
/// A service keeps one and hands it to every request it prepares, so a long transcript
/// reuses the memory of the last one (about 40 bytes a message) rather than allocating
/// and faulting in fresh pages each time; at 10,000 messages those page faults were about
/// a tenth of the time. Nothing in the lists carries from one request to the next, so a
/// clone starts empty.
#[derive(Default)]
pub(crate) struct Scratch {
    sent: Vec<usize>,
    marks: Vec<u8>,
    clear_order: Vec<usize>,
    cost: Vec<usize>,
    layout: Layout,
    /// The actions of the last plan made with this scratch, one per message.
    pub(crate) actions: Vec<Action>,
}

impl Scratch {
    /// Lets go of lists sized for a transcript far longer than `messages` (and longer than
    /// 65,536 messages), so one huge request does not pin its memory for the life of the
    /// service.
    fn fit_to(&mut self, messages: usize) {
        const ALWAYS_KEPT: usize = 1 << 16;
        if self.sent.capacity() > ALWAYS_KEPT.max(messages.saturating_mul(4)) {
            *self = Self::default();
        }
    }
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Leftovers of the last request, not state worth printing.
        f.debug_struct("Scratch").finish_non_exhaustive()
    }
}

impl Clone for Scratch {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// What planning needs to know about a request, measured once.
struct Measured<'a> {
    req: &'a ChatRequest,
    /// Contents shaped like the stack's previews or stubs whose artifact this session
    /// does not hold: plain text to the plan.
    untrusted: &'a Untrusted,
    stages: Stages,
    layout: &'a Layout,
    allowance: usize,
    prefix_tokens: usize,
    tool_tokens: usize,
    /// The messages' estimate as received.
    original_tokens: usize,
    /// Each message's estimate as it will be sent (after offloading, when it runs).
    sent: &'a [usize],
    /// What each message's content already is ([`PREVIEW`], [`STUB`], [`REFERS`]), read
    /// once while measuring: later passes over 10,000 messages must not touch every
    /// content again.
    marks: &'a [u8],
    clear_order: &'a [usize],
    /// The session's previous cut, as the number of turns before it, when it is found.
    previous_cut: Option<usize>,
    /// What pruning aims for ([`ContextPolicy::prune_target`]).
    prune_target: usize,
}

/// The lists a decision writes.
struct Decision<'a> {
    cost: &'a mut Vec<usize>,
    actions: &'a mut Vec<Action>,
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
    untrusted: &Untrusted,
    stages: Stages,
    budget: Budget,
    scratch: &mut Scratch,
) -> Result<Plan, ContextLimitError> {
    let msgs = &req.messages;
    scratch.fit_to(msgs.len());
    let Scratch {
        sent,
        marks,
        clear_order,
        cost,
        layout,
        actions,
    } = scratch;
    sent.clear();
    marks.clear();
    // One pass over every message's text; the offloaded size follows from it.
    let mut refers_already = false;
    let mut original_tokens = 0;
    for m in msgs {
        let size = MessageSize::of(m);
        let cost = size.tokens();
        let mark = mark(m, policy, untrusted);
        original_tokens += cost;
        marks.push(mark);
        if !stages.offloads() {
            sent.push(cost);
            continue;
        }
        match offloaded_cost(m, &size, policy, mark) {
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
    layout.fill(msgs);
    clear_order.clear();
    if stages.clears() {
        clearable(msgs, policy, marks, clear_order);
    }
    let measured = Measured {
        req,
        untrusted,
        stages,
        layout,
        allowance: budget.calibrate(policy.prompt_allowance(budget.model_window)),
        prefix_tokens: req.prefix.as_ref().map_or(0, |p| p.estimated_tokens()),
        tool_tokens: estimate_tool_tokens(&req.tools),
        original_tokens,
        sent,
        clear_order,
        marks,
        previous_cut: budget
            .previous_cut
            .and_then(|cut| find_cut(cut, msgs, layout)),
        prune_target: budget.calibrate(policy.prune_target(budget.model_window)),
    };
    let mut out = Decision { cost, actions };
    let may_add_tool = stages.offloads() && !req.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL);
    let tool_cost = read_artifact_tool_tokens();
    if may_add_tool && refers_already {
        return decide(&measured, policy, tool_cost, &mut out);
    }
    let plan = decide(&measured, policy, 0, &mut out)?;
    if may_add_tool && stages.offloads() && plan.report.cleared_observations > 0 {
        return decide(&measured, policy, tool_cost, &mut out);
    }
    Ok(plan)
}

/// Runs the stages over measured costs, with `reserved` tokens counted for the read tool.
fn decide(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    reserved: usize,
    out: &mut Decision<'_>,
) -> Result<Plan, ContextLimitError> {
    let (req, stages, layout, allowance) = (m.req, m.stages, m.layout, m.allowance);
    let cost = &mut *out.cost;
    cost.clear();
    cost.extend_from_slice(m.sent);
    let actions = &mut *out.actions;
    actions.clear();
    actions.resize(cost.len(), Action::Keep);
    let tool_tokens = m.tool_tokens + reserved;
    let system_tokens: usize = cost[..layout.head_end].iter().sum();
    let fixed = m.prefix_tokens + tool_tokens;
    let mut total = fixed + cost.iter().sum::<usize>();
    let mut clears = Vec::new();

    let mut report = PreparationReport {
        before_tokens: m.prefix_tokens + m.tool_tokens + m.original_tokens,
        prompt_allowance: allowance,
        ..PreparationReport::default()
    };

    let protected_turns = policy.preserve_recent.min(layout.turns.len());
    let prunable_turns = layout.turns.len() - protected_turns;
    // Cache-aware pruning: drop what was dropped last time, so the history starts where
    // it started then. Turns the stages below drop come after these.
    let mut first_prunable = 0;
    if stages.prunes()
        && let Some(k) = m.previous_cut
        && k <= prunable_turns
    {
        for turn in &layout.turns[..k] {
            for i in turn.range.clone() {
                total -= cost[i];
                actions[i] = Action::Drop;
            }
        }
        report.pruned_turns = k;
        report.cut_reused = k > 0;
        first_prunable = k;
    }

    if total > allowance {
        let mut clear = |actions: &mut [Action], cost: &mut [usize], total: &mut usize| {
            if stages.clears() {
                clear_until_fit(m, policy, actions, &mut clears, cost, total);
            }
        };
        if policy.clear_before_prune {
            clear(actions, cost, &mut total);
        }
        if stages.prunes() && total > allowance {
            // Down to the low-water mark when one is set, so the next requests fit
            // without moving the cut again.
            for turn in &layout.turns[first_prunable..prunable_turns] {
                if total <= m.prune_target {
                    break;
                }
                for i in turn.range.clone() {
                    total -= cost[i];
                    actions[i] = Action::Drop;
                }
                report.pruned_turns += 1;
                report.cut_reused = false;
            }
        }
        if !policy.clear_before_prune {
            clear(actions, cost, &mut total);
        }
        if stages.drops_rounds() && total > allowance {
            let rounds: Vec<_> = layout
                .units
                .iter()
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
        if stages.enforces() && total > allowance {
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
    for (a, mark) in actions.iter().zip(m.marks) {
        match a {
            Action::Keep => refers |= mark & REFERS != 0,
            Action::Drop => report.removed_messages += 1,
            Action::Clear => report.cleared_observations += 1,
        }
    }
    clears.retain(|c| actions[c.index] == Action::Clear);
    refers |= clears.iter().any(|c| is_artifact_stub(&c.stub));
    if report.removed_messages > 0 {
        report.history_start = (layout.head_end..cost.len()).find(|&i| actions[i] != Action::Drop);
    }
    // Turns are pruned oldest first, so the first kept turn follows the pruned ones.
    let cut = match report.pruned_turns {
        0 => None,
        n => layout
            .turns
            .get(n)
            .and_then(|t| Cut::at(&req.messages, t.range.start)),
    };
    Ok(Plan {
        clears,
        cut,
        report,
        reserved_tool: reserved > 0,
        refers,
    })
}

/// The number of turns before `cut` in this transcript, if it is there: at its old
/// position (the usual case, a transcript that only grew), or anywhere else a turn starts
/// (the caller dropped or folded old messages since).
fn find_cut(cut: Cut, msgs: &[Message], layout: &Layout) -> Option<usize> {
    let turns = &layout.turns;
    if let Ok(k) = turns.binary_search_by_key(&cut.position, |t| t.range.start)
        && cut.is_at(msgs, cut.position)
    {
        return Some(k);
    }
    turns.iter().position(|t| cut.is_at(msgs, t.range.start))
}

/// The cost of a tool result once offloaded, or `None` when offloading leaves it alone.
fn offloaded_cost(
    m: &Message,
    size: &MessageSize,
    policy: &ContextPolicy,
    mark: u8,
) -> Option<usize> {
    let text = offloadable_marked(m, policy, mark)?;
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

/// Tool results that may be cleared, oldest first: not already a stub, not among the
/// newest `preserve_tool_results`, not answering the newest assistant message (the model
/// has not seen those yet), and not from a `never_clear` tool.
fn clearable(msgs: &[Message], policy: &ContextPolicy, marks: &[u8], out: &mut Vec<usize>) {
    let last_assistant = msgs.iter().rposition(|m| m.role == crate::Role::Assistant);
    let results = msgs.iter().filter(|m| m.is_tool_result()).count();
    let protected = policy.protected_tool_results().min(results);
    let mut call_names: Vec<(&str, &str)> = Vec::new();
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
        if r > results - protected || last_assistant.is_some_and(|a| i > a) {
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
}

/// The tool a result came from: its `name`, or the name of the call it answers.
pub(crate) fn tool_name<'a>(m: &'a Message, calls: &[(&'a str, &'a str)]) -> Option<&'a str> {
    m.name.as_deref().or_else(|| {
        let id = m.tool_call_id.as_deref()?;
        calls.iter().find(|(cid, _)| *cid == id).map(|(_, n)| *n)
    })
}

/// Clears tool results in `m.clear_order` until the total is within the allowance,
/// recording each stub in `clears`.
fn clear_until_fit(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    actions: &mut [Action],
    clears: &mut Vec<Cleared>,
    cost: &mut [usize],
    total: &mut usize,
) {
    let (req, stages) = (m.req, m.stages);
    for &i in m.clear_order {
        if *total <= m.allowance {
            break;
        }
        if actions[i] != Action::Keep {
            continue;
        }
        let msg = &req.messages[i];
        let text = msg.content.text();
        // One measurement: the text's length (parts are joined without separators, so
        // it is the joined text's) and the stub's cost both follow from it.
        let size = MessageSize::of(msg);
        // A preview already names a stored artifact: point the stub at it.
        // Only a message marked as a preview is parsed again, for its id.
        let preview = (m.marks[i] & PREVIEW != 0)
            .then(|| genuine_preview(&text, policy, m.untrusted))
            .flatten();
        let (id, store, original_chars) = match preview {
            Some(p) => (Some(p.id.into_owned()), None, p.original_chars),
            None if stages.offloads() => {
                let id = artifact_id(&req.scope, &req.session, &text);
                (Some(id.clone()), Some(id), size.content_chars)
            }
            None => (None, None, size.content_chars),
        };
        let stub = stub_text(msg.name.as_deref(), original_chars, id.as_deref());
        let new_cost = size.tokens_with_content(char_count(&stub));
        if new_cost < cost[i] {
            *total -= cost[i] - new_cost;
            cost[i] = new_cost;
            actions[i] = Action::Clear;
            clears.push(Cleared {
                index: i,
                stub,
                store,
                chars: size.content_chars,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(messages: Vec<Message>, scratch: &mut Scratch) {
        let req = ChatRequest::new("m", messages);
        let policy = ContextPolicy::default().with_max_tokens(100_000_000);
        plan(
            &req,
            &policy,
            &Untrusted::default(),
            Stages::All,
            Budget {
                model_window: None,
                previous_cut: None,
                factor: 1.0,
            },
            scratch,
        )
        .unwrap();
    }

    #[test]
    fn scratch_keeps_its_lists_but_not_for_a_far_longer_transcript() {
        let mut scratch = Scratch::default();
        plan_of(vec![Message::user("x"); 70_000], &mut scratch);
        assert!(scratch.sent.capacity() >= 70_000);
        // A transcript of similar length reuses the lists.
        plan_of(vec![Message::user("x"); 60_000], &mut scratch);
        assert!(scratch.sent.capacity() >= 70_000);
        // A far shorter one lets them go.
        plan_of(vec![Message::user("x"); 10], &mut scratch);
        assert!(scratch.sent.capacity() < 70_000);
        assert_eq!(scratch.sent.len(), 10);
    }
}
