//! The planner's entry: every message measured once, then decided, and long results sized as the plan keeps them.

use super::*;

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
    /// The long plain results, while planning.
    longs: Vec<Long>,
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

/// What [`plan`] checks while it measures each message, where the content and the ids are
/// loaded anyway (a pass of its own over 10,000 messages loaded each of them again).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Checks {
    /// That tool calls and results pair up ([`Pairs`]).
    pub(crate) pairing: bool,
    /// That no tool result is a preview or a stub naming an artifact: such claims are
    /// checked with the store before the request is planned (`artifact::verify`), so a
    /// request that has one is given back to be verified.
    pub(crate) claims: bool,
}

/// What [`plan`] came to.
#[derive(Debug)]
// Returned once a call, and nearly always as the plan: boxing it would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Planned {
    /// The plan.
    Plan(Plan),
    /// The tool pairing is broken: repair it (or refuse the request) and plan again.
    Unpaired,
    /// A tool result claims an artifact: verify the claims and plan again.
    Claims,
}

/// What [`plan`] plans: the request, and everything it is planned under.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Input<'a> {
    pub(crate) req: &'a ChatRequest,
    pub(crate) policy: &'a ContextPolicy,
    /// Contents shaped like the stack's previews or stubs that are plain text here.
    pub(crate) untrusted: &'a Untrusted,
    pub(crate) stages: Stages,
    pub(crate) budget: Budget,
    /// What the session offloaded before.
    pub(crate) memory: Option<&'a SessionMemory>,
    pub(crate) checks: Checks,
}

/// Plans the preparation of `req` under `policy`. Linear in the transcript: every
/// message's cost is computed once, and each stage walks the list once with a running
/// total.
///
/// The read tool that offloading adds costs tokens too. It is counted when the request
/// will refer to an artifact: when a tool result is already a preview or will be
/// offloaded, or when clearing (with artifact ids) turns out to be needed, in which case
/// the plan is decided again with the tool counted. Measuring is not repeated.
///
/// What `checks` asks for is checked as each message is measured, and a request that
/// fails a check is planned no further: nothing is decided, and the caller deals with it
/// and plans again without that check (see [`Checks`]).
pub(crate) fn plan(input: Input<'_>, scratch: &mut Scratch) -> Result<Planned, ContextLimitError> {
    let Input {
        req,
        policy,
        untrusted,
        stages,
        budget,
        memory,
        checks,
    } = input;
    let msgs = &req.messages;
    scratch.fit_to(msgs.len());
    let Scratch {
        sent,
        marks,
        clear_order,
        cost,
        layout,
        longs,
        actions,
    } = scratch;
    sent.clear();
    marks.clear();
    longs.clear();
    let (max, art_max) = (policy.tool_result_max_chars, policy.artifact_max_chars);
    // One pass over every message's text. A long result the session offloaded before is
    // hashed instead of counted, and its preview's size is remembered; a new one is sized
    // from its length alone for now (see below).
    let mut original_tokens = 0;
    let mut pairs = Pairs::default();
    let mut claims = false;
    for (i, m) in msgs.iter().enumerate() {
        // Measured first, checked for pairing after: the ids the check compares are in the
        // cache then (measuring counts them), where checking first loaded each from memory.
        'measure: {
            let mark = mark(m, policy, untrusted);
            claims |= mark & REFERS != 0;
            marks.push(mark);
            let long = stages
                .offloads()
                .then(|| offloadable_marked(m, policy, mark))
                .flatten();
            let Some(text) = long else {
                let cost = MessageSize::of(m).tokens();
                original_tokens += cost;
                sent.push(cost);
                break 'measure;
            };
            let key = content_key(text);
            let known = memory.and_then(|mem| mem.get(key)).cloned();
            let size = match &known {
                Some(k) => MessageSize::with_content_chars(m, k.chars),
                None => MessageSize::of(m),
            };
            let cost = size.tokens();
            original_tokens += cost;
            if size.content_chars <= max {
                sent.push(cost);
                break 'measure;
            }
            let exact = known
                .as_ref()
                .and_then(|k| k.preview.as_ref())
                .map(|p| p.chars);
            let preview =
                exact.unwrap_or_else(|| preview_chars_unescaped(size.content_chars, max, art_max));
            let preview_tokens = size.tokens_with_content(preview);
            sent.push(preview_tokens);
            longs.push(Long {
                index: i,
                key,
                chars: size.content_chars,
                known,
                preview_chars: exact,
                tokens: exact.map(|_| (cost, preview_tokens)),
            });
        }
        if checks.pairing {
            pairs.feed(msgs, i);
        }
    }
    if checks.claims && claims {
        return Ok(Planned::Claims);
    }
    // The request will name an artifact: a result names one already (a claim; never a
    // long result, which is plain text), or a long one is to be offloaded.
    let refers_already = claims || !longs.is_empty();
    if checks.pairing && !pairs.pair_up(msgs) {
        return Ok(Planned::Unpaired);
    }
    // The turns are laid out, and the results that may be cleared found, only when
    // pruning or clearing may happen: a request that fits as it is (the usual case) is
    // not read again for them. Until then the layout knows only where the head ends.
    layout.turns.clear();
    layout.units.clear();
    layout.head_end = crate::model::leading_system_end(msgs);
    let mut laid_out = false;
    if budget.previous_cut.is_some() || budget.previous_rounds.is_some() {
        layout.fill(msgs);
        laid_out = true;
    }
    clear_order.clear();
    let mut ordered = false;
    if stages.clears() && budget.previous_clear.is_some() {
        clearable(msgs, policy, marks, clear_order);
        ordered = true;
    }
    let previous_cut = budget
        .previous_cut
        .and_then(|cut| find_cut(cut, msgs, layout));
    let previous_rounds = budget
        .previous_rounds
        .and_then(|cut| find_rounds(cut, msgs, layout));
    // `fit::budget` hands on a previous region only when the policy clears in steps.
    let previous_clear = budget
        .previous_clear
        .and_then(|cut| find_clear(cut, msgs, clear_order));
    let may_add_tool = stages.offloads() && !req.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL);
    let allowance = budget.calibrate(policy.prompt_allowance(budget.model_window));
    let prefix_tokens = req.prefix.as_ref().map_or(0, |p| p.estimated_tokens());
    let tool_tokens = estimate_tool_tokens(&req.tools);
    let prune_target = budget.calibrate(policy.prune_target(budget.model_window));
    // The most the request can cost before anything is dropped, but for its messages.
    let fixed_at_most = prefix_tokens + tool_tokens + read_artifact_tool_tokens();
    // Plan first, then size: a new long result costs at least its unescaped preview, and
    // only those the plan keeps are read to size their preview exactly. When that makes
    // one dearer, plan again with it sized (a kept result stays sized, so this ends).
    loop {
        if fixed_at_most + sent.iter().sum::<usize>() > allowance {
            if !laid_out {
                layout.fill(msgs);
                laid_out = true;
            }
            if stages.clears() && !ordered {
                clearable(msgs, policy, marks, clear_order);
                ordered = true;
            }
        }
        let measured = Measured {
            req,
            untrusted,
            stages,
            layout,
            laid_out,
            allowance,
            prefix_tokens,
            tool_tokens,
            original_tokens,
            sent,
            clear_order,
            marks,
            previous_cut,
            previous_rounds,
            previous_clear,
            prune_target,
            server_clears: budget.server_clears,
            longs,
        };
        let mut out = Decision {
            cost: &mut *cost,
            actions: &mut *actions,
        };
        let mut plan = decide_with_tool(&measured, policy, may_add_tool, refers_already, &mut out)?;
        let mut dearer = false;
        for l in longs.iter_mut() {
            if l.preview_chars.is_some() || actions[l.index] != Action::Keep {
                continue;
            }
            let m = &msgs[l.index];
            let text = m.content.as_str().unwrap_or_default();
            let exact = preview_chars(text, l.chars, max, art_max);
            l.preview_chars = Some(exact);
            let size = MessageSize::with_content_chars(m, l.chars);
            let now = size.tokens_with_content(exact);
            l.tokens = Some((size.tokens(), now));
            if now != sent[l.index] {
                sent[l.index] = now;
                dearer = true;
            }
        }
        if !dearer {
            plan.longs = std::mem::take(longs);
            return Ok(Planned::Plan(plan));
        }
    }
}

