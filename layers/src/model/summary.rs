//! The summary block: what a fold leaves in place of the messages it took.

use serde::{Deserialize, Serialize};

use super::{Message, Role};

/// The `name` of the system message that carries a summary block.
pub const SUMMARY_NAME: &str = "context_summary";

/// The first line of every rendered summary block.
pub const SUMMARY_MARKER: &str = "[context summary]";

/// The structured summary of everything folded so far, plus what a summarizer cannot
/// lose: identifiers found without the model, the plain-text fallback of folds whose
/// summarizer failed, and the artifacts holding the folded text.
///
/// ```
/// use llm_context_layers::summarize::SummaryBlock;
///
/// let mut block = SummaryBlock::default();
/// block.goals.push("find why checkout fails".into());
/// block.facts.push("/var/log/orders.log".into());
/// let message = block.to_message();
/// assert_eq!(message.name(), Some("context_summary"));
/// assert!(message.text().starts_with("[context summary]"));
/// assert_eq!(SummaryBlock::from_message(&message), Some(block));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SummaryBlock {
    /// What the user and the agent are trying to achieve.
    pub goals: Vec<String>,
    /// What was decided, and why.
    pub decisions: Vec<String>,
    /// Open questions and unfinished work.
    pub open: Vec<String>,
    /// Facts worth keeping: the model's, and identifiers (paths, URLs, ids, numbers with
    /// units) extracted from the folded text without it.
    pub facts: Vec<String>,
    /// The story so far, in prose.
    pub narrative: String,
    /// Plain-text excerpts of folds whose summarizer failed, oldest first; a new one is
    /// added, never written over an earlier one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fallback: String,
    /// Artifact ids holding the folded messages of the newest folds (one per fold,
    /// oldest first, at most `max_artifacts`), readable with `read_context_artifact`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// The artifact listing the folds older than `artifacts`: JSON
    /// `{"context_summary_archive": true, "artifacts": [ids, oldest first], "earlier": id
    /// or null}`, where `earlier` is the archive before it. `None` until `artifacts`
    /// first overflows. Following it reaches every fold, so the block stays bounded and
    /// nothing folded is lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// Messages folded into this block so far.
    pub folded_messages: usize,
}

impl SummaryBlock {
    /// Whether the model-written part (goals, decisions, open, facts, narrative) says
    /// nothing. Such a summary is never applied: it would delete history.
    pub fn is_empty_summary(&self) -> bool {
        self.goals.iter().all(|s| s.trim().is_empty())
            && self.decisions.iter().all(|s| s.trim().is_empty())
            && self.open.iter().all(|s| s.trim().is_empty())
            && self.facts.iter().all(|s| s.trim().is_empty())
            && self.narrative.trim().is_empty()
    }

    /// The block as the system message that sits right after the prefix: a marker line
    /// saying what it is, then the block as JSON. The same block always renders to the
    /// same bytes.
    pub fn to_message(&self) -> Message {
        let mut text = String::from(SUMMARY_MARKER);
        text.push_str(&format!(
            " {} earlier messages of this conversation are folded into the summary below.",
            self.folded_messages
        ));
        if !self.artifacts.is_empty() {
            text.push_str(
                " Their full text is kept: call read_context_artifact with an id from \
                 \"artifacts\" to read it.",
            );
        }
        if self.archive.is_some() {
            text.push_str(
                " Older folds are listed in the artifact named by \"archive\" (read it \
                 the same way).",
            );
        }
        text.push('\n');
        // A struct of strings and vectors: serialising cannot fail.
        text.push_str(&serde_json::to_string(self).expect("summary serialises"));
        Message::system(text).with_name(SUMMARY_NAME)
    }

    /// The block a message written by [`to_message`](Self::to_message) carries.
    pub fn from_message(message: &Message) -> Option<Self> {
        if !is_summary_message(message) {
            return None;
        }
        let text = message.text();
        let (_, json) = text.split_once('\n')?;
        serde_json::from_str(json).ok()
    }
}

/// Whether `message` is a summary block written by this crate.
pub fn is_summary_message(message: &Message) -> bool {
    message.role == Role::System
        && message.name() == Some(SUMMARY_NAME)
        && message.text().starts_with(SUMMARY_MARKER)
}
