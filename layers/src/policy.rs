//! `ContextPolicy`: how much the model may see, and what to give up first.
//!
//! ```
//! use llm_context_layers::ContextPolicy;
//!
//! let policy = ContextPolicy::default().with_max_context_tokens(16_000).with_reserve_tokens(2_000);
//! assert_eq!(policy.prompt_allowance(None), 14_000);
//! policy.validate().unwrap();
//!
//! // Unset max_context_tokens falls back to the model's window, then to 32,000.
//! assert_eq!(ContextPolicy::default().effective_max_context_tokens(Some(200_000)), 200_000);
//! assert_eq!(ContextPolicy::default().effective_max_context_tokens(None), 32_000);
//!
//! // Policies are files too; unknown fields are refused.
//! let p = ContextPolicy::from_toml("max_context_tokens = 8000\npreserve_recent = 3").unwrap();
//! assert_eq!(p.preserve_recent, 3);
//! // `max_tokens`, the field's name before 0.1.0, still loads.
//! let old = ContextPolicy::from_toml("max_tokens = 8000").unwrap();
//! assert_eq!(old.max_context_tokens, Some(8_000));
//! assert!(ContextPolicy::from_json(r#"{"max_tokenz": 1}"#).is_err());
//! ```

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::executor::Executor;
use crate::thinking::ThinkingMismatch;

/// The default ceiling when neither `max_context_tokens` nor the model's window is known.
pub const DEFAULT_MAX_CONTEXT_TOKENS: usize = 32_000;

/// What the model gets to see.
///
/// How many tokens may be sent and how to get there: the window, the reserve, the turns
/// and tool results that are protected, the offload thresholds, plus how many
/// newest tool results are never cleared, whether clearing runs before pruning, and tools
/// whose results are never cleared. Build with [`Default`] and the `with_*` setters, or
/// read one from JSON or TOML; call [`validate`](Self::validate) (the layers do) before use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ContextPolicy {
    /// Total context ceiling, including the reserved output. `None`: the model's context
    /// window, otherwise [`DEFAULT_MAX_CONTEXT_TOKENS`]. Policy files may still call it
    /// `max_tokens`, its name before 0.1.0.
    #[serde(alias = "max_tokens", skip_serializing_if = "Option::is_none")]
    pub max_context_tokens: Option<usize>,
    /// The model's context window, when known (the `--window` of the CLI). Used when
    /// `max_context_tokens` is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<usize>,
    /// Tokens withheld from the prompt for the model's output. This does not change the
    /// provider's output limit; set that separately.
    pub reserve_tokens: usize,
    /// The newest user turns that are never pruned.
    pub preserve_recent: usize,
    /// The newest tool results that are never cleared. `None`: `preserve_recent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_tool_results: Option<usize>,
    /// Clear old tool results before dropping whole turns (keeps more of the
    /// conversation, loses detail of old observations). Default `false`: prune
    /// turns first.
    pub clear_before_prune: bool,
    /// Tools whose results are never cleared (for example a `plan` or `memory` tool).
    pub never_clear: BTreeSet<String>,
    /// Tool results longer than this many characters are offloaded; also the preview
    /// length.
    pub tool_result_max_chars: usize,
    /// The most artifacts kept per session by the default store. Artifacts the session's
    /// latest request refers to are kept even past it (so no preview or stub points at
    /// nothing); `max_artifact_bytes` bounds those. Default 32.
    pub max_artifacts: usize,
    /// The most bytes of artifact text one request may refer to (its previews and the stubs
    /// naming an artifact). Past it, the oldest of them are cleared with a stub naming no
    /// artifact, which says why, so the store never has to evict an artifact a request
    /// still names. Default 32 MiB.
    pub max_artifact_bytes: usize,
    /// The most characters kept per artifact; longer ones are marked truncated.
    pub artifact_max_chars: usize,
    /// Cache-aware pruning (see [`cut`](crate::fit::cut)): when whole turns must go, prune until
    /// the request is at or below this many tokens rather than just under the allowance,
    /// and keep that cut on the session's later requests while they fit. `None` (the
    /// default): prune the minimum each time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_water_tokens: Option<usize>,
    /// Clearing in steps: once old tool results must be cleared, clear at least this many
    /// tokens' worth (oldest first) rather than just enough, and on the session's later
    /// requests clear the same results again while the rest fits, so the cleared region
    /// stays put for many turns instead of growing (and rewriting the provider's cached
    /// prefix) on every one. The region's end is remembered per session with the cut (see
    /// [`Cuts`](crate::Cuts)). `None` (the default): clear the minimum each time. The same
    /// knob as Anthropic's context-editing `clear_at_least`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_at_least_tokens: Option<usize>,
    /// Also replace the arguments of the calls whose results are cleared with a small
    /// stub (`{"cleared": true}`), as Anthropic's and LangChain's editors can: long tool
    /// inputs (a file written, a patch) go with their outputs. The plan does not count on
    /// the tokens this frees; the report's `after_tokens` does. Default `false`.
    pub clear_tool_inputs: bool,
    /// Repair broken tool pairing before planning (see [`pairing`](crate::fit::pairing)):
    /// a call with no result gets one saying none was recorded, a result answering no
    /// call is dropped, and [`PreparationReport::repaired`](crate::PreparationReport::repaired)
    /// counts both. `false` refuses such a request with a
    /// [`PairingError`](crate::PairingError) instead. Default `true`: providers refuse
    /// the broken form with a 400.
    pub repair_pairing: bool,
    /// Who edits the context ([`Executor`]): `auto` (the default) chooses per request,
    /// `local` runs the stack's steps, `delegate` has the provider clear where it can,
    /// `off` sends every request as it came. See [`executor`](crate::executor).
    pub executor: Executor,
    /// On a model that binds thinking, who leaves out a signed thinking block whose
    /// prefix the stack changed: `omit` (the default) the stack, from the start of the
    /// history; `drop_block` the provider, asked to with `thinking.block_binding` (see
    /// [`ThinkingMismatch`]).
    pub thinking_mismatch: ThinkingMismatch,
    /// What a proxy keeping a ledger (`llm-context serve`) does with a session whose
    /// newest requests cost more, by the provider's usage, than sending them unchanged:
    /// `off` (the default) nothing but flag it; `pass-through` stops editing it, except
    /// what the window forces ([`guarded`](Self::guarded)), until the ledger shows
    /// editing pays again.
    pub guard: Guard,
}

