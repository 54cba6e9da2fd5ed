//! Folding a request: reuse the longest summary already paid for, and decide whether a
//! new fold is due. Pure; the service does the async part.

use std::sync::Arc;

use super::block::{SummaryBlock, is_summary_message};
use super::cache::{SummaryCache, point_keys};
use super::config::SummarizeConfig;
use super::plan::{fold_points, fold_start};
use crate::BoxError;
use crate::message::Message;
use crate::offload::prepare::check_read_tool;
use crate::offload::read_artifact_tool;
use crate::report::PreparationReport;
use crate::request::ChatRequest;
use crate::tokens::{estimate_one, estimate_tool_tokens};

/// What to do with a request.
pub(crate) enum Step {
    /// Send this request now.
    Send(ChatRequest, PreparationReport),
    /// Summarize `req.messages[from..to]` first.
    Fold(FoldWork),
}

/// A fold to make: everything needed to summarize and then compose the request.
pub(crate) struct FoldWork {
    pub(crate) req: ChatRequest,
    /// The leading system messages, without any summary block.
    pub(crate) head: Vec<Message>,
    /// Where foldable history starts in `req.messages`.
    pub(crate) start: usize,
    /// The summary of `req.messages[start..from]` (or the request's own block).
    pub(crate) previous: Option<Arc<SummaryBlock>>,
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// The cache key of `req.messages[start..to]`.
    pub(crate) key: u128,
    pub(crate) report: PreparationReport,
}

impl FoldWork {
    /// The request with `req.messages[start..end]` replaced by `block`.
    pub(crate) fn compose(
        &self,
        end: usize,
        block: Option<&SummaryBlock>,
    ) -> Result<(ChatRequest, PreparationReport), BoxError> {
        compose(
            &self.req,
            &self.head,
            self.start,
            end,
            block,
            self.report.clone(),
        )
    }
}

/// Plans one request. `force` folds even under the threshold (the explicit `compact`).
pub(crate) fn plan(
    req: ChatRequest,
    config: &SummarizeConfig,
    cache: &SummaryCache,
    force: bool,
) -> Result<Step, BoxError> {
    let messages = &req.messages;
    let start = fold_start(messages);
    let head: Vec<Message> = messages[..start]
        .iter()
        .filter(|m| !is_summary_message(m))
        .cloned()
        .collect();
    let own = messages[..start]
        .iter()
        .rev()
        .find_map(SummaryBlock::from_message)
        .map(Arc::new);
    let costs: Vec<usize> = messages.iter().map(estimate_one).collect();
    let fixed = req.prefix.as_ref().map_or(0, |p| p.estimated_tokens())
        + estimate_tool_tokens(&req.tools)
        + costs[..start].iter().sum::<usize>();
    // suffix[i]: the tokens of messages[i..].
    let mut suffix = vec![0usize; messages.len() + 1];
    for i in (0..messages.len()).rev() {
        suffix[i] = suffix[i + 1] + costs[i];
    }
    let report = PreparationReport {
        before_tokens: fixed + suffix[start],
        ..PreparationReport::default()
    };
    let latest = messages.len().saturating_sub(config.keep_last);
    let due_now = force || report.before_tokens >= config.threshold();
    if cache.is_empty() && !due_now {
        // Nothing to reuse and nothing to do: the request goes as it came.
        let mut report = report;
        report.after_tokens = report.before_tokens;
        return Ok(Step::Send(req, report));
    }
    let points: Vec<usize> = fold_points(messages, start)
        .into_iter()
        .filter(|&p| p <= latest)
        .collect();
    let keys = point_keys(&req.scope, &req.session, messages, start, &points);
    let mut from = start;
    let mut previous = own;
    if let Some((i, block)) = (0..points.len())
        .rev()
        .find_map(|i| cache.get(keys[i]).map(|b| (i, b)))
    {
        from = points[i];
        previous = Some(block);
    }
    let composed_tokens = fixed - costs[..start].iter().sum::<usize>()
        + head.iter().map(estimate_one).sum::<usize>()
        + previous
            .as_ref()
            .map_or(0, |b| estimate_one(&b.to_message()))
        + suffix[from];
    let due = force || composed_tokens >= config.threshold();
    let next = points
        .iter()
        .zip(&keys)
        .rev()
        .find(|&(&p, _)| p > from)
        .map(|(&p, &k)| (p, k));
    match next {
        Some((to, key)) if due => Ok(Step::Fold(FoldWork {
            req,
            head,
            start,
            previous,
            from,
            to,
            key,
            report,
        })),
        _ if from == start => {
            // No fold applies: the request goes untouched, its own block included.
            let mut report = report;
            report.after_tokens = report.before_tokens;
            Ok(Step::Send(req, report))
        }
        _ => {
            let (req, report) = compose(&req, &head, start, from, previous.as_deref(), report)?;
            Ok(Step::Send(req, report))
        }
    }
}

/// `req` with its head, then `block` as a system message, then `req.messages[end..]`;
/// adds the read tool when the block names artifacts.
fn compose(
    req: &ChatRequest,
    head: &[Message],
    start: usize,
    end: usize,
    block: Option<&SummaryBlock>,
    mut report: PreparationReport,
) -> Result<(ChatRequest, PreparationReport), BoxError> {
    // Everything but the messages, which are rebuilt: one copy of the transcript, not two.
    let mut out = ChatRequest {
        model: req.model.clone(),
        prefix: req.prefix.clone(),
        messages: Vec::new(),
        tools: req.tools.clone(),
        params: req.params.clone(),
        scope: req.scope.clone(),
        session: req.session.clone(),
        cache: req.cache,
        memo: req.memo,
    };
    let mut messages = Vec::with_capacity(head.len() + 1 + req.messages.len() - end);
    messages.extend_from_slice(head);
    if let Some(block) = block {
        messages.push(block.to_message());
        if !block.artifacts.is_empty() && !check_read_tool(&out)? {
            out.tools.push(read_artifact_tool());
        }
    }
    messages.extend_from_slice(&req.messages[end..]);
    out.messages = messages;
    report.folded_messages += end - start;
    report.after_tokens = out.prefix.as_ref().map_or(0, |p| p.estimated_tokens())
        + estimate_tool_tokens(&out.tools)
        + out.messages.iter().map(estimate_one).sum::<usize>();
    Ok((out, report))
}
