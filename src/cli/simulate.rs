//! `llm-context simulate`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use llm_context::Executor;
use llm_context::simulate::{Calls, Candidate, Conversation, Outcome, Sessions, Simulation};

use super::{Exit, emit, input};

#[derive(Args, Debug)]
pub(crate) struct SimulateArgs {
    /// A policy to simulate: a JSON or TOML file with ContextPolicy fields, named by its
    /// file stem. Repeat to compare several. Without one: minimal (the default policy,
    /// max_tokens 100,000), low_water_0.6 (the same with low_water_tokens 60,000) and
    /// no_breakpoints (minimal without cache breakpoints; for an OpenAI model, which caches
    /// without them, it costs what minimal costs).
    #[arg(long, value_name = "FILE")]
    policy: Vec<PathBuf>,
    /// The model: its provider (from the catalog) chooses the cache model, its prices
    /// the cost.
    #[arg(long, value_name = "M", default_value = "claude-sonnet-4-6")]
    model: String,
    /// When the agent calls the model: once a turn (the call that gives the final
    /// answer), or after the user's request and after each tool round.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = CallsArg::PerTurn)]
    calls: CallsArg,
    /// User turns of the generated conversation.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 200,
        conflicts_with = "transcript"
    )]
    turns: usize,
    /// Seed of the generated conversation: the same seed, the same conversation.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 1,
        conflicts_with = "transcript"
    )]
    seed: u64,
    /// Generated conversations run at once through one stack and one provider cache (as
    /// one tenant's users), seeded S, S+1, …; their costs add up.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..),
        conflicts_with = "transcript"
    )]
    conversations: u16,
    /// The calls name no session (as many OpenAI-style clients send them): the stack must
    /// tell the conversations apart by itself.
    #[arg(long)]
    no_session_ids: bool,
    /// Replay this OpenAI Chat Completions request body (its messages and tools) instead
    /// of a generated conversation.
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// Run each policy under each of these executors (who edits the context: auto,
    /// local, delegate, off), side by side, named policy/executor. A delegated request is
    /// billed as the provider edits it. Comma-separated or repeated.
    #[arg(long, value_name = "E", value_delimiter = ',', value_parser = str::parse::<Executor>)]
    executor: Vec<Executor>,
    /// Print {"model", "calls", "turns", "policies": [...]} as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CallsArg {
    PerTurn,
    PerRound,
}

impl From<CallsArg> for Calls {
    fn from(c: CallsArg) -> Self {
        match c {
            CallsArg::PerTurn => Calls::PerTurn,
            CallsArg::PerRound => Calls::PerRound,
        }
    }
}

pub(crate) async fn run(args: SimulateArgs) -> Result<u8, Exit> {
    let simulation = Simulation::new(&args.model).with_calls(args.calls.into());
    // The model first: it is the cheapest mistake to report.
    simulation
        .check()
        .map_err(|e| Exit::bad_input(e.to_string()))?;
    let candidates = if args.policy.is_empty() {
        Candidate::comparison()
    } else {
        args.policy
            .iter()
            .map(|p| candidate(p))
            .collect::<Result<_, _>>()?
    };
    let candidates: Vec<Candidate> = if args.executor.is_empty() {
        candidates
    } else {
        candidates
            .iter()
            .flat_map(|c| args.executor.iter().map(|&e| c.under(e)))
            .collect()
    };
    let executors = !args.executor.is_empty();
    let conversations: Vec<Conversation> = match &args.transcript {
        Some(path) => {
            let (request, _) = input::request(Some(path))?;
            vec![Conversation::from_transcript(
                request.messages,
                request.tools,
            )]
        }
        None => (0..u64::from(args.conversations))
            .map(|i| Conversation::generate(args.turns, args.seed.wrapping_add(i)))
            .collect(),
    };
    let sessions = if args.no_session_ids {
        Sessions::Unnamed
    } else {
        Sessions::Named
    };

    let mut outcomes = Vec::with_capacity(candidates.len());
    for c in &candidates {
        let outcome = simulation
            .run_interleaved(&conversations, c, sessions)
            .await
            .map_err(|e| Exit::bad_input(e.to_string()))?;
        outcomes.push(outcome);
    }
    let turns = conversations.first().map_or(0, Conversation::turns);
    let text = if args.json {
        let mut v = json!({
            "model": simulation.model(),
            "calls": simulation.calls().as_str(),
            "turns": turns,
            "policies": outcomes.iter().map(|o| outcome_json(o, executors)).collect::<Vec<_>>(),
        });
        // Only when asked for: the contract's keys stay exactly these otherwise.
        if conversations.len() > 1 {
            v["conversations"] = json!(conversations.len());
        }
        if args.no_session_ids {
            v["session_ids"] = json!(false);
        }
        format!("{v}\n")
    } else {
        table(
            &simulation,
            turns,
            conversations.len(),
            &outcomes,
            executors,
        )
    };
    emit(&text, 0)
}

