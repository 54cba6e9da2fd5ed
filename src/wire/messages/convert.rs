//! The neutral model ↔ Anthropic Messages wire types.

use serde_json::{Map, Value};

use super::params::FIELDS;
use super::types::{
    CacheControl, ContentBlockParam, CreateMessageRequest, ImageSource, InputMessage, InputRole,
    MessageResponse, ResponseBlock, ResponseUsage, TextBlockParam, ToolChoice, ToolParam,
    ToolResultContent,
};
use crate::catalog::Provider;
use crate::client::unsupported;
use crate::error::ProviderError;
use crate::wire::extra::PassThrough;
use crate::wire::namespaces;
use llm_context_layers::executor::compaction::{is_compaction, keep_in_message};
use llm_context_layers::prefix::{leading_system_end, stable_history_end};
use llm_context_layers::{
    CacheHints, CacheTtl, ChatRequest, ChatResponse, Content, ContentPart, FinishReason,
    GenerationParams, Message, PrefixContext, Reasoning, Role, ToolCall, ToolSpec, Usage,
    WireFormat,
};

/// The parts of a request that `messages` and `count_tokens` share.
pub(crate) struct Rendered {
    pub(crate) system: Vec<TextBlockParam>,
    pub(crate) messages: Vec<InputMessage>,
    pub(crate) tools: Vec<ToolParam>,
}

/// The request body for `req`.
pub(crate) fn request(
    req: &ChatRequest,
    default_max_tokens: u32,
) -> Result<CreateMessageRequest, ProviderError> {
    crate::client::cannot_cross(
        req,
        WireFormat::Messages,
        Provider::Anthropic,
        |p| matches!(p, ContentPart::Opaque { json, .. } if pdf_document(json).is_some()),
    )?;
    // A server tool is sent only as its caller wrote it, by the faithful body (a
    // Responses namespace of functions is sent as its functions, by `render`).
    if let Some(t) = req
        .tools
        .iter()
        .find(|t| t.opaque.is_some() && !namespaces::crosses(t))
    {
        return Err(unsupported(
            Provider::Anthropic,
            format!(
                "the server tool {:?} can only be sent as its caller wrote it",
                t.name
            ),
        ));
    }
    let Rendered {
        system,
        messages,
        tools,
    } = render(
        req.prefix.as_deref(),
        &req.messages,
        &req.tools,
        req.cache,
        faithful(req),
    )?;
    let p = &req.params;
    let sampling = [("temperature", p.temperature), ("top_p", p.top_p)];
    if !faithful(req) && sampling.iter().any(|(_, v)| v.is_some()) {
        // The Messages API as of SDK 2.16.0 has no sampling fields: a request of another
        // format does not send them. A Messages caller's own go as it wrote them.
        tracing::debug!(
            event = "params_not_sent",
            "temperature / top_p are not sent to Anthropic"
        );
    }
    let tool_choice = if tools.is_empty() {
        None
    } else {
        tool_choice(p)
    };
    let mut extra: Map<String, Value> = PASS_THROUGH
        .sent(p)
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if faithful(req) {
        for (name, value) in sampling {
            if let Some(v) = value {
                extra.insert(name.into(), serde_json::json!(v));
            }
        }
    }
    let mut max_tokens = max_tokens(p).unwrap_or(default_max_tokens);
    if let Some(budget) = thinking_budget(p)
        && !extra.contains_key("thinking")
    {
        extra.insert(
            "thinking".into(),
            serde_json::json!({"type": "enabled", "budget_tokens": budget}),
        );
        // The API wants the thinking budget below `max_tokens`: the answer keeps its own
        // allowance on top of the budget.
        if max_tokens <= budget {
            max_tokens = max_tokens.saturating_add(budget);
        }
    }
    Ok(CreateMessageRequest {
        model: req.model.clone(),
        max_tokens,
        messages,
        system,
        tools,
        tool_choice,
        stop_sequences: stop(p),
        extra,
    })
}

/// The thinking budget an OpenAI-shaped body's effort asks for (Chat Completions'
/// `reasoning_effort`, the Responses API's `reasoning.effort`): low 1,024, medium 4,096,
/// high (and `xhigh`) 16,384 tokens (`minimal`, `none` and unknown values ask for none).
/// An explicit `thinking` object wins over it.
fn thinking_budget(p: &GenerationParams) -> Option<u32> {
    let effort = p
        .extra
        .get("reasoning_effort")
        .or_else(|| p.extra.get("reasoning")?.get("effort"))?;
    match effort.as_str()? {
        "low" => Some(1_024),
        "medium" => Some(4_096),
        "high" | "xhigh" => Some(16_384),
        _ => None,
    }
}

