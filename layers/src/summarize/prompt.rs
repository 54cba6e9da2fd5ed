//! What the summarizer is asked, and how its answer is checked.

use serde_json::Value;

use super::bound::model_budget;
use super::config::SummarizeConfig;
use crate::model::ChatRequest;
use crate::model::SummaryBlock;
use crate::model::{Message, Role};
use crate::tokens::char_count;
use crate::tokens::truncate_chars;

/// The `name` of the system message that opens every summarizer request.
pub const SUMMARIZER_NAME: &str = "context_summarizer";

/// The summarizer's instructions.
pub const SUMMARIZER_INSTRUCTIONS: &str = "You maintain the running summary of a long \
conversation between a user and an AI agent. You are given the previous summary (if any) \
and the next messages, oldest first, each possibly clipped. Write the updated summary of \
everything so far. Reply with only one JSON object and nothing else, of this shape: \
{\"goals\": [string], \"decisions\": [string], \"open\": [string], \"facts\": [string], \
\"narrative\": string}. goals: what the user wants. decisions: what was decided and why. \
open: unanswered questions and unfinished work. facts: concrete findings, keeping every \
identifier exactly (file paths, URLs, ids, numbers with units). narrative: a few \
sentences of what happened. Keep what still matters from the previous summary.";

/// Whether `request` is one the summarize layer sends to its inner model to summarize
/// (so a mock model, a memo predicate or a router can tell it apart).
pub fn is_summary_request(request: &ChatRequest) -> bool {
    request
        .messages
        .first()
        .is_some_and(|m| m.role == Role::System && m.name() == Some(SUMMARIZER_NAME))
}

/// The first request to the summarizer: instructions, then the previous summary and the
/// folded messages, each clipped.
pub(crate) fn summary_request(
    template: &ChatRequest,
    previous: Option<&SummaryBlock>,
    span: &[Message],
    config: &SummarizeConfig,
) -> ChatRequest {
    let mut text = String::new();
    match previous {
        Some(p) => {
            text.push_str("Previous summary:\n");
            let json = serde_json::json!({
                "goals": p.goals, "decisions": p.decisions, "open": p.open,
                "facts": p.facts, "narrative": p.narrative,
            });
            text.push_str(&json.to_string());
            if !p.fallback.is_empty() {
                text.push_str("\nNotes from earlier folds that were not summarized:\n");
                text.push_str(&p.fallback);
            }
        }
        None => text.push_str("Previous summary: none"),
    }
    text.push_str(&format!(
        "\n\nThe whole JSON answer must stay under about {} characters.",
        model_budget(config) * 4
    ));
    let clip = per_message_clip(span.len(), config);
    text.push_str(&format!(
        "\n\nMessages to fold ({}, oldest first, each clipped to {clip} characters):\n",
        span.len()
    ));
    for (i, m) in span.iter().enumerate() {
        text.push_str(&format!("[{}] ", i + 1));
        text.push_str(&render_line(m, clip));
        text.push('\n');
    }
    let mut request = template.envelope(vec![
        Message::system(SUMMARIZER_INSTRUCTIONS).with_name(SUMMARIZER_NAME),
        Message::user(text),
    ]);
    request.prefix = None;
    request.tools = Vec::new();
    request.cache = Default::default();
    request
}

/// The request asking again after an invalid answer: the conversation so far, the
/// answer, and what was wrong with it.
pub(crate) fn retry_request(
    mut request: ChatRequest,
    answer: Message,
    problem: &str,
) -> ChatRequest {
    request.messages.push(answer);
    request.messages.push(Message::user(format!(
        "That reply is not valid: {problem}. Reply with only the JSON object \
         {{\"goals\": [...], \"decisions\": [...], \"open\": [...], \"facts\": [...], \"narrative\": \"...\"}}."
    )));
    request
}

/// Each message's clip, so that a long span stays near `span_chars`.
fn per_message_clip(messages: usize, config: &SummarizeConfig) -> usize {
    let share = config.span_chars / messages.max(1);
    config.clip_chars.min(share.max(64))
}

/// One message as a line for the summarizer: who, what it called, and its text.
pub(crate) fn render_line(m: &Message, clip: usize) -> String {
    let mut line = String::new();
    line.push_str(m.role.as_str());
    if let Some(name) = m.name() {
        line.push_str(&format!(" {name}"));
    }
    if let Some(id) = &m.tool_call_id {
        line.push_str(&format!(" (result of {id})"));
    }
    line.push_str(": ");
    let mut body = m.text().into_owned();
    for call in &m.tool_calls {
        body.push_str(&format!(" → calls {} {}", call.name, call.arguments));
    }
    let total = char_count(&body);
    line.push_str(truncate_chars(&body, clip));
    if total > clip {
        line.push_str(&format!(" … [{} more characters]", total - clip));
    }
    line
}

/// Checks a summarizer's answer: one JSON object (a Markdown code fence around it is
/// tolerated) with `goals`, `decisions`, `open` and `facts` as arrays of strings and
/// `narrative` as a string. Other keys are ignored.
///
/// ```
/// use llm_context_layers::summarize::parse_summary;
///
/// let ok = parse_summary(r#"{"goals":["ship"],"decisions":[],"open":[],"facts":["v1.2"],"narrative":"Shipped."}"#);
/// assert_eq!(ok.unwrap().goals, ["ship"]);
/// let err = parse_summary(r#"{"goals":"ship"}"#).unwrap_err();
/// assert!(err.contains("goals"), "{err}");
/// ```
pub fn parse_summary(text: &str) -> Result<SummaryBlock, String> {
    let trimmed = strip_fence(text.trim());
    let value: Value =
        serde_json::from_str(trimmed).map_err(|e| format!("it is not one JSON object ({e})"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| "it is JSON but not an object".to_owned())?;
    let list = |key: &str| -> Result<Vec<String>, String> {
        match obj.get(key) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("\"{key}\" must hold only strings"))
                })
                .collect(),
            Some(_) => Err(format!("\"{key}\" must be an array of strings")),
            None => Err(format!("\"{key}\" is missing")),
        }
    };
    // In the order the instructions name them, so the first problem is reported.
    let (goals, decisions, open, facts) = (
        list("goals")?,
        list("decisions")?,
        list("open")?,
        list("facts")?,
    );
    let narrative = match obj.get("narrative") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("\"narrative\" must be a string".to_owned()),
        None => return Err("\"narrative\" is missing".to_owned()),
    };
    Ok(SummaryBlock {
        goals,
        decisions,
        open,
        facts,
        narrative,
        ..SummaryBlock::default()
    })
}

fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    rest.strip_suffix("```").unwrap_or(rest).trim()
}
