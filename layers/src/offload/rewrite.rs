//! Replacing oversized tool results with previews: the part of offloading that needs no
//! store, shared by the offload layer and the composite.

use std::sync::Arc;

use crate::artifact::{
    Artifact, Displaced, Untrusted, artifact_id, offloadable_text, render_counted,
};
use crate::fit::{Kept, Long, Reference};
use crate::model::{Content, Message, Scope, Text};
use crate::offload::{ContentKey, Preview, Remembered, SessionMemory, content_key};
use crate::policy::ContextPolicy;
use crate::tokens::{MessageSize, char_count};

/// What offloading the long results of one request made.
#[derive(Debug, Default)]
pub(crate) struct Offloaded {
    /// Artifacts to store.
    pub(crate) displaced: Vec<Displaced>,
    /// The previews sent, by message index.
    pub(crate) refs: Vec<Reference>,
    /// Texts replaced by a preview the session made before (stored before).
    pub(crate) kept: Vec<Kept>,
    /// What the session's memory should learn.
    pub(crate) made: Vec<(ContentKey, Remembered)>,
    /// Previews found in the session's memory.
    pub(crate) reused: usize,
    /// The estimated tokens of the replaced results, before and after (a preview can cost
    /// more than a result just over the threshold).
    pub(crate) tokens: (usize, usize),
}

/// The long plain results of `messages` for a request that was not planned (the offload
/// layer on its own): each text hashed, and counted unless the session knows it.
pub(crate) fn find_longs(
    messages: &[Message],
    policy: &ContextPolicy,
    untrusted: &Untrusted,
    memory: Option<&SessionMemory>,
) -> Vec<Long> {
    let mut out = Vec::new();
    for (index, m) in messages.iter().enumerate() {
        let Some(text) = offloadable_text(m, policy, untrusted) else {
            continue;
        };
        let key = content_key(text);
        let known = memory.and_then(|mem| mem.get(key)).cloned();
        let chars = known.as_ref().map_or_else(|| char_count(text), |k| k.chars);
        if chars > policy.tool_result_max_chars {
            out.push(Long {
                index,
                key,
                chars,
                known,
                preview_chars: None,
                tokens: None,
            });
        }
    }
    out
}

/// Replaces each of `longs` in `messages` with its preview: the session's own when it
/// made one before (shared, nothing hashed, rendered, copied or stored again), else a new one
/// with an artifact to store.
pub(crate) fn offload_messages(
    messages: &mut [Message],
    longs: Vec<Long>,
    scope: &Scope,
    session: &str,
    policy: &ContextPolicy,
) -> Offloaded {
    // Most of a long transcript's results were offloaded before: each gives a reference
    // and a kept text, so those lists are sized once rather than grown.
    let mut out = Offloaded {
        refs: Vec::with_capacity(longs.len()),
        kept: Vec::with_capacity(longs.len()),
        ..Offloaded::default()
    };
    for long in longs {
        let Some(m) = messages.get_mut(long.index) else {
            continue;
        };
        // The planner measured the message already; the offload layer alone did not.
        let tokens = |m: &Message, preview_chars: usize| {
            long.tokens.unwrap_or_else(|| {
                let size = MessageSize::with_content_chars(m, long.chars);
                (size.tokens(), size.tokens_with_content(preview_chars))
            })
        };
        let reuse = long
            .known
            .as_ref()
            .and_then(|k| k.preview.as_ref().map(|p| (k, p)));
        if let Some((known, preview)) = reuse {
            let (before, after) = tokens(m, preview.chars);
            out.tokens.0 += before;
            out.tokens.1 += after;
            let shared = Content::Text(Text::from(preview.text.clone()));
            let original = std::mem::replace(&mut m.content, shared);
            if let Content::Text(text) = original {
                out.kept.push(Kept {
                    id: known.id.clone(),
                    text,
                });
            }
            out.refs.push(Reference {
                index: long.index,
                id: known.id.clone(),
                chars: long.chars,
                summary: false,
            });
            out.reused += 1;
            continue;
        }
        let Some(text) = m.content.as_str() else {
            continue;
        };
        // A result only cleared before has its id remembered, not a preview.
        let id = match &long.known {
            Some(k) => k.id.clone(),
            None => artifact_id(scope, session, text).into(),
        };
        let preview = render_counted(
            &id,
            text,
            long.chars,
            policy.tool_result_max_chars,
            policy.artifact_max_chars,
        );
        let preview_chars = long.preview_chars.unwrap_or_else(|| char_count(&preview));
        // Shared between the memory and every request that sends it from now on.
        let preview: Arc<str> = Arc::from(preview);
        let artifact = Artifact::counted(text, long.chars, policy.artifact_max_chars);
        let (before, after) = tokens(m, preview_chars);
        out.tokens.0 += before;
        out.tokens.1 += after;
        out.made.push((
            long.key,
            Remembered {
                id: id.clone(),
                chars: long.chars,
                stored_bytes: artifact.text.len(),
                preview: Some(Preview {
                    text: preview.clone(),
                    chars: preview_chars,
                }),
            },
        ));
        m.content = Content::Text(Text::from(preview));
        out.refs.push(Reference {
            index: long.index,
            id: id.clone(),
            chars: long.chars,
            summary: false,
        });
        out.displaced.push(Displaced {
            id: id.to_string(),
            artifact,
        });
    }
    out
}