/// Fields this client sets itself, or reads into the body itself from a caller's fields
/// (`max_completion_tokens`, `stop`, `reasoning_effort`, `parallel_tool_calls`), or
/// cannot honour (`temperature`, `top_p`: the Messages API has no sampling fields): never
/// passed through.
const SET_HERE: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "stop_sequences",
    "temperature",
    "top_p",
    "reasoning_effort",
    // The client sets `stream` itself, for a `Streaming` request only.
    "stream",
    "stream_options",
];

/// Which pass-through fields this client sends: another format's, and untagged ones the
/// caller set (which may be meant for an OpenAI-compatible server), only where the
/// Messages API has them.
const PASS_THROUGH: PassThrough = PassThrough {
    format: WireFormat::Messages,
    untagged_are_own: false,
    set_here: SET_HERE,
    fields: FIELDS,
};

/// Whether `req` came in the Messages format (a Messages caller through a proxy): what it
/// wrote goes on as written where the neutral model would write it otherwise (its
/// mid-conversation system messages stay in place, its sampling fields are sent).
fn faithful(req: &ChatRequest) -> bool {
    req.params.extra_format == Some(llm_context_layers::WireFormat::Messages)
}

/// System blocks (from `prefix` and the leading system messages), messages and tools,
/// with `hints` turned into `cache_control` markers: on the last tool, on the last
/// system block, on the last block of the message before the newest real user request,
/// and on the last block of the request (the rolling breakpoint).
///
/// A system message after the leading ones is sent in place as a `system` message when
/// `system_in_place` (the caller wrote it so), else as user text.
pub(crate) fn render(
    prefix: Option<&PrefixContext>,
    messages: &[Message],
    tools: &[ToolSpec],
    hints: CacheHints,
    system_in_place: bool,
) -> Result<Rendered, ProviderError> {
    let hints = ttl_order(hints);
    let head_end = leading_system_end(messages);

    let mut tools: Vec<ToolParam> = namespaces::expanded(tools).iter().map(tool).collect();
    if let (Some(ttl), Some(last)) = (hints.tools, tools.last_mut()) {
        last.cache_control = Some(cache_control(ttl));
    }

    let mut system = system_blocks(prefix, &messages[..head_end])?;
    if let (Some(ttl), Some(last)) = (hints.prefix, system.last_mut()) {
        last.cache_control = Some(cache_control(ttl));
    }

    let history_mark = hints
        .history
        .zip(stable_history_end(messages))
        .map(|(ttl, end)| (end - 1, cache_control(ttl)));

    let mut out: Vec<InputMessage> = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate().skip(head_end) {
        let (mut role, mut blocks) = blocks(m)?;
        if system_in_place && m.role == Role::System {
            role = InputRole::System;
        }
        if let Some((at, cc)) = history_mark
            && at == i
        {
            // The message may render to nothing (empty text), or to thinking alone: mark
            // what precedes it.
            if !mark_last(&mut blocks, cc) {
                mark_last_of(&mut out, cc);
            }
        }
        if blocks.is_empty() {
            // Empty messages are refused.
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => merge(&mut last.content, blocks),
            _ => out.push(InputMessage {
                role,
                content: blocks,
            }),
        }
    }
    if let Some(ttl) = hints.last {
        mark_last_of(&mut out, cache_control(ttl));
    }
    Ok(Rendered {
        system,
        messages: out,
        tools,
    })
}

/// Marks the last block of `blocks` that can carry a breakpoint; `false` when none can.
fn mark_last(blocks: &mut [ContentBlockParam], cc: CacheControl) -> bool {
    blocks.iter_mut().rev().any(|b| b.set_cache_control(cc))
}

/// Marks the last block of `messages` that can carry a breakpoint.
fn mark_last_of(messages: &mut [InputMessage], cc: CacheControl) {
    for m in messages.iter_mut().rev() {
        if mark_last(&mut m.content, cc) {
            return;
        }
    }
}

/// Appends `blocks` to a message of the same role. Tool results go before any other
/// block, after the results already there: Anthropic wants them first.
pub(super) fn merge(content: &mut Vec<ContentBlockParam>, blocks: Vec<ContentBlockParam>) {
    for b in blocks {
        if b.is_tool_result() {
            let at = content.iter().take_while(|c| c.is_tool_result()).count();
            content.insert(at, b);
        } else {
            content.push(b);
        }
    }
}

