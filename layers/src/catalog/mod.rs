//! The model catalog: context windows, prices and prompt-cache minimums, and what a call
//! cost.
//!
//! ```
//! use llm_context_layers::catalog::{cost, Catalog};
//! use llm_context_layers::Usage;
//!
//! // A 20k-token grounding prefix, re-sent on every turn of a 30-turn run.
//! let fresh = Usage::new(20_000, 200, 0, 0);
//! let cached = Usage::new(0, 200, 20_000, 0);
//! let fresh_run = cost("claude-sonnet-4-6", &fresh).unwrap() * 30.0;
//! let cached_run = cost("claude-sonnet-4-6", &cached).unwrap() * 30.0;
//! assert!((fresh_run - 1.89).abs() < 1e-9);
//! assert!((cached_run - 0.27).abs() < 1e-9);
//!
//! // Prices change: override them (and add models) from a file's text.
//! let catalog = Catalog::builtin().with_overrides_toml(r#"
//!     [models."claude-sonnet-4-6".price]
//!     cache_read = 0.15
//!     [models."my-local-llama"]
//!     provider = "openai"
//!     context_window = 32768
//! "#).unwrap();
//! assert_eq!(catalog.get("claude-sonnet-4-6").unwrap().price.unwrap().cache_read, 0.15);
//! assert_eq!(catalog.get("claude-sonnet-4-6").unwrap().price.unwrap().input, 3.0);
//! assert_eq!(catalog.context_window("my-local-llama"), Some(32_768));
//! ```
//!
//! The built-in figures come from the providers' pages as they stood in 2026 (see
//! [`builtin`]); prices and per-model minimums changed several times that year, so treat
//! them as defaults and override them from configuration. Parsing is pure (it takes the
//! text); `llm-context` reads the file.
//!
//! Dated snapshots resolve to their family: `claude-sonnet-4-5-20250929` finds
//! `claude-sonnet-4-5`, `gpt-5.4-mini-2026-03-17` finds `gpt-5.4-mini` (the longest
//! catalog id that the model id starts with, followed by a date or `-latest`); another
//! version number does not (`claude-sonnet-4-7` is not `claude-sonnet-4`).

pub mod builtin;
mod file;
mod litellm;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::model::Usage;

pub use file::CatalogError;

/// Who serves a model and answers its calls: the catalog's `provider`, the proxy's
/// routes, and the provider named in a [`ProviderError`](https://docs.rs/llm-context/latest/llm_context/error/struct.ProviderError.html).
///
/// Written (and read) in lower case: `"openai"`, `"anthropic"`.
///
/// ```
/// use llm_context_layers::catalog::Provider;
/// assert_eq!(Provider::Anthropic.to_string(), "anthropic");
/// assert_eq!(Provider::OpenAi.as_str(), "openai");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI, or any server compatible with its APIs.
    OpenAi,
    /// Anthropic.
    Anthropic,
}

impl Provider {
    /// Its name in lower case, as configs and metrics write it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Prices in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Price {
    /// Fresh (uncached) prompt tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Prompt tokens read from the cache.
    pub cache_read: f64,
    /// Prompt tokens written to the cache with the default (5-minute) TTL. For OpenAI
    /// models before GPT-5.6 writes cost no extra: this equals `input`.
    pub cache_write_5m: f64,
    /// Prompt tokens written to the cache with a one-hour TTL (Anthropic). Equal to
    /// `cache_write_5m` where the provider has no such TTL.
    pub cache_write_1h: f64,
}

impl Price {
    /// A price list: input, output, cache read, 5-minute and one-hour cache writes.
    pub const fn new(
        input: f64,
        output: f64,
        cache_read: f64,
        cache_write_5m: f64,
        cache_write_1h: f64,
    ) -> Self {
        Self {
            input,
            output,
            cache_read,
            cache_write_5m,
            cache_write_1h,
        }
    }

