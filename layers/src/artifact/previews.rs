//! What a session has offloaded already: the results an agent loop sends again on every
//! turn are recognised by a fast content hash and get the preview they got before,
//! without an artifact id, a preview or an artifact being made again.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message, ToolCall};
//! use serde_json::json;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let log = "GET /api/orders 500\n".repeat(1_000);
//! let mut messages = vec![
//!     Message::user("why is checkout failing?"),
//!     Message::assistant_tool_calls("", vec![ToolCall::new("c1", "read_log", json!({}))]),
//!     Message::tool_result("c1", "read_log", log.as_str()),
//! ];
//! let layer = ContextPolicyLayer::new(ContextPolicy::default()).unwrap();
//! let model = MockModel::echo();
//! let first = layer.layer(model.clone())
//!     .oneshot(ChatRequest::new("mock", messages.clone()).with_session("s"))
//!     .await
//!     .unwrap();
//! assert_eq!((first.report.offloaded_results, first.report.reused_previews), (1, 0));
//!
//! // The next turn sends the same result again: the same preview, found, not made.
//! messages.push(first.message);
//! messages.push(Message::user("and now?"));
//! let second = layer.layer(model.clone())
//!     .oneshot(ChatRequest::new("mock", messages).with_session("s"))
//!     .await
//!     .unwrap();
//! assert_eq!((second.report.offloaded_results, second.report.reused_previews), (1, 1));
//! let sent = model.requests();
//! assert_eq!(sent[0].messages[2].content, sent[1].messages[2].content);
//! # }
//! ```
//!
//! A result is known by XXH3-128 of its text within its (tenant, session): another
//! session's identical result is not its business, and a forged collision could only
//! confuse the session that sent it. The memory is bounded by the bytes of the previews
//! it holds (least recently used sessions go first) and is only a shortcut: whatever it
//! forgets is made again, to the same bytes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;
use twox_hash::XxHash3_128;

use crate::model::Scope;

/// How a result is known: XXH3-128 of its text.
pub(crate) type ContentKey = u128;

/// The key of `text`.
pub(crate) fn content_key(text: &str) -> ContentKey {
    XxHash3_128::oneshot(text.as_bytes())
}

/// What offloading (or clearing) one result made, kept for the next requests.
#[derive(Debug)]
pub(crate) struct Remembered {
    /// The artifact id.
    pub(crate) id: Arc<str>,
    /// The characters of the original text.
    pub(crate) chars: usize,
    /// Bytes the artifact holds.
    pub(crate) stored_bytes: usize,
    /// The preview sent in its place, when it was offloaded (a result only ever cleared
    /// has none).
    pub(crate) preview: Option<Preview>,
}

/// A rendered preview and its length in characters; the text is shared with the requests
/// that send it.
#[derive(Debug)]
pub(crate) struct Preview {
    pub(crate) text: Arc<str>,
    pub(crate) chars: usize,
}

impl Remembered {
    fn weight(&self) -> usize {
        // The map's own share is small next to a preview; count it so that a session of
        // thousands of cleared results is not free.
        64 + self.id.len() + self.preview.as_ref().map_or(0, |p| p.text.len())
    }
}

type SessionKey = (String, String);

/// One session's results, by content key.
#[derive(Clone, Debug, Default)]
pub(crate) struct SessionMemory {
    results: HashMap<ContentKey, Arc<Remembered>, foldhash::fast::RandomState>,
    bytes: usize,
}

impl SessionMemory {
    /// What was made for the result with this key, if it is remembered.
    pub(crate) fn get(&self, key: ContentKey) -> Option<&Arc<Remembered>> {
        self.results.get(&key)
    }
}

/// The previews each session a layer serves was sent, by content: a result sent again gets the same preview. Cloning shares it.
#[derive(Clone, Debug)]
pub(crate) struct PreviewCache {
    inner: Arc<Mutex<Inner>>,
    max_bytes: usize,
}

#[derive(Debug)]
struct Inner {
    sessions: LruCache<SessionKey, Arc<SessionMemory>>,
    bytes: usize,
}

/// The default bound: 64 MiB of previews, about ten thousand of the default size.
pub(crate) const DEFAULT_MEMORY_BYTES: usize = 64 << 20;

impl Default for PreviewCache {
    fn default() -> Self {
        Self::new(DEFAULT_MEMORY_BYTES)
    }
}

