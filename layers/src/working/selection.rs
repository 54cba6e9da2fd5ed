//! Slice scopes: which messages of a tail a narrowed view keeps.
//!
//! ```
//! use llm_context_layers::working::{AllOf, LastNTurns, Not, RoleFilter};
//! use llm_context_layers::{Message, Role, WorkingContext};
//!
//! let mut ctx = WorkingContext::new();
//! ctx.append(Message::system("House rules."));
//! for i in 0..3 {
//!     ctx.append(Message::user(format!("q{i}")))
//!         .append(Message::assistant(format!("a{i}")));
//! }
//!
//! let texts = |c: &WorkingContext| c.messages().iter().map(|m| m.text().into_owned()).collect::<Vec<_>>();
//! assert_eq!(texts(&ctx.slice(&LastNTurns(2))), ["House rules.", "q1", "a1", "q2", "a2"]);
//!
//! // The window survives composition: kept, and the system message dropped.
//! let inside = AllOf((LastNTurns(2), Not(RoleFilter::new([Role::System]))));
//! assert_eq!(texts(&ctx.slice(&inside)), ["q1", "a1", "q2", "a2"]);
//! ```
//!
//! There are two kinds of scope. A *per-message* scope ([`MessageSelection`]) decides each
//! message from the message and its index alone: [`RoleFilter`], [`Tagged`], [`Since`].
//! A *positional* scope decides over the whole list, because what it keeps is a property
//! of the list: [`LastNTurns`] ("the last two turns" says nothing about any one message).
//!
//! Every scope answers [`ContextSelection::surviving_indices`], and the combinators
//! ([`AllOf`], [`AnyOf`], [`Not`]) compose in that index space — intersection, union,
//! complement — so a window keeps working at any nesting depth. Asking a positional
//! scope about one message alone ([`ContextSelection::matches`]) is a
//! [`PositionalSelectionError`], never a guess: a guess of "keep" is exactly how a window
//! used to evaporate inside a combinator.
//!
//! Scopes are plain values: the built-ins, and combinations of anything that is itself
//! `Clone`, `Eq`, `Hash` and serde, are all of those too, so a scope can be a cache key
//! or a line of configuration. Write your own of either kind by implementing
//! [`MessageSelection`] (per message) or [`ContextSelection`] (positional).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Message, Role};

/// A positional scope was asked about one message alone.
///
/// The answer depends on the whole list; use [`ContextSelection::surviving_indices`] (which
/// [`WorkingContext::slice`](crate::WorkingContext::slice) does).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{scope}` is a positional scope: it decides over the whole message list, not one \
     message; use `surviving_indices`"
)]
#[non_exhaustive]
pub struct PositionalSelectionError {
    /// The type name of the scope that refused.
    pub scope: &'static str,
}

impl PositionalSelectionError {
    /// The error for scope type `S`.
    pub fn of<S: ?Sized>() -> Self {
        Self {
            scope: std::any::type_name::<S>(),
        }
    }
}

/// Any scope: decides which indices of a message list survive.
///
/// Implement this directly for a positional scope (one that needs the whole list); for a
/// per-message scope implement [`MessageSelection`] instead, which provides this trait.
///
/// ```
/// use std::collections::BTreeSet;
/// use llm_context_layers::working::{ContextSelection, PositionalSelectionError};
/// use llm_context_layers::{Message, WorkingContext};
///
/// /// The first `n` messages: positional, since "first" is a property of the list.
/// struct Head(usize);
///
/// impl ContextSelection for Head {
///     fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
///         (0..self.0.min(messages.len())).collect()
///     }
/// }
///
/// let ctx = WorkingContext::new().with_messages(vec![Message::user("a"), Message::user("b")]);
/// assert_eq!(ctx.slice(&Head(1)).size(), 1);
/// // The default `matches` refuses rather than guessing.
/// assert!(Head(1).matches(&Message::user("a"), 0).is_err());
/// ```
pub trait ContextSelection: Send + Sync {
    /// The indices of `messages` this scope keeps.
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize>;

    /// Decides one message from itself and its index alone.
    ///
    /// Positional scopes cannot, and the default refuses with a
    /// [`PositionalSelectionError`]; per-message scopes answer through [`MessageSelection`].
    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        let _ = (message, index);
        Err(PositionalSelectionError::of::<Self>())
    }
}