    /// What `usage` costs at these prices, in USD.
    ///
    /// Cache writes are billed at the one-hour rate for `usage.cache_write_1h_tokens` and
    /// at the 5-minute rate for the rest, so a provider that does not split its writes is
    /// billed at the (cheaper, default) 5-minute rate.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let writes_1h = usage.cache_write_1h_tokens.min(usage.cache_write_tokens);
        let writes_5m = usage.cache_write_tokens - writes_1h;
        let micro = usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_tokens as f64 * self.cache_read
            + writes_5m as f64 * self.cache_write_5m
            + writes_1h as f64 * self.cache_write_1h;
        micro / 1_000_000.0
    }
}

/// What the catalog knows about one model. Every figure is optional: a model can be known
/// for its window alone (a local server), or for its prices alone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The API that serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// The context window in tokens (prompt and output together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<usize>,
    /// The shortest prompt prefix the provider caches, in tokens. Shorter prefixes are
    /// silently not cached, so a breakpoint there only wastes a slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_min_tokens: Option<usize>,
    /// Prices, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Whether the model binds each signed thinking block to everything before it
    /// (Anthropic's "preserved thinking"), so that history edited before a block makes
    /// the request fail. `None`: decided by [`Catalog::binds_thinking`]'s rule for models
    /// it does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binds_thinking: Option<bool>,
    /// Whether the provider edits this model's context on request (Anthropic's
    /// `context_management` edits: clearing tool uses and thinking, compaction; OpenAI's
    /// Responses API server compaction), so the stack can delegate to it
    /// ([`Executor::Delegate`](crate::Executor::Delegate)). `None`: decided by the rules
    /// of [`Catalog::edits_context`] and [`Catalog::compacts_responses`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edits_context: Option<bool>,
    /// Whether OpenAI serves this model over the Responses API only (no Chat
    /// Completions): a client of another format reaches it over that API. `None`:
    /// decided by [`Catalog::responses_only`]'s rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses_only: Option<bool>,
    /// Whether OpenAI takes explicit cache breakpoints on this model's content parts
    /// (`prompt_cache_breakpoint`). `None`: decided by
    /// [`Catalog::takes_cache_breakpoints`]'s rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_breakpoints: Option<bool>,
}

/// The minimum cacheable prefix assumed for a model the catalog does not know: 1,024
/// tokens, OpenAI's minimum and the most common Anthropic one.
pub const DEFAULT_CACHE_MIN_TOKENS: usize = 1_024;

/// Models by id. See the [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// The models, by id (ordered, so what is written back is stable).
    #[serde(default)]
    pub models: BTreeMap<String, ModelInfo>,
}

impl Catalog {
    /// An empty catalog.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in catalog, shared (built once per process).
    pub fn builtin() -> Arc<Catalog> {
        static BUILTIN: OnceLock<Arc<Catalog>> = OnceLock::new();
        BUILTIN.get_or_init(|| Arc::new(builtin::catalog())).clone()
    }

    /// Adds or replaces a model.
    #[must_use]
    pub fn with_model(mut self, id: impl Into<String>, info: ModelInfo) -> Self {
        self.models.insert(id.into(), info);
        self
    }

