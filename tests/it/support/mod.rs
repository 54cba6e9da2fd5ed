//! The integration tests' helpers, each once; each test module uses part of them.
#![allow(dead_code)]

pub(crate) mod artifact_reader;
pub(crate) mod child;
#[cfg(feature = "serve")]
pub(crate) mod enforcing;
#[cfg(feature = "serve")]
pub(crate) mod proxy;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "anthropic")]
pub(crate) mod rounds;
pub(crate) mod rules;
pub(crate) mod schema;
#[cfg(feature = "serve")]
pub(crate) mod serve_child;
pub(crate) mod servers;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) mod stream_server;

use std::sync::Arc;

use llm_context::{Message, PrefixContext, ToolCall, ToolSpec};
use serde_json::{Value, json};

/// A fixture file's text.
pub(crate) fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/wire/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A fixture file as JSON.
pub(crate) fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// A prefix of every kind of part: system prompt, grounding, schema block. About 3,000
/// estimated tokens, above every built-in model's minimum cacheable length but Haiku 4.5's.
pub(crate) fn prefix() -> Arc<PrefixContext> {
    let handbook: String = (1..=200)
        .map(|i| format!("Rule {i}: members log hike {i} in the club book within a week.\n"))
        .collect();
    Arc::new(
        PrefixContext::new("You answer questions about the hiking club handbook.")
            .with_grounding(vec![Message::system(handbook)])
            .with_schema_block(
                r#"{"type": "object", "properties": {"answer": {"type": "string"}}}"#,
            ),
    )
}

pub(crate) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "Current weather for a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolSpec::new(
            "search_handbook",
            "Full-text search in the handbook.",
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        ),
    ]
}

/// A transcript with every shape the clients map: a leading system message, a user
/// image, an assistant message with two tool calls answered by two consecutive results,
/// an assistant answer, and a newest user request.
pub(crate) fn transcript() -> Vec<Message> {
    vec![
        Message::system("Answer in one sentence."),
        Message::user(llm_context::Content::from(vec![
            llm_context::ContentPart::text("What is on this trail sign?"),
            llm_context::ContentPart::image_url("data:image/png;base64,iVBORw0KGgo="),
        ])),
        Message::assistant("It says the trail closes at dusk."),
        Message::user("Is it dry in Oslo and Bergen today?"),
        Message::assistant_tool_calls(
            "",
            vec![
                ToolCall::new("call_1", "get_weather", json!({"city": "Oslo"})),
                ToolCall::new("call_2", "get_weather", json!({"city": "Bergen"})),
            ],
        ),
        Message::tool_result("call_1", "get_weather", "Oslo: dry, 14 °C"),
        Message::tool_result("call_2", "get_weather", "Bergen: rain, 11 °C"),
        Message::assistant("Oslo is dry; Bergen has rain."),
        Message::user("Then which hike do you suggest?"),
    ]
}

/// A span's or an event's fields by name, for the tests that capture what is traced:
/// strings as written, any other value as `{:?}`.
pub(crate) struct Fields<'a>(pub(crate) &'a mut std::collections::HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// An event's fields as one line, `name=value` in name order.
pub(crate) fn event_line(event: &tracing::Event<'_>) -> String {
    let mut fields = std::collections::HashMap::new();
    event.record(&mut Fields(&mut fields));
    let mut fields: Vec<_> = fields.into_iter().collect();
    fields.sort();
    fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A command's standard output as JSON; a test fails with both of its outputs when it is not.
pub(crate) fn stdout_json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
