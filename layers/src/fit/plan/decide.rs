//! The decisions over measured costs: which turns and rounds go, which results are cleared.

use super::*;
use crate::fit::turns::{Layout, Unit};

/// [`decide`] with the read tool counted when the request will carry it: when it declares
/// tools of its own, when something refers to an artifact already, or when clearing (with
/// artifact ids) turns out to be needed, in which case the plan is decided again with the
/// tool counted.
pub(super) fn decide_with_tool(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    may_add_tool: bool,
    refers_already: bool,
    out: &mut Decision<'_>,
) -> Result<Plan, ContextLimitError> {
    let tool_cost = read_artifact_tool_tokens();
    if may_add_tool && (refers_already || always_gets_read_tool(m.req)) {
        return decide(m, policy, tool_cost, out);
    }
    let plan = decide(m, policy, 0, out)?;
    if may_add_tool && plan.report.cleared_results > 0 {
        return decide(m, policy, tool_cost, out);
    }
    Ok(plan)
}

/// Runs the stages over measured costs, with `reserved` tokens counted for the read tool.
pub(super) fn decide(
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
            for i in turn.range.range() {
                total -= cost[i];
                actions[i] = Action::Drop;
            }
        }
        report.pruned_turns = k;
        report.cut_reused = k > 0;
        first_prunable = k;
    }
    // The same for the tool rounds dropped from the turns kept: a long tool loop is one
    // turn, and inside it the history starts where it started last time.
    if stages.drops_rounds()
        && let Some(end) = m.previous_rounds
    {
        let again = |unit: Unit, _| unit.range.range().end <= end;
        drop_rounds(
            layout,
            policy,
            cost,
            actions,
            &mut total,
            &mut report,
            again,
        );
    }
    // Clearing in steps: clear again what was cleared last time, so the transcript reads
    // the same up to the newest cleared result, whether or not this request needs it.
    if stages.clears()
        && let Some(end) = m.previous_clear
    {
        for &i in m.clear_order.iter().take_while(|&&i| i < end) {
            clear_one(m, policy, i, actions, &mut clears, cost, &mut total);
        }
    }

    if total > allowance {
        debug_assert!(m.laid_out, "over the allowance with the turns not laid out");
        let mut clear = |actions: &mut [Action], cost: &mut [usize], total: &mut usize| {
            if !stages.clears() {
                return;
            }
            if m.server_clears {
                // Once over its trigger, the provider clears every result but the newest
                // it keeps, not just enough.
                for &i in m.clear_order {
                    clear_one(m, policy, i, actions, &mut clears, cost, total);
                }
                return;
            }
            clear_until_fit(m, policy, actions, &mut clears, cost, total);
        };
        // The provider clears before anything else is done.
        let clear_first = policy.clear_before_prune || m.server_clears;
        if clear_first {
            clear(actions, cost, &mut total);
        }
        if stages.prunes() && total > allowance {
            // Down to the low-water mark when one is set, so the next requests fit
            // without moving the cut again.
            for turn in &layout.turns[first_prunable..prunable_turns] {
                if total <= m.prune_target {
                    break;
                }
                for i in turn.range.range() {
                    total -= cost[i];
                    actions[i] = Action::Drop;
                }
                report.pruned_turns += 1;
                report.cut_reused = false;
            }
        }
        if !clear_first {
            clear(actions, cost, &mut total);
        }
        if stages.drops_rounds() && total > allowance {
            // Down to the low-water mark too, for the same reason as turns.
            let over = |_, total| total > m.prune_target;
            drop_rounds(layout, policy, cost, actions, &mut total, &mut report, over);
        }
        if stages.enforces() && total > allowance {
            let kept_turns = &layout.turns[prunable_turns..];
            let turn_cost = |t: &crate::fit::turns::Turn| -> usize {
                t.range
                    .range()
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

    clears.retain(|c| actions[c.index] == Action::Clear);
    if m.server_clears {
        // The provider clears these (and maybe more: it keeps only the newest
        // `preserve_tool_results`): they are sent as they are, counted as cleared.
        for c in clears.drain(..) {
            actions[c.index] = Action::Keep;
        }
    }
    let inputs = if stages.offloads() {
        let mut inputs = input_references(m, policy, actions);
        inputs.extend(summary_references(&req.messages, layout.head_end));
        report.unkept_artifacts =
            bound_references(m, policy, &inputs, actions, &mut clears, cost, &mut total);
        inputs
            .into_iter()
            .filter(|r| actions[r.index] == Action::Keep)
            .collect()
    } else {
        Vec::new()
    };
    report.after_tokens = total;
    for a in actions.iter() {
        match a {
            Action::Keep => {}
            Action::Drop => report.removed_messages += 1,
            Action::Clear => report.cleared_results += 1,
        }
    }
    if report.removed_messages > 0 {
        report.history_start = (layout.head_end..cost.len()).find(|&i| actions[i] != Action::Drop);
    }
    let cleared = clears
        .iter()
        .map(|c| c.index)
        .max()
        .and_then(|i| Cut::at(&req.messages, i + 1));
    // Turns are pruned oldest first, so the first kept turn follows the pruned ones.
    let cut = match report.pruned_turns {
        0 => None,
        n => layout
            .turns
            .get(n)
            .and_then(|t| Cut::at(&req.messages, t.range.start())),
    };
    // The newest round dropped from the turns kept, when any was.
    let kept_from = layout
        .turns
        .get(report.pruned_turns)
        .map_or(usize::MAX, |t| t.range.start());
    let rounds = layout
        .units
        .iter()
        .filter(|u| u.is_round && u.range.start() >= kept_from)
        .filter(|u| actions[u.range.start()] == Action::Drop)
        .map(|u| u.range.range().end)
        .max()
        .and_then(|end| Cut::at(&req.messages, end));
    Ok(Plan {
        clears,
        cuts: Cuts {
            history: cut,
            rounds,
            cleared,
            thinking: None,
        },
        report,
        reserved_tool: reserved > 0,
        longs: Vec::new(),
        inputs,
    })
}

/// Drops the tool rounds not dropped yet, oldest first but for the newest
/// `preserve_recent`, while `more(round, total)` says so.
fn drop_rounds(
    layout: &Layout,
    policy: &ContextPolicy,
    cost: &[usize],
    actions: &mut [Action],
    total: &mut usize,
    report: &mut PreparationReport,
    more: impl Fn(Unit, usize) -> bool,
) {
    let mut rounds: Vec<Unit> = layout
        .units
        .iter()
        .filter(|u| u.is_round && actions[u.range.start()] != Action::Drop)
        .copied()
        .collect();
    rounds.truncate(rounds.len().saturating_sub(policy.preserve_recent));
    for unit in rounds {
        if !more(unit, *total) {
            break;
        }
        for i in unit.range.range() {
            *total -= cost[i];
            actions[i] = Action::Drop;
        }
        report.dropped_rounds += 1;
    }
}

/// Tool results that may be cleared, oldest first: not already a stub, not among the
/// newest `preserve_tool_results`, not answering the newest assistant message (the model
/// has not seen those yet), and not from a `never_clear` tool.
pub(super) fn clearable(
    msgs: &[Message],
    policy: &ContextPolicy,
    marks: &[u8],
    out: &mut Vec<usize>,
) {
    let last_assistant = msgs.iter().rposition(|m| m.role == crate::Role::Assistant);
    let results = msgs.iter().filter(|m| m.is_tool_result()).count();
    let protected = policy.protected_tool_results().min(results);
    let mut call_names: Vec<(&str, &str)> = Vec::new();
    let mut r = 0;
    for (i, m) in msgs.iter().enumerate() {
        if m.has_tool_calls() && !policy.never_clear.is_empty() {
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
        // Without `never_clear` tools the name does not matter: its box is not loaded.
        if !policy.never_clear.is_empty()
            && tool_name(m, &call_names).is_some_and(|n| policy.never_clear.contains(n))
        {
            continue;
        }
        out.push(i);
    }
}

/// The tool a result came from: its `name`, or the name of the call it answers.
pub(crate) fn tool_name<'a>(m: &'a Message, calls: &[(&'a str, &'a str)]) -> Option<&'a str> {
    m.name().or_else(|| {
        let id = m.tool_call_id.as_deref()?;
        calls.iter().find(|(cid, _)| *cid == id).map(|(_, n)| *n)
    })
}

/// Clears tool results in `m.clear_order` until the total is within the allowance (and,
/// clearing in steps, until at least `clear_at_least_tokens` were freed), recording each
/// stub in `clears`.
pub(super) fn clear_until_fit(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    actions: &mut [Action],
    clears: &mut Vec<Cleared>,
    cost: &mut [usize],
    total: &mut usize,
) {
    let at_least = policy.clear_at_least_tokens.unwrap_or(0);
    let mut freed = 0;
    for &i in m.clear_order {
        if *total <= m.allowance && freed >= at_least {
            break;
        }
        freed += clear_one(m, policy, i, actions, clears, cost, total);
    }
}

/// Clears the tool result `i` when it is kept and its stub is smaller, recording the stub
/// in `clears`. Returns the tokens freed.
/// The characters counted for the placeholder the provider leaves in place of a result it
/// cleared (a short sentence; counted generously, as an estimate must be).
const PROVIDER_PLACEHOLDER_CHARS: usize = 64;

pub(super) fn clear_one(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    i: usize,
    actions: &mut [Action],
    clears: &mut Vec<Cleared>,
    cost: &mut [usize],
    total: &mut usize,
) -> usize {
    let (req, stages) = (m.req, m.stages);
    if actions[i] != Action::Keep {
        return 0;
    }
    let msg = &req.messages[i];
    let text = msg.content.text();
    // One measurement: the text's length (parts are joined without separators, so
    // it is the joined text's) and the stub's cost both follow from it.
    let size = MessageSize::of(msg);
    // A preview already names a stored artifact: point the stub at it.
    // Only a message marked as a preview is parsed again, for its id.
    // The provider's clearing names nothing: no preview is read, no artifact sized.
    let preview = (m.marks[i] & PREVIEW != 0 && !m.server_clears)
        .then(|| genuine_preview(&text, policy, m.untrusted))
        .flatten();
    let cleared = match preview {
        Some(p) => Cleared {
            index: i,
            naming: Naming::Stored(p.id.into_owned()),
            long: None,
            chars: p.original_chars,
            bytes: p.original_chars.min(policy.artifact_max_chars),
        },
        None if stages.offloads() && !m.server_clears => {
            let long = m
                .longs
                .binary_search_by_key(&i, |l| l.index)
                .ok()
                .map(|l| &m.longs[l]);
            Cleared {
                index: i,
                naming: Naming::Content,
                bytes: long.map_or(text.len(), |l| l.bytes(text.len())),
                long: long.map(|l| (l.key, l.known.clone())),
                chars: size.content_chars,
            }
        }
        None => Cleared {
            index: i,
            naming: Naming::Nothing,
            long: None,
            chars: size.content_chars,
            bytes: 0,
        },
    };
    // The provider's placeholder is short and names nothing; the stack's stub says what
    // was cleared and where it is kept.
    let stub_chars = if m.server_clears {
        PROVIDER_PLACEHOLDER_CHARS
    } else {
        char_count(&stub_for(msg.name(), cleared.chars, &cleared.naming, None))
    };
    let new_cost = size.tokens_with_content(stub_chars);
    if new_cost >= cost[i] {
        return 0;
    }
    let freed = cost[i] - new_cost;
    *total -= freed;
    cost[i] = new_cost;
    actions[i] = Action::Clear;
    clears.push(cleared);
    freed
}
