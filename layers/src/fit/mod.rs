//! The shared fitting pass behind [`prune`](crate::prune), [`clear`](crate::clear) and
//! [`ContextPolicyLayer`](crate::ContextPolicyLayer).
//!
//! Pruning and clearing decide together: whether a turn must go depends on how much
//! clearing (and offloading) will save, and the order of the two is a policy choice. So
//! they are stages of one planner, and each layer runs the stages it owns:
//!
//! | layer | stages | fails with `ContextLimitError` |
//! |---|---|---|
//! | `PruneLayer` | drop old turns, then old rounds of kept turns | yes |
//! | `ClearLayer` | clear old tool results | no |
//! | `ContextPolicyLayer` | all, in the policy's order, sized as offloading will send | yes |
//!
//! The plan is computed in one linear pass with a running total; nothing outside the
//! layer depends on positions.

mod clear;
mod cut;
mod fitting;
mod plan;
mod prune;
mod turns;

pub use crate::future::ResponseFuture;
pub use clear::{Clear, ClearLayer};
pub use cut::{Cut, CutStore, LocalCutStore};
pub(crate) use fitting::{Fit, FitConfig, budget, prepare};
pub(crate) use plan::{Scratch, Stages};
pub use prune::{Prune, PruneLayer};
pub(crate) use turns::Layout;