    /// The entry for `model`: the exact id, else the longest id that `model` starts with
    /// followed by a snapshot suffix (`-20250929`, `-2026-03-17`, `-latest`).
    pub fn get(&self, model: &str) -> Option<&ModelInfo> {
        if let Some(info) = self.models.get(model) {
            return Some(info);
        }
        // Walk the ids that sort before `model`; any prefix of it is among them. Longest
        // first, so `gpt-5.4-mini-…` finds `gpt-5.4-mini`, not `gpt-5.4`.
        self.models
            .range::<str, _>((Bound::Unbounded, Bound::Excluded(model)))
            .rev()
            .filter(|(id, _)| {
                model
                    .strip_prefix(id.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(is_snapshot_suffix)
            })
            .max_by_key(|(id, _)| id.len())
            .map(|(_, info)| info)
    }

    /// The model's context window, when known.
    pub fn context_window(&self, model: &str) -> Option<usize> {
        self.get(model).and_then(|m| m.context_window)
    }

    /// The model's minimum cacheable prefix: the catalog's figure, else
    /// [`DEFAULT_CACHE_MIN_TOKENS`].
    pub fn cache_min_tokens(&self, model: &str) -> usize {
        self.get(model)
            .and_then(|m| m.cache_min_tokens)
            .unwrap_or(DEFAULT_CACHE_MIN_TOKENS)
    }

    /// Whether `model` binds each signed thinking block to its prefix, so the stack must
    /// never send one whose prefix it changed: the catalog's `binds_thinking`, else `true`
    /// for any Claude model the built-in catalog does not know unless its id ends in a
    /// snapshot date before 2026 (the provider enforces it on its newest models and says
    /// later ones will for every account; being wrong this way costs some thinking, the
    /// other way a failed call).
    ///
    /// ```
    /// use llm_context_layers::Catalog;
    ///
    /// let catalog = Catalog::builtin();
    /// assert!(catalog.binds_thinking("claude-fable-5-1"));
    /// assert!(!catalog.binds_thinking("claude-sonnet-4-6"));
    /// assert!(catalog.binds_thinking("claude-nova-6"));
    /// assert!(!catalog.binds_thinking("claude-3-7-sonnet-20250219"));
    /// assert!(!catalog.binds_thinking("gpt-5.5"));
    /// ```
    pub fn binds_thinking(&self, model: &str) -> bool {
        if let Some(binds) = self.get(model).and_then(|m| m.binds_thinking) {
            return binds;
        }
        match Catalog::builtin().get(model) {
            // The built-in entries say so when they bind.
            Some(known) => known.binds_thinking.unwrap_or(false),
            None => unknown_claude_binds(model),
        }
    }

    /// Whether the provider of `model` edits its context on request (clears old tool
    /// uses and thinking server-side): the catalog's `edits_context`, else `true` for
    /// Anthropic's models from Claude 4 on (the built-in ones, and any `claude-` model
    /// the built-in catalog does not know but a `claude-2…` or `claude-3…` one) and
    /// `false` for every other model.
    ///
    /// ```
    /// use llm_context_layers::Catalog;
    ///
    /// let catalog = Catalog::builtin();
    /// assert!(catalog.edits_context("claude-sonnet-4-6"));
    /// assert!(catalog.edits_context("claude-nova-6"));
    /// assert!(!catalog.edits_context("claude-3-7-sonnet-20250219"));
    /// assert!(!catalog.edits_context("gpt-5.5"));
    /// ```
    pub fn edits_context(&self, model: &str) -> bool {
        let builtin = Catalog::builtin();
        let info = self.get(model).or_else(|| builtin.get(model));
        if let Some(edits) = info.and_then(|m| m.edits_context) {
            return edits;
        }
        match info.and_then(|m| m.provider) {
            Some(provider) => provider == Provider::Anthropic,
            None => {
                model.starts_with("claude-")
                    && !model.starts_with("claude-2")
                    && !model.starts_with("claude-3")
                    && !model.starts_with("claude-instant")
            }
        }
    }

    /// Whether the provider of `model` compacts a Responses API request server-side on
    /// request (`context_management: [{"type": "compaction", "compact_threshold"}]`):
    /// the catalog's `edits_context`, else `true` for OpenAI's models from GPT-5 on (a
    /// `gpt-5…` or later `gpt-…` id, or an OpenAI model of the built-in catalog with such
    /// an id) and `false` for every other model.
    ///
    /// ```
    /// use llm_context_layers::Catalog;
    ///
    /// let catalog = Catalog::builtin();
    /// assert!(catalog.compacts_responses("gpt-5.5"));
    /// assert!(catalog.compacts_responses("gpt-7-mini"));
    /// assert!(!catalog.compacts_responses("gpt-4.1"));
    /// assert!(!catalog.compacts_responses("claude-fable-5-1"));
    /// ```
    pub fn compacts_responses(&self, model: &str) -> bool {
        let builtin = Catalog::builtin();
        let info = self.get(model).or_else(|| builtin.get(model));
        if let Some(edits) = info.and_then(|m| m.edits_context) {
            return edits;
        }
        if info.and_then(|m| m.provider) == Some(Provider::Anthropic) {
            return false;
        }
        gpt_version(model).is_some_and(|(major, _)| major >= 5)
    }

    /// Whether `model` is served over the Responses API only: the catalog's
    /// `responses_only`, else `true` for OpenAI's Codex models (`…-codex…`) and its
    /// `-pro` reasoning models (`gpt-5-pro`, `o3-pro`), which OpenAI serves there alone.
    ///
    /// ```
    /// use llm_context_layers::Catalog;
    ///
    /// let catalog = Catalog::builtin();
    /// assert!(catalog.responses_only("gpt-5.5-codex"));
    /// assert!(catalog.responses_only("gpt-5-pro"));
    /// assert!(!catalog.responses_only("gpt-5.5"));
    /// assert!(!catalog.responses_only("claude-opus-4-1"));
    /// ```
    pub fn responses_only(&self, model: &str) -> bool {
        let builtin = Catalog::builtin();
        let info = self.get(model).or_else(|| builtin.get(model));
        if let Some(only) = info.and_then(|m| m.responses_only) {
            return only;
        }
        !model.starts_with("claude-") && (model.contains("-codex") || model.ends_with("-pro"))
    }

    /// Whether OpenAI takes explicit cache breakpoints (`"prompt_cache_breakpoint":
    /// {"mode": "explicit"}` on a content part) for `model`: the catalog's
    /// `cache_breakpoints`, else `true` for OpenAI's models from GPT-5.6 on (a `gpt-5.6…`
    /// or later `gpt-…` id) and `false` for every other model (an older OpenAI model, or
    /// an OpenAI-compatible server, might refuse the field).
    ///
    /// ```
    /// use llm_context_layers::Catalog;
    ///
    /// let catalog = Catalog::builtin();
    /// assert!(catalog.takes_cache_breakpoints("gpt-5.6-terra"));
    /// assert!(catalog.takes_cache_breakpoints("gpt-6"));
    /// assert!(catalog.takes_cache_breakpoints("gpt-5.10-mini"));
    /// assert!(!catalog.takes_cache_breakpoints("gpt-5.5"));
    /// assert!(!catalog.takes_cache_breakpoints("gpt-5"));
    /// assert!(!catalog.takes_cache_breakpoints("claude-opus-4-6"));
    /// ```
    pub fn takes_cache_breakpoints(&self, model: &str) -> bool {
        let builtin = Catalog::builtin();
        let info = self.get(model).or_else(|| builtin.get(model));
        if let Some(takes) = info.and_then(|m| m.cache_breakpoints) {
            return takes;
        }
        gpt_version(model).is_some_and(|v| v >= (5, 6))
    }

    /// What `usage` cost on `model`, in USD; `None` when the model has no price here.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        Some(self.get(model)?.price?.cost(usage))
    }
}

