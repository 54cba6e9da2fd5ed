//! **llm-context** decides, on every LLM call an agent makes, what the model gets to see.
//!
//! ```
//! use llm_context::mock::MockModel;
//! use llm_context::{ChatRequest, ContextPolicy, Message, ServiceBuilderExt};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
//! let model = ServiceBuilder::new()
//!     .context_policy(ContextPolicy::default().with_max_context_tokens(16_000))?
//!     .service(MockModel::echo());
//! let reply = model.oneshot(ChatRequest::new("mock", vec![Message::user("hello")])).await?;
//! assert_eq!(reply.report.removed_messages, 0);
//! # Ok(()) }
//! ```
//!
//! It is a stack of tower layers around any `Service<ChatRequest>`: prune whole old turns
//! to fit `max_tokens - reserve_tokens`, clear old tool results, offload large ones into
//! retrievable artifacts, keep a cache-stable prefix, memoize per tenant, and fail with a
//! typed [`ContextLimitError`] *before* dispatch when the request cannot fit.
//!
//! Everything pure lives in [`llm_context_layers`], re-exported here, so one dependency
//! is enough. This crate adds what touches the outside world: provider clients
//! ([`openai::OpenAi`] and [`anthropic::Anthropic`], features `openai` and `anthropic`,
//! both on by default) with typed [`error`]s and a [`retry`] policy, durable stores for
//! the context records and memory of [`durable`] (`sqlite`, the embedded default, and
//! `redis`), Redis stores shared by many replicas (`redis`), the wire formats ([`wire`]:
//! Chat Completions and Messages, both directions), catalog files ([`load_catalog`],
//! [`load_policy`]) and the `llm-context` command-line tool.
//!
//! The [`guide`] explains each part, with examples.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use llm_context_layers::*;

#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod attempt;
mod catalog_file;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod client;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod error;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod redact;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod retry;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod sse;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod transport;

#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub mod serve;
// The Chat Completions body mapping is what the command-line tool reads and writes, so
// `wire` is there for the `cli` feature too.
#[cfg(any(feature = "openai", feature = "anthropic", feature = "cli"))]
pub mod wire;

#[cfg(feature = "anthropic")]
pub use anthropic::Anthropic;
pub use catalog_file::{load_catalog, load_policy};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use client::ConfigError;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use error::{ProviderError, ProviderErrorKind};
#[cfg(feature = "openai")]
pub use openai::OpenAi;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use retry::RetryPolicy;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "simulate")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulate")))]
pub mod simulate;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

/// Guides: how each part works, with examples (doctested).
pub mod guide {
    #![doc = include_str!("docs/guide.md")]

    pub mod artifacts {
        #![doc = include_str!("docs/artifacts.md")]
    }
    pub mod memo {
        #![doc = include_str!("docs/memo.md")]
    }
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub mod replicas {
        #![doc = include_str!("docs/replicas.md")]
    }
    pub mod counting {
        #![doc = include_str!("docs/counting.md")]
    }
    pub mod caching {
        #![doc = include_str!("docs/caching.md")]
    }
    #[cfg(all(feature = "cli", feature = "simulate"))]
    #[cfg_attr(docsrs, doc(cfg(all(feature = "cli", feature = "simulate"))))]
    pub mod choosing_a_policy {
        #![doc = include_str!("docs/choosing_a_policy.md")]
    }
    pub mod streaming {
        #![doc = include_str!("docs/streaming.md")]
    }
    #[cfg(all(feature = "openai", feature = "anthropic"))]
    #[cfg_attr(docsrs, doc(cfg(all(feature = "openai", feature = "anthropic"))))]
    pub mod providers {
        #![doc = include_str!("docs/providers.md")]
    }
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub mod durable {
        #![doc = include_str!("docs/durable.md")]
    }
    pub mod budgets {
        #![doc = include_str!("docs/budgets.md")]
    }
    pub mod tracing {
        #![doc = include_str!("docs/tracing.md")]
    }
    #[cfg(feature = "cli")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
    pub mod cli {
        #![doc = include_str!("docs/cli.md")]
    }
    #[cfg(feature = "serve")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
    pub mod proxy {
        #![doc = include_str!("docs/proxy.md")]
    }
    pub mod reliability {
        #![doc = include_str!("docs/reliability.md")]
    }
    pub mod layout {
        #![doc = include_str!("docs/layout.md")]
    }
}

// The README's examples are compiled as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