/// See [`ContextPolicy::guard`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Guard {
    /// A session costlier than pass-through is flagged, and edited as before.
    #[default]
    Off,
    /// A session costlier than pass-through is edited only where the window forces it.
    PassThrough,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            max_context_tokens: None,
            context_window: None,
            reserve_tokens: 2_048,
            preserve_recent: 2,
            preserve_tool_results: None,
            clear_before_prune: false,
            never_clear: BTreeSet::new(),
            tool_result_max_chars: 6_000,
            max_artifacts: 32,
            max_artifact_bytes: 32 << 20,
            artifact_max_chars: 1_000_000,
            low_water_tokens: None,
            clear_at_least_tokens: None,
            clear_tool_inputs: false,
            repair_pairing: true,
            executor: Executor::Auto,
            thinking_mismatch: ThinkingMismatch::Omit,
            guard: Guard::Off,
        }
    }
}

/// A policy value that cannot work. The message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A field has a value that cannot work.
    #[error("invalid context policy: `{field}` {reason}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The policy text could not be parsed.
    #[error("invalid context policy: {0}")]
    Parse(String),
}

impl PolicyError {
    fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        PolicyError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// The field at fault, when the error is about one field.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            PolicyError::Invalid { field, .. } => Some(field),
            PolicyError::Parse(_) => None,
        }
    }
}

impl ContextPolicy {
    /// Sets `max_context_tokens`.
    #[must_use]
    pub fn with_max_context_tokens(mut self, n: usize) -> Self {
        self.max_context_tokens = Some(n);
        self
    }

    /// Sets the model's context window.
    #[must_use]
    pub fn with_context_window(mut self, n: usize) -> Self {
        self.context_window = Some(n);
        self
    }

    /// Sets `reserve_tokens`.
    #[must_use]
    pub fn with_reserve_tokens(mut self, n: usize) -> Self {
        self.reserve_tokens = n;
        self
    }

    /// Sets `preserve_recent`.
    #[must_use]
    pub fn with_preserve_recent(mut self, n: usize) -> Self {
        self.preserve_recent = n;
        self
    }

    /// Sets how many newest tool results are never cleared.
    #[must_use]
    pub fn with_preserve_tool_results(mut self, n: usize) -> Self {
        self.preserve_tool_results = Some(n);
        self
    }

    /// Clears old tool results before pruning whole turns.
    #[must_use]
    pub fn with_clear_before_prune(mut self, yes: bool) -> Self {
        self.clear_before_prune = yes;
        self
    }

    /// Repairs broken tool pairing (`true`, the default) or refuses it (`false`).
    #[must_use]
    pub fn with_repair_pairing(mut self, yes: bool) -> Self {
        self.repair_pairing = yes;
        self
    }

