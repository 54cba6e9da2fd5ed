//! A multi-turn agent with tools, offline: the built-in mock model behind the whole
//! context stack, printing what the stack did on every call. Its context is a durable
//! record, checkpointed after every turn and folded into a summary when it grows; with
//! `--store sqlite:PATH` it lives in a SQLite file, and a second run resumes where the
//! first stopped (killed or not).
//!
//! ```text
//! cargo run --example agent
//! cargo run --example agent -- --turns 12 --max-tokens 6000
//! cargo run --example agent -- --store sqlite:agent.db --turns 4   # turns 0-3
//! cargo run --example agent -- --store sqlite:agent.db --turns 8   # resumes at turn 4
//! ```

use std::sync::Arc;

use llm_context::durable::{Compactor, ContextRecord, ContextStore, LocalContextStore};
use llm_context::mock::{MockModel, MockReply};
use llm_context::summarize::{SummarizeConfig, is_summary_request};
use llm_context::{
    ChatRequest, ContextLimitError, ContextPolicy, Message, Role, Scope, ServiceBuilderExt,
    ToolCall, ToolSpec,
};
use serde_json::json;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The tool rounds the mock model makes before it answers a question.
const ROUNDS_PER_TURN: usize = 3;
/// Where the agent's context is kept in the store.
const CONTEXT_ID: &str = "agent";

struct Args {
    turns: usize,
    max_tokens: usize,
    store: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        turns: 8,
        max_tokens: 5_000,
        store: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if !matches!(flag.as_str(), "--turns" | "--max-tokens" | "--store") {
            return Err(format!(
                "unknown flag {flag} (try --turns N, --max-tokens N, --store sqlite:PATH)"
            ));
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || -> Result<usize, String> {
            value
                .parse()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--turns" => out.turns = number()?,
            "--max-tokens" => out.max_tokens = number()?,
            _ => out.store = Some(value.clone()), // --store, the one flag left
        }
    }
    Ok(out)
}

/// The store named by `--store`, or one in memory.
fn open_store(spec: Option<&str>) -> Result<Arc<dyn ContextStore>, String> {
    let Some(spec) = spec else {
        return Ok(Arc::new(LocalContextStore::new()));
    };
    match spec.split_once(':') {
        #[cfg(feature = "sqlite")]
        Some(("sqlite", path)) if !path.is_empty() => {
            let store = llm_context::sqlite::SqliteStore::open(path).map_err(|e| e.to_string())?;
            Ok(Arc::new(store))
        }
        _ => Err(format!(
            "--store {spec}: expected sqlite:PATH (with the `sqlite` feature)"
        )),
    }
}

/// The model: calls `read_log` a few times after each question, then answers; asked for
/// a summary, it writes one.
fn model() -> MockModel {
    MockModel::from_fn(|req: &ChatRequest| {
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
            MockReply::tool_calls([ToolCall::new(
                id,
                "read_log",
                json!({"page": since_question}),
            )])
        } else {
            MockReply::text(format!(
                "Summary for {topic:?}: the errors stop after the deploy."
            ))
        }
    })
}

/// A summary of what the summarizer was shown: the incidents it mentions.
fn summary(req: &ChatRequest) -> MockReply {
    let text: String = req.messages.iter().map(|m| m.text().into_owned()).collect();
    let incidents: Vec<&str> = text
        .match_indices("incident ")
        .filter_map(|(i, _)| text[i + 9..].split(|c: char| !c.is_ascii_digit()).next())
        .filter(|n| !n.is_empty())
        .collect();
    let last = incidents.iter().filter_map(|n| n.parse::<u32>().ok()).max();
    MockReply::text(
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
fn read_log(page: u64) -> String {
    (0..40)
        .map(|i| format!("{page:02}:{i:03} GET /api/orders 200 12ms trace=abc{i:03}\n"))
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = args().map_err(|e| format!("agent: {e}"))?;
    let store = open_store(args.store.as_deref()).map_err(|e| format!("agent: {e}"))?;
    let scope = Scope::org("example");
    let policy = ContextPolicy::default()
        .with_max_tokens(args.max_tokens)
        .with_reserve_tokens(1_000)
        .with_preserve_recent(2);
    let model = model();
    let mut stack = ServiceBuilder::new()
        .context_policy(policy)?
        .service(model.clone());
    // Fold old turns into a summary at 70% of the window, keeping the newest turn.
    let compactor = Compactor::new(SummarizeConfig::new(args.max_tokens).with_keep_last(8))?;

    let tools = vec![ToolSpec::new(
        "read_log",
        "Read one page of the service log.",
        json!({"type": "object", "properties": {"page": {"type": "integer"}}}),
    )];
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
    if done > 0 {
        println!(
            "resuming at turn {done} (checkpoint version {}, {} messages, {} folded)",
            record.version,
            record.messages.len(),
            record.summary.as_ref().map_or(0, |s| s.folded_messages)
        );
    }
    if done >= args.turns {
        println!("all {done} turns are done; raise --turns to go on");
        return Ok(());
    }
    println!("calls  messages  before → after  (allowance)  removed cleared");
    for turn in done..args.turns {
        record
            .messages
            .push(Message::user(format!("What happened in incident {turn}?")));
        loop {
            let request = record.to_request("mock").with_tools(tools.clone());
            let sent = request.messages.len();
            let reply = match stack.ready().await?.call(request).await {
                Ok(reply) => reply,
                Err(e) if e.is::<ContextLimitError>() => {
                    println!("turn {turn}: {e}");
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            let r = &reply.report;
            println!(
                "{:>5}  {:>8}  {:>6} → {:<6} ({})  {:>7} {:>7}",
                model.calls(),
                sent,
                r.before_tokens,
                r.after_tokens,
                r.prompt_allowance,
                r.removed_messages,
                r.cleared_observations
            );
            let calls = reply.message.tool_calls.clone();
            record.messages.push(reply.message);
            if calls.is_empty() {
                break;
            }
            for call in calls {
                let page = call.arguments["page"].as_u64().unwrap_or(0);
                record
                    .messages
                    .push(Message::tool_result(call.id, call.name, read_log(page)));
            }
        }
        let answer = record.messages.last().map(|m| m.text().into_owned());
        // Checkpoint: compare-and-set on the version this run last saw.
        record
            .scratchpad
            .insert("turns_done".into(), json!(turn + 1));
        record.refresh_estimate();
        record.version = store.save(&scope, CONTEXT_ID, &record).await?;
        let mut note = format!("checkpoint v{}", record.version);
        let mut summarizer = model.clone();
        if let Some(fold) = compactor
            .compact(
                store.as_ref(),
                &scope,
                CONTEXT_ID,
                &mut summarizer,
                "mock",
                false,
            )
            .await?
        {
            record = store.load(&scope, CONTEXT_ID).await?.expect("just saved");
            note = format!(
                "checkpoint v{}, folded {} messages ({} → {} tokens)",
                fold.version, fold.folded_messages, fold.before_tokens, fold.after_tokens
            );
        }
        println!("turn {turn}: {} [{note}]", answer.unwrap_or_default());
    }
    Ok(())
}
