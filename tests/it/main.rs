//! The integration tests of `llm-context`, in one binary (one link, not thirty): each
//! module is one area, built when the features it needs are on.

mod support;

#[macro_use]
mod artifact_contract;
#[macro_use]
mod contract;

mod agent_example;
#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(feature = "anthropic")]
mod anthropic_stream;
#[cfg(feature = "cli")]
mod cli;
#[cfg(all(feature = "cli", feature = "openai", feature = "redis"))]
mod cli_redis;
#[cfg(all(feature = "cli", feature = "openai", feature = "anthropic"))]
mod cli_send;
#[cfg(all(feature = "cli", feature = "openai", feature = "anthropic"))]
mod cli_send_stream;
#[cfg(all(feature = "cli", feature = "simulate"))]
mod cli_simulate;
#[cfg(all(feature = "serve", feature = "anthropic"))]
mod delegated_compaction;
mod durable_memory;
mod durable_redis;
mod durable_sqlite;
#[cfg(feature = "serve")]
mod enforcing_upstream;
#[cfg(all(feature = "openai", feature = "anthropic"))]
mod hardening_clients;
#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "openai")]
mod openai_responses;
#[cfg(feature = "openai")]
mod openai_stream;
#[cfg(all(feature = "otel", feature = "serve"))]
mod otlp;
mod prefix;
mod redis_artifacts;
#[cfg(feature = "redis")]
mod redis_budget;
#[cfg(all(feature = "redis", feature = "openai"))]
mod redis_flight;
mod redis_memo;
mod redis_outage;
mod redis_start;
#[cfg(feature = "openai")]
mod retry;
#[cfg(feature = "serve")]
mod serve;
#[cfg(feature = "serve")]
mod serve_artifacts;
#[cfg(feature = "serve")]
mod serve_bad_input;
#[cfg(all(feature = "cli", feature = "serve"))]
mod serve_cli;
#[cfg(feature = "serve")]
mod serve_compressed;
mod serve_count;
#[cfg(feature = "serve")]
mod serve_faithful;
#[cfg(feature = "serve")]
mod serve_ledger;
#[cfg(all(feature = "serve", feature = "sqlite", feature = "cli"))]
mod serve_ledger_file;
#[cfg(feature = "serve")]
mod serve_limits;
#[cfg(feature = "serve")]
mod serve_messages;
#[cfg(feature = "serve")]
mod serve_parts;
#[cfg(feature = "serve")]
mod serve_passthrough;
#[cfg(feature = "serve")]
mod serve_redis;
mod serve_relay;
#[cfg(feature = "serve")]
mod serve_responses;
#[cfg(feature = "serve")]
mod serve_reuse;
mod snapshot_order;
#[cfg(all(feature = "serve", feature = "anthropic"))]
mod thinking_library;
#[cfg(feature = "serve")]
mod thinking_loop;
#[cfg(feature = "serve")]
mod trace_tree;
mod usage;
mod wire_rules;
