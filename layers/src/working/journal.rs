//! The journal axis: an append-only log with a watermark.
//!
//! ```
//! use llm_context_layers::MutationJournal;
//! use serde_json::json;
//!
//! let mut journal = MutationJournal::new();
//! journal.record(json!({"kind": "row_written", "id": 1, "agent_id": "enricher-a"}));
//! journal.record(json!({"kind": "row_written", "id": 2, "agent_id": "enricher-a"}));
//! assert_eq!(journal.diff().len(), 2);
//!
//! journal.mark_committed(); // the parent absorbed them
//! journal.record(json!({"kind": "row_written", "id": 3, "agent_id": "enricher-a"}));
//! assert_eq!(journal.diff().len(), 1); // only the new one ships
//! assert_eq!(journal.view().len(), 3); // the history is intact
//! ```
//!
//! The journal exists for one job: letting a child stream its progress upward without
//! re-shipping what the parent already absorbed. Entries are never rewritten, so
//! attribution stamped on an entry (an agent id, say) survives any chain of merges.

use serde::{Deserialize, Serialize};

/// An append-only log of mutations with a commit watermark.
///
/// `T` is the project's own mutation type — typically an enum of domain mutations, each
/// stamped with the agent that made it. Entries before the watermark have been absorbed
/// by whoever consumes this journal; [`diff`](Self::diff) is everything after it.
///
/// The journal has no idempotency of its own: [`apply`](Self::apply) trusts the caller's
/// acknowledgement protocol, so applying the same diff twice records it twice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(
    try_from = "JournalRepr<T>",
    bound(deserialize = "T: Deserialize<'de>")
)]
pub struct MutationJournal<T> {
    entries: Vec<T>,
    committed: usize,
}

/// The wire form, checked on the way in so a hostile document cannot put the watermark
/// past the end of the log.
#[derive(Deserialize)]
struct JournalRepr<T> {
    entries: Vec<T>,
    committed: usize,
}

impl<T> TryFrom<JournalRepr<T>> for MutationJournal<T> {
    type Error = String;

    fn try_from(repr: JournalRepr<T>) -> Result<Self, Self::Error> {
        if repr.committed > repr.entries.len() {
            return Err(format!(
                "journal watermark {} is past its {} entries",
                repr.committed,
                repr.entries.len()
            ));
        }
        Ok(Self {
            entries: repr.entries,
            committed: repr.committed,
        })
    }
}

impl<T> Default for MutationJournal<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> MutationJournal<T> {
    /// An empty journal.
    pub fn new() -> Self {
        Self {
            entries: Vec::new(),
            committed: 0,
        }
    }

    /// A journal rehydrated from entries that were already absorbed: it starts fully
    /// committed, so nothing restored is shipped again.
    pub fn from_snapshot(entries: impl IntoIterator<Item = T>) -> Self {
        let entries: Vec<T> = entries.into_iter().collect();
        let committed = entries.len();
        Self { entries, committed }
    }

    /// Appends one entry, uncommitted.
    pub fn record(&mut self, entry: T) -> &mut Self {
        self.entries.push(entry);
        self
    }

    /// Appends entries received from elsewhere (a child's diff), uncommitted and
    /// unchanged.
    pub fn apply(&mut self, entries: impl IntoIterator<Item = T>) -> &mut Self {
        self.entries.extend(entries);
        self
    }

    /// The entries recorded since the last [`mark_committed`](Self::mark_committed).
    pub fn diff(&self) -> &[T] {
        &self.entries[self.committed..]
    }

    /// Moves the watermark to the end: everything recorded so far has been absorbed.
    pub fn mark_committed(&mut self) -> &mut Self {
        self.committed = self.entries.len();
        self
    }

    /// The whole history, committed or not, in the order it was recorded.
    pub fn view(&self) -> &[T] {
        &self.entries
    }

    /// Whether anything was recorded since the last commit.
    pub fn has_uncommitted(&self) -> bool {
        self.committed < self.entries.len()
    }

    /// How many entries the journal holds.
    pub fn size(&self) -> usize {
        self.entries.len()
    }

    /// Whether the journal holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries have been committed (the watermark).
    pub fn committed(&self) -> usize {
        self.committed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn seed_journal_counts() {
        // Every expected value is the seed's printed output.
        let mut journal: MutationJournal<Value> = MutationJournal::new();
        journal.record(json!({"kind": "row_written", "id": 1, "agent_id": "enricher-a"}));
        journal.record(json!({"kind": "row_written", "id": 2, "agent_id": "enricher-a"}));
        assert!(journal.has_uncommitted());
        assert_eq!(journal.size(), 2);
        assert_eq!(journal.diff().len(), 2);

        journal.mark_committed();
        assert!(!journal.has_uncommitted());

        journal.record(json!({"kind": "row_written", "id": 3, "agent_id": "enricher-a"}));
        assert_eq!(journal.diff().len(), 1);
        assert_eq!(journal.view().len(), 3);

        let seeded = MutationJournal::from_snapshot([json!({"kind": "restored"})]);
        assert!(!seeded.has_uncommitted());
        assert_eq!(seeded.size(), 1);
    }

    #[test]
    fn apply_appends_unchanged_and_uncommitted() {
        let mut parent = MutationJournal::from_snapshot(["p1"]);
        parent.apply(["c1", "c2"]);
        assert_eq!(parent.view(), ["p1", "c1", "c2"]);
        assert_eq!(parent.diff(), ["c1", "c2"]);
        // No idempotency: the caller's ack protocol owns that.
        parent.apply(["c1"]);
        assert_eq!(parent.size(), 4);
    }

    #[test]
    fn serde_round_trip_keeps_the_watermark() {
        let mut journal = MutationJournal::from_snapshot([1, 2]);
        journal.record(3);
        let text = serde_json::to_string(&journal).unwrap();
        let back: MutationJournal<i32> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, journal);
        assert_eq!(back.diff(), [3]);
    }

    #[test]
    fn a_watermark_past_the_end_is_rejected() {
        let err = serde_json::from_str::<MutationJournal<i32>>(r#"{"entries":[1],"committed":2}"#)
            .unwrap_err();
        assert!(err.to_string().contains("past its 1 entries"), "{err}");
    }
}
