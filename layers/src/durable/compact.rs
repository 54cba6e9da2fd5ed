//! The explicit `compact` of a durable record: plan → summarize → apply, refusing on
//! version drift.

use std::ops::Range;
use std::sync::Arc;

use tower::Service;

use super::context_store::ContextStore;
use super::record::ContextRecord;
use crate::BoxError;
use crate::artifact::ArtifactStore;
use crate::artifact::LocalArtifactStore;
use crate::hash::StableHasher;
use crate::model::Message;
use crate::model::Scope;
use crate::model::{ChatRequest, ChatResponse};
use crate::policy::PolicyError;
use crate::store::{StoreError, StoreErrorKind};
use crate::summarize::{
    SummarizeConfig, Summarized, SummaryBlock, SummaryCache, archive_overflow, ask, fit_block,
    fold_block, fold_start, model_budget, plan_fold, store_span, summary_request,
};

/// Why a compaction did not apply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The record changed between the plan and the apply: another writer committed, or
    /// the folded messages are no longer the same. Nothing was written; plan again.
    #[error(
        "context changed since the compaction was planned (planned on version {planned}, \
         now {current}); nothing was written, plan again"
    )]
    VersionDrift {
        /// The version the plan was made on.
        planned: u64,
        /// The version found at apply time.
        current: u64,
    },
    /// The summarizer returned a valid but empty summary: folding it would delete
    /// history, so nothing was folded.
    #[error("the summarizer returned an empty summary; nothing was folded, the history is kept")]
    EmptySummary,
    /// The new summary block is over the summary budget
    /// ([`SummarizeConfig::summary_budget`]) even without its facts and fallback: it
    /// would leave no room for the turns the record keeps, so nothing was folded.
    #[error(
        "the summary block would take {tokens} tokens, over its budget of {budget}; \
         nothing was folded, the history is kept"
    )]
    SummaryTooLarge {
        /// What the block would cost.
        tokens: usize,
        /// The budget.
        budget: usize,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A planned fold of one record.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CompactionPlan {
    /// The version of the record the plan was made on.
    pub base_version: u64,
    /// The folded messages, as indices of `record.messages`.
    pub fold: Range<usize>,
    /// A copy of the folded messages.
    pub span: Vec<Message>,
    /// The summary the fold adds to.
    pub previous: Option<SummaryBlock>,
    key: u128,
}

/// What the summarizer made of a plan.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Summarization {
    /// The new summary block; `None` when the summary was empty (nothing may be folded).
    pub block: Option<SummaryBlock>,
    /// Whether the block holds a plain-text fallback for this fold (the summarizer
    /// failed).
    pub fallback: bool,
    /// Requests made to the summarizer (0: the summary came from the cache).
    pub calls: usize,
    /// The tokens of a block that stayed over the summary budget; `block` is then
    /// `None` and [`Compactor::apply`] refuses.
    pub oversized: Option<usize>,
}

/// What a compaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactReport {
    /// The version committed.
    pub version: u64,
    /// Messages folded.
    pub folded_messages: usize,
    /// Requests made to the summarizer.
    pub summary_calls: usize,
    /// Whether the fold fell back to plain text.
    pub fallback: bool,
    /// The record's estimate before and after.
    pub before_tokens: usize,
    /// The record's estimate after.
    pub after_tokens: usize,
}