/// A per-message scope: the decision for a message depends only on it and its index.
///
/// Every `MessageSelection` is a [`ContextSelection`], so it composes with the built-ins.
///
/// ```
/// use llm_context_layers::working::{AllOf, LastNTurns, MessageSelection};
/// use llm_context_layers::{Message, WorkingContext};
///
/// /// Messages that mention a word.
/// struct Mentions(&'static str);
///
/// impl MessageSelection for Mentions {
///     fn keeps(&self, message: &Message, _index: usize) -> bool {
///         message.text().contains(self.0)
///     }
/// }
///
/// let ctx = WorkingContext::new().with_messages(vec![
///     Message::user("cert expired?"),
///     Message::assistant("yes, the cert expired"),
///     Message::user("renew it"),
/// ]);
/// assert_eq!(ctx.slice(&Mentions("cert")).size(), 2);
/// assert_eq!(ctx.slice(&AllOf((LastNTurns(1), Mentions("cert")))).size(), 0);
/// ```
pub trait MessageSelection: Send + Sync {
    /// Whether the message at `index` is kept.
    fn keeps(&self, message: &Message, index: usize) -> bool;
}

impl<T: MessageSelection + ?Sized> ContextSelection for T {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        messages
            .iter()
            .enumerate()
            .filter(|(i, m)| self.keeps(m, *i))
            .map(|(i, _)| i)
            .collect()
    }

    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        Ok(self.keeps(message, index))
    }
}

// Forwarding impls so scopes chosen at run time compose too. `Box<S>` for a generic `S`
// would overlap the blanket impl above (`Box` is fundamental), hence the trait object.
impl ContextSelection for Box<dyn ContextSelection> {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        (**self).surviving_indices(messages)
    }

    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        (**self).matches(message, index)
    }
}

impl<S: ContextSelection + ?Sized> ContextSelection for Arc<S> {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        (**self).surviving_indices(messages)
    }

    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        (**self).matches(message, index)
    }
}

/// The last `n` turns, plus every system message.
///
/// A turn starts at a real user request ([`Message::is_user_request`]) and runs to the
/// next one, so tool calls and their results (whatever role a provider gives results)
/// stay with their turn. Non-system messages before the first request count as one turn,
/// as they do for pruning. With fewer than `n` turns, everything is kept; `LastNTurns(0)`
/// keeps only the system messages.
///
/// Positional: [`matches`](ContextSelection::matches) refuses.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct LastNTurns(pub usize);

impl ContextSelection for LastNTurns {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        // The same turns the pruning layer sees: a turn starts at a real user request,
        // and what comes before the first one (after the system head) is a turn too.
        let turns = crate::fit::Layout::of(messages).turns;
        let window_start = match self.0 {
            0 => messages.len(),
            n if n <= turns.len() => turns[turns.len() - n].range.start(),
            _ => 0,
        };
        messages
            .iter()
            .enumerate()
            .filter(|(i, m)| *i >= window_start || m.role == Role::System)
            .map(|(i, _)| i)
            .collect()
    }
}

/// Messages whose role is in the set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RoleFilter(pub BTreeSet<Role>);

impl RoleFilter {
    /// A filter keeping the given roles.
    pub fn new(roles: impl IntoIterator<Item = Role>) -> Self {
        Self(roles.into_iter().collect())
    }
}

impl MessageSelection for RoleFilter {
    fn keeps(&self, message: &Message, _index: usize) -> bool {
        self.0.contains(&message.role)
    }
}

/// Messages whose `name` equals the tag.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tagged(pub String);

impl Tagged {
    /// A scope keeping messages named `tag`.
    pub fn new(tag: impl Into<String>) -> Self {
        Self(tag.into())
    }
}

impl MessageSelection for Tagged {
    fn keeps(&self, message: &Message, _index: usize) -> bool {
        message.name() == Some(self.0.as_str())
    }
}

/// Messages at or after a checkpoint index.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Since(pub usize);

impl MessageSelection for Since {
    fn keeps(&self, _message: &Message, index: usize) -> bool {
        index >= self.0
    }
}

/// A list of scopes inside [`AllOf`] or [`AnyOf`]: a tuple of up to eight scopes of any
/// types, or a `Vec` or array of one type (`Vec<Box<dyn ContextSelection>>` for a list chosen
/// at run time).
pub trait SelectionList: Send + Sync {
    /// How many scopes the list holds.
    fn len(&self) -> usize;

    /// Whether the list holds no scope.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The scope at `i`, for `i < len()`.
    fn get(&self, i: usize) -> Option<&dyn ContextSelection>;
}

impl<S: ContextSelection> SelectionList for Vec<S> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn get(&self, i: usize) -> Option<&dyn ContextSelection> {
        self.as_slice().get(i).map(|s| s as &dyn ContextSelection)
    }
}

impl<S: ContextSelection, const N: usize> SelectionList for [S; N] {
    fn len(&self) -> usize {
        N
    }

    fn get(&self, i: usize) -> Option<&dyn ContextSelection> {
        self.as_slice().get(i).map(|s| s as &dyn ContextSelection)
    }
}

