//! Summary compaction: old history folded into a structured summary written by the inner
//! model, instead of being dropped.
//!
//! ```
//! use llm_context_layers::mock::{MockModel, MockReply};
//! use llm_context_layers::summarize::{SummarizeConfig, SummarizeLayer, is_summary_request};
//! use llm_context_layers::{ChatRequest, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::BoxError> {
//! // The inner model writes the summaries too.
//! let model = MockModel::from_fn(|req| {
//!     if is_summary_request(req) {
//!         MockReply::text(r#"{"goals":["fix checkout"],"decisions":["roll back 4f2a9c1"],
//!                             "open":[],"facts":[],"narrative":"Found and rolled back the bad deploy."}"#)
//!     } else {
//!         MockReply::text("ok")
//!     }
//! });
//! let config = SummarizeConfig::new(1_500).with_keep_last(2); // folds from 1,050 tokens
//! let stack = ServiceBuilder::new()
//!     .layer(SummarizeLayer::new(config)?)
//!     .service(model.clone());
//!
//! let mut transcript = vec![Message::system("You are an SRE agent.")];
//! for turn in 0..6 {
//!     transcript.push(Message::user(format!("turn {turn}: {}", "what failed? ".repeat(60))));
//!     transcript.push(Message::assistant(format!("checked /var/log/app.log, turn {turn}")));
//! }
//! transcript.push(Message::user("and now?"));
//! let reply = stack.oneshot(ChatRequest::new("mock", transcript)).await?;
//!
//! let sent = model.last_request().unwrap();
//! assert_eq!(sent.messages[1].name(), Some("context_summary")); // right after the prefix
//! assert_eq!(sent.messages.len(), 5);   // system, summary, the newest turns verbatim
//! assert_eq!(reply.report.folded_messages, 10);
//! assert!(sent.messages[1].text().contains("/var/log/app.log")); // kept without the model
//! # Ok(()) }
//! ```
//!
//! A fold happens when the request's estimate reaches `compact_at × window` (0.7 by
//! default), or when asked ([`Summarize::compact`], and
//! [`Compactor`](crate::durable::Compactor) for durable records). It runs in three
//! steps, plan → summarize → apply:
//!
//! - **Plan.** The fold starts after the leading system messages and ends right before a
//!   real user request, never between a tool call and any of its results and never past
//!   a call that was not answered ([`fold_points`]); the newest `keep_last` messages (12)
//!   stay verbatim, rounded up to whole turns.
//! - **Summarize.** The inner model gets the previous summary and the folded messages,
//!   each clipped, and must answer JSON `{goals, decisions, open, facts, narrative}`
//!   ([`parse_summary`]); it is asked again, at most twice, when the answer is not valid.
//! - **Apply.** The [`SummaryBlock`] goes right after the prefix, as a system message
//!   named `context_summary` whose first line says what it is. A valid but empty summary
//!   folds nothing. When the summarizer fails, a bounded plain-text excerpt is folded
//!   instead and added after any earlier one.
//!
//! What a summary would lose is kept anyway: identifiers of the folded span (paths,
//! URLs, ids, numbers with units) are extracted without the model into `facts`
//! ([`extract_identifiers`]), and the span itself is stored as an artifact, listed in the
//! block, that `read_context_artifact` pages through.
//!
//! The block stays bounded however many folds it holds. It names the newest
//! `max_artifacts` spans (8) itself; past that, the oldest go into a
//! [`SummaryArchive`] artifact that lists them and names the archive before it, so
//! every fold stays reachable. The whole block must fit `max_summary_share` of the
//! window (0.25): a summarizer answer over it is asked again, the oldest facts and
//! fallback lines go next, and a block still over it is not applied (a warning,
//! `summary_too_large`, or [`CompactError::SummaryTooLarge`](crate::durable::CompactError)),
//! so a fold never leaves the turns it keeps without room.
//!
//! Summaries are cached by a stable hash of the span they fold ([`SummaryCache`]). An
//! agent loop that resends its whole transcript every turn gets the same block, byte for
//! byte, on every later turn, and pays for a new summary only when the folded request
//! crosses the threshold again.
//!
//! # Who folds
//!
//! [`SummarizeConfig::executor`] chooses per request, as the context policy does
//! ([`executor::choose`](crate::executor::choose)). A delegated request (by default: a
//! model that binds thinking, with thinking in play, where a local fold would rewrite
//! history before a signed thinking block) is not folded: it carries the provider's
//! compaction edit instead, triggered at [`SummarizeConfig::threshold`], with
//! [`SummarizeConfig::compaction_instructions`] (see
//! [`executor::compaction`](crate::executor::compaction)). An `Off` request passes as
//! it came. The explicit [`Summarize::compact`] always folds locally.
//!
//! # Where it goes in the stack
//!
//! Outside [`ContextPolicyLayer`](crate::ContextPolicyLayer): fold first, then let the
//! policy prune, clear and offload what is left (the summary is a leading system
//! message, which pruning never removes). Share the policy layer's artifact store
//! ([`SummarizeLayer::with_artifact_store`]) so its `read_context_artifact` handling
//! finds the folded spans. The summarizer requests then go through the policy too.

mod bound;
mod cache;
mod config;
mod facts;
mod fold;
mod layer;
mod plan;
mod prompt;
mod run;
mod service;

pub use crate::model::{SUMMARY_MARKER, SUMMARY_NAME, SummaryBlock, is_summary_message};
pub use bound::SummaryArchive;
pub use cache::{DEFAULT_SUMMARY_CACHE, SummaryCache};
pub use config::SummarizeConfig;
pub use facts::extract_identifiers;
pub use layer::SummarizeLayer;
pub use plan::{fold_points, fold_start, plan_fold};
pub use prompt::{SUMMARIZER_INSTRUCTIONS, SUMMARIZER_NAME, is_summary_request, parse_summary};
pub use run::{MAX_SUMMARY_ATTEMPTS, Summarized};
pub use service::Summarize;

pub(crate) use bound::{archive_overflow, fit_block, model_budget};
pub(crate) use prompt::summary_request;
pub(crate) use run::{ask, fold_block};
pub(crate) use service::store_span;
