//! Asking the summarizer (validated, asked again at most twice) and folding its answer,
//! or a plain-text fallback, into the summary block.

use tower::{Service, ServiceExt};

use super::bound::block_tokens;
use super::config::SummarizeConfig;
use super::facts::{merge_facts, span_identifiers};
use super::prompt::{parse_summary, render_line, retry_request};
use crate::BoxError;
use crate::model::Message;
use crate::model::SummaryBlock;
use crate::model::{ChatRequest, ChatResponse};
use crate::tokens::char_count;
use crate::tokens::truncate_chars;

/// The most requests one summary costs: the first, and two more when the answers are
/// not valid.
pub const MAX_SUMMARY_ATTEMPTS: usize = 3;

/// What the summarizer made of one span.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Summarized {
    /// A valid summary: its model-written part.
    Summary(SummaryBlock),
    /// A valid summary that says nothing. It is never applied: history stays.
    Empty,
    /// The summarizer failed (an error, or no valid answer in
    /// [`MAX_SUMMARY_ATTEMPTS`]); the fold falls back to plain text. Why, for logs.
    Failed(String),
}

/// Asks `summarizer` until it answers a valid summary, at most [`MAX_SUMMARY_ATTEMPTS`]
/// times; returns the outcome and the number of requests made. An answer whose block
/// would cost more than `max_tokens` is not valid: it is asked again, shorter (the
/// re-fold). An error of the summarizer ends the attempts at once.
pub(crate) async fn ask<S>(
    summarizer: &mut S,
    request: ChatRequest,
    max_tokens: usize,
) -> (Summarized, usize)
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let mut request = request;
    let mut problem = String::new();
    for attempt in 1..=MAX_SUMMARY_ATTEMPTS {
        let sent = (attempt < MAX_SUMMARY_ATTEMPTS).then(|| request.clone());
        let reply = match call(summarizer, request).await {
            Ok(r) => r,
            Err(e) => {
                return (
                    Summarized::Failed(format!("the summarizer failed: {e}")),
                    attempt,
                );
            }
        };
        match parse_summary(&reply.message.text()) {
            Ok(block) if block.is_empty_summary() => return (Summarized::Empty, attempt),
            Ok(block) => match block_tokens(&block) {
                tokens if tokens > max_tokens => {
                    problem = format!(
                        "it is about {tokens} tokens, and the summary must fit in {max_tokens} \
                         tokens (about {} characters): keep only what still matters",
                        max_tokens * 4
                    );
                }
                _ => return (Summarized::Summary(block), attempt),
            },
            Err(p) => problem = p,
        }
        match sent {
            Some(sent) => request = retry_request(sent, reply.message, &problem),
            None => break,
        }
    }
    (
        Summarized::Failed(format!(
            "no valid summary in {MAX_SUMMARY_ATTEMPTS} attempts; the last answer: {problem}"
        )),
        MAX_SUMMARY_ATTEMPTS,
    )
}

/// One call, readiness first; the error converted before anything else is awaited, so
/// the future stays `Send` whatever the service's error type.
pub(crate) async fn call<S>(service: &mut S, request: ChatRequest) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let ready: Result<(), BoxError> = service.ready().await.map(|_| ()).map_err(Into::into);
    ready?;
    service.call(request).await.map_err(Into::into)
}

/// The block after folding `span` with `outcome` into `previous`; `None` for an empty
/// summary, which must not remove anything.
pub(crate) fn fold_block(
    previous: Option<&SummaryBlock>,
    span: &[Message],
    outcome: &Summarized,
    artifact: Option<String>,
    config: &SummarizeConfig,
) -> Option<SummaryBlock> {
    let model = match outcome {
        Summarized::Empty => return None,
        Summarized::Summary(model) => Some(model),
        Summarized::Failed(_) => None,
    };
    let empty = SummaryBlock::default();
    let previous = previous.unwrap_or(&empty);
    let found = span_identifiers(span, config.max_facts);
    let mut block = match model {
        Some(model) => {
            let mut block = model.clone();
            // The model saw the earlier facts but may drop some: keep them.
            let mine = merge_facts(&model.facts, &found, usize::MAX);
            block.facts = merge_facts(&previous.facts, &mine, config.max_facts);
            block.fallback = previous.fallback.clone();
            block
        }
        None => {
            // The summarizer failed: a plain-text excerpt instead.
            let mut block = previous.clone();
            block.facts = merge_facts(&previous.facts, &found, config.max_facts);
            append_fallback(&mut block.fallback, span, config);
            block
        }
    };
    block.artifacts = previous.artifacts.clone();
    block.artifacts.extend(artifact);
    block.archive = previous.archive.clone();
    block.folded_messages = previous.folded_messages + span.len();
    Some(block)
}

/// Adds a plain-text excerpt of `span` after the earlier fallbacks, within
/// `fallback_chars` for this fold and `fallback_max_chars` for all of them.
fn append_fallback(fallback: &mut String, span: &[Message], config: &SummarizeConfig) {
    let used = char_count(fallback);
    let room = config
        .fallback_max_chars
        .saturating_sub(used + usize::from(used > 0))
        .min(config.fallback_chars);
    if room == 0 {
        return;
    }
    let clip = (config.fallback_chars / span.len().max(1)).max(40);
    let mut piece = format!(
        "[{} messages folded without a summary (the summarizer failed); excerpts:]",
        span.len()
    );
    for m in span {
        piece.push('\n');
        piece.push_str(&render_line(m, clip));
    }
    if used > 0 {
        fallback.push('\n');
    }
    fallback.push_str(truncate_chars(&piece, room));
}

/// The folded span as kept in an artifact: one JSON message a line, exactly as it was.
pub(crate) fn span_text(span: &[Message]) -> String {
    let mut out = String::new();
    for m in span {
        // Messages are plain data: serialising cannot fail.
        out.push_str(&serde_json::to_string(m).expect("message serialises"));
        out.push('\n');
    }
    out
}
