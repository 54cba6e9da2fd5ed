//! Catalog overrides from JSON or TOML text.
//!
//! The file has one table, `models`, keyed by model id. Every field is optional and
//! replaces only itself, so a file can change one price and leave the rest built in:
//!
//! ```toml
//! [models."claude-sonnet-4-6"]
//! cache_min_tokens = 1024
//! [models."claude-sonnet-4-6".price]   # USD per million tokens
//! input = 3.0
//! output = 15.0
//! cache_read = 0.30
//! cache_write_5m = 3.75
//! cache_write_1h = 6.0
//! ```
//!
//! A model new to the catalog that gets a price must give at least `input` and
//! `output`; its cache reads and writes then default to the input price (no discount, no
//! surcharge), which is right for servers without prompt caching.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Catalog, ModelInfo, Price, Provider};

/// A catalog file that cannot be used. The message names the model and field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The text is not valid JSON or TOML of the catalog's shape.
    #[error("invalid model catalog: {0}")]
    Parse(String),
    /// A value cannot work.
    #[error("invalid model catalog: model `{model}`: `{field}` {reason}")]
    Invalid {
        /// The model id.
        model: String,
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OverrideFile {
    #[serde(default)]
    models: BTreeMap<String, ModelOverride>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelOverride {
    pub(super) provider: Option<Provider>,
    pub(super) context_window: Option<usize>,
    pub(super) cache_min_tokens: Option<usize>,
    pub(super) price: Option<PriceOverride>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PriceOverride {
    pub(super) input: Option<f64>,
    pub(super) output: Option<f64>,
    pub(super) cache_read: Option<f64>,
    pub(super) cache_write_5m: Option<f64>,
    pub(super) cache_write_1h: Option<f64>,
}

impl Catalog {
    /// This catalog with the overrides of a JSON text applied.
    pub fn with_overrides_json(&self, text: &str) -> Result<Catalog, CatalogError> {
        let file: OverrideFile =
            serde_json::from_str(text).map_err(|e| CatalogError::Parse(e.to_string()))?;
        self.apply(file)
    }

    /// This catalog with the overrides of a TOML text applied.
    pub fn with_overrides_toml(&self, text: &str) -> Result<Catalog, CatalogError> {
        let file: OverrideFile =
            toml::from_str(text).map_err(|e| CatalogError::Parse(e.to_string()))?;
        self.apply(file)
    }

    /// A catalog with only the models of a JSON text.
    pub fn from_json(text: &str) -> Result<Catalog, CatalogError> {
        Catalog::empty().with_overrides_json(text)
    }

    /// A catalog with only the models of a TOML text.
    pub fn from_toml(text: &str) -> Result<Catalog, CatalogError> {
        Catalog::empty().with_overrides_toml(text)
    }

    fn apply(&self, file: OverrideFile) -> Result<Catalog, CatalogError> {
        let mut out = self.clone();
        for (id, o) in file.models {
            let entry = out.models.entry(id.clone()).or_default();
            merge(&id, entry, o)?;
        }
        Ok(out)
    }
}

pub(super) fn merge(id: &str, info: &mut ModelInfo, o: ModelOverride) -> Result<(), CatalogError> {
    let invalid = |field, reason: &str| CatalogError::Invalid {
        model: id.to_owned(),
        field,
        reason: reason.to_owned(),
    };
    if o.provider.is_some() {
        info.provider = o.provider;
    }
    if let Some(w) = o.context_window {
        if w == 0 {
            return Err(invalid("context_window", "must be greater than 0"));
        }
        info.context_window = Some(w);
    }
    if o.cache_min_tokens.is_some() {
        info.cache_min_tokens = o.cache_min_tokens;
    }
    if let Some(p) = o.price {
        let base = match info.price {
            Some(base) => base,
            None => {
                let input = p.input.ok_or_else(|| {
                    invalid("price.input", "is required for a model new to the catalog")
                })?;
                let output = p.output.ok_or_else(|| {
                    invalid("price.output", "is required for a model new to the catalog")
                })?;
                Price::new(input, output, input, input, input)
            }
        };
        let price = Price {
            input: p.input.unwrap_or(base.input),
            output: p.output.unwrap_or(base.output),
            cache_read: p.cache_read.unwrap_or(base.cache_read),
            cache_write_5m: p.cache_write_5m.unwrap_or(base.cache_write_5m),
            cache_write_1h: p.cache_write_1h.unwrap_or(base.cache_write_1h),
        };
        for (field, v) in [
            ("price.input", price.input),
            ("price.output", price.output),
            ("price.cache_read", price.cache_read),
            ("price.cache_write_5m", price.cache_write_5m),
            ("price.cache_write_1h", price.cache_write_1h),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(invalid(field, "must be a finite number ≥ 0"));
            }
        }
        info.price = Some(price);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_override_keeps_the_rest() {
        let c = Catalog::builtin()
            .with_overrides_json(r#"{"models": {"gpt-5.4": {"price": {"output": 20}}}}"#)
            .unwrap();
        let p = c.get("gpt-5.4").unwrap().price.unwrap();
        assert_eq!(p.output, 20.0);
        assert_eq!(p.input, 2.5);
        assert_eq!(c.context_window("gpt-5.4"), Some(272_000));
    }

    #[test]
    fn new_model_prices_default_to_input() {
        let c = Catalog::from_toml("[models.local.price]\ninput = 1\noutput = 2").unwrap();
        let p = c.get("local").unwrap().price.unwrap();
        assert_eq!(
            (p.cache_read, p.cache_write_5m, p.cache_write_1h),
            (1.0, 1.0, 1.0)
        );
        let err = Catalog::from_toml("[models.local.price]\noutput = 2").unwrap_err();
        assert!(err.to_string().contains("price.input"), "{err}");
    }

    #[test]
    fn refuses_bad_values_and_unknown_fields() {
        let e = Catalog::from_json(r#"{"models": {"m": {"price": {"input": -1, "output": 1}}}}"#)
            .unwrap_err();
        assert!(
            matches!(
                e,
                CatalogError::Invalid {
                    field: "price.input",
                    ..
                }
            ),
            "{e}"
        );
        assert!(Catalog::from_json(r#"{"models": {"m": {"windo": 1}}}"#).is_err());
        assert!(Catalog::from_json(r#"{"modelz": {}}"#).is_err());
        assert!(Catalog::from_json(r#"{"models": {"m": {"context_window": 0}}}"#).is_err());
        assert!(Catalog::from_toml("not toml [").is_err());
    }
}
