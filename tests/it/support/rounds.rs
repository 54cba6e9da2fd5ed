//! One round of a Rust agent's loop through a stack: the request sent streamed or not,
//! the whole answer back; and the tool output such a loop appends.

use llm_context::stream::{ChatStream, Streaming};
use llm_context::{BoxError, ChatRequest, ChatResponse, Message, ToolSpec};
use tower::{Service, ServiceExt};

/// A tool result of about `n` bytes: JSON lines with non-ASCII text.
pub(crate) fn output(call: usize, n: usize) -> String {
    let line = format!("{{\"call\":{call},\"msg\":\"connexion refusée — 接続拒否\"}}\n");
    line.repeat(n / line.len() + 1)
}

/// `req` through `stack`, streamed when `stream`; the whole answer. Panics naming `what`
/// when the call fails.
pub(crate) async fn round<S>(
    stack: &mut S,
    req: ChatRequest,
    stream: bool,
    what: &str,
) -> ChatResponse
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>
        + Service<Streaming, Response = ChatStream, Error = BoxError>,
{
    if stream {
        let stream = ServiceExt::<Streaming>::ready(stack)
            .await
            .unwrap()
            .call(Streaming(req))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        stream.response().await.unwrap()
    } else {
        ServiceExt::<ChatRequest>::ready(stack)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }
}

/// `answer` appended to `transcript`, with a result of 2 to 20 KB for each of its calls,
/// as the agent's tools would answer round `call`.
pub(crate) fn answered(transcript: &mut Vec<Message>, answer: Message, call: usize) {
    let calls = answer.tool_calls.to_vec();
    transcript.push(answer);
    for c in calls {
        let n = 2_000 + (call * 7_919) % 18_000;
        transcript.push(Message::tool_result(c.id, c.name, output(call, n)));
    }
}

/// The agent's one tool, `run`, and its transcript's start: its system prompt and task.
pub(crate) fn agent() -> (ToolSpec, Vec<Message>) {
    let tool = ToolSpec::new(
        "run",
        "Runs a shell command.",
        serde_json::json!({"type": "object", "properties": {"step": {"type": "integer"}}}),
    );
    let transcript = vec![
        Message::system("You are a coding agent."),
        Message::user("Find out why the build fails."),
    ];
    (tool, transcript)
}
