//! Offloading a whole request: previews, the read tool, and what to store.

use super::rewrite::{find_longs, offload_messages};
use crate::BoxError;
use crate::artifact::{
    Displaced, Untrusted, always_gets_read_tool, check_read_tool, mark, named_artifact,
    read_artifact_tool, read_artifact_tool_tokens,
};
use crate::fit::{Applied, Kept, Reference, summary_references};
use crate::model::{ChatRequest, Message, PreparationReport};
use crate::offload::{ContentKey, Remembered, SessionMemory};
use crate::policy::ContextPolicy;

/// A request ready for the inner service, and what the store must do first.
pub(crate) struct Prepared {
    pub(crate) req: ChatRequest,
    pub(crate) report: PreparationReport,
    pub(crate) to_store: Vec<Displaced>,
    /// Every message of `req` that names an artifact, by index: the store's live set.
    pub(crate) refs: Vec<Reference>,
    /// Texts whose artifact the session stored before, in case the store lost it.
    pub(crate) kept: Vec<Kept>,
    /// What the session's preview cache learns once the store has the artifacts.
    pub(crate) made: Vec<(ContentKey, Remembered)>,
    /// The estimated tokens of the offloaded results, before and after (already in
    /// `report` when a planner sized the request as offloaded).
    pub(crate) rewritten_tokens: (usize, usize),
}

impl Prepared {
    /// `req` sent as it came, by `executor` (which edits nothing).
    pub(crate) fn untouched(req: ChatRequest, executor: crate::Executor) -> Self {
        // Counted all the same: what is sent is what came.
        let tokens = req.estimate_tokens();
        Self {
            req,
            report: PreparationReport {
                executor: Some(executor),
                before_tokens: tokens,
                after_tokens: tokens,
                ..PreparationReport::default()
            },
            to_store: Vec::new(),
            refs: Vec::new(),
            kept: Vec::new(),
            made: Vec::new(),
            rewritten_tokens: (0, 0),
        }
    }

    /// Whether the store has anything to do before the request is sent.
    pub(crate) fn needs_store(&self) -> bool {
        !self.to_store.is_empty() || !self.refs.is_empty()
    }
}

/// Offloads oversized results of a request (fitted already when `applied` comes from a
/// planner), and adds the read tool when the request declares tools of its own (an
/// agent's request: the tool is then in every request of the session, so the tools a
/// provider caches first never change because of the stack) or when anything in it now
/// refers to an artifact. `reserved_tool` says whether the planner counted the read tool's tokens; when
/// the tool turns out not to be needed, the report's `after_tokens` gives them back.
/// `planned` says the planner found the long results and the input references (it read
/// every content once; reading them all again costs a cache miss a message on long
/// transcripts); without it they are found here.
#[allow(clippy::too_many_arguments)]
pub(crate) fn offload_request(
    mut req: ChatRequest,
    mut report: PreparationReport,
    applied: Applied,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
    reserved_tool: bool,
    planned: bool,
    memory: Option<&SessionMemory>,
) -> Result<Prepared, BoxError> {
    let has_tool = check_read_tool(&req)?;
    let always = always_gets_read_tool(&req);
    let Applied {
        displaced: mut to_store,
        mut refs,
        mut kept,
        mut made,
        longs,
        ..
    } = applied;
    let longs = if planned {
        longs
    } else {
        refs.extend(input_references(&req.messages, policy, untrusted));
        find_longs(&req.messages, policy, untrusted, memory)
    };
    let offloaded = offload_messages(&mut req.messages, longs, &req.scope, &req.session, policy);
    report.offloaded_results += offloaded.refs.len();
    report.reused_previews += offloaded.reused;
    append(&mut refs, offloaded.refs);
    refs.sort_unstable_by_key(|r| r.index);
    append(&mut to_store, offloaded.displaced);
    append(&mut kept, offloaded.kept);
    append(&mut made, offloaded.made);
    if (always || !refs.is_empty()) && !has_tool {
        req.tools.push(read_artifact_tool());
    } else if reserved_tool && !has_tool {
        report.after_tokens -= read_artifact_tool_tokens();
    }
    Ok(Prepared {
        req,
        report,
        to_store,
        refs,
        kept,
        made,
        rewritten_tokens: offloaded.tokens,
    })
}

/// `more` after `into`; taken whole when `into` is empty (the common case, for lists of
/// hundreds), instead of copied into a list grown to fit.
fn append<T>(into: &mut Vec<T>, more: Vec<T>) {
    if into.is_empty() {
        *into = more;
    } else {
        into.extend(more);
    }
}

/// The messages that name an artifact as received (previews and stubs the store vouched
/// for), found without a planner.
fn input_references(
    messages: &[Message],
    policy: &ContextPolicy,
    untrusted: &Untrusted,
) -> Vec<Reference> {
    let mut out: Vec<Reference> = messages
        .iter()
        .enumerate()
        .filter_map(|(index, m)| {
            let (id, chars) = named_artifact(m, mark(m, policy, untrusted), policy, untrusted)?;
            Some(Reference {
                index,
                id: id.into(),
                chars,
                summary: false,
            })
        })
        .collect();
    out.extend(summary_references(
        messages,
        crate::model::leading_system_end(messages),
    ));
    out
}
