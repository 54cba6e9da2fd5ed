//! The command-line interface.

mod input;
#[cfg(all(feature = "serve", feature = "sqlite"))]
mod ledger;
#[cfg(feature = "otel")]
mod otel;
mod picture;
mod prepare;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod send;
#[cfg(feature = "serve")]
mod serve;
#[cfg(feature = "simulate")]
mod simulate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use llm_context::ContextLimitError;

/// Exit code for bad input: not JSON, wrong shape, invalid policy.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for a request that cannot fit.
pub(crate) const EXIT_CONTEXT_LIMIT: u8 = 3;
/// Exit code for a provider or network failure (after retries).
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) const EXIT_PROVIDER: u8 = 4;
/// A call that would cross its budget (`send --budget`); nothing was sent.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) const EXIT_BUDGET: u8 = 5;

#[derive(Parser, Debug)]
#[command(
    name = "llm-context",
    version,
    about = "Decide what an LLM sees: inspect a context policy against a real transcript, or send it through the whole stack to a provider."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Prepare an OpenAI Chat Completions request body under a policy and show what the
    /// model would see.
    Prepare(prepare::PrepareArgs),
    /// Send an OpenAI Chat Completions request body through the whole stack (context
    /// policy, cache-stable prefix, usage, retries) to OpenAI or Anthropic and print the
    /// normalised response and the report as JSON.
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    #[command(after_help = send::EXIT_CODES_HELP)]
    Send(send::SendArgs),
    /// Run a generated (or recorded) agent conversation through the real stack under each
    /// policy and print what it would cost against the provider's prompt cache.
    #[cfg(feature = "simulate")]
    Simulate(simulate::SimulateArgs),
    /// Serve the whole stack behind the OpenAI Chat Completions API (POST
    /// /v1/chat/completions, streaming or not): point any agent's base URL at it.
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
    /// Print a ledger kept by `serve --ledger sqlite:PATH`: per tenant and per session, the
    /// actual cost beside the modelled cost of sending the same requests unchanged.
    #[cfg(all(feature = "serve", feature = "sqlite"))]
    Ledger(ledger::LedgerArgs),
}

/// A failure that ends the command with an exit code.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Exit {
    pub(crate) fn bad_input(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_BAD_INPUT,
            message: message.into(),
        }
    }

    /// A failure of the tool itself, not of its input (exit 1).
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

/// Writes `text` to standard output and ends the command with `code`. A reader that went
/// away (`| head`) ends the process quietly with the same code, as Unix tools do; any other
/// write failure (a full disk, `> /dev/full`) is a one-line error and exit 1. `println!`
/// panics on both.
pub(crate) fn emit(text: &str, code: u8) -> Result<u8, Exit> {
    emit_with(code, |out| out.write_all(text.as_bytes()))
}

