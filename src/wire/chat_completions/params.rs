//! The Chat Completions format's top-level fields and its forms of the typed parameters.

use serde_json::{Value, json};

use crate::ToolChoice;

/// Every top-level field of a Chat Completions request (OpenAI's schema): what a client
/// of this format may carry over from another format's pass-through fields.
#[cfg(feature = "openai")]
pub(crate) const FIELDS: &[&str] = &[
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "messages",
    "metadata",
    "modalities",
    "model",
    "moderation",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// `tool_choice` as Chat Completions writes it.
pub(crate) fn tool_choice_to_wire(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "function": {"name": name}}),
        // `Auto`, and any choice added later, as the model's own decision.
        _ => json!("auto"),
    }
}

/// The typed choice of a Chat Completions `tool_choice`, when it is one of the forms every
/// format has; any other form (`allowed_tools`, custom tools, a field added later) is
/// `None`, and stays in the request's pass-through fields as written.
pub(crate) fn tool_choice_from_wire(v: &Value) -> Option<ToolChoice> {
    match v {
        Value::String(s) => match s.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => None,
        },
        Value::Object(o) if o.len() == 2 && o.get("type") == Some(&json!("function")) => {
            let function = o.get("function")?.as_object()?;
            let name = function.get("name")?.as_str()?;
            (function.len() == 1).then(|| ToolChoice::tool(name))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_every_format_has_are_typed_and_written_back_the_same() {
        for wire in [
            json!("auto"),
            json!("none"),
            json!("required"),
            json!({"type": "function", "function": {"name": "get_weather"}}),
        ] {
            let typed = tool_choice_from_wire(&wire).unwrap();
            assert_eq!(tool_choice_to_wire(&typed), wire);
        }
    }

    #[test]
    fn other_forms_are_not_typed() {
        for wire in [
            json!("bogus"),
            json!(5),
            json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}),
            json!({"type": "function", "function": {"name": "f", "strict": true}}),
            json!({"type": "function", "function": {"name": 1}}),
        ] {
            assert_eq!(tool_choice_from_wire(&wire), None, "{wire}");
        }
    }
}
