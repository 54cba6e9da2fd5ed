//! `GenAiSpanLayer`: one span per call with the GenAI attributes and the report, recorded
//! from the answer; a failure's `error.type`; no content in any field; streams recorded
//! at their end. A subscriber layer here captures every span's fields as they are set.

use crate::support::Fields;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_context_layers::artifact::{READ_ARTIFACT_TOOL, artifact_id};
use llm_context_layers::memo::{MemoKey, MemoLayer, MemoStore};
use llm_context_layers::mock::{MockModel, MockReply};
use llm_context_layers::store::StoreError;
use llm_context_layers::stream::Streaming;
use llm_context_layers::trace::GenAiSpanLayer;
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, Scope,
    ToolCall, Usage,
};
use serde_json::json;
use tower::{Layer, ServiceBuilder, ServiceExt};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

type Spans = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

/// Every span opened, by name, with its fields' values as last recorded.
#[derive(Clone, Default)]
struct Capture {
    spans: Spans,
    ids: Arc<Mutex<HashMap<u64, usize>>>,
    /// Each span's parent, by its index in `spans`.
    parents: Arc<Mutex<Vec<Option<usize>>>>,
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        let mut ids = self.ids.lock().unwrap();
        let mut spans = self.spans.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
        self.parents
            .lock()
            .unwrap()
            .push(parent.and_then(|p| ids.get(&p).copied()));
        ids.insert(id.into_u64(), spans.len() - 1);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let Some(&i) = self.ids.lock().unwrap().get(&id.into_u64()) else {
            return;
        };
        values.record(&mut Fields(&mut self.spans.lock().unwrap()[i].1));
    }
}

fn chat_spans(capture: &Capture) -> Vec<HashMap<String, String>> {
    capture
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name == "gen_ai.chat")
        .map(|(_, f)| f.clone())
        .collect()
}

const SECRET: &str = "Das Passwort ist hunter2 — 秘密";

#[tokio::test]
async fn a_call_is_one_span_with_the_gen_ai_attributes_and_the_report() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let provider = tower::service_fn(|_req: ChatRequest| async {
        let mut response = ChatResponse::new(Message::assistant(SECRET))
            .with_usage(Usage::new(900, 250, 4_000, 100));
        response
            .provider_fields
            .insert("id".into(), json!("msg_01XYZ"));
        response
            .provider_fields
            .insert("model".into(), json!("claude-sonnet-4-6-20260101"));
        Ok::<_, BoxError>(response)
    });
    let agent = ServiceBuilder::new()
        .layer(GenAiSpanLayer::new())
        .layer(ContextPolicyLayer::new(ContextPolicy::default()).unwrap())
        .service(provider);
    let req = ChatRequest::new("claude-sonnet-4-6", vec![Message::user(SECRET)]);
    agent.oneshot(req).await.unwrap();
    let spans = chat_spans(&capture);
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    let get = |k: &str| {
        s.get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {k} in {s:?}"))
    };
    assert_eq!(get("otel.name"), "chat claude-sonnet-4-6");
    assert_eq!(get("gen_ai.operation.name"), "chat");
    assert_eq!(get("gen_ai.provider.name"), "anthropic");
    assert_eq!(get("gen_ai.request.model"), "claude-sonnet-4-6");
    assert_eq!(get("gen_ai.response.model"), "claude-sonnet-4-6-20260101");
    assert_eq!(get("gen_ai.response.id"), "msg_01XYZ");
    assert_eq!(get("gen_ai.response.finish_reasons"), "[\"stop\"]");
    assert_eq!(
        get("gen_ai.usage.input_tokens"),
        "5000",
        "cached tokens included"
    );
    assert_eq!(get("gen_ai.usage.output_tokens"), "250");
    assert_eq!(get("gen_ai.usage.cache_read.input_tokens"), "4000");
    assert_eq!(get("gen_ai.usage.cache_creation.input_tokens"), "100");
    assert!(get("llm_context.before_tokens").parse::<u64>().unwrap() > 0);
    assert_eq!(get("llm_context.removed_messages"), "0");
    assert_eq!(get("llm_context.memo_hit"), "false");
    assert!(!s.contains_key("error.type"));
    // No prompt or completion content anywhere.
    for (name, fields) in capture.spans.lock().unwrap().iter() {
        for value in fields.values() {
            assert!(!value.contains("hunter2"), "{name}: {value}");
        }
    }
}

