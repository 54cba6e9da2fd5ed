//! `llm-context`: inspect a context policy against a real transcript.
//!
//! ```text
//! llm-context prepare [--policy FILE] [--window N] [--json] [REQUEST.json | -]
//! ```
//!
//! Exit codes: 0 prepared, 2 bad input (a one-line message on stderr), 3 the request
//! cannot fit (`context_limit`).
#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