/// A longer TTL may not follow a shorter one (tools → system → messages): later 1h
/// breakpoints become 5m rather than make the request fail.
pub(super) fn ttl_order(hints: CacheHints) -> CacheHints {
    let mut shortest = CacheTtl::OneHour;
    let mut clamp = |ttl: Option<CacheTtl>| {
        ttl.map(|t| {
            let t = t.min(shortest);
            shortest = t;
            t
        })
    };
    let tools = clamp(hints.tools);
    let prefix = clamp(hints.prefix);
    let history = clamp(hints.history);
    let last = clamp(hints.last);
    CacheHints::NONE
        .with_tools(tools)
        .with_prefix(prefix)
        .with_history(history)
        .with_last(last)
}

pub(super) fn cache_control(ttl: CacheTtl) -> CacheControl {
    match ttl {
        CacheTtl::OneHour => CacheControl::ONE_HOUR,
        _ => CacheControl::FIVE_MINUTES,
    }
}

/// One text part as plain text, else the parts: several text blocks stay several (joined,
/// `Hello` and `World` would reach the model as `HelloWorld`).
pub(super) fn content(mut parts: Vec<ContentPart>) -> Content {
    match parts.as_mut_slice() {
        [] => Content::default(),
        [ContentPart::Text { text }] => Content::Text(std::mem::take(text).into()),
        _ => Content::from(parts),
    }
}

/// The system prompt's blocks: the prefix's, then those of `head` (the leading system
/// messages), which Anthropic takes as `system`; empty texts make none.
pub(super) fn system_blocks(
    prefix: Option<&PrefixContext>,
    head: &[Message],
) -> Result<Vec<TextBlockParam>, ProviderError> {
    let mut system = Vec::new();
    let prefix_messages = prefix.map(|p| p.as_messages()).unwrap_or_default();
    for m in prefix_messages.iter().chain(head) {
        for text in system_texts(m)? {
            if !text.is_empty() {
                system.push(TextBlockParam::new(text));
            }
        }
    }
    Ok(system)
}

/// The text blocks of a system message of the head, each its own.
pub(super) fn system_texts(m: &Message) -> Result<Vec<&str>, ProviderError> {
    match &m.content {
        Content::Text(t) => Ok(vec![t.as_str()]),
        Content::Parts(parts) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => Ok(text.as_str()),
                _ => Err(unsupported(
                    Provider::Anthropic,
                    "the system prompt (prefix and leading system messages) can only carry text",
                )),
            })
            .collect(),
    }
}

/// The role and blocks of one tail message. Empty text makes no block.
pub(super) fn blocks(m: &Message) -> Result<(InputRole, Vec<ContentBlockParam>), ProviderError> {
    if let Some(id) = &m.tool_call_id {
        let content = match &m.content {
            c if c.is_empty() => None,
            Content::Text(t) => Some(ToolResultContent::Text(t.as_str().to_owned())),
            Content::Parts(parts) => Some(ToolResultContent::Blocks(part_blocks(parts)?)),
        };
        let block = ContentBlockParam::ToolResult {
            tool_use_id: id.to_string(),
            content,
            cache_control: None,
        };
        return Ok((InputRole::User, vec![block]));
    }
    match m.role {
        // A system message inside the conversation: Anthropic has no such role there,
        // so it goes as user text.
        Role::System | Role::User => {
            let blocks = match &m.content {
                Content::Text(t) => text_block(t).into_iter().collect(),
                Content::Parts(parts) => part_blocks(parts)?,
            };
            Ok((InputRole::User, blocks))
        }
        Role::Assistant => {
            // A provider's compaction block first of all: it stands in for everything
            // before it. Then reasoning, unchanged: Anthropic checks the thinking block
            // before the tool_use it led to. A server's plain reasoning text is not
            // Anthropic's and is not sent.
            let parts: &[ContentPart] = match &m.content {
                Content::Parts(parts) => parts,
                Content::Text(_) => &[],
            };
            let lead = parts.iter().take_while(|p| is_compaction(p)).count();
            let mut blocks = part_blocks(&parts[..lead])?;
            blocks.extend(m.reasoning().iter().filter_map(|r| match r {
                Reasoning::Thinking {
                    thinking,
                    signature,
                } => Some(ContentBlockParam::Thinking {
                    thinking: thinking.clone(),
                    signature: signature.clone(),
                }),
                Reasoning::RedactedThinking { data } => {
                    Some(ContentBlockParam::RedactedThinking { data: data.clone() })
                }
                _ => None,
            }));
            match &m.content {
                Content::Text(t) => blocks.extend(text_block(t)),
                // Several text blocks stay several.
                Content::Parts(_) => blocks.extend(part_blocks(&parts[lead..])?),
            }
            blocks.extend(m.tool_calls.iter().map(|c| ContentBlockParam::ToolUse {
                id: c.id.clone(),
                name: c.name.clone(),
                input: tool_input(c.arguments_value()),
                cache_control: None,
            }));
            Ok((InputRole::Assistant, blocks))
        }
        Role::Tool => Err(unsupported(
            Provider::Anthropic,
            "a tool message has no tool_call_id",
        )),
    }
}