/// The number of turns before `cut` in this transcript, if it is there: at its old
/// position (the usual case, a transcript that only grew), or anywhere else a turn starts
/// (the caller dropped or folded old messages since).
pub(super) fn find_cut(cut: Cut, msgs: &[Message], layout: &Layout) -> Option<usize> {
    let turns = &layout.turns;
    if let Ok(k) = turns.binary_search_by_key(&cut.position, |t| t.range.start())
        && cut.is_at(msgs, cut.position)
    {
        return Some(k);
    }
    turns.iter().position(|t| cut.is_at(msgs, t.range.start()))
}

/// The index the session's previous dropped rounds ended at, if it is in this transcript:
/// the end of a round there.
pub(super) fn find_rounds(cut: Cut, msgs: &[Message], layout: &Layout) -> Option<usize> {
    let mut ends = layout
        .units
        .iter()
        .filter(|u| u.is_round)
        .map(|u| u.range.range().end);
    // Where it was first (two messages hashed), else after any round.
    if ends.clone().any(|end| end == cut.position) && cut.is_at(msgs, cut.position) {
        return Some(cut.position);
    }
    ends.find(|&end| cut.is_at(msgs, end))
}

/// The index the session's previous cleared region ended at, if it is in this
/// transcript: at its old position, or after any clearable result.
pub(super) fn find_clear(cut: Cut, msgs: &[Message], clear_order: &[usize]) -> Option<usize> {
    if cut.is_at(msgs, cut.position) {
        return Some(cut.position);
    }
    clear_order
        .iter()
        .map(|&i| i + 1)
        .find(|&end| cut.is_at(msgs, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(messages: Vec<Message>, scratch: &mut Scratch) {
        let req = ChatRequest::new("m", messages);
        let policy = ContextPolicy::default().with_max_context_tokens(100_000_000);
        let input = Input {
            req: &req,
            policy: &policy,
            untrusted: &Untrusted::default(),
            stages: Stages::All,
            budget: Budget {
                model_window: None,
                previous_cut: None,
                previous_rounds: None,
                previous_clear: None,
                server_clears: false,
                factor: 1.0,
            },
            memory: None,
            checks: Checks {
                pairing: true,
                claims: true,
            },
        };
        plan(input, scratch).unwrap();
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
