//! The durable context record: what is checkpointed after every turn.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::ChatRequest;
use crate::model::Message;
use crate::model::PrefixContext;
use crate::store::{StoreError, StoreErrorKind};
use crate::summarize::{SummaryBlock, fold_start, is_summary_message};
use crate::tokens::estimate_message_tokens;
use crate::working::{MutationJournal, WorkingContext};

/// One context as a [`ContextStore`](super::ContextStore) keeps it: the prefix, the
/// transcript tail, the summary block of everything folded so far, the scratchpad, the
/// journal entries, a token estimate, and the version the store last committed.
///
/// ```
/// use llm_context_layers::durable::ContextRecord;
/// use llm_context_layers::{Message, PrefixContext, WorkingContext};
///
/// let mut ctx = WorkingContext::new()
///     .with_prefix(PrefixContext::new("You are a careful research assistant."));
/// ctx.append(Message::user("What changed in the pricing table?")).note("ticket", "ENG-4412");
///
/// let record = ContextRecord::from_working(&ctx);
/// assert_eq!(record.version, 0);              // never committed yet
/// assert_eq!(record.token_estimate, 25); // the seed's one-system-one-user context
/// let back = record.to_working();
/// assert_eq!(back.messages(), ctx.messages());
/// assert_eq!(back.get("ticket"), ctx.get("ticket"));
/// ```
///
/// The summary block is kept structured here and rendered, when the context is sent,
/// as a system message right after the leading system messages of the tail.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ContextRecord {
    /// The version the store last committed (0: never). Kept by the store, not in the
    /// encoded record: a write against version `v` commits `v + 1`.
    #[serde(skip)]
    pub version: u64,
    /// The frozen prefix.
    pub prefix: Arc<PrefixContext>,
    /// The transcript tail, without the summary block.
    pub messages: Vec<Message>,
    /// Everything folded so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<SummaryBlock>,
    /// The scratchpad, ordered by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub scratchpad: BTreeMap<String, Value>,
    /// The journal entries, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub journal: Vec<Value>,
    /// The estimated tokens of the context as sent (prefix, summary block, tail), as of
    /// the last [`refresh_estimate`](Self::refresh_estimate).
    pub token_estimate: usize,
}

impl ContextRecord {
    /// An empty record, never committed.
    pub fn new() -> Self {
        Self::default()
    }

    /// A record of `ctx`: its prefix, tail, scratchpad and journal entries. A summary
    /// block in the tail's leading system messages becomes the record's `summary`.
    pub fn from_working(ctx: &WorkingContext) -> Self {
        let messages = ctx.messages();
        let head = fold_start(messages);
        let summary = messages[..head]
            .iter()
            .rev()
            .find_map(SummaryBlock::from_message);
        let mut record = Self {
            version: 0,
            prefix: ctx.prefix().clone(),
            messages: messages
                .iter()
                .enumerate()
                .filter(|(i, m)| *i >= head || !is_summary_message(m))
                .map(|(_, m)| m.clone())
                .collect(),
            summary,
            scratchpad: ctx.scratchpad().clone(),
            journal: ctx.journal().view().to_vec(),
            token_estimate: 0,
        };
        record.refresh_estimate();
        record
    }

    /// A live context again: the tail as sent (summary block included), the scratchpad,
    /// and the journal entries as committed.
    pub fn to_working(&self) -> WorkingContext {
        let mut ctx = WorkingContext::new()
            .with_prefix(self.prefix.clone())
            .with_messages(self.assembled_tail())
            .with_journal(MutationJournal::from_snapshot(self.journal.iter().cloned()));
        ctx.update_scratchpad(self.scratchpad.iter().map(|(k, v)| (k.clone(), v.clone())));
        ctx
    }

    /// The tail as sent: the leading system messages, the summary block, the rest.
    pub fn assembled_tail(&self) -> Vec<Message> {
        let head = fold_start(&self.messages);
        let mut out = Vec::with_capacity(self.messages.len() + 1);
        out.extend_from_slice(&self.messages[..head]);
        out.extend(self.summary.as_ref().map(SummaryBlock::to_message));
        out.extend_from_slice(&self.messages[head..]);
        out
    }

    /// A request for `model` with the prefix and [`assembled_tail`](Self::assembled_tail).
    pub fn to_request(&self, model: impl Into<String>) -> ChatRequest {
        let mut request = ChatRequest::new(model, self.assembled_tail());
        if !self.prefix.is_empty() {
            request = request.with_prefix(self.prefix.clone());
        }
        request
    }

    /// The estimated tokens of the context as sent.
    pub fn estimate_tokens(&self) -> usize {
        self.prefix.estimated_tokens()
            + self
                .summary
                .as_ref()
                .map_or(0, |s| estimate_message_tokens(&[s.to_message()]))
            + estimate_message_tokens(&self.messages)
    }

    /// Sets `token_estimate` to [`estimate_tokens`](Self::estimate_tokens).
    pub fn refresh_estimate(&mut self) -> &mut Self {
        self.token_estimate = self.estimate_tokens();
        self
    }

    /// The record as stored: JSON, without the version.
    pub fn encode(&self) -> Vec<u8> {
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_vec(self).expect("context record serialises")
    }

    /// A record read back from [`encode`](Self::encode)'s bytes, at `version`.
    pub fn decode(bytes: &[u8], version: u64) -> Result<Self, StoreError> {
        let mut record: Self = serde_json::from_slice(bytes).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Corrupt,
                format!("a context record (version {version}) does not decode: {e}"),
            )
        })?;
        record.version = version;
        Ok(record)
    }
}
