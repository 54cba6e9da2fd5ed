//! No preview or stub points at nothing: the bound on what one request names, a store
//! that lost an artifact, and one that cannot keep it.

use std::sync::Arc;

use llm_context_layers::artifact::{ArtifactLimits, LocalArtifactStore, is_preview, is_stub};
use llm_context_layers::mock::MockModel;
use llm_context_layers::{
    ArtifactStore, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, Scope,
    ToolCall,
};
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};

/// A transcript of one user turn with `n` tool rounds, each result `chars` characters of
/// a log line with quotes (distinct per round, so each has its own artifact).
fn transcript(n: usize, chars: usize) -> Vec<Message> {
    let mut messages = vec![Message::user("look at the logs")];
    for i in 0..n {
        let id = format!("c{i}");
        let line = format!("{i:04} GET /api/orders?id=\"{i}\" 500\n");
        let text: String = line
            .repeat(chars / line.len() + 1)
            .chars()
            .take(chars)
            .collect();
        messages.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(id.clone(), "read_log", json!({"page": i}))],
        ));
        messages.push(Message::tool_result(id, "read_log", text));
    }
    messages
}

fn json_of(m: &Message) -> Value {
    serde_json::from_str(m.content.as_str().unwrap()).unwrap()
}

/// Which tool results went as a stub naming no artifact, by round.
fn unkept(sent: &ChatRequest) -> Vec<usize> {
    sent.messages
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .enumerate()
        .filter(|(_, m)| {
            let text = m.content.as_str().unwrap();
            is_stub(text) && json_of(m).get("context_artifact").is_none()
        })
        .map(|(i, _)| i)
        .collect()
}

async fn send(
    service: &mut (
             impl Service<ChatRequest, Response = ChatResponse, Error = llm_context_layers::BoxError>
             + Send
         ),
    messages: Vec<Message>,
) -> ChatResponse {
    let req = ChatRequest::new("m", messages)
        .with_scope(Scope::org("acme"))
        .with_session("s1");
    ServiceExt::<ChatRequest>::ready(service)
        .await
        .unwrap()
        .call(req)
        .await
        .unwrap()
}

#[tokio::test]
async fn past_the_byte_bound_the_oldest_go_as_stubs_in_steps_of_a_quarter() {
    // 2,000-byte artifacts, a 40,000-byte bound: a quarter is five results.
    let policy = ContextPolicy::default()
        .with_max_context_tokens(10_000_000)
        .with_tool_result_max_chars(1_000)
        .with_max_artifact_bytes(40_000);
    let layer = ContextPolicyLayer::new(policy).unwrap();
    let store = layer.artifact_store();
    let model = MockModel::echo();
    let mut service = layer.layer(model.clone());
    let mut previous: Option<Vec<usize>> = None;
    for n in 20..=36 {
        let reply = send(&mut service, transcript(n, 2_000)).await;
        let sent = model.last_request().unwrap();
        let cleared = unkept(&sent);
        // Named bytes within the bound, cleared oldest first, by whole quarters.
        let excess = (n * 2_000).saturating_sub(40_000);
        let expected = excess.div_ceil(10_000) * 5;
        assert_eq!(cleared, (0..expected).collect::<Vec<_>>(), "n = {n}");
        assert_eq!(reply.report.unkept_artifacts, expected);
        assert_eq!(reply.report.offloaded_results, n - expected);
        assert_eq!(reply.report.cleared_results, expected);
        // The stub says why, and every preview left is readable.
        for (i, m) in sent
            .messages
            .iter()
            .filter(|m| m.tool_call_id.is_some())
            .enumerate()
        {
            let text = m.content.as_str().unwrap();
            if cleared.contains(&i) {
                assert!(
                    json_of(m)["instructions"]
                        .as_str()
                        .unwrap()
                        .contains("keeps only")
                );
                continue;
            }
            assert!(is_preview(text), "round {i} of {n}");
            let id = json_of(m)["context_artifact"].as_str().unwrap().to_owned();
            assert!(
                store
                    .get(&sent.scope, &sent.session, &id)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        // A new result moves the cleared set only when it crosses a quarter.
        if let Some(prev) = &previous
            && excess % 10_000 != 2_000
        {
            assert_eq!(
                &cleared, prev,
                "n = {n}: the cleared set moved inside a quarter"
            );
        }
        previous = Some(cleared);
    }
}

#[tokio::test]
async fn a_session_evicted_from_the_store_gets_its_artifacts_again() {
    // One session at a time in the store: the second session evicts the first whole,
    // while the layer still remembers the first one's previews.
    let store = Arc::new(LocalArtifactStore::new(
        ArtifactLimits::default().with_sessions(1),
    ));
    let layer =
        ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(1_000_000))
            .unwrap()
            .with_artifact_store(store.clone());
    let model = MockModel::echo();
    let mut service = layer.layer(model.clone());
    let messages = transcript(2, 8_000);
    let mut reused = Vec::new();
    for session in ["a", "b", "a"] {
        let req = ChatRequest::new("m", messages.clone())
            .with_scope(Scope::org("acme"))
            .with_session(session);
        let reply = ServiceExt::<ChatRequest>::ready(&mut service)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap();
        assert_eq!(reply.report.offloaded_results, 2);
        assert_eq!(reply.report.unkept_artifacts, 0);
        reused.push(reply.report.reused_previews);
        let sent = model.last_request().unwrap();
        for m in sent.messages.iter().filter(|m| m.tool_call_id.is_some()) {
            let id = json_of(m)["context_artifact"].as_str().unwrap().to_owned();
            let artifact = store.get(&sent.scope, session, &id).await.unwrap();
            assert!(artifact.is_some(), "{session}: {id} sent but not stored");
        }
    }
    // The third request reused the previews it made first (the same bytes), and stored
    // their artifacts again from its own texts.
    assert_eq!(reused, [0, 0, 2]);
    assert_eq!(model.requests()[0].messages, model.requests()[2].messages);
}

#[tokio::test]
async fn an_artifact_the_store_cannot_keep_goes_as_a_stub_naming_none() {
    // The store keeps 4,000 bytes in all: an 8,000-character result cannot be kept.
    let store = Arc::new(LocalArtifactStore::new(
        ArtifactLimits::default().with_total_bytes(4_000),
    ));
    let layer =
        ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(1_000_000))
            .unwrap()
            .with_artifact_store(store.clone());
    let model = MockModel::echo();
    let reply = layer
        .layer(model.clone())
        .oneshot(
            ChatRequest::new("m", transcript(1, 8_000))
                .with_scope(Scope::org("acme"))
                .with_session("s1"),
        )
        .await
        .unwrap();
    let sent = model.last_request().unwrap();
    let result = sent.messages.last().unwrap();
    assert!(is_stub(result.content.as_str().unwrap()));
    assert!(json_of(result).get("context_artifact").is_none());
    assert_eq!(json_of(result)["original_chars"], 8_000);
    assert_eq!(reply.report.unkept_artifacts, 1);
    assert_eq!(reply.report.offloaded_results, 0);
    assert_eq!(reply.report.cleared_results, 1);
    // The report's estimate is of what was sent.
    assert_eq!(
        reply.report.after_tokens,
        sent.estimate_tokens(),
        "after_tokens follows the stub"
    );
}
