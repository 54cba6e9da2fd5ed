//! Cache-aware pruning: prune in rarer, larger steps and keep the cut where it was.
//!
//! A provider's prompt cache holds the longest prefix sent before (Anthropic and the GPT-5
//! family bill reads at a tenth of the input price). Pruning the minimum each turn moves the start of the
//! history on every call, so that cache is written again every turn and never read. With
//! [`ContextPolicy::low_water_tokens`](crate::ContextPolicy::low_water_tokens) set,
//! [`ContextPolicyLayer`](crate::ContextPolicyLayer) prunes down to the low-water mark when
//! it has to prune, remembers where it cut in a [`CutStore`], and on the session's next
//! requests drops exactly the same turns for as long as the rest fits. The history then
//! starts at the same message turn after turn and the cached prefix is read. Inside a
//! turn the oldest tool rounds go the same way (a long tool loop is one turn).
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! /// How often the first message sent changes over a 30-turn conversation.
//! async fn moves(policy: ContextPolicy) -> usize {
//!     let model = MockModel::echo();
//!     let mut agent = ServiceBuilder::new()
//!         .layer(ContextPolicyLayer::new(policy).unwrap())
//!         .service(model.clone());
//!     let mut history = Vec::new();
//!     let mut firsts = Vec::new();
//!     for turn in 0..30 {
//!         history.push(Message::user(format!("question {turn}: {}", "why? ".repeat(60))));
//!         let req = ChatRequest::new("mock", history.clone()).with_session("s1");
//!         let reply = ServiceExt::<ChatRequest>::ready(&mut agent).await.unwrap().call(req).await.unwrap();
//!         firsts.push(model.last_request().unwrap().messages[0].clone());
//!         history.push(reply.message);
//!     }
//!     firsts.windows(2).filter(|w| w[0] != w[1]).count()
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = ContextPolicy::default().with_max_context_tokens(1_300).with_reserve_tokens(100);
//! // Pruning the minimum moves the start of the history on every turn once it is full.
//! let minimal = moves(policy.clone()).await;
//! // Pruning to 400 tokens and keeping the cut moves it every few turns.
//! let cache_aware = moves(policy.with_low_water_tokens(400)).await;
//! assert!(cache_aware * 3 < minimal, "{cache_aware} vs {minimal}");
//! # }
//! ```
//!
//! The cut is identified by the messages on either side of it (a stable hash), with the
//! position as a hint, so a transcript the caller edited never lines up with a stale cut.
//! [`LocalCutStore`] keeps the cuts of the most recently used sessions of one process;
//! a cut lost (another replica, an eviction) costs one cache write, never correctness.

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;
use serde::{Deserialize, Serialize};

use crate::hash::StableHasher;
use crate::model::Message;
use crate::model::Scope;

/// Where a session's history was cut: the messages before `position` were pruned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cut {
    /// The index, in the request as received, of the first message kept after the cut.
    pub position: usize,
    /// A stable hash of the last message dropped and the first message kept.
    pub hash: u128,
}

impl Cut {
    /// The cut before `messages[position]`, or `None` when nothing precedes it.
    pub fn at(messages: &[Message], position: usize) -> Option<Cut> {
        let hash = boundary_hash(messages, position)?;
        Some(Cut { position, hash })
    }

    /// Whether this cut lies before `messages[position]`.
    pub fn is_at(&self, messages: &[Message], position: usize) -> bool {
        boundary_hash(messages, position) == Some(self.hash)
    }
}

fn boundary_hash(messages: &[Message], position: usize) -> Option<u128> {
    let before = messages.get(position.checked_sub(1)?)?;
    let after = messages.get(position)?;
    let mut h = StableHasher::new("llm-context/cut/v1");
    h.message(before);
    h.message(after);
    Some(h.finish())
}

/// Where a session's last request was cut, and where its cleared region ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cuts {
    /// Where whole turns were pruned (`None`: nothing was).
    pub history: Option<Cut>,
    /// Where tool rounds were dropped from the turns kept after `history` (a long tool
    /// loop is one turn): the boundary after the newest round dropped (`None`: none was).
    #[serde(default)]
    pub rounds: Option<Cut>,
    /// The end of the cleared region: the boundary after the newest tool result that was
    /// replaced by a stub (`None`: nothing was cleared).
    pub cleared: Option<Cut>,
    /// On a model that binds thinking: what was sent, and the thinking left out (see
    /// [`thinking`](crate::thinking)). `None`: no such model, or never sent.
    #[serde(default)]
    pub thinking: Option<crate::thinking::Binding>,
}

