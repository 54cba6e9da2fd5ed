//! A run: one policy's stack over a conversation, every call billed by the provider's
//! cache model.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tower::{Layer, Service, ServiceExt};

use llm_context_layers::catalog::{Catalog, Price, Provider};
use llm_context_layers::mock::Capture;
use llm_context_layers::prefix::PrefixLayer;
use llm_context_layers::{
    BoxError, CacheHints, ChatRequest, ContextLimitError, ContextPolicy, ContextPolicyLayer,
    Executor, PolicyError, Scope,
};

use super::anthropic::{self, AnthropicCache};
use super::conversation::Conversation;
use super::openai::{self, OpenAiCache};
use crate::error::ProviderError;

/// Seconds between two calls of one turn: a tool round's time (the model's answer and
/// the tools' run).
pub const ROUND_SECONDS: u64 = 15;

/// Seconds between a turn's last call and the next turn's first: the user reading and
/// typing.
pub const TURN_GAP_SECONDS: u64 = 60;

/// The output tokens billed for every call. The simulation does not generate answers,
/// so every call is taken to produce a short reply or a few tool calls; the figure is the
/// same for every policy, so it shifts costs without changing their order.
pub const OUTPUT_TOKENS_PER_CALL: u64 = 300;

/// The session every call of a run belongs to: the stack keeps its cut and artifacts per
/// session, as for one agent's conversation.
pub const SESSION: &str = "simulate";

/// When the agent calls the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Calls {
    /// Once a turn: the call that produces the turn's final answer, with the transcript
    /// up to the turn's last tool results.
    #[default]
    PerTurn,
    /// After the user's request and after each tool round's results, as an agent loop
    /// does.
    PerRound,
}

impl Calls {
    /// `per-turn` or `per-round`.
    pub fn as_str(self) -> &'static str {
        match self {
            Calls::PerTurn => "per-turn",
            Calls::PerRound => "per-round",
        }
    }
}

impl fmt::Display for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Calls {
    type Err = SimulateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "per-turn" => Ok(Calls::PerTurn),
            "per-round" => Ok(Calls::PerRound),
            other => Err(SimulateError::Calls(other.to_owned())),
        }
    }
}

/// A policy to simulate, under a name.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    name: String,
    policy: ContextPolicy,
    breakpoints: Option<CacheHints>,
}

impl Candidate {
    /// `policy` with the stack's default breakpoints (see [`PrefixLayer`]).
    pub fn new(name: impl Into<String>, policy: ContextPolicy) -> Self {
        Self {
            name: name.into(),
            policy,
            breakpoints: None,
        }
    }

    /// Marks these breakpoints instead of the default ones; [`CacheHints::NONE`] shows
    /// what caching is worth.
    #[must_use]
    pub fn with_breakpoints(mut self, breakpoints: CacheHints) -> Self {
        self.breakpoints = Some(breakpoints);
        self
    }

