//! The whole stack against Anthropic's Messages API.
//!
//! ```text
//! ANTHROPIC_API_KEY=sk-ant-… cargo run --example anthropic
//! ANTHROPIC_BASE_URL=https://my-gateway.example ANTHROPIC_MODEL=claude-haiku-4-5 cargo run --example anthropic
//! ```
//!
//! Two turns of one conversation with a frozen prefix long enough to cache: the prefix
//! layer marks breakpoints (`cache_control`) after the system prompt and after the stable
//! history, so the second turn reads the prefix from the cache. Without a key it says
//! so and exits cleanly.

use std::sync::Arc;
use std::time::Duration;

use llm_context::anthropic::{API_KEY_VAR, AnthropicBuilder, BASE_URL_VAR};
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
    let client = match AnthropicBuilder::from_env().build() {
        Ok(client) => client,
        Err(ConfigError::MissingApiKey { .. }) => {
            println!(
                "Set {API_KEY_VAR} (and optionally {BASE_URL_VAR}, ANTHROPIC_MODEL) to run this \
                 example against the real API; nothing was sent."
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let model = std::env::var("ANTHROPIC_MODEL").unwrap_or_else(|_| "claude-sonnet-4-6".to_owned());
    let catalog = Catalog::builtin();
    let policy = ContextPolicy::default()
        .with_context_window(catalog.context_window(&model).unwrap_or(200_000))
        .with_reserve_tokens(4_096);

    let meter = UsageMeter::new();
    let mut stack = ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(policy)?)
        .layer(PrefixLayer::new())
        .layer(UsageLayer::new(meter.clone()))
        .retry(RetryPolicy::default())
        .timeout(Duration::from_secs(120))
        .service(client);

    // A handbook long enough to pass the model's minimum cacheable length. The prefix
    // rides on the request, so the context policy counts it.
    let handbook: String = (1..=400)
        .map(|i| format!("Rule {i}: members log hike {i} in the club book within a week.\n"))
        .collect();
    let prefix = Arc::new(
        PrefixContext::new("You answer questions about the hiking club handbook, briefly.")
            .with_grounding(vec![Message::system(handbook)]),
    );
    let mut transcript = Vec::new();
    for question in ["What does rule 17 say?", "And rule 318?"] {
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
        "{} calls, {} tokens read from cache, {} written, ${:.6}",
        total.requests,
        total.usage.cache_read_tokens,
        total.usage.cache_write_tokens,
        total.cost_usd
    );
    Ok(())
}
