//! Replacing oversized tool results with previews: the part of offloading that needs no
//! store, shared by the offload layer and the composite.

use crate::artifact::{
    Artifact, Displaced, Untrusted, artifact_id, offloadable_text, render_counted,
};
use crate::model::{Content, Message, Scope};
use crate::policy::ContextPolicy;
use crate::tokens::{MessageSize, char_count};

/// Offloads every oversized tool result of `messages` in place; returns what to store and
/// the estimated tokens of the replaced results, before and after (a preview can cost
/// more than a result just over the threshold).
pub(crate) fn offload_messages(
    messages: &mut [Message],
    scope: &Scope,
    session: &str,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
) -> (Vec<Displaced>, (usize, usize)) {
    let mut out = Vec::new();
    let (mut before, mut after) = (0, 0);
    for m in messages.iter_mut() {
        let Some(text) = offloadable_text(m, policy, untrusted) else {
            continue;
        };
        // One count of the text serves the test, the preview, the artifact and the saving.
        let size = MessageSize::of(m);
        let chars = size.content_chars;
        if chars <= policy.tool_result_max_chars {
            continue;
        }
        let id = artifact_id(scope, session, text);
        let preview = render_counted(
            &id,
            text,
            chars,
            policy.tool_result_max_chars,
            policy.artifact_max_chars,
        );
        let artifact = Artifact::counted(text, chars, policy.artifact_max_chars);
        before += size.tokens();
        after += size.tokens_with_content(char_count(&preview));
        m.content = Content::Text(preview);
        out.push(Displaced { id, artifact });
    }
    (out, (before, after))
}
