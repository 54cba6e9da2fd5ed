//! What may be memoized: a strategy trait, its closure impl and the default.

use crate::model::{ChatRequest, MemoHint};

/// Decides whether a request may be answered from the memo and its answer stored.
///
/// A request that opts out with [`MemoHint::Never`] is never memoized, whatever the
/// predicate says: the layer checks that before asking. Any
/// `Fn(&ChatRequest) -> bool + Clone` is a predicate:
///
/// ```
/// use std::sync::Arc;
/// use llm_context_layers::memo::{LocalMemoStore, MemoLayer};
/// use llm_context_layers::ChatRequest;
///
/// // Memoize only one model's calls, whatever their temperature.
/// let layer = MemoLayer::new(Arc::new(LocalMemoStore::default()))
///     .predicate(|req: &ChatRequest| req.model == "gpt-5.4-mini");
/// # let _ = layer;
/// ```
pub trait MemoPredicate: Clone {
    /// Whether `request` may be memoized.
    fn should_memoize(&self, request: &ChatRequest) -> bool;
}

impl<F> MemoPredicate for F
where
    F: Fn(&ChatRequest) -> bool + Clone,
{
    fn should_memoize(&self, request: &ChatRequest) -> bool {
        self(request)
    }
}

/// The default predicate: memoize requests that ask for deterministic output
/// (`temperature` exactly 0) and requests that opt in with [`MemoHint::Always`].
///
/// A request without a temperature gets the provider's default, which samples, so it is
/// not memoized unless it opts in.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultPredicate;

impl MemoPredicate for DefaultPredicate {
    fn should_memoize(&self, request: &ChatRequest) -> bool {
        match request.memo {
            MemoHint::Always => true,
            MemoHint::Never => false,
            _ => request.params.temperature == Some(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    fn req() -> ChatRequest {
        ChatRequest::new("m", vec![Message::user("q")])
    }

    #[test]
    fn default_memoizes_temperature_zero_and_opt_ins_only() {
        let p = DefaultPredicate;
        assert!(p.should_memoize(&req().with_temperature(0.0)));
        assert!(!p.should_memoize(&req().with_temperature(0.7)));
        assert!(!p.should_memoize(&req()));
        assert!(p.should_memoize(&req().with_temperature(0.7).with_memo(MemoHint::Always)));
        assert!(!p.should_memoize(&req().with_temperature(0.0).with_memo(MemoHint::Never)));
    }
}
