//! A multi-turn tool conversation streamed through the whole stack, offline: the mock
//! model streams its answers, the agent runs its tools, and the stack prunes, offloads
//! and answers the model's artifact reads inside the stream.
//!
//! ```text
//! cargo run --example stream
//! ```
//!
//! Text is printed as it arrives; a tool call once its round ends; after each call, what
//! the stack did (tokens before → after, results sent as previews, artifact reads
//! answered inside the stack, memo hit). The last request is sent again and replayed
//! from the memo, as a stream.

use std::io::Write;
use std::sync::Arc;

use futures_util::StreamExt;
use llm_context::artifact::{READ_ARTIFACT_TOOL, artifact_id};
use llm_context::memo::{LocalMemoStore, MemoLayer};
use llm_context::mock::{MockModel, MockReply};
use llm_context::stream::{StreamEvent, Streaming};
use llm_context::usage::{UsageLayer, UsageMeter};
use llm_context::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, Scope,
    ToolCall, ToolSpec,
};
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};

/// The agent's one tool: a service's logs, JSON lines with non-ASCII messages, long
/// enough to be offloaded.
fn fetch_logs(unit: &str) -> String {
    let mut out: String = (0..400)
        .map(|i| {
            format!(
                "{{\"ts\":\"2026-11-30T10:{:02}:{:02}Z\",\"unit\":\"{unit}\",\"level\":\"warn\",\"msg\":\"pool at {}% — プール\"}}\n",
                i / 60,
                i % 60,
                50 + i % 40
            )
        })
        .collect();
    out.push_str(&format!(
        "{{\"unit\":\"{unit}\",\"level\":\"error\",\"msg\":\"connexion refusée: max_connections=100 reached\"}}\n"
    ));
    out
}

/// The scripted model: for each question, a tool call, then (having seen only the
/// preview of the long logs) a read of the log's end, then the answer.
fn model(scope: &Scope, session: &str) -> MockModel {
    let mut replies = Vec::new();
    for (turn, unit) in ["api", "worker"].iter().enumerate() {
        let logs = fetch_logs(unit);
        let id = artifact_id(scope, session, &logs);
        let tail = logs.chars().count() - 120;
        replies.push(MockReply::ToolCalls(
            format!("Ich sehe mir die Logs von {unit} an. "),
            vec![ToolCall::new(
                format!("call_{turn}"),
                "fetch_logs",
                json!({"unit": unit}),
            )],
        ));
        replies.push(MockReply::ToolCalls(
            "Die Vorschau endet zu früh; ich lese das Ende. ".into(),
            vec![ToolCall::new(
                format!("read_{turn}"),
                READ_ARTIFACT_TOOL,
                json!({"artifact_id": id, "offset": tail, "max_chars": 200}),
            )],
        ));
        replies.push(MockReply::text(format!(
            "{unit}: the connection pool is exhausted (max_connections=100 reached); \
             raise it or add a pooler. 接続プールが枯渇しています。"
        )));
    }
    MockModel::scripted(replies)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let scope = Scope::org("acme");
    let session = "incident-4412";
    let meter = UsageMeter::new();
    let policy = ContextPolicy::default()
        .with_max_context_tokens(12_000)
        .with_tool_result_max_chars(2_000);
    let stack = ServiceBuilder::new()
        .layer(
            ContextPolicyLayer::new(policy)?
                .with_auto_resolve()
                .with_memo(MemoLayer::new(Arc::new(LocalMemoStore::default()))),
        )
        // Inside the policy: every model call is metered, artifact reads included.
        .layer(UsageLayer::new(meter.clone()))
        .service(model(&scope, session));

    let tools = vec![ToolSpec::new(
        "fetch_logs",
        "Fetch a unit's recent logs",
        json!({"type": "object", "properties": {"unit": {"type": "string"}}}),
    )];
    let mut transcript = vec![Message::system("You are an SRE agent. Answer briefly.")];
    let mut last = None;
    for question in ["Why does the api fail?", "And the worker?"] {
        println!("user: {question}");
        transcript.push(Message::user(question));
        loop {
            let request = ChatRequest::new("mock", transcript.clone())
                .with_tools(tools.clone())
                .with_scope(scope.clone())
                .with_session(session)
                .with_temperature(0.0);
            last = Some(request.clone());
            let response = stream_one(stack.clone(), request).await?;
            let calls = response.message.tool_calls.clone();
            transcript.push(response.message);
            if calls.is_empty() {
                break;
            }
            for call in calls {
                let unit = call.arguments_value()["unit"]
                    .as_str()
                    .unwrap_or("api")
                    .to_owned();
                transcript.push(Message::tool_result(
                    &call.id,
                    &call.name,
                    fetch_logs(&unit),
                ));
            }
        }
    }
    // The same request again (temperature 0): the memo replays the stored stream.
    if let Some(request) = last {
        println!("user (again): And the worker?");
        stream_one(stack, request).await?;
    }
    let total = meter.total();
    println!(
        "\n{} model calls, {} input and {} output tokens",
        total.requests, total.usage.input_tokens, total.usage.output_tokens
    );
    Ok(())
}

/// One streamed call: text printed as it arrives, the final response returned.
async fn stream_one<S>(stack: S, request: ChatRequest) -> Result<ChatResponse, BoxError>
where
    S: tower::Service<Streaming, Response = llm_context::stream::ChatStream, Error = BoxError>,
{
    let mut stream = stack.oneshot(Streaming(request)).await?;
    print!("assistant: ");
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Text(delta) => {
                print!("{delta}");
                std::io::stdout().flush()?;
            }
            StreamEvent::Done(response) => {
                println!();
                for call in &response.message.tool_calls {
                    println!("  → {}({})", call.name, call.arguments);
                }
                let r = &response.report;
                println!(
                    "  [stack: {} → {} tokens, {} result(s) sent as previews, {} artifact read(s) answered inside, memo {}]",
                    r.before_tokens,
                    r.after_tokens,
                    r.offloaded_results + r.reused_previews,
                    r.resolved_messages.len() / 2,
                    if r.memo_hit { "hit" } else { "miss" }
                );
                return Ok(*response);
            }
            _ => {}
        }
    }
    Err("the stream ended without its answer".into())
}
