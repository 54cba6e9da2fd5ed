//! Each fitting layer through tower-test's mock: the rewritten request, readiness and
//! errors passing through, and no inner call on `ContextLimitError`.

use crate::support::{assert_pairing, tool_turn};
use llm_context_layers::artifact::is_stub;
use llm_context_layers::fit::{ClearLayer, PruneLayer};
use llm_context_layers::tokens::{estimate_message_tokens, estimate_tool_tokens};
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy, ContextPolicyLayer,
    Message, Role, ToolCall,
};
use serde_json::json;
use std::task::Poll;
use tokio_test::{assert_pending, assert_ready_ok};
use tower_test::mock;

type Handle = mock::Handle<ChatRequest, ChatResponse>;

fn answer() -> ChatResponse {
    ChatResponse::new(Message::assistant("ok"))
}

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest::new("test-model", messages)
}

/// Sends `req` through `layer` over a tower-test mock and returns what the inner service
/// received (or the error, with no inner call).
async fn through<L>(layer: L, req: ChatRequest) -> Result<(ChatRequest, ChatResponse), BoxError>
where
    L: tower::Layer<mock::Mock<ChatRequest, ChatResponse>>,
    L::Service: tower::Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    let (mut service, mut handle): (_, Handle) = mock::spawn_layer(layer);
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let future = service.call(req);
    let inner = tokio::spawn(async move {
        let (seen, send) = handle.next_request().await?;
        send.send_response(answer());
        Some(seen)
    });
    let result = future.await;
    match result {
        Ok(resp) => Ok((inner.await.unwrap().expect("inner called"), resp)),
        Err(e) => {
            inner.abort();
            Err(e)
        }
    }
}

#[tokio::test]
async fn prune_drops_oldest_turns_and_keeps_system_and_recent() {
    let policy = ContextPolicy::default()
        .with_max_context_tokens(600)
        .with_reserve_tokens(100);
    let mut messages = vec![Message::system("rules")];
    for t in 0..6 {
        messages.extend(tool_turn(&format!("t{t}"), 1, 400));
    }
    let (seen, resp) = through(PruneLayer::new(policy).unwrap(), request(messages.clone()))
        .await
        .unwrap();
    assert_eq!(seen.messages[0], Message::system("rules"));
    // Whole turns went: the kept tail starts at a user request.
    assert!(seen.messages[1].is_user_request());
    assert_eq!(seen.messages.last(), messages.last());
    let after = estimate_message_tokens(&seen.messages);
    assert!(after <= 500, "{after}");
    assert_eq!(resp.report.after_tokens, after);
    assert_eq!(
        resp.report.removed_messages,
        messages.len() - seen.messages.len()
    );
    assert!(resp.report.pruned_turns >= 1);
    // Each turn is four messages: request, call, result, answer.
    assert_eq!(
        resp.report.history_start,
        Some(1 + 4 * resp.report.pruned_turns)
    );
    assert_pairing(&messages, &seen.messages);
}

#[tokio::test]
async fn readiness_passes_through() {
    let (mut service, mut handle): (_, Handle) =
        mock::spawn_layer(PruneLayer::new(ContextPolicy::default()).unwrap());
    handle.allow(0);
    assert_pending!(service.poll_ready());
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
}

#[tokio::test]
async fn inner_errors_pass_through() {
    let (mut service, mut handle): (_, Handle) =
        mock::spawn_layer(ContextPolicyLayer::new(ContextPolicy::default()).unwrap());
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let future = service.call(request(vec![Message::user("hi")]));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error(std::io::Error::other("provider down"));
    let err = future.await.unwrap_err();
    assert_eq!(err.to_string(), "provider down");
}

#[tokio::test]
async fn context_limit_makes_no_inner_call() {
    let policy = ContextPolicy::default()
        .with_max_context_tokens(300)
        .with_reserve_tokens(100);
    let (mut service, mut handle): (_, Handle) =
        mock::spawn_layer(ContextPolicyLayer::new(policy).unwrap());
    handle.allow(1);
    assert_ready_ok!(service.poll_ready());
    let huge = request(vec![
        Message::system("rules"),
        Message::user("y".repeat(4_000)),
    ]);
    let err = service.call(huge).await.unwrap_err();
    let limit = err
        .downcast_ref::<ContextLimitError>()
        .expect("a ContextLimitError");
    assert_eq!(limit.allowance, 200);
    assert_eq!(limit.breakdown.current_turn_tokens, 4 + 1_000);
    assert_eq!(limit.breakdown.system_tokens, 4 + 1);
    assert_eq!(limit.needed_tokens, limit.breakdown.total());
    assert!(limit.to_string().contains("current turn 1004"), "{limit}");
    // The inner service never saw a request.
    assert!(matches!(futures_poll(handle.next_request()), Poll::Pending));
}