fn text_block(text: &str) -> Option<ContentBlockParam> {
    (!text.is_empty()).then(|| ContentBlockParam::Text {
        text: text.to_owned(),
        cache_control: None,
    })
}

fn part_blocks(parts: &[ContentPart]) -> Result<Vec<ContentBlockParam>, ProviderError> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            ContentPart::Text { text } => out.extend(text_block(text)),
            ContentPart::Image { url, .. } => out.push(ContentBlockParam::Image {
                source: image_source(url)?,
                cache_control: None,
            }),
            // A Chat Completions PDF file, as the document it maps to (`cannot_cross`
            // refused any other part of that format).
            ContentPart::Opaque {
                format: WireFormat::ChatCompletions,
                json,
                ..
            } => out.extend(pdf_document(json).map(ContentBlockParam::Other)),
            // A Messages block kept whole (`cannot_cross` refused any other format's).
            ContentPart::Opaque { json, .. } => out.push(ContentBlockParam::Other(
                serde_json::from_str(json).unwrap_or(Value::Null),
            )),
            // A part kind added to the neutral model later carries no text that
            // `Content::text` would read (it keeps only text parts): nothing is sent.
            _ => {}
        }
    }
    Ok(out)
}

/// The Anthropic `document` block a Chat Completions `file` part maps to: a PDF sent
/// inline (`file_data` a `data:application/pdf;base64,…` URL) becomes a base64 PDF
/// source, its `filename` the document's `title`. `None` for anything else (a `file_id`,
/// which names a file in OpenAI's store; another media type; audio).
pub(crate) fn pdf_document(part: &str) -> Option<Value> {
    let part: Value = serde_json::from_str(part).ok()?;
    if part["type"] != "file" {
        return None;
    }
    let file = part["file"].as_object()?;
    let data = file
        .get("file_data")?
        .as_str()?
        .strip_prefix("data:application/pdf;base64,")?;
    // Members a document has no place for (a `file_id` beside the data) do not cross.
    if file
        .keys()
        .any(|k| !matches!(k.as_str(), "file_data" | "filename"))
    {
        return None;
    }
    let mut document = serde_json::json!({
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": data},
    });
    if let Some(name) = file.get("filename").and_then(Value::as_str) {
        document["title"] = Value::from(name);
    }
    Some(document)
}

/// A `data:<type>;base64,<data>` URL becomes inline bytes; an `http(s)` URL is fetched by
/// the provider.
fn image_source(url: &str) -> Result<ImageSource, ProviderError> {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((meta, data)) = rest.split_once(',')
            && let Some(media_type) = meta.strip_suffix(";base64")
        {
            return Ok(ImageSource::Base64 {
                media_type: media_type.to_owned(),
                data: data.to_owned(),
            });
        }
        return Err(unsupported(
            Provider::Anthropic,
            "an image data URL must be base64 (data:<type>;base64,<data>)",
        ));
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(ImageSource::Url {
            url: url.to_owned(),
        });
    }
    Err(unsupported(
        Provider::Anthropic,
        "an image must be an http(s) or base64 data URL",
    ))
}

/// Anthropic takes tool input as a JSON object. Arguments that are not one (a model's
/// broken JSON, kept as a string) are wrapped, so the transcript is still accepted and
/// the model still sees what it wrote.
pub(crate) fn tool_input(arguments: Value) -> Value {
    match arguments {
        Value::Object(_) => arguments,
        other => {
            let mut m = Map::new();
            m.insert("arguments".into(), other);
            Value::Object(m)
        }
    }
}

pub(super) fn tool(t: &ToolSpec) -> ToolParam {
    ToolParam {
        name: t.name.clone(),
        description: (!t.description.is_empty()).then(|| t.description.clone()),
        input_schema: t.parameters.clone(),
        strict: t.strict,
        cache_control: None,
    }
}

