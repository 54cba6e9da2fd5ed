//! Streamed calls through the stack: the same preparation as a non-streamed call, the
//! memo storing only completed streams and replaying them, single flight, cancellation,
//! and artifact reads answered inside one stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use llm_context_layers::artifact::{READ_ARTIFACT_TOOL, artifact_id};
use llm_context_layers::memo::{LocalMemoStore, MemoLayer, MemoStore};
use llm_context_layers::mock::{MockModel, MockReply};
use llm_context_layers::stream::{ChatStream, StreamEvent, Streaming};
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy, ContextPolicyLayer,
    FinishReason, Message, READ_BUDGET_SPENT, Scope, ToolCall,
};
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

fn transcript(result: &str) -> ChatRequest {
    let mut messages = vec![
        Message::system("You are a careful SRE assistant."),
        Message::user("Why did the deploy fail? Überprüfe die Logs."),
    ];
    messages.push(Message::assistant_tool_calls(
        "",
        vec![ToolCall::new("c1", "fetch_logs", json!({"unit": "deploy"}))],
    ));
    messages.push(Message::tool_result("c1", "fetch_logs", result));
    ChatRequest::new("mock", messages)
        .with_scope(Scope::org("acme"))
        .with_session("s1")
        .with_temperature(0.0)
}

fn logs(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "{{\"ts\":\"2026-11-30T10:{:02}:{:02}Z\",\"level\":\"error\",\"msg\":\"connexion refusée — 接続拒否 #{i}\"}}\n",
                i / 60 % 60,
                i % 60
            )
        })
        .collect()
}

async fn events(stream: ChatStream) -> Vec<StreamEvent> {
    stream.map(|e| e.unwrap()).collect().await
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn done(events: &[StreamEvent]) -> &ChatResponse {
    events
        .last()
        .and_then(StreamEvent::as_done)
        .expect("the last event is Done")
}

#[tokio::test]
async fn a_streamed_call_is_prepared_exactly_as_a_non_streamed_one() {
    let policy = ContextPolicy::default()
        .with_max_context_tokens(3_000)
        .with_reserve_tokens(500)
        .with_tool_result_max_chars(2_000);
    let reply = "The deploy failed: the database refused connections (接続拒否).";
    let plain_model = MockModel::scripted([MockReply::text(reply)]);
    let streamed_model = MockModel::scripted([MockReply::text(reply)]);
    let plain = ContextPolicyLayer::new(policy.clone())
        .unwrap()
        .layer(plain_model.clone())
        .oneshot(transcript(&logs(200)))
        .await
        .unwrap();
    let stream = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(streamed_model.clone())
        .oneshot(Streaming(transcript(&logs(200))))
        .await
        .unwrap();
    let events = events(stream).await;
    assert_eq!(
        streamed_model.last_request(),
        plain_model.last_request(),
        "the model is sent the same prepared request"
    );
    assert!(
        plain.report.offloaded_results > 0,
        "the logs were offloaded"
    );
    let final_response = done(&events);
    assert_eq!(final_response, &plain, "the same response and report");
    assert_eq!(text_of(&events), reply, "the text arrived as deltas");
    assert!(
        events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Text(_)))
            .count()
            > 1,
        "in more than one piece"
    );
}

#[tokio::test]
async fn a_request_that_cannot_fit_fails_before_anything_is_sent() {
    let model = MockModel::echo();
    let policy = ContextPolicy::default()
        .with_max_context_tokens(2_000)
        .with_reserve_tokens(500);
    let huge = ChatRequest::new("mock", vec![Message::user("слово ".repeat(5_000))]);
    let err = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(model.clone())
        .oneshot(Streaming(huge))
        .await
        .unwrap_err();
    assert!(err.downcast_ref::<ContextLimitError>().is_some(), "{err}");
    assert_eq!(model.calls(), 0);
}

/// Streams a canned answer after `delay`, counting calls; its streams end early when
/// `cut_after` says so (a connection cut).
#[derive(Clone)]
struct Upstream {
    calls: Arc<AtomicUsize>,
    delay: Duration,
    cut_after: Option<usize>,
}

impl Upstream {
    fn new(delay: Duration) -> Self {
        Self {
            calls: Arc::default(),
            delay,
            cut_after: None,
        }
    }
}