    /// The built-in comparison: `minimal` (the default policy with a 100,000-token
    /// ceiling), `low_water_0.6` (the same, pruning to 60,000 tokens and keeping that cut
    /// while it fits) and `no_breakpoints` (`minimal` without cache breakpoints, to show
    /// what they are worth on Anthropic; OpenAI caches without them, so there it costs
    /// what `minimal` costs).
    pub fn comparison() -> Vec<Candidate> {
        let minimal = ContextPolicy::default().with_max_context_tokens(100_000);
        vec![
            Candidate::new("minimal", minimal.clone()),
            Candidate::new(
                "low_water_0.6",
                minimal.clone().with_low_water_tokens(60_000),
            ),
            Candidate::new("no_breakpoints", minimal).with_breakpoints(CacheHints::NONE),
        ]
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy.
    pub fn policy(&self) -> &ContextPolicy {
        &self.policy
    }

    /// This candidate with `executor` deciding who edits the context, named
    /// `name/executor`: what `llm-context simulate --executor` compares.
    #[must_use]
    pub fn under(&self, executor: Executor) -> Candidate {
        let mut out = self.clone();
        out.name = format!("{}/{executor}", self.name);
        out.policy.executor = executor;
        out
    }

    /// The stack of a run: a fresh layer, so no state (cuts, artifacts) crosses runs.
    fn layer(&self, catalog: &Arc<Catalog>) -> Result<ContextPolicyLayer, PolicyError> {
        let layer = ContextPolicyLayer::new(self.policy.clone())?.with_catalog(catalog.clone());
        Ok(match self.breakpoints {
            Some(b) => layer.with_prefix(PrefixLayer::new().with_breakpoints(b)?),
            None => layer,
        })
    }
}

/// What a policy cost over a run.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Outcome {
    /// The candidate's name.
    pub name: String,
    /// Calls made (a call refused with a [`ContextLimitError`] is not made).
    pub calls: usize,
    /// Prompt tokens of all calls, cached or not.
    pub input_tokens: u64,
    /// Of `input_tokens`, those read from the cache.
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, those written to the cache.
    pub cache_write_tokens: u64,
    /// The cost in USD at the catalog's prices, with [`OUTPUT_TOKENS_PER_CALL`] of output
    /// a call.
    pub cost_usd: f64,
    /// Messages the model did not see, summed over the calls (a message dropped from five
    /// calls counts five times): the sum of the reports' `removed_messages`.
    pub messages_lost: usize,
    /// Calls whose history started elsewhere than on the previous call
    /// ([`PreparationReport::cut_moved`](crate::PreparationReport::cut_moved); the first
    /// call that prunes counts): each one breaks the provider's cached prefix after the
    /// system prompt.
    pub cut_moves: usize,
    /// Of `cache_write_tokens`, those written on the calls whose cut moved: the price of
    /// moving it (everything after the system prompt is written again), as against each
    /// call's new content.
    pub cut_move_write_tokens: u64,
    /// Calls the stack refused because what must be kept did not fit.
    pub context_limit_errors: usize,
    /// Tool results the provider cleared, summed over the calls: a delegated run's
    /// clearing, applied to each request before it is billed (see
    /// [`Executor::Delegate`]).
    pub provider_cleared: usize,
}

impl Outcome {
    /// `cache_read_tokens / input_tokens` (0 without input).
    pub fn cache_read_share(&self) -> f64 {
        if self.input_tokens == 0 {
            0.0
        } else {
            self.cache_read_tokens as f64 / self.input_tokens as f64
        }
    }
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimulateError {
    /// The catalog does not know the model.
    #[error("unknown model `{0}`: it is not in the catalog")]
    UnknownModel(String),
    /// The catalog has no price for the model.
    #[error("model `{0}` has no price in the catalog")]
    NoPrice(String),
    /// The catalog does not say which provider serves the model.
    #[error("model `{0}` has no provider in the catalog")]
    NoProvider(String),
    /// Not `per-turn` or `per-round`.
    #[error("`{0}` is not a call mode: use per-turn or per-round")]
    Calls(String),
    /// The candidate's policy or breakpoints cannot work.
    #[error("policy `{name}`: {source}")]
    Policy {
        /// The candidate.
        name: String,
        /// What is wrong.
        source: PolicyError,
    },
    /// A prepared request cannot be rendered for the provider.
    #[error("a prepared request cannot be sent: {0}")]
    Render(#[from] ProviderError),
    /// The stack failed otherwise than with a [`ContextLimitError`].
    #[error("the stack failed: {0}")]
    Stack(BoxError),
}

/// A simulation setup: the model (its provider's cache model and its prices) and when
/// the agent calls it.
#[derive(Clone, Debug)]
pub struct Simulation {
    model: String,
    calls: Calls,
    catalog: Arc<Catalog>,
}

impl Simulation {
    /// Simulates calls to `model`, once a turn, priced by the built-in catalog.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            calls: Calls::PerTurn,
            catalog: Catalog::builtin(),
        }
    }

    /// Sets when the agent calls the model.
    #[must_use]
    pub fn with_calls(mut self, calls: Calls) -> Self {
        self.calls = calls;
        self
    }

    /// Takes prices, windows and cache minimums from `catalog`, for the stack too.
    #[must_use]
    pub fn with_catalog(mut self, catalog: Arc<Catalog>) -> Self {
        self.catalog = catalog;
        self
    }

    /// The model.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// When the agent calls the model.
    pub fn calls(&self) -> Calls {
        self.calls
    }

    /// The model's provider and prices, or why it cannot be simulated.
    pub fn check(&self) -> Result<(Provider, Price), SimulateError> {
        let info = self
            .catalog
            .get(&self.model)
            .ok_or_else(|| SimulateError::UnknownModel(self.model.clone()))?;
        let price = info
            .price
            .ok_or_else(|| SimulateError::NoPrice(self.model.clone()))?;
        let provider = info
            .provider
            .ok_or_else(|| SimulateError::NoProvider(self.model.clone()))?;
        Ok((provider, price))
    }