/// The caller's choice: the typed one, else a Chat Completions `tool_choice` among the
/// caller's fields in a form only that format has (`allowed_tools`, a named function with
/// more keys), by the function it names.
fn tool_choice(p: &GenerationParams) -> Option<ToolChoice> {
    let parallel = p
        .parallel_tool_calls
        .or_else(|| p.extra.get("parallel_tool_calls").and_then(Value::as_bool));
    let no_parallel = (parallel == Some(false)).then_some(true);
    if let Some(choice) = &p.tool_choice {
        return Some(match choice {
            crate::ToolChoice::None => ToolChoice::None,
            crate::ToolChoice::Required => ToolChoice::Any {
                disable_parallel_tool_use: no_parallel,
            },
            crate::ToolChoice::Tool { name } => ToolChoice::Tool {
                name: name.clone(),
                disable_parallel_tool_use: no_parallel,
            },
            _ => ToolChoice::Auto {
                disable_parallel_tool_use: no_parallel,
            },
        });
    }
    match p.extra.get("tool_choice") {
        None => no_parallel.map(|d| ToolChoice::Auto {
            disable_parallel_tool_use: Some(d),
        }),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Any {
                disable_parallel_tool_use: no_parallel,
            }),
            _ => Some(ToolChoice::Auto {
                disable_parallel_tool_use: no_parallel,
            }),
        },
        Some(obj) => obj
            .pointer("/function/name")
            .and_then(Value::as_str)
            .map(|name| ToolChoice::Tool {
                name: name.to_owned(),
                disable_parallel_tool_use: no_parallel,
            }),
    }
}

fn max_tokens(p: &GenerationParams) -> Option<u32> {
    p.max_output_tokens.or_else(|| {
        ["max_completion_tokens", "max_tokens"]
            .iter()
            .find_map(|k| p.extra.get(*k)?.as_u64())
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    })
}

