//! The Responses API's `namespace` tools, for an API that has none: a namespace's
//! function tools are sent as plain tools named `{namespace}__{name}`, a call of one
//! read from a Responses body is named so too, and a model's call of such a name is
//! written back to the Responses caller as the tool's own name and its namespace.
//!
//! Codex declares its sub-agent tools in a namespace (`multi_agent_v1`); without this a
//! Codex session could not reach a Claude model. A namespace's custom (grammar) tools
//! have no counterpart elsewhere and stay refused by name, as any tool that cannot
//! cross is.

#[cfg(feature = "anthropic")]
use std::borrow::Cow;
#[cfg(feature = "serve")]
use std::collections::HashMap;

use llm_context_layers::{ToolSpec, WireFormat};
use serde_json::Value;

/// The name a namespaced tool is sent under.
pub(crate) fn qualified(namespace: &str, name: &str) -> String {
    format!("{namespace}__{name}")
}

/// Whether `t` is a Responses `namespace` tool.
pub(crate) fn is_namespace(t: &ToolSpec) -> bool {
    t.opaque
        .as_ref()
        .is_some_and(|o| o.format == WireFormat::Responses && o.kind == "namespace")
}

/// A namespace tool's name and its function tools (each with its own name), when all
/// of them are functions.
fn members(t: &ToolSpec) -> Option<(String, Vec<ToolSpec>)> {
    let v: Value = serde_json::from_str(&t.opaque.as_ref()?.json).ok()?;
    let namespace = v.get("name")?.as_str()?.to_owned();
    let tools = v.get("tools")?.as_array()?;
    let mut out = Vec::with_capacity(tools.len());
    for f in tools {
        if f.get("type").and_then(Value::as_str) != Some("function") {
            return None;
        }
        let name = f.get("name")?.as_str()?;
        let mut spec = ToolSpec::new(
            qualified(&namespace, name),
            f.get("description")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            f.get("parameters").cloned().unwrap_or(Value::Null),
        );
        spec.strict = f.get("strict").and_then(Value::as_bool);
        out.push(spec);
    }
    Some((namespace, out))
}

/// Whether `t` is a namespace whose tools can all be sent as plain ones.
pub(crate) fn crosses(t: &ToolSpec) -> bool {
    is_namespace(t) && members(t).is_some()
}

/// `tools` with each namespace that [`crosses`] replaced by its tools, in its place.
#[cfg(feature = "anthropic")]
pub(crate) fn expanded(tools: &[ToolSpec]) -> Cow<'_, [ToolSpec]> {
    if !tools.iter().any(crosses) {
        return Cow::Borrowed(tools);
    }
    let mut out = Vec::with_capacity(tools.len() + 8);
    for t in tools {
        match members(t).filter(|_| is_namespace(t)) {
            Some((_, members)) => out.extend(members),
            None => out.push(t.clone()),
        }
    }
    Cow::Owned(out)
}

/// For each namespaced tool of `tools`, by the name it is sent under: its namespace and
/// its own name. Empty (and not allocated) when there is no namespace.
#[cfg(feature = "serve")]
pub(crate) fn split_names(tools: &[ToolSpec]) -> HashMap<String, (String, String)> {
    let mut out = HashMap::new();
    for t in tools.iter().filter(|t| is_namespace(t)) {
        if let Some((namespace, members)) = members(t) {
            for m in members {
                let own = m.name[namespace.len() + 2..].to_owned();
                out.insert(m.name, (namespace.clone(), own));
            }
        }
    }
    out
}

#[cfg(all(test, feature = "serve"))]
mod tests {
    use super::*;
    use llm_context_layers::OpaqueTool;
    use serde_json::json;

    fn namespace(tools: Value) -> ToolSpec {
        let json = json!({"type": "namespace", "name": "multi_agent_v1",
                          "description": "Sub-agents.", "tools": tools});
        let mut t = ToolSpec::new("multi_agent_v1", "Sub-agents.", Value::Null);
        t.opaque = Some(OpaqueTool::new(
            WireFormat::Responses,
            "namespace",
            json.to_string(),
        ));
        t
    }

    #[test]
    fn a_namespace_of_functions_is_sent_as_its_tools_and_their_calls_split_back() {
        let plain = ToolSpec::new("exec_command", "Runs.", json!({"type": "object"}));
        let ns = namespace(json!([
            {"type": "function", "name": "spawn_agent", "description": "Spawns.",
             "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
             "strict": false},
            {"type": "function", "name": "close_agent", "description": "Closes.",
             "parameters": {"type": "object"}}]));
        let tools = vec![plain.clone(), ns, plain.clone()];
        let out = expanded(&tools);
        let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "exec_command",
                "multi_agent_v1__spawn_agent",
                "multi_agent_v1__close_agent",
                "exec_command"
            ]
        );
        assert_eq!(out[1].parameters["properties"]["task"]["type"], "string");
        assert_eq!(out[1].strict, Some(false));
        let split = split_names(&tools);
        assert_eq!(
            split["multi_agent_v1__close_agent"],
            ("multi_agent_v1".to_owned(), "close_agent".to_owned())
        );
        assert!(!split.contains_key("exec_command"));
        // Nothing to expand: borrowed as it is.
        assert!(matches!(expanded(&[plain]), Cow::Borrowed(_)));
    }

    #[test]
    fn a_namespace_with_a_custom_tool_does_not_cross() {
        let ns = namespace(json!([{"type": "custom", "name": "apply_patch",
                                   "format": {"type": "text"}}]));
        assert!(is_namespace(&ns) && !crosses(&ns));
        assert_eq!(
            expanded(std::slice::from_ref(&ns))[0].name,
            "multi_agent_v1"
        );
        assert!(split_names(&[ns]).is_empty());
    }
}
