//! `llm-context prepare`.

use std::path::PathBuf;

use clap::Args;

use llm_context::mock::Capture;
use llm_context::wire::chat_completions::body::write_body;
use llm_context::{ContextLimitError, ContextPolicyLayer, PreparationReport};
use serde_json::json;
use tower::{Layer, ServiceExt};

use super::{EXIT_CONTEXT_LIMIT, Exit, emit, input, limit_json};

#[derive(Args, Debug)]
pub(crate) struct PrepareArgs {
    /// Policy file, JSON or TOML, with ContextPolicy fields.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The model's context window in tokens (used when the policy sets no max_tokens).
    #[arg(long, value_name = "N")]
    window: Option<usize>,
    /// Print {"request", "report"} as JSON instead of a human report.
    #[arg(long)]
    json: bool,
    /// An OpenAI Chat Completions or Responses request body; `-` or nothing reads stdin.
    #[arg(value_name = "REQUEST.json")]
    request: Option<PathBuf>,
}

pub(crate) async fn run(args: PrepareArgs) -> Result<u8, Exit> {
    let mut policy = input::policy(args.policy.as_deref())?;
    if let Some(window) = args.window {
        policy.context_window = Some(window);
    }
    let reserve = policy.reserve_tokens;
    let layer = ContextPolicyLayer::new(policy).map_err(|e| Exit::bad_input(e.to_string()))?;
    let (request, body) = input::any_request(args.request.as_deref())?;
    let received = request.messages.len();

    let capture = Capture::default();
    let result = layer.layer(capture.clone()).oneshot(request).await;
    match result {
        Ok(response) => {
            let prepared = capture
                .take()
                .ok_or_else(|| Exit::internal("internal error: the stack did not dispatch"))?;
            let report = response.report;
            if args.json {
                // Streamed: the prepared body is never built as one JSON tree or string.
                super::emit_with(0, |out| {
                    out.write_all(b"{\"request\":")?;
                    match &body {
                        input::Body::Chat(ctx) => write_body(&prepared, ctx, &mut *out)?,
                        #[cfg(feature = "serve")]
                        input::Body::Responses(kept) => {
                            let bytes =
                                llm_context::wire::responses::body::write_body(&prepared, kept)
                                    .map_err(std::io::Error::other)?;
                            out.write_all(&bytes)?;
                        }
                    }
                    out.write_all(b",\"report\":")?;
                    serde_json::to_writer(&mut *out, &report_json(&report))?;
                    out.write_all(b"}\n")
                })
            } else {
                emit(
                    &super::picture::render(received, &prepared, &report, reserve),
                    0,
                )
            }
        }
        Err(err) => match err.downcast_ref::<ContextLimitError>() {
            Some(limit) => {
                let text = if args.json {
                    limit_json(limit).to_string()
                } else {
                    super::picture::render_limit(limit)
                };
                emit(&format!("{text}\n"), EXIT_CONTEXT_LIMIT)
            }
            None => Err(Exit::bad_input(err.to_string())),
        },
    }
}

/// The report fields of the CLI contract, and only those; plus `cut_moved` and
/// `clear_moved` (a one-shot run has no previous request, so they say whether it cut or
/// cleared at all), and `repaired` when the tool pairing was repaired, so a script sees
/// that the stack added or dropped results; and `executor`, who edits the context.
fn report_json(r: &PreparationReport) -> serde_json::Value {
    let mut v = json!({
        "before_tokens": r.before_tokens,
        "after_tokens": r.after_tokens,
        "removed_messages": r.removed_messages,
        "cleared_results": r.cleared_results,
        // The same count under its name before 0.1.0, which scripts read.
        "cleared_observations": r.cleared_results,
        "offloaded_results": r.offloaded_results,
        "prompt_allowance": r.prompt_allowance,
        "cut_moved": r.cut_moved,
        "clear_moved": r.clear_moved,
    });
    if r.repaired > 0 {
        v["repaired"] = json!(r.repaired);
    }
    if let Some(executor) = r.executor {
        v["executor"] = json!(executor.as_str());
    }
    v
}
