//! The built-in figures, with where each came from.
//!
//! ```
//! use llm_context_layers::catalog::builtin::MODELS;
//!
//! let (_, sonnet) = MODELS.iter().find(|(id, _)| *id == "claude-sonnet-4-6").unwrap();
//! let price = sonnet.price.unwrap();
//! assert_eq!((price.input, price.output, price.cache_read), (3.0, 15.0, 0.30));
//! assert_eq!(sonnet.cache_min_tokens, Some(2_048));
//! ```
//!
//! Prices are USD per million tokens, standard tier, as the providers' pages (or readers
//! of them) stated them in 2026:
//!
//! * **Anthropic**: the official pricing and model pages (cache writes 1.25× input for
//!   5 minutes and 2× for one hour, reads 0.1×, with per-model exceptions). Haiku 5.5
//!   uses the ≤ 100k-token band. Sonnet 5.5 reads at $0.10, the rate from 2026-10-07.
//! * **OpenAI**: readers of the official pricing page (it could not be read directly);
//!   cache writes cost nothing extra before GPT-5.6 (so they are priced as input) and
//!   1.25× input from GPT-5.6. The GPT-5.6 Sol cache-read price was not published; 0.1×
//!   input (the GPT-5 family's discount) is assumed.
//!
//! Cache minimums are the newest official value found: Sonnet 4.6 2,048 (official
//! stored copy; later summaries say 1,024), Opus 4.6 / 4.5 and Haiku 4.5 4,096, Opus 5
//! 512, Sonnet 4.5 / 4 1,024; Opus 4.8 and Sonnet 5 1,024 from secondary sources; Opus 4.7
//! 4,096 (sources disagree between 2,048 and 4,096; the higher one never places a
//! breakpoint that cannot cache). OpenAI caches from 1,024 tokens. Models without a
//! figure use [`DEFAULT_CACHE_MIN_TOKENS`](super::DEFAULT_CACHE_MIN_TOKENS).
//!
//! Thinking binding ("preserved thinking": a thinking block valid only while everything
//! before it is unchanged): Claude Fable 5.1 and Opus 5.5 enforce it (the provider's
//! preserved-thinking page); the other built-in models do not.
//!
//! Context windows: Claude Sonnet 4.6 and the 4.6-and-later / 5.x models take 1M tokens
//! (official model pages); Claude 4.5 and Sonnet 4 models 200,000 (1M only in beta). For
//! the GPT-5.x models the catalog uses 272,000, the limit of the standard price tier
//! (longer prompts are accepted at a surcharge): pruning to it keeps the price list
//! valid. Override any of these from a file.

use super::{Catalog, ModelInfo, Price, Provider};

const fn anthropic(window: usize, min: Option<usize>, price: Price) -> ModelInfo {
    ModelInfo {
        provider: Some(Provider::Anthropic),
        context_window: Some(window),
        cache_min_tokens: min,
        price: Some(price),
        binds_thinking: None,
        edits_context: None,
        responses_only: None,
        cache_breakpoints: None,
    }
}

/// An Anthropic model that binds each thinking block to its prefix (preserved thinking).
const fn binding(info: ModelInfo) -> ModelInfo {
    ModelInfo {
        binds_thinking: Some(true),
        ..info
    }
}

const fn openai(window: usize, price: Price) -> ModelInfo {
    ModelInfo {
        provider: Some(Provider::OpenAi),
        context_window: Some(window),
        cache_min_tokens: Some(1_024),
        price: Some(price),
        binds_thinking: None,
        edits_context: None,
        responses_only: None,
        cache_breakpoints: None,
    }
}

const M1: usize = 1_000_000;
const K200: usize = 200_000;
const K272: usize = 272_000;

/// `(id, info)` for every built-in model.
pub const MODELS: &[(&str, ModelInfo)] = &[
    // Anthropic: input, output, cache read, 5m write, 1h write.
    (
        "claude-fable-5-1",
        binding(anthropic(
            M1,
            None,
            Price::new(10.0, 50.0, 0.25, 12.5, 20.0),
        )),
    ),
    (
        "claude-opus-5-5",
        binding(anthropic(M1, None, Price::new(4.0, 20.0, 0.20, 5.0, 8.0))),
    ),
    (
        "claude-opus-5",
        anthropic(M1, Some(512), Price::new(5.0, 25.0, 0.50, 6.25, 10.0)),
    ),
    (
        "claude-opus-4-8",
        anthropic(M1, Some(1_024), Price::new(5.0, 25.0, 0.50, 6.25, 10.0)),
    ),
    (
        "claude-opus-4-7",
        anthropic(M1, Some(4_096), Price::new(5.0, 25.0, 0.50, 6.25, 10.0)),
    ),
    (
        "claude-opus-4-6",
        anthropic(M1, Some(4_096), Price::new(5.0, 25.0, 0.50, 6.25, 10.0)),
    ),
    (
        "claude-opus-4-5",
        anthropic(K200, Some(4_096), Price::new(5.0, 25.0, 0.50, 6.25, 10.0)),
    ),
    (
        "claude-sonnet-5-5",
        anthropic(M1, None, Price::new(2.0, 10.0, 0.10, 2.5, 4.0)),
    ),
    (
        "claude-sonnet-5",
        anthropic(M1, Some(1_024), Price::new(2.0, 10.0, 0.20, 2.5, 4.0)),
    ),
    (
        "claude-sonnet-4-6",
        anthropic(M1, Some(2_048), Price::new(3.0, 15.0, 0.30, 3.75, 6.0)),
    ),
    (
        "claude-sonnet-4-5",
        anthropic(K200, Some(1_024), Price::new(3.0, 15.0, 0.30, 3.75, 6.0)),
    ),
    (
        "claude-sonnet-4",
        anthropic(K200, Some(1_024), Price::new(3.0, 15.0, 0.30, 3.75, 6.0)),
    ),
    (
        "claude-haiku-5-5",
        anthropic(M1, None, Price::new(0.10, 0.50, 0.01, 0.125, 0.20)),
    ),
    (
        "claude-haiku-4-5",
        anthropic(K200, Some(4_096), Price::new(1.0, 5.0, 0.10, 1.25, 2.0)),
    ),
    // OpenAI: input, output, cache read, cache write (no one-hour TTL: same price).
    (
        "gpt-5.6-sol",
        openai(K272, Price::new(5.0, 30.0, 0.50, 6.25, 6.25)),
    ),
    (
        "gpt-5.6-terra",
        openai(K272, Price::new(2.0, 12.0, 0.20, 2.5, 2.5)),
    ),
    (
        "gpt-5.6-luna",
        openai(K272, Price::new(0.20, 1.20, 0.02, 0.25, 0.25)),
    ),
    (
        "gpt-5.5",
        openai(K272, Price::new(5.0, 30.0, 0.50, 5.0, 5.0)),
    ),
    (
        "gpt-5.4",
        openai(K272, Price::new(2.5, 15.0, 0.25, 2.5, 2.5)),
    ),
    (
        "gpt-5.4-mini",
        openai(K272, Price::new(0.75, 4.5, 0.075, 0.75, 0.75)),
    ),
    (
        "gpt-5.4-nano",
        openai(K272, Price::new(0.20, 1.25, 0.02, 0.20, 0.20)),
    ),
];

pub(super) fn catalog() -> Catalog {
    Catalog {
        models: MODELS
            .iter()
            .map(|(id, info)| ((*id).to_owned(), info.clone()))
            .collect(),
    }
}
