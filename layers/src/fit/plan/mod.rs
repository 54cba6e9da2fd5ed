//! The linear planner: which messages stay, which are cleared, which go.
//!
//! [`plan`] measures every message once ([`measure`]), decides what stays
//! ([`decide`]), and [`Plan::apply`] writes the fitted request ([`apply`]); the artifacts
//! the result names are found and bounded in [`references`].

mod apply;
mod decide;
mod measure;
mod references;

pub(crate) use apply::{Applied, ApplyContext};
pub(crate) use measure::{Checks, Input, Planned, Scratch, plan};
pub(crate) use references::{Reference, summary_references};
// What the parts use of each other.
use decide::{clearable, decide_with_tool};
use references::{bound_references, input_references};

use std::sync::Arc;

use crate::artifact::{
    Artifact, Displaced, PREVIEW, READ_ARTIFACT_TOOL, REFERS, STUB, Untrusted,
    always_gets_read_tool, artifact_id, genuine_preview, mark, named_artifact, offloadable_marked,
    preview_chars, preview_chars_unescaped, read_artifact_tool_tokens, stub_text, unkept_stub_text,
};
use crate::artifact::{ContentKey, Remembered, SessionMemory, content_key};
use crate::error::{ContextLimitError, LimitBreakdown};
use crate::fit::pairing::Pairs;
use crate::fit::turns::Layout;
use crate::fit::{Cut, Cuts};
use crate::model::ChatRequest;
use crate::model::PreparationReport;
use crate::model::{Content, Message, Text};
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
    /// Where the session's previous request stopped dropping tool rounds (cache-aware
    /// pruning).
    pub(crate) previous_rounds: Option<Cut>,
    /// Where the session's previous cleared region ended (clearing in steps).
    pub(crate) previous_clear: Option<Cut>,
    /// The provider clears old tool results (a delegated request): the plan counts the
    /// clearing it needs as the provider's (clearing first, as the provider does before
    /// anything else), sends those results unchanged, and prunes only what that clearing
    /// would not make fit.
    pub(crate) server_clears: bool,
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

/// What planning needs to know about a request, measured once.
pub(super) struct Measured<'a> {
    pub(super) req: &'a ChatRequest,
    /// Contents shaped like the stack's previews or stubs whose artifact this session
    /// does not hold: plain text to the plan.
    pub(super) untrusted: &'a Untrusted,
    pub(super) stages: Stages,
    /// Its head always; its turns and units only when `laid_out` (the request may be over
    /// its allowance, or a previous cut is to be found).
    pub(super) layout: &'a Layout,
    pub(super) laid_out: bool,
    pub(super) allowance: usize,
    pub(super) prefix_tokens: usize,
    pub(super) tool_tokens: usize,
    /// The messages' estimate as received.
    pub(super) original_tokens: usize,
    /// Each message's estimate as it will be sent (after offloading, when it runs).
    pub(super) sent: &'a [usize],
    /// What each message's content already is ([`PREVIEW`], [`STUB`], [`REFERS`]), read
    /// once while measuring: later passes over 10,000 messages must not touch every
    /// content again.
    pub(super) marks: &'a [u8],
    pub(super) clear_order: &'a [usize],
    /// The session's previous cut, as the number of turns before it, when it is found.
    pub(super) previous_cut: Option<usize>,
    /// The end of the session's previous dropped rounds, when pruning is cache-aware and
    /// it is found: every droppable round before this index is dropped again.
    pub(super) previous_rounds: Option<usize>,
    /// The end of the session's previous cleared region, when clearing in steps and it
    /// is found: every clearable result before this index is cleared again.
    pub(super) previous_clear: Option<usize>,
    /// What pruning aims for ([`ContextPolicy::prune_target`]).
    pub(super) prune_target: usize,
    /// The provider clears (see [`Budget::server_clears`]).
    pub(super) server_clears: bool,
    /// The long plain results, by index.
    pub(super) longs: &'a [Long],
}

/// The lists a decision writes.
pub(super) struct Decision<'a> {
    pub(super) cost: &'a mut Vec<usize>,
    pub(super) actions: &'a mut Vec<Action>,
}
