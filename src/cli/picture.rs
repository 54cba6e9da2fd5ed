//! The human report of `prepare`: figures and a picture of the window.

use std::fmt::Write;

use llm_context::artifact::is_preview;
use llm_context::artifact::is_stub;
use llm_context::tokens::{estimate_one, estimate_tool_tokens};
use llm_context::{ChatRequest, ContextLimitError, Executor, PreparationReport};

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

/// What the prepared request spends on each part. The turns are what is left of
/// `after_tokens` (the report's total, which counts the same parts), so only the head
/// and the replaced results are estimated here.
fn parts(req: &ChatRequest, after_tokens: usize) -> Parts {
    let mut p = Parts {
        head: req.prefix.as_ref().map_or(0, |x| x.estimated_tokens()),
        tools: estimate_tool_tokens(&req.tools),
        ..Parts::default()
    };
    let head_end = llm_context::prefix::leading_system_end(&req.messages);
    p.head += req.messages[..head_end]
        .iter()
        .map(estimate_one)
        .sum::<usize>();
    for m in req.messages[head_end..]
        .iter()
        .filter(|m| m.is_tool_result())
    {
        match m.content.as_str() {
            Some(text) if is_stub(text) => p.cleared += estimate_one(m),
            Some(text) if is_preview(text) => p.offloaded += estimate_one(m),
            _ => {}
        }
    }
    p.turns = after_tokens.saturating_sub(p.head + p.tools + p.cleared + p.offloaded);
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
/// `received` is the number of messages the request came with; the window is the one
/// the layer planned for (its allowance plus `reserve`), whether from `--window`, the
/// policy or the model's catalog entry.
pub(crate) fn render(
    received: usize,
    prepared: &ChatRequest,
    report: &PreparationReport,
    reserve: usize,
) -> String {
    let max = report.prompt_allowance + reserve;
    let p = parts(prepared, report.after_tokens);
    let free = report.prompt_allowance.saturating_sub(report.after_tokens);
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
        n(received),
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
        n(report.cleared_results),
        n(report.offloaded_results)
    );
    if report.unkept_artifacts > 0 {
        let _ = writeln!(
            out,
            "not kept: {} of the cleared results name no artifact (past max_artifact_bytes, or not held by the store)",
            n(report.unkept_artifacts)
        );
    }
    if report.repaired > 0 {
        let _ = writeln!(
            out,
            "repaired tool pairing: {} results added or dropped",
            n(report.repaired)
        );
    }
    match report.executor {
        Some(Executor::Delegate) => {
            let _ = writeln!(
                out,
                "executor delegate: the provider clears old tool results (context_management); \
                 the stack offloads, and prunes only what that would not fit"
            );
        }
        Some(Executor::Off) => {
            let _ = writeln!(out, "executor off: sent as it came");
        }
        Some(executor) => {
            let _ = writeln!(out, "executor {executor}");
        }
        None => {}
    }
    if let Some(cut) = report.history_start {
        let _ = writeln!(
            out,
            "history now starts at message {} of the request",
            n(cut)
        );
    }
    out
}

/// The report for a request that cannot fit: the breakdown, then what to do.
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
        ContextLimitError::ADVICE
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
