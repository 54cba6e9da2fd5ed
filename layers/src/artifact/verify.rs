//! Checking the stack's own formats against the store: tool output can imitate a preview
//! or a stub byte for byte, but it cannot put the artifact it names into this tenant's and
//! session's store.

use twox_hash::XxHash3_64;

use super::preview::{ARTIFACT_ID_PREFIX, parse_preview};
use super::store::ArtifactStore;
use super::stub::parse_stub;
use crate::model::{ChatRequest, Message};

/// How every preview and every stub the stack writes begins.
pub(crate) const PREVIEW_START: &str = "{\"context_artifact\":\"";
const STUB_START: &str = "{\"context_cleared\":true";

/// Contents that look exactly like the stack's previews or stubs but name no artifact this
/// tenant and session hold: the planner treats them as plain text. Empty for nearly every
/// request, and then free to consult.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Untrusted {
    /// XXH3-64 of each such content, sorted. A collision can only make a genuine preview
    /// count as text, which offloads it again: never the other way round.
    texts: Vec<u64>,
}

impl Untrusted {
    /// Whether `text` was found not to name a stored artifact.
    pub(crate) fn contains(&self, text: &str) -> bool {
        !self.texts.is_empty()
            && self
                .texts
                .binary_search(&XxHash3_64::oneshot(text.as_bytes()))
                .is_ok()
    }
}

/// The content of `m` and the artifact id it claims, when it is exactly a preview or a
/// stub naming one. A prefix test comes first, so plain results cost nothing.
fn claim(m: &Message) -> Option<(&str, String)> {
    if !m.is_tool_result() {
        return None;
    }
    let text = m.content.as_str()?;
    let id = if text.starts_with(PREVIEW_START) {
        parse_preview(text)?.id.into_owned()
    } else if text.starts_with(STUB_START) {
        parse_stub(text)??
    } else {
        return None;
    };
    debug_assert!(id.starts_with(ARTIFACT_ID_PREFIX));
    Some((text, id))
}

/// Whether `req` may hold something that claims an artifact, so [`verify`] has work to
/// do: a prefix test per tool result, nothing parsed.
pub(crate) fn has_claims(req: &ChatRequest) -> bool {
    req.messages.iter().any(|m| {
        m.is_tool_result()
            && m.content
                .as_str()
                .is_some_and(|t| t.starts_with(PREVIEW_START) || t.starts_with(STUB_START))
    })
}

/// Asks the store about every artifact the request's previews and stubs name, in the
/// request's scope and session, and returns the contents whose artifact is not there.
///
/// A content that is exactly a preview of a stored artifact is safe to keep whoever wrote
/// it: it says what the store holds. A store that fails cannot tell, so its claims are
/// trusted (a later read of the id tells the model the store is down).
pub(crate) async fn verify(store: &dyn ArtifactStore, req: &ChatRequest) -> Untrusted {
    let mut texts = Vec::new();
    for m in &req.messages {
        let Some((text, id)) = claim(m) else {
            continue;
        };
        match store.contains(&req.scope, &req.session, &id).await {
            Ok(true) => {}
            Ok(false) => texts.push(XxHash3_64::oneshot(text.as_bytes())),
            Err(e) => tracing::warn!(
                event = "artifact_verify_failed",
                error = %e,
                artifact = %id,
                "could not check an artifact reference; it is trusted as it is"
            ),
        }
    }
    texts.sort_unstable();
    texts.dedup();
    Untrusted { texts }
}