impl Service<Streaming> for Upstream {
    type Response = ChatStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ChatStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Streaming) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (delay, cut) = (self.delay, self.cut_after);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let answer = ChatResponse::new(Message::assistant(
                "Die Datenbank hat die Verbindung verweigert. ".repeat(8),
            ));
            let full = ChatStream::replay(answer);
            Ok(match cut {
                Some(n) => ChatStream::new(full.take(n)),
                None => full,
            })
        })
    }
}

fn memo_stack(
    upstream: Upstream,
    store: Arc<dyn MemoStore>,
) -> impl Service<Streaming, Response = ChatStream, Error = BoxError> + Clone {
    ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(8_000))
        .unwrap()
        .with_memo(MemoLayer::new(store))
        .layer(upstream)
}

#[tokio::test]
async fn the_memo_replays_a_completed_stream_as_the_same_stream() {
    let upstream = Upstream::new(Duration::ZERO);
    let store: Arc<dyn MemoStore> = Arc::new(LocalMemoStore::default());
    let stack = memo_stack(upstream.clone(), store);
    let first = events(
        stack
            .clone()
            .oneshot(Streaming(transcript("ok")))
            .await
            .unwrap(),
    )
    .await;
    let second = events(
        stack
            .clone()
            .oneshot(Streaming(transcript("ok")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        upstream.calls.load(Ordering::SeqCst),
        1,
        "the second is a hit"
    );
    assert!(!done(&first).report.memo_hit);
    assert!(done(&second).report.memo_hit);
    assert_eq!(done(&second).message, done(&first).message);
    let deltas = |e: &[StreamEvent]| e[..e.len() - 1].to_vec();
    assert_eq!(
        deltas(&second),
        deltas(&first),
        "the same events before Done"
    );
}

#[tokio::test]
async fn a_stream_dropped_or_cut_off_stores_nothing() {
    let store: Arc<dyn MemoStore> = Arc::new(LocalMemoStore::default());
    let upstream = Upstream::new(Duration::ZERO);
    let stack = memo_stack(upstream.clone(), store.clone());
    // The caller reads one event and goes away.
    let mut stream = stack
        .clone()
        .oneshot(Streaming(transcript("ok")))
        .await
        .unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(StreamEvent::Text(_)))
    ));
    drop(stream);
    // The connection is cut after two events: an error, not a response.
    let cut = Upstream {
        cut_after: Some(2),
        ..upstream.clone()
    };
    let stream = memo_stack(cut, store.clone())
        .oneshot(Streaming(transcript("ok")))
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    assert!(
        items.last().unwrap().is_err(),
        "a cut stream ends with an error"
    );
    // Neither was stored: the next call goes upstream.
    let events = events(stack.oneshot(Streaming(transcript("ok"))).await.unwrap()).await;
    assert!(!done(&events).report.memo_hit);
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn identical_streams_in_flight_share_one_upstream_call() {
    let upstream = Upstream::new(Duration::from_millis(50));
    let store: Arc<dyn MemoStore> = Arc::new(LocalMemoStore::default());
    let stack = memo_stack(upstream.clone(), store);
    let make = || {
        let stack = stack.clone();
        async move { events(stack.oneshot(Streaming(transcript("ok"))).await.unwrap()).await }
    };
    let (a, b) = tokio::join!(make(), make());
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 1);
    assert_eq!(done(&a).message, done(&b).message);
    assert_eq!(text_of(&a), text_of(&b));
    assert_ne!(
        done(&a).report.memo_hit,
        done(&b).report.memo_hit,
        "one led, one waited"
    );
}