    /// Adds a tool whose results are never cleared.
    #[must_use]
    pub fn with_never_clear(mut self, tool: impl Into<String>) -> Self {
        self.never_clear.insert(tool.into());
        self
    }

    /// Sets `tool_result_max_chars`.
    #[must_use]
    pub fn with_tool_result_max_chars(mut self, n: usize) -> Self {
        self.tool_result_max_chars = n;
        self
    }

    /// Sets `max_artifacts`.
    #[must_use]
    pub fn with_max_artifacts(mut self, n: usize) -> Self {
        self.max_artifacts = n;
        self
    }

    /// Sets `max_artifact_bytes`.
    #[must_use]
    pub fn with_max_artifact_bytes(mut self, n: usize) -> Self {
        self.max_artifact_bytes = n;
        self
    }

    /// Sets `artifact_max_chars`.
    #[must_use]
    pub fn with_artifact_max_chars(mut self, n: usize) -> Self {
        self.artifact_max_chars = n;
        self
    }

    /// Sets `low_water_tokens`: prune to this many tokens when pruning, and keep the cut.
    #[must_use]
    pub fn with_low_water_tokens(mut self, n: usize) -> Self {
        self.low_water_tokens = Some(n);
        self
    }

    /// Sets `clear_at_least_tokens`: clear at least this much once clearing must happen,
    /// and keep the cleared region.
    #[must_use]
    pub fn with_clear_at_least_tokens(mut self, n: usize) -> Self {
        self.clear_at_least_tokens = Some(n);
        self
    }

    /// Sets `clear_tool_inputs`: stub the arguments of calls whose results are cleared.
    #[must_use]
    pub fn with_clear_tool_inputs(mut self, on: bool) -> Self {
        self.clear_tool_inputs = on;
        self
    }

    /// Sets who edits the context (see [`executor`](crate::executor)).
    #[must_use]
    pub fn with_executor(mut self, executor: Executor) -> Self {
        self.executor = executor;
        self
    }

    /// Sets who leaves out a thinking block whose prefix changed (see
    /// [`ThinkingMismatch`]).
    #[must_use]
    pub fn with_thinking_mismatch(mut self, who: ThinkingMismatch) -> Self {
        self.thinking_mismatch = who;
        self
    }

