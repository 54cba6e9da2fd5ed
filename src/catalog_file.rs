//! Reading policy and catalog files, JSON or TOML.

use std::path::Path;

use llm_context_layers::{Catalog, CatalogError, ContextPolicy, PolicyError};

/// The built-in catalog with the overrides of a JSON or TOML file (by extension, else
/// whichever the text looks like). See [`catalog`](crate::catalog) for the format; a
/// LiteLLM `model_prices_and_context_window.json` is read as well
/// ([`Catalog::with_litellm_json`]).
///
/// ```no_run
/// let catalog = llm_context::load_catalog("prices.toml")?;
/// println!("{:?}", catalog.get("claude-sonnet-4-6"));
/// # Ok::<(), llm_context::CatalogError>(())
/// ```
pub fn load_catalog(path: impl AsRef<Path>) -> Result<Catalog, CatalogError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CatalogError::Parse(format!("cannot read {}: {e}", path.display())))?;
    let builtin = Catalog::builtin();
    if is_json(path, &text) && Catalog::is_litellm_json(&text) {
        builtin.with_litellm_json(&text)
    } else if is_json(path, &text) {
        builtin.with_overrides_json(&text)
    } else {
        builtin.with_overrides_toml(&text)
    }
}

/// A [`ContextPolicy`] from a JSON or TOML file (by extension, else whichever the text
/// looks like), validated; the error names the file.
///
/// ```no_run
/// let policy = llm_context::load_policy("policy.toml")?;
/// println!("{:?}", policy.max_context_tokens);
/// # Ok::<(), llm_context::PolicyError>(())
/// ```
pub fn load_policy(path: impl AsRef<Path>) -> Result<ContextPolicy, PolicyError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|e| PolicyError::Parse(format!("cannot read policy {}: {e}", path.display())))?;
    let parsed = if is_json(path, &text) {
        ContextPolicy::from_json(&text)
    } else {
        ContextPolicy::from_toml(&text)
    };
    parsed.map_err(|e| PolicyError::Parse(format!("{}: {e}", path.display())))
}

/// JSON by extension (`.json` / `.toml`), else when the text opens an object.
fn is_json(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => true,
        Some(e) if e.eq_ignore_ascii_case("toml") => false,
        _ => text.trim_start().starts_with('{'),
    }
}
