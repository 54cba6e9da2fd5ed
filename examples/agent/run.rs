//! The agent itself: a deterministic offline model with one tool, the context stack in
//! front of it, and the turn loop that checkpoints and folds the durable record. The
//! tests run it too (bounded over thousands of turns, and killed and resumed), so it
//! takes its stores and settings as arguments and reports what it did.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use llm_context::durable::{CompactError, Compactor, ContextRecord, ContextStore};
use llm_context::summarize::{SummarizeConfig, SummaryBlock, is_summary_request};
use llm_context::tokens::estimate_message_tokens;
use llm_context::{
    ArtifactStore, BoxError, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy,
    ContextPolicyLayer, Message, Role, Scope, ToolCall, ToolSpec,
};
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

/// The tool rounds the model makes before it answers a question.
pub(crate) const ROUNDS_PER_TURN: usize = 3;
/// Where the agent's context is kept in the store; also the session of its requests,
/// so that the stack reads the artifacts the compactor stores under this id.
pub(crate) const CONTEXT_ID: &str = "agent";

/// How the agent runs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Run up to this turn (a resumed run starts where the record says it stopped).
    pub(crate) turns: usize,
    /// The model's window.
    pub(crate) max_tokens: usize,
    /// The most tool rounds of one turn: a model that keeps calling tools past it gets
    /// an error result for those calls, and the turn ends.
    pub(crate) max_rounds: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            turns: 8,
            max_tokens: 5_000,
            max_rounds: 8,
        }
    }
}

/// Where the agent keeps its context and every artifact the context names: one
/// backend for both, so a durable record never names an artifact that lives only in
/// memory.
#[derive(Clone)]
pub(crate) struct Stores {
    /// The context records.
    pub(crate) contexts: Arc<dyn ContextStore>,
    /// Offloaded and cleared tool results, and folded summary spans.
    pub(crate) artifacts: Arc<dyn ArtifactStore>,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// The turn the run started at (not 0 when it resumed).
    pub(crate) first_turn: usize,
    /// Turns run.
    pub(crate) turns: usize,
    /// Calls to the model, summaries included.
    pub(crate) model_calls: usize,
    /// Turns ended by the round limit.
    pub(crate) capped_turns: usize,
    /// The largest summary block, in tokens, after any checkpoint.
    pub(crate) largest_summary_tokens: usize,
    /// The most artifact ids a summary block named itself.
    pub(crate) most_summary_artifacts: usize,
    /// The most messages the record held after any checkpoint.
    pub(crate) most_messages: usize,
}

/// The model: calls `read_log` a few times after each question, then answers; asked for
/// a summary, it writes one. `calls` counts every call. It keeps nothing else, so a run
/// of any length holds no more than its context.
pub(crate) fn model(
    calls: Arc<AtomicUsize>,
) -> impl Service<
    ChatRequest,
    Response = ChatResponse,
    Error = Infallible,
    Future = std::future::Ready<Result<ChatResponse, Infallible>>,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |req: ChatRequest| {
        calls.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(ChatResponse::new(reply(&req))))
    })
}

fn reply(req: &ChatRequest) -> Message {
    if is_summary_request(req) {
        return summary(req);
    }
    let since_question = req
        .messages
        .iter()
        .rev()
        .take_while(|m| !m.is_user_request())
        .filter(|m| m.role == Role::Assistant)
        .count();
    let question = req.messages.iter().rev().find(|m| m.is_user_request());
    let topic = question.map(|m| m.text().into_owned()).unwrap_or_default();
    if since_question < ROUNDS_PER_TURN {
        // Unique across the whole run (providers' ids are), whatever was folded.
        let incident: String = topic.chars().filter(char::is_ascii_digit).collect();
        let id = format!("call-{incident}-{since_question}");
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                id,
                "read_log",
                json!({"page": since_question}),
            )],
        )
    } else {
        Message::assistant(format!(
            "Summary for {topic:?}: the errors stop after the deploy."
        ))
    }
}

/// A summary of what the summarizer was shown: the incidents it mentions.
fn summary(req: &ChatRequest) -> Message {
    let text: String = req.messages.iter().map(|m| m.text().into_owned()).collect();
    let incidents: Vec<&str> = text
        .match_indices("incident ")
        .filter_map(|(i, _)| text[i + 9..].split(|c: char| !c.is_ascii_digit()).next())
        .filter(|n| !n.is_empty())
        .collect();
    let last = incidents.iter().filter_map(|n| n.parse::<u32>().ok()).max();
    Message::assistant(
        json!({
            "goals": ["explain each incident"],
            "decisions": ["read the service log before answering"],
            "open": [],
            "facts": ["the errors stop after the deploy"],
            "narrative": format!("Incidents up to {} were investigated.", last.map_or("none".into(), |n| n.to_string())),
        })
        .to_string(),
    )
}

/// The tool: a page of a (long) log.
pub(crate) fn read_log(page: u64) -> String {
    (0..40)
        .map(|i| format!("{page:02}:{i:03} GET /api/orders 200 12ms trace=abc{i:03}\n"))
        .collect()
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "read_log",
        "Read one page of the service log.",
        json!({"type": "object", "properties": {"page": {"type": "integer"}}}),
    )]
}

/// The tenant the agent works for.
pub(crate) fn scope() -> Scope {
    Scope::org("example")
}

