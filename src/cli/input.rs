//! Reading the request body and the policy file.

use std::io::Read;
use std::path::Path;

use llm_context::ContextPolicy;

use super::Exit;

/// Reads the request body from a file, or from stdin for `-` or no argument.
pub(crate) fn read_body(path: Option<&Path>) -> Result<serde_json::Value, Exit> {
    let (text, source) = match path {
        None => (read_stdin()?, "stdin".to_owned()),
        Some(p) if p == Path::new("-") => (read_stdin()?, "stdin".to_owned()),
        Some(p) => (
            std::fs::read_to_string(p)
                .map_err(|e| Exit::bad_input(format!("cannot read {}: {e}", p.display())))?,
            p.display().to_string(),
        ),
    };
    serde_json::from_str(&text)
        .map_err(|e| Exit::bad_input(format!("{source} is not valid JSON: {e}")))
}

fn read_stdin() -> Result<String, Exit> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| Exit::bad_input(format!("cannot read stdin: {e}")))?;
    Ok(text)
}

/// Reads a policy file: JSON or TOML by extension, else whichever parses.
pub(crate) fn read_policy(path: &Path) -> Result<ContextPolicy, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::bad_input(format!("cannot read policy {}: {e}", path.display())))?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let parsed = match ext.as_deref() {
        Some("json") => ContextPolicy::from_json(&text),
        Some("toml") => ContextPolicy::from_toml(&text),
        _ if text.trim_start().starts_with('{') => ContextPolicy::from_json(&text),
        _ => ContextPolicy::from_toml(&text),
    };
    parsed.map_err(|e| Exit::bad_input(format!("{}: {e}", path.display())))
}
