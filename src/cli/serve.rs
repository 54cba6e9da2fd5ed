//! `llm-context serve`: the whole stack behind the Chat Completions and Messages wire formats.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use llm_context::ConfigError;
use llm_context::Scope;
use llm_context::anthropic::AnthropicBuilder;
use llm_context::budget::{Budget, BudgetLayer};
use llm_context::catalog::Provider;
use llm_context::openai::OpenAiBuilder;
use llm_context::serve::{Proxy, ProxyBuilder, check_listen, parse_digest, tenant_label};
use serde::Deserialize;

use super::{Exit, input};

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The server's TOML config: `listen`, `policy`, `[[keys]]` (client keys by SHA-256
    /// digest → tenants, each with an optional policy) and `[routes]` (model-name prefix
    /// → provider). The flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The address to listen on (default 127.0.0.1:8080). Without a key table only
    /// loopback is allowed.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The default policy every request is prepared under, JSON or TOML, with
    /// ContextPolicy fields.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Memo and artifacts on this Redis (`redis://[:password@]host:port/[db]`), shared by
    /// every replica on it. Redis away degrades (no shared memo), never fails a request.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Keep the ledger (what every request cost, and would have cost passed through;
    /// `GET /ui`) on disk as well as in memory: `sqlite:PATH`. Overrides the config's
    /// `ledger`. A path that cannot be opened stops the server at start.
    #[arg(long, value_name = "sqlite:PATH")]
    ledger: Option<String>,
    /// Export every request's spans over OTLP/HTTP (protobuf) to this collector, e.g.
    /// `http://127.0.0.1:4318` (`/v1/traces` is added to a URL without a path); overrides
    /// the config's `otlp_endpoint`. Needs the `otel` feature.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
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
    #[command(flatten)]
    limits: Limits,
}

/// The connection and body limits: flags, else the config's `[limits]`, else the
/// library's defaults (`llm_context::serve::DEFAULT_*`).
#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    /// How long a connection may take to send a request's headers, counted from when it
    /// opens or its last response ended (so also the keep-alive idle timeout)
    /// [default: 30].
    #[arg(long, value_name = "SECONDS")]
    header_timeout: Option<f64>,
    /// The connections served at once, lowered at start to leave a quarter of the
    /// open-file limit free [default: 4096].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// The largest request body, in bytes; a longer one is 413 [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    max_body_bytes: Option<usize>,
    /// What the requests in flight hold, together (their bodies and parsed forms, to
    /// their answers' end); past it a request is 503 [default: 268435456].
    #[arg(long, value_name = "BYTES")]
    max_inflight_body_bytes: Option<usize>,
    /// How long a body may take before the minimum rate applies [default: 10].
    #[arg(long, value_name = "SECONDS")]
    body_timeout: Option<f64>,
    /// The slowest a body may arrive after the body timeout, in bytes per second; a
    /// slower one is 408 [default: 65536].
    #[arg(long, value_name = "BYTES")]
    min_body_rate: Option<u64>,
}

