//! The linear planner: which messages stay, which are cleared, which go.

use std::sync::Arc;

use crate::artifact::{
    Artifact, Displaced, PREVIEW, READ_ARTIFACT_TOOL, REFERS, STUB, Untrusted,
    always_gets_read_tool, artifact_id, genuine_preview, mark, named_artifact, offloadable_marked,
    preview_chars, preview_chars_unescaped, read_artifact_tool_tokens, stub_text, unkept_stub_text,
};
use crate::error::{ContextLimitError, LimitBreakdown};
use crate::fit::pairing::Pairs;
use crate::fit::turns::Layout;
use crate::fit::{Cut, Cuts};
use crate::model::ChatRequest;
use crate::model::PreparationReport;
use crate::model::{Content, Message, Text};
use crate::offload::{ContentKey, Remembered, SessionMemory, content_key};
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
    /// Where the session's previous cleared region ended (clearing in steps).
    pub(crate) previous_clear: Option<Cut>,
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

/// What a cleared message's stub names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Naming {
    /// No artifact: no store is used (the clear layer on its own).
    Nothing,
    /// No artifact, because the request's references are past the session's bound.
    Unkept,
    /// The artifact a preview in the request names already (stored).
    Stored(String),
    /// The artifact holding the replaced content: its id is found or made when the plan
    /// is applied, once, not on every decision the planner tries.
    Content,
}

/// A cleared message's replacement, decided; the stub itself is written by
/// [`Plan::apply`].
#[derive(Clone, Debug)]
pub(crate) struct Cleared {
    /// The message's index.
    pub(crate) index: usize,
    pub(crate) naming: Naming,
    /// The long result this is, when it is one: its key and what the session knows of it.
    pub(crate) long: Option<(ContentKey, Option<Arc<Remembered>>)>,
    /// The characters of the result the stub stands for.
    pub(crate) chars: usize,
    /// The bytes of the artifact the stub names (an upper bound; 0 when it names none).
    pub(crate) bytes: usize,
}

impl Cleared {
    fn names_artifact(&self) -> bool {
        matches!(self.naming, Naming::Stored(_) | Naming::Content)
    }
}

/// Every artifact id has this many characters, so a stub's length is known before its id.
const ID_PLACEHOLDER: &str = "art_0000000000000000000000000000000000000000000000000000000000000000";

/// The stub text for `naming` (`id` in place of a content's id not made yet).
fn stub_for(tool: Option<&str>, chars: usize, naming: &Naming, id: Option<&str>) -> String {
    match naming {
        Naming::Nothing => stub_text(tool, chars, None),
        Naming::Unkept => unkept_stub_text(tool, chars),
        Naming::Stored(id) => stub_text(tool, chars, Some(id)),
        Naming::Content => stub_text(tool, chars, Some(id.unwrap_or(ID_PLACEHOLDER))),
    }
}

/// A long plain tool result, which the offload step replaces with a preview when it is
/// kept: found while measuring, sized exactly only once the plan keeps it.
#[derive(Clone, Debug)]
pub(crate) struct Long {
    /// The message's index (in the request planned; after [`Plan::apply`], in the fitted
    /// request).
    pub(crate) index: usize,
    pub(crate) key: ContentKey,
    /// The characters of the text.
    pub(crate) chars: usize,
    /// What the session made for this text before, if it remembers.
    pub(crate) known: Option<Arc<Remembered>>,
    /// The preview's characters, once known exactly.
    pub(crate) preview_chars: Option<usize>,
    /// The message's estimated tokens with its text and with that exact preview, when the
    /// planner measured them (offloading then need not load the message's ids again).
    pub(crate) tokens: Option<(usize, usize)>,
}

impl Long {
    /// The bytes its artifact holds (an upper bound when not stored yet and the text is
    /// longer than the artifact keeps).
    fn bytes(&self, text_len: usize) -> usize {
        self.known.as_ref().map_or(text_len, |k| k.stored_bytes)
    }
}