    /// Runs `candidate`'s stack over `conversation`: each call is what the agent would
    /// send at that point (its whole transcript, as the agent keeps it), prepared by the
    /// real [`ContextPolicyLayer`], rendered as the provider's client sends it and billed
    /// by the provider's cache model. Calls of a turn are [`ROUND_SECONDS`] apart, turns
    /// [`TURN_GAP_SECONDS`]; a call refused with a [`ContextLimitError`] is counted and
    /// the run goes on.
    pub async fn run(
        &self,
        conversation: &Conversation,
        candidate: &Candidate,
    ) -> Result<Outcome, SimulateError> {
        self.run_interleaved(
            std::slice::from_ref(conversation),
            candidate,
            Sessions::Named,
        )
        .await
    }

    /// Runs `candidate`'s stack over several conversations at once, as one tenant's
    /// users talking to one deployment: each conversation keeps its own clock (as in
    /// [`run`](Self::run)), all calls go through one stack and one provider cache in the
    /// order they are made. With [`Sessions::Unnamed`] the calls name no session, so the
    /// stack must tell the conversations apart by itself; the outcome is the sum over all
    /// conversations.
    ///
    /// ```
    /// use llm_context::simulate::{Candidate, Conversation, Sessions, Simulation};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::simulate::SimulateError> {
    /// let pair = [Conversation::generate(6, 1), Conversation::generate(6, 2)];
    /// let candidate = &Candidate::comparison()[1];
    /// let simulation = Simulation::new("claude-sonnet-4-6");
    /// let named = simulation.run_interleaved(&pair, candidate, Sessions::Named).await?;
    /// let unnamed = simulation.run_interleaved(&pair, candidate, Sessions::Unnamed).await?;
    /// assert_eq!(named.cost_usd, unnamed.cost_usd);
    /// # Ok(()) }
    /// ```
    pub async fn run_interleaved(
        &self,
        conversations: &[Conversation],
        candidate: &Candidate,
        sessions: Sessions,
    ) -> Result<Outcome, SimulateError> {
        let (provider, price) = self.check()?;
        let min = self.catalog.cache_min_tokens(&self.model) as u64;
        let mut cache = match provider {
            Provider::Anthropic => CacheModel::Anthropic(AnthropicCache::new(min)),
            _ => CacheModel::OpenAi(OpenAiCache::new(min)),
        };
        let layer = candidate
            .layer(&self.catalog)
            .map_err(|source| SimulateError::Policy {
                name: candidate.name.clone(),
                source,
            })?;
        let capture = Capture::default();
        let mut stack = layer.layer(capture.clone());
        let mut outcome = Outcome {
            name: candidate.name.clone(),
            ..Outcome::default()
        };
        // Every call of every conversation, in the order they are made (ties in the
        // order of the conversations).
        let mut calls: Vec<(Duration, usize, usize)> = conversations
            .iter()
            .enumerate()
            .flat_map(|(c, conversation)| {
                schedule(conversation, self.calls)
                    .into_iter()
                    .map(move |(end, at)| (at, c, end))
            })
            .collect();
        calls.sort_by_key(|&(at, c, _)| (at, c));
        for (at, c, end) in calls {
            let conversation = &conversations[c];
            let mut request =
                ChatRequest::new(self.model.clone(), conversation.messages()[..end].to_vec())
                    .with_tools(conversation.tools().to_vec())
                    .with_scope(Scope::org("simulate"));
            match sessions {
                Sessions::Named if conversations.len() > 1 => {
                    request = request.with_session(format!("{SESSION}-{c}"));
                }
                Sessions::Named | Sessions::Shared => request = request.with_session(SESSION),
                Sessions::Unnamed => {}
            }
            let ready = stack.ready().await.map_err(SimulateError::Stack)?;
            let report = match ready.call(request).await {
                Ok(response) => response.report,
                Err(e) if e.is::<ContextLimitError>() => {
                    outcome.context_limit_errors += 1;
                    continue;
                }
                Err(e) => return Err(SimulateError::Stack(e)),
            };
            let Some(mut sent) = capture.take() else {
                // A response the model did not make (the memo, which is off here): no call.
                continue;
            };
            // A delegated request is cached and billed as the provider edits it.
            if provider == Provider::Anthropic {
                outcome.provider_cleared += super::provider::apply(&mut sent);
            }
            let tally = cache.call(&sent, at)?;
            outcome.calls += 1;
            outcome.input_tokens += tally.input_tokens;
            outcome.cache_read_tokens += tally.cache_read_tokens;
            outcome.cache_write_tokens += tally.cache_write_tokens;
            outcome.cost_usd += price.cost(&tally.usage(OUTPUT_TOKENS_PER_CALL));
            outcome.messages_lost += report.removed_messages;
            outcome.cut_moves += usize::from(report.cut_moved);
            if report.cut_moved {
                outcome.cut_move_write_tokens += tally.cache_write_tokens;
            }
        }
        Ok(outcome)
    }
}

