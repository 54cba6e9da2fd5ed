//! The Messages format's top-level fields and its forms of the typed parameters.

use serde_json::Value;

use crate::ToolChoice;

/// Every top-level field of a Messages request (Anthropic's schema, with its beta
/// features): what a client of this format may carry over from another format's
/// pass-through fields.
pub(crate) const FIELDS: &[&str] = &[
    "billing_policy",
    "cache_control",
    "compaction",
    "container",
    "context_management",
    "diagnostics",
    "fallback_credit_token",
    "fallbacks",
    "inference_geo",
    "max_tokens",
    "mcp_servers",
    "messages",
    "metadata",
    "model",
    "output_config",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "thinking",
    "thread",
    "tool_choice",
    "tools",
];

/// The typed choice and whether parallel calls are allowed, of a Messages `tool_choice`,
/// or what is wrong with it.
pub(crate) fn tool_choice_from_wire(choice: &Value) -> Result<(ToolChoice, Option<bool>), String> {
    let parallel = choice["disable_parallel_tool_use"].as_bool().map(|d| !d);
    let typed = match choice["type"].as_str() {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => {
            let name = choice["name"]
                .as_str()
                .ok_or("tool_choice `tool` needs a `name`")?;
            ToolChoice::tool(name)
        }
        _ => return Err("`tool_choice` must be of type auto, any, tool or none".into()),
    };
    Ok((typed, parallel))
}
