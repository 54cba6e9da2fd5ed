//! Shared contexts: one working context several tasks write to.
//!
//! ```
//! use llm_context_layers::{Message, SharedContext, WorkingContext};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let board = SharedContext::new(WorkingContext::new());
//!
//! let worker = |name: &'static str| {
//!     let board = board.clone();
//!     async move {
//!         board
//!             .apply_locked_async(|ctx| {
//!                 Box::pin(async move {
//!                     ctx.append(Message::assistant(format!("{name}: starting")));
//!                     tokio::task::yield_now().await; // a real await mid-sequence
//!                     ctx.append(Message::assistant(format!("{name}: done")));
//!                 })
//!             })
//!             .await
//!     }
//! };
//! tokio::join!(worker("a"), worker("b"), worker("c"));
//!
//! let texts: Vec<String> = board.freeze().await.messages().iter().map(|m| m.text().into_owned()).collect();
//! assert_eq!(texts, ["a: starting", "a: done", "b: starting", "b: done", "c: starting", "c: done"]);
//! # }
//! ```
//!
//! A [`WorkingContext`] is private to its owner, and [`fork`](WorkingContext::fork)
//! covers most fan-out. A `SharedContext` is for a team blackboard. Its plain mutators
//! ([`append`](SharedContext::append), [`note`](SharedContext::note), …) take the lock
//! for the one write and need nothing from the caller. The lock itself is for
//! *sequences*: when several writes with an `.await` between them must look atomic to
//! the other tasks, or a read-modify-write must not be lost, run them inside
//! [`apply_locked`](SharedContext::apply_locked) /
//! [`apply_locked_async`](SharedContext::apply_locked_async), or hold
//! [`lock`](SharedContext::lock)'s guard.
//!
//! The lock is tokio's, so it may be held across an `.await` and waiters are served in
//! the order they arrived. Do not hold it across a model call: every other writer would
//! wait for the provider.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{Mutex, MutexGuard};

use super::context::WorkingContext;
use super::frozen::FrozenContext;
use crate::model::ChatRequest;
use crate::model::Message;

/// The future an [`apply_locked_async`](SharedContext::apply_locked_async) closure
/// returns: it borrows the locked context for `'a`.
pub type LockedFuture<'a, R> = Pin<Box<dyn Future<Output = R> + Send + 'a>>;

/// A [`WorkingContext`] behind an async lock, cheap to clone: every clone is a handle to
/// the same context.
pub struct SharedContext<J = Value> {
    inner: Arc<Mutex<WorkingContext<J>>>,
}

impl<J> Clone for SharedContext<J> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<J> Default for SharedContext<J> {
    fn default() -> Self {
        Self::new(WorkingContext::default())
    }
}

impl<J> fmt::Debug for SharedContext<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedContext").finish_non_exhaustive()
    }
}

impl<J> From<WorkingContext<J>> for SharedContext<J> {
    fn from(ctx: WorkingContext<J>) -> Self {
        Self::new(ctx)
    }
}

