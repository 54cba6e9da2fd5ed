//! Reading a model catalog override file.

use std::path::Path;

use llm_context_layers::{Catalog, CatalogError};

/// The built-in catalog with the overrides of a JSON or TOML file (by extension, else
/// whichever the text looks like). See [`catalog`](crate::catalog) for the format.
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
    let json = match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => true,
        Some(e) if e.eq_ignore_ascii_case("toml") => false,
        _ => text.trim_start().starts_with('{'),
    };
    let builtin = Catalog::builtin();
    if json {
        builtin.with_overrides_json(&text)
    } else {
        builtin.with_overrides_toml(&text)
    }
}
