//! The working context itself: prefix, tail, scratchpad and journal.
//!
//! ```
//! use llm_context_layers::{Message, PrefixContext, Role, WorkingContext};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::BoxError> {
//! let mut ctx = WorkingContext::new()
//!     .with_prefix(PrefixContext::new("You are a careful research assistant."));
//! ctx.append(Message::user("What changed in the pricing table?"))
//!     .note("ticket", "ENG-4412");
//!
//! assert_eq!(ctx.size(), 1); // the tail only
//! let roles: Vec<Role> = ctx.assembled().iter().map(|m| m.role).collect();
//! assert_eq!(roles, [Role::System, Role::User]);
//! assert_eq!(ctx.get("ticket").and_then(|v| v.as_str()), Some("ENG-4412"));
//! assert_eq!(ctx.tokens().await?, 25);
//! # Ok(()) }
//! ```
//!
//! Every mutator touches the tail or the scratchpad; none can reach the prefix, which
//! is shared by `Arc` and has no mutators at all. Changing the prefix means building a
//! new context around a new one, which is exactly the moment a prompt-cache miss is
//! expected:
//!
//! ```compile_fail
//! use std::sync::Arc;
//! use llm_context_layers::{PrefixContext, WorkingContext};
//!
//! let mut ctx = WorkingContext::new().with_prefix(PrefixContext::new("rules"));
//! *ctx.prefix() = Arc::new(PrefixContext::new("something else")); // error: `&` reference
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::diff::ContextDiff;
use super::frozen::FrozenContext;
use super::journal::MutationJournal;
use super::selection::ContextSelection;
use crate::BoxError;
use crate::model::ChatRequest;
use crate::model::Message;
use crate::model::PrefixContext;
use crate::model::Scope;
use crate::tokens::{ApproxTokenCounter, TokenCounter};

/// How [`WorkingContext::merge`] combines the other context's tail with this one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MergeMode {
    /// Append the other tail verbatim.
    #[default]
    Concat,
    /// Append only the messages not already present, comparing by value and keeping
    /// the other tail's order: what a parent fanning siblings back in wants.
    Union,
}

/// What an agent knows right now: the frozen prefix, the transcript tail, the
/// scratchpad and the journal.
///
/// | axis | accessor | shape | who uses it |
/// |---|---|---|---|
/// | prefix | [`prefix`](Self::prefix) | `Arc<PrefixContext>`, frozen | every LLM call |
/// | tail | [`messages`](Self::messages) | `Vec<Message>` | every LLM call |
/// | scratchpad | [`scratchpad`](Self::scratchpad) | string keys → JSON, ordered | cross-step notes |
/// | journal | [`journal`](Self::journal) | [`MutationJournal<J>`] | hierarchical agents |
///
/// `J` is the journal's entry type, JSON by default. A `WorkingContext` is private to its
/// owner; [`SharedContext`](super::SharedContext) is the one several tasks write to.
///
/// `Clone` copies everything, the journal's watermark included; [`fork`](Self::fork) is
/// the copy for a sub-agent, whose journal starts with the parent's entries committed.
#[derive(Clone)]
pub struct WorkingContext<J = Value> {
    prefix: Arc<PrefixContext>,
    messages: Vec<Message>,
    scratchpad: BTreeMap<String, Value>,
    journal: MutationJournal<J>,
    counter: Arc<dyn TokenCounter>,
    limit: Option<usize>,
    scope: Scope,
    session: Option<String>,
}

impl<J: fmt::Debug> fmt::Debug for WorkingContext<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkingContext")
            .field("prefix", &self.prefix)
            .field("messages", &self.messages)
            .field("scratchpad", &self.scratchpad)
            .field("journal", &self.journal)
            .field("limit", &self.limit)
            .field("scope", &self.scope)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl<J> Default for WorkingContext<J> {
    fn default() -> Self {
        Self {
            prefix: Arc::new(PrefixContext::empty()),
            messages: Vec::new(),
            scratchpad: BTreeMap::new(),
            journal: MutationJournal::new(),
            counter: Arc::new(ApproxTokenCounter),
            limit: None,
            scope: Scope::default(),
            session: None,
        }
    }
}

impl WorkingContext {
    /// An empty context with a JSON journal, an empty prefix and the approximate token
    /// counter. For a journal of your own entry type, use
    /// `WorkingContext::<MyEntry>::default()`.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<J> WorkingContext<J> {
    /// Sets the prefix. Accepts a `PrefixContext` or an `Arc` of one, so contexts can
    /// share one prefix allocation (and one prompt-cache key).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<Arc<PrefixContext>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Replaces the tail.
    #[must_use]
    pub fn with_messages(mut self, messages: impl IntoIterator<Item = Message>) -> Self {
        self.messages = messages.into_iter().collect();
        self
    }

