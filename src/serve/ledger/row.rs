//! One request in the ledger: what the client sent, what went upstream, what the provider
//! billed, and what the same request passed through unchanged is modelled to have cost.

use llm_context_layers::Usage;
use llm_context_layers::catalog::Price;
use serde::{Deserialize, Serialize};

/// Prompt and output tokens by how they are billed: the raw figures a cost is computed
/// from, kept so that anyone can recompute it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Buckets {
    /// Prompt tokens neither read from nor written to the cache.
    pub uncached: u64,
    /// Prompt tokens read from the cache.
    pub cache_read: u64,
    /// Prompt tokens written to the cache with the 5-minute TTL (OpenAI's writes too).
    pub cache_write_5m: u64,
    /// Prompt tokens written to the cache with the one-hour TTL.
    pub cache_write_1h: u64,
    /// Output tokens.
    pub output: u64,
}

impl Buckets {
    /// The buckets of a provider's usage.
    pub fn of(usage: &Usage) -> Self {
        let write_1h = usage.cache_write_1h_tokens.min(usage.cache_write_tokens);
        Self {
            uncached: usage.input_tokens,
            cache_read: usage.cache_read_tokens,
            cache_write_5m: usage.cache_write_tokens - write_1h,
            cache_write_1h: write_1h,
            output: usage.output_tokens,
        }
    }

    /// Every prompt token: uncached, read and written.
    pub fn prompt(&self) -> u64 {
        self.uncached + self.cache_read + self.cache_write_5m + self.cache_write_1h
    }

    /// What these tokens cost at `price`, in USD.
    pub fn cost(&self, price: &Price) -> f64 {
        (self.uncached as f64 * price.input
            + self.cache_read as f64 * price.cache_read
            + self.cache_write_5m as f64 * price.cache_write_5m
            + self.cache_write_1h as f64 * price.cache_write_1h
            + self.output as f64 * price.output)
            / 1_000_000.0
    }

    /// Adds `other` to these.
    pub fn add(&mut self, other: &Buckets) {
        self.uncached += other.uncached;
        self.cache_read += other.cache_read;
        self.cache_write_5m += other.cache_write_5m;
        self.cache_write_1h += other.cache_write_1h;
        self.output += other.output;
    }
}

/// Where a pass-through figure comes from. Ordered from the strongest to the weakest: a
/// total carries the weakest of its rows'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Provenance {
    /// The request, and every earlier one of its session, went upstream as the client
    /// sent it (nothing edited, the client's own cache markers): the provider's usage is
    /// the pass-through usage.
    Observed,
    /// The session's unchanged requests replayed through the provider's cache model.
    Modelled,
    /// Modelled, the prefix the session's previous request left cached having expired.
    ModelledPrefixExpired,
    /// Modelled, the client's marked prefix being below the model's cache minimum.
    ModelledBelowCacheMinimum,
    /// Modelled with nothing cached: the ledger holds no earlier request of the session
    /// (the provider may still have its prefix, from before or from another session).
    ModelledNoHistory,
    /// Modelled while another request of the session was in flight, whose caching the
    /// provider may have applied in either order.
    ModelledConcurrent,
    /// No pass-through figure: the provider reported no usage (the request failed), or
    /// the body was too large to model. Counted, at zero on both sides.
    NotModelled,
}

impl Provenance {
    /// Its name, as the JSON and the page show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Observed => "observed",
            Self::Modelled => "modelled",
            Self::ModelledPrefixExpired => "modelled: prefix expired",
            Self::ModelledBelowCacheMinimum => "modelled: below the cache minimum",
            Self::ModelledNoHistory => "modelled: no history for the session",
            Self::ModelledConcurrent => "modelled: concurrent requests",
            Self::NotModelled => "not modelled",
        }
    }
}

/// What the stack did to a request, from its report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Edits {
    /// Messages removed (whole turns and tool rounds).
    pub removed_messages: u64,
    /// Tool results replaced by a stub.
    pub cleared: u64,
    /// Tool results replaced by a preview of an artifact.
    pub offloaded: u64,
    /// Thinking blocks dropped.
    pub thinking_dropped: u64,
    /// Messages a provider's compaction block stands for, left out.
    pub compacted: u64,
    /// Answered from the memo (or an identical request in flight): no provider call.
    pub memo_hit: bool,
    /// The session was costlier than pass-through and its policy guards: only what the
    /// window forced was done.
    #[serde(default)]
    pub guard_held: bool,
}

impl Edits {
    /// Whether the stack changed anything the provider sees.
    pub fn any(&self) -> bool {
        self.removed_messages
            + self.cleared
            + self.offloaded
            + self.thinking_dropped
            + self.compacted
            > 0
            || self.memo_hit
    }
}

/// One managed request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Row {
    /// When it came, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The tenant's label (`-` without a key table).
    pub tenant: String,
    /// The session (`-` when it named none and none was inferred).
    pub session: String,
    /// The route it came on.
    pub route: String,
    /// The model it asked for.
    pub model: String,
    /// Who edited its context (`local`, `delegate`, `off`), when the stack said.
    pub executor: Option<String>,
    /// The answer's status.
    pub status: u16,
    /// The client's prompt, in estimated tokens.
    pub client_tokens: u64,
    /// The prompt sent upstream, in estimated tokens.
    pub sent_tokens: u64,
    /// What the provider reported it billed.
    pub actual: Buckets,
    /// What the request passed through unchanged is modelled to have been billed.
    pub passthrough: Buckets,
    /// Where `passthrough` comes from.
    pub provenance: Provenance,
    /// The prices both were priced at (the catalog's, per million tokens), when known.
    pub price: Option<Price>,
    /// `actual` at `price`, in USD.
    pub actual_usd: Option<f64>,
    /// `passthrough` at `price`, in USD.
    pub passthrough_usd: Option<f64>,
    /// What the stack did.
    pub edits: Edits,
    /// The time the proxy added to the response's headers, in milliseconds.
    pub added_ms: f64,
}

impl Row {
    /// Pass-through cost less actual cost: negative when editing cost more than it saved.
    pub fn saving_usd(&self) -> Option<f64> {
        Some(self.passthrough_usd? - self.actual_usd?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(model: &str) -> Price {
        llm_context_layers::Catalog::builtin()
            .get(model)
            .and_then(|m| m.price)
            .unwrap()
    }

    #[test]
    fn writes_are_priced_as_the_model_bills_them() {
        // A million tokens written, a million fresh.
        let written = Buckets::of(&Usage::new(0, 0, 0, 1_000_000));
        let fresh = Buckets::of(&Usage::new(1_000_000, 0, 0, 0));
        // GPT-5.6 bills cache writes at 1.25× input; GPT-5.4 does not bill them apart.
        let terra = price("gpt-5.6-terra");
        assert_eq!(written.cost(&terra), 1.25 * fresh.cost(&terra));
        let older = price("gpt-5.4");
        assert_eq!(written.cost(&older), fresh.cost(&older));
        // Anthropic: 5-minute writes 1.25×, one-hour writes 2×, reads 0.1×.
        let sonnet = price("claude-sonnet-4-6");
        let hour = Buckets::of(&Usage::new(0, 0, 0, 1_000_000).with_cache_write_1h(1_000_000));
        assert_eq!(hour.cache_write_1h, 1_000_000);
        assert_eq!(hour.cost(&sonnet), 2.0 * fresh.cost(&sonnet));
        assert_eq!(written.cost(&sonnet), 1.25 * fresh.cost(&sonnet));
    }
}
