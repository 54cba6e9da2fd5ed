//! When to fold, and how much the summarizer is shown.

use crate::executor::Executor;
use crate::policy::{DEFAULT_MAX_CONTEXT_TOKENS, PolicyError};

/// How summary compaction behaves. Build with [`SummarizeConfig::new`] and the `with_*`
/// setters; the layer and [`Compactor`](crate::durable::Compactor) validate it.
///
/// ```
/// use llm_context_layers::summarize::SummarizeConfig;
///
/// let config = SummarizeConfig::new(128_000).with_compact_at(0.8).with_keep_last(20);
/// assert_eq!(config.threshold(), 102_400);
/// config.validate().unwrap();
/// assert!(SummarizeConfig::new(1_000).with_compact_at(1.5).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SummarizeConfig {
    /// The model's context window, in tokens.
    pub window: usize,
    /// Fold when the estimate reaches this share of the window. Default 0.7.
    pub compact_at: f64,
    /// The newest messages kept verbatim, rounded up to whole turns. Default 12.
    pub keep_last: usize,
    /// Each folded message is clipped to this many characters in the summarizer's
    /// prompt. Default 2,000.
    pub clip_chars: usize,
    /// The folded span is shown to the summarizer in at most about this many
    /// characters: past it, each message is clipped shorter (never below 64). Default
    /// 48,000.
    pub span_chars: usize,
    /// The plain-text fallback of one failed fold, at most this many characters.
    /// Default 2,000.
    pub fallback_chars: usize,
    /// All fallbacks of a summary together, at most this many characters: a fold that
    /// fails when they are full adds one short line instead. Default 8,000.
    pub fallback_max_chars: usize,
    /// The most `facts` a summary keeps; past it the oldest go (the folded text is
    /// still in the artifacts). Default 200.
    pub max_facts: usize,
    /// The most characters of one folded span kept as an artifact. Default 1,000,000.
    pub artifact_max_chars: usize,
    /// The most folded-span artifact ids a summary names itself. Past it, the oldest
    /// go into one archive artifact that lists them and names the archive before it,
    /// so every fold stays readable while the block stays the same size. Default 8.
    pub max_artifacts: usize,
    /// The largest a summary block may be, as a share of the window. A summarizer
    /// answer over it is asked again; then the oldest facts and fallback lines go
    /// (their text is in the artifacts); a block still over it is not applied. Under
    /// `compact_at`. Default 0.25, so that a fold always leaves the kept turns and the
    /// current one room.
    pub max_summary_share: f64,
    /// Who folds: the stack ([`Executor::Local`]), the provider
    /// ([`Executor::Delegate`]: its compaction edit, triggered at
    /// [`threshold`](Self::threshold), with
    /// [`compaction_instructions`](Self::compaction_instructions)), or nobody
    /// ([`Executor::Off`]). Chosen per request as for the context policy
    /// ([`executor::choose`](crate::executor::choose)); `Auto` by default, which
    /// delegates on a model that binds thinking, with thinking in play.
    pub executor: Executor,
    /// What the provider's summarizer is told when the fold is delegated; `None`:
    /// [`COMPACTION_INSTRUCTIONS`](crate::executor::compaction::COMPACTION_INSTRUCTIONS).
    pub compaction_instructions: Option<String>,
}

impl Default for SummarizeConfig {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_CONTEXT_TOKENS)
    }
}

impl SummarizeConfig {
    /// The defaults for a model with a `window`-token context.
    pub fn new(window: usize) -> Self {
        Self {
            window,
            compact_at: 0.7,
            keep_last: 12,
            clip_chars: 2_000,
            span_chars: 48_000,
            fallback_chars: 2_000,
            fallback_max_chars: 8_000,
            max_facts: 200,
            artifact_max_chars: 1_000_000,
            max_artifacts: 8,
            max_summary_share: 0.25,
            executor: Executor::Auto,
            compaction_instructions: None,
        }
    }

