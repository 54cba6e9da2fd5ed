//! `GenAiSpanLayer`: one span per call with the GenAI attributes and the report, recorded
//! from the answer; a failure's `error.type`; no content in any field; streams recorded
//! at their end. A subscriber layer here captures every span's fields as they are set.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use llm_context_layers::mock::MockModel;
use llm_context_layers::stream::Streaming;
use llm_context_layers::trace::GenAiSpanLayer;
use llm_context_layers::{
    BoxError, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, Message, Usage,
};
use serde_json::json;
use tower::{Layer, ServiceBuilder, ServiceExt};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};

type Spans = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

/// Every span opened, by name, with its fields' values as last recorded.
#[derive(Clone, Default)]
struct Capture {
    spans: Spans,
    ids: Arc<Mutex<HashMap<u64, usize>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
        self.ids
            .lock()
            .unwrap()
            .insert(id.into_u64(), spans.len() - 1);
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
        .with_max_tokens(1_000)
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
