//! Keeping a summary block bounded however many folds it holds: the oldest artifact ids
//! move into an archive artifact that chains to the one before it, and a block over its
//! budget loses its oldest facts and fallback lines, or is not applied.

use serde::{Deserialize, Serialize};

use super::config::SummarizeConfig;
use crate::artifact::{Artifact, ArtifactStore, artifact_id};
use crate::model::Scope;
use crate::model::SummaryBlock;
use crate::tokens::{char_count, estimate_one, truncate_chars};

/// What an archive artifact holds: the ids of folds that no longer fit in the block's own
/// list, and the archive before it. Its text is this as JSON, with
/// `"context_summary_archive": true`, so the model reading it knows what it is.
///
/// ```
/// use llm_context_layers::summarize::SummaryArchive;
///
/// let archive = SummaryArchive::new(vec!["art_1".into(), "art_2".into()], Some("art_0".into()));
/// let text = archive.to_text();
/// assert!(text.contains("\"context_summary_archive\":true"));
/// assert_eq!(SummaryArchive::from_text(&text), Some(archive));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SummaryArchive {
    /// Always true: marks the text as an archive.
    pub context_summary_archive: bool,
    /// Artifact ids of folded spans, oldest first.
    pub artifacts: Vec<String>,
    /// The archive listing the folds before these, if any.
    pub earlier: Option<String>,
}

impl SummaryArchive {
    /// An archive of `artifacts` (oldest first) after the archive `earlier`.
    pub fn new(artifacts: Vec<String>, earlier: Option<String>) -> Self {
        Self {
            context_summary_archive: true,
            artifacts,
            earlier,
        }
    }

    /// The artifact text: one line of JSON.
    pub fn to_text(&self) -> String {
        // Strings and a bool: serialising cannot fail.
        serde_json::to_string(self).expect("an archive serialises")
    }

    /// The archive an artifact's text holds, or `None` when it is not one.
    pub fn from_text(text: &str) -> Option<Self> {
        serde_json::from_str::<Self>(text)
            .ok()
            .filter(|a| a.context_summary_archive)
    }
}

/// When `block` names more than `max_artifacts` spans, stores the oldest ones (all but
/// the newest half) in a new archive artifact chained to the block's previous archive,
/// and names that instead. When the store fails the ids stay in the block (logged): the
/// token budget still bounds it, and nothing it names is dropped.
pub(crate) async fn archive_overflow(
    store: &dyn ArtifactStore,
    scope: &Scope,
    session: &str,
    block: &mut SummaryBlock,
    config: &SummarizeConfig,
) {
    let max = config.max_artifacts.max(1);
    if block.artifacts.len() <= max {
        return;
    }
    // Half the list stays, so an archive is written every `max / 2 + 1` folds rather
    // than on every fold; each archive is written once and never rewritten.
    let keep = max / 2;
    let moved = block.artifacts.len() - keep;
    let archive = SummaryArchive::new(block.artifacts[..moved].to_vec(), block.archive.clone());
    let text = archive.to_text();
    let id = artifact_id(scope, session, &text);
    // An archive is never cut: a cut list would lose the ids past the cut.
    let artifact = Artifact::new(&text, usize::MAX);
    match store.put(scope, session, &id, artifact).await {
        Ok(()) => {
            block.artifacts.drain(..moved);
            block.archive = Some(id);
        }
        Err(e) => tracing::warn!(
            event = "summary_archive_not_stored",
            error = %e,
            scope = %scope.key(),
            session = %session,
            "could not store a summary archive; the block keeps naming its folds itself"
        ),
    }
}

/// The most tokens the summarizer's own part of a block may cost: three quarters of the
/// block's budget, leaving the rest for the facts found without it and the artifact ids.
pub(crate) fn model_budget(config: &SummarizeConfig) -> usize {
    config.summary_budget() / 4 * 3
}

/// The tokens `block` costs as the message it is sent as.
pub(crate) fn block_tokens(block: &SummaryBlock) -> usize {
    estimate_one(&block.to_message())
}

/// Brings `block` within `budget` tokens by dropping its oldest facts, then the oldest
/// lines of its fallback (both are in the folded spans' artifacts). `Err` with the
/// tokens it still costs when that is not enough: the model-written part alone is over.
pub(crate) fn fit_block(block: &mut SummaryBlock, budget: usize) -> Result<(), usize> {
    let mut tokens = block_tokens(block);
    // Each pass frees at least the characters the estimate is over by (a string's JSON
    // is never shorter than it), so it ends in a pass or two.
    while tokens > budget && !block.facts.is_empty() {
        let need = (tokens - budget) * 4;
        let (mut freed, mut n) = (0, 0);
        while n < block.facts.len() && freed < need {
            freed += char_count(&block.facts[n]) + 3; // quotes and comma
            n += 1;
        }
        block.facts.drain(..n);
        tokens = block_tokens(block);
    }
    while tokens > budget && !block.fallback.is_empty() {
        let need = (tokens - budget) * 4;
        let cut = truncate_chars(&block.fallback, need).len();
        // Whole lines: past the cut, up to the next line's start.
        let rest = match block.fallback[cut..].find('\n') {
            Some(nl) => block.fallback[cut + nl + 1..].to_owned(),
            None => String::new(),
        };
        block.fallback = rest;
        tokens = block_tokens(block);
    }
    if tokens <= budget {
        Ok(())
    } else {
        Err(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_go_oldest_first_then_fallback_lines() {
        let mut block = SummaryBlock {
            narrative: "n".into(),
            facts: (0..100)
                .map(|i| format!("fact-{i:03}-{}", "x".repeat(20)))
                .collect(),
            fallback: (0..50)
                .map(|i| format!("line {i:02} {}", "y".repeat(30)))
                .collect::<Vec<_>>()
                .join("\n"),
            ..SummaryBlock::default()
        };
        let full = block_tokens(&block);
        fit_block(&mut block, full - 100).unwrap();
        assert!(block_tokens(&block) <= full - 100);
        assert_eq!(block.facts.last().map(|f| &f[..8]), Some("fact-099"));
        assert_eq!(block.fallback.lines().count(), 50, "facts were enough");
        fit_block(&mut block, 100).unwrap();
        assert!(block.facts.is_empty());
        assert!(block.fallback.lines().all(|l| l.starts_with("line ")));
        assert!(block_tokens(&block) <= 100);
        block.narrative = "z".repeat(2_000);
        assert!(fit_block(&mut block, 100).is_err());
    }
}