/// The version of an OpenAI `gpt-…` model id: `gpt-5.6-terra` is (5, 6), `gpt-6` (6, 0);
/// `None` for any other id.
fn gpt_version(model: &str) -> Option<(u32, u32)> {
    let version = model.strip_prefix("gpt-")?;
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let major_len = digits(version);
    let major = version[..major_len].parse().ok()?;
    let minor = version[major_len..]
        .strip_prefix('.')
        .and_then(|rest| rest[..digits(rest)].parse().ok())
        .unwrap_or(0);
    Some((major, minor))
}

/// The rule for a model no catalog entry speaks for: a Claude model binds thinking unless
/// its id ends in a snapshot date before 2026.
fn unknown_claude_binds(model: &str) -> bool {
    if !model.starts_with("claude-") {
        return false;
    }
    let parts: Vec<&str> = model.rsplit('-').collect();
    let digits = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_digit());
    // `…-20250219`, or `…-2025-02-19`: the year leads.
    let year = match parts.as_slice() {
        [last, ..] if digits(last, 8) => &last[..4],
        [d, m, y, ..] if digits(d, 2) && digits(m, 2) && digits(y, 4) => y,
        _ => return true,
    };
    year.parse::<u32>().is_ok_and(|y| y >= 2026)
}

/// A dated snapshot (`20250929`, `2026-03-17`) or `latest`; not another version number,
/// so `claude-sonnet-4-7` does not pass for `claude-sonnet-4`.
fn is_snapshot_suffix(rest: &str) -> bool {
    rest == "latest" || rest.bytes().take_while(u8::is_ascii_digit).count() >= 4
}

