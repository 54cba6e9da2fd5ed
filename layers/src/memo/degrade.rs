//! How a failing memo store is reported: the errors it stands for, and the warning.

use super::key::MemoKey;
use super::state::MemoState;
use crate::store::StoreError;

pub(super) fn skipped(shared: &MemoState, reason: &StoreError) -> StoreError {
    StoreError::new(
        reason.kind,
        format!(
            "skipped for up to {:?} after it failed: {}",
            shared.backoff, reason.message
        ),
    )
}

pub(super) fn degraded(op: &'static str, key: &MemoKey, error: &StoreError) {
    let consequence = match op {
        "get" => "calling the provider without the memo",
        "claim" => "calling the provider without sharing the call with other processes",
        "renew" => "the lease may lapse and another process make the same call",
        "release" => "waiters in other processes wait for the lease to lapse",
        _ => "the response is served but not memoized",
    };
    tracing::warn!(
        event = "memo_store_degraded",
        op,
        scope = %key.scope_key(),
        reason = %error,
        "memo store {op} failed, {consequence}: {error}"
    );
}
