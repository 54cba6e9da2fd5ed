//! A Responses body written from the neutral request ([`rendered`]), and the items of
//! one neutral message ([`render_message`]): what the Responses client sends for a
//! request built in code, and what the proxy sends for the messages the stack added.

use llm_context_layers::{
    ChatRequest, Content, ContentPart, Message, Role, ToolSpec, WireFormat,
    prefix::leading_system_end,
};
use serde_json::{Map, Value, json};

use crate::catalog::Provider;
use crate::client::{cannot_cross, unsupported};
use crate::error::ProviderError;

/// The body for a request written from the neutral model (no caller's body kept):
/// leading system messages as `instructions`, the rest as items.
pub(crate) fn rendered(req: &ChatRequest, stream: bool) -> Result<Value, ProviderError> {
    cannot_cross(req, WireFormat::Responses, Provider::OpenAi, |_| false)?;
    let mut head: Vec<Message> = req
        .prefix
        .as_ref()
        .map(|p| p.as_messages())
        .unwrap_or_default();
    let top = leading_system_end(&req.messages);
    head.extend(req.messages[..top].iter().cloned());
    let system: Vec<String> = head
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.text().into_owned())
        .collect();
    let mut input = Vec::new();
    for m in head.iter().filter(|m| m.role != Role::System) {
        input.extend(render_message(m)?);
    }
    let marks = super::breakpoints::messages(req, top);
    for (k, m) in req.messages.iter().enumerate().skip(top) {
        let mut items = render_message(m)?;
        if marks.contains(&k) {
            // The stack's breakpoint, on the last item that can take it.
            let _ = items.iter_mut().rev().any(super::breakpoints::add);
        }
        input.extend(items);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    if !system.is_empty() {
        body.insert("instructions".into(), json!(system.join("\n\n")));
    }
    body.insert("input".into(), Value::Array(input));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(render_tool)
            .collect::<Result<Vec<_>, _>>()?;
        body.insert("tools".into(), Value::Array(tools));
    }
    // Another format's output limit is this API's `max_output_tokens`.
    let max_output = req.params.max_output_tokens.or_else(|| {
        ["max_completion_tokens", "max_tokens"]
            .iter()
            .find_map(|k| req.params.extra.get(*k)?.as_u64())
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    });
    if let Some(n) = max_output {
        body.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(t) = req.params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.params.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if matches!(req.params.extra_format, None | Some(WireFormat::Responses)) {
        for (k, v) in &req.params.extra {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    if req.tools.is_empty() {
        // Only valid with tools.
        body.remove("tool_choice");
        body.remove("parallel_tool_calls");
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    Ok(Value::Object(body))
}

/// The items of one neutral message.
pub(crate) fn render_message(m: &Message) -> Result<Vec<Value>, ProviderError> {
    if let Some(id) = &m.tool_call_id {
        return Ok(vec![
            json!({"type": "function_call_output", "call_id": id.as_ref(),
                              "output": m.text().as_ref()}),
        ]);
    }
    match m.role {
        Role::System => Ok(vec![json!({"type": "message", "role": "developer",
                                       "content": m.text().as_ref()})]),
        Role::User => Ok(vec![json!({"type": "message", "role": "user",
                                     "content": input_parts(&m.content)?})]),
        Role::Assistant => {
            // Text as one easy message (`content` a string), the form a caller's own
            // assistant turns take; output parts kept whole (a refusal) in a list.
            let mut items = Vec::new();
            let mut text = String::new();
            let mut kept: Vec<Value> = Vec::new();
            let mut rendered_calls: Vec<&str> = Vec::new();
            let flush = |text: &mut String, kept: &mut Vec<Value>, items: &mut Vec<Value>| {
                if !kept.is_empty() {
                    if !text.is_empty() {
                        kept.insert(
                            0,
                            json!({"type": "output_text", "text": std::mem::take(text),
                                              "annotations": [], "logprobs": []}),
                        );
                    }
                    items.push(json!({"type": "message", "role": "assistant",
                                      "content": std::mem::take(kept)}));
                } else if !text.is_empty() {
                    items.push(json!({"type": "message", "role": "assistant",
                                      "content": std::mem::take(text)}));
                }
            };
            let parts: &[ContentPart] = match &m.content {
                Content::Parts(parts) => parts,
                Content::Text(t) => {
                    text.push_str(t.as_str());
                    &[]
                }
            };
            for p in parts {
                match p {
                    ContentPart::Text { text: t } => text.push_str(t),
                    // A whole item (reasoning, compaction, …) in its place; an output
                    // part whole in the message.
                    ContentPart::Opaque {
                        format: WireFormat::Responses,
                        json,
                        kind,
                    } => {
                        let mut v: Value = serde_json::from_str(json).unwrap_or(Value::Null);
                        if kind.starts_with("output_") || kind == "refusal" {
                            kept.push(v);
                        } else if matches!(kind.as_str(), "function_call" | "custom_tool_call") {
                            // A call's own item (its id, its kind), while the message still
                            // makes the call, with its input as the message has it now.
                            let id = v.get("call_id").and_then(Value::as_str).unwrap_or("");
                            let Some(c) = m.tool_calls.iter().find(|c| c.id == id) else {
                                continue;
                            };
                            let field = if kind == "function_call" {
                                "arguments"
                            } else {
                                "input"
                            };
                            if let Some(obj) = v.as_object_mut() {
                                obj.insert(field.into(), Value::from(c.arguments.as_str()));
                            }
                            flush(&mut text, &mut kept, &mut items);
                            rendered_calls.push(c.id.as_str());
                            items.push(v);
                        } else {
                            flush(&mut text, &mut kept, &mut items);
                            items.push(v);
                        }
                    }
                    _ => {}
                }
            }
            flush(&mut text, &mut kept, &mut items);
            for c in m.tool_calls.iter() {
                if rendered_calls.contains(&c.id.as_str()) {
                    continue;
                }
                items.push(
                    json!({"type": "function_call", "call_id": c.id, "name": c.name,
                                  "arguments": c.arguments}),
                );
            }
            Ok(items)
        }
        Role::Tool => Err(unsupported(
            Provider::OpenAi,
            "a tool message has no tool_call_id",
        )),
    }
}

/// A user message's content as Responses input parts (a string when it is text).
fn input_parts(content: &Content) -> Result<Value, ProviderError> {
    let parts = match content {
        Content::Text(t) => return Ok(json!(t.as_str())),
        Content::Parts(parts) => parts,
    };
    Ok(Value::Array(
        parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text } => Some(json!({"type": "input_text", "text": text})),
                ContentPart::Image { url, detail } => {
                    let mut image = json!({"type": "input_image", "image_url": url});
                    if let Some(d) = detail {
                        image["detail"] = json!(d);
                    }
                    Some(image)
                }
                ContentPart::Opaque {
                    format: WireFormat::Responses,
                    json,
                    ..
                } => serde_json::from_str(json).ok(),
                _ => None,
            })
            .collect(),
    ))
}

/// A tool as the Responses API defines it: a function, or one kept whole.
pub(crate) fn render_tool(t: &ToolSpec) -> Result<Value, ProviderError> {
    if let Some(o) = &t.opaque {
        return serde_json::from_str(&o.json)
            .map_err(|e| unsupported(Provider::OpenAi, format!("the tool {:?}: {e}", t.name)));
    }
    // `strict` is required: unset is not strict (the stack's own tool has optional
    // arguments, which strict mode refuses).
    Ok(
        json!({"type": "function", "name": t.name, "description": t.description,
              "parameters": t.parameters, "strict": t.strict.unwrap_or(false)}),
    )
}