fn futures_poll<F: std::future::Future>(f: F) -> Poll<F::Output> {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    f.as_mut().poll(&mut std::task::Context::from_waker(waker))
}

#[tokio::test]
async fn clear_keeps_role_id_and_name_and_protects_the_newest() {
    // ~900 tokens against an allowance of 400: even three stubs leave it over, so the
    // layer clears all it may, and the newest result stays.
    let policy = ContextPolicy::default()
        .with_max_context_tokens(500)
        .with_reserve_tokens(100)
        .with_preserve_tool_results(1);
    let messages = tool_turn("t", 4, 800);
    let (seen, resp) = through(ClearLayer::new(policy).unwrap(), request(messages.clone()))
        .await
        .unwrap();
    assert_eq!(
        seen.messages.len(),
        messages.len(),
        "clearing removes nothing"
    );
    let results: Vec<&Message> = seen
        .messages
        .iter()
        .filter(|m| m.is_tool_result())
        .collect();
    // Oldest first, and the newest result is protected.
    assert!(is_stub(results[0].content.as_str().unwrap()));
    assert!(!is_stub(results[3].content.as_str().unwrap()));
    for (orig, new) in messages.iter().zip(&seen.messages) {
        assert_eq!(
            (orig.role, &orig.tool_call_id, orig.name()),
            (new.role, &new.tool_call_id, new.name())
        );
    }
    let stub: serde_json::Value =
        serde_json::from_str(results[0].content.as_str().unwrap()).unwrap();
    assert_eq!(stub["original_chars"], 800);
    assert_eq!(stub["tool"], "read_log");
    assert_eq!(resp.report.cleared_results, 3);
}

#[tokio::test]
async fn clear_alone_never_fails() {
    let policy = ContextPolicy::default()
        .with_max_context_tokens(200)
        .with_reserve_tokens(100);
    let messages = vec![Message::user("z".repeat(5_000))];
    let (seen, resp) = through(ClearLayer::new(policy).unwrap(), request(messages.clone()))
        .await
        .unwrap();
    assert_eq!(seen.messages, messages);
    assert!(resp.report.after_tokens > resp.report.prompt_allowance);
}

#[tokio::test]
async fn never_clear_tools_and_unseen_results_are_kept() {
    let mut messages = vec![Message::user("plan then search")];
    messages.push(Message::assistant_tool_calls(
        "",
        vec![ToolCall::new("p", "plan", json!({}))],
    ));
    messages.push(Message::tool_result("p", "plan", "step ".repeat(300)));
    messages.push(Message::assistant_tool_calls(
        "",
        vec![
            ToolCall::new("a", "search", json!({})),
            ToolCall::new("b", "search", json!({})),
            ToolCall::new("c", "search", json!({})),
        ],
    ));
    for id in ["a", "b", "c"] {
        messages.push(Message::tool_result(id, "search", "hit ".repeat(300)));
    }
    let policy = ContextPolicy::default()
        .with_max_context_tokens(400)
        .with_reserve_tokens(100)
        .with_preserve_tool_results(1)
        .with_never_clear("plan");
    let (seen, _) = through(ClearLayer::new(policy).unwrap(), request(messages.clone()))
        .await
        .unwrap();
    // Nothing can be cleared: the plan is exempt, and the three search results answer the
    // newest assistant message, which the model has not seen answered yet.
    assert_eq!(seen.messages, messages);
}

// Known failure modes of context managers, each as a test of the fixed behaviour.

#[tokio::test]
async fn user_role_tool_results_keep_the_question_and_the_pairing() {
    let mut messages = vec![
        Message::system("rules"),
        Message::user("the original question"),
    ];
    for r in 0..6 {
        let id = format!("c{r}");
        messages.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(&id, "f", json!({}))],
        ));
        // Anthropic-style: results with role user.
        messages.push(Message::user("r".repeat(400)).with_tool_call_id(&id));
    }
    let policy = ContextPolicy::default()
        .with_max_context_tokens(500)
        .with_reserve_tokens(100);
    let (seen, resp) = through(
        ContextPolicyLayer::new(policy).unwrap(),
        request(messages.clone()),
    )
    .await
    .unwrap();
    assert_eq!(seen.messages[1], Message::user("the original question"));
    assert_eq!(resp.report.pruned_turns, 0, "one turn: nothing to prune");
    assert_pairing(&messages, &seen.messages);
}

