//! The preparation report: what the stack did to a request, returned with the response.
//!
//! ```
//! use llm_context_layers::PreparationReport;
//!
//! let report = PreparationReport::default();
//! assert!(!report.changed());
//! let json = serde_json::to_value(&report).unwrap();
//! assert_eq!(json["removed_messages"], 0);
//! ```

use serde::{Deserialize, Serialize};

/// What the layers did to one request. Counts are over the messages of the tail.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct PreparationReport {
    /// Estimated prompt tokens before preparation (prefix, tools and messages).
    pub before_tokens: usize,
    /// Estimated prompt tokens as sent.
    pub after_tokens: usize,
    /// Messages removed (whole turns and whole tool rounds).
    pub removed_messages: usize,
    /// Tool results replaced by a stub (`cleared_observations` before 0.1.0, a name still
    /// read).
    #[serde(alias = "cleared_observations")]
    pub cleared_results: usize,
    /// Tool results replaced by a preview of an artifact.
    pub offloaded_results: usize,
    /// Of `offloaded_results`, those whose preview the session had made already (an
    /// agent loop sends its earlier results again every turn): found by a content hash,
    /// not made again.
    #[serde(skip_serializing_if = "is_zero")]
    pub reused_previews: usize,
    /// Of `cleared_results`, those cleared with a stub naming no artifact because the
    /// request's references would exceed
    /// [`ContextPolicy::max_artifact_bytes`](crate::ContextPolicy::max_artifact_bytes), or
    /// because the store could not keep their artifact: the stub says so, and no preview
    /// or stub points at nothing.
    #[serde(skip_serializing_if = "is_zero")]
    pub unkept_artifacts: usize,
    /// `max_context_tokens - reserve_tokens`, in estimated tokens: divided by the
    /// [calibration](crate::calibration) factor when the layer calibrates.
    pub prompt_allowance: usize,
    /// Messages a provider's compaction block stands in for (those before the newest
    /// one the request carries), left out: the provider drops them unseen, so they are
    /// neither counted nor sent. Not in `removed_messages`: the stack chose nothing.
    #[serde(skip_serializing_if = "is_zero")]
    pub compacted_messages: usize,
    /// Whole user turns removed.
    pub pruned_turns: usize,
    /// Tool rounds (a call and all its results) removed from turns that were kept.
    pub dropped_rounds: usize,
    /// Tool results added for calls that had none, plus results dropped because they
    /// answered no call (see [`pairing`](crate::fit::pairing)), before planning. The
    /// added ones are counted in `after_tokens`, the dropped ones are not in
    /// `removed_messages`.
    #[serde(skip_serializing_if = "is_zero")]
    pub repaired: usize,
    /// Where the history now starts: the index, in the request as received, of the first
    /// message kept after the leading system messages (`None` when nothing was pruned).
    /// A cache-aware policy keeps this cut still across turns.
    #[serde(skip_serializing_if = "Option::is_none", alias = "cut")]
    pub history_start: Option<usize>,
    /// The cut is the session's previous one, kept because the rest still fits
    /// (cache-aware pruning, see [`CutStore`](crate::CutStore)): the history starts where it started
    /// on the last request, so the provider's cached prefix can be read.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut_reused: bool,
    /// Where the history starts (the cut) differs from the session's previous request:
    /// everything the provider cached after the old start is written again. Set by
    /// [`ContextPolicyLayer`](crate::ContextPolicyLayer), which remembers each session's
    /// cuts; a session's first request that prunes counts as a move.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut_moved: bool,
    /// The cleared region (old tool results replaced by stubs) ends elsewhere than on the
    /// session's previous request, so the transcript changed from there on. See
    /// [`ContextPolicy::clear_at_least_tokens`](crate::ContextPolicy::clear_at_least_tokens).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub clear_moved: bool,
    /// The session the stack used for a request that named none, inferred from its
    /// stable head ([`ChatRequest::inferred_session`](crate::ChatRequest::inferred_session)):
    /// artifacts of such a request are kept under it, so an agent answering
    /// `read_context_artifact` itself reads them with this session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inferred_session: Option<String>,
    /// Messages the stack added on its own when it answered `read_context_artifact` calls
    /// itself (auto-resolve): the model's calls and their results, in order. An agent loop
    /// appends them to its transcript before the response's message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resolved_messages: Vec<crate::model::Message>,
    /// The response was not produced by a provider call made for this request: it came
    /// from the memo, or from an identical request in flight at the same time. Its `usage`
    /// is the usage of the call that produced it, so cost accounting should skip it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub memo_hit: bool,
    /// Messages of the request folded into a summary block (by the
    /// [`summarize`](crate::summarize) layer), whether freshly or from its cache.
    #[serde(skip_serializing_if = "is_zero")]
    pub folded_messages: usize,
    /// Requests made to the summarizer for this request (0 when a cached summary served).
    #[serde(skip_serializing_if = "is_zero")]
    pub summary_calls: usize,
    /// Signed thinking blocks left out, from the start of the history, because what came
    /// before them changed on a model that binds thinking to its prefix (see
    /// [`thinking`](crate::thinking)).
    #[serde(skip_serializing_if = "is_zero")]
    pub thinking_dropped: usize,
    /// Who edited the request's context ([`Executor`](crate::Executor): `local`,
    /// `delegate` or `off`, never `auto`); `None` from a layer that does not choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<crate::Executor>,
    /// What the provider reported it edited, once its response came
    /// ([`AppliedEdits`](crate::AppliedEdits)); `None` when it reported nothing (a
    /// stream's is known only at its end, after its headers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_edits: Option<crate::AppliedEdits>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl PreparationReport {
    /// Whether anything was removed, cleared, offloaded or folded.
    pub fn changed(&self) -> bool {
        self.repaired > 0
            || self.removed_messages > 0
            || self.cleared_results > 0
            || self.offloaded_results > 0
            || self.folded_messages > 0
    }

    /// A report that says only "served from the memo".
    pub fn memo_hit() -> Self {
        Self {
            memo_hit: true,
            ..Self::default()
        }
    }

    /// Folds the report of an inner layer into this (outer) one: the outer layer saw the
    /// request first, so its `before_tokens` stand; the inner one saw it last, so its
    /// `after_tokens` stand; counts add up.
    /// A memo hit anywhere inside makes the whole response a memo hit.
    pub fn absorb_inner(&mut self, inner: &PreparationReport) {
        self.memo_hit |= inner.memo_hit;
        // A memo hit alone is no preparation: it must not reset `after_tokens`.
        let nothing = PreparationReport {
            memo_hit: inner.memo_hit,
            ..PreparationReport::default()
        };
        if *inner == nothing {
            return;
        }
        self.after_tokens = inner.after_tokens;
        self.add_counts(inner);
        // Only the layer that answers the model's reads fills this; an outer layer (the
        // summarize layer) must hand it on, or the agent loop never sees those messages.
        if self.resolved_messages.is_empty() {
            self.resolved_messages = inner.resolved_messages.clone();
        }
        if self.inferred_session.is_none() {
            self.inferred_session.clone_from(&inner.inferred_session);
        }
        if self.history_start.is_none() {
            self.history_start = inner.history_start;
        }
        if self.prompt_allowance == 0 {
            self.prompt_allowance = inner.prompt_allowance;
        }
        self.executor = self.executor.or(inner.executor);
        self.provider_edits = self.provider_edits.or(inner.provider_edits);
    }

    /// Adds `other`'s counts of what was done (removed, cleared, offloaded, folded, …) and
    /// its cut flags to this report's.
    pub(crate) fn add_counts(&mut self, other: &PreparationReport) {
        self.removed_messages += other.removed_messages;
        self.compacted_messages += other.compacted_messages;
        self.repaired += other.repaired;
        self.cleared_results += other.cleared_results;
        self.offloaded_results += other.offloaded_results;
        self.reused_previews += other.reused_previews;
        self.unkept_artifacts += other.unkept_artifacts;
        self.pruned_turns += other.pruned_turns;
        self.dropped_rounds += other.dropped_rounds;
        self.folded_messages += other.folded_messages;
        self.summary_calls += other.summary_calls;
        self.cut_reused |= other.cut_reused;
        self.cut_moved |= other.cut_moved;
        self.clear_moved |= other.clear_moved;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_hit_inside_keeps_the_outer_figures() {
        let mut outer = PreparationReport {
            before_tokens: 900,
            after_tokens: 400,
            removed_messages: 6,
            prompt_allowance: 500,
            ..PreparationReport::default()
        };
        outer.absorb_inner(&PreparationReport::memo_hit());
        assert!(outer.memo_hit);
        assert_eq!(outer.after_tokens, 400);
        assert_eq!(outer.removed_messages, 6);
    }

    #[test]
    fn memo_hit_is_absent_from_json_unless_true() {
        let json = serde_json::to_value(PreparationReport::default()).unwrap();
        assert!(json.get("memo_hit").is_none());
        let json = serde_json::to_value(PreparationReport::memo_hit()).unwrap();
        assert_eq!(json["memo_hit"], true);
        let back: PreparationReport = serde_json::from_value(json).unwrap();
        assert!(back.memo_hit);
    }
}
