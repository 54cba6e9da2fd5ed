//! The human report of `prepare`: figures and a picture of the window.

use std::fmt::Write;

use llm_context::clear::is_stub;
use llm_context::offload::is_preview;
use llm_context::tokens::{estimate_one, estimate_tool_tokens};
use llm_context::{ChatRequest, ContextLimitError, ContextPolicy, PreparationReport};

const WIDTH: usize = 64;

/// Tokens by what they are, in the prepared request.
#[derive(Default)]
struct Parts {
    head: usize,
    tools: usize,
    turns: usize,
    cleared: usize,
    offloaded: usize,
}

fn parts(req: &ChatRequest) -> Parts {
    let mut p = Parts {
        head: req.prefix.as_ref().map_or(0, |x| x.estimated_tokens()),
        tools: estimate_tool_tokens(&req.tools),
        ..Parts::default()
    };
    let head_end = llm_context::message::leading_system_end(&req.messages);
    for (i, m) in req.messages.iter().enumerate() {
        let cost = estimate_one(m);
        let text = m.content.as_str().unwrap_or("");
        if i < head_end {
            p.head += cost;
        } else if m.is_tool_result() && is_stub(text) {
            p.cleared += cost;
        } else if m.is_tool_result() && is_preview(text) {
            p.offloaded += cost;
        } else {
            p.turns += cost;
        }
    }
    p
}

fn n(x: usize) -> String {
    let s = x.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The report for a prepared request.
pub(crate) fn render(
    original: &ChatRequest,
    prepared: &ChatRequest,
    report: &PreparationReport,
    policy: &ContextPolicy,
) -> String {
    let max = policy.effective_max_tokens(None);
    let reserve = policy.reserve_tokens;
    let p = parts(prepared);
    let used = p.head + p.tools + p.turns + p.cleared + p.offloaded;
    let free = report.prompt_allowance.saturating_sub(used);
    let segments = [
        ('#', p.head),
        ('T', p.tools),
        ('=', p.turns),
        ('c', p.cleared),
        ('o', p.offloaded),
        ('.', free),
        ('R', reserve),
    ];
    let mut bar = String::new();
    for (ch, tokens) in segments {
        let mut cells = (tokens * WIDTH + max / 2) / max.max(1);
        if tokens > 0 && cells == 0 {
            cells = 1;
        }
        bar.extend(std::iter::repeat_n(ch, cells));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "llm-context prepare · model {} · {} → {} messages",
        prepared.model,
        n(original.messages.len()),
        n(prepared.messages.len())
    );
    let _ = writeln!(
        out,
        "window {} tokens = allowance {} + reserve {}",
        n(max),
        n(report.prompt_allowance),
        n(reserve)
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "  [{bar}]");
    let _ = writeln!(
        out,
        "   # prefix+system {}   T tools {}   = turns {}   c cleared {}",
        n(p.head),
        n(p.tools),
        n(p.turns),
        n(p.cleared)
    );
    let _ = writeln!(
        out,
        "   o offloaded {}   . free {}   R reserve {}",
        n(p.offloaded),
        n(free),
        n(reserve)
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "before {} tokens → after {} tokens",
        n(report.before_tokens),
        n(report.after_tokens)
    );
    let _ = writeln!(
        out,
        "removed {} messages ({} old turns, {} tool rounds) · cleared {} results · offloaded {}",
        n(report.removed_messages),
        n(report.pruned_turns),
        n(report.dropped_rounds),
        n(report.cleared_observations),
        n(report.offloaded_results)
    );
    if let Some(cut) = report.cut {
        let _ = writeln!(
            out,
            "history now starts at message {} of the request",
            n(cut)
        );
    }
    out
}

/// The report for a request that cannot fit.
pub(crate) fn render_limit(limit: &ContextLimitError) -> String {
    let b = &limit.breakdown;
    format!(
        "context limit: needs at least {} tokens, allowance {}\n  prefix {}\n  system {}\n  tools {}\n  earlier protected turns {}\n  current turn {}\n{}",
        n(limit.needed_tokens),
        n(limit.allowance),
        n(b.prefix_tokens),
        n(b.system_tokens),
        n(b.tool_tokens),
        n(b.protected_turn_tokens),
        n(b.current_turn_tokens),
        limit
    )
}

#[cfg(test)]
mod tests {
    use super::n;

    #[test]
    fn thousands() {
        assert_eq!(n(0), "0");
        assert_eq!(n(999), "999");
        assert_eq!(n(1_000), "1,000");
        assert_eq!(n(1_234_567), "1,234,567");
    }
}
