//! `llm-context prepare`.

use std::path::PathBuf;

use clap::Args;
use llm_context::wire::openai::{body_from_request, request_from_body};
use llm_context::{ContextLimitError, ContextPolicy, ContextPolicyLayer, PreparationReport};
use serde_json::json;
use tower::{Layer, ServiceExt};

use super::capture::Capture;
use super::input::{read_body, read_policy};
use super::{EXIT_CONTEXT_LIMIT, Exit};

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
    /// An OpenAI Chat Completions request body; `-` or nothing reads stdin.
    #[arg(value_name = "REQUEST.json")]
    request: Option<PathBuf>,
}

pub(crate) async fn run(args: PrepareArgs) -> Result<u8, Exit> {
    let mut policy = match &args.policy {
        Some(path) => read_policy(path)?,
        None => ContextPolicy::default(),
    };
    if let Some(window) = args.window {
        policy.context_window = Some(window);
    }
    let layer =
        ContextPolicyLayer::new(policy.clone()).map_err(|e| Exit::bad_input(e.to_string()))?;
    let body = read_body(args.request.as_deref())?;
    let (request, ctx) =
        request_from_body(&body).map_err(|e| Exit::bad_input(format!("bad request body: {e}")))?;
    let original = request.clone();

    let capture = Capture::default();
    let result = layer.layer(capture.clone()).oneshot(request).await;
    match result {
        Ok(response) => {
            let prepared = capture
                .take()
                .ok_or_else(|| Exit::bad_input("internal error: the stack did not dispatch"))?;
            let report = response.report;
            if args.json {
                let out = json!({
                    "request": body_from_request(&prepared, &ctx),
                    "report": report_json(&report),
                });
                println!("{out}");
            } else {
                print!(
                    "{}",
                    super::picture::render(&original, &prepared, &report, &policy)
                );
            }
            Ok(0)
        }
        Err(err) => match err.downcast_ref::<ContextLimitError>() {
            Some(limit) => {
                if args.json {
                    let out = json!({
                        "error": "context_limit",
                        "needed_tokens": limit.needed_tokens,
                        "allowance": limit.allowance,
                        "message": limit.to_string(),
                    });
                    println!("{out}");
                } else {
                    println!("{}", super::picture::render_limit(limit));
                }
                Ok(EXIT_CONTEXT_LIMIT)
            }
            None => Err(Exit::bad_input(err.to_string())),
        },
    }
}

/// The report fields of the CLI contract, and only those.
fn report_json(r: &PreparationReport) -> serde_json::Value {
    json!({
        "before_tokens": r.before_tokens,
        "after_tokens": r.after_tokens,
        "removed_messages": r.removed_messages,
        "cleared_observations": r.cleared_observations,
        "offloaded_results": r.offloaded_results,
        "prompt_allowance": r.prompt_allowance,
    })
}
