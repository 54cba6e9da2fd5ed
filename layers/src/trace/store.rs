//! Store calls bounded by a timeout, each in a span of its own.

use std::future::Future;
use std::time::Duration;

use tracing::Instrument;
use tracing::field::Empty;

use crate::store::{StoreError, StoreErrorKind};

/// Awaits `call`, a store call the stack bounds by `timeout`, in an `llm_context.store`
/// span (`llm_context.store.operation`, e.g. `memo.get`), a child of the call waiting on
/// it. Past `timeout` the call is dropped and the answer is a
/// [`StoreErrorKind::Timeout`] error; a failure records its kind as `error.type`
/// (`Timeout`, `Unavailable`, …), so a slow store shows where a request's time went.
///
/// ```
/// use std::time::Duration;
/// use llm_context_layers::store::StoreErrorKind;
/// use llm_context_layers::trace::store_call;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let never = std::future::pending::<Result<(), _>>();
/// let error = store_call("memo.get", Duration::from_millis(5), never).await.unwrap_err();
/// assert_eq!(error.kind, StoreErrorKind::Timeout);
/// # }
/// ```
pub async fn store_call<T, F>(
    operation: &'static str,
    timeout: Duration,
    call: F,
) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, StoreError>>,
{
    let span = tracing::info_span!(
        target: "llm_context::gen_ai",
        "llm_context.store",
        llm_context.store.operation = operation,
        error.type = Empty,
        otel.status_code = Empty,
    );
    let result = match tokio::time::timeout(timeout, call)
        .instrument(span.clone())
        .await
    {
        Ok(result) => result,
        Err(_) => Err(StoreError::new(
            StoreErrorKind::Timeout,
            format!("no answer within {timeout:?}"),
        )),
    };
    if let Err(e) = &result
        && !span.is_disabled()
    {
        super::failed(&span, &format!("{:?}", e.kind));
    }
    result
}
