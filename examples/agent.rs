//! A multi-turn agent with tools, offline: the built-in mock model behind the whole
//! context stack, printing what the stack did on every call.
//!
//! ```text
//! cargo run --example agent
//! cargo run --example agent -- --turns 12 --max-tokens 6000
//! ```

use llm_context::mock::{MockModel, MockReply};
use llm_context::{
    ChatRequest, ContextLimitError, ContextPolicy, Message, Role, ServiceBuilderExt, ToolCall,
    ToolSpec,
};
use serde_json::json;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The tool rounds the mock model makes before it answers a question.
const ROUNDS_PER_TURN: usize = 3;

struct Args {
    turns: usize,
    max_tokens: usize,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        turns: 8,
        max_tokens: 5_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = value
            .parse()
            .map_err(|_| format!("{flag}: not a number: {value}"))?;
        match flag.as_str() {
            "--turns" => out.turns = n,
            "--max-tokens" => out.max_tokens = n,
            _ => {
                return Err(format!(
                    "unknown flag {flag} (try --turns N, --max-tokens N)"
                ));
            }
        }
    }
    Ok(out)
}

/// The model: calls `read_log` a few times after each question, then answers.
fn model() -> MockModel {
    MockModel::from_fn(|req: &ChatRequest| {
        let since_question = req
            .messages
            .iter()
            .rev()
            .take_while(|m| !m.is_user_request())
            .filter(|m| m.role == Role::Assistant)
            .count();
        let question = req.messages.iter().rev().find(|m| m.is_user_request());
        let topic = question.map(|m| m.text().into_owned()).unwrap_or_default();
        if since_question < ROUNDS_PER_TURN {
            let id = format!("call-{}-{since_question}", req.messages.len());
            MockReply::tool_calls([ToolCall::new(
                id,
                "read_log",
                json!({"page": since_question}),
            )])
        } else {
            MockReply::text(format!(
                "Summary for {topic:?}: the errors stop after the deploy."
            ))
        }
    })
}

/// The tool: a page of a (long) log.
fn read_log(page: u64) -> String {
    (0..40)
        .map(|i| format!("{page:02}:{i:03} GET /api/orders 200 12ms trace=abc{i:03}\n"))
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = args().map_err(|e| format!("agent: {e}"))?;
    let policy = ContextPolicy::default()
        .with_max_tokens(args.max_tokens)
        .with_reserve_tokens(1_000)
        .with_preserve_recent(2);
    let model = model();
    let mut stack = ServiceBuilder::new()
        .context_policy(policy)?
        .service(model.clone());

    let tools = vec![ToolSpec::new(
        "read_log",
        "Read one page of the service log.",
        json!({"type": "object", "properties": {"page": {"type": "integer"}}}),
    )];
    let mut transcript = vec![Message::system(
        "You are an SRE agent. Use read_log, then answer.",
    )];
    println!("calls  messages  before → after  (allowance)  removed cleared");
    for turn in 0..args.turns {
        transcript.push(Message::user(format!("What happened in incident {turn}?")));
        loop {
            let request = ChatRequest::new("mock", transcript.clone()).with_tools(tools.clone());
            let reply = match stack.ready().await?.call(request).await {
                Ok(reply) => reply,
                Err(e) if e.is::<ContextLimitError>() => {
                    println!("turn {turn}: {e}");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            let r = &reply.report;
            println!(
                "{:>5}  {:>8}  {:>6} → {:<6} ({})  {:>7} {:>7}",
                model.calls(),
                transcript.len(),
                r.before_tokens,
                r.after_tokens,
                r.prompt_allowance,
                r.removed_messages,
                r.cleared_observations
            );
            let calls = reply.message.tool_calls.clone();
            transcript.push(reply.message);
            if calls.is_empty() {
                break;
            }
            for call in calls {
                let page = call.arguments["page"].as_u64().unwrap_or(0);
                transcript.push(Message::tool_result(call.id, call.name, read_log(page)));
            }
        }
        println!(
            "turn {turn}: {}",
            transcript
                .last()
                .map(|m| m.text().into_owned())
                .unwrap_or_default()
        );
    }
    Ok(())
}