    /// Sets `executor`.
    #[must_use]
    pub fn with_executor(mut self, executor: Executor) -> Self {
        self.executor = executor;
        self
    }

    /// Sets `compaction_instructions`.
    #[must_use]
    pub fn with_compaction_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.compaction_instructions = Some(instructions.into());
        self
    }

    /// What the provider's summarizer is told when the fold is delegated.
    pub fn provider_instructions(&self) -> &str {
        self.compaction_instructions
            .as_deref()
            .unwrap_or(crate::executor::compaction::COMPACTION_INSTRUCTIONS)
    }

    /// Sets `compact_at`.
    #[must_use]
    pub fn with_compact_at(mut self, share: f64) -> Self {
        self.compact_at = share;
        self
    }

    /// Sets `keep_last`.
    #[must_use]
    pub fn with_keep_last(mut self, messages: usize) -> Self {
        self.keep_last = messages;
        self
    }

    /// Sets `clip_chars`.
    #[must_use]
    pub fn with_clip_chars(mut self, chars: usize) -> Self {
        self.clip_chars = chars;
        self
    }

    /// Sets `span_chars`.
    #[must_use]
    pub fn with_span_chars(mut self, chars: usize) -> Self {
        self.span_chars = chars;
        self
    }

    /// Sets `fallback_chars` and `fallback_max_chars`.
    #[must_use]
    pub fn with_fallback_chars(mut self, per_fold: usize, total: usize) -> Self {
        self.fallback_chars = per_fold;
        self.fallback_max_chars = total;
        self
    }

    /// Sets `max_facts`.
    #[must_use]
    pub fn with_max_facts(mut self, facts: usize) -> Self {
        self.max_facts = facts;
        self
    }

    /// Sets `artifact_max_chars`.
    #[must_use]
    pub fn with_artifact_max_chars(mut self, chars: usize) -> Self {
        self.artifact_max_chars = chars;
        self
    }

    /// Sets `max_artifacts`.
    #[must_use]
    pub fn with_max_artifacts(mut self, ids: usize) -> Self {
        self.max_artifacts = ids;
        self
    }

    /// Sets `max_summary_share`.
    #[must_use]
    pub fn with_max_summary_share(mut self, share: f64) -> Self {
        self.max_summary_share = share;
        self
    }

    /// The most tokens a summary block may take: `max_summary_share × window`.
    pub fn summary_budget(&self) -> usize {
        (self.window as f64 * self.max_summary_share) as usize
    }

    /// The estimate, in tokens, at which a fold is due: `compact_at × window`.
    pub fn threshold(&self) -> usize {
        (self.window as f64 * self.compact_at) as usize
    }

    /// Fails, naming the field, when a value cannot work.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let invalid = |field: &'static str, reason: &str| PolicyError::Invalid {
            field,
            reason: reason.to_owned(),
        };
        if self.window == 0 {
            return Err(invalid("window", "must be greater than 0"));
        }
        if !(self.compact_at > 0.0 && self.compact_at <= 1.0) {
            return Err(invalid(
                "compact_at",
                &format!("must be in (0, 1], got {}", self.compact_at),
            ));
        }
        if self.max_artifacts == 0 {
            return Err(invalid("max_artifacts", "must be greater than 0"));
        }
        // Under `compact_at`, or a fold could never bring the request under the threshold.
        if !(self.max_summary_share > 0.0 && self.max_summary_share < self.compact_at) {
            return Err(invalid(
                "max_summary_share",
                &format!(
                    "must be in (0, compact_at = {}), got {}",
                    self.compact_at, self.max_summary_share
                ),
            ));
        }
        if self.clip_chars == 0 {
            return Err(invalid("clip_chars", "must be greater than 0"));
        }
        if self.fallback_chars == 0 || self.fallback_max_chars < self.fallback_chars {
            return Err(invalid(
                "fallback_max_chars",
                "must be at least fallback_chars, which must be greater than 0",
            ));
        }
        Ok(())
    }
}
