//! The Messages format's top-level fields.

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