macro_rules! tuple_scope_list {
    ($len:literal; $($name:ident $idx:tt),+) => {
        impl<$($name: ContextSelection),+> SelectionList for ($($name,)+) {
            fn len(&self) -> usize {
                $len
            }

            fn get(&self, i: usize) -> Option<&dyn ContextSelection> {
                match i {
                    $($idx => Some(&self.$idx as &dyn ContextSelection),)+
                    _ => None,
                }
            }
        }
    };
}

tuple_scope_list!(1; A 0);
tuple_scope_list!(2; A 0, B 1);
tuple_scope_list!(3; A 0, B 1, C 2);
tuple_scope_list!(4; A 0, B 1, C 2, D 3);
tuple_scope_list!(5; A 0, B 1, C 2, D 3, E 4);
tuple_scope_list!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_scope_list!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_scope_list!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

fn scopes<L: SelectionList + ?Sized>(list: &L) -> impl Iterator<Item = &dyn ContextSelection> {
    (0..list.len()).filter_map(|i| list.get(i))
}

/// Messages every inner scope keeps: the intersection of their surviving indices. An
/// empty list keeps everything.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct AllOf<L>(pub L);

impl<L: SelectionList> ContextSelection for AllOf<L> {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        let mut kept: BTreeSet<usize> = (0..messages.len()).collect();
        for scope in scopes(&self.0) {
            if kept.is_empty() {
                break;
            }
            let inner = scope.surviving_indices(messages);
            kept.retain(|i| inner.contains(i));
        }
        kept
    }

    /// Refuses if any inner scope is positional, whatever the others say: the answer
    /// must not depend on the order of the list.
    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        let mut all = true;
        for scope in scopes(&self.0) {
            all &= scope.matches(message, index)?;
        }
        Ok(all)
    }
}

/// Messages any inner scope keeps: the union of their surviving indices. An empty list
/// keeps nothing.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct AnyOf<L>(pub L);

impl<L: SelectionList> ContextSelection for AnyOf<L> {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        let mut kept = BTreeSet::new();
        for scope in scopes(&self.0) {
            kept.extend(scope.surviving_indices(messages));
        }
        kept
    }

    /// Refuses if any inner scope is positional, whatever the others say.
    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        let mut any = false;
        for scope in scopes(&self.0) {
            any |= scope.matches(message, index)?;
        }
        Ok(any)
    }
}

/// Messages the inner scope drops: the complement of its surviving indices.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Not<S>(pub S);

impl<S: ContextSelection> ContextSelection for Not<S> {
    fn surviving_indices(&self, messages: &[Message]) -> BTreeSet<usize> {
        let inner = self.0.surviving_indices(messages);
        (0..messages.len()).filter(|i| !inner.contains(i)).collect()
    }

