//! `llm-context serve`: the whole stack behind the Chat Completions and Messages wire formats.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use llm_context::ConfigError;
use llm_context::anthropic::AnthropicBuilder;
use llm_context::openai::OpenAiBuilder;
use llm_context::serve::{Proxy, check_listen};

use super::{Exit, input};

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The address to listen on. Without a key table (not built yet) only loopback is
    /// allowed.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The policy every request is prepared under, JSON or TOML, with ContextPolicy
    /// fields.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// On SIGTERM (or Ctrl-C), how long the requests in flight, streams included, may
    /// run on before they are cut off; no new connection is accepted meanwhile.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    drain_timeout: u64,
    /// The requests served at once, streams until their end; one more is answered 503
    /// with `retry-after: 1`.
    #[arg(long, value_name = "N", default_value_t = llm_context::serve::DEFAULT_MAX_CONCURRENCY)]
    max_concurrency: usize,
    /// How long one upstream attempt may take to answer (a stream: to its headers);
    /// past it the answer is 504.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    upstream_timeout: u64,
}

pub(crate) async fn run(args: ServeArgs) -> Result<u8, Exit> {
    check_listen(args.listen).map_err(Exit::bad_input)?;
    let policy = input::policy(args.policy.as_deref())?;
    if args.max_concurrency == 0 {
        return Err(Exit::bad_input("--max-concurrency must be at least 1"));
    }
    let mut builder = Proxy::builder()
        .policy(policy)
        .max_concurrency(args.max_concurrency)
        .upstream_timeout(Duration::from_secs(args.upstream_timeout));
    // Upstream keys come from the server's environment, never from the client.
    let openai = optional(OpenAiBuilder::from_env().build())?;
    let anthropic = optional(AnthropicBuilder::from_env().build())?;
    if openai.is_none() && anthropic.is_none() {
        return Err(Exit::bad_input(
            "set OPENAI_API_KEY (or OPENAI_BASE_URL) or ANTHROPIC_API_KEY: there is no upstream",
        ));
    }
    if let Some(client) = openai {
        builder = builder.openai(client);
    }
    if let Some(client) = anthropic {
        builder = builder.anthropic(client);
    }
    let proxy = builder
        .build()
        .map_err(|e| Exit::bad_input(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Exit::bad_input(format!("cannot listen on {}: {e}", args.listen)))?;
    tracing::warn!(
        event = "serve_listening",
        addr = %args.listen,
        "llm-context serve: listening on http://{}",
        args.listen
    );
    let drain = Duration::from_secs(args.drain_timeout);
    proxy
        .serve_until(listener, terminated(), drain)
        .await
        .map_err(|e| Exit::internal(format!("the server stopped: {e}")))?;
    Ok(0)
}

/// SIGTERM or Ctrl-C, whichever comes first.
async fn terminated() {
    let ctrl_c = std::pin::pin!(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                let term = std::pin::pin!(async move {
                    term.recv().await;
                });
                futures_util::future::select(ctrl_c, term).await;
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

/// A client, or none when its key is not set; any other configuration error is bad
/// input.
fn optional<C>(built: Result<C, ConfigError>) -> Result<Option<C>, Exit> {
    match built {
        Ok(client) => Ok(Some(client)),
        Err(ConfigError::MissingApiKey { .. }) => Ok(None),
        Err(e) => Err(Exit::bad_input(e.to_string())),
    }
}
