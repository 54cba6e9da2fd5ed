//! Anthropic's prompt cache: explicit breakpoints, a 20-block lookback, TTLs refreshed on
//! read, and the model's minimum cacheable length.

use std::collections::HashMap;
use std::time::Duration;

use llm_context_layers::hash::StableHasher;
use llm_context_layers::tokens::{IMAGE_TOKENS, OVERHEAD_TOKENS, char_count, json_chars};
use llm_context_layers::{CacheTtl, ChatRequest};

use super::cache::{Block, Chain, Tally, cumulative, ttl_duration};
use crate::error::ProviderError;
use crate::wire::messages::convert::{Rendered, render};
use crate::wire::messages::types::{
    CacheControl, ContentBlockParam, ImageSource, ToolResultContent,
};

/// How far back a breakpoint looks for an earlier entry: its own block and the 19 before.
pub const LOOKBACK_BLOCKS: usize = 20;

/// Anthropic's cache for one organisation, over a run of calls.
///
/// Per call, in the order tools → system → messages:
///
/// * **read**: from each breakpoint whose prefix reaches the minimum, the newest
///   unexpired entry among its block and the [`LOOKBACK_BLOCKS`]` - 1` before it; the
///   longest of those is read, and reading refreshes its TTL;
/// * **write**: every such breakpoint writes an entry at its block (or refreshes it);
///   the tokens from the read point, or from the previous breakpoint's write, up to it
///   are billed as writes at its TTL's rate;
/// * a breakpoint below the minimum does nothing; tokens after the last breakpoint are
///   plain input;
/// * an entry expires its TTL after its last write or read.
///
/// A block's hash covers everything before it, so any change earlier in the prompt
/// (a tool, the system prompt, a pruned message) misses every later entry.
///
/// ```
/// use std::time::Duration;
/// use llm_context::simulate::{AnthropicCache, Chain};
/// use llm_context::CacheTtl;
///
/// let mut prompt = Chain::new("doc");
/// prompt.push(3_000, Some(CacheTtl::FiveMinutes), |h| h.str("system prompt"));
/// prompt.push(500, None, |h| h.str("question"));
/// let blocks = prompt.finish();
///
/// let mut cache = AnthropicCache::new(1_024);
/// let first = cache.call(&blocks, Duration::ZERO);
/// assert_eq!((first.cache_read_tokens, first.cache_write_tokens), (0, 3_000));
/// let again = cache.call(&blocks, Duration::from_secs(60));
/// assert_eq!((again.cache_read_tokens, again.cache_write_tokens), (3_000, 0));
/// ```
#[derive(Clone, Debug, Default)]
pub struct AnthropicCache {
    min_tokens: u64,
    /// By the hash of the prefix they hold: each entry's TTL and when it expires.
    entries: HashMap<u128, (CacheTtl, Duration)>,
}

impl AnthropicCache {
    /// An empty cache for a model that caches prefixes of at least `min_tokens`.
    pub fn new(min_tokens: u64) -> Self {
        Self {
            min_tokens,
            entries: HashMap::new(),
        }
    }

    /// Bills one call whose prompt is `blocks`, made at `now` (from any fixed origin), and
    /// updates the cache as the provider would.
    pub fn call(&mut self, blocks: &[Block], now: Duration) -> Tally {
        // Expired entries can never be read again: forget them, so memory stays bounded.
        self.entries.retain(|_, (_, expires)| *expires > now);
        let tokens = cumulative(blocks);
        let marks: Vec<(usize, CacheTtl)> = blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| Some((i, b.breakpoint?)))
            .filter(|&(i, _)| tokens[i] >= self.min_tokens)
            .collect();

        let read = marks
            .iter()
            .filter_map(|&(at, _)| {
                let from = at.saturating_sub(LOOKBACK_BLOCKS - 1);
                (from..=at)
                    .rev()
                    .find(|&j| self.entries.contains_key(&blocks[j].hash))
            })
            .max();
        if let Some(j) = read
            && let Some((ttl, expires)) = self.entries.get_mut(&blocks[j].hash)
        {
            *expires = now + ttl_duration(*ttl);
        }

