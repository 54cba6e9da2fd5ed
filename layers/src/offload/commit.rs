//! Handing a prepared request's artifacts to the store: what it displaced, and every id it
//! names as the session's live set, so that nothing sent points at nothing.

use std::collections::HashSet;

use super::{Prepared, PreviewCache};
use crate::artifact::{Artifact, ArtifactStore, PREVIEW_START, unkept_stub_text};
use crate::policy::ContextPolicy;
use crate::tokens::{MessageSize, char_count};

/// Stores what `prepared` displaced and makes its references the session's live set. A
/// reference the store does not hold afterwards (a session evicted whole, an expired
/// key, an artifact too large for it) is stored again from the request's own text when
/// the request has it; one still missing is replaced with a stub that says its artifact
/// is not kept, and the report counts it. A store that fails is logged and the request
/// goes as it is (a later read tells the model the store is down).
pub(crate) async fn commit(
    store: &dyn ArtifactStore,
    memory: Option<&PreviewCache>,
    policy: &ContextPolicy,
    prepared: &mut Prepared,
) {
    let (scope, session) = (prepared.req.scope.clone(), prepared.req.session.clone());
    let new: Vec<(String, Artifact)> = std::mem::take(&mut prepared.to_store)
        .into_iter()
        .map(|d| (d.id, d.artifact))
        .collect();
    let mut referenced: Vec<String> = Vec::with_capacity(prepared.refs.len());
    {
        let mut seen = HashSet::with_capacity_and_hasher(
            prepared.refs.len(),
            foldhash::fast::RandomState::default(),
        );
        for r in &prepared.refs {
            if seen.insert(&*r.id) {
                referenced.push(r.id.to_string());
            }
        }
    }
    let kept = std::mem::take(&mut prepared.kept);
    let mut missing = match store.commit(&scope, &session, new, &referenced).await {
        Ok(missing) => missing,
        Err(e) => return store_failed(&e, prepared),
    };
    if !missing.is_empty() {
        // Stored before, lost since: the request still has the text.
        let lost: HashSet<&str> = missing.iter().map(String::as_str).collect();
        let again: Vec<(String, Artifact)> = kept
            .iter()
            .filter(|k| lost.contains(&*k.id))
            .map(|k| {
                let artifact = Artifact::new(&k.text, policy.artifact_max_chars);
                (k.id.to_string(), artifact)
            })
            .collect();
        if !again.is_empty() {
            missing = match store.commit(&scope, &session, again, &referenced).await {
                Ok(missing) => missing,
                Err(e) => return store_failed(&e, prepared),
            };
        }
    }
    drop(kept);
    let missing: HashSet<String> = missing.into_iter().collect();
    if !missing.is_empty() {
        unkeep(prepared, &missing);
    }
    if let Some(memory) = memory {
        let made = std::mem::take(&mut prepared.made)
            .into_iter()
            .filter(|(_, r)| !missing.contains(&*r.id))
            .collect();
        memory.update(&scope, &session, made, &missing);
    }
}

fn store_failed(e: &crate::store::StoreError, prepared: &mut Prepared) {
    prepared.made.clear();
    tracing::warn!(
        event = "artifact_not_stored",
        error = %e,
        scope = %prepared.req.scope.key(),
        session = %prepared.req.session,
        "could not store the request's artifacts; the model gets the previews only"
    );
}

/// Replaces every message naming one of `missing` with a stub naming no artifact.
fn unkeep(prepared: &mut Prepared, missing: &HashSet<String>) {
    let report = &mut prepared.report;
    // A summary block is the summary, not a result to stub: the model reads its folds
    // back or is told the id is unknown.
    for r in prepared
        .refs
        .iter()
        .filter(|r| !r.summary && missing.contains(&*r.id))
    {
        let Some(m) = prepared.req.messages.get_mut(r.index) else {
            continue;
        };
        let before = MessageSize::of(m).tokens();
        let was_preview = m
            .content
            .as_str()
            .is_some_and(|t| t.starts_with(PREVIEW_START));
        let stub = unkept_stub_text(m.name(), r.chars);
        let after = MessageSize::with_content_chars(m, char_count(&stub)).tokens();
        m.content = stub.into();
        report.after_tokens = report.after_tokens + after - before;
        if was_preview {
            report.offloaded_results = report.offloaded_results.saturating_sub(1);
            report.cleared_results += 1;
        }
        report.unkept_artifacts += 1;
        tracing::warn!(
            event = "artifact_not_kept",
            artifact = %r.id,
            scope = %prepared.req.scope.key(),
            session = %prepared.req.session,
            "the store does not hold an artifact the request names; sent as a stub naming none"
        );
    }
    prepared.refs.retain(|r| !missing.contains(&*r.id));
}
