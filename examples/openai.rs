//! The whole stack against OpenAI, or any OpenAI-compatible server.
//!
//! ```text
//! OPENAI_API_KEY=sk-… cargo run --example openai
//! OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=llama3.2 cargo run --example openai
//! ```
//!
//! Two turns of one conversation with a frozen prefix: the second turn re-sends the
//! same prefix bytes, so a provider that caches (OpenAI from 1,024 tokens) reports
//! `cache_read_tokens` on it. Without a key or a base URL it says so and exits cleanly.

use std::sync::Arc;
use std::time::Duration;

use llm_context::openai::{API_KEY_VAR, BASE_URL_VAR, OpenAiBuilder};
use llm_context::prefix::PrefixLayer;
use llm_context::retry::RetryPolicy;
use llm_context::usage::{UsageLayer, UsageMeter};
use llm_context::{
    BoxError, Catalog, ChatRequest, ConfigError, ContextPolicy, ContextPolicyLayer, Message,
    PrefixContext,
};
use tower::{Service, ServiceBuilder, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // Without a key the builder refuses OpenAI's own URL, but not a local server's.
    let client = match OpenAiBuilder::from_env().build() {
        Ok(client) => client,
        Err(ConfigError::MissingApiKey { .. }) => {
            println!(
                "Set {API_KEY_VAR} (or {BASE_URL_VAR} for a server that needs no key; \
                 optionally OPENAI_MODEL) to run this example against a real API; nothing \
                 was sent."
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-5.4-mini".to_owned());
    let catalog = Catalog::builtin();
    let policy = ContextPolicy::default()
        .with_context_window(catalog.context_window(&model).unwrap_or(32_000))
        .with_reserve_tokens(4_096);

    let meter = UsageMeter::new();
    let mut stack = ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(policy)?)
        .layer(PrefixLayer::new())
        .layer(UsageLayer::new(meter.clone()))
        .retry(RetryPolicy::default())
        .timeout(Duration::from_secs(120))
        .service(client);

    // The prefix rides on the request, so the context policy counts it.
    let prefix = Arc::new(
        PrefixContext::new("You are a concise assistant for a hiking club.").with_grounding(vec![
            Message::system(
                "Club rules: hikes start at 08:00 sharp; bring 2 litres of water; dogs on a lead.",
            ),
        ]),
    );
    let mut transcript = Vec::new();
    for question in ["When do hikes start?", "And what should I bring?"] {
        transcript.push(Message::user(question));
        let request =
            ChatRequest::new(model.clone(), transcript.clone()).with_prefix(prefix.clone());
        // The stack also takes `Streaming` requests: `ready` is told which one is meant.
        let reply = ServiceExt::<ChatRequest>::ready(&mut stack)
            .await?
            .call(request)
            .await?;
        println!("assistant: {}", reply.message.text());
        println!("  usage: {:?}", reply.usage);
        transcript.push(reply.message);
    }
    let total = meter.total();
    println!(
        "{} calls, {} tokens read from cache, ${:.6}",
        total.requests, total.usage.cache_read_tokens, total.cost_usd
    );
    Ok(())
}