/// Compacts durable context records with a summarizer model.
///
/// ```
/// use std::sync::Arc;
/// use llm_context_layers::durable::{Compactor, ContextRecord, ContextStore, LocalContextStore};
/// use llm_context_layers::mock::{MockModel, MockReply};
/// use llm_context_layers::summarize::SummarizeConfig;
/// use llm_context_layers::{Message, Scope};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = LocalContextStore::new();
/// let scope = Scope::org("acme");
/// let mut record = ContextRecord::new();
/// for turn in 0..10 {
///     record.messages.push(Message::user(format!("question {turn}")));
///     record.messages.push(Message::assistant(format!("answer {turn}")));
/// }
/// record.version = store.save(&scope, "root", &record).await?;
///
/// let mut model = MockModel::scripted([MockReply::text(
///     r#"{"goals":["answer questions"],"decisions":[],"open":[],"facts":[],"narrative":"Ten questions answered."}"#,
/// )]);
/// let compactor = Compactor::new(SummarizeConfig::new(100_000).with_keep_last(4))?;
/// // Asked explicitly: folds even under the threshold.
/// let report = compactor.compact(&store, &scope, "root", &mut model, "mock", true).await?.unwrap();
/// assert_eq!((report.version, report.folded_messages, report.summary_calls), (2, 16, 1));
///
/// let record = store.load(&scope, "root").await?.unwrap();
/// assert_eq!(record.messages.len(), 4);
/// assert_eq!(record.summary.unwrap().narrative, "Ten questions answered.");
/// # Ok(()) }
/// ```
///
/// [`compact`](Self::compact) is the whole sequence; [`plan`](Self::plan),
/// [`summarize`](Self::summarize) and [`apply`](Self::apply) are its steps, for a runtime
/// that holds the record itself. The rules are the [`summarize`](crate::summarize)
/// layer's: the same fold points, validation, fallback and facts.
#[derive(Clone)]
pub struct Compactor {
    config: SummarizeConfig,
    store: Arc<dyn ArtifactStore>,
    cache: SummaryCache,
}

