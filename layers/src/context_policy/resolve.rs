//! The artifact-read loop: answering the model's `read_context_artifact` calls inside the
//! stack, and preparing the conversation again with the pages it read.

use std::sync::Arc;

use tower::{Service, ServiceExt};

use super::steps::{Composite, prepare};
use crate::BoxError;
use crate::artifact::{READ_ARTIFACT_TOOL, Untrusted, verify};
use crate::fit::Scratch;
use crate::model::{ChatRequest, ChatResponse, Message};
use crate::offload::{Prepared, commit};

/// Whether the reply asks only for artifact pages.
pub(super) fn only_artifact_reads(m: &Message) -> bool {
    m.has_tool_calls() && m.tool_calls.iter().all(|c| c.name == READ_ARTIFACT_TOOL)
}

/// Checks the request's previews and stubs against the store, prepares it, and runs it
/// as [`run`] does: the path of a request that claims artifacts.
pub(super) async fn verify_and_run<S>(
    inner: S,
    shared: Arc<Composite>,
    req: ChatRequest,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let untrusted = verify(shared.store.as_ref(), &req).await;
    let prepared = prepare(req, &shared, &mut Scratch::default(), &untrusted)?;
    run(inner, shared, prepared, untrusted).await
}

/// Stores what preparation displaced, calls `inner`, and answers the model's artifact
/// reads when auto-resolve is on. `untrusted` is what the first preparation was given.
pub(super) async fn run<S>(
    mut inner: S,
    shared: Arc<Composite>,
    mut prepared: Prepared,
    untrusted: Untrusted,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let before_tokens = prepared.report.before_tokens;
    // Rounds after the first prepare in this future, away from the service's scratch.
    let mut scratch = Scratch::default();
    let mut resolved = Vec::new();
    let mut round = 0;
    loop {
        commit(
            shared.store.as_ref(),
            Some(&shared.memory),
            &shared.policy,
            &mut prepared,
        )
        .await;
        let resolving = shared.auto_resolve.is_some_and(|max| round < max);
        let sent = resolving.then(|| prepared.req.clone());
        if round > 0 {
            inner.ready().await.map_err(Into::into)?;
        }
        let model = shared
            .calibration
            .is_some()
            .then(|| prepared.req.model.clone());
        let mut response = inner.call(prepared.req).await.map_err(Into::into)?;
        let mut report = prepared.report;
        report.absorb_inner(&response.report);
        // Every round is a prompt the provider counted against this round's estimate.
        if let (Some(calibration), Some(model)) = (&shared.calibration, model) {
            calibration.observe_parts(&model, &report, &response.usage);
        }
        match sent {
            Some(mut req) if only_artifact_reads(&response.message) => {
                let calls = response.message.tool_calls.clone();
                req.messages.push(response.message.clone());
                resolved.push(response.message);
                for call in &calls {
                    let answer = shared.reader.answer(&req.scope, &req.session, call).await;
                    req.messages.push(answer.clone());
                    resolved.push(answer);
                }
                // The pages may not fit with the rest: prepare again.
                prepared = prepare(req, &shared, &mut scratch, &untrusted)?;
                round += 1;
            }
            _ => {
                report.before_tokens = before_tokens;
                report.resolved_messages = resolved;
                response.report = report;
                return Ok(response);
            }
        }
    }
}
