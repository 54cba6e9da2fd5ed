//! Offloading a whole request: previews, the read tool, and what to store.

use super::rewrite::offload_messages;
use crate::BoxError;
use crate::artifact::{
    Displaced, Untrusted, check_read_tool, read_artifact_tool, read_artifact_tool_tokens,
    refers_to_artifact,
};
use crate::model::{ChatRequest, PreparationReport};
use crate::policy::ContextPolicy;

/// A request ready for the inner service, and what must be stored first.
pub(crate) struct Prepared {
    pub(crate) req: ChatRequest,
    pub(crate) report: PreparationReport,
    pub(crate) to_store: Vec<Displaced>,
    /// The estimated tokens of the offloaded results, before and after (already in
    /// `report` when a planner sized the request as offloaded).
    pub(crate) rewritten_tokens: (usize, usize),
}

/// Offloads oversized results of an already fitted request, and adds the read tool when
/// anything in the request now refers to an artifact. `reserved_tool` says whether the
/// planner counted the read tool's tokens; when the tool turns out not to be needed, the
/// report's `after_tokens` gives them back. `refers` is the planner's answer to "does a
/// kept message refer to an artifact already", when there was a planner (it read every
/// content once; reading them all again costs a cache miss a message on long transcripts).
pub(crate) fn offload_request(
    mut req: ChatRequest,
    mut report: PreparationReport,
    mut to_store: Vec<Displaced>,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
    reserved_tool: bool,
    refers: Option<bool>,
) -> Result<Prepared, BoxError> {
    let has_tool = check_read_tool(&req)?;
    let (offloaded, rewritten_tokens) = offload_messages(
        &mut req.messages,
        &req.scope,
        &req.session,
        policy,
        untrusted,
    );
    let offloaded_any = !offloaded.is_empty();
    report.offloaded_results += offloaded.len();
    to_store.extend(offloaded);
    let refers = offloaded_any
        || match refers {
            Some(known) => known,
            None => req
                .messages
                .iter()
                .any(|m| refers_to_artifact(m, policy, untrusted)),
        };
    if refers && !has_tool {
        req.tools.push(read_artifact_tool());
    } else if reserved_tool && !has_tool {
        report.after_tokens -= read_artifact_tool_tokens();
    }
    Ok(Prepared {
        req,
        report,
        to_store,
        rewritten_tokens,
    })
}
