//! Calibrating the token estimate from what the provider counted.
//!
//! [`estimate_message_tokens`](crate::tokens::estimate_message_tokens) is a fixed formula:
//! within a few percent on English prose, short on compact JSON, code-heavy tool output and
//! non-Latin scripts. Every response says what the provider counted for the prompt, and
//! its report says what was estimated for the same prompt (`after_tokens`). A
//! [`Calibration`] keeps, per model, a running ratio of the two. Given to
//! [`ContextPolicyLayer::with_calibration`](crate::ContextPolicyLayer::with_calibration), it
//! learns from every response and plans each request to the allowance divided by that
//! ratio, so a model whose tokenizer counts 30% more than the estimate is not sent 30%
//! more than fits.
//!
//! ```
//! use llm_context_layers::calibration::Calibration;
//!
//! let calibration = Calibration::new();
//! assert_eq!(calibration.factor("gpt-5.4"), 1.0);
//! // The provider counted 1,300 prompt tokens where 1,000 were estimated.
//! calibration.observe_tokens("gpt-5.4", 1_000, 1_300);
//! assert_eq!(calibration.factor("gpt-5.4"), 1.3);
//! assert_eq!(calibration.calibrate("gpt-5.4", 13_000), 10_000);
//! // Other models are not affected.
//! assert_eq!(calibration.factor("claude-sonnet-4-6"), 1.0);
//! ```
//!
//! Calibration only ever tightens the budget (the factor is at least 1 and at most
//! [`Calibration::MAX_FACTOR`]): a provider that counts fewer tokens than the estimate
//! leaves the plan as it was. Prompts under [`Calibration::MIN_SAMPLE_TOKENS`] estimated
//! tokens and memo hits teach nothing, since a provider's fixed per-request tokens
//! dominate small prompts and a memo hit's usage is another request's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::PreparationReport;
use crate::model::{ChatResponse, Usage};

/// Per-model ratios of provider-counted to estimated prompt tokens; a cloneable handle.
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    ratios: Arc<Mutex<BTreeMap<String, f64>>>,
}

impl Calibration {
    /// The smallest estimate a response must have to teach anything.
    pub const MIN_SAMPLE_TOKENS: usize = 256;
    /// The largest factor applied, however far off the estimate has been.
    pub const MAX_FACTOR: f64 = 4.0;
    /// How much each new observation moves the running ratio.
    const WEIGHT: f64 = 0.25;

    /// An empty calibration: a factor of 1 for every model.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns from `response` to a request for `model`: the provider's prompt tokens
    /// (fresh, cache reads and cache writes) against the report's `after_tokens`.
    /// Returns whether it learned anything.
    pub fn observe(&self, model: &str, response: &ChatResponse) -> bool {
        self.observe_parts(model, &response.report, &response.usage)
    }

    /// [`observe`](Self::observe) from a response's parts.
    pub(crate) fn observe_parts(
        &self,
        model: &str,
        report: &PreparationReport,
        usage: &Usage,
    ) -> bool {
        if report.memo_hit {
            return false;
        }
        self.observe_tokens(model, report.after_tokens, usage.prompt_tokens())
    }

    /// Learns from one prompt: `estimated` tokens by the estimate, `counted` by the
    /// provider. Returns whether it learned anything.
    pub fn observe_tokens(&self, model: &str, estimated: usize, counted: u64) -> bool {
        if estimated < Self::MIN_SAMPLE_TOKENS || counted == 0 {
            return false;
        }
        let ratio = counted as f64 / estimated as f64;
        let mut ratios = self.lock();
        match ratios.get_mut(model) {
            Some(running) => *running += Self::WEIGHT * (ratio - *running),
            None => {
                ratios.insert(model.to_owned(), ratio);
            }
        }
        true
    }

    /// The running ratio of provider-counted to estimated tokens for `model`, as
    /// observed (`None` before the first observation).
    pub fn ratio(&self, model: &str) -> Option<f64> {
        self.lock().get(model).copied()
    }

    /// The factor the budget is divided by for `model`: the running ratio, at least 1
    /// and at most [`MAX_FACTOR`](Self::MAX_FACTOR); 1 before any observation.
    pub fn factor(&self, model: &str) -> f64 {
        self.ratio(model)
            .map_or(1.0, |r| r.clamp(1.0, Self::MAX_FACTOR))
    }

    /// `tokens` of the provider's counting expressed in estimated tokens:
    /// `⌊tokens / factor⌋`.
    pub fn calibrate(&self, model: &str, tokens: usize) -> usize {
        divide(tokens, self.factor(model))
    }

    /// Forgets every model's ratio.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, f64>> {
        // Each update leaves the map consistent, so a poisoned lock is still usable.
        self.ratios.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `⌊tokens / factor⌋`; `tokens` itself for a factor of 1 (no float round trip).
pub(crate) fn divide(tokens: usize, factor: f64) -> usize {
    if factor > 1.0 {
        (tokens as f64 / factor).floor() as usize
    } else {
        tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;

    #[test]
    fn the_ratio_follows_observations_and_the_factor_only_tightens() {
        let c = Calibration::new();
        assert!(c.observe_tokens("m", 1_000, 2_000));
        assert_eq!(c.ratio("m"), Some(2.0));
        // A running average: one observation of 1.0 moves 2.0 a quarter of the way.
        assert!(c.observe_tokens("m", 1_000, 1_000));
        assert_eq!(c.ratio("m"), Some(1.75));
        assert_eq!(c.calibrate("m", 7_000), 4_000);
        // A provider counting less than the estimate leaves the budget alone.
        c.observe_tokens("n", 1_000, 500);
        assert_eq!(c.ratio("n"), Some(0.5));
        assert_eq!(c.factor("n"), 1.0);
        // And a wild one is capped.
        c.observe_tokens("o", 1_000, 100_000);
        assert_eq!(c.factor("o"), Calibration::MAX_FACTOR);
        c.reset();
        assert_eq!(c.ratio("m"), None);
    }

    #[test]
    fn small_prompts_empty_usage_and_memo_hits_teach_nothing() {
        let c = Calibration::new();
        assert!(!c.observe_tokens("m", Calibration::MIN_SAMPLE_TOKENS - 1, 10_000));
        assert!(!c.observe_tokens("m", 10_000, 0));
        let mut response = ChatResponse::new(Message::assistant("ok"));
        response.usage = Usage {
            input_tokens: 100,
            cache_read_tokens: 1_000,
            cache_write_tokens: 200,
            ..Usage::default()
        };
        response.report = PreparationReport {
            after_tokens: 1_000,
            memo_hit: true,
            ..PreparationReport::default()
        };
        assert!(!c.observe("m", &response));
        assert_eq!(c.ratio("m"), None);
        // Fresh, cached and written prompt tokens all count.
        response.report.memo_hit = false;
        assert!(c.observe("m", &response));
        assert_eq!(c.ratio("m"), Some(1.3));
    }
}
