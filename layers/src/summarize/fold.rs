//! Folding a request: reuse the longest summary already paid for, and decide whether a
//! new fold is due. Pure; the service does the async part.

use std::sync::Arc;

use super::cache::{SummaryCache, point_keys};
use super::config::SummarizeConfig;
use super::plan::{fold_points, fold_start};
use crate::BoxError;
use crate::artifact::check_read_tool;
use crate::artifact::{read_artifact_tool, read_artifact_tool_tokens};
use crate::model::ChatRequest;
use crate::model::Message;
use crate::model::PreparationReport;
use crate::model::{SummaryBlock, is_summary_message};
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
    /// Where foldable history starts in `req.messages`.
    pub(crate) start: usize,
    /// The summary of `req.messages[start..from]` (or the request's own block).
    pub(crate) previous: Option<Arc<SummaryBlock>>,
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// The cache key of `req.messages[start..to]`.
    pub(crate) key: u128,
    pub(crate) report: PreparationReport,
    /// The tokens every composition keeps: see [`Costs`].
    costs: Costs,
}

impl FoldWork {
    /// The request with `req.messages[start..from]` replaced by the previous block:
    /// nothing new folded (the summary came back empty, which is rare, so the block
    /// is rendered again rather than kept rendered in every fold).
    pub(crate) fn compose_previous(self) -> Result<(ChatRequest, PreparationReport), BoxError> {
        let previous = self.previous.as_deref().map(BlockMessage::new);
        compose(
            self.req,
            &self.costs,
            self.start,
            self.from,
            previous,
            self.report,
        )
    }

    /// The request with `req.messages[start..to]` replaced by `block`.
    pub(crate) fn compose_folded(
        self,
        block: &SummaryBlock,
    ) -> Result<(ChatRequest, PreparationReport), BoxError> {
        compose(
            self.req,
            &self.costs,
            self.start,
            self.to,
            Some(BlockMessage::new(block)),
            self.report,
        )
    }
}

/// A summary block rendered once as the message that takes the place of what it folds.
struct BlockMessage {
    message: Message,
    tokens: usize,
    /// Whether the block names artifacts (so the request needs the read tool).
    names_artifacts: bool,
}

impl BlockMessage {
    fn new(block: &SummaryBlock) -> Self {
        let message = block.to_message();
        Self {
            tokens: estimate_one(&message),
            message,
            names_artifacts: !block.artifacts.is_empty(),
        }
    }
}

/// The estimates a composition is priced from, so that no kept message is estimated
/// again (the estimate of a request is the sum of its parts').
struct Costs {
    /// The prefix, the tools and the leading system messages other than summary blocks.
    kept: usize,
    /// `suffix[i]`: the tokens of `req.messages[i..]`.
    suffix: Vec<usize>,
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
    let costs: Vec<usize> = messages.iter().map(estimate_one).collect();
    let outside =
        req.prefix.as_ref().map_or(0, |p| p.estimated_tokens()) + estimate_tool_tokens(&req.tools);
    // suffix[i]: the tokens of messages[i..].
    let mut suffix = vec![0usize; messages.len() + 1];
    for i in (0..messages.len()).rev() {
        suffix[i] = suffix[i + 1] + costs[i];
    }
    let report = PreparationReport {
        before_tokens: outside + suffix[0],
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
    // The head a composition keeps: the leading system messages, without summary blocks.
    let head_tokens: usize = messages[..start]
        .iter()
        .zip(&costs)
        .filter(|(m, _)| !is_summary_message(m))
        .map(|(_, &c)| c)
        .sum();
    let own = messages[..start]
        .iter()
        .rev()
        .find_map(SummaryBlock::from_message)
        .map(Arc::new);
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
    let previous_message = previous.as_deref().map(BlockMessage::new);
    let costs = Costs {
        kept: outside + head_tokens,
        suffix,
    };
    let composed_tokens =
        costs.kept + previous_message.as_ref().map_or(0, |b| b.tokens) + costs.suffix[from];
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
            start,
            previous,
            from,
            to,
            key,
            report,
            costs,
        })),
        _ if from == start => {
            // No fold applies: the request goes untouched, its own block included.
            let mut report = report;
            report.after_tokens = report.before_tokens;
            Ok(Step::Send(req, report))
        }
        _ => {
            let (req, report) = compose(req, &costs, start, from, previous_message, report)?;
            Ok(Step::Send(req, report))
        }
    }
}

/// `req` with its head, then `block` as a system message, then `req.messages[end..]`;
/// adds the read tool when the block names artifacts. The messages are moved, not
/// copied, and priced from `costs`.
fn compose(
    mut req: ChatRequest,
    costs: &Costs,
    start: usize,
    end: usize,
    block: Option<BlockMessage>,
    mut report: PreparationReport,
) -> Result<(ChatRequest, PreparationReport), BoxError> {
    let mut after = costs.kept + costs.suffix[end];
    let mut added = None;
    if let Some(block) = block {
        after += block.tokens;
        if block.names_artifacts && !check_read_tool(&req)? {
            req.tools.push(read_artifact_tool());
            after += read_artifact_tool_tokens();
        }
        added = Some(block.message);
    }
    req.messages.splice(start..end, added);
    // The head keeps its system messages but not an earlier summary block.
    let mut i = 0;
    req.messages.retain(|m| {
        let keep = i >= start || !is_summary_message(m);
        i += 1;
        keep
    });
    report.folded_messages += end - start;
    report.after_tokens = after;
    Ok((req, report))
}