/// A message of the fitted request that names an artifact, for the store's live set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reference {
    /// Its index in the fitted (later the prepared) request.
    pub(crate) index: usize,
    /// Shared with the session's memory and the request's other lists: an agent's request
    /// names hundreds, each copied three times before.
    pub(crate) id: Arc<str>,
    /// The characters of the result it stands for.
    pub(crate) chars: usize,
    /// Named by a summary block (a folded span or its archive), not by a tool result: kept
    /// live, never cleared for it.
    pub(crate) summary: bool,
}

/// The artifacts the summary blocks among the leading system messages name: their folded
/// spans and their archive.
pub(crate) fn summary_references(messages: &[Message], head_end: usize) -> Vec<Reference> {
    let mut out = Vec::new();
    for (index, m) in messages[..head_end.min(messages.len())].iter().enumerate() {
        let Some(block) = crate::summarize::SummaryBlock::from_message(m) else {
            continue;
        };
        for id in block.artifacts.into_iter().chain(block.archive) {
            out.push(Reference {
                index,
                id: id.into(),
                chars: 0,
                summary: true,
            });
        }
    }
    out
}

/// A result replaced by a reference to an artifact the session stored before: its text,
/// kept until the store confirms it still holds the artifact (or stores it again).
#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) id: Arc<str>,
    pub(crate) text: Text,
}

/// The outcome of planning.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The messages whose action is [`Action::Clear`] (one cleared and then dropped by a
    /// later stage is not here).
    pub(crate) clears: Vec<Cleared>,
    /// Where whole turns were cut and where the cleared region ends, to remember for the
    /// session's next request.
    pub(crate) cuts: Cuts,
    pub(crate) report: PreparationReport,
    /// Whether the read tool's tokens were counted (it may be added by offloading).
    pub(crate) reserved_tool: bool,
    /// The long plain results kept, for the offload step, by index.
    pub(crate) longs: Vec<Long>,
    /// Kept messages that named an artifact as received (trusted previews and stubs).
    pub(crate) inputs: Vec<Reference>,
}

/// What [`Plan::apply`] hands on: the fitted messages and what the artifacts need.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub(crate) messages: Vec<Message>,
    /// Cleared contents to store.
    pub(crate) displaced: Vec<Displaced>,
    /// Every fitted message that names an artifact so far (stubs and input references),
    /// by index in the fitted request.
    pub(crate) refs: Vec<Reference>,
    /// Texts of cleared results whose artifact the session stored before.
    pub(crate) kept: Vec<Kept>,
    /// What the session's preview cache should learn.
    pub(crate) made: Vec<(ContentKey, Remembered)>,
    /// The long results kept, by index in the fitted request.
    pub(crate) longs: Vec<Long>,
    /// Tokens freed by stubbing the arguments of calls whose results were cleared
    /// ([`ContextPolicy::clear_tool_inputs`]); the plan did not count them.
    pub(crate) inputs_freed: usize,
}

/// The arguments a call whose result was cleared is sent with, under
/// [`ContextPolicy::clear_tool_inputs`].
pub(crate) const CLEARED_ARGUMENTS: &str = r#"{"cleared":true}"#;

/// What applying a plan needs besides it: where artifacts go, and what the session
/// stored before.
#[derive(Clone, Copy)]
pub(crate) struct ApplyContext<'a> {
    pub(crate) scope: &'a crate::model::Scope,
    pub(crate) session: &'a str,
    pub(crate) memory: Option<&'a SessionMemory>,
    pub(crate) artifact_max_chars: usize,
    /// Stub the arguments of the calls whose results are cleared.
    pub(crate) clear_tool_inputs: bool,
}