    /// Replaces the journal.
    #[must_use]
    pub fn with_journal(mut self, journal: MutationJournal<J>) -> Self {
        self.journal = journal;
        self
    }

    /// Sets the token counter behind [`tokens`](Self::tokens).
    #[must_use]
    pub fn with_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = counter;
        self
    }

    /// Declares a token ceiling. Nothing here enforces it: the caller's policy (a
    /// `ContextPolicy`, say) owns the decision to prune or abort.
    #[must_use]
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets the tenant scope the requests built from this context carry.
    #[must_use]
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets the session (conversation id) the requests built from this context carry.
    #[must_use]
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// The frozen prefix.
    pub fn prefix(&self) -> &Arc<PrefixContext> {
        &self.prefix
    }

    /// The transcript tail.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The tail, for reshaping in place (a compactor, say). The prefix stays out of reach.
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        &mut self.messages
    }

    /// The scratchpad, ordered by key.
    pub fn scratchpad(&self) -> &BTreeMap<String, Value> {
        &self.scratchpad
    }

    /// One scratchpad value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.scratchpad.get(key)
    }

    /// One scratchpad value, for editing in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.scratchpad.get_mut(key)
    }

    /// The journal.
    pub fn journal(&self) -> &MutationJournal<J> {
        &self.journal
    }

    /// The journal, for recording and committing.
    pub fn journal_mut(&mut self) -> &mut MutationJournal<J> {
        &mut self.journal
    }

    /// The token counter.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// The declared token ceiling, if any.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The tenant scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The session, if one was set.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Appends one message to the tail.
    pub fn append(&mut self, message: Message) -> &mut Self {
        self.messages.push(message);
        self
    }

    /// Appends messages to the tail, in order.
    pub fn extend(&mut self, messages: impl IntoIterator<Item = Message>) -> &mut Self {
        self.messages.extend(messages);
        self
    }

    /// Empties the tail; the prefix, scratchpad and journal stay.
    pub fn clear_messages(&mut self) -> &mut Self {
        self.messages.clear();
        self
    }

    /// Sets one scratchpad value.
    pub fn note(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        self.scratchpad.insert(key.into(), value.into());
        self
    }

    /// Sets several scratchpad values; later writes win.
    pub fn update_scratchpad<K, V>(
        &mut self,
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self
    where
        K: Into<String>,
        V: Into<Value>,
    {
        self.scratchpad
            .extend(entries.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The number of messages in the tail (the prefix is not counted).
    pub fn size(&self) -> usize {
        self.messages.len()
    }

    /// What the provider sees: the prefix rendered to messages, then the tail. A fresh
    /// `Vec` every call, so editing it changes neither the context nor the prefix.
    pub fn assembled(&self) -> Vec<Message> {
        let mut out = self.prefix.as_messages();
        out.extend(self.messages.iter().cloned());
        out
    }

    /// The tokens of [`assembled`](Self::assembled), through the context's counter.
    ///
    /// Async because a counter may call a provider's counting endpoint; the default
    /// ([`ApproxTokenCounter`]) never waits and never fails.
    pub async fn tokens(&self) -> Result<usize, BoxError> {
        self.counter.count_messages(&self.assembled()).await
    }

    /// A narrowed copy keeping only the messages `scope` keeps, in order. Everything else
    /// (prefix, scratchpad, journal, counter, limit, scope, session) is inherited.
    #[must_use]
    pub fn slice<S: ContextSelection + ?Sized>(&self, scope: &S) -> Self
    where
        J: Clone,
    {
        // `get`, not indexing: a user's scope may name indices past the end.
        let messages = scope
            .surviving_indices(&self.messages)
            .into_iter()
            .filter_map(|i| self.messages.get(i).cloned())
            .collect();
        Self {
            prefix: self.prefix.clone(),
            messages,
            scratchpad: self.scratchpad.clone(),
            journal: self.journal.clone(),
            counter: self.counter.clone(),
            limit: self.limit,
            scope: self.scope.clone(),
            session: self.session.clone(),
        }
    }

    /// An independent copy for a sub-agent: its own tail and scratchpad, a journal
    /// seeded from this one's entries (all committed, so the child's diff carries only
    /// its own work), and the same prefix allocation, so the prompt-cache key is
    /// unchanged across the fork.
    #[must_use]
    pub fn fork(&self) -> Self
    where
        J: Clone,
    {
        Self {
            prefix: self.prefix.clone(),
            messages: self.messages.clone(),
            scratchpad: self.scratchpad.clone(),
            journal: MutationJournal::from_snapshot(self.journal.view().iter().cloned()),
            counter: self.counter.clone(),
            limit: self.limit,
            scope: self.scope.clone(),
            session: self.session.clone(),
        }
    }

    /// Fans another context back in. Its tail is appended per `mode`; its scratchpad
    /// overwrites this one key by key (last write wins); its journal's uncommitted
    /// entries are applied unchanged, so attribution survives. This context's prefix,
    /// counter, limit, scope and session are kept.
    ///
    /// Only the uncommitted entries travel because a child made by
    /// [`fork`](Self::fork) holds the parent's history as committed entries: shipping
    /// them again would duplicate the parent's journal.
    ///
    /// A [`fork`](Self::fork) shares its parent's history, so merging it back with
    /// [`MergeMode::Concat`] appends that history a second time; use
    /// [`MergeMode::Union`] for a fork.
    pub fn merge(&mut self, other: &Self, mode: MergeMode) -> &mut Self
    where
        J: Clone,
    {
        match mode {
            MergeMode::Concat => self.messages.extend(other.messages.iter().cloned()),
            MergeMode::Union => {
                let mut seen: HashSet<&Message> = self.messages.iter().collect();
                let fresh: Vec<Message> = other
                    .messages
                    .iter()
                    .filter(|m| seen.insert(m))
                    .cloned()
                    .collect();
                self.messages.extend(fresh);
            }
        }
        self.scratchpad
            .extend(other.scratchpad.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.journal.apply(other.journal.diff().iter().cloned());
        self
    }

    /// An immutable snapshot of the prefix, tail, scratchpad and journal entries. Later
    /// writes to this context do not change it: it owns its copy.
    pub fn freeze(&self) -> FrozenContext<J>
    where
        J: Clone,
    {
        FrozenContext::new(
            self.prefix.clone(),
            self.messages.clone(),
            self.scratchpad.clone(),
            self.journal.view().to_vec(),
        )
    }

    /// `self - other`, for replay and debugging: see [`ContextDiff`]. The journal is not
    /// part of it; [`MutationJournal::diff`] is the streaming view of that axis.
    pub fn diff(&self, other: &Self) -> ContextDiff {
        ContextDiff::between(
            (&self.prefix, &self.messages, &self.scratchpad),
            (&other.prefix, &other.messages, &other.scratchpad),
        )
    }

    /// A request for `model` carrying the prefix (when it renders to anything), the
    /// tail, the scope and the session, ready for the layers. For a narrowed request,
    /// slice first: `ctx.slice(&LastNTurns(2)).to_request(model)`.
    pub fn to_request(&self, model: impl Into<String>) -> ChatRequest {
        let mut request =
            ChatRequest::new(model, self.messages.clone()).with_scope(self.scope.clone());
        if !self.prefix.is_empty() {
            request = request.with_prefix(self.prefix.clone());
        }
        if let Some(session) = &self.session {
            request = request.with_session(session.clone());
        }
        request
    }
}

// Thawing lives beside the live context so that the snapshot's module need not know it.
impl<J> FrozenContext<J> {
    /// A live, writable context again (see [`WorkingContext::from`]).
    pub fn thaw(self) -> WorkingContext<J> {
        WorkingContext::from(self)
    }
}

impl<J> From<FrozenContext<J>> for WorkingContext<J> {
    /// Thaws a snapshot into a live, writable context; its journal entries start
    /// committed. The counter, limit, scope and session are the defaults.
    fn from(frozen: FrozenContext<J>) -> Self {
        let (prefix, messages, scratchpad, journal) = frozen.into_parts();
        Self {
            prefix,
            messages,
            scratchpad,
            journal: MutationJournal::from_snapshot(journal),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use crate::working::RoleFilter;
    use serde_json::json;

    fn texts(ctx: &WorkingContext) -> Vec<String> {
        ctx.messages()
            .iter()
            .map(|m| m.text().into_owned())
            .collect()
    }

    #[test]
    fn assembled_is_a_fresh_vec() {
        let prefix = Arc::new(PrefixContext::new("rules"));
        let mut ctx = WorkingContext::new().with_prefix(prefix.clone());
        ctx.append(Message::user("q"));
        let mut seen = ctx.assembled();
        seen[0] = Message::system("tampered");
        seen.push(Message::user("extra"));
        assert_eq!(ctx.assembled()[0].text(), "rules");
        assert_eq!(ctx.size(), 1);
        assert_eq!(prefix.system_prompt(), Some("rules"));
    }

    #[test]
    fn mutators_chain_and_never_reach_the_prefix() {
        let prefix = Arc::new(PrefixContext::new("rules"));
        let mut ctx = WorkingContext::new().with_prefix(prefix.clone());
        ctx.append(Message::user("q1"))
            .extend([Message::assistant("a1"), Message::user("q2")])
            .note("stage", "plan")
            .update_scratchpad([("stage", json!("act")), ("owner", json!("sre"))]);
        assert_eq!(texts(&ctx), ["q1", "a1", "q2"]);
        assert_eq!(ctx.get("stage"), Some(&json!("act")));
        ctx.clear_messages();
        assert_eq!(ctx.size(), 0);
        assert_eq!(ctx.scratchpad().len(), 2);
        assert!(Arc::ptr_eq(ctx.prefix(), &prefix));
        assert_eq!(*prefix, PrefixContext::new("rules"));
    }

    #[test]
    fn scratchpad_keys_are_ordered() {
        let mut ctx = WorkingContext::new();
        ctx.note("zeta", 1).note("alpha", 2).note("mid", 3);
        let keys: Vec<&str> = ctx.scratchpad().keys().map(String::as_str).collect();
        assert_eq!(keys, ["alpha", "mid", "zeta"]);
    }

    #[test]
    fn fork_is_independent_and_shares_the_prefix() {
        let mut parent = WorkingContext::new().with_prefix(PrefixContext::new("rules"));
        parent.append(Message::user("Summarise the incident."));
        parent.note("owner", "sre");
        parent.note("plan", json!({"steps": ["a"]}));
        parent.journal_mut().record(json!({"kind": "opened"}));

        let mut child = parent.fork();
        child.append(Message::assistant("Root cause: expired cert."));
        child.note("owner", "me");
        child.get_mut("plan").unwrap()["steps"] = json!(["a", "b"]);

        assert_eq!(
            (parent.size(), parent.get("owner")),
            (1, Some(&json!("sre")))
        );
        assert_eq!((child.size(), child.get("owner")), (2, Some(&json!("me"))));
        assert_eq!(parent.get("plan"), Some(&json!({"steps": ["a"]})));
        assert!(Arc::ptr_eq(parent.prefix(), child.prefix()));
        // The child's journal starts with the parent's history, already committed.
        assert_eq!(child.journal().view(), parent.journal().view());
        assert!(!child.journal().has_uncommitted());
    }

    #[test]
    fn fork_inherits_counter_limit_scope_and_session() {
        let parent = WorkingContext::new()
            .with_limit(1_000)
            .with_scope(Scope::org(7))
            .with_session("s1");
        let child = parent.fork();
        assert_eq!(child.limit(), Some(1_000));
        assert_eq!(child.scope(), &Scope::org(7));
        assert_eq!(child.session(), Some("s1"));
        assert!(Arc::ptr_eq(child.counter(), parent.counter()));
    }

    #[test]
    fn union_keeps_calls_that_share_an_id_but_not_arguments() {
        let call = |port| {
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new("c1", "openssl", json!({"port": port}))],
            )
        };
        let mut a = WorkingContext::new();
        a.append(call(443));
        let mut b = WorkingContext::new();
        b.append(call(8443)).append(call(443));
        let mut union = WorkingContext::new();
        union
            .merge(&a, MergeMode::Union)
            .merge(&b, MergeMode::Union);
        assert_eq!(union.messages(), [call(443), call(8443)]);
    }

    #[test]
    fn union_keeps_the_incoming_order_and_dedups_within_it() {
        let mut base = WorkingContext::new();
        base.append(Message::user("x"));
        let mut other = WorkingContext::new();
        other.extend(["c", "x", "b", "c", "a"].map(Message::user));
        base.merge(&other, MergeMode::Union);
        assert_eq!(texts(&base), ["x", "c", "b", "a"]);
    }

    #[test]
    fn merge_scratchpad_last_write_wins_and_journal_keeps_attribution() {
        let mut parent = WorkingContext::new();
        parent.note("stage", "plan").note("owner", "sre");
        parent
            .journal_mut()
            .record(json!({"kind": "opened", "agent_id": "parent"}));

        let mut child = parent.fork();
        child.note("stage", "act");
        child
            .journal_mut()
            .record(json!({"kind": "row_written", "agent_id": "enricher-a"}));

        parent.merge(&child, MergeMode::Union);
        assert_eq!(parent.get("stage"), Some(&json!("act")));
        assert_eq!(parent.get("owner"), Some(&json!("sre")));
        // The parent's own entry once, the child's entry unchanged after it.
        assert_eq!(
            parent.journal().view(),
            [
                json!({"kind": "opened", "agent_id": "parent"}),
                json!({"kind": "row_written", "agent_id": "enricher-a"}),
            ]
        );
    }

    #[test]
    fn merge_keeps_this_prefix() {
        let mut a = WorkingContext::new().with_prefix(PrefixContext::new("A"));
        let b = WorkingContext::new().with_prefix(PrefixContext::new("B"));
        a.merge(&b, MergeMode::Concat);
        assert_eq!(a.prefix().system_prompt(), Some("A"));
    }

    #[test]
    fn a_scope_naming_indices_past_the_end_does_not_panic() {
        struct Wild;
        impl ContextSelection for Wild {
            fn surviving_indices(&self, _: &[Message]) -> std::collections::BTreeSet<usize> {
                [1, 7, usize::MAX].into_iter().collect()
            }
        }
        let ctx = WorkingContext::new().with_messages([Message::user("a"), Message::user("b")]);
        assert_eq!(texts(&ctx.slice(&Wild)), ["b"]);
    }

    #[test]
    fn slice_inherits_everything_but_the_tail() {
        let mut ctx = WorkingContext::new()
            .with_prefix(PrefixContext::new("rules"))
            .with_limit(500)
            .with_session("s");
        ctx.append(Message::user("q")).note("k", 1);
        ctx.journal_mut().record(json!(1));
        let sliced = ctx.slice(&RoleFilter::default());
        assert_eq!(sliced.size(), 0);
        assert!(Arc::ptr_eq(sliced.prefix(), ctx.prefix()));
        assert_eq!(sliced.scratchpad(), ctx.scratchpad());
        assert_eq!(sliced.journal(), ctx.journal());
        assert_eq!((sliced.limit(), sliced.session()), (Some(500), Some("s")));
    }

    #[test]
    fn to_request_carries_prefix_tail_scope_and_session() {
        let prefix = Arc::new(PrefixContext::new("rules"));
        let mut ctx = WorkingContext::new()
            .with_prefix(prefix.clone())
            .with_scope(Scope::org(1))
            .with_session("ticket-4412");
        ctx.append(Message::user("q"));
        let request = ctx.to_request("gpt-5.4");
        assert_eq!(request.model, "gpt-5.4");
        assert!(Arc::ptr_eq(request.prefix.as_ref().unwrap(), &prefix));
        assert_eq!(request.messages, [Message::user("q")]);
        assert_eq!(request.scope.key(), "org1:domNone");
        assert_eq!(request.session, "ticket-4412");

        // No prefix to send, no session set: the request's own defaults.
        let bare = WorkingContext::new().to_request("m");
        assert_eq!(bare.prefix, None);
        assert_eq!(bare.session, ChatRequest::new("m", vec![]).session);
    }

    #[test]
    fn thawed_snapshot_is_writable() {
        let mut ctx = WorkingContext::new();
        ctx.append(Message::user("hello"))
            .note("plan", json!({"steps": ["a"]}));
        ctx.journal_mut().record(json!("did a thing"));
        let mut live = WorkingContext::from(ctx.freeze());
        live.note("plan", json!({"steps": ["a", "b"]}));
        live.append(Message::assistant("hi"));
        assert_eq!(live.size(), 2);
        assert_eq!(live.journal().size(), 1);
        assert!(!live.journal().has_uncommitted());
    }

    #[tokio::test]
    async fn counter_and_limit_are_declared_not_enforced() {
        struct Fixed;
        #[async_trait::async_trait]
        impl TokenCounter for Fixed {
            async fn count_messages(&self, m: &[Message]) -> Result<usize, BoxError> {
                Ok(1_000 * m.len())
            }
        }
        let mut ctx = WorkingContext::new()
            .with_counter(Arc::new(Fixed))
            .with_limit(10);
        ctx.append(Message::user("q"));
        assert_eq!(ctx.tokens().await.unwrap(), 1_000);
        // Over the ceiling, and still writable: the caller's policy owns the abort.
        ctx.append(Message::user("q2"));
        assert_eq!(ctx.limit(), Some(10));
        assert_eq!(ctx.tokens().await.unwrap(), 2_000);
    }
}