/// What `usage` cost on `model` at the built-in prices, in USD; `None` for a model the
/// built-in catalog does not price. See [`Catalog::cost`] for your own prices.
pub fn cost(model: &str, usage: &Usage) -> Option<f64> {
    Catalog::builtin().cost(model, usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round4(x: f64) -> f64 {
        (x * 10_000.0).round() / 10_000.0
    }

    #[test]
    fn seed_cost_figures() {
        // 30 turns of a 20k-token prefix with 200 output tokens on
        // claude-sonnet-4-6 ($3 input, $15 output, $0.30 cache read per Mtok).
        let fresh = Usage::new(20_000, 200, 0, 0);
        let cached = Usage::new(0, 200, 20_000, 0);
        assert_eq!(
            round4(cost("claude-sonnet-4-6", &fresh).unwrap() * 30.0),
            1.89
        );
        assert_eq!(
            round4(cost("claude-sonnet-4-6", &cached).unwrap() * 30.0),
            0.27
        );
    }

    #[test]
    fn cache_writes_use_their_ttl_price() {
        // claude-sonnet-4-6: 5m writes $3.75, 1h writes $6 per Mtok.
        let five = Usage::new(0, 0, 0, 1_000_000);
        assert_eq!(cost("claude-sonnet-4-6", &five), Some(3.75));
        let hour = Usage::new(0, 0, 0, 1_000_000).with_cache_write_1h(1_000_000);
        assert_eq!(cost("claude-sonnet-4-6", &hour), Some(6.0));
        let mixed = Usage::new(0, 0, 0, 1_000_000).with_cache_write_1h(500_000);
        assert_eq!(cost("claude-sonnet-4-6", &mixed), Some(4.875));
    }

    #[test]
    fn snapshots_resolve_to_their_family() {
        let c = Catalog::builtin();
        assert_eq!(
            c.get("claude-sonnet-4-5-20250929"),
            c.get("claude-sonnet-4-5")
        );
        assert_eq!(c.get("gpt-5.4-mini-2026-03-17"), c.get("gpt-5.4-mini"));
        assert_ne!(c.get("gpt-5.4-mini-2026-03-17"), c.get("gpt-5.4"));
        assert!(c.get("claude-sonnet-4-5x").is_none());
        assert!(c.get("claude-sonnet-4-7").is_none());
        assert_eq!(c.get("claude-sonnet-4-latest"), c.get("claude-sonnet-4"));
        assert!(c.get("gpt").is_none());
        assert!(c.get("").is_none());
    }

    #[test]
    fn unknown_models() {
        let c = Catalog::builtin();
        assert_eq!(c.cost("my-model", &Usage::new(1, 1, 0, 0)), None);
        assert_eq!(c.cache_min_tokens("my-model"), DEFAULT_CACHE_MIN_TOKENS);
        assert_eq!(c.context_window("my-model"), None);
    }

    #[test]
    fn minimums_from_the_official_pages() {
        let c = Catalog::builtin();
        assert_eq!(c.cache_min_tokens("claude-sonnet-4-6"), 2_048);
        assert_eq!(c.cache_min_tokens("claude-haiku-4-5"), 4_096);
        assert_eq!(c.cache_min_tokens("claude-opus-5"), 512);
        assert_eq!(c.cache_min_tokens("claude-sonnet-4-5"), 1_024);
        assert_eq!(c.cache_min_tokens("gpt-5.4"), 1_024);
    }
}