impl Limits {
    /// These limits on `builder`, each flag over the config's.
    fn apply(&self, config: &Limits, mut builder: ProxyBuilder) -> Result<ProxyBuilder, Exit> {
        let seconds = |flag: &str, v: f64| {
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    Exit::bad_input(format!("{flag} must be a positive number of seconds"))
                })
        };
        let positive = |flag: &str, v: usize| {
            if v == 0 {
                Err(Exit::bad_input(format!("{flag} must be at least 1")))
            } else {
                Ok(v)
            }
        };
        if let Some(v) = self.header_timeout.or(config.header_timeout) {
            builder = builder.header_timeout(seconds("header_timeout", v)?);
        }
        if let Some(v) = self.max_connections.or(config.max_connections) {
            builder = builder.max_connections(positive("max_connections", v)?);
        }
        if let Some(v) = self.max_body_bytes.or(config.max_body_bytes) {
            builder = builder.max_body_bytes(positive("max_body_bytes", v)?);
        }
        if let Some(v) = self
            .max_inflight_body_bytes
            .or(config.max_inflight_body_bytes)
        {
            builder = builder.max_inflight_body_bytes(positive("max_inflight_body_bytes", v)?);
        }
        let timeout = self.body_timeout.or(config.body_timeout);
        let rate = self.min_body_rate.or(config.min_body_rate);
        if timeout.is_some() || rate.is_some() {
            let timeout = match timeout {
                Some(v) => seconds("body_timeout", v)?,
                None => llm_context::serve::DEFAULT_BODY_TIMEOUT,
            };
            let rate = match rate {
                Some(v) => {
                    positive("min_body_rate", usize::try_from(v).unwrap_or(usize::MAX))? as u64
                }
                None => llm_context::serve::DEFAULT_MIN_BODY_RATE,
            };
            builder = builder.min_body_rate(timeout, rate);
        }
        Ok(builder)
    }
}

/// The config file of `--config` (described in the proxy guide, `llm_context::guide::proxy`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    listen: Option<SocketAddr>,
    policy: Option<PathBuf>,
    redis: Option<String>,
    /// `sqlite:PATH` (relative to the config's folder): the ledger on disk.
    ledger: Option<String>,
    otlp_endpoint: Option<String>,
    #[serde(default)]
    keys: Vec<Key>,
    #[serde(default)]
    routes: BTreeMap<String, Provider>,
    /// Per tenant, by its label ("org", or "org:domain").
    #[serde(default)]
    budgets: BTreeMap<String, Budget>,
    #[serde(default)]
    limits: Limits,
    /// The SHA-256 (hex) of the key `GET /metrics` asks for.
    metrics_key_sha256: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Key {
    sha256: String,
    org: String,
    domain: Option<String>,
    policy: Option<PathBuf>,
    /// The largest body this tenant may send, in place of the server's.
    max_body_bytes: Option<usize>,
}

/// The ledger of `--ledger` (else the config's `ledger`), opened: one that cannot be stops
/// the server here, at start.
#[cfg(feature = "sqlite")]
fn ledger(builder: ProxyBuilder, args: &ServeArgs, config: &Config) -> Result<ProxyBuilder, Exit> {
    let (spec, folder) = match (&args.ledger, &config.ledger) {
        (Some(spec), _) => (spec, Path::new(".")),
        (None, Some(spec)) => (
            spec,
            args.config
                .as_deref()
                .and_then(Path::parent)
                .unwrap_or(Path::new(".")),
        ),
        (None, None) => return Ok(builder),
    };
    Ok(builder.ledger(super::ledger::open(spec, folder)?))
}

/// Without SQLite a ledger is in memory only: asking for a file is an error.
#[cfg(not(feature = "sqlite"))]
fn ledger(builder: ProxyBuilder, args: &ServeArgs, config: &Config) -> Result<ProxyBuilder, Exit> {
    match args.ledger.as_ref().or(config.ledger.as_ref()) {
        Some(_) => Err(Exit::bad_input(
            "--ledger needs the sqlite feature, which this build lacks",
        )),
        None => Ok(builder),
    }
}

/// The config at `path`, its relative paths resolved against its folder.
fn config(path: &Path) -> Result<Config, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::bad_input(format!("cannot read {}: {e}", path.display())))?;
    let mut config: Config =
        toml::from_str(&text).map_err(|e| Exit::bad_input(format!("{}: {e}", path.display())))?;
    for (label, budget) in &config.budgets {
        budget
            .validate()
            .map_err(|e| Exit::bad_input(format!("{}: budgets.{label:?}: {e}", path.display())))?;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &mut Option<PathBuf>| {
        if let Some(p) = p.as_mut()
            && p.is_relative()
        {
            *p = dir.join(&*p);
        }
    };
    resolve(&mut config.policy);
    for key in &mut config.keys {
        resolve(&mut key.policy);
    }
    Ok(config)
}