/// Runs turns from where the record stopped up to `settings.turns`, checkpointing after
/// each and folding the record when it grows; `say` gets one line per model call and
/// per turn.
pub(crate) async fn run(
    settings: &Settings,
    stores: &Stores,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<Stats, BoxError> {
    let scope = scope();
    let policy = ContextPolicy::default()
        .with_max_context_tokens(settings.max_tokens)
        .with_reserve_tokens(1_000)
        .with_preserve_recent(2);
    let calls = Arc::new(AtomicUsize::new(0));
    let model = model(calls.clone());
    // The stack answers read_context_artifact calls itself, from the same store.
    let mut stack = ContextPolicyLayer::new(policy)?
        .with_artifact_store(stores.artifacts.clone())
        .with_auto_resolve()
        .layer(model.clone());
    // Fold old turns into a summary at 70% of the window, keeping the newest turn.
    let compactor = Compactor::new(SummarizeConfig::new(settings.max_tokens).with_keep_last(8))?
        .with_artifact_store(stores.artifacts.clone());
    let store = stores.contexts.as_ref();

    let mut record = match store.load(&scope, CONTEXT_ID).await? {
        Some(record) => record,
        None => {
            let mut record = ContextRecord::new();
            record.messages.push(Message::system(
                "You are an SRE agent. Use read_log, then answer.",
            ));
            record
        }
    };
    let done = record
        .scratchpad
        .get("turns_done")
        .and_then(|v| v.as_u64())
        .unwrap_or(0) as usize;
    let mut stats = Stats {
        first_turn: done,
        ..Stats::default()
    };
    if done > 0 {
        say(format!(
            "resuming at turn {done} (checkpoint version {}, {} messages, {} folded)",
            record.version,
            record.messages.len(),
            record.summary.as_ref().map_or(0, |s| s.folded_messages)
        ));
    }
    if done >= settings.turns {
        say(format!("all {done} turns are done; raise --turns to go on"));
        return Ok(stats);
    }
    say("calls  messages  before → after  (allowance)  removed cleared".into());
    for turn in done..settings.turns {
        record
            .messages
            .push(Message::user(format!("What happened in incident {turn}?")));
        for round in 1.. {
            let request = record
                .to_request("mock")
                .with_tools(tools())
                .with_scope(scope.clone())
                .with_session(CONTEXT_ID);
            let sent = request.messages.len();
            let reply = match stack.ready().await?.call(request).await {
                Ok(reply) => reply,
                Err(e) if e.is::<ContextLimitError>() => {
                    say(format!("turn {turn}: {e}"));
                    stats.model_calls = calls.load(Ordering::Relaxed);
                    return Ok(stats);
                }
                Err(e) => return Err(e),
            };
            let r = &reply.report;
            say(format!(
                "{:>5}  {:>8}  {:>6} → {:<6} ({})  {:>7} {:>7}",
                calls.load(Ordering::Relaxed),
                sent,
                r.before_tokens,
                r.after_tokens,
                r.prompt_allowance,
                r.removed_messages,
                r.cleared_results
            ));
            let tool_calls = reply.message.tool_calls.clone();
            record.messages.push(reply.message);
            if tool_calls.is_empty() {
                break;
            }
            // Every call gets its result, so the transcript stays whole (a call never
            // answered would also stop every later fold).
            let capped = round >= settings.max_rounds;
            for call in tool_calls {
                let result = if capped {
                    json!({"error": "round_limit", "message": format!(
                        "not run: this turn used its {} tool rounds; answer with what you have",
                        settings.max_rounds
                    )})
                    .to_string()
                } else {
                    read_log(call.arguments_value()["page"].as_u64().unwrap_or(0))
                };
                record
                    .messages
                    .push(Message::tool_result(call.id, call.name, result));
            }
            if capped {
                stats.capped_turns += 1;
                say(format!(
                    "turn {turn}: stopped after {} tool rounds without an answer",
                    settings.max_rounds
                ));
                break;
            }
        }
        let answer = record
            .messages
            .last()
            .filter(|m| m.role == Role::Assistant)
            .map(|m| m.text().into_owned());
        // Checkpoint: compare-and-set on the version this run last saw.
        record
            .scratchpad
            .insert("turns_done".into(), json!(turn + 1));
        record.refresh_estimate();
        record.version = store.save(&scope, CONTEXT_ID, &record).await?;
        let mut note = format!("checkpoint v{}", record.version);
        let mut summarizer = model.clone();
        match compactor
            .compact(store, &scope, CONTEXT_ID, &mut summarizer, "mock", false)
            .await
        {
            Ok(Some(fold)) => {
                record = store
                    .load(&scope, CONTEXT_ID)
                    .await?
                    .ok_or("the record compacted a moment ago is gone")?;
                note = format!(
                    "checkpoint v{}, folded {} messages ({} → {} tokens)",
                    fold.version, fold.folded_messages, fold.before_tokens, fold.after_tokens
                );
            }
            Ok(None) => {}
            Err(CompactError::Store(e)) => return Err(e.into()),
            // A refused fold keeps the history whole; the next turn tries again.
            Err(refused) => note = format!("{note}, not folded: {refused}"),
        }
        stats.turns += 1;
        stats.most_messages = stats.most_messages.max(record.messages.len());
        if let Some(block) = &record.summary {
            let tokens = estimate_message_tokens(&[SummaryBlock::to_message(block)]);
            stats.largest_summary_tokens = stats.largest_summary_tokens.max(tokens);
            stats.most_summary_artifacts = stats.most_summary_artifacts.max(block.artifacts.len());
        }
        say(format!(
            "turn {turn}: {} [{note}]",
            answer.unwrap_or_default()
        ));
    }
    stats.model_calls = calls.load(Ordering::Relaxed);
    Ok(stats)
}