impl Cuts {
    /// Whether the history cut (the turns pruned, or the rounds dropped after them)
    /// differs from `previous`'s (by the messages around it, not by position).
    pub fn history_moved(&self, previous: &Cuts) -> bool {
        self.history.map(|c| c.hash) != previous.history.map(|c| c.hash)
            || self.rounds.map(|c| c.hash) != previous.rounds.map(|c| c.hash)
    }

    /// Whether the cleared region ends elsewhere than `previous`'s did.
    pub fn cleared_moved(&self, previous: &Cuts) -> bool {
        self.cleared.map(|c| c.hash) != previous.cleared.map(|c| c.hash)
    }
}

/// Remembers each session's last cuts. Calls are synchronous and must be quick: they run
/// on the request path, before the model is called.
pub trait CutStore: Send + Sync + fmt::Debug {
    /// The session's last cuts, if the session is known.
    fn get(&self, scope: &Scope, session: &str) -> Option<Cuts>;
    /// Records the session's cuts.
    fn put(&self, scope: &Scope, session: &str, cuts: Cuts);
}

/// A [`CutStore`] in memory, bounded by sessions (the least recently used is forgotten).
pub struct LocalCutStore {
    cuts: Mutex<LruCache<(String, String), Cuts>>,
}

impl LocalCutStore {
    /// The default bound: 10,000 sessions (a few hundred kilobytes).
    pub const DEFAULT_SESSIONS: NonZeroUsize = NonZeroUsize::new(10_000).unwrap();

    /// A store remembering at most `sessions` sessions.
    pub fn new(sessions: NonZeroUsize) -> Self {
        Self {
            cuts: Mutex::new(LruCache::new(sessions)),
        }
    }

    /// Sessions remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<(String, String), Cuts>> {
        // The map is left consistent by every operation, so a panic elsewhere while it
        // was held does not spoil it.
        self.cuts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for LocalCutStore {
    fn default() -> Self {
        Self::new(Self::DEFAULT_SESSIONS)
    }
}

impl fmt::Debug for LocalCutStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCutStore")
            .field("sessions", &self.len())
            .finish()
    }
}

impl CutStore for LocalCutStore {
    fn get(&self, scope: &Scope, session: &str) -> Option<Cuts> {
        self.lock().get(&(scope.key(), session.to_owned())).copied()
    }

    fn put(&self, scope: &Scope, session: &str, cuts: Cuts) {
        self.lock().put((scope.key(), session.to_owned()), cuts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_is_known_by_its_neighbours_not_its_position() {
        let a = vec![
            Message::user("a"),
            Message::assistant("b"),
            Message::user("c"),
        ];
        let cut = Cut::at(&a, 2).unwrap();
        assert!(cut.is_at(&a, 2));
        assert!(!cut.is_at(&a, 1));
        // The same position in an edited transcript is not the same cut.
        let edited = vec![
            Message::user("a"),
            Message::assistant("B"),
            Message::user("c"),
        ];
        assert!(!cut.is_at(&edited, 2));
        assert_eq!(Cut::at(&a, 0), None);
        assert_eq!(Cut::at(&a, 3), None);
    }

    #[test]
    fn cuts_recorded_before_rounds_and_thinking_were_remembered_still_read() {
        // What a replica of an earlier version left in a shared store.
        let old = r#"{"history":{"position":3,"hash":7},"cleared":null}"#;
        let cuts: Cuts = serde_json::from_str(old).unwrap();
        assert_eq!(
            cuts.history,
            Some(Cut {
                position: 3,
                hash: 7
            })
        );
        assert_eq!(
            (cuts.rounds, cuts.cleared, cuts.thinking),
            (None, None, None)
        );
    }

    #[test]
    fn the_store_is_per_tenant_and_session_and_bounded() {
        let store = LocalCutStore::new(NonZeroUsize::new(2).unwrap());
        let cut = Cuts {
            history: Some(Cut {
                position: 3,
                hash: 7,
            }),
            rounds: None,
            cleared: None,
            thinking: None,
        };
        store.put(&Scope::org(1), "s", cut);
        assert_eq!(store.get(&Scope::org(1), "s"), Some(cut));
        assert_eq!(store.get(&Scope::org(2), "s"), None);
        assert_eq!(store.get(&Scope::org(1), "t"), None);
        store.put(&Scope::org(1), "t", cut);
        store.put(&Scope::org(1), "u", cut);
        assert_eq!(store.len(), 2);
        assert_eq!(
            store.get(&Scope::org(1), "s"),
            None,
            "least recently used goes"
        );
    }
}
