//! The pass-through model: each session's requests, as the client sent them, replayed
//! through the provider's cache model (the one `simulate` bills with, TTLs included), and
//! the provider's usage of what was sent turned into what the unchanged request would have
//! been billed.
//!
//! The cache model counts in the crate's estimate; the provider counts in its tokenizer.
//! So the model gives shares (of the client's prompt, how much would have been read from
//! the cache and written to it) and the provider's usage gives the scale: the client's
//! prompt is the prompt the provider billed, times the client's estimate over the sent
//! one's. Where the request and its whole session went upstream unchanged, nothing is
//! modelled: the provider's usage is the pass-through usage.

use std::collections::HashMap;
use std::time::Duration;

use llm_context_layers::catalog::Provider;
use llm_context_layers::{CacheTtl, Usage};

use super::row::{Buckets, Provenance};
use crate::simulate::{AnthropicCache, Block, OpenAiCache, Tally};

/// The most sessions modelled at once; the least recently used is forgotten (its next
/// request is then modelled with no history).
pub(crate) const MAX_MODELLED_SESSIONS: usize = 1_000;

/// What the model is told of one request.
pub(crate) struct Seen<'a> {
    /// The tenant and session it belongs to.
    pub(crate) key: (&'a str, &'a str),
    /// The provider its model is served by, and the model's cache minimum.
    pub(crate) provider: Provider,
    pub(crate) cache_min_tokens: u64,
    /// When it came, from the ledger's start.
    pub(crate) at: Duration,
    /// The client's body as a chain; `None`: not modelled (too large, or not readable).
    pub(crate) chain: Option<Vec<Block>>,
    /// The client's and the sent prompt, in estimated tokens.
    pub(crate) client_tokens: u64,
    pub(crate) sent_tokens: u64,
    /// What the provider reported (for a memo hit, the usage of the call it repeats).
    pub(crate) usage: Option<Usage>,
    /// The stack changed what the provider was sent.
    pub(crate) edited: bool,
    /// No provider call was made for it (a memo hit).
    pub(crate) no_call: bool,
    /// Another request of the session was in flight when it came.
    pub(crate) concurrent: bool,
}

/// The pass-through buckets of one request and where they come from.
#[derive(Debug, PartialEq)]
pub(crate) struct Modelled {
    pub(crate) actual: Buckets,
    pub(crate) passthrough: Buckets,
    pub(crate) provenance: Provenance,
}

enum Cache {
    Anthropic(AnthropicCache),
    OpenAi(OpenAiCache),
}

struct Session {
    cache: Cache,
    /// Every request of the session so far went upstream unchanged.
    unedited: bool,
    /// The newest request's time, and how long what it wrote lives.
    last: Duration,
    longest_ttl: Duration,
    /// For the least-recently-used order.
    tick: u64,
}

/// Every modelled session's cache.
#[derive(Default)]
pub(crate) struct Model {
    sessions: HashMap<(String, String), Session>,
    tick: u64,
}

impl Model {
    /// Bills `seen` as billed and as passed through, and remembers its prefixes.
    pub(crate) fn bill(&mut self, seen: Seen<'_>) -> Modelled {
        self.tick += 1;
        let actual = match (&seen.usage, seen.no_call) {
            (Some(usage), false) => Buckets::of(usage),
            _ => Buckets::default(),
        };
        let Some(chain) = seen.chain else {
            return Modelled {
                actual,
                passthrough: actual,
                provenance: Provenance::NotModelled,
            };
        };
        let key = (seen.key.0.to_owned(), seen.key.1.to_owned());
        let fresh = !self.sessions.contains_key(&key);
        if fresh && self.sessions.len() >= MAX_MODELLED_SESSIONS {
            self.forget_oldest();
        }
        let tick = self.tick;
        let session = self.sessions.entry(key).or_insert_with(|| Session {
            cache: match seen.provider {
                Provider::Anthropic => Cache::Anthropic(AnthropicCache::new(seen.cache_min_tokens)),
                _ => Cache::OpenAi(OpenAiCache::new(seen.cache_min_tokens)),
            },
            unedited: true,
            last: seen.at,
            longest_ttl: Duration::ZERO,
            tick,
        });
        let expired = !fresh && seen.at > session.last + session.longest_ttl;
        let tally = match &mut session.cache {
            Cache::Anthropic(cache) => cache.call(&chain, seen.at),
            Cache::OpenAi(cache) => cache.call(&chain, seen.at),
        };
        let marked = chain.iter().any(|b| b.breakpoint.is_some());
        session.longest_ttl = match seen.provider {
            Provider::Anthropic => chain
                .iter()
                .filter_map(|b| b.breakpoint)
                .map(|t| match t {
                    CacheTtl::OneHour => Duration::from_secs(3_600),
                    _ => Duration::from_secs(300),
                })
                .max()
                .unwrap_or_default(),
            // Automatic caching keeps a prefix 5 to 10 minutes idle.
            _ => Duration::from_secs(600),
        };
        session.last = seen.at;
        session.tick = tick;
        session.unedited &= !seen.edited;
        let Some(usage) = seen.usage else {
            return Modelled {
                actual,
                passthrough: actual,
                provenance: Provenance::NotModelled,
            };
        };
        // The request as it came is what the provider billed: nothing to model.
        let automatic = seen.provider != Provider::Anthropic;
        if session.unedited && !seen.no_call && (automatic || marked) {
            return Modelled {
                actual,
                passthrough: actual,
                provenance: Provenance::Observed,
            };
        }
        let provenance = if fresh {
            Provenance::ModelledNoHistory
        } else if seen.concurrent {
            Provenance::ModelledConcurrent
        } else if expired {
            Provenance::ModelledPrefixExpired
        } else if marked && tally.cache_read_tokens + tally.cache_write_tokens == 0 {
            Provenance::ModelledBelowCacheMinimum
        } else {
            Provenance::Modelled
        };
        let billed = Buckets::of(&usage).prompt() as f64;
        let scale = billed / seen.sent_tokens.max(1) as f64;
        let prompt = (seen.client_tokens as f64 * scale).round() as u64;
        Modelled {
            actual,
            passthrough: scaled(&tally, prompt, usage.output_tokens),
            provenance,
        }
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .sessions
            .iter()
            .min_by_key(|(_, s)| s.tick)
            .map(|(k, _)| k.clone());
        if let Some(key) = oldest {
            self.sessions.remove(&key);
        }
    }
}