impl PreviewCache {
    /// A memory of at most `max_bytes` of previews and ids (0: remembers nothing).
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                sessions: LruCache::unbounded(),
                bytes: 0,
            })),
            max_bytes,
        }
    }

    /// An empty memory with the same bound.
    pub(crate) fn emptied(&self) -> Self {
        Self::new(self.max_bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every critical section leaves the map consistent before it can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session's memory as it is now (a snapshot: a request plans against it while
    /// another request of the session may add to it).
    pub(crate) fn session(&self, scope: &Scope, session: &str) -> Option<Arc<SessionMemory>> {
        if self.max_bytes == 0 {
            return None;
        }
        self.lock()
            .sessions
            .get(&(scope.key(), session.to_owned()))
            .cloned()
    }

    /// Records what one request made and forgets what its store no longer holds.
    pub(crate) fn update(
        &self,
        scope: &Scope,
        session: &str,
        made: Vec<(ContentKey, Remembered)>,
        lost: &HashSet<String>,
    ) {
        if self.max_bytes == 0 || (made.is_empty() && lost.is_empty()) {
            return;
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let key = (scope.key(), session.to_owned());
        let mut memory = match inner.sessions.pop(&key) {
            Some(m) => m,
            None => Arc::new(SessionMemory::default()),
        };
        inner.bytes -= memory.bytes;
        // Copy on write: a request planning against the old snapshot keeps it.
        let m = Arc::make_mut(&mut memory);
        if !lost.is_empty() {
            m.results.retain(|_, r| !lost.contains(&*r.id));
        }
        for (k, r) in made {
            m.results.entry(k).or_insert_with(|| Arc::new(r));
        }
        m.bytes = m.results.values().map(|r| r.weight()).sum();
        inner.bytes += m.bytes;
        inner.sessions.put(key.clone(), memory);
        while inner.bytes > self.max_bytes {
            let Some((_, evicted)) = inner.sessions.pop_lru() else {
                break;
            };
            inner.bytes -= evicted.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remembered(id: &str, preview_bytes: usize) -> Remembered {
        Remembered {
            id: id.into(),
            chars: 10_000,
            stored_bytes: 10_000,
            preview: Some(Preview {
                text: "p".repeat(preview_bytes).into(),
                chars: preview_bytes,
            }),
        }
    }

    #[test]
    fn the_least_recently_used_session_is_forgotten_past_the_bound() {
        let memory = PreviewCache::new(3_000);
        let s = Scope::org(1);
        memory.update(&s, "a", vec![(1, remembered("x", 1_000))], &HashSet::new());
        memory.update(&s, "b", vec![(2, remembered("y", 1_000))], &HashSet::new());
        // A use of "a" makes "b" the least recently used.
        assert!(memory.session(&s, "a").unwrap().get(1).is_some());
        memory.update(&s, "c", vec![(3, remembered("z", 1_000))], &HashSet::new());
        assert!(memory.session(&s, "b").is_none());
        assert!(memory.session(&s, "a").is_some());
        assert!(memory.session(&s, "c").is_some());
        // Another tenant's session of the same name is another session.
        assert!(memory.session(&Scope::org(2), "a").is_none());
    }

    #[test]
    fn what_the_store_lost_is_forgotten_and_a_snapshot_is_left_alone() {
        let memory = PreviewCache::new(1 << 20);
        let s = Scope::org(1);
        memory.update(
            &s,
            "a",
            vec![(1, remembered("x", 10)), (2, remembered("y", 10))],
            &HashSet::new(),
        );
        let snapshot = memory.session(&s, "a").unwrap();
        memory.update(&s, "a", Vec::new(), &HashSet::from(["x".to_owned()]));
        let now = memory.session(&s, "a").unwrap();
        assert!(now.get(1).is_none());
        assert!(now.get(2).is_some());
        // A request planning against the earlier snapshot still sees what it saw.
        assert!(snapshot.get(1).is_some());
    }

    #[test]
    fn a_zero_bound_remembers_nothing() {
        let memory = PreviewCache::new(0);
        let s = Scope::org(1);
        memory.update(&s, "a", vec![(1, remembered("x", 10))], &HashSet::new());
        assert!(memory.session(&s, "a").is_none());
    }
}