/// A policy file as a candidate named by its stem; a policy that cannot work is refused
/// here, naming the file.
fn candidate(path: &Path) -> Result<Candidate, Exit> {
    let policy = input::policy(Some(path))?;
    policy
        .validate()
        .map_err(|e| Exit::bad_input(format!("{}: {e}", path.display())))?;
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    Ok(Candidate::new(name, policy))
}

/// One policy's figures; with `executors`, also what the provider cleared.
fn outcome_json(o: &Outcome, executors: bool) -> Value {
    let mut v = json!({
        "name": o.name,
        "cost_usd": o.cost_usd,
        "cache_read_share": o.cache_read_share(),
        "input_tokens": o.input_tokens,
        "cache_read_tokens": o.cache_read_tokens,
        "cache_write_tokens": o.cache_write_tokens,
        "messages_lost": o.messages_lost,
        "cut_moves": o.cut_moves,
        "context_limit_errors": o.context_limit_errors,
    });
    if executors {
        v["provider_cleared"] = json!(o.provider_cleared);
    }
    v
}

/// One row per policy; with `executors`, a column of the results the provider cleared.
fn table(
    simulation: &Simulation,
    turns: usize,
    conversations: usize,
    outcomes: &[Outcome],
    executors: bool,
) -> String {
    // Refused calls were scheduled too.
    let calls = outcomes
        .first()
        .map_or(0, |o| o.calls + o.context_limit_errors);
    let mut out = format!(
        "{} · {} turns · {} ({} calls)",
        simulation.model(),
        turns,
        simulation.calls(),
        calls
    );
    if conversations > 1 {
        out.push_str(&format!(" · {conversations} conversations at once"));
    }
    out.push_str("\n\n");
    let name_width = outcomes
        .iter()
        .map(|o| o.name.chars().count())
        .chain([6])
        .max()
        .unwrap_or(6);
    out.push_str(&format!(
        "{:<name_width$}  {:>10}  {:>6}  {:>12}  {:>12}  {:>12}  {:>8}  {:>9}  {:>12}\n",
        "policy",
        "cost USD",
        "read %",
        "input",
        "cache read",
        "cache write",
        "lost",
        "cut moves",
        "limit errors"
    ));
    if executors {
        out.insert_str(out.len() - 1, &format!("  {:>16}", "provider cleared"));
    }
    for o in outcomes {
        out.push_str(&format!(
            "{:<name_width$}  {:>10.4}  {:>6.1}  {:>12}  {:>12}  {:>12}  {:>8}  {:>9}  {:>12}\n",
            o.name,
            o.cost_usd,
            o.cache_read_share() * 100.0,
            o.input_tokens,
            o.cache_read_tokens,
            o.cache_write_tokens,
            o.messages_lost,
            o.cut_moves,
            o.context_limit_errors
        ));
        if executors {
            out.insert_str(out.len() - 1, &format!("  {:>16}", o.provider_cleared));
        }
    }
    out
}
