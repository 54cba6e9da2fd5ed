//! The span tree of a real call: `send`'s stack (the GenAI span, the context layer with
//! artifact reads answered inside, the retry with a span per attempt) over the OpenAI
//! client and a fake provider on 127.0.0.1 that fails once with 500, then reads the
//! artifact it is shown, then answers.

use crate::support::Fields;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use llm_context::attempt::AttemptSpanLayer;
use llm_context::retry::RetryPolicy;
use llm_context::trace::GenAiSpanLayer;
use llm_context::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message, ToolCall};
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as captured: its name, its parent's index, its fields.
#[derive(Clone, Debug)]
struct Captured {
    name: String,
    parent: Option<usize>,
    fields: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<Captured>>>,
    index: Arc<Mutex<HashMap<u64, usize>>>,
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent_id = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        let mut index = self.index.lock().unwrap();
        let parent = parent_id.and_then(|p| index.get(&p).copied());
        let mut spans = self.spans.lock().unwrap();
        spans.push(Captured {
            name: attrs.metadata().name().to_owned(),
            parent,
            fields,
        });
        index.insert(id.into_u64(), spans.len() - 1);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let Some(&i) = self.index.lock().unwrap().get(&id.into_u64()) else {
            return;
        };
        values.record(&mut Fields(&mut self.spans.lock().unwrap()[i].fields));
    }
}

#[tokio::test]
async fn a_call_with_a_retry_and_an_artifact_round_is_one_tree() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let server = crate::support::artifact_reader::server().await;
    let client = crate::support::proxy::openai(&server.uri());
    let context = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .with_auto_resolve();
    let retry = RetryPolicy::default().with_base_delay(std::time::Duration::from_millis(1));
    let stack = ServiceBuilder::new()
        .layer(GenAiSpanLayer::new())
        .layer(context)
        .retry(retry)
        .layer(AttemptSpanLayer)
        .service(client);
    let logs = crate::support::artifact_reader::logs();
    let req = ChatRequest::new(
        "gpt-5.4",
        vec![
            Message::user("Warum fällt die API aus?"),
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(
                    "call_logs",
                    "fetch_logs",
                    json!({"unit": "api"}),
                )],
            ),
            Message::tool_result("call_logs", "fetch_logs", logs),
        ],
    );
    let reply = stack.oneshot(req).await.unwrap();
    assert_eq!(reply.message.text(), "Die Logs zeigen einen Pool-Fehler.");

    let spans = capture.spans.lock().unwrap().clone();
    let chat: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].name == "gen_ai.chat")
        .collect();
    assert_eq!(chat.len(), 1, "{spans:#?}");
    let root = chat[0];
    let children = |of: usize, name: &str| -> Vec<usize> {
        (0..spans.len())
            .filter(|&i| spans[i].parent == Some(of) && spans[i].name == name)
            .collect()
    };
    // The first round: the failed attempt and its retry, both under the call's span.
    let attempts = children(root, "gen_ai.attempt");
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    assert_eq!(spans[attempts[0]].fields["error.type"], "Server");
    assert!(!spans[attempts[1]].fields.contains_key("error.type"));
    // The artifact read: a round of its own, with its attempt inside.
    let rounds = children(root, "llm_context.artifact_round");
    assert_eq!(rounds.len(), 1, "{spans:#?}");
    assert_eq!(children(rounds[0], "gen_ai.attempt").len(), 1);
    let f = &spans[root].fields;
    assert_eq!(f["gen_ai.response.model"], "gpt-5.4-2026-03-05");
    assert_eq!(f["gen_ai.response.id"], "chatcmpl-7");
    assert_eq!(f["llm_context.offloaded"], "1");
    assert_eq!(f["gen_ai.provider.name"], "openai");
}
