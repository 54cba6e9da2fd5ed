//! A multi-turn agent with tools, offline: a deterministic model behind the whole
//! context stack, printing what the stack did on every call. Its context is a durable
//! record, checkpointed after every turn and folded into a summary when it grows; with
//! `--store sqlite:PATH` (or `--store redis://HOST:PORT/`) the record and every artifact
//! its summary names live in that store, and a second run resumes where the first
//! stopped (killed or not), with all the folded history still readable.
//!
//! ```text
//! cargo run --example agent
//! cargo run --example agent -- --turns 12 --max-tokens 6000
//! cargo run --example agent -- --store sqlite:agent.db --turns 4   # turns 0-3
//! cargo run --example agent -- --store sqlite:agent.db --turns 8   # resumes at turn 4
//! cargo run --release --example agent -- --turns 2000 --max-rounds 8
//! ```

mod run;

use std::sync::Arc;

use llm_context::artifact::{ArtifactLimits, LocalArtifactStore};
use llm_context::durable::LocalContextStore;
use run::{Settings, Stores};

/// The artifacts kept per session when they live in memory: enough for the folded
/// history of a long run, as the durable stores keep.
const ARTIFACTS_PER_SESSION: usize = 1_024;

fn args() -> Result<(Settings, Option<String>), String> {
    let mut settings = Settings::default();
    let mut store = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if !matches!(
            flag.as_str(),
            "--turns" | "--max-tokens" | "--max-rounds" | "--store"
        ) {
            return Err(format!(
                "unknown flag {flag} (try --turns N, --max-tokens N, --max-rounds N, \
                 --store sqlite:PATH or --store redis://HOST:PORT/)"
            ));
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || -> Result<usize, String> {
            value
                .parse()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--turns" => settings.turns = number()?,
            "--max-tokens" => settings.max_tokens = number()?,
            "--max-rounds" => settings.max_rounds = number()?.max(1),
            _ => store = Some(value.clone()), // --store, the one flag left
        }
    }
    Ok((settings, store))
}

/// The stores named by `--store`, or both in memory.
async fn open_stores(spec: Option<&str>) -> Result<Stores, String> {
    let Some(spec) = spec else {
        let limits = ArtifactLimits::default().with_per_session(ARTIFACTS_PER_SESSION);
        return Ok(Stores {
            contexts: Arc::new(LocalContextStore::new()),
            artifacts: Arc::new(LocalArtifactStore::new(limits)),
        });
    };
    #[cfg(feature = "sqlite")]
    if let Some(path) = spec.strip_prefix("sqlite:").filter(|p| !p.is_empty()) {
        // One file for the records and the artifacts they name.
        let store = Arc::new(
            llm_context::sqlite::SqliteStore::open(path).map_err(|e| format!("--store: {e}"))?,
        );
        return Ok(Stores {
            contexts: store.clone(),
            artifacts: store,
        });
    }
    #[cfg(feature = "redis")]
    if spec.starts_with("redis://") || spec.starts_with("rediss://") {
        use llm_context::redis::{RedisDurableStore, RedisOptions, RedisStores};
        // Artifacts expire a while after their session's last use; a durable record
        // names them for longer, so keep them for a month and as many as on disk.
        let options = RedisOptions::default()
            .with_artifact_ttl(std::time::Duration::from_secs(30 * 24 * 3600))
            .with_max_artifacts_per_session(ARTIFACTS_PER_SESSION);
        let contexts = RedisDurableStore::connect_with(spec, options.clone())
            .await
            .map_err(|e| format!("--store: {e}"))?;
        let shared = RedisStores::connect_with(spec, options)
            .await
            .map_err(|e| format!("--store: {e}"))?;
        return Ok(Stores {
            contexts: Arc::new(contexts),
            artifacts: Arc::new(shared.artifacts),
        });
    }
    Err(format!(
        "--store {spec}: expected sqlite:PATH (feature `sqlite`) or redis://HOST:PORT/ \
         (feature `redis`)"
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (settings, store) = args().map_err(|e| format!("agent: {e}"))?;
    let stores = open_stores(store.as_deref())
        .await
        .map_err(|e| format!("agent: {e}"))?;
    let stats = run::run(&settings, &stores, &mut |line| println!("{line}")).await?;
    println!(
        "{} turns from turn {} ({} ended by --max-rounds), {} model calls; at most {} \
         messages and a {}-token summary naming {} artifacts",
        stats.turns,
        stats.first_turn,
        stats.capped_turns,
        stats.model_calls,
        stats.most_messages,
        stats.largest_summary_tokens,
        stats.most_summary_artifacts
    );
    Ok(())
}
