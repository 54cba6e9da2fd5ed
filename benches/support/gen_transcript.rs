//! Transcripts from the project's seeded generator, `benches/support/gen_transcript.py`:
//! OpenAI chat messages with multi-line JSON, logs and source code in the tool results,
//! quotes, backslashes and non-ASCII (accented Latin, Greek, Cyrillic, CJK, Arabic,
//! emoji), as real agents produce.
//!
//! The generator runs once per set of arguments; its output is kept under the target
//! directory, keyed by the arguments and the script's contents, so later runs (and the
//! other benchmarks of a run) read the file instead of running Python again.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use llm_context::wire::chat_completions::body::request_from_str;
use llm_context::{ChatRequest, Role, ToolSpec};
use serde_json::json;

/// The generator, in this repository.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/benches/support/gen_transcript.py"
);

/// The arguments of the reference run, without `--messages` / `--turns`: seed 1, another
/// tool round with probability 0.6, large results of about 8,000 characters (one in
/// seven or so, ±20%), OpenAI messages as a JSON list.
pub(crate) const REFERENCE: [&str; 8] = [
    "--seed",
    "1",
    "--tool-ratio",
    "0.6",
    "--big-result-chars",
    "8000",
    "--format",
    "messages",
];

/// The generator's output for `args` (a JSON list of OpenAI chat messages), from the
/// cache when it has been made before.
pub(crate) fn generate(args: &[&str]) -> String {
    let script = std::fs::read(SCRIPT).unwrap_or_else(|e| panic!("reading {SCRIPT}: {e}"));
    let cache = cache_path(&script, args);
    if let Ok(text) = std::fs::read_to_string(&cache) {
        return text;
    }
    let output = match Command::new("python3").arg(SCRIPT).args(args).output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "python3 was not found: the realistic benchmarks generate their transcripts \
             with benches/support/gen_transcript.py (Python 3, standard library only). \
             Install Python 3, or run only the ascii_* benchmarks."
        ),
        Err(e) => panic!("running python3 {SCRIPT}: {e}"),
    };
    assert!(
        output.status.success(),
        "python3 {SCRIPT} {} failed ({}): {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("the generator writes UTF-8");
    // Written whole, then renamed: a run stopped halfway leaves no truncated cache.
    let partial = cache.with_extension("partial");
    std::fs::create_dir_all(cache.parent().unwrap()).expect("creating the transcript cache");
    std::fs::write(&partial, &text).expect("writing the transcript cache");
    std::fs::rename(&partial, &cache).expect("writing the transcript cache");
    text
}

/// Where the output for `args` is kept: the benchmarks' scratch directory under the
/// target directory, one file per script version and arguments.
fn cache_path(script: &[u8], args: &[&str]) -> PathBuf {
    let name: String = args
        .join("_")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gen_transcript")
        .join(format!("{:016x}{name}.json", fnv1a(script)))
}

/// FNV-1a: a change to the script is a new cache file (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The request of a generated transcript: its messages read as an OpenAI Chat
/// Completions body by the crate's own reader, and a definition for each tool the
/// transcript calls.
pub(crate) fn request(messages_json: &str) -> ChatRequest {
    let body = format!(
        r#"{{"model":"bench","messages":{}}}"#,
        messages_json.trim_end()
    );
    let (request, _) = request_from_str(&body).expect("the generator writes OpenAI messages");
    let mut names: Vec<&str> = request
        .messages
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let tools = names
        .iter()
        .map(|&name| {
            ToolSpec::new(
                name,
                format!("The agent's {name} tool."),
                json!({"type": "object"}),
            )
        })
        .collect();
    request.with_tools(tools)
}

/// The generated transcript of `messages` messages (reference arguments).
pub(crate) fn with_messages(messages: usize) -> ChatRequest {
    let n = messages.to_string();
    let mut args = vec!["--messages", &n];
    args.extend(REFERENCE);
    let req = request(&generate(&args));
    assert_eq!(req.messages.len(), messages);
    req
}

/// The generated transcript of `turns` whole user turns (reference arguments). With the
/// same seed it starts with the same messages as [`with_messages`]: the generator draws
/// turn after turn from one random stream and `--messages` only stops it early.
pub(crate) fn with_turns(turns: usize) -> ChatRequest {
    let n = turns.to_string();
    let mut args = vec!["--turns", &n];
    args.extend(REFERENCE);
    request(&generate(&args))
}

/// Where each user turn starts: the indices of the user messages.
pub(crate) fn user_turns(req: &ChatRequest) -> Vec<usize> {
    req.messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User)
        .map(|(i, _)| i)
        .collect()
}