#[tokio::test]
async fn artifact_reads_are_answered_inside_one_stream() {
    let big = format!("HEADER\n{}\nSECRET-AT-THE-END", logs(300));
    let req = transcript(&big);
    let id = artifact_id(&req.scope, &req.session, &big);
    let model = MockModel::scripted([
        MockReply::ToolCalls(
            "Reading the end of the log.".into(),
            vec![ToolCall::new(
                "r1",
                READ_ARTIFACT_TOOL,
                json!({"artifact_id": id, "offset": big.chars().count() - 40, "max_chars": 100}),
            )],
        ),
        MockReply::text("The log ends with SECRET-AT-THE-END."),
    ]);
    let stream = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_auto_resolve()
        .layer(model.clone())
        .oneshot(Streaming(req))
        .await
        .unwrap();
    let events = events(stream).await;
    assert_eq!(model.calls(), 2);
    assert!(
        !events.iter().any(|e| matches!(e, StreamEvent::ToolCall(_))),
        "the artifact read never reaches the caller"
    );
    assert_eq!(
        text_of(&events),
        "The log ends with SECRET-AT-THE-END.",
        "the hidden round's text never reaches the caller: only the answer's"
    );
    let last = done(&events);
    assert_eq!(last.message.text(), "The log ends with SECRET-AT-THE-END.");
    assert_eq!(last.report.resolved_messages.len(), 2);
    // The caller is billed for both rounds: the answer's usage is their sum.
    let sent: u64 = model
        .requests()
        .iter()
        .map(|r| r.estimate_tokens() as u64)
        .sum();
    assert_eq!(last.usage.input_tokens, sent, "both rounds' prompts");
    let usage: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .collect();
    assert!(
        usage.iter().all(|u| u.input_tokens < sent),
        "no hidden round's usage event: {usage:?}"
    );
}

#[tokio::test]
async fn a_round_that_calls_a_client_tool_is_the_answer_with_its_text() {
    // Offered the read tool, the model calls a client tool instead: what was held while
    // the round might have been hidden goes out, text first.
    let big = format!("HEADER\n{}\nSECRET-AT-THE-END", logs(300));
    let model = MockModel::scripted([MockReply::ToolCalls(
        "Restarting it.".into(),
        vec![ToolCall::new(
            "c9",
            "restart_service",
            json!({"name": "db"}),
        )],
    )]);
    let stream = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_auto_resolve()
        .layer(model.clone())
        .oneshot(Streaming(transcript(&big)))
        .await
        .unwrap();
    let events = events(stream).await;
    assert!(
        model.requests()[0]
            .tools
            .iter()
            .any(|t| t.name == READ_ARTIFACT_TOOL),
        "the read tool was offered"
    );
    assert_eq!(model.calls(), 1);
    assert_eq!(text_of(&events), "Restarting it.");
    assert_eq!(done(&events).message.tool_calls[0].name, "restart_service");
}