#[tokio::test]
async fn one_long_agentic_turn_is_not_a_dead_end() {
    let mut messages = vec![Message::system("rules")];
    messages.extend(tool_turn("only", 300, 600));
    messages.pop(); // still working: no final answer yet
    let before = estimate_message_tokens(&messages);
    let policy = ContextPolicy::default()
        .with_max_context_tokens(8_000)
        .with_reserve_tokens(1_000);
    let (seen, resp) = through(
        ContextPolicyLayer::new(policy).unwrap(),
        request(messages.clone()),
    )
    .await
    .unwrap();
    assert!(before > 40_000);
    assert!(resp.report.cleared_results > 0, "cleared first");
    assert!(resp.report.dropped_rounds > 0, "then dropped old rounds");
    assert!(estimate_message_tokens(&seen.messages) <= 7_000);
    assert_eq!(seen.messages[1], messages[1], "the user request stays");
    // The newest rounds stay whole and uncleared.
    let n = seen.messages.len();
    assert_eq!(&seen.messages[n - 2..], &messages[messages.len() - 2..]);
    assert_pairing(&messages, &seen.messages);
}

#[tokio::test]
async fn clearing_first_is_a_policy_choice() {
    let mut messages = Vec::new();
    messages.extend(tool_turn("old", 1, 3_000));
    messages.extend(tool_turn("mid", 1, 100));
    messages.extend(tool_turn("new", 1, 100));
    let base = ContextPolicy::default()
        .with_max_context_tokens(900)
        .with_reserve_tokens(100)
        .with_preserve_tool_results(1);
    let (pruned, r1) = through(
        ContextPolicyLayer::new(base.clone()).unwrap(),
        request(messages.clone()),
    )
    .await
    .unwrap();
    assert_eq!(r1.report.pruned_turns, 1);
    assert_eq!(r1.report.cleared_results, 0);
    assert!(pruned.messages[0].text().starts_with("mid"));

    let (cleared, r2) = through(
        ContextPolicyLayer::new(base.with_clear_before_prune(true)).unwrap(),
        request(messages.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        r2.report.pruned_turns, 0,
        "clearing one old result was enough"
    );
    assert_eq!(r2.report.cleared_results, 1);
    assert_eq!(cleared.messages.len(), messages.len());
}

#[tokio::test]
async fn tools_and_prefix_count_in_the_allowance() {
    let tools = vec![llm_context_layers::ToolSpec::new(
        "search",
        "d".repeat(1_600),
        json!({"type": "object"}),
    )];
    let tool_tokens = estimate_tool_tokens(&tools);
    let mut messages = Vec::new();
    for t in 0..4 {
        messages.extend(tool_turn(&format!("t{t}"), 0, 0));
        messages.push(Message::assistant("a".repeat(400)));
    }
    let policy = ContextPolicy::default()
        .with_max_context_tokens(900)
        .with_reserve_tokens(100);
    let req = request(messages).with_tools(tools.clone());
    let (seen, resp) = through(ContextPolicyLayer::new(policy).unwrap(), req)
        .await
        .unwrap();
    // The request declares tools, so the read tool is added (and counted) after them.
    let read_tool = llm_context_layers::artifact::read_artifact_tool();
    let expected_tools: Vec<_> = tools.iter().cloned().chain([read_tool]).collect();
    assert_eq!(seen.tools, expected_tools);
    let sent = estimate_tool_tokens(&seen.tools) + estimate_message_tokens(&seen.messages);
    assert!(tool_tokens < estimate_tool_tokens(&seen.tools));
    assert!(sent <= 800, "{sent}");
    assert_eq!(resp.report.after_tokens, sent);
}

#[tokio::test]
async fn roles_are_never_rewritten() {
    let policy = ContextPolicy::default()
        .with_max_context_tokens(400)
        .with_reserve_tokens(100);
    let mut messages = Vec::new();
    for t in 0..5 {
        messages.extend(tool_turn(&format!("t{t}"), 1, 300));
    }
    let (seen, _) = through(ContextPolicyLayer::new(policy).unwrap(), request(messages))
        .await
        .unwrap();
    assert!(seen.messages.iter().all(|m| m.role != Role::System));
}

#[tokio::test]
async fn a_configured_prefix_counts_in_the_allowance() {
    use llm_context_layers::prefix::PrefixLayer;
    use llm_context_layers::{PrefixContext, mock::MockModel};
    use std::sync::Arc;
    use tower::{Layer, ServiceExt};

    // 40,000 characters: 4 + 10,000 tokens of prefix against 12,000 - 1,000.
    let prefix = Arc::new(PrefixContext::new("p".repeat(40_000)));
    let policy = ContextPolicy::default()
        .with_max_context_tokens(12_000)
        .with_reserve_tokens(1_000);
    let layer = ContextPolicyLayer::new(policy)
        .unwrap()
        .with_prefix(PrefixLayer::new().with_prefix(prefix.clone()));
    let model = MockModel::echo();
    let stack = layer.layer(model.clone());
    let mut messages = Vec::new();
    for t in 0..30 {
        messages.extend(tool_turn(&format!("t{t}"), 1, 400));
    }
    let reply = stack.oneshot(request(messages)).await.unwrap();
    let sent = model.last_request().unwrap();
    assert_eq!(sent.prefix.as_deref(), Some(&*prefix), "injected");
    let total = prefix.estimated_tokens()
        + estimate_tool_tokens(&sent.tools)
        + estimate_message_tokens(&sent.messages);
    assert!(total <= 11_000, "{total}");
    assert_eq!(reply.report.after_tokens, total);
    assert!(reply.report.pruned_turns > 0);
    // The prefix is long enough to cache: its breakpoint is marked.
    assert!(sent.cache.prefix.is_some());
}

#[tokio::test]
async fn the_models_window_is_the_ceiling_when_the_policy_sets_none() {
    use llm_context_layers::catalog::Catalog;
    use llm_context_layers::mock::MockModel;
    use std::sync::Arc;
    use tower::{Layer, ServiceExt};

    let catalog = Arc::new(
        Catalog::builtin()
            .as_ref()
            .clone()
            .with_overrides_json(
                r#"{"models": {"tiny-model": {"context_window": 5000}, "too-small": {"context_window": 1000}}}"#,
            )
            .unwrap(),
    );
    let layer = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_catalog(catalog);
    let stack = layer.layer(MockModel::echo());
    let reply = stack
        .clone()
        .oneshot(ChatRequest::new("tiny-model", vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(reply.report.prompt_allowance, 5_000 - 2_048);
    let unknown = stack
        .clone()
        .oneshot(request(vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(
        unknown.report.prompt_allowance,
        32_000 - 2_048,
        "unknown model: 32,000"
    );
    // A window at or below the reserve is an error naming the field, not a silent default.
    let err = stack
        .oneshot(ChatRequest::new("too-small", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    let policy_err = err
        .downcast_ref::<llm_context_layers::PolicyError>()
        .expect("a policy error");
    assert_eq!(policy_err.field(), Some("context_window"));
}

#[tokio::test]
async fn standalone_prune_and_the_composite_plan_with_the_same_budget() {
    use llm_context_layers::mock::MockModel;
    use tower::{Layer, ServiceExt};

    // A catalog model (200,000-token window) and a policy that sets no `max_tokens`: both
    // must plan to the model's window, not to the 32,000-token fallback. Plain text only,
    // so the composite has nothing to clear or offload and only pruning differs.
    let policy = ContextPolicy::default();
    let mut messages = vec![Message::system("You are terse.")];
    for i in 0..60 {
        messages.push(Message::user(format!(
            "question {i} {}",
            "détail ".repeat(2_000)
        )));
        messages.push(Message::assistant(format!(
            "answer {i} {}",
            "réponse ".repeat(2_000)
        )));
    }
    let request = ChatRequest::new("claude-sonnet-4", messages);

    let alone = MockModel::echo();
    let reply = PruneLayer::new(policy.clone())
        .unwrap()
        .layer(alone.clone())
        .oneshot(request.clone())
        .await
        .unwrap();
    let composite = MockModel::echo();
    let composite_reply = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(composite.clone())
        .oneshot(request)
        .await
        .unwrap();

    assert!(
        reply.report.pruned_turns > 0,
        "the transcript must need pruning"
    );
    assert!(
        reply.report.after_tokens > 100_000,
        "planned to the model's window"
    );
    assert_eq!(
        reply.report.prompt_allowance,
        composite_reply.report.prompt_allowance
    );
    assert_eq!(
        alone.last_request().unwrap().messages,
        composite.last_request().unwrap().messages
    );
}
