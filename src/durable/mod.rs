//! Durable backends for context records and memory: SQLite (embedded, the default) and
//! Redis (shared by replicas).
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use llm_context::durable::{ContextRecord, ContextStore, SqliteStore};
//! use llm_context::{Message, Scope};
//!
//! let dir = tempfile::tempdir()?;
//! let store = SqliteStore::open(dir.path().join("agent.db"))?;
//! let scope = Scope::org("acme");
//!
//! let mut record = ContextRecord::new();
//! record.messages.push(Message::user("hello"));
//! record.version = store.save(&scope, "root", &record).await?;
//!
//! // Another process (or a restart) finds the last committed version.
//! let again = SqliteStore::open(dir.path().join("agent.db"))?;
//! assert_eq!(again.load(&scope, "root").await?.unwrap().version, 1);
//! # Ok(()) }
//! # #[cfg(not(feature = "sqlite"))] fn main() {}
//! ```
//!
//! Both implement [`ContextStore`] (compare-and-set on the version) and [`MemoryStore`]
//! (TTL, prefix listing), and pass the same contract tests as the in-memory backends of
//! [`llm_context_layers::durable`], whose items are re-exported here.
//!
//! | backend | feature | what it is for |
//! |---|---|---|
//! | [`SqliteStore`] | `sqlite` (default) | one process, durable across crashes: WAL, every write one atomic transaction |
//! | [`RedisStore`] | `redis` (default) | many replicas sharing state: compare-and-set and listing are Lua scripts, listing reads a per-tenant sorted-set index (never `SCAN`) |

pub use llm_context_layers::durable::*;

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "redis")]
pub use self::redis::{DEFAULT_REDIS_NAMESPACE, RedisStore};
#[cfg(feature = "sqlite")]
pub use self::sqlite::{SqliteOptions, SqliteStore, Synchronous};