    /// Sets [`guard`](Self::guard).
    #[must_use]
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = guard;
        self
    }

    /// This policy doing only what the window forces: the one a guarded session is
    /// prepared under. Nothing is offloaded (`tool_result_max_chars` unbounded), pruning and clearing take the minimum (no
    /// low-water mark, no clearing in steps, no tool inputs cleared), and the stack's own
    /// steps run (no provider edit is asked for: the provider's clearing would be an
    /// edit the window did not force). What is protected, and the window, stay.
    #[must_use]
    pub fn guarded(&self) -> ContextPolicy {
        ContextPolicy {
            // No result is long enough to offload (an artifact must hold its preview, so
            // its bound goes with it; with nothing offloaded it bounds nothing).
            tool_result_max_chars: usize::MAX,
            artifact_max_chars: usize::MAX,
            low_water_tokens: None,
            clear_at_least_tokens: None,
            clear_tool_inputs: false,
            executor: Executor::Local,
            guard: Guard::Off,
            ..self.clone()
        }
    }

    /// The level pruning aims for: `low_water_tokens` when set (never above the
    /// allowance), else the allowance.
    pub fn prune_target(&self, model_window: Option<usize>) -> usize {
        let allowance = self.prompt_allowance(model_window);
        self.low_water_tokens
            .map_or(allowance, |lw| lw.min(allowance))
    }

    /// How many newest tool results are never cleared.
    pub fn protected_tool_results(&self) -> usize {
        self.preserve_tool_results.unwrap_or(self.preserve_recent)
    }

    /// The ceiling: `max_context_tokens`, else the policy's `context_window`, else `model_window`
    /// (the model's window from a catalog), else 32,000.
    pub fn effective_max_context_tokens(&self, model_window: Option<usize>) -> usize {
        self.max_context_tokens
            .or(self.context_window)
            .or(model_window)
            .unwrap_or(DEFAULT_MAX_CONTEXT_TOKENS)
    }

    /// The prompt allowance: the ceiling minus `reserve_tokens` (0 if the reserve is
    /// larger; [`validate`](Self::validate) refuses such a policy).
    pub fn prompt_allowance(&self, model_window: Option<usize>) -> usize {
        self.effective_max_context_tokens(model_window)
            .saturating_sub(self.reserve_tokens)
    }

    /// Checks every field; the error names the first field that cannot work.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let counts: [(&'static str, Option<usize>); 10] = [
            ("max_context_tokens", self.max_context_tokens),
            ("context_window", self.context_window),
            ("reserve_tokens", Some(self.reserve_tokens)),
            ("preserve_recent", Some(self.preserve_recent)),
            ("preserve_tool_results", self.preserve_tool_results),
            ("tool_result_max_chars", Some(self.tool_result_max_chars)),
            ("max_artifacts", Some(self.max_artifacts)),
            ("max_artifact_bytes", Some(self.max_artifact_bytes)),
            ("low_water_tokens", self.low_water_tokens),
            ("clear_at_least_tokens", self.clear_at_least_tokens),
        ];
        for (field, value) in counts {
            if value == Some(0) {
                return Err(PolicyError::invalid(field, "must be at least 1"));
            }
        }
        if self.artifact_max_chars == 0 {
            return Err(PolicyError::invalid(
                "artifact_max_chars",
                "must be at least 1",
            ));
        }
        if let Some(max) = self.max_context_tokens
            && max <= self.reserve_tokens
        {
            return Err(PolicyError::invalid(
                "max_context_tokens",
                format!(
                    "({max}) must be greater than reserve_tokens ({}), or no prompt fits",
                    self.reserve_tokens
                ),
            ));
        }
        if let Some(window) = self.context_window
            && window <= self.reserve_tokens
        {
            return Err(PolicyError::invalid(
                "context_window",
                format!(
                    "({window}) is at or below reserve_tokens ({}), so no prompt fits",
                    self.reserve_tokens
                ),
            ));
        }
        if let (Some(lw), Some(max)) = (self.low_water_tokens, self.max_context_tokens)
            && lw >= max.saturating_sub(self.reserve_tokens)
        {
            return Err(PolicyError::invalid(
                "low_water_tokens",
                format!(
                    "({lw}) must be below the prompt allowance, max_context_tokens - reserve_tokens ({}), or pruning makes no room",
                    max.saturating_sub(self.reserve_tokens)
                ),
            ));
        }
        if self.artifact_max_chars < self.tool_result_max_chars {
            return Err(PolicyError::invalid(
                "artifact_max_chars",
                format!(
                    "({}) is smaller than tool_result_max_chars ({}): an artifact must hold at least its preview",
                    self.artifact_max_chars, self.tool_result_max_chars
                ),
            ));
        }
        Ok(())
    }

    /// Checks the policy against a model window learned at run time (a window at or below
    /// the reserve is an error, never a silent default).
    pub fn validate_window(&self, model_window: usize) -> Result<(), PolicyError> {
        if self.max_context_tokens.is_none()
            && self.context_window.is_none()
            && model_window <= self.reserve_tokens
        {
            return Err(PolicyError::invalid(
                "context_window",
                format!(
                    "the model's window ({model_window}) is at or below reserve_tokens ({})",
                    self.reserve_tokens
                ),
            ));
        }
        Ok(())
    }

    /// Reads and validates a policy from JSON.
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        let p: Self = serde_json::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        p.validate()?;
        Ok(p)
    }

    /// Reads and validates a policy from TOML.
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        let p: Self = toml::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        p.validate()?;
        Ok(p)
    }

    /// The policy as TOML. Fails only for a count above `i64::MAX`, which TOML integers
    /// cannot hold.
    pub fn to_toml(&self) -> Result<String, PolicyError> {
        toml::to_string(self).map_err(|e| PolicyError::Parse(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_protolinks() {
        let p = ContextPolicy::default();
        assert_eq!(p.max_context_tokens, None);
        assert_eq!(p.reserve_tokens, 2_048);
        assert_eq!(p.preserve_recent, 2);
        assert_eq!(p.protected_tool_results(), 2);
        assert_eq!(p.tool_result_max_chars, 6_000);
        assert_eq!(p.max_artifacts, 32);
        assert_eq!(p.artifact_max_chars, 1_000_000);
        assert_eq!(p.prompt_allowance(None), 32_000 - 2_048);
        p.validate().unwrap();
    }

    #[test]
    fn the_guard_reads_from_a_policy_file_and_its_guarded_form_only_does_what_the_window_forces() {
        let p = ContextPolicy::from_toml(
            "guard = \"pass-through\"\nlow_water_tokens = 20000\nmax_context_tokens = 64000\n\
             clear_at_least_tokens = 5000\nexecutor = \"delegate\"\npreserve_recent = 4",
        )
        .unwrap();
        assert_eq!(p.guard, Guard::PassThrough);
        assert_eq!(ContextPolicy::default().guard, Guard::Off);
        let g = p.guarded();
        g.validate().unwrap();
        assert_eq!(g.guard, Guard::Off);
        assert_eq!(g.executor, Executor::Local);
        assert_eq!((g.low_water_tokens, g.clear_at_least_tokens), (None, None));
        assert_eq!(g.tool_result_max_chars, usize::MAX);
        // What is protected, and the window, stay.
        assert_eq!((g.preserve_recent, g.max_context_tokens), (4, Some(64_000)));
        assert!(ContextPolicy::from_toml("guard = \"sometimes\"").is_err());
        assert_eq!(ContextPolicy::from_toml(&p.to_toml().unwrap()).unwrap(), p);
    }

    #[test]
    fn the_low_water_mark_reads_from_toml_and_stays_under_the_allowance() {
        // `max_tokens`: the ceiling's name before 0.1.0, read still.
        let p = ContextPolicy::from_toml("max_tokens = 128000\nlow_water_tokens = 80000").unwrap();
        assert_eq!(p.max_context_tokens, Some(128_000));
        let json = ContextPolicy::from_json(r#"{"max_tokens": 128000, "low_water_tokens": 80000}"#);
        assert_eq!(json.unwrap(), p);
        assert!(p.to_toml().unwrap().contains("max_context_tokens = 128000"));
        assert_eq!(p.low_water_tokens, Some(80_000));
        assert_eq!(p.prune_target(None), 80_000);
        assert_eq!(ContextPolicy::default().prune_target(None), 32_000 - 2_048);
        // With the ceiling from a small model window, never above the allowance.
        let p = ContextPolicy::default().with_low_water_tokens(50_000);
        assert_eq!(p.prune_target(Some(16_000)), 16_000 - 2_048);
        assert_eq!(ContextPolicy::from_toml(&p.to_toml().unwrap()).unwrap(), p);
    }

    #[test]
    fn validation_names_the_field() {
        let cases = [
            (
                ContextPolicy::default().with_max_context_tokens(0),
                "max_context_tokens",
            ),
            (
                ContextPolicy::default().with_context_window(0),
                "context_window",
            ),
            (
                ContextPolicy::default().with_context_window(2_048),
                "context_window",
            ),
            (
                ContextPolicy::default().with_max_context_tokens(1_000),
                "max_context_tokens",
            ),
            (
                ContextPolicy::default().with_preserve_recent(0),
                "preserve_recent",
            ),
            (
                ContextPolicy::default().with_preserve_tool_results(0),
                "preserve_tool_results",
            ),
            (
                ContextPolicy::default().with_reserve_tokens(0),
                "reserve_tokens",
            ),
            (
                ContextPolicy::default().with_tool_result_max_chars(0),
                "tool_result_max_chars",
            ),
            (
                ContextPolicy::default().with_max_artifacts(0),
                "max_artifacts",
            ),
            (
                ContextPolicy::default().with_artifact_max_chars(10),
                "artifact_max_chars",
            ),
            (
                ContextPolicy::default().with_low_water_tokens(0),
                "low_water_tokens",
            ),
            (
                ContextPolicy::default()
                    .with_max_context_tokens(10_000)
                    .with_low_water_tokens(8_000),
                "low_water_tokens",
            ),
        ];
        assert!(
            ContextPolicy::default()
                .with_max_context_tokens(10_000)
                .with_low_water_tokens(7_000)
                .validate()
                .is_ok()
        );
        for (policy, field) in cases {
            let err = policy.validate().unwrap_err();
            assert_eq!(err.field(), Some(field), "{err}");
            assert!(err.to_string().contains(field), "{err}");
        }
        let err = ContextPolicy::default().validate_window(1_000).unwrap_err();
        assert_eq!(err.field(), Some("context_window"));
    }

    #[test]
    fn round_trips_json_and_toml() {
        let p = ContextPolicy::default()
            .with_max_context_tokens(16_000)
            .with_never_clear("plan")
            .with_clear_before_prune(true);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(ContextPolicy::from_json(&json).unwrap(), p);
        assert_eq!(ContextPolicy::from_toml(&p.to_toml().unwrap()).unwrap(), p);
        // TOML integers are i64: a larger count is an error, not a panic.
        assert!(
            ContextPolicy::default()
                .with_max_context_tokens(usize::MAX)
                .to_toml()
                .is_err()
        );
    }

    #[test]
    fn unknown_fields_are_errors() {
        let err = ContextPolicy::from_json(r#"{"reserve": 10}"#).unwrap_err();
        assert!(err.to_string().contains("reserve"), "{err}");
        assert!(ContextPolicy::from_toml("context_windw = 5").is_err());
    }
}