/// [`emit`] for output written piece by piece by `write`, through a buffer.
pub(crate) fn emit_with(
    code: u8,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<u8, Exit> {
    use std::io::Write;
    let mut stdout = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    match write(&mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(code),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Exit {
            code,
            message: String::new(),
        }),
        Err(e) => Err(Exit::internal(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}

/// Writes one line to standard error, ignoring a failure: there is nowhere left to say it.
pub(crate) fn warn_line(message: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "llm-context: {}",
        message.replace('\n', " ")
    );
}

/// The `context_limit` object both commands print for a request that cannot fit.
pub(crate) fn limit_json(limit: &ContextLimitError) -> serde_json::Value {
    serde_json::json!({
        "error": "context_limit",
        "needed_tokens": limit.needed_tokens,
        "allowance": limit.allowance,
        "message": limit.to_string(),
    })
}

/// Logs to standard error, never standard output (which carries the commands' JSON):
/// warnings and errors by default, what `RUST_LOG` asks for when it is set (directives
/// it cannot read are skipped). Colours only on a terminal.
///
/// `serve` logs JSON lines (one object per event: timestamp, level, target, fields), which
/// log collectors read without a parser of their own; the other commands log text.
///
/// With `otlp`, the stack's spans are also exported there (feature `otel`), with a filter
/// of their own: `RUST_LOG` says what is logged, not what is traced.
fn install_logging(json: bool, otlp: Option<&str>) -> Result<Option<Telemetry>, Exit> {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, Layer, Registry};
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::WARN.into())
        .from_env_lossy();
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    #[cfg(feature = "serve")]
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = if json {
        Box::new(fmt.json())
    } else {
        Box::new(fmt.with_ansi(std::io::stderr().is_terminal()))
    };
    #[cfg(not(feature = "serve"))]
    let fmt: Box<dyn Layer<Registry> + Send + Sync> = {
        let _ = json;
        Box::new(fmt.with_ansi(std::io::stderr().is_terminal()))
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    #[cfg(feature = "otel")]
    let (telemetry, export) = match otlp {
        Some(endpoint) => {
            let (telemetry, layer) = otel::Telemetry::start(endpoint).map_err(Exit::bad_input)?;
            (Some(telemetry), Some(layer))
        }
        None => (None, None),
    };
    #[cfg(not(feature = "otel"))]
    let (telemetry, export) = match otlp {
        Some(_) => {
            return Err(Exit::bad_input(
                "an OTLP endpoint (--otlp-endpoint, otlp_endpoint) needs the `otel` feature, which this llm-context was built without",
            ));
        }
        None => (None, None::<tracing_subscriber::layer::Identity>),
    };
    // Fails only when a subscriber is already set, which this binary never does.
    let _ = registry.with(export).try_init();
    Ok(telemetry)
}

/// The exporter of `--otlp-endpoint`, flushed when the command ends.
#[cfg(feature = "otel")]
type Telemetry = otel::Telemetry;
#[cfg(not(feature = "otel"))]
type Telemetry = std::convert::Infallible;

/// The collector the command's spans go to, if any.
fn otlp_endpoint(command: &Command) -> Result<Option<String>, Exit> {
    match command {
        #[cfg(any(feature = "openai", feature = "anthropic"))]
        Command::Send(args) => Ok(args.otlp_endpoint.clone()),
        #[cfg(feature = "serve")]
        Command::Serve(args) => serve::otlp_endpoint(args),
        _ => Ok(None),
    }
}

pub(crate) fn run() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "serve")]
    let json = matches!(cli.command, Command::Serve(_));
    #[cfg(not(feature = "serve"))]
    let json = false;
    let telemetry =
        match otlp_endpoint(&cli.command).and_then(|otlp| install_logging(json, otlp.as_deref())) {
            Ok(t) => t,
            Err(exit) => {
                warn_line(&exit.message);
                return ExitCode::from(exit.code);
            }
        };
    // The server runs requests on every core (one preparing a long transcript does not
    // hold up the others); every other command is one call at a time.
    #[cfg(feature = "serve")]
    let mut builder = if json {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    #[cfg(not(feature = "serve"))]
    let mut builder = tokio::runtime::Builder::new_current_thread();
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            warn_line(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Prepare(args) => prepare::run(args).await,
            #[cfg(any(feature = "openai", feature = "anthropic"))]
            Command::Send(args) => send::run(args).await,
            #[cfg(feature = "simulate")]
            Command::Simulate(args) => simulate::run(args).await,
            #[cfg(feature = "serve")]
            Command::Serve(args) => serve::run(args).await,
            #[cfg(all(feature = "serve", feature = "sqlite"))]
            Command::Ledger(args) => ledger::run(&args),
        }
    });
    // Out of the runtime: the exporter's last batch is sent from its own thread.
    drop(runtime);
    #[cfg(feature = "otel")]
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    #[cfg(not(feature = "otel"))]
    let _ = telemetry;
    match result {
        Ok(code) => ExitCode::from(code),
        Err(exit) => {
            if !exit.message.is_empty() {
                // One line: scripts read it.
                warn_line(&exit.message);
            }
            ExitCode::from(exit.code)
        }
    }
}
