//! What the cache models share: a prompt as a chain of blocks, and what one call was
//! billed for.

use std::time::Duration;

use llm_context_layers::hash::StableHasher;
use llm_context_layers::{CacheTtl, Usage};

/// One block of a prompt, in the provider's cache order (tools, then system, then
/// messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Block {
    /// A stable hash of this block and every block before it: two prompts share a prefix
    /// up to here exactly when their hashes here are equal.
    pub hash: u128,
    /// The block's own estimated tokens.
    pub tokens: u64,
    /// A cache breakpoint on this block (Anthropic's `cache_control`), with its TTL.
    pub breakpoint: Option<CacheTtl>,
}

/// Builds a prompt's blocks, hashing each with everything before it.
#[derive(Clone, Debug)]
pub struct Chain {
    hasher: StableHasher,
    blocks: Vec<Block>,
}

impl Chain {
    /// An empty chain; `domain` keeps different providers' hashes apart.
    pub fn new(domain: &str) -> Self {
        Self {
            hasher: StableHasher::new(domain),
            blocks: Vec::new(),
        }
    }

    /// Appends a block: `feed` hashes its content (never its breakpoint, which is not
    /// part of the prompt's text, so a breakpoint that moves does not change the prefix).
    pub fn push(
        &mut self,
        tokens: u64,
        breakpoint: Option<CacheTtl>,
        feed: impl FnOnce(&mut StableHasher),
    ) {
        feed(&mut self.hasher);
        self.blocks.push(Block {
            hash: self.hasher.finish(),
            tokens,
            breakpoint,
        });
    }

    /// The blocks.
    pub fn finish(self) -> Vec<Block> {
        self.blocks
    }
}

/// What one call's prompt was billed as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// The whole prompt: fresh, read and written tokens together.
    pub input_tokens: u64,
    /// Read from the cache.
    pub cache_read_tokens: u64,
    /// Written to the cache (both TTLs).
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, those written with the one-hour TTL.
    pub cache_write_1h_tokens: u64,
}

impl Tally {
    /// The call's usage, with `output_tokens` of output: the neutral [`Usage`] counts
    /// fresh input apart from cache reads and writes.
    pub fn usage(&self, output_tokens: u64) -> Usage {
        let fresh = self.input_tokens - self.cache_read_tokens - self.cache_write_tokens;
        Usage::new(
            fresh,
            output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        )
        .with_cache_write_1h(self.cache_write_1h_tokens)
    }
}

/// How long an entry lives after its last write or read.
pub(super) fn ttl_duration(ttl: CacheTtl) -> Duration {
    match ttl {
        CacheTtl::OneHour => Duration::from_secs(3_600),
        // The default, and what any TTL added later is taken as until modelled.
        _ => Duration::from_secs(300),
    }
}

/// The cumulative tokens at the end of each block.
pub(super) fn cumulative(blocks: &[Block]) -> Vec<u64> {
    blocks
        .iter()
        .scan(0, |sum, b| {
            *sum += b.tokens;
            Some(*sum)
        })
        .collect()
}