#[tokio::test]
async fn a_refused_call_has_its_error_type_and_a_stream_is_recorded_at_its_end() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let policy = ContextPolicy::default()
        .with_max_context_tokens(1_000)
        .with_reserve_tokens(100);
    let layer = ContextPolicyLayer::new(policy).unwrap();
    let agent = GenAiSpanLayer::new().layer(layer.layer(MockModel::echo()));
    let too_big = ChatRequest::new("gpt-5.4", vec![Message::user("Wort ".repeat(5_000))]);
    agent.clone().oneshot(too_big).await.unwrap_err();
    let stream = agent
        .clone()
        .oneshot(Streaming(ChatRequest::new(
            "gpt-5.4",
            vec![Message::user("Hallo?")],
        )))
        .await
        .unwrap();
    let response = stream.response().await.unwrap();
    let spans = chat_spans(&capture);
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0]["error.type"], "context_limit");
    assert_eq!(spans[0]["gen_ai.provider.name"], "openai");
    assert_eq!(
        spans[1]["gen_ai.usage.output_tokens"],
        response.usage.output_tokens.to_string()
    );
    assert!(!spans[1].contains_key("error.type"));
}

#[tokio::test]
async fn without_a_subscriber_the_call_is_unchanged() {
    let agent = GenAiSpanLayer::new().layer(MockModel::echo());
    let reply = agent
        .oneshot(ChatRequest::new("m", vec![Message::user("hi")]))
        .await
        .unwrap();
    assert!(reply.message.text().starts_with("saw 1 messages"));
}

#[tokio::test]
async fn a_streamed_calls_artifact_rounds_are_child_spans_of_the_call() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let big: String = (0..300)
        .map(|i| {
            format!("{{\"level\":\"error\",\"i\":{i},\"msg\":\"connexion refusée — 接続拒否\"}}\n")
        })
        .collect();
    let req = ChatRequest::new(
        "gpt-5.4",
        vec![
            Message::user("Warum schlug das Deployment fehl?"),
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new("c1", "fetch_logs", json!({"unit": "deploy"}))],
            ),
            Message::tool_result("c1", "fetch_logs", big.as_str()),
        ],
    )
    .with_scope(Scope::org("acme"))
    .with_session("s1");
    let id = artifact_id(&req.scope, &req.session, &big);
    let model = MockModel::scripted([
        MockReply::ToolCalls(
            "Ich lese das Ende.".into(),
            vec![ToolCall::new(
                "r1",
                READ_ARTIFACT_TOOL,
                json!({"artifact_id": id, "offset": 0, "max_chars": 200}),
            )],
        ),
        MockReply::text("Die Datenbank verweigerte die Verbindung."),
    ]);
    let agent = GenAiSpanLayer::new().layer(
        ContextPolicyLayer::new(ContextPolicy::default())
            .unwrap()
            .with_auto_resolve()
            .layer(model.clone()),
    );
    let stream = agent.oneshot(Streaming(req)).await.unwrap();
    let response = stream.response().await.unwrap();
    assert_eq!(model.calls(), 2, "the read was answered inside the stream");
    assert_eq!(
        response.message.text(),
        "Die Datenbank verweigerte die Verbindung."
    );
    let spans = capture.spans.lock().unwrap().clone();
    let parents = capture.parents.lock().unwrap().clone();
    let named =
        |name: &str| -> Vec<usize> { (0..spans.len()).filter(|&i| spans[i].0 == name).collect() };
    let chat = named("gen_ai.chat");
    assert_eq!(chat.len(), 1, "{spans:?}");
    let rounds = named("llm_context.artifact_round");
    assert_eq!(rounds.len(), 1, "{spans:?}");
    assert_eq!(
        parents[rounds[0]],
        Some(chat[0]),
        "the round is the call's child"
    );
    assert_eq!(spans[rounds[0]].1["llm_context.round"], "1");
}

