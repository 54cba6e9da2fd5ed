//! OpenAI's automatic prompt caching: the longest prefix seen recently, from 1,024 tokens
//! on, in 128-token steps.

use std::collections::HashMap;
use std::time::Duration;

use llm_context_layers::ChatRequest;
use llm_context_layers::tokens::{estimate_one, estimate_tool_tokens};

use super::cache::{Block, Chain, Tally, cumulative};

/// How long a prefix stays cached after it was last sent. OpenAI says caches are
/// "usually cleared after 5–10 minutes of inactivity" (always within an hour); the
/// upper figure is taken, as the entry is refreshed by every request that uses it and
/// an agent's calls come seconds apart, so only long pauses are affected.
pub const RETENTION: Duration = Duration::from_secs(600);

/// Cache hits grow in steps of this many tokens (past the minimum).
pub const STEP_TOKENS: u64 = 128;

/// OpenAI's cache for one organisation, over a run of calls.
///
/// The prompt's units are the tools, then each message as written (the prefix's, then
/// the request's). A call reads the longest prefix of whole units that a call within
/// [`RETENTION`] sent, rounded down to [`STEP_TOKENS`], and nothing under the model's
/// minimum (1,024 tokens); every prefix it sends is cached from then on. What becomes
/// cached and was not read is counted as written, at the catalog's `cache_write_5m`
/// price (the input price before GPT-5.6, 1.25× from it).
///
/// ```
/// use std::time::Duration;
/// use llm_context::simulate::{Chain, OpenAiCache};
///
/// let mut prompt = Chain::new("doc");
/// prompt.push(3_000, None, |h| h.str("system prompt"));
/// prompt.push(500, None, |h| h.str("question"));
/// let units = prompt.finish();
///
/// let mut cache = OpenAiCache::new(1_024);
/// assert_eq!(cache.call(&units, Duration::ZERO).cache_read_tokens, 0);
/// // 3,500 rounded down to a multiple of 128.
/// assert_eq!(cache.call(&units, Duration::from_secs(60)).cache_read_tokens, 3_456);
/// ```
#[derive(Clone, Debug, Default)]
pub struct OpenAiCache {
    min_tokens: u64,
    /// When each prefix (by its hash) was last sent.
    seen: HashMap<u128, Duration>,
}

impl OpenAiCache {
    /// An empty cache for a model that caches prompts of at least `min_tokens`.
    pub fn new(min_tokens: u64) -> Self {
        Self {
            min_tokens,
            seen: HashMap::new(),
        }
    }

    /// Bills one call whose prompt is `units`, made at `now` (from any fixed origin), and
    /// remembers its prefixes. Breakpoints are ignored: caching is automatic.
    pub fn call(&mut self, units: &[Block], now: Duration) -> Tally {
        self.seen.retain(|_, last| now < *last + RETENTION);
        let tokens = cumulative(units);
        let total = tokens.last().copied().unwrap_or(0);
        // Hashes are cumulative: the last unit seen ends the longest prefix seen.
        let matched = units
            .iter()
            .rposition(|u| self.seen.contains_key(&u.hash))
            .map_or(0, |i| tokens[i]);
        let read = self.cacheable(matched);
        for u in units {
            self.seen.insert(u.hash, now);
        }
        Tally {
            input_tokens: total,
            cache_read_tokens: read,
            cache_write_tokens: self.cacheable(total) - read,
            cache_write_1h_tokens: 0,
        }
    }

    /// How much of a matched prefix of `tokens` is billed as cached.
    fn cacheable(&self, tokens: u64) -> u64 {
        if tokens < self.min_tokens {
            0
        } else {
            tokens / STEP_TOKENS * STEP_TOKENS
        }
    }
}

/// The units of `req` as the OpenAI client sends it: each tool, then the prefix's
/// messages and the request's, each with the crate's estimate. A message is hashed from
/// the neutral model ([`StableHasher::message`](llm_context_layers::hash::StableHasher::message)),
/// which the client writes deterministically: equal hashes, equal bytes.
pub fn units(req: &ChatRequest) -> Vec<Block> {
    let mut chain = Chain::new("llm-context/simulate/openai/v1");
    for t in &req.tools {
        chain.push(
            estimate_tool_tokens(std::slice::from_ref(t)) as u64,
            None,
            |h| {
                h.str(&t.name);
                h.str(&t.description);
                h.json(&t.parameters);
            },
        );
    }
    // The prefix rendered once; the transcript by reference, not copied on every call.
    let prefix = req
        .prefix
        .as_ref()
        .map(|p| p.as_messages())
        .unwrap_or_default();
    for m in prefix.iter().chain(&req.messages) {
        chain.push(estimate_one(m) as u64, None, |h| h.message(m));
    }
    chain.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn prompt(units: &[(&str, u64)]) -> Vec<Block> {
        let mut chain = Chain::new("test");
        for &(text, tokens) in units {
            chain.push(tokens, None, |h| h.str(text));
        }
        chain.finish()
    }

    fn billed(t: Tally) -> (u64, u64, u64) {
        (t.input_tokens, t.cache_read_tokens, t.cache_write_tokens)
    }

    #[test]
    fn nothing_below_1024_then_steps_of_128() {
        let mut cache = OpenAiCache::new(1_024);
        // 1,000 tokens: too short to cache at all.
        let short = prompt(&[("system", 1_000)]);
        assert_eq!(billed(cache.call(&short, secs(0))), (1_000, 0, 0));
        assert_eq!(billed(cache.call(&short, secs(10))), (1_000, 0, 0));

        // 1,000 + 300 = 1,300: a first send writes ⌊1,300 / 128⌋ × 128 = 1,280.
        let longer = prompt(&[("system", 1_000), ("q1", 300)]);
        assert_eq!(billed(cache.call(&longer, secs(20))), (1_300, 0, 1_280));

        // 1,300 matched of 1,500: read 1,280; 1,408 (11 × 128) cacheable, 128 written.
        let next = prompt(&[("system", 1_000), ("q1", 300), ("q2", 200)]);
        assert_eq!(billed(cache.call(&next, secs(30))), (1_500, 1_280, 128));
    }

    #[test]
    fn a_changed_unit_ends_the_match_and_idle_prefixes_expire() {
        let mut cache = OpenAiCache::new(1_024);
        let a = prompt(&[("tools", 2_000), ("system", 3_000)]);
        cache.call(&a, secs(0));
        // Another first unit: nothing after it matches.
        let b = prompt(&[("other tools", 2_000), ("system", 3_000)]);
        assert_eq!(billed(cache.call(&b, secs(10))).1, 0);
        // `a` again 9 minutes after it was sent: still there (5,000 = 39 × 128 + 8).
        assert_eq!(billed(cache.call(&a, secs(540))).1, 4_992);
        // Then 11 minutes of silence: gone.
        assert_eq!(billed(cache.call(&a, secs(1_200))).1, 0);
    }
}
