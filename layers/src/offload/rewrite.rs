//! Replacing oversized tool results with previews: the part of offloading that needs no
//! store, shared by the offload layer and the composite.

use crate::fit::offloadable_text;
use crate::message::{Content, Message};
use crate::offload::preview::{artifact_id, render_preview};
use crate::policy::ContextPolicy;
use crate::scope::Scope;
use crate::store::Artifact;
use crate::tokens::char_count;

/// An artifact to store: the full text a preview or a stub stands for.
#[derive(Clone, Debug)]
pub(crate) struct Displaced {
    pub(crate) id: String,
    pub(crate) artifact: Artifact,
}

/// Offloads every oversized tool result of `messages` in place; returns what to store.
pub(crate) fn offload_messages(
    messages: &mut [Message],
    scope: &Scope,
    session: &str,
    policy: &ContextPolicy,
) -> Vec<Displaced> {
    let mut out = Vec::new();
    for m in messages.iter_mut() {
        let Some(text) = offloadable_text(m, policy) else {
            continue;
        };
        if char_count(text) <= policy.tool_result_max_chars {
            continue;
        }
        let id = artifact_id(scope, session, text);
        let preview = render_preview(
            &id,
            text,
            policy.tool_result_max_chars,
            policy.artifact_max_chars,
        );
        let artifact = Artifact::new(text, policy.artifact_max_chars);
        m.content = Content::Text(preview);
        out.push(Displaced { id, artifact });
    }
    out
}