/// Whether a run's calls name their conversation's session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Sessions {
    /// Each conversation's calls carry its own session id ([`SESSION`], or
    /// `simulate-N` for the Nth of several).
    #[default]
    Named,
    /// The calls name no session, as many OpenAI-style clients send them: the stack
    /// infers one from each conversation's head.
    Unnamed,
    /// Every conversation's calls carry one and the same session id: what requests with
    /// no id cost before the stack inferred sessions (they shared one cut, and each
    /// conversation kept moving the other's).
    Shared,
}

/// The provider's cache, chosen by the model's provider.
enum CacheModel {
    Anthropic(AnthropicCache),
    OpenAi(OpenAiCache),
}

impl CacheModel {
    fn call(&mut self, sent: &ChatRequest, at: Duration) -> Result<super::Tally, ProviderError> {
        Ok(match self {
            CacheModel::Anthropic(c) => c.call(&anthropic::blocks(sent)?, at),
            CacheModel::OpenAi(c) => c.call(&openai::units(sent), at),
        })
    }
}

/// The calls of a run: the transcript's length at each, and when it is made.
pub(super) fn schedule(conversation: &Conversation, calls: Calls) -> Vec<(usize, Duration)> {
    let mut out = Vec::new();
    let mut now = 0;
    for (t, turn) in conversation.steps().iter().enumerate() {
        if t > 0 {
            now += TURN_GAP_SECONDS;
        }
        for (i, &end) in turn.iter().enumerate() {
            if i > 0 {
                now += ROUND_SECONDS;
            }
            // Per turn, the turn's rounds still take their time; only the last call is made.
            if calls == Calls::PerRound || i + 1 == turn.len() {
                out.push((end, Duration::from_secs(now)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_context_layers::Message;

    #[tokio::test(flavor = "current_thread")]
    async fn conversations_without_ids_cost_what_they_cost_with_ids() {
        let pair = [Conversation::generate(40, 7), Conversation::generate(40, 8)];
        let candidate = &Candidate::comparison()[1];
        let simulation = Simulation::new("claude-sonnet-4-6");
        let run = |sessions| simulation.run_interleaved(&pair, candidate, sessions);
        let named = run(Sessions::Named).await.unwrap();
        let unnamed = run(Sessions::Unnamed).await.unwrap();
        let shared = run(Sessions::Shared).await.unwrap();
        assert_eq!(named, unnamed);
        // Moving the cut rewrites the cache after the system prompt: a part of all writes.
        assert!(named.cut_moves > 0);
        assert!(named.cut_move_write_tokens > 0);
        assert!(named.cut_move_write_tokens < named.cache_write_tokens);
        // One session for both: each conversation's cut is the other's, so neither keeps
        // one, and the cache is written again far more often.
        assert!(shared.cut_moves > named.cut_moves, "{shared:?} {named:?}");
        assert!(
            shared.cost_usd > named.cost_usd * 1.2,
            "{shared:?} {named:?}"
        );
    }

    #[test]
    fn per_turn_calls_keep_the_rounds_time() {
        let conv = Conversation::from_transcript(
            vec![
                Message::user("a"),
                Message::assistant("round 1"),
                Message::assistant("answer"),
                Message::user("b"),
                Message::assistant("answer"),
            ],
            Vec::new(),
        );
        let s = |secs| Duration::from_secs(secs);
        // Turn 1 calls at 0 and 15 s; turn 2 at 15 + 60.
        assert_eq!(
            schedule(&conv, Calls::PerRound),
            [(1, s(0)), (2, s(15)), (4, s(75))]
        );
        assert_eq!(schedule(&conv, Calls::PerTurn), [(2, s(15)), (4, s(75))]);
    }
}
