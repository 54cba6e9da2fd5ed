//! Offloading a whole request: previews, the read tool, and what to store.

use crate::BoxError;
use crate::error::ToolConflictError;
use crate::fit::refers_to_artifact;
use crate::offload::rewrite::{Displaced, offload_messages};
use crate::offload::tool::{
    READ_ARTIFACT_TOOL, read_artifact_tool, read_artifact_tool_ref, read_artifact_tool_tokens,
};
use crate::policy::ContextPolicy;
use crate::report::PreparationReport;
use crate::request::ChatRequest;
use crate::store::ArtifactStore;

/// A request ready for the inner service, and what must be stored first.
pub(crate) struct Prepared {
    pub(crate) req: ChatRequest,
    pub(crate) report: PreparationReport,
    pub(crate) to_store: Vec<Displaced>,
    /// The estimated tokens of the offloaded results, before and after (already in
    /// `report` when a planner sized the request as offloaded).
    pub(crate) rewritten_tokens: (usize, usize),
}

/// Fails when the request defines a different tool under the read tool's name; tells
/// whether it already has the stack's own definition.
pub(crate) fn check_read_tool(req: &ChatRequest) -> Result<bool, ToolConflictError> {
    match req.tools.iter().find(|t| t.name == READ_ARTIFACT_TOOL) {
        None => Ok(false),
        Some(t) if t == read_artifact_tool_ref() => Ok(true),
        Some(_) => Err(ToolConflictError {
            name: READ_ARTIFACT_TOOL.to_owned(),
        }),
    }
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
    reserved_tool: bool,
    refers: Option<bool>,
) -> Result<Prepared, BoxError> {
    let has_tool = check_read_tool(&req)?;
    let (offloaded, rewritten_tokens) =
        offload_messages(&mut req.messages, &req.scope, &req.session, policy);
    let offloaded_any = !offloaded.is_empty();
    report.offloaded_results += offloaded.len();
    to_store.extend(offloaded);
    let refers = offloaded_any
        || match refers {
            Some(known) => known,
            None => req.messages.iter().any(refers_to_artifact),
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

/// Stores every displaced result. A failure is logged and skipped: the preview (or stub)
/// is still sent, so the budget holds, and a later read of that id answers the model
/// with an `unknown_artifact` result it can recover from.
pub(crate) async fn store_all(store: &dyn ArtifactStore, req: &ChatRequest, items: Vec<Displaced>) {
    for item in items {
        if let Err(e) = store
            .put(&req.scope, &req.session, &item.id, item.artifact)
            .await
        {
            tracing::warn!(
                target: "llm_context",
                error = %e,
                artifact = %item.id,
                scope = %req.scope.key(),
                session = %req.session,
                "could not store an artifact; the model gets the preview only"
            );
        }
    }
}
