//! Reading the request body and the policy file, shared by the commands.

use std::io::Read;
use std::path::Path;

use llm_context::openai::body::{BodyContext, request_from_body};
use llm_context::{ChatRequest, ContextPolicy, load_policy};

use super::Exit;

/// Reads the request body from a file, or from stdin for `-` or no argument.
fn read_body(path: Option<&Path>) -> Result<serde_json::Value, Exit> {
    let (text, source) = match path.filter(|p| *p != Path::new("-")) {
        None => (read_stdin()?, "stdin".to_owned()),
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

/// The policy of `--policy FILE`, or the default.
pub(crate) fn policy(path: Option<&Path>) -> Result<ContextPolicy, Exit> {
    match path {
        Some(path) => load_policy(path).map_err(|e| Exit::bad_input(e.to_string())),
        None => Ok(ContextPolicy::default()),
    }
}

/// The request of a Chat Completions body read from `path` (or stdin), with what is
/// needed to write the prepared request back as a body.
pub(crate) fn request(path: Option<&Path>) -> Result<(ChatRequest, BodyContext), Exit> {
    let body = read_body(path)?;
    request_from_body(&body).map_err(|e| Exit::bad_input(format!("bad request body: {e}")))
}