        let read_tokens = read.map_or(0, |j| tokens[j]);
        let mut billed = read_tokens;
        let (mut writes, mut writes_1h) = (0, 0);
        for &(at, ttl) in &marks {
            if tokens[at] > billed {
                let n = tokens[at] - billed;
                writes += n;
                if ttl == CacheTtl::OneHour {
                    writes_1h += n;
                }
                billed = tokens[at];
            }
            // A breakpoint inside what was read bills nothing: its tokens were read.
            self.entries
                .insert(blocks[at].hash, (ttl, now + ttl_duration(ttl)));
        }
        Tally {
            input_tokens: tokens.last().copied().unwrap_or(0),
            cache_read_tokens: read_tokens,
            cache_write_tokens: writes,
            cache_write_1h_tokens: writes_1h,
        }
    }
}

/// The blocks of `req` as the Anthropic client sends it (its own rendering: system
/// blocks, merged messages, `cache_control` markers), in cache order: each tool, each
/// system block, each content block of each message. Tokens are the crate's estimate
/// (4 + ⌊characters / 4⌋ a block, as for a message).
pub fn blocks(req: &ChatRequest) -> Result<Vec<Block>, ProviderError> {
    let Rendered {
        system,
        messages,
        tools,
    } = render(
        req.prefix.as_deref(),
        &req.messages,
        &req.tools,
        req.cache,
        false,
    )?;
    let mut chain = Chain::new("llm-context/simulate/anthropic/v1");
    for t in &tools {
        let chars = char_count(&t.name)
            + t.description.as_deref().map_or(0, char_count)
            + json_chars(&t.input_schema);
        chain.push(estimate(chars), ttl(t.cache_control), |h| {
            h.str("tool");
            h.str(&t.name);
            h.opt_str(t.description.as_deref());
            h.json(&t.input_schema);
        });
    }
    for s in &system {
        chain.push(estimate(char_count(&s.text)), ttl(s.cache_control), |h| {
            h.str("system");
            h.str(&s.text);
        });
    }
    for m in &messages {
        for (k, b) in m.content.iter().enumerate() {
            let (tokens, cc) = block_size(b);
            chain.push(tokens, ttl(cc), |h| {
                if k == 0 {
                    // Where a message starts, and whose it is, is part of the prompt.
                    h.str(match m.role {
                        crate::wire::messages::types::InputRole::User => "user",
                        _ => "assistant",
                    });
                }
                feed(h, b);
            });
        }
    }
    Ok(chain.finish())
}

fn estimate(chars: usize) -> u64 {
    (OVERHEAD_TOKENS + chars / 4) as u64
}

fn ttl(cc: Option<CacheControl>) -> Option<CacheTtl> {
    cc.map(|c| match c.ttl {
        Some("1h") => CacheTtl::OneHour,
        _ => CacheTtl::FiveMinutes,
    })
}

/// A block's estimated tokens and its marker.
fn block_size(b: &ContentBlockParam) -> (u64, Option<CacheControl>) {
    match b {
        ContentBlockParam::Text {
            text,
            cache_control,
        } => (estimate(char_count(text)), *cache_control),
        ContentBlockParam::Image { cache_control, .. } => (IMAGE_TOKENS as u64, *cache_control),
        // As the estimate counts reasoning: the text (or the data), not the signature.
        ContentBlockParam::Thinking { thinking, .. } => (estimate(char_count(thinking)), None),
        ContentBlockParam::RedactedThinking { data } => (estimate(char_count(data)), None),
        ContentBlockParam::ToolUse {
            id,
            name,
            input,
            cache_control,
        } => (
            // The call's own overhead, as the estimate counts one per tool call.
            estimate(char_count(id) + char_count(name) + json_chars(input))
                + OVERHEAD_TOKENS as u64,
            *cache_control,
        ),
        ContentBlockParam::ToolResult {
            tool_use_id,
            content,
            cache_control,
        } => {
            let inner = match content {
                None => 0,
                Some(ToolResultContent::Text(t)) => estimate(char_count(t)),
                Some(ToolResultContent::Blocks(blocks)) => {
                    blocks.iter().map(|b| block_size(b).0).sum()
                }
            };
            (estimate(char_count(tool_use_id)) + inner, *cache_control)
        }
        // As the estimate counts an opaque part: its JSON.
        ContentBlockParam::Other(block) => (estimate(json_chars(block)), None),
    }
}