impl<J> SharedContext<J> {
    /// Shares `ctx`.
    pub fn new(ctx: WorkingContext<J>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(ctx)),
        }
    }

    /// Waits for the lock and returns its guard: the context is this task's until the
    /// guard drops.
    pub async fn lock(&self) -> MutexGuard<'_, WorkingContext<J>> {
        self.inner.lock().await
    }

    /// Runs a synchronous sequence of mutations under the lock.
    pub async fn apply_locked<R>(&self, f: impl FnOnce(&mut WorkingContext<J>) -> R) -> R {
        let mut guard = self.inner.lock().await;
        f(&mut guard)
    }

    /// Runs an asynchronous sequence of mutations under the lock, awaiting it inside:
    /// `board.apply_locked_async(|ctx| Box::pin(async move { … })).await`.
    ///
    /// The boxed, `Send` future keeps the caller spawnable on a multi-threaded runtime.
    pub async fn apply_locked_async<R, F>(&self, f: F) -> R
    where
        F: for<'a> FnOnce(&'a mut WorkingContext<J>) -> LockedFuture<'a, R>,
    {
        let mut guard = self.inner.lock().await;
        f(&mut guard).await
    }

    /// Appends one message.
    pub async fn append(&self, message: Message) {
        self.inner.lock().await.append(message);
    }

    /// Appends messages, in order and contiguously.
    pub async fn extend(&self, messages: impl IntoIterator<Item = Message>) {
        self.inner.lock().await.extend(messages);
    }

    /// Empties the tail.
    pub async fn clear_messages(&self) {
        self.inner.lock().await.clear_messages();
    }

    /// Sets one scratchpad value.
    pub async fn note(&self, key: impl Into<String>, value: impl Into<Value>) {
        self.inner.lock().await.note(key, value);
    }

    /// Sets several scratchpad values at once.
    pub async fn update_scratchpad<K, V>(&self, entries: impl IntoIterator<Item = (K, V)>)
    where
        K: Into<String>,
        V: Into<Value>,
    {
        self.inner.lock().await.update_scratchpad(entries);
    }

    /// Records one journal entry.
    pub async fn record(&self, entry: J) {
        self.inner.lock().await.journal_mut().record(entry);
    }

    /// The number of messages in the tail, now.
    pub async fn size(&self) -> usize {
        self.inner.lock().await.size()
    }

    /// A snapshot, taken under the lock so it never shows half a sequence.
    pub async fn freeze(&self) -> FrozenContext<J>
    where
        J: Clone,
    {
        self.inner.lock().await.freeze()
    }

    /// A private copy for a sub-agent (see [`WorkingContext::fork`]).
    pub async fn fork(&self) -> WorkingContext<J>
    where
        J: Clone,
    {
        self.inner.lock().await.fork()
    }

    /// A request built from the context as it is now (see
    /// [`WorkingContext::to_request`]). The lock is released before the request is
    /// sent anywhere.
    pub async fn to_request(&self, model: impl Into<String>) -> ChatRequest {
        self.inner.lock().await.to_request(model)
    }

    /// The context, if this is the last handle to it.
    pub fn try_into_inner(self) -> Result<WorkingContext<J>, Self> {
        Arc::try_unwrap(self.inner)
            .map(Mutex::into_inner)
            .map_err(|inner| Self { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(ctx: &WorkingContext) -> Vec<String> {
        ctx.messages()
            .iter()
            .map(|m| m.text().into_owned())
            .collect()
    }

    async fn locked_pair(board: SharedContext, name: &'static str) {
        board
            .apply_locked_async(|ctx| {
                Box::pin(async move {
                    ctx.append(Message::assistant(format!("{name}: starting")));
                    tokio::task::yield_now().await;
                    ctx.append(Message::assistant(format!("{name}: done")));
                })
            })
            .await
    }

    async fn unlocked_pair(board: SharedContext, name: &'static str) {
        board
            .append(Message::assistant(format!("{name}: starting")))
            .await;
        tokio::task::yield_now().await;
        board
            .append(Message::assistant(format!("{name}: done")))
            .await;
    }

    const SEED_ORDER: [&str; 6] = [
        "a: starting",
        "a: done",
        "b: starting",
        "b: done",
        "c: starting",
        "c: done",
    ];

    #[tokio::test]
    async fn without_the_lock_the_sequences_interleave() {
        // Why the lock exists: each write is atomic, the sequence is not.
        let board = SharedContext::new(WorkingContext::new());
        tokio::join!(
            unlocked_pair(board.clone(), "a"),
            unlocked_pair(board.clone(), "b"),
            unlocked_pair(board.clone(), "c"),
        );
        let ctx = board.try_into_inner().unwrap();
        assert_eq!(ctx.size(), 6);
        assert_ne!(texts(&ctx), SEED_ORDER);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spawned_sequences_stay_whole() {
        let board = SharedContext::new(WorkingContext::new());
        let tasks: Vec<_> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|name| tokio::spawn(locked_pair(board.clone(), name)))
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let ctx = board.try_into_inner().unwrap();
        let texts = texts(&ctx);
        for pair in texts.chunks(2) {
            let name = pair[0].strip_suffix(": starting").unwrap();
            assert_eq!(pair[1], format!("{name}: done"));
        }
    }

    #[tokio::test]
    async fn read_modify_write_is_not_lost() {
        let board = SharedContext::new(WorkingContext::new());
        board.note("count", 0).await;
        let bump = |board: SharedContext| async move {
            board
                .apply_locked_async(|ctx| {
                    Box::pin(async move {
                        let n = ctx.get("count").and_then(Value::as_u64).unwrap();
                        tokio::task::yield_now().await;
                        ctx.note("count", n + 1);
                    })
                })
                .await
        };
        tokio::join!(
            bump(board.clone()),
            bump(board.clone()),
            bump(board.clone())
        );
        assert_eq!(board.freeze().await.get("count"), Some(&json!(3)));
    }

    #[tokio::test]
    async fn plain_mutators_and_reads() {
        let board: SharedContext = SharedContext::default();
        board.append(Message::user("q")).await;
        board.extend([Message::assistant("a")]).await;
        board.note("k", 1).await;
        board.update_scratchpad([("j", 2)]).await;
        board.record(json!({"kind": "x"})).await;
        assert_eq!(board.size().await, 2);
        let sum = board
            .apply_locked(|ctx| {
                ctx.get("k").and_then(Value::as_u64).unwrap()
                    + ctx.get("j").and_then(Value::as_u64).unwrap()
            })
            .await;
        assert_eq!(sum, 3);
        let child = board.fork().await;
        assert_eq!(child.size(), 2);
        assert_eq!(board.to_request("m").await.messages.len(), 2);
        {
            let mut guard = board.lock().await;
            guard.append(Message::user("held"));
            assert!(guard.journal().has_uncommitted());
        }
        board.clear_messages().await;
        assert_eq!(board.size().await, 0);

        let other = board.clone();
        let board = board.try_into_inner().unwrap_err();
        drop(other);
        assert!(board.try_into_inner().is_ok());
    }
}