/// The provider's figures alone, the pass-through not modelled (yet).
pub(crate) fn unmodelled(usage: Option<Usage>, no_call: bool) -> Modelled {
    let actual = match (usage, no_call) {
        (Some(usage), false) => Buckets::of(&usage),
        _ => Buckets::default(),
    };
    Modelled {
        actual,
        passthrough: actual,
        provenance: Provenance::NotModelled,
    }
}

/// `tally`'s shares of a prompt of `prompt` tokens.
fn scaled(tally: &Tally, prompt: u64, output: u64) -> Buckets {
    let whole = tally.input_tokens.max(1) as f64;
    let share = |n: u64| ((n as f64 / whole) * prompt as f64).round() as u64;
    let cache_read = share(tally.cache_read_tokens);
    let cache_write_1h = share(tally.cache_write_1h_tokens);
    let cache_write_5m = share(tally.cache_write_tokens - tally.cache_write_1h_tokens);
    Buckets {
        uncached: prompt.saturating_sub(cache_read + cache_write_1h + cache_write_5m),
        cache_read,
        cache_write_5m,
        cache_write_1h,
        output,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::Chain;

    /// A prompt of `n` blocks of 1,000 tokens, the last one marked.
    fn prompt(n: usize) -> Vec<Block> {
        let mut chain = Chain::new("test");
        for i in 0..n {
            let mark = (i + 1 == n).then_some(CacheTtl::FiveMinutes);
            chain.push(1_000, mark, |h| h.u64(i as u64));
        }
        chain.finish()
    }

    fn seen(n: usize, secs: u64, edited: bool, usage: Usage) -> Seen<'static> {
        Seen {
            key: ("t", "s"),
            provider: Provider::Anthropic,
            cache_min_tokens: 1_024,
            at: Duration::from_secs(secs),
            chain: Some(prompt(n)),
            client_tokens: n as u64 * 1_000,
            sent_tokens: n as u64 * 500,
            usage: Some(usage),
            edited,
            no_call: false,
            concurrent: false,
        }
    }

    #[test]
    fn an_unedited_session_is_its_observed_usage() {
        let mut model = Model::default();
        let usage = Usage::new(100, 10, 0, 2_000);
        let billed = model.bill(seen(2, 0, false, usage));
        assert_eq!(billed.provenance, Provenance::Observed);
        assert_eq!(billed.passthrough, billed.actual);
        assert_eq!(billed.actual.cache_write_5m, 2_000);
    }

    #[test]
    fn an_edited_request_is_the_replayed_client_prompt_at_the_providers_scale() {
        let mut model = Model::default();
        // The first request: nothing cached before it, all of its marked prefix written.
        let first = model.bill(seen(4, 0, true, Usage::new(1_000, 10, 0, 1_000)));
        assert_eq!(first.provenance, Provenance::ModelledNoHistory);
        // Sent 2,000 estimated, billed 2,000: the client's 4,000 at that scale, written.
        assert_eq!(first.passthrough.prompt(), 4_000);
        assert_eq!(first.passthrough.cache_write_5m, 4_000);
        assert_eq!(first.passthrough.output, 10);
        // One block more a minute later: the 4,000 read, the new 1,000 written. Billed at
        // twice the estimate this time, so the pass-through prompt is 10,000.
        let next = model.bill(seen(5, 60, false, Usage::new(5_000, 10, 0, 0)));
        assert_eq!(next.provenance, Provenance::Modelled);
        assert_eq!(next.passthrough.prompt(), 10_000);
        assert_eq!(next.passthrough.cache_read, 8_000);
        assert_eq!(next.passthrough.cache_write_5m, 2_000);
        // Ten minutes of silence: expired, all written again.
        let late = model.bill(seen(6, 700, false, Usage::new(3_000, 10, 0, 0)));
        assert_eq!(late.provenance, Provenance::ModelledPrefixExpired);
        assert_eq!(late.passthrough.cache_read, 0);
    }

    #[test]
    fn a_memo_hit_cost_nothing_and_would_have_cost_the_call() {
        let mut model = Model::default();
        let mut hit = seen(2, 0, true, Usage::new(1_000, 10, 0, 0));
        hit.no_call = true;
        let billed = model.bill(hit);
        assert_eq!(billed.actual, Buckets::default());
        assert_eq!(billed.passthrough.prompt(), 2_000);
        assert_eq!(billed.passthrough.output, 10);
    }

    #[test]
    fn the_least_recently_used_session_is_forgotten() {
        let mut model = Model::default();
        let names: Vec<String> = (0..=MAX_MODELLED_SESSIONS).map(|i| i.to_string()).collect();
        for name in &names {
            let mut s = seen(2, 0, true, Usage::new(1_000, 1, 0, 0));
            s.key = ("t", name);
            model.bill(s);
        }
        assert_eq!(model.sessions.len(), MAX_MODELLED_SESSIONS);
        assert!(!model.sessions.contains_key(&("t".into(), "0".into())));
    }
}
