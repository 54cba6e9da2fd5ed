//! Usage an upstream could not have reported truthfully, refused as a bad answer.
//!
//! A hostile or broken upstream can claim any figures (`total_tokens` of 2^64 − 2); passed
//! on, they poison the client's accounting and the server's own budgets. No call can use
//! more than its model's context window, prompt and output together, so figures past a
//! generous multiple of it are refused (502) rather than clamped: a clamped figure would
//! be just as false.

use crate::Usage;
use crate::catalog::{Catalog, Provider};
use crate::error::{ProviderError, ProviderErrorKind};

/// The window assumed for a model the catalog does not know: the largest any model has.
const UNKNOWN_WINDOW: u64 = 10_000_000;

/// How far past the window a report may go before it is refused: the catalog may be
/// behind a model's newest (larger) window, and a provider may count tokens it adds.
const SLACK: u64 = 4;

/// The most tokens a call to `model` may report.
pub(crate) fn ceiling(catalog: &Catalog, model: &str) -> u64 {
    let window = catalog
        .context_window(model)
        .map_or(UNKNOWN_WINDOW, |w| w as u64);
    window.saturating_mul(SLACK)
}

/// `response`'s usage checked as [`check`] does, against `ceiling` for each round it
/// took: the usage of the rounds answered inside the stack (artifact reads) is summed
/// into the answer's.
pub(crate) fn check_answer(
    response: &crate::ChatResponse,
    ceiling: u64,
    provider: Provider,
) -> Result<(), ProviderError> {
    let hidden = response
        .report
        .resolved_messages
        .iter()
        .filter(|m| m.role == crate::Role::Assistant)
        .count();
    let rounds = u64::try_from(hidden).map_or(u64::MAX, |n| n.saturating_add(1));
    check(&response.usage, ceiling.saturating_mul(rounds), provider)
}

/// `usage`, or the error that refuses it: any figure, or their sum, over `ceiling`.
pub(crate) fn check(usage: &Usage, ceiling: u64, provider: Provider) -> Result<(), ProviderError> {
    let total = [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    ]
    .iter()
    .try_fold(0u64, |sum, n| sum.checked_add(*n));
    match total {
        Some(total) if total <= ceiling => Ok(()),
        _ => Err(ProviderError::new(
            provider,
            ProviderErrorKind::InvalidResponse,
            format!(
                "the upstream reported a usage no call to this model could have (more than \
                 {ceiling} tokens in all): refused as a bad answer"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_usage_is_refused_and_real_usage_passes() {
        let catalog = Catalog::builtin();
        let ceiling = ceiling(&catalog, "gpt-5.4");
        assert!(ceiling >= 1_000_000, "{ceiling}");
        let real = Usage::new(180_000, 12_000, 50_000, 0);
        assert!(check(&real, ceiling, Provider::OpenAi).is_ok());
        let absurd = Usage::new(u64::MAX - 1, 0, 0, 0);
        let e = check(&absurd, ceiling, Provider::OpenAi).unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::InvalidResponse);
        // Figures that overflow only when added are refused too.
        let overflow = Usage::new(u64::MAX / 2 + 1, u64::MAX / 2 + 1, 0, 0);
        assert!(check(&overflow, ceiling, Provider::OpenAi).is_err());
        assert_eq!(
            super::ceiling(&catalog, "a-model-no-one-knows"),
            UNKNOWN_WINDOW * SLACK
        );
    }
}