impl Plan {
    /// Applies the plan to the messages it was made for, in place: kept messages move
    /// down over dropped ones, and the list's buffer is reused rather than a new one
    /// made. `actions` are the plan's, left in the [`Scratch`] it was made with.
    pub(crate) fn apply(
        self,
        mut messages: Vec<Message>,
        actions: &[Action],
        ctx: ApplyContext<'_>,
    ) -> Applied {
        debug_assert_eq!(messages.len(), actions.len());
        let mut out = Applied::default();
        let mut refs = self.inputs;
        let mut cleared_calls: Vec<Box<str>> = Vec::new();
        for c in self.clears {
            let Some(m) = messages.get_mut(c.index) else {
                continue;
            };
            if ctx.clear_tool_inputs
                && let Some(id) = &m.tool_call_id
            {
                cleared_calls.push(id.clone());
            }
            let original = std::mem::take(&mut m.content);
            let text = original.text();
            let (id, known) = match &c.naming {
                Naming::Content => {
                    let (key, known) = match c.long {
                        Some((key, known)) => (key, known),
                        None => {
                            let key = content_key(&text);
                            (key, ctx.memory.and_then(|mem| mem.get(key)).cloned())
                        }
                    };
                    // The session stored this text before: the same id, nothing stored.
                    let id = match &known {
                        Some(k) => k.id.clone(),
                        None => artifact_id(ctx.scope, ctx.session, &text).into(),
                    };
                    (Some(id), Some((key, known)))
                }
                Naming::Stored(id) => (Some(Arc::from(id.as_str())), None),
                Naming::Nothing | Naming::Unkept => (None, None),
            };
            m.content = stub_for(m.name(), c.chars, &c.naming, id.as_deref()).into();
            let Some(id) = id else {
                continue;
            };
            refs.push(Reference {
                index: c.index,
                id: id.clone(),
                chars: c.chars,
                summary: false,
            });
            match known {
                Some((key, None)) => {
                    let artifact = Artifact::counted(&text, c.chars, ctx.artifact_max_chars);
                    out.made.push((
                        key,
                        Remembered {
                            id: id.clone(),
                            chars: c.chars,
                            stored_bytes: artifact.text.len(),
                            preview: None,
                        },
                    ));
                    out.displaced.push(Displaced {
                        id: id.to_string(),
                        artifact,
                    });
                }
                Some((_, Some(_))) => {
                    // Kept in case the store lost it since (moved, not copied).
                    if let Content::Text(text) = original {
                        out.kept.push(Kept { id, text });
                    }
                }
                None => {}
            }
        }
        if !cleared_calls.is_empty() {
            out.inputs_freed = clear_inputs(&mut messages, actions, cleared_calls);
        }
        let mut longs = self.longs;
        longs.retain(|l| actions[l.index] == Action::Keep);
        refs.sort_unstable_by_key(|r| r.index);
        // A plan that drops nothing (a request that fits) leaves every index as it is.
        debug_assert!(
            self.report.removed_messages > 0 || actions.iter().all(|a| *a != Action::Drop)
        );
        if self.report.removed_messages > 0 {
            // Indices in the fitted request: each minus the messages dropped before it.
            let mut dropped = 0;
            let (mut r, mut l) = (0, 0);
            for (i, a) in actions.iter().enumerate() {
                while r < refs.len() && refs[r].index == i {
                    refs[r].index -= dropped;
                    r += 1;
                }
                while l < longs.len() && longs[l].index == i {
                    longs[l].index -= dropped;
                    l += 1;
                }
                if *a == Action::Drop {
                    dropped += 1;
                }
            }
            let mut actions = actions.iter();
            messages.retain(|_| actions.next() != Some(&Action::Drop));
        }
        out.messages = messages;
        out.refs = refs;
        out.longs = longs;
        out
    }
}