#[tokio::test]
async fn content_is_captured_only_when_asked_and_cut_to_its_cap() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let model = || {
        tower::service_fn(|_req: ChatRequest| async {
            Ok::<_, BoxError>(ChatResponse::new(Message::assistant(
                "Geheim bleibt geheim.",
            )))
        })
    };
    let ask = |text: String| ChatRequest::new("gpt-5.4", vec![Message::user(text)]);
    GenAiSpanLayer::new()
        .with_content_capture(10_000)
        .layer(model())
        .oneshot(ask(SECRET.to_owned()))
        .await
        .unwrap();
    // A prompt far over the cap: cut, and said to be.
    GenAiSpanLayer::new()
        .with_content_capture(64)
        .layer(model())
        .oneshot(ask(SECRET.repeat(50)))
        .await
        .unwrap();
    let spans = chat_spans(&capture);
    assert_eq!(spans.len(), 2);
    let input: serde_json::Value =
        serde_json::from_str(&spans[0]["gen_ai.input.messages"]).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": SECRET}]}])
    );
    let output: serde_json::Value =
        serde_json::from_str(&spans[0]["gen_ai.output.messages"]).unwrap();
    assert_eq!(output[0]["parts"][0]["content"], "Geheim bleibt geheim.");
    assert_eq!(output[0]["finish_reason"], "stop");
    assert!(!spans[0].contains_key("llm_context.content_truncated"));
    let cut = &spans[1]["gen_ai.input.messages"];
    assert!(cut.len() <= 64, "{} bytes", cut.len());
    assert!(
        cut.starts_with("[{\"role\":\"user\",\"parts\":[{\"type\":\"text\",\"content\":\"Das"),
        "{cut}"
    );
    assert_eq!(spans[1]["llm_context.content_truncated"], "true");
}

/// A memo store whose `get` never answers.
struct HangingStore;

#[async_trait::async_trait]
impl MemoStore for HangingStore {
    async fn get(&self, _: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        std::future::pending().await
    }

    async fn put(&self, _: &MemoKey, _: &ChatResponse) -> Result<(), StoreError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_store_call_that_times_out_is_a_child_span_of_the_call() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let memo = MemoLayer::new(Arc::new(HangingStore)).store_timeout(Duration::from_millis(20));
    let agent = ServiceBuilder::new()
        .layer(GenAiSpanLayer::new())
        .layer(
            ContextPolicyLayer::new(ContextPolicy::default())
                .unwrap()
                .with_memo(memo),
        )
        .service(MockModel::echo());
    let req = ChatRequest::new("gpt-5.4", vec![Message::user("Wie spät ist es?")])
        .with_scope(Scope::org("acme"))
        .with_temperature(0.0);
    let reply = agent.oneshot(req).await.unwrap();
    assert!(!reply.report.memo_hit, "the call went on without the memo");
    let spans = capture.spans.lock().unwrap().clone();
    let parents = capture.parents.lock().unwrap().clone();
    let chat = (0..spans.len())
        .find(|&i| spans[i].0 == "gen_ai.chat")
        .unwrap();
    let stores: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].0 == "llm_context.store")
        .collect();
    let op = |i: usize| spans[i].1["llm_context.store.operation"].clone();
    let get = *stores
        .iter()
        .find(|&&i| op(i) == "memo.get")
        .unwrap_or_else(|| panic!("{spans:?}"));
    assert_eq!(spans[get].1["error.type"], "Timeout");
    assert_eq!(spans[get].1["otel.status_code"], "ERROR");
    assert_eq!(parents[get], Some(chat), "under the call it held up");
    // The failure opened the memo's breaker: the answer is not stored, no `put` is made.
    assert!(stores.iter().all(|&i| op(i) != "memo.put"), "{spans:?}");
}