/// Where the server's spans are exported: the flag, else the config's `otlp_endpoint`.
/// Read before the server starts, because the exporter is part of the process's
/// subscriber.
pub(crate) fn otlp_endpoint(args: &ServeArgs) -> Result<Option<String>, Exit> {
    if args.otlp_endpoint.is_some() {
        return Ok(args.otlp_endpoint.clone());
    }
    match &args.config {
        Some(path) => Ok(config(path)?.otlp_endpoint),
        None => Ok(None),
    }
}

pub(crate) async fn run(args: ServeArgs) -> Result<u8, Exit> {
    let config = match &args.config {
        Some(path) => config(path)?,
        None => Config::default(),
    };
    let listen = args
        .listen
        .or(config.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
    if config.keys.is_empty() {
        check_listen(listen).map_err(Exit::bad_input)?;
    }
    let policy = input::policy(args.policy.as_deref().or(config.policy.as_deref()))?;
    if args.max_concurrency == 0 {
        return Err(Exit::bad_input("--max-concurrency must be at least 1"));
    }
    let mut builder = Proxy::builder()
        .policy(policy)
        .max_concurrency(args.max_concurrency)
        .upstream_timeout(Duration::from_secs(args.upstream_timeout));
    builder = args.limits.apply(&config.limits, builder)?;
    if let Some(hex) = &config.metrics_key_sha256 {
        let digest =
            parse_digest(hex).map_err(|e| Exit::bad_input(format!("metrics_key_sha256: {e}")))?;
        builder = builder.metrics_key(digest);
    }
    let mut budgets = BudgetLayer::new(&Budget::default());
    let mut budgeted = std::collections::BTreeSet::new();
    for key in &config.keys {
        let digest = parse_digest(&key.sha256).map_err(Exit::bad_input)?;
        let mut scope = Scope::org(&key.org);
        if let Some(domain) = &key.domain {
            scope = scope.with_domain(domain);
        }
        let label = tenant_label(&scope);
        if let Some(budget) = config.budgets.get(&label) {
            budgets = budgets.for_tenant(&scope, budget);
            budgeted.insert(label);
        }
        let policy = match &key.policy {
            Some(path) => Some(input::policy(Some(path))?),
            None => None,
        };
        builder = builder.tenant(digest, scope, policy);
        if let Some(limit) = key.max_body_bytes {
            if limit == 0 {
                return Err(Exit::bad_input("keys.max_body_bytes must be at least 1"));
            }
            builder = builder.tenant_max_body_bytes(digest, limit);
        }
    }
    // A budget for a tenant the key table does not have would never apply: say so.
    if let Some(label) = config.budgets.keys().find(|l| !budgeted.contains(*l)) {
        return Err(Exit::bad_input(format!(
            "budgets.{label:?} names no tenant of the key table (a budget is keyed by the tenant's \
             label, as /metrics shows it: \"org\" or \"org:domain\", with `%`, `:` and a \
             leading `-` of each written %25, %3A and %2D)"
        )));
    }
    if !budgeted.is_empty() {
        builder = builder.budgets(budgets);
    }
    if let Some(url) = args.redis.as_deref().or(config.redis.as_deref()) {
        // Only a URL that is not valid or refused credentials fail (exit 2); a server
        // that cannot be reached starts the stores degraded, with a warning.
        let stores = llm_context::redis::RedisStores::connect(url)
            .await
            .map_err(|e| Exit::bad_input(format!("--redis: {e}")))?;
        builder = builder.redis(stores);
    }
    builder = ledger(builder, &args, &config)?;
    for (prefix, provider) in config.routes {
        builder = builder.route(prefix, provider);
    }
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
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Exit::bad_input(format!("cannot listen on {listen}: {e}")))?;
    tracing::warn!(
        event = "serve_listening",
        addr = %listen,
        "llm-context serve: listening on http://{}",
        listen
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