/// Replaces the arguments of the kept calls named in `ids` with [`CLEARED_ARGUMENTS`]
/// where that is shorter. Returns the tokens freed.
fn clear_inputs(messages: &mut [Message], actions: &[Action], mut ids: Vec<Box<str>>) -> usize {
    ids.sort_unstable();
    // Measured as the estimator measures arguments, so the stub never costs more.
    let stub_chars = crate::tokens::arguments_chars(CLEARED_ARGUMENTS);
    let mut freed = 0;
    for (m, a) in messages.iter_mut().zip(actions) {
        if *a == Action::Drop || !m.has_tool_calls() {
            continue;
        }
        let before = MessageSize::of(m).tokens();
        let mut changed = false;
        for call in m.tool_calls.iter_mut() {
            if ids
                .binary_search_by(|id| (**id).cmp(call.id.as_str()))
                .is_ok()
                && call.arguments != CLEARED_ARGUMENTS
                && crate::tokens::arguments_chars(&call.arguments) > stub_chars
            {
                call.arguments = CLEARED_ARGUMENTS.to_owned();
                changed = true;
            }
        }
        if changed {
            freed += before - MessageSize::of(m).tokens();
        }
    }
    freed
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

/// What planning needs to know about a request, measured once.
struct Measured<'a> {
    req: &'a ChatRequest,
    /// Contents shaped like the stack's previews or stubs whose artifact this session
    /// does not hold: plain text to the plan.
    untrusted: &'a Untrusted,
    stages: Stages,
    /// Its head always; its turns and units only when `laid_out` (the request may be over
    /// its allowance, or a previous cut is to be found).
    layout: &'a Layout,
    laid_out: bool,
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
    /// The end of the session's previous cleared region, when clearing in steps and it
    /// is found: every clearable result before this index is cleared again.
    previous_clear: Option<usize>,
    /// What pruning aims for ([`ContextPolicy::prune_target`]).
    prune_target: usize,
    /// The long plain results, by index.
    longs: &'a [Long],
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
///
/// What `checks` asks for is checked as each message is measured, and a request that
/// fails a check is planned no further: nothing is decided, and the caller deals with it
/// and plans again without that check (see [`Checks`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    req: &ChatRequest,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
    stages: Stages,
    budget: Budget,
    memory: Option<&SessionMemory>,
    checks: Checks,
    scratch: &mut Scratch,
) -> Result<Planned, ContextLimitError> {
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
    if budget.previous_cut.is_some() {
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
            previous_clear,
            prune_target,
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

/// [`decide`] with the read tool counted when the request will carry it: when it declares
/// tools of its own, when something refers to an artifact already, or when clearing (with
/// artifact ids) turns out to be needed, in which case the plan is decided again with the
/// tool counted.
fn decide_with_tool(
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
            for i in turn.range.range() {
                total -= cost[i];
                actions[i] = Action::Drop;
            }
        }
        report.pruned_turns = k;
        report.cut_reused = k > 0;
        first_prunable = k;
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
                for i in turn.range.range() {
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
                .filter(|u| u.is_round && actions[u.range.start()] != Action::Drop)
                .collect();
            let droppable = rounds.len().saturating_sub(policy.preserve_recent);
            for unit in &rounds[..droppable] {
                if total <= allowance {
                    break;
                }
                for i in unit.range.range() {
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
    Ok(Plan {
        clears,
        cuts: Cuts {
            history: cut,
            cleared,
        },
        report,
        reserved_tool: reserved > 0,
        longs: Vec::new(),
        inputs,
    })
}

/// The kept messages that name an artifact as received: previews and stubs the store
/// vouched for. Only those marked so are parsed again, for their id.
fn input_references(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    actions: &[Action],
) -> Vec<Reference> {
    let mut out = Vec::new();
    for (i, &mark) in m.marks.iter().enumerate() {
        // The mark says it first, without a call for each of 10,000 messages.
        if mark & REFERS == 0 || actions[i] != Action::Keep {
            continue;
        }
        if let Some((id, chars)) = named_artifact(&m.req.messages[i], mark, policy, m.untrusted) {
            out.push(Reference {
                index: i,
                id: id.into(),
                chars,
                summary: false,
            });
        }
    }
    out
}

/// Keeps the artifacts the request names within `max_artifact_bytes`: past it, the oldest
/// results that would name one are cleared with a stub saying their artifact is not kept,
/// so the store never has to evict an artifact the request names. Returns how many.
///
/// The bytes cleared are rounded up to a quarter of the bound, oldest first, so the
/// results a growing session clears change once in a quarter-bound of new results rather
/// than on every turn: each change rewrites the transcript from that result on, and the
/// provider's cached prefix with it.
fn bound_references(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    inputs: &[Reference],
    actions: &mut [Action],
    clears: &mut Vec<Cleared>,
    cost: &mut [usize],
    total: &mut usize,
) -> usize {
    let msgs = &m.req.messages;
    let art_max = policy.artifact_max_chars;
    // (index, bytes, original chars) of every message that will name an artifact.
    let mut named: Vec<(usize, usize, usize)> = Vec::new();
    for l in m.longs {
        if actions[l.index] == Action::Keep {
            let len = msgs[l.index].content.as_str().map_or(0, str::len);
            named.push((l.index, l.bytes(len), l.chars));
        }
    }
    for c in clears.iter().filter(|c| c.names_artifact()) {
        named.push((c.index, c.bytes, c.chars));
    }
    for r in inputs.iter().filter(|r| !r.summary) {
        // The artifact is stored already; its characters stand for its bytes.
        named.push((r.index, r.chars.min(art_max), r.chars));
    }
    let sum: usize = named.iter().map(|n| n.1).sum();
    let bound = policy.max_artifact_bytes;
    if sum <= bound {
        return 0;
    }
    named.sort_unstable_by_key(|n| n.0);
    let quantum = (bound / 4).max(1);
    let target = (sum - bound).div_ceil(quantum) * quantum;
    let mut freed = 0;
    let mut unkept = 0;
    for &(i, bytes, chars) in &named {
        if freed >= target {
            break;
        }
        freed += bytes;
        unkept += 1;
        let msg = &msgs[i];
        let stub = unkept_stub_text(msg.name(), chars);
        let new_cost =
            MessageSize::with_content_chars(msg, 0).tokens_with_content(char_count(&stub));
        // A stub naming no artifact is shorter than any preview or stub naming one.
        *total = *total - cost[i] + new_cost;
        cost[i] = new_cost;
        actions[i] = Action::Clear;
        clears.retain(|c| c.index != i);
        clears.push(Cleared {
            index: i,
            naming: Naming::Unkept,
            long: None,
            chars,
            bytes: 0,
        });
    }
    unkept
}

/// The number of turns before `cut` in this transcript, if it is there: at its old
/// position (the usual case, a transcript that only grew), or anywhere else a turn starts
/// (the caller dropped or folded old messages since).
fn find_cut(cut: Cut, msgs: &[Message], layout: &Layout) -> Option<usize> {
    let turns = &layout.turns;
    if let Ok(k) = turns.binary_search_by_key(&cut.position, |t| t.range.start())
        && cut.is_at(msgs, cut.position)
    {
        return Some(k);
    }
    turns.iter().position(|t| cut.is_at(msgs, t.range.start()))
}

/// The index the session's previous cleared region ended at, if it is in this
/// transcript: at its old position, or after any clearable result.
fn find_clear(cut: Cut, msgs: &[Message], clear_order: &[usize]) -> Option<usize> {
    if cut.is_at(msgs, cut.position) {
        return Some(cut.position);
    }
    clear_order
        .iter()
        .map(|&i| i + 1)
        .find(|&end| cut.is_at(msgs, end))
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
fn clear_until_fit(
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
fn clear_one(
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
    let preview = (m.marks[i] & PREVIEW != 0)
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
        None if stages.offloads() => {
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
    let stub = stub_for(msg.name(), cleared.chars, &cleared.naming, None);
    let new_cost = size.tokens_with_content(char_count(&stub));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(messages: Vec<Message>, scratch: &mut Scratch) {
        let req = ChatRequest::new("m", messages);
        let policy = ContextPolicy::default().with_max_context_tokens(100_000_000);
        plan(
            &req,
            &policy,
            &Untrusted::default(),
            Stages::All,
            Budget {
                model_window: None,
                previous_cut: None,
                previous_clear: None,
                factor: 1.0,
            },
            None,
            Checks {
                pairing: true,
                claims: true,
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