/// The names of the calls the caller was streamed.
fn streamed_calls(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(d) => d.name.clone(),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_model_that_only_reads_ends_the_stream_without_the_read_at_the_bound() {
    let big = format!("HEADER\n{}\nSECRET-AT-THE-END", logs(300));
    let req = transcript(&big);
    let id = artifact_id(&req.scope, &req.session, &big);
    let model = MockModel::from_fn(move |_| {
        MockReply::ToolCalls(
            "Let me read more.".into(),
            vec![ToolCall::new(
                "r",
                READ_ARTIFACT_TOOL,
                json!({"artifact_id": id}),
            )],
        )
    });
    let stream = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_auto_resolve_rounds(2)
        .layer(model.clone())
        .oneshot(Streaming(req))
        .await
        .unwrap();
    let events = events(stream).await;
    assert_eq!(model.calls(), 3);
    assert!(streamed_calls(&events).is_empty(), "{events:?}");
    let last = done(&events);
    assert!(!last.message.has_tool_calls());
    assert_eq!(
        last.finish_reason,
        FinishReason::Other(READ_BUDGET_SPENT.to_owned())
    );
    // The last round's text is the answer's, told once.
    assert_eq!(text_of(&events), "Let me read more.");
}

#[tokio::test]
async fn a_read_beside_a_client_call_in_either_order_never_reaches_the_stream() {
    let big = format!("HEADER\n{}\nSECRET-AT-THE-END", logs(300));
    for client_first in [false, true] {
        let req = transcript(&big);
        let id = artifact_id(&req.scope, &req.session, &big);
        let read = ToolCall::new("r1", READ_ARTIFACT_TOOL, json!({"artifact_id": id}));
        let fetch = ToolCall::new("f1", "fetch_logs", json!({"unit": "db"}));
        let calls = if client_first {
            vec![fetch, read]
        } else {
            vec![read, fetch]
        };
        let model = MockModel::scripted([
            MockReply::ToolCalls("Both.".into(), calls),
            MockReply::ToolCalls(
                "Now the logs.".into(),
                vec![ToolCall::new("f2", "fetch_logs", json!({"unit": "db"}))],
            ),
        ]);
        let stream = ContextPolicyLayer::new(ContextPolicy::default())
            .unwrap()
            .with_auto_resolve()
            .layer(model.clone())
            .oneshot(Streaming(req))
            .await
            .unwrap();
        let events = events(stream).await;
        assert_eq!(model.calls(), 2);
        assert_eq!(streamed_calls(&events), ["fetch_logs"]);
        assert_eq!(text_of(&events), "Now the logs.");
        assert_eq!(done(&events).message.tool_calls[0].id, "f2");
        // The model was shown its read alone, answered with the page.
        let second = &model.requests()[1].messages;
        let n = second.len();
        assert_eq!(second[n - 2].tool_calls.len(), 1);
        assert_eq!(second[n - 2].tool_calls[0].id, "r1");
        assert!(second[n - 1].content.as_str().unwrap().contains("HEADER"));
    }
}

#[tokio::test]
async fn tool_calls_the_stack_does_not_answer_reach_the_caller() {
    let model = MockModel::scripted([MockReply::tool_calls([ToolCall::new(
        "c2",
        "restart_service",
        json!({"name": "db", "reason": "接続拒否"}),
    )])]);
    let stream = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_auto_resolve()
        .layer(model)
        .oneshot(Streaming(transcript("ok")))
        .await
        .unwrap();
    let events = events(stream).await;
    assert!(events.iter().any(|e| matches!(e, StreamEvent::ToolCall(_))));
    let call = &done(&events).message.tool_calls[0];
    assert_eq!(call.name, "restart_service");
    assert_eq!(call.arguments_value()["reason"], "接続拒否");
}

/// A model that summarizes when asked to, and otherwise answers in words.
fn summarizing_model() -> MockModel {
    MockModel::from_fn(|req| {
        if llm_context_layers::summarize::is_summary_request(req) {
            MockReply::text(
                json!({"goals": ["find why the deploy failed"], "decisions": [], "open": [],
                       "facts": [], "narrative": "die Datenbank verweigerte (接続拒否)"})
                .to_string(),
            )
        } else {
            MockReply::text("Der Fehler liegt in der Datenbank — 接続拒否. ".repeat(4))
        }
    })
}

/// A long agent transcript: tool rounds with JSON log results.
fn long_transcript() -> ChatRequest {
    let mut req = transcript(&logs(150));
    for round in 0..12 {
        let id = format!("c{}", round + 2);
        req.messages.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                &id,
                "fetch_logs",
                json!({"unit": format!("svc-{round}")}),
            )],
        ));
        req.messages.push(Message::tool_result(
            &id,
            "fetch_logs",
            logs(60 + round * 7),
        ));
        req.messages
            .push(Message::user(format!("Und Runde {round}? 続けて。")));
    }
    req
}

/// Streams `req` through a layer over one model, and sends it plain through another
/// such layer (layers remember what they offloaded) over another model: the models see
/// the same request and the stream ends with the plain response.
async fn streams_as_it_answers<L, E1, E2>(layer: impl Fn() -> L, req: ChatRequest) -> ChatResponse
where
    L: Layer<MockModel>,
    L::Service: Service<ChatRequest, Response = ChatResponse, Error = E1>
        + Service<Streaming, Response = ChatStream, Error = E2>,
    E1: std::fmt::Debug,
    E2: std::fmt::Debug,
{
    let (plain_model, streamed_model) = (summarizing_model(), summarizing_model());
    let plain = layer()
        .layer(plain_model.clone())
        .oneshot(req.clone())
        .await
        .unwrap();
    let stream = layer()
        .layer(streamed_model.clone())
        .oneshot(Streaming(req))
        .await
        .unwrap();
    let events = events(stream).await;
    assert_eq!(streamed_model.requests(), plain_model.requests());
    assert_eq!(done(&events), &plain);
    assert_eq!(text_of(&events), plain.message.text());
    plain
}

