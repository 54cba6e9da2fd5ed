//! The artifacts a plan's request names: what summaries and kept results refer to, and the bound on their bytes.

use super::*;

/// A message of the fitted request that names an artifact, for the store's live set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reference {
    /// Its index in the fitted (later the prepared) request.
    pub(crate) index: usize,
    /// Shared with the session's memory and the request's other lists: an agent's request
    /// names hundreds, each copied three times before.
    pub(crate) id: Arc<str>,
    /// The characters of the result it stands for.
    pub(crate) chars: usize,
    /// Named by a summary block (a folded span or its archive), not by a tool result: kept
    /// live, never cleared for it.
    pub(crate) summary: bool,
}

/// The artifacts the summary blocks among the leading system messages name: their folded
/// spans and their archive.
pub(crate) fn summary_references(messages: &[Message], head_end: usize) -> Vec<Reference> {
    let mut out = Vec::new();
    for (index, m) in messages[..head_end.min(messages.len())].iter().enumerate() {
        let Some(block) = crate::model::SummaryBlock::from_message(m) else {
            continue;
        };
        for id in block.artifacts.into_iter().chain(block.archive) {
            out.push(Reference {
                index,
                id: id.into(),
                chars: 0,
                summary: true,
            });
        }
    }
    out
}

/// The kept messages that name an artifact as received: previews and stubs the store
/// vouched for. Only those marked so are parsed again, for their id.
pub(super) fn input_references(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    actions: &[Action],
) -> Vec<Reference> {
    let mut out = Vec::new();
    for (i, &mark) in m.marks.iter().enumerate() {
        // The mark says it first, without a call for each of 10,000 messages.
        if mark & REFERS == 0 || actions[i] != Action::Keep {
            continue;
        }
        if let Some((id, chars)) = named_artifact(&m.req.messages[i], mark, policy, m.untrusted) {
            out.push(Reference {
                index: i,
                id: id.into(),
                chars,
                summary: false,
            });
        }
    }
    out
}

/// Keeps the artifacts the request names within `max_artifact_bytes`: past it, the oldest
/// results that would name one are cleared with a stub saying their artifact is not kept,
/// so the store never has to evict an artifact the request names. Returns how many.
///
/// The bytes cleared are rounded up to a quarter of the bound, oldest first, so the
/// results a growing session clears change once in a quarter-bound of new results rather
/// than on every turn: each change rewrites the transcript from that result on, and the
/// provider's cached prefix with it.
pub(super) fn bound_references(
    m: &Measured<'_>,
    policy: &ContextPolicy,
    inputs: &[Reference],
    actions: &mut [Action],
    clears: &mut Vec<Cleared>,
    cost: &mut [usize],
    total: &mut usize,
) -> usize {
    let msgs = &m.req.messages;
    let art_max = policy.artifact_max_chars;
    // (index, bytes, original chars) of every message that will name an artifact.
    let mut named: Vec<(usize, usize, usize)> = Vec::new();
    for l in m.longs {
        if actions[l.index] == Action::Keep {
            let len = msgs[l.index].content.as_str().map_or(0, str::len);
            named.push((l.index, l.bytes(len), l.chars));
        }
    }
    for c in clears.iter().filter(|c| c.names_artifact()) {
        named.push((c.index, c.bytes, c.chars));
    }
    for r in inputs.iter().filter(|r| !r.summary) {
        // The artifact is stored already; its characters stand for its bytes.
        named.push((r.index, r.chars.min(art_max), r.chars));
    }
    let sum: usize = named.iter().map(|n| n.1).sum();
    let bound = policy.max_artifact_bytes;
    if sum <= bound {
        return 0;
    }
    named.sort_unstable_by_key(|n| n.0);
    let quantum = (bound / 4).max(1);
    let target = (sum - bound).div_ceil(quantum) * quantum;
    let mut freed = 0;
    let mut unkept = 0;
    for &(i, bytes, chars) in &named {
        if freed >= target {
            break;
        }
        freed += bytes;
        unkept += 1;
        let msg = &msgs[i];
        let stub = unkept_stub_text(msg.name(), chars);
        let new_cost =
            MessageSize::with_content_chars(msg, 0).tokens_with_content(char_count(&stub));
        // A stub naming no artifact is shorter than any preview or stub naming one.
        *total = *total - cost[i] + new_cost;
        cost[i] = new_cost;
        actions[i] = Action::Clear;
        clears.retain(|c| c.index != i);
        clears.push(Cleared {
            index: i,
            naming: Naming::Unkept,
            long: None,
            chars,
            bytes: 0,
        });
    }
    unkept
}
