//! LiteLLM's `model_prices_and_context_window.json` as catalog overrides: teams keep that
//! file up to date already, so the catalog reads it rather than asking for a copy. See
//! [`Catalog::with_litellm_json`].

use serde_json::{Map, Value};

use super::file::{ModelOverride, PriceOverride, merge};
use super::{Catalog, CatalogError, Provider};

impl Catalog {
    /// This catalog with the models of a LiteLLM price file applied over it, field by
    /// field.
    ///
    /// ```
    /// use llm_context_layers::Catalog;
    ///
    /// let text = r#"{
    ///   "sample_spec": {"max_input_tokens": "max input tokens, if the provider specifies it"},
    ///   "claude-sonnet-4-6": {
    ///     "max_input_tokens": 200000, "max_output_tokens": 64000,
    ///     "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
    ///     "cache_read_input_token_cost": 3e-07, "cache_creation_input_token_cost": 3.75e-06,
    ///     "litellm_provider": "anthropic", "mode": "chat"
    ///   },
    ///   "text-embedding-3-small": {"input_cost_per_token": 2e-08, "litellm_provider": "openai",
    ///                              "mode": "embedding"}
    /// }"#;
    /// let catalog = Catalog::builtin().with_litellm_json(text).unwrap();
    /// let price = catalog.get("claude-sonnet-4-6").unwrap().price.unwrap();
    /// assert!((price.input - 3.0).abs() < 1e-9); // USD per million tokens
    /// assert_eq!(catalog.context_window("claude-sonnet-4-6"), Some(200_000));
    /// assert!(catalog.get("text-embedding-3-small").is_none(), "chat models only");
    /// ```
    ///
    /// Each entry is a model id (as requests name it, `anthropic/…` prefixes included) with
    /// LiteLLM's fields, of which these are read: `mode` (only `chat` entries, or entries
    /// without a mode, are taken), `litellm_provider` (`openai` and `anthropic` set the
    /// provider; others leave it), `max_input_tokens` (else `max_tokens`) as the context
    /// window, and the per-token costs `input_cost_per_token`, `output_cost_per_token`,
    /// `cache_read_input_token_cost`, `cache_creation_input_token_cost` (5-minute writes) and
    /// `cache_creation_input_token_cost_above_1hr` (one-hour writes), turned into prices per
    /// million tokens. The `sample_spec` entry, fields it does not read and fields of the
    /// wrong type are skipped: the file is large, maintained by others, and gains fields. An
    /// entry without both an input and an output cost gets no price from it.
    pub fn with_litellm_json(&self, text: &str) -> Result<Catalog, CatalogError> {
        let file: Map<String, Value> = serde_json::from_str(text)
            .map_err(|e| CatalogError::Parse(format!("not a LiteLLM price file: {e}")))?;
        let mut out = self.clone();
        for (id, entry) in &file {
            let Some(entry) = entry.as_object() else {
                continue;
            };
            if id == "sample_spec" {
                continue;
            }
            let Some(o) = model(entry) else { continue };
            let info = out.models.entry(id.clone()).or_default();
            merge(id, info, o)?;
        }
        Ok(out)
    }

    /// Whether `text` looks like a LiteLLM price file rather than the catalog's own
    /// overrides (which have one `models` table): a JSON object whose entries carry
    /// LiteLLM's fields.
    pub fn is_litellm_json(text: &str) -> bool {
        let Ok(Value::Object(file)) = serde_json::from_str::<Value>(text) else {
            return false;
        };
        !file.contains_key("models")
            && file.values().filter_map(Value::as_object).any(|e| {
                e.contains_key("litellm_provider") || e.contains_key("input_cost_per_token")
            })
    }
}

