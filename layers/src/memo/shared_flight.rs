//! The memo layer's side of single flight across processes (see [`MemoStore::claim`]):
//! claim a key's call or wait for another process's answer, keep the lease alive while
//! the call runs, and give it up after.
//!
//! Waiters poll the store with backoff rather than subscribe to a channel: a leader that
//! died publishes nothing, so a waiter must look at the lease anyway, and one atomic
//! "answer or claim" step per poll is cheap (at most one command per waiting request
//! every [`MAX_POLL`]) and needs no second connection.
//!
//! [`MemoStore::claim`]: super::MemoStore::claim

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use super::degrade::{degraded, skipped};
use super::key::MemoKey;
use super::lease::{Claim, MemoLease};
use super::state::MemoState;
use crate::model::ChatResponse;
use crate::trace::store_call;

/// The first wait before asking the store again, doubled up to [`MAX_POLL`]: an answer
/// that is nearly ready is seen at once, and a long call costs few commands.
const FIRST_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_millis(200);

/// The shortest renewal period, so that a store asking for zero cannot make it spin.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(10);

/// How a claim ended.
pub(crate) enum Settled {
    /// Another process answered.
    Answered(Box<ChatResponse>),
    /// This request makes the call, under the lease when the store gave one.
    Lead(Option<Box<dyn MemoLease>>),
}

/// Claims the call for `key`, or waits while another process holds it. `on_wait` runs
/// once, when this request starts to wait. A store that fails or is slow ends the wait:
/// the request makes the call itself, with a warning.
pub(crate) async fn claim_or_wait(
    shared: &MemoState,
    key: &MemoKey,
    mut on_wait: impl FnMut(),
) -> Settled {
    let mut delay = FIRST_POLL;
    let mut waiting = false;
    loop {
        if let Some(reason) = shared.breaker.skipped_for() {
            degraded("claim", key, &skipped(shared, &reason));
            return Settled::Lead(None);
        }
        let error = match store_call("memo.claim", shared.timeout, shared.store.claim(key)).await {
            Ok(claim) => {
                shared.breaker.succeeded();
                match claim {
                    Claim::Answered(response) => return Settled::Answered(response),
                    Claim::Leader(lease) => return Settled::Lead(Some(lease)),
                    Claim::Unshared => return Settled::Lead(None),
                    Claim::Held => {
                        if !waiting {
                            waiting = true;
                            on_wait();
                        }
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(MAX_POLL);
                        continue;
                    }
                }
            }
            Err(error) => error,
        };
        shared.breaker.failed(&error);
        degraded("claim", key, &error);
        return Settled::Lead(None);
    }
}

/// Runs `call`, renewing `lease` while it runs. The renewals stop with the call, or when
/// the lease is lost.
pub(crate) async fn renewing<F: Future>(
    shared: &MemoState,
    key: &MemoKey,
    lease: Option<&dyn MemoLease>,
    call: F,
) -> F::Output {
    let Some(lease) = lease else {
        return call.await;
    };
    let mut call = pin!(call);
    let mut renew = pin!(renew_until_lost(shared, key, lease));
    let mut renewing = true;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = call.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        if renewing && renew.as_mut().poll(cx).is_ready() {
            renewing = false;
        }
        Poll::Pending
    })
    .await
}

async fn renew_until_lost(shared: &MemoState, key: &MemoKey, lease: &dyn MemoLease) {
    let every = lease.renew_every().max(MIN_RENEW_EVERY);
    loop {
        tokio::time::sleep(every).await;
        match store_call("memo.renew", shared.timeout, lease.renew()).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    event = "memo_lease_lost",
                    scope = %key.scope_key(),
                    "memo lease lapsed during the call; another process may make the same call"
                );
                return;
            }
            // The lease may still hold: try again at the next period.
            Err(error) => degraded("renew", key, &error),
        }
    }
}

/// Gives the lease up, so that waiters in other processes look again at once.
pub(crate) async fn release(shared: &MemoState, key: &MemoKey, lease: Option<Box<dyn MemoLease>>) {
    let Some(lease) = lease else { return };
    if let Err(error) = store_call("memo.release", shared.timeout, lease.release()).await {
        degraded("release", key, &error);
    }
}