#[tokio::test]
async fn every_layer_streams_what_it_would_have_answered() {
    use llm_context_layers::fit::{ClearLayer, PruneLayer};
    use llm_context_layers::offload::OffloadLayer;
    use llm_context_layers::summarize::{SummarizeConfig, SummarizeLayer};
    use llm_context_layers::{PrefixContext, PrefixLayer};

    let policy = ContextPolicy::default()
        .with_max_context_tokens(6_000)
        .with_reserve_tokens(1_000)
        .with_tool_result_max_chars(1_500);
    let prune = || PruneLayer::new(policy.clone()).unwrap();
    let r = streams_as_it_answers(prune, long_transcript()).await;
    assert!(r.report.removed_messages > 0, "prune removed turns");
    let clear = || ClearLayer::new(policy.clone()).unwrap();
    let r = streams_as_it_answers(clear, long_transcript()).await;
    assert!(r.report.cleared_results > 0, "clear cleared results");
    let offload = || {
        let store = ContextPolicyLayer::new(policy.clone())
            .unwrap()
            .artifact_store();
        OffloadLayer::new(policy.clone(), store).unwrap()
    };
    let r = streams_as_it_answers(offload, long_transcript()).await;
    assert!(r.report.offloaded_results > 0, "offload offloaded results");
    let prefix =
        || PrefixLayer::new().with_prefix(Arc::new(PrefixContext::new("Antworte knapp. 簡潔に。")));
    streams_as_it_answers(prefix, long_transcript()).await;
    let summarize = || SummarizeLayer::new(SummarizeConfig::new(4_000).with_keep_last(6)).unwrap();
    let r = streams_as_it_answers(summarize, long_transcript()).await;
    assert!(r.report.folded_messages > 0, "summarize folded the head");
}

#[tokio::test]
async fn usage_is_recorded_once_from_the_final_event() {
    use llm_context_layers::usage::{UsageLayer, UsageMeter};

    let meter = UsageMeter::new();
    let store: Arc<dyn MemoStore> = Arc::new(LocalMemoStore::default());
    let policy = ContextPolicy::default().with_max_context_tokens(8_000);
    let stack = tower::ServiceBuilder::new()
        .layer(UsageLayer::new(meter.clone()))
        .layer(
            ContextPolicyLayer::new(policy)
                .unwrap()
                .with_memo(MemoLayer::new(store)),
        )
        .service(Upstream::new(Duration::ZERO));
    // Dropped before its end: nothing was settled, nothing is recorded.
    let mut stream = stack
        .clone()
        .oneshot(Streaming(transcript("ok")))
        .await
        .unwrap();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    assert_eq!(meter.total().requests, 0);
    // Completed: recorded once, with the final event's usage.
    let first = events(
        stack
            .clone()
            .oneshot(Streaming(transcript("ok")))
            .await
            .unwrap(),
    )
    .await;
    let total = meter.total();
    assert_eq!(total.requests, 1);
    assert_eq!(total.usage, done(&first).usage);
    // A memo hit costs nothing.
    let hit = events(stack.oneshot(Streaming(transcript("ok"))).await.unwrap()).await;
    assert!(done(&hit).report.memo_hit);
    assert_eq!(meter.total().requests, 1);
}

#[tokio::test]
async fn a_streamed_call_checks_the_previews_it_is_sent_with_the_store() {
    // As an unstreamed call: a preview the stack made is kept as it is in its own session,
    // and in another, where the store lacks its artifact, it is text like any other result.
    let layer = ContextPolicyLayer::new(ContextPolicy::default()).unwrap();
    let model = MockModel::echo();
    let stream = |req: ChatRequest| {
        let service = layer.layer(model.clone());
        async move { done(&events(service.oneshot(Streaming(req)).await.unwrap()).await).clone() }
    };
    let first = stream(transcript(&logs(400))).await;
    assert_eq!(first.report.offloaded_results, 1);
    let genuine = model.last_request().unwrap().messages[3]
        .content
        .as_str()
        .unwrap()
        .to_owned();

    let again = stream(transcript(&genuine)).await;
    assert_eq!(again.report.offloaded_results, 0);
    assert_eq!(
        model.last_request().unwrap().messages[3].content.as_str(),
        Some(genuine.as_str()),
        "the store backs it: kept as it is"
    );

    let elsewhere = stream(transcript(&genuine).with_session("s2")).await;
    assert_eq!(
        elsewhere.report.offloaded_results, 1,
        "the imitation is offloaded as text"
    );
    let sent = model.last_request().unwrap();
    let sent = sent.messages[3].content.as_str().unwrap();
    assert_ne!(
        sent, genuine,
        "a preview of its own, naming its own artifact"
    );
}
