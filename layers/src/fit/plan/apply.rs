//! A plan applied to its request: the fitted messages, their stubs and previews, and what the artifact store needs.

use super::*;

/// What [`Plan::apply`] hands on: the fitted messages and what the artifacts need.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub(crate) messages: Vec<Message>,
    /// Cleared contents to store.
    pub(crate) displaced: Vec<Displaced>,
    /// Every fitted message that names an artifact so far (stubs and input references),
    /// by index in the fitted request.
    pub(crate) refs: Vec<Reference>,
    /// Texts of cleared results whose artifact the session stored before.
    pub(crate) kept: Vec<Kept>,
    /// What the session's preview cache should learn.
    pub(crate) made: Vec<(ContentKey, Remembered)>,
    /// The long results kept, by index in the fitted request.
    pub(crate) longs: Vec<Long>,
    /// Tokens freed by stubbing the arguments of calls whose results were cleared
    /// ([`ContextPolicy::clear_tool_inputs`]); the plan did not count them.
    pub(crate) inputs_freed: usize,
}

/// The arguments a call whose result was cleared is sent with, under
/// [`ContextPolicy::clear_tool_inputs`].
const CLEARED_ARGUMENTS: &str = r#"{"cleared":true}"#;

/// What applying a plan needs besides it: where artifacts go, and what the session
/// stored before.
#[derive(Clone, Copy)]
pub(crate) struct ApplyContext<'a> {
    pub(crate) scope: &'a crate::model::Scope,
    pub(crate) session: &'a str,
    pub(crate) memory: Option<&'a SessionMemory>,
    pub(crate) artifact_max_chars: usize,
    /// Stub the arguments of the calls whose results are cleared.
    pub(crate) clear_tool_inputs: bool,
}

impl Plan {
    /// Applies the plan to the messages it was made for, in place: kept messages move
    /// down over dropped ones, and the list's buffer is reused rather than a new one
    /// made. `actions` are the plan's, left in the [`Scratch`] it was made with.
    pub(crate) fn apply(
        self,
        mut messages: Vec<Message>,
        actions: &[Action],
        ctx: ApplyContext<'_>,
    ) -> Applied {
        debug_assert_eq!(messages.len(), actions.len());
        let mut out = Applied::default();
        let mut refs = self.inputs;
        let mut cleared_calls: Vec<Box<str>> = Vec::new();
        for c in self.clears {
            let Some(m) = messages.get_mut(c.index) else {
                continue;
            };
            if ctx.clear_tool_inputs
                && let Some(id) = &m.tool_call_id
            {
                cleared_calls.push(id.clone());
            }
            let original = std::mem::take(&mut m.content);
            let text = original.text();
            let (id, known) = match &c.naming {
                Naming::Content => {
                    let (key, known) = match c.long {
                        Some((key, known)) => (key, known),
                        None => {
                            let key = content_key(&text);
                            (key, ctx.memory.and_then(|mem| mem.get(key)).cloned())
                        }
                    };
                    // The session stored this text before: the same id, nothing stored.
                    let id = match &known {
                        Some(k) => k.id.clone(),
                        None => artifact_id(ctx.scope, ctx.session, &text).into(),
                    };
                    (Some(id), Some((key, known)))
                }
                Naming::Stored(id) => (Some(Arc::from(id.as_str())), None),
                Naming::Nothing | Naming::Unkept => (None, None),
            };
            m.content = stub_for(m.name(), c.chars, &c.naming, id.as_deref()).into();
            let Some(id) = id else {
                continue;
            };
            refs.push(Reference {
                index: c.index,
                id: id.clone(),
                chars: c.chars,
                summary: false,
            });
            match known {
                Some((key, None)) => {
                    let artifact = Artifact::counted(&text, c.chars, ctx.artifact_max_chars);
                    out.made.push((
                        key,
                        Remembered {
                            id: id.clone(),
                            chars: c.chars,
                            stored_bytes: artifact.text.len(),
                            preview: None,
                        },
                    ));
                    out.displaced.push(Displaced {
                        id: id.to_string(),
                        artifact,
                    });
                }
                Some((_, Some(_))) => {
                    // Kept in case the store lost it since (moved, not copied).
                    if let Content::Text(text) = original {
                        out.kept.push(Kept { id, text });
                    }
                }
                None => {}
            }
        }
        if !cleared_calls.is_empty() {
            out.inputs_freed = clear_inputs(&mut messages, actions, cleared_calls);
        }
        let mut longs = self.longs;
        longs.retain(|l| actions[l.index] == Action::Keep);
        refs.sort_unstable_by_key(|r| r.index);
        // A plan that drops nothing (a request that fits) leaves every index as it is.
        debug_assert!(
            self.report.removed_messages > 0 || actions.iter().all(|a| *a != Action::Drop)
        );
        if self.report.removed_messages > 0 {
            // Indices in the fitted request: each minus the messages dropped before it.
            let mut dropped = 0;
            let (mut r, mut l) = (0, 0);
            for (i, a) in actions.iter().enumerate() {
                while r < refs.len() && refs[r].index == i {
                    refs[r].index -= dropped;
                    r += 1;
                }
                while l < longs.len() && longs[l].index == i {
                    longs[l].index -= dropped;
                    l += 1;
                }
                if *a == Action::Drop {
                    dropped += 1;
                }
            }
            let mut actions = actions.iter();
            messages.retain(|_| actions.next() != Some(&Action::Drop));
        }
        out.messages = messages;
        out.refs = refs;
        out.longs = longs;
        out
    }
}

/// Replaces the arguments of the kept calls named in `ids` with [`CLEARED_ARGUMENTS`]
/// where that is shorter. Returns the tokens freed.
pub(super) fn clear_inputs(
    messages: &mut [Message],
    actions: &[Action],
    mut ids: Vec<Box<str>>,
) -> usize {
    ids.sort_unstable();
    // Measured as the estimator measures arguments, so the stub never costs more.
    let stub_chars = crate::tokens::arguments_chars(CLEARED_ARGUMENTS);
    let mut freed = 0;
    for (m, a) in messages.iter_mut().zip(actions) {
        if *a == Action::Drop || !m.has_tool_calls() {
            continue;
        }
        let before = MessageSize::of(m).tokens();
        let mut changed = false;
        for call in m.tool_calls.iter_mut() {
            if ids
                .binary_search_by(|id| (**id).cmp(call.id.as_str()))
                .is_ok()
                && call.arguments != CLEARED_ARGUMENTS
                && crate::tokens::arguments_chars(&call.arguments) > stub_chars
            {
                call.arguments = CLEARED_ARGUMENTS.to_owned();
                changed = true;
            }
        }
        if changed {
            freed += before - MessageSize::of(m).tokens();
        }
    }
    freed
}