fn stop(p: &GenerationParams) -> Vec<String> {
    if !p.stop.is_empty() {
        return p.stop.clone();
    }
    match p.extra.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// The neutral response.
pub(crate) fn response(body: MessageResponse) -> ChatResponse {
    // Several text blocks stay several parts (a Messages caller gets them back apart).
    let mut text: Vec<ContentPart> = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning = Vec::new();
    // Blocks the neutral message has no place for (server tools' calls and results, kinds
    // newer than the client): kept for the caller.
    let mut unmodelled = Vec::new();
    for block in body.content {
        match block {
            ResponseBlock::Text { text: t } => text.push(ContentPart::Text { text: t }),
            ResponseBlock::ToolUse { id, name, input } => {
                calls.push(ToolCall::new(id, name, input))
            }
            ResponseBlock::Thinking {
                thinking,
                signature,
            } => reasoning.push(Reasoning::Thinking {
                thinking,
                signature,
            }),
            ResponseBlock::RedactedThinking { data } => {
                reasoning.push(Reasoning::RedactedThinking { data })
            }
            ResponseBlock::Other(block) => unmodelled.push(block),
        }
    }
    let text = content(text);
    let message = if calls.is_empty() {
        Message::assistant(text)
    } else {
        Message::assistant_tool_calls(text, calls)
    }
    .with_reasoning(reasoning);
    let finish = finish_reason(body.stop_reason.as_deref());
    let mut fields = crate::client::provider_fields(body.id, body.model, body.extra);
    if !unmodelled.is_empty() {
        fields.insert("content".into(), Value::Array(unmodelled));
    }
    let mut response = ChatResponse::new(message)
        .with_finish_reason(finish)
        .with_usage(usage(&body.usage))
        .with_provider_fields(fields);
    // A provider's compaction goes back with the message, first.
    keep_in_message(&mut response);
    response
}

/// The neutral finish reason for Anthropic's `stop_reason`.
pub(crate) fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        None | Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("refusal") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// Anthropic's `input_tokens` already excludes cache reads and writes, as the neutral
/// `Usage` does; the one-hour writes come from `cache_creation`.
pub(crate) fn usage(u: &ResponseUsage) -> Usage {
    let writes = u.cache_creation_input_tokens.unwrap_or_else(|| {
        // Saturating: the figures are the server's, and any u64 parses.
        u.cache_creation.map_or(0, |c| {
            c.ephemeral_5m_input_tokens
                .saturating_add(c.ephemeral_1h_input_tokens)
        })
    });
    let one_hour = u.cache_creation.map_or(0, |c| c.ephemeral_1h_input_tokens);
    Usage::new(
        u.input_tokens,
        u.output_tokens,
        u.cache_read_input_tokens.unwrap_or(0),
        writes,
    )
    .with_cache_write_1h(one_hour)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::messages::types::CacheCreation;
    use serde_json::json;

    #[test]
    fn another_formats_fields_are_sent_only_when_the_messages_api_has_them() {
        let sent = |format, extra: Value| {
            let mut req = ChatRequest::new("claude-sonnet-4-6", vec![Message::user("q")]);
            req.params.extra = serde_json::from_value(extra).unwrap();
            req.params.extra_format = format;
            let body = request(&req, 1_024).unwrap();
            let mut keys: Vec<String> = body.extra.keys().cloned().collect();
            keys.sort();
            keys
        };
        let openai = json!({"response_format": {"type": "json_object"}, "seed": 7,
                            "metadata": {"user_id": "u"}, "service_tier": "auto"});
        assert_eq!(
            sent(Some(WireFormat::ChatCompletions), openai),
            ["metadata", "service_tier"]
        );
        // Its own format's fields all go, `top_k` too (a field the list has not yet).
        assert_eq!(
            sent(
                Some(WireFormat::Messages),
                json!({"top_k": 5, "metadata": {}})
            ),
            ["metadata", "top_k"]
        );
        // Untagged fields may be meant for an OpenAI-compatible server: only the Messages
        // API's go.
        assert_eq!(
            sent(None, json!({"top_k": 5, "seed": 7, "metadata": {}})),
            ["metadata"]
        );
    }

    #[test]
    fn the_typed_tool_choice_and_parallel_calls_are_written_in_the_messages_form() {
        let mut req = ChatRequest::new("claude-sonnet-4-6", vec![Message::user("q")])
            .with_tools(vec![ToolSpec::new("f", "", json!({"type": "object"}))]);
        req.params.tool_choice = Some(crate::ToolChoice::Required);
        req.params.parallel_tool_calls = Some(false);
        let body = serde_json::to_value(request(&req, 1_024).unwrap()).unwrap();
        assert_eq!(
            body["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
    }

    #[test]
    fn later_long_ttls_are_shortened() {
        let h = ttl_order(
            CacheHints::NONE
                .with_tools(Some(CacheTtl::FiveMinutes))
                .with_prefix(Some(CacheTtl::OneHour))
                .with_history(Some(CacheTtl::OneHour)),
        );
        assert_eq!(h.prefix, Some(CacheTtl::FiveMinutes));
        assert_eq!(h.history, Some(CacheTtl::FiveMinutes));
        let ok = CacheHints::NONE
            .with_prefix(Some(CacheTtl::OneHour))
            .with_history(Some(CacheTtl::FiveMinutes));
        assert_eq!(ttl_order(ok), ok);
    }

    #[test]
    fn results_go_first_in_their_message() {
        let mut content = vec![ContentBlockParam::Text {
            text: "and then?".into(),
            cache_control: None,
        }];
        let result = ContentBlockParam::ToolResult {
            tool_use_id: "c1".into(),
            content: None,
            cache_control: None,
        };
        merge(&mut content, vec![result.clone()]);
        assert_eq!(content[0], result);
    }

    #[test]
    fn usage_splits_ttls() {
        let u = ResponseUsage {
            input_tokens: 50,
            output_tokens: 7,
            cache_creation_input_tokens: Some(3_000),
            cache_read_input_tokens: Some(20_000),
            cache_creation: Some(CacheCreation {
                ephemeral_5m_input_tokens: 1_000,
                ephemeral_1h_input_tokens: 2_000,
            }),
        };
        let n = usage(&u);
        assert_eq!(
            n,
            Usage::new(50, 7, 20_000, 3_000).with_cache_write_1h(2_000)
        );
        assert_eq!(n.prompt_tokens(), 23_050);
    }

    #[test]
    fn broken_arguments_are_wrapped() {
        assert_eq!(tool_input(json!("{oops")), json!({"arguments": "{oops"}));
        assert_eq!(tool_input(json!({"a": 1})), json!({"a": 1}));
    }

    #[test]
    fn images() {
        assert_eq!(
            image_source("data:image/png;base64,AAAA").unwrap(),
            ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "AAAA".into()
            }
        );
        assert!(image_source("data:text/plain,hi").is_err());
        assert!(image_source("file:///etc/passwd").is_err());
    }
}