/// Hashes a block's content; its `cache_control` is left out (see [`Chain::push`]).
fn feed(h: &mut StableHasher, b: &ContentBlockParam) {
    match b {
        ContentBlockParam::Text { text, .. } => {
            h.str("text");
            h.str(text);
        }
        ContentBlockParam::Image { source, .. } => {
            h.str("image");
            match source {
                ImageSource::Base64 { media_type, data } => {
                    h.str(media_type);
                    h.str(data);
                }
                ImageSource::Url { url } => h.str(url),
            }
        }
        ContentBlockParam::Thinking {
            thinking,
            signature,
        } => {
            h.str("thinking");
            h.str(thinking);
            h.str(signature);
        }
        ContentBlockParam::RedactedThinking { data } => {
            h.str("redacted_thinking");
            h.str(data);
        }
        ContentBlockParam::ToolUse {
            id, name, input, ..
        } => {
            h.str("tool_use");
            h.str(id);
            h.str(name);
            h.json(input);
        }
        ContentBlockParam::ToolResult {
            tool_use_id,
            content,
            ..
        } => {
            h.str("tool_result");
            h.str(tool_use_id);
            match content {
                None => h.u64(0),
                Some(ToolResultContent::Text(t)) => {
                    h.u64(1);
                    h.str(t);
                }
                Some(ToolResultContent::Blocks(blocks)) => {
                    h.u64(2 + blocks.len() as u64);
                    for b in blocks {
                        feed(h, b);
                    }
                }
            }
        }
        ContentBlockParam::Other(block) => {
            h.str("other");
            h.json(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_context_layers::{CacheHints, Message, ToolSpec};
    use serde_json::json;

    const FIVE: Option<CacheTtl> = Some(CacheTtl::FiveMinutes);
    const HOUR: Option<CacheTtl> = Some(CacheTtl::OneHour);
    const MIN: u64 = 1_024;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Blocks named by `text` (so equal names make equal prefixes), with tokens and marks.
    fn prompt(blocks: &[(&str, u64, Option<CacheTtl>)]) -> Vec<Block> {
        let mut chain = Chain::new("test");
        for &(text, tokens, mark) in blocks {
            chain.push(tokens, mark, |h| h.str(text));
        }
        chain.finish()
    }

    fn billed(t: Tally) -> (u64, u64, u64) {
        (t.input_tokens, t.cache_read_tokens, t.cache_write_tokens)
    }

    #[test]
    fn a_write_then_a_read() {
        let mut cache = AnthropicCache::new(MIN);
        let first = prompt(&[("system", 2_000, FIVE), ("q1", 300, None)]);
        // Nothing cached yet: the 2,000 tokens up to the breakpoint are written, the
        // 300 after it are plain input.
        assert_eq!(billed(cache.call(&first, secs(0))), (2_300, 0, 2_000));

        // The same system prompt, a new question, a breakpoint after an answer.
        let second = prompt(&[
            ("system", 2_000, FIVE),
            ("q1", 300, None),
            ("a1", 200, FIVE),
            ("q2", 100, None),
        ]);
        // Read 2,000 (the first entry, two blocks back); write 300 + 200 = 500 up to
        // the new breakpoint; 100 plain.
        assert_eq!(billed(cache.call(&second, secs(60))), (2_600, 2_000, 500));
    }

    #[test]
    fn an_hour_breakpoint_bills_hour_writes() {
        let mut cache = AnthropicCache::new(MIN);
        let p = prompt(&[("tools", 1_500, HOUR), ("system", 1_000, FIVE)]);
        let t = cache.call(&p, secs(0));
        assert_eq!(
            (t.cache_write_tokens, t.cache_write_1h_tokens),
            (2_500, 1_500)
        );
        // At 6 minutes the 5-minute entry is gone and the hour one is read.
        assert_eq!(billed(cache.call(&p, secs(360))), (2_500, 1_500, 1_000));
    }

    #[test]
    fn an_expired_entry_is_written_again() {
        let mut cache = AnthropicCache::new(MIN);
        let p = prompt(&[("system", 3_000, FIVE), ("q", 100, None)]);
        assert_eq!(billed(cache.call(&p, secs(0))), (3_100, 0, 3_000));
        // Six minutes later: no read, the same write again.
        assert_eq!(billed(cache.call(&p, secs(360))), (3_100, 0, 3_000));
        // A read at 4 minutes refreshes the entry, so it is still there 4 minutes after.
        assert_eq!(billed(cache.call(&p, secs(600))), (3_100, 3_000, 0));
        assert_eq!(billed(cache.call(&p, secs(840))), (3_100, 3_000, 0));
    }

    #[test]
    fn below_the_minimum_nothing_is_cached() {
        let mut cache = AnthropicCache::new(MIN);
        let p = prompt(&[("system", 1_000, FIVE), ("q", 20, None)]);
        assert_eq!(billed(cache.call(&p, secs(0))), (1_020, 0, 0));
        assert_eq!(billed(cache.call(&p, secs(10))), (1_020, 0, 0));
    }

    #[test]
    fn the_lookback_is_twenty_blocks() {
        // An entry at block 0, then 20 blocks of 10 tokens: a breakpoint on block 19
        // is 20 blocks from it counting itself (finds it), one on block 20 is 21 (misses).
        let names: Vec<String> = (1..=20).map(|i| format!("b{i}")).collect();
        let with_mark_at = |last: usize| {
            let mut spec = vec![("system", 2_000, None)];
            spec.extend(names[..last].iter().map(|n| (n.as_str(), 10, None)));
            spec.last_mut().unwrap().2 = FIVE;
            prompt(&spec)
        };

        let mut cache = AnthropicCache::new(MIN);
        cache.call(&with_mark_at(0), secs(0));
        // Blocks 0..=19: read 2,000, write the 19 blocks after it, 190 tokens.
        assert_eq!(
            billed(cache.call(&with_mark_at(19), secs(10))),
            (2_190, 2_000, 190)
        );

        let mut cache = AnthropicCache::new(MIN);
        cache.call(&with_mark_at(0), secs(0));
        // Blocks 0..=20: the entry at 0 is out of reach, so all 2,200 are written.
        assert_eq!(
            billed(cache.call(&with_mark_at(20), secs(10))),
            (2_200, 0, 2_200)
        );
    }

    #[test]
    fn a_changed_tool_invalidates_everything_after_it() {
        let mut cache = AnthropicCache::new(MIN);
        let before = prompt(&[("tool v1", 500, FIVE), ("system", 2_000, FIVE)]);
        assert_eq!(billed(cache.call(&before, secs(0))), (2_500, 0, 2_500));
        // The same system text after a different tool: its prefix differs, so nothing
        // is read, and both breakpoints write again.
        let after = prompt(&[("tool v2", 500, FIVE), ("system", 2_000, FIVE)]);
        assert_eq!(billed(cache.call(&after, secs(30))), (2_500, 0, 2_500));
    }

    #[test]
    fn requests_render_as_the_client_sends_them() {
        let req = ChatRequest::new(
            "claude-sonnet-4-6",
            vec![
                Message::system("s".repeat(8_000)),
                Message::user("hello"),
                Message::assistant("hi"),
                Message::user("next"),
            ],
        )
        .with_tools(vec![ToolSpec::new("t", "", json!({"type": "object"}))]);
        let mut marked = req.clone();
        marked.cache = CacheHints::all(CacheTtl::FiveMinutes);
        let plain = blocks(&req).unwrap();
        let with_marks = blocks(&marked).unwrap();
        // One tool, one system block, three messages of one block each.
        assert_eq!(plain.len(), 5);
        // "s" × 8,000: 4 + 2,000 tokens.
        assert_eq!(plain[1].tokens, 2_004);
        // Markers on the tool, the system block, the message before "next" and the last
        // block (the rolling one); the hashes do not depend on them.
        let marks: Vec<bool> = with_marks.iter().map(|b| b.breakpoint.is_some()).collect();
        assert_eq!(marks, [true, true, false, true, true]);
        let hashes = |b: &[Block]| b.iter().map(|b| b.hash).collect::<Vec<_>>();
        assert_eq!(hashes(&plain), hashes(&with_marks));

        // Another description of the one tool: no block of the prompt is the same.
        let mut retooled = req;
        retooled.tools[0].description = "changed".into();
        let other = blocks(&retooled).unwrap();
        assert!(plain.iter().zip(&other).all(|(a, b)| a.hash != b.hash));
        assert_eq!(
            plain[1..].iter().map(|b| b.tokens).collect::<Vec<_>>(),
            other[1..].iter().map(|b| b.tokens).collect::<Vec<_>>()
        );
    }
}
