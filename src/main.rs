//! `llm-context`: inspect a context policy against a real transcript.
//!
//! ```text
//! llm-context prepare [--policy FILE] [--window N] [--json] [REQUEST.json | -]
//! llm-context send --provider openai|anthropic [--policy FILE] [--catalog FILE] [--tenant T]
//!     [--session S] [--max-retries N] [--timeout SECONDS] [--redis URL] [--stream]
//!     [REQUEST.json | -]
//! llm-context simulate [--policy FILE]... [--model M] [--calls per-turn|per-round] …
//! llm-context serve [--listen 127.0.0.1:8080] [--policy FILE] [--drain-timeout SECONDS]
//! ```
//!
//! Exit codes: 0 done, 1 an internal failure, 2 bad input (a one-line message on
//! stderr), 3 the request cannot fit (`context_limit`), 4 (`send`) the provider failed.
#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