/// What one entry says, as an override; `None` for an entry that is not a chat model.
fn model(entry: &Map<String, Value>) -> Option<ModelOverride> {
    match entry.get("mode").and_then(Value::as_str) {
        None | Some("chat") => {}
        Some(_) => return None,
    }
    let number = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite())
    };
    let per_million = |k: &str| number(k).map(|v| v * 1_000_000.0);
    let provider = match entry.get("litellm_provider").and_then(Value::as_str) {
        Some("openai") => Some(Provider::OpenAi),
        Some("anthropic") => Some(Provider::Anthropic),
        _ => None,
    };
    let window = number("max_input_tokens")
        .or_else(|| number("max_tokens"))
        .filter(|w| *w >= 1.0)
        .map(|w| w as usize);
    let price = match (
        per_million("input_cost_per_token"),
        per_million("output_cost_per_token"),
    ) {
        (Some(input), Some(output)) => {
            let write_5m = per_million("cache_creation_input_token_cost");
            Some(PriceOverride {
                input: Some(input),
                output: Some(output),
                cache_read: per_million("cache_read_input_token_cost"),
                cache_write_5m: write_5m,
                cache_write_1h: per_million("cache_creation_input_token_cost_above_1hr")
                    .or(write_5m),
            })
        }
        _ => None,
    };
    Some(ModelOverride {
        provider,
        context_window: window,
        cache_min_tokens: None,
        price,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Usage;

    /// Entries as LiteLLM's file writes them (its field names, its units, its odd ones).
    const FILE: &str = r#"{
      "sample_spec": {"max_tokens": "LEGACY parameter", "input_cost_per_token": 0.0,
                      "litellm_provider": "one of https://docs.litellm.ai/docs/providers",
                      "mode": "one of: chat, embedding, completion, image_generation"},
      "gpt-5.4": {"max_input_tokens": 272000, "max_output_tokens": 128000,
                  "input_cost_per_token": 3e-06, "output_cost_per_token": 1.8e-05,
                  "cache_read_input_token_cost": 3e-07, "litellm_provider": "openai",
                  "mode": "chat", "supports_vision": true},
      "my-local-llama": {"max_tokens": 32768, "input_cost_per_token": 1e-07,
                         "output_cost_per_token": 2e-07, "litellm_provider": "ollama"},
      "claude-opus-4-6": {"max_input_tokens": 200000, "input_cost_per_token": 5e-06,
                          "output_cost_per_token": 2.5e-05,
                          "cache_read_input_token_cost": 5e-07,
                          "cache_creation_input_token_cost": 6.25e-06,
                          "cache_creation_input_token_cost_above_1hr": 1e-05,
                          "litellm_provider": "anthropic", "mode": "chat"},
      "half-priced": {"input_cost_per_token": 1e-06, "litellm_provider": "openai", "mode": "chat"},
      "dall-e-3": {"output_cost_per_image": 0.04, "litellm_provider": "openai",
                   "mode": "image_generation"},
      "odd": {"max_input_tokens": "lots", "mode": "chat"}
    }"#;

    #[test]
    fn reads_chat_models_prices_windows_and_providers() {
        assert!(Catalog::is_litellm_json(FILE));
        assert!(!Catalog::is_litellm_json(r#"{"models": {}}"#));
        let c = Catalog::builtin().with_litellm_json(FILE).unwrap();
        // Over the built-in entry: its price replaced field by field, the window read.
        let gpt = c.get("gpt-5.4").unwrap();
        let p = gpt.price.unwrap();
        assert!((p.input - 3.0).abs() < 1e-9 && (p.output - 18.0).abs() < 1e-9);
        assert!((p.cache_read - 0.3).abs() < 1e-9);
        assert_eq!(gpt.context_window, Some(272_000));
        // A new model: the legacy `max_tokens` as its window, no provider it can call.
        let local = c.get("my-local-llama").unwrap();
        assert_eq!(local.context_window, Some(32_768));
        assert_eq!(local.provider, None);
        // One-hour writes have their own price.
        let opus = c.get("claude-opus-4-6").unwrap();
        assert_eq!(opus.provider, Some(Provider::Anthropic));
        let usage = Usage {
            cache_write_tokens: 1_000_000,
            cache_write_1h_tokens: 1_000_000,
            ..Usage::default()
        };
        assert!((c.cost("claude-opus-4-6", &usage).unwrap() - 10.0).abs() < 1e-9);
        // Not chat, the sample, no output price, a window of the wrong type: skipped.
        assert!(c.get("dall-e-3").is_none());
        assert!(c.get("sample_spec").is_none());
        assert!(c.get("half-priced").unwrap().price.is_none());
        assert_eq!(c.get("odd").unwrap().context_window, None);
    }

    #[test]
    fn a_file_that_is_not_json_is_a_parse_error() {
        let e = Catalog::builtin().with_litellm_json("[1, 2]").unwrap_err();
        assert!(e.to_string().contains("LiteLLM"), "{e}");
    }
}