    fn matches(&self, message: &Message, index: usize) -> Result<bool, PositionalSelectionError> {
        self.0.matches(message, index).map(|kept| !kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use serde_json::json;

    fn six() -> Vec<Message> {
        (0..3)
            .flat_map(|i| {
                [
                    Message::user(format!("q{i}")),
                    Message::assistant(format!("a{i}")),
                ]
            })
            .collect()
    }

    fn with_rules() -> Vec<Message> {
        let mut m = vec![Message::system("House rules.")];
        m.extend(six());
        m
    }

    fn kept(scope: &dyn ContextSelection, messages: &[Message]) -> Vec<usize> {
        scope.surviving_indices(messages).into_iter().collect()
    }

    #[test]
    fn last_n_turns_keeps_the_window_and_every_system_message() {
        let m = with_rules();
        assert_eq!(kept(&LastNTurns(1), &m), [0, 5, 6]);
        assert_eq!(kept(&LastNTurns(2), &m), [0, 3, 4, 5, 6]);
        assert_eq!(kept(&LastNTurns(3), &m), [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(kept(&LastNTurns(9), &m), [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(kept(&LastNTurns(0), &m), [0]);
        assert_eq!(kept(&LastNTurns(2), &[]), Vec::<usize>::new());
    }

    #[test]
    fn a_system_message_inside_the_history_is_kept() {
        let mut m = six();
        m.insert(1, Message::system("mid-run correction"));
        // q0 sys a0 q1 a1 q2 a2: the last turn is q2 a2, and the system message stays.
        assert_eq!(kept(&LastNTurns(1), &m), [1, 5, 6]);
    }

    #[test]
    fn tool_results_sent_as_user_do_not_open_a_turn() {
        let m = vec![
            Message::user("check the cert"),
            Message::assistant_tool_calls("", vec![ToolCall::new("c1", "openssl", json!({}))]),
            Message::user("notAfter=2026-08-01").with_tool_call_id("c1"),
            Message::assistant("it expires in August"),
        ];
        assert_eq!(kept(&LastNTurns(1), &m), [0, 1, 2, 3]);
    }

    #[test]
    fn a_preamble_counts_as_a_turn() {
        let m = vec![
            Message::assistant("hello, how can I help?"),
            Message::user("q"),
            Message::assistant("a"),
        ];
        assert_eq!(kept(&LastNTurns(1), &m), [1, 2]);
        assert_eq!(kept(&LastNTurns(2), &m), [0, 1, 2]);
    }

    #[test]
    fn the_window_does_not_evaporate_inside_combinators() {
        // The seed's measured failure on six messages: AllOf gave all 6 and Not gave 0.
        let m = six();
        assert_eq!(kept(&LastNTurns(2), &m), [2, 3, 4, 5]);
        let users_in_window = AllOf((LastNTurns(2), RoleFilter::new([Role::User])));
        assert_eq!(kept(&users_in_window, &m), [2, 4]);
        assert_eq!(kept(&Not(LastNTurns(2)), &m), [0, 1]);
        let nested = Not(Not(AnyOf((LastNTurns(1), Since(5)))));
        assert_eq!(kept(&nested, &m), [4, 5]);
    }

    #[test]
    fn positional_scopes_refuse_to_judge_one_message() {
        let m = Message::user("q");
        let err = LastNTurns(2).matches(&m, 0).unwrap_err();
        assert!(err.scope.ends_with("LastNTurns"), "{}", err.scope);
        assert!(err.to_string().contains("positional"));
        // A combinator holding one is positional too, whatever order the list is in.
        let user = RoleFilter::new([Role::User]);
        assert!(AllOf((user.clone(), LastNTurns(2))).matches(&m, 0).is_err());
        let nobody = RoleFilter::default();
        assert!(
            AllOf((nobody.clone(), LastNTurns(2)))
                .matches(&m, 0)
                .is_err()
        );
        assert!(AnyOf((user.clone(), LastNTurns(2))).matches(&m, 0).is_err());
        assert!(Not(LastNTurns(2)).matches(&m, 0).is_err());
        // Per-message scopes and their combinations answer.
        assert_eq!(AllOf((user.clone(), Since(0))).matches(&m, 0), Ok(true));
        assert_eq!(AnyOf((nobody, Since(1))).matches(&m, 0), Ok(false));
        assert_eq!(Not(user).matches(&m, 0), Ok(false));
    }

    #[test]
    fn per_message_builtins() {
        let m = vec![
            Message::system("rules"),
            Message::user("q"),
            Message::tool_result("c1", "lookup", "hit"),
            Message::assistant("a").with_name("lookup"),
        ];
        assert_eq!(kept(&RoleFilter::new([Role::Tool]), &m), [2]);
        assert_eq!(kept(&Not(RoleFilter::new([Role::Tool])), &m), [0, 1, 3]);
        assert_eq!(kept(&Tagged::new("lookup"), &m), [2, 3]);
        assert_eq!(kept(&Since(2), &m), [2, 3]);
        assert_eq!(kept(&Since(9), &m), Vec::<usize>::new());
    }

    #[test]
    fn empty_lists_and_dynamic_lists() {
        let m = six();
        assert_eq!(kept(&AllOf(Vec::<Since>::new()), &m).len(), 6);
        assert_eq!(kept(&AnyOf([] as [Since; 0]), &m).len(), 0);
        let chosen_at_run_time: Vec<Box<dyn ContextSelection>> = vec![
            Box::new(LastNTurns(2)),
            Box::new(RoleFilter::new([Role::User])),
        ];
        assert_eq!(kept(&AllOf(chosen_at_run_time), &m), [2, 4]);
        let shared: Arc<dyn ContextSelection> = Arc::new(LastNTurns(1));
        assert_eq!(kept(&AnyOf(vec![shared.clone()]), &m), [4, 5]);
        assert!(shared.matches(&m[0], 0).is_err());
    }

    #[test]
    fn scopes_are_plain_values() {
        use std::collections::HashSet;

        let scope = AllOf((LastNTurns(2), Not(RoleFilter::new([Role::System]))));
        let text = serde_json::to_string(&scope).unwrap();
        assert_eq!(text, r#"[2,["system"]]"#);
        let back: AllOf<(LastNTurns, Not<RoleFilter>)> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, scope);

        let mut seen = HashSet::new();
        assert!(seen.insert(scope));
        assert!(!seen.insert(back));
        assert!(seen.insert(AllOf((LastNTurns(3), Not(RoleFilter::new([Role::System]))))));
    }
}