impl std::fmt::Debug for Compactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compactor")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Compactor {
    /// A compactor with `config`, an in-memory artifact store and summary cache; fails
    /// when the config does not validate.
    pub fn new(config: SummarizeConfig) -> Result<Self, PolicyError> {
        config.validate()?;
        Ok(Self {
            config,
            store: Arc::new(LocalArtifactStore::default()),
            cache: SummaryCache::default(),
        })
    }

    /// Keeps folded spans and summary archives in `store` (per tenant, with the context
    /// id as the session, so requests for the record should carry that session). For a
    /// durable record, give it the durable backend's store (`SqliteStore`, or the Redis
    /// artifact store): the default in-memory one loses what the record names when the
    /// process ends.
    #[must_use]
    pub fn with_artifact_store(mut self, store: Arc<dyn ArtifactStore>) -> Self {
        self.store = store;
        self
    }

    /// Uses `cache` for summaries.
    #[must_use]
    pub fn with_cache(mut self, cache: SummaryCache) -> Self {
        self.cache = cache;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &SummarizeConfig {
        &self.config
    }

    /// Whether the record's estimate has reached `compact_at × window`.
    pub fn is_due(&self, record: &ContextRecord) -> bool {
        record.estimate_tokens() >= self.config.threshold()
    }

    /// The fold `keep_last` allows on `record`, or `None` when nothing can be folded.
    pub fn plan(&self, scope: &Scope, id: &str, record: &ContextRecord) -> Option<CompactionPlan> {
        let fold = plan_fold(&record.messages, self.config.keep_last)?;
        let span = record.messages[fold.clone()].to_vec();
        let mut h = StableHasher::new("llm-context/record-fold/v1");
        h.str(&scope.key());
        h.str(id);
        match &record.summary {
            Some(p) => h.json(&serde_json::to_value(p).unwrap_or_default()),
            None => h.u64(0),
        }
        h.messages(&span);
        Some(CompactionPlan {
            base_version: record.version,
            fold,
            span,
            previous: record.summary.clone(),
            key: h.finish(),
        })
    }

    /// Summarizes the plan's span with `summarizer` (asking for `model`), or takes the
    /// block from the cache; stores the span as an artifact.
    pub async fn summarize<S>(
        &self,
        summarizer: &mut S,
        model: &str,
        scope: &Scope,
        id: &str,
        plan: &CompactionPlan,
    ) -> Summarization
    where
        S: Service<ChatRequest, Response = ChatResponse>,
        S::Error: Into<BoxError>,
    {
        if let Some(block) = self.cache.get(plan.key) {
            return Summarization {
                block: Some(SummaryBlock::clone(&block)),
                fallback: false,
                calls: 0,
                oversized: None,
            };
        }
        let template = ChatRequest::new(model, Vec::new())
            .with_scope(scope.clone())
            .with_session(id);
        let request = summary_request(&template, plan.previous.as_ref(), &plan.span, &self.config);
        let (outcome, calls) = ask(summarizer, request, model_budget(&self.config)).await;
        if let Summarized::Failed(why) = &outcome {
            tracing::warn!(
                event = "summary_fallback",
                scope = %scope.key(),
                context = %id,
                reason = %why,
                "summary failed; folding a plain-text fallback"
            );
        }
        let artifact = match outcome {
            Summarized::Empty => None,
            _ => store_span(self.store.as_ref(), &template, &plan.span, &self.config).await,
        };
        let mut block = fold_block(
            plan.previous.as_ref(),
            &plan.span,
            &outcome,
            artifact,
            &self.config,
        );
        let mut oversized = None;
        if let Some(b) = block.as_mut() {
            archive_overflow(self.store.as_ref(), scope, id, b, &self.config).await;
            if let Err(tokens) = fit_block(b, self.config.summary_budget()) {
                tracing::warn!(
                    event = "summary_too_large",
                    scope = %scope.key(),
                    context = %id,
                    tokens,
                    budget = self.config.summary_budget(),
                    "the summary block is over its budget even without facts and fallback"
                );
                oversized = Some(tokens);
                block = None;
            }
        }
        if let Some(block) = &block {
            self.cache.put(plan.key, Arc::new(block.clone()));
        }
        Summarization {
            block,
            fallback: matches!(outcome, Summarized::Failed(_)),
            calls,
            oversized,
        }
    }

    /// The record with the plan's span folded into the summary. Refuses when `record`
    /// is not the one planned on (another version, or other messages in the span), and
    /// when the summary is empty or over its budget. The version is left for the store to
    /// bump.
    pub fn apply(
        &self,
        record: &ContextRecord,
        plan: &CompactionPlan,
        summarization: &Summarization,
    ) -> Result<ContextRecord, CompactError> {
        let drift = CompactError::VersionDrift {
            planned: plan.base_version,
            current: record.version,
        };
        if record.version != plan.base_version
            || record.messages.get(plan.fold.clone()) != Some(plan.span.as_slice())
            || record.summary != plan.previous
        {
            return Err(drift);
        }
        let block = match (&summarization.block, summarization.oversized) {
            (Some(block), _) => block.clone(),
            (None, Some(tokens)) => {
                return Err(CompactError::SummaryTooLarge {
                    tokens,
                    budget: self.config.summary_budget(),
                });
            }
            (None, None) => return Err(CompactError::EmptySummary),
        };
        let head = fold_start(&record.messages);
        debug_assert_eq!(head, plan.fold.start);
        // Field by field, so that the folded messages are never copied (and a new field
        // of the record cannot be forgotten here).
        let mut out = ContextRecord {
            version: record.version,
            prefix: record.prefix.clone(),
            messages: record.messages[..head]
                .iter()
                .chain(&record.messages[plan.fold.end..])
                .cloned()
                .collect(),
            summary: Some(block),
            scratchpad: record.scratchpad.clone(),
            journal: record.journal.clone(),
            token_estimate: 0,
        };
        out.refresh_estimate();
        Ok(out)
    }

    /// Loads the record `id`, and unless `force` is false and it is under the threshold,
    /// plans, summarizes with `summarizer`, applies and commits with compare-and-set.
    /// `Ok(None)`: no record, not due, or nothing that can be folded.
    pub async fn compact<S>(
        &self,
        store: &dyn ContextStore,
        scope: &Scope,
        id: &str,
        summarizer: &mut S,
        model: &str,
        force: bool,
    ) -> Result<Option<CompactReport>, CompactError>
    where
        S: Service<ChatRequest, Response = ChatResponse>,
        S::Error: Into<BoxError>,
    {
        let Some(record) = store.load(scope, id).await? else {
            return Ok(None);
        };
        if !force && !self.is_due(&record) {
            return Ok(None);
        }
        let Some(plan) = self.plan(scope, id, &record) else {
            return Ok(None);
        };
        let summarization = self.summarize(summarizer, model, scope, id, &plan).await;
        let compacted = self.apply(&record, &plan, &summarization)?;
        // The summarizer took time: the compare-and-set refuses if anyone committed since.
        let version = match store.save(scope, id, &compacted).await {
            Ok(v) => v,
            Err(e) if e.kind == StoreErrorKind::Conflict => {
                let current = store.load(scope, id).await?.map_or(0, |r| r.version);
                return Err(CompactError::VersionDrift {
                    planned: plan.base_version,
                    current,
                });
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Some(CompactReport {
            version,
            folded_messages: plan.span.len(),
            summary_calls: summarization.calls,
            fallback: summarization.fallback,
            before_tokens: record.estimate_tokens(),
            after_tokens: compacted.token_estimate,
        }))
    }
}
